//! Queues as rows (queue configuration extension, first part): implicit and explicit creation,
//! pause and resume, listing and statistics.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{TestApp, job};

#[tokio::test]
async fn the_first_enqueue_creates_the_queue_once() {
    let app = TestApp::spawn().await;
    app.get("/ojs/v1/queues/mail")
        .await
        .expect_error(404, "not_found");
    app.push(job("a.b", "mail")).await;
    app.push(job("a.b", "mail")).await;
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [job("a.b", "mail"), job("a.b", "bulk"), job("a.b", "bulk")]}),
    )
    .await
    .expect(201);
    let queue = app.get("/ojs/v1/queues/mail").await.expect(200).json;
    assert_eq!(queue["name"], "mail");
    assert_eq!(queue["state"], "active");
    assert_eq!(queue["status"], "active");
    assert_eq!(queue["paused"], false);
    assert_eq!(queue["stats"]["available"], 3);
    assert_eq!(queue["stats"]["depth"], 3);
    let created: Vec<serde_json::Value> = sqlx::query_scalar(
        "select data from ojs_event_log where type = 'queue.created' order by xid, seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(
        created,
        [
            json!({"queue": "mail", "implicit": true}),
            json!({"queue": "bulk", "implicit": true})
        ]
    );
}

#[tokio::test]
async fn a_paused_queue_accepts_jobs_but_fetch_skips_it_until_resumed() {
    let app = TestApp::spawn().await;
    let running = app.push_id(job("a.b", "pq")).await;
    app.fetch_one("pq", "w1").await;

    let paused = app
        .post("/ojs/v1/queues/pq/pause", json!({}))
        .await
        .expect(200);
    assert_eq!(
        paused.json["queue"],
        json!({"name": "pq", "paused": true, "state": "paused"})
    );
    assert_eq!(paused.json["paused"], true);
    let paused_at = paused.json["paused_at"].as_str().unwrap().to_owned();
    // Idempotent: the same state, the same pause time, one event.
    let again = app
        .post("/ojs/v1/queues/pq/pause", json!({}))
        .await
        .expect(200);
    assert_eq!(again.json["paused_at"], paused_at.as_str());

    let waiting = app.push_id(job("a.b", "pq")).await;
    assert!(app.fetch(json!({"queues": ["pq"]})).await.is_empty());
    // Other queues of the same FETCH are still served.
    app.push(job("a.b", "other")).await;
    let jobs = app.fetch(json!({"queues": ["pq", "other"]})).await;
    assert_eq!(jobs[0]["queue"], "other");
    // The job that was running finishes normally.
    app.ack(json!({"job_id": running, "worker_id": "w1"}))
        .await
        .expect(200);
    let shown = app.get("/ojs/v1/queues/pq").await.expect(200).json;
    assert_eq!(shown["state"], "paused");
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["capabilities"]["pause_resume"], true);
    assert_eq!(shown["paused_at"], paused_at.as_str());

    // A long poll on the paused queue is answered as soon as it resumes.
    let poll = app.spawn_fetch(&json!({"queues": ["pq"], "wait_ms": 10000}));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let resumed = app
        .post("/ojs/v1/queues/pq/resume", json!({}))
        .await
        .expect(200);
    assert_eq!(
        resumed.json["queue"],
        json!({"name": "pq", "paused": false, "state": "active"})
    );
    assert!(resumed.json["resumed_at"].is_string());
    let body = poll.await.unwrap();
    assert_eq!(body["jobs"][0]["id"], waiting.as_str());
    assert!(started.elapsed() < Duration::from_secs(5));

    let events: Vec<String> = sqlx::query_scalar(
        "select type from ojs_event_log where type like 'queue.%' and subject = 'pq' order by xid, seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(events, ["queue.created", "queue.paused", "queue.resumed"]);
}

#[tokio::test]
async fn pause_and_resume_create_an_unknown_queue_and_check_the_name() {
    let app = TestApp::spawn().await;
    app.post("/ojs/v1/admin/queues/fresh/pause", json!({}))
        .await
        .expect(200);
    assert_eq!(
        app.get("/ojs/v1/queues/fresh").await.expect(200).json["state"],
        "paused"
    );
    app.post("/ojs/v1/queues/later/resume", json!({}))
        .await
        .expect(200);
    assert_eq!(
        app.get("/ojs/v1/queues/later").await.expect(200).json["state"],
        "active"
    );
    for bad in ["Bad%20Name", "_default", "-x"] {
        app.post(&format!("/ojs/v1/queues/{bad}/pause"), json!({}))
            .await
            .expect_error(400, "invalid_request");
    }
}

#[tokio::test]
async fn queues_are_listed_by_name_with_counts_filters_and_pages() {
    let app = TestApp::spawn().await;
    for queue in ["c", "a", "b"] {
        app.push(job("a.b", queue)).await;
    }
    app.push(job("a.b", "a")).await;
    app.post("/ojs/v1/queues/b/pause", json!({}))
        .await
        .expect(200);
    let all = app.get("/ojs/v1/queues").await.expect(200).json;
    let names: Vec<&str> = all["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(all["queues"][0]["counts"]["available"], 2);
    // The OJS Kubernetes operator's shape: ready-to-run and running jobs at the top.
    assert_eq!(all["queues"][0]["pending"], 2);
    assert_eq!(all["queues"][0]["active"], 0);
    app.fetch_one("a", "w").await;
    let after = app.get("/ojs/v1/queues").await.expect(200).json;
    assert_eq!(after["queues"][0]["pending"], 1);
    assert_eq!(after["queues"][0]["active"], 1);
    assert_eq!(all["pagination"]["total"], 3);
    let paused = app
        .get("/ojs/v1/queues?state=paused")
        .await
        .expect(200)
        .json;
    assert_eq!(paused["queues"].as_array().unwrap().len(), 1);
    assert_eq!(paused["queues"][0]["name"], "b");
    assert_eq!(paused["queues"][0]["paused"], true);
    let page = app
        .get("/ojs/v1/queues?limit=1&offset=1")
        .await
        .expect(200)
        .json;
    assert_eq!(page["queues"][0]["name"], "b");
    assert_eq!(page["pagination"]["has_more"], true);
    app.get("/ojs/v1/queues?state=gone")
        .await
        .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn explicit_creation_refuses_duplicates_and_bad_names() {
    let app = TestApp::spawn().await;
    let created = app
        .post("/ojs/v1/queues", json!({"name": "payments"}))
        .await
        .expect(201);
    assert_eq!(created.header("location"), Some("/ojs/v1/queues/payments"));
    assert_eq!(created.json["name"], "payments");
    assert_eq!(created.json["state"], "active");
    app.post("/ojs/v1/queues", json!({"name": "payments"}))
        .await
        .expect_error(409, "conflict");
    app.push(job("a.b", "implicit")).await;
    app.post("/ojs/v1/queues", json!({"name": "implicit"}))
        .await
        .expect_error(409, "conflict");
    for body in [
        json!({}),
        json!({"name": "Bad Name"}),
        json!({"name": "_default"}),
        json!({"name": 5}),
    ] {
        app.post("/ojs/v1/queues", body)
            .await
            .expect_error(400, "invalid_request");
    }
    // An invalid configuration creates nothing.
    app.post(
        "/ojs/v1/queues",
        json!({"name": "cfg", "config": {"max_size": 0}}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.get("/ojs/v1/queues/cfg")
        .await
        .expect_error(404, "not_found");
    let event: serde_json::Value = sqlx::query_scalar(
        "select data from ojs_event_log where type = 'queue.created' and subject = 'payments'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(event, json!({"queue": "payments", "implicit": false}));
}

#[tokio::test]
async fn queue_stats_count_every_state_and_the_last_hour() {
    let app = TestApp::spawn().await;
    let done = app.push_id(job("a.b", "st")).await;
    app.fetch_one("st", "w").await;
    app.ack(json!({"job_id": done, "worker_id": "w"}))
        .await
        .expect(200);
    let mut once = job("a.b", "st");
    once["retry"] = json!({"max_attempts": 1});
    let dead = app.push_id(once).await;
    app.fetch_one("st", "w").await;
    app.nack(json!({"job_id": dead, "worker_id": "w", "error": {"code": "x", "message": "no"}}))
        .await
        .expect(200);
    app.push(job("a.b", "st")).await;
    let mut later = job("a.b", "st");
    later["scheduled_at"] = json!("+1h");
    app.push(later).await;
    app.push(job("a.b", "st")).await;
    app.fetch_one("st", "w").await;

    let body = app.get("/ojs/v1/queues/st/stats").await.expect(200).json;
    let s = &body["stats"];
    assert_eq!(s["available"], 1);
    assert_eq!(s["active"], 1);
    assert_eq!(s["scheduled"], 1);
    assert_eq!(s["depth"], 3);
    assert_eq!(s["completed"], 1);
    assert_eq!(s["discarded"], 1);
    assert_eq!(s["dead_letter"], 1);
    assert_eq!(s["completed_last_hour"], 1);
    assert_eq!(s["failed_last_hour"], 1);
    assert!(s["avg_duration_ms"].is_i64());
    assert_eq!(body["queue"]["depth"], 3);
    assert_eq!(body["queue"]["max_size"], serde_json::Value::Null);
    assert_eq!(body["status"], "active");
    let shown = app.get("/ojs/v1/queues/st").await.expect(200).json;
    assert_eq!(shown["stats"]["completed_today"], 1);
    assert_eq!(shown["stats"]["failed_today"], 1);
    app.get("/ojs/v1/queues/none/stats")
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn the_reset_hook_forgets_queues() {
    let app = TestApp::spawn().await;
    app.post("/ojs/v1/queues/gone/pause", json!({}))
        .await
        .expect(200);
    app.post("/ojs/v1/admin/reset", json!({})).await.expect(200);
    app.get("/ojs/v1/queues/gone")
        .await
        .expect_error(404, "not_found");
    // A queue paused before the reset is not paused after it.
    app.push(job("a.b", "gone")).await;
    assert_eq!(app.fetch(json!({"queues": ["gone"]})).await.len(), 1);
}

#[tokio::test]
async fn a_dead_letter_retry_into_a_new_queue_creates_it() {
    let app = TestApp::spawn().await;
    let mut once = job("a.b", "src");
    once["retry"] = json!({"max_attempts": 1});
    let id = app.push_id(once).await;
    app.fetch_one("src", "w").await;
    app.nack(json!({"job_id": id, "worker_id": "w", "error": {"code": "x", "message": "no"}}))
        .await
        .expect(200);
    app.get("/ojs/v1/queues/elsewhere")
        .await
        .expect_error(404, "not_found");
    app.post(
        &format!("/ojs/v1/dead-letter/{id}/retry"),
        json!({"override": {"queue": "elsewhere"}}),
    )
    .await
    .expect(200);
    let queue = app.get("/ojs/v1/queues/elsewhere").await.expect(200).json;
    assert_eq!(queue["stats"]["available"], 1);
}

impl TestApp {
    async fn delete_queue(&self, name: &str, body: serde_json::Value) -> crate::support::Resp {
        self.send(
            reqwest::Method::DELETE,
            &format!("/ojs/v1/queues/{name}"),
            Some(body.to_string().into_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    }

    /// One expirer pass, which also removes drained queues.
    async fn expire(&self) {
        use ojsd::maintenance::Service;
        let expirer = ojsd::maintenance::Expirer::new(
            self.maintenance(),
            ojsd::maintenance::ExpirerConfig {
                interval: Duration::from_secs(1),
                batch_size: 100,
            },
        );
        expirer.run_once(None).await.unwrap();
    }
}

#[tokio::test]
async fn deleting_with_reject_only_removes_an_empty_queue() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "rej")).await;
    let refused = app
        .delete_queue("rej", json!({"strategy": "reject"}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(refused.json["error"]["details"]["non_terminal_count"], 1);
    app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    let deleted = app
        .delete_queue("rej", json!({"strategy": "reject"}))
        .await
        .expect(202);
    assert_eq!(
        deleted.json,
        json!({"queue": "rej", "strategy": "reject", "jobs_affected": 0, "state": "deleted"})
    );
    app.get("/ojs/v1/queues/rej")
        .await
        .expect_error(404, "not_found");
    // The name can be used again: a new queue.
    app.push(job("a.b", "rej")).await;
    app.get("/ojs/v1/queues/rej").await.expect(200);

    for (body, field) in [
        (json!({}), "$.strategy"),
        (json!({"strategy": "burn"}), "$.strategy"),
        (json!({"strategy": "move"}), "$.target_queue"),
        (
            json!({"strategy": "move", "target_queue": "rej"}),
            "$.target_queue",
        ),
    ] {
        let resp = app
            .delete_queue("rej", body)
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(resp.json["error"]["details"]["field"], field);
    }
    app.delete_queue("nowhere", json!({"strategy": "reject"}))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn deleting_with_discard_drains_active_jobs_then_removes_the_queue() {
    let app = TestApp::spawn().await;
    let running = app.push_id(job("a.b", "dq")).await;
    app.fetch_one("dq", "w").await;
    let waiting = app.push_id(job("a.b", "dq")).await;
    let mut later = job("a.b", "dq");
    later["scheduled_at"] = json!("+1h");
    let scheduled = app.push_id(later).await;

    let resp = app
        .send(
            reqwest::Method::DELETE,
            "/ojs/v1/queues/dq?strategy=discard",
            None,
            &[],
        )
        .await
        .expect(202);
    assert_eq!(resp.json["jobs_affected"], 2);
    assert_eq!(resp.json["state"], "draining");
    for id in [&waiting, &scheduled] {
        let j = app.job(id).await;
        assert_eq!(j["state"], "discarded");
        assert_eq!(j["error"]["code"], "queue_deleted");
        assert!(
            j.get("dead_lettered_at")
                .is_none_or(serde_json::Value::is_null)
        );
    }
    // Draining: listed as such, refuses new jobs and pausing, still serves its workers.
    assert_eq!(
        app.get("/ojs/v1/queues/dq").await.expect(200).json["state"],
        "draining"
    );
    app.post("/ojs/v1/jobs", job("a.b", "dq"))
        .await
        .expect_error(409, "conflict");
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [job("a.b", "ok"), job("a.b", "dq")]}),
    )
    .await
    .expect_error(409, "conflict");
    app.get("/ojs/v1/queues/ok")
        .await
        .expect_error(404, "not_found");
    app.post("/ojs/v1/queues/dq/pause", json!({}))
        .await
        .expect_error(409, "conflict");
    app.delete_queue("dq", json!({"strategy": "discard"}))
        .await
        .expect_error(409, "conflict");
    app.expire().await;
    assert_eq!(
        app.get("/ojs/v1/queues/dq").await.expect(200).json["state"],
        "draining",
        "an active job remains"
    );
    app.ack(json!({"job_id": running, "worker_id": "w"}))
        .await
        .expect(200);
    app.expire().await;
    app.get("/ojs/v1/queues/dq")
        .await
        .expect_error(404, "not_found");
    let data: serde_json::Value = sqlx::query_scalar(
        "select data from ojs_event_log where type = 'queue.deleted' and subject = 'dq'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(
        data,
        json!({"queue": "dq", "strategy": "discard", "jobs_affected": 2})
    );
    let reason: String = sqlx::query_scalar(
        "select data ->> 'reason' from ojs_event_log where type = 'job.discarded' and job_id = $1::uuid",
    )
    .bind(&waiting)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(reason, "queue_deleted");
}

#[tokio::test]
async fn deleting_with_move_sends_waiting_jobs_to_the_target() {
    let app = TestApp::spawn().await;
    let a = app.push_id(job("a.b", "old")).await;
    let b = app.push_id(job("a.b", "old")).await;
    app.push(job("a.b", "new")).await;
    let poll = app.spawn_fetch(&json!({"queues": ["fresh"], "wait_ms": 10000}));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = app
        .delete_queue("old", json!({"strategy": "move", "target_queue": "fresh"}))
        .await
        .expect(202);
    assert_eq!(
        resp.json,
        json!({"queue": "old", "strategy": "move", "target_queue": "fresh",
               "jobs_affected": 2, "state": "deleted"})
    );
    // The long poll on the target hears of the moved jobs.
    let body = poll.await.unwrap();
    assert_eq!(body["jobs"][0]["id"], a.as_str());
    assert_eq!(body["jobs"][0]["original_queue"], "old");
    let moved = app.job(&b).await;
    assert_eq!(moved["queue"], "fresh");
    assert_eq!(moved["original_queue"], "old");
    assert_eq!(moved["state"], "available");
    app.get("/ojs/v1/queues/old")
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        app.get("/ojs/v1/queues/fresh").await.expect(200).json["stats"]["available"],
        1
    );
}

#[tokio::test]
async fn with_strict_queues_only_existing_queues_take_jobs() {
    let app = TestApp::spawn_with(|c| c.jobs.strict_queues = true).await;
    let refused = app
        .post("/ojs/v1/jobs", job("a.b", "unknown"))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(refused.json["error"]["details"]["reason"], "unknown_queue");
    assert_eq!(refused.json["error"]["details"]["queue"], "unknown");
    app.get("/ojs/v1/queues/unknown")
        .await
        .expect_error(404, "not_found");

    app.post("/ojs/v1/queues", json!({"name": "known"}))
        .await
        .expect(201);
    app.push(job("a.b", "known")).await;
    // A batch naming one unknown queue is refused whole.
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [job("a.b", "known"), job("a.b", "unknown")]}),
    )
    .await
    .expect_error(400, "invalid_request");
    // Unique jobs follow the same rule.
    let mut unique = job("a.b", "unknown");
    unique["unique"] = json!({"keys": ["type"]});
    app.post("/ojs/v1/jobs", unique)
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(app.job_count().await, 1);
}
