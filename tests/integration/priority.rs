//! The [OJS priority extension]: the model and its validation, dispatch order under
//! concurrent fetchers, priority changes, queue consumption strategies, aging, statistics,
//! events and metrics.
//!
//! [OJS priority extension]: https://github.com/openjobspec/spec/blob/main/spec/ojs-priority.md

use std::collections::HashMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Resp, TestApp, assert_share, job, spawn_fetch};

fn with_priority(queue: &str, priority: &Value) -> Value {
    json!({"type": "p.work", "args": [], "queue": queue, "priority": priority})
}

impl TestApp {
    async fn patch(&self, path: &str, body: Value) -> Resp {
        self.send(
            Method::PATCH,
            path,
            Some(body.to_string().into_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    }

    async fn set_priority(&self, id: &str, priority: Value) -> Resp {
        self.patch(&format!("/ojs/v1/jobs/{id}"), json!({"priority": priority}))
            .await
    }
}

/// The (priority, enqueued_at) dispatch key of a job as returned by the API. `enqueued_at`
/// has millisecond precision on the wire, so ties are broken by the id (UUIDv7, time-ordered).
fn key(job: &Value) -> (i64, String, String) {
    (
        job["priority"].as_i64().unwrap(),
        job["enqueued_at"].as_str().unwrap().to_owned(),
        job["id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn priority_validation_edges_on_enqueue_and_on_change() {
    let app = TestApp::spawn().await;
    // Omitted → 2; the bounds are accepted; names are aliases.
    assert_eq!(app.push(job("p.work", "v")).await["priority"], 2);
    assert_eq!(app.push(with_priority("v", &json!(0))).await["priority"], 0);
    assert_eq!(
        app.push(with_priority("v", &json!(255))).await["priority"],
        255
    );
    assert_eq!(
        app.push(with_priority("v", &json!("critical"))).await["priority"],
        0
    );
    let target = app.push_id(job("p.work", "v")).await;

    let over = app
        .post("/ojs/v1/jobs", with_priority("v", &json!(256)))
        .await
        .expect_error(400, "invalid_request");
    assert!(
        over.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("255"),
        "{}",
        over.text
    );
    assert_eq!(over.json["error"]["details"]["max_priority"], 255);
    let negative = app
        .post("/ojs/v1/jobs", with_priority("v", &json!(-1)))
        .await
        .expect_error(400, "invalid_request");
    assert!(negative.text.contains(">= 0"), "{}", negative.text);
    for bad in [json!(1.5), json!("urgent"), json!(true), json!([1])] {
        app.post("/ojs/v1/jobs", with_priority("v", &bad))
            .await
            .expect_error(400, "invalid_request");
        app.set_priority(&target, bad)
            .await
            .expect_error(400, "invalid_request");
    }

    // The same rules on PATCH, and the job is untouched by a refused change.
    let over = app
        .set_priority(&target, json!(256))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(over.json["error"]["details"]["max_priority"], 255);
    app.set_priority(&target, json!(-1))
        .await
        .expect_error(400, "invalid_request");
    app.patch(&format!("/ojs/v1/jobs/{target}"), json!({}))
        .await
        .expect_error(400, "invalid_request");
    app.patch(&format!("/ojs/v1/jobs/{target}"), json!({"priority": null}))
        .await
        .expect_error(400, "invalid_request");
    app.send(
        Method::PATCH,
        &format!("/ojs/v1/jobs/{target}"),
        Some(b"{not json".to_vec()),
        &[("content-type", "application/json")],
    )
    .await
    .expect_error(400, "invalid_payload");
    assert_eq!(app.job(&target).await["priority"], 2);
    assert_eq!(
        app.set_priority(&target, json!(0)).await.expect(200).json["priority"],
        0
    );
    assert_eq!(
        app.set_priority(&target, json!(255)).await.expect(200).json["priority"],
        255
    );
}

#[tokio::test]
async fn a_larger_configured_maximum_is_accepted_and_reported() {
    let app = TestApp::spawn_with(|c| c.jobs.max_priority = 1000).await;
    assert_eq!(
        app.push(with_priority("m", &json!(1000))).await["priority"],
        1000
    );
    let over = app
        .post("/ojs/v1/jobs", with_priority("m", &json!(1001)))
        .await
        .expect_error(400, "invalid_request");
    assert!(over.text.contains("1000"), "{}", over.text);
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["priority"]["max"], 1000);
}

#[tokio::test]
async fn concurrent_fetchers_dispatch_by_priority_then_time_available() {
    let app = TestApp::spawn().await;
    // 200 jobs over 10 priorities, enqueued one after another in a shuffled priority order.
    let mut enqueued = Vec::new();
    for i in 0..200u64 {
        let priority = (i * 7 + i / 13) % 10;
        enqueued.push(app.push(with_priority("order", &json!(priority))).await);
    }
    let mut expected: Vec<(i64, String, String)> = enqueued.iter().map(key).collect();
    expected.sort();

    // Rounds of 4 concurrent fetchers taking 5 jobs each: every round takes exactly the 20
    // most urgent jobs left, and every response is itself in dispatch order.
    let mut dispatched = 0;
    while dispatched < expected.len() {
        let fetches: Vec<_> = (0..4)
            .map(|w| {
                app.spawn_fetch(
                    &json!({"queues": ["order"], "count": 5, "worker_id": format!("w{w}")}),
                )
            })
            .collect();
        let mut round: Vec<(i64, String, String)> = Vec::new();
        for fetch in fetches {
            let body = fetch.await.unwrap();
            let keys: Vec<_> = body["jobs"].as_array().unwrap().iter().map(key).collect();
            let mut sorted = keys.clone();
            sorted.sort();
            assert_eq!(keys, sorted, "a response is in dispatch order");
            round.extend(keys);
        }
        round.sort();
        let end = (dispatched + 20).min(expected.len());
        assert_eq!(round, expected[dispatched..end], "round at {dispatched}");
        dispatched = end;
    }
}

#[tokio::test]
async fn a_job_that_becomes_available_later_takes_its_place_by_that_time() {
    let app = TestApp::spawn().await;
    let early = app.push_id(with_priority("later", &json!(1))).await;
    let low = app.push_id(with_priority("later", &json!(2))).await;
    // Due in 300 ms; promoted by the FETCH below (the test server runs no promoter).
    let mut delayed = with_priority("later", &json!(1));
    delayed["scheduled_at"] = json!("+300ms");
    let delayed = app.push_id(delayed).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let late = app.push_id(with_priority("later", &json!(1))).await;
    let ids: Vec<String> = app
        .fetch(json!({"queues": ["later"], "count": 10}))
        .await
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [early, delayed, late, low]);
}

#[tokio::test]
async fn changing_the_priority_of_a_waiting_job_reorders_the_next_fetch() {
    let app = TestApp::spawn().await;
    let first = app.push_id(job("p.work", "chg")).await;
    let second = app.push_id(job("p.work", "chg")).await;
    let resp = app.set_priority(&second, json!(0)).await.expect(200);
    assert_eq!(resp.json["id"], second.as_str());
    assert_eq!(resp.json["priority"], 0);
    assert_eq!(resp.json["previous_priority"], 2);
    assert_eq!(resp.json["job"]["priority"], 0);
    assert_eq!(resp.json["job"]["state"], "available");
    assert_eq!(app.fetch_one("chg", "w").await["id"], second.as_str());
    assert_eq!(app.fetch_one("chg", "w").await["id"], first.as_str());

    // The event, with the old and new values.
    let data: Value = sqlx::query_scalar(
        "select data from ojs_event_log where type = 'priority.changed' and job_id = $1::uuid",
    )
    .bind(&second)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(data["job_id"], second.as_str());
    assert_eq!(data["previous_priority"], 2);
    assert_eq!(data["new_priority"], 0);

    // The same value again changes nothing and records nothing.
    let third = app.push_id(job("p.work", "chg")).await;
    let same = app.set_priority(&third, json!(2)).await.expect(200);
    assert_eq!(same.json["previous_priority"], 2);
    assert!(
        !app.job_event_types(&third)
            .await
            .contains(&"priority.changed".to_owned())
    );
    let metrics = app.get("/metrics").await.expect(200).text;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ojs_job_priority_changes_total{queue=\"chg\"} 1")),
        "{metrics}"
    );
}

#[tokio::test]
async fn priority_changes_only_where_it_can_still_matter() {
    let app = TestApp::spawn().await;
    // scheduled: allowed, and the job keeps its schedule.
    let mut later = job("p.work", "st");
    later["scheduled_at"] = json!("+1h");
    let scheduled = app.push_id(later).await;
    let resp = app.set_priority(&scheduled, json!(7)).await.expect(200);
    assert_eq!(resp.json["job"]["state"], "scheduled");
    assert_eq!(resp.json["previous_priority"], 2);

    // pending, active, completed, retryable, discarded, cancelled: 409, priority unchanged.
    let mut held = job("p.work", "st");
    held["pending"] = json!(true);
    let pending = app.push_id(held).await;
    let active = app.push_id(job("p.work", "act")).await;
    app.fetch_one("act", "w1").await;
    let completed = app.push_id(job("p.work", "done")).await;
    app.fetch_one("done", "w1").await;
    app.ack(json!({"job_id": completed, "worker_id": "w1"}))
        .await
        .expect(200);
    let mut retry = job("p.work", "rt");
    retry["retry"] = json!({"max_attempts": 3});
    let retryable = app.push_id(retry).await;
    let mut once = job("p.work", "dis");
    once["retry"] = json!({"max_attempts": 1});
    let discarded = app.push_id(once).await;
    for (queue, id) in [("rt", &retryable), ("dis", &discarded)] {
        app.fetch_one(queue, "w1").await;
        app.nack(json!({"job_id": id, "worker_id": "w1",
                   "error": {"code": "boom", "message": "failed"}}))
            .await
            .expect(200);
    }
    let cancelled = app.push_id(job("p.work", "st")).await;
    app.delete(&format!("/ojs/v1/jobs/{cancelled}"))
        .await
        .expect(200);

    for (id, state) in [
        (&pending, "pending"),
        (&active, "active"),
        (&completed, "completed"),
        (&retryable, "retryable"),
        (&discarded, "discarded"),
        (&cancelled, "cancelled"),
    ] {
        let resp = app
            .set_priority(id, json!(0))
            .await
            .expect_error(409, "conflict");
        assert_eq!(resp.json["error"]["details"]["current_state"], state);
        let job = app.job(id).await;
        assert_eq!(job["state"], state);
        assert_eq!(job["priority"], 2, "{state}");
    }
    app.set_priority("019539a4-b68c-7def-8000-1a2b3c4d5e6f", json!(0))
        .await
        .expect_error(404, "not_found");
    app.set_priority("not-a-job-id", json!(0))
        .await
        .expect_error(404, "not_found");
}

/// Dispatches `total` jobs to `workers` concurrent HTTP workers fetching one job at a time
/// with `body`, acknowledging each, and counts them per queue.
async fn dispatch_shares(
    app: &TestApp,
    body: Value,
    workers: usize,
    total: usize,
) -> HashMap<String, usize> {
    let remaining = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(total));
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (client, base, remaining) =
                (app.client.clone(), app.base.clone(), remaining.clone());
            let mut body = body.clone();
            body["worker_id"] = json!(format!("share-{w}"));
            tokio::spawn(async move {
                let mut seen: Vec<String> = Vec::new();
                while remaining
                    .fetch_update(
                        std::sync::atomic::Ordering::SeqCst,
                        std::sync::atomic::Ordering::SeqCst,
                        |n| n.checked_sub(1),
                    )
                    .is_ok()
                {
                    let resp = spawn_fetch(&client, &base, &body).await.unwrap();
                    let job = &resp["jobs"][0];
                    seen.push(job["queue"].as_str().expect("saturated queues").to_owned());
                    client
                        .post(format!("{base}/ojs/v1/workers/ack"))
                        .json(&json!({"job_id": job["id"], "worker_id": body["worker_id"]}))
                        .send()
                        .await
                        .unwrap();
                }
                seen
            })
        })
        .collect();
    let mut shares = HashMap::new();
    for task in tasks {
        for queue in task.await.unwrap() {
            *shares.entry(queue).or_insert(0) += 1;
        }
    }
    shares
}

async fn fill(app: &TestApp, queues: &[&str], per_queue: usize) {
    for queue in queues {
        let jobs: Vec<Value> = (0..per_queue).map(|_| job("p.work", queue)).collect();
        app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
            .await
            .expect(201);
    }
}

#[track_caller]
#[tokio::test]
async fn weighted_fetches_follow_the_weights_under_saturation() {
    let app = TestApp::spawn().await;
    fill(&app, &["heavy", "mid", "light"], 1000).await;
    let body = json!({"queues": ["heavy", "mid", "light"], "strategy": "weighted",
                      "weights": {"heavy": 5, "mid": 3, "light": 1}});
    let shares = dispatch_shares(&app, body, 6, 900).await;
    assert_share(&shares, "heavy", 900, 5.0 / 9.0, 0.05);
    assert_share(&shares, "mid", 900, 3.0 / 9.0, 0.05);
    assert_share(&shares, "light", 900, 1.0 / 9.0, 0.05);

    // A weight-1 queue next to a weight-50 one is served, not starved, in every stretch.
    let app = TestApp::spawn().await;
    fill(&app, &["bulk", "trickle"], 600).await;
    let mut since_trickle = 0;
    let mut trickle = 0;
    for _ in 0..300 {
        let jobs = app
            .fetch(
                json!({"queues": ["bulk", "trickle"], "strategy": "weighted",
                          "weights": {"bulk": 50, "trickle": 1}}),
            )
            .await;
        if jobs[0]["queue"] == "trickle" {
            trickle += 1;
            since_trickle = 0;
        } else {
            since_trickle += 1;
            assert!(
                since_trickle <= 51,
                "trickle waited {since_trickle} dispatches"
            );
        }
    }
    assert!((5..=7).contains(&trickle), "{trickle} of 300");
}

#[tokio::test]
async fn a_weighted_batch_fetch_spreads_its_slots_and_fills_from_others_when_one_runs_dry() {
    let app = TestApp::spawn().await;
    fill(&app, &["a"], 100).await;
    fill(&app, &["b"], 3).await;
    let jobs = app
        .fetch(
            json!({"queues": ["a", "b"], "count": 20, "strategy": "weighted",
                      "weights": {"a": 1, "b": 1}}),
        )
        .await;
    assert_eq!(jobs.len(), 20);
    let from_b = jobs.iter().filter(|j| j["queue"] == "b").count();
    assert_eq!(from_b, 3, "b gives what it has, a the rest");
    // Weight 0: never served.
    let jobs = app
        .fetch(
            json!({"queues": ["a", "b"], "count": 5, "strategy": "weighted",
                      "weights": {"a": 0}}),
        )
        .await;
    assert!(jobs.is_empty(), "{jobs:?}");
}

#[tokio::test]
async fn round_robin_takes_the_queues_in_turn() {
    let app = TestApp::spawn().await;
    fill(&app, &["r1", "r2", "r3"], 400).await;
    let body = json!({"queues": ["r1", "r2", "r3"], "strategy": "round-robin"});
    let shares = dispatch_shares(&app, body, 4, 600).await;
    for queue in ["r1", "r2", "r3"] {
        assert_share(&shares, queue, 600, 1.0 / 3.0, 0.02);
    }
}

#[tokio::test]
async fn server_side_strategy_and_weights_win_over_the_request() {
    let app = TestApp::spawn_with(|c| {
        c.dispatch.fetch_strategy = Some(ojsd::broker::Strategy::Weighted);
        c.dispatch.queue_weights = Some(ojsd::broker::parse_weights_setting("x=1,y=1").unwrap());
    })
    .await;
    fill(&app, &["x", "y"], 50).await;
    // The worker asks for strict with all weight on x; the server spreads evenly.
    let jobs = app
        .fetch(
            json!({"queues": ["x", "y"], "count": 10, "strategy": "strict",
                      "weights": {"x": 10, "y": 0}}),
        )
        .await;
    let from_y = jobs.iter().filter(|j| j["queue"] == "y").count();
    assert_eq!(from_y, 5, "{jobs:?}");
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["priority"]["default_strategy"], "weighted");
    assert_eq!(manifest["priority"]["strategy_enforced"], true);
}

#[tokio::test]
async fn strategy_and_weights_are_validated() {
    let app = TestApp::spawn().await;
    for body in [
        json!({"queues": ["a"], "strategy": "random"}),
        json!({"queues": ["a"], "strategy": 3}),
        json!({"queues": ["a"], "strategy": "weighted", "weights": [1]}),
        json!({"queues": ["a"], "strategy": "weighted", "weights": {"a": -1}}),
        json!({"queues": ["a"], "strategy": "weighted", "weights": {"a": 1.5}}),
        json!({"queues": ["a"], "strategy": "weighted", "weights": {"a": "x"}}),
        json!({"queues": ["a"], "strategy": "weighted", "weights": {"Bad Name": 1}}),
    ] {
        app.post("/ojs/v1/workers/fetch", body.clone())
            .await
            .expect_error(400, "invalid_request");
    }
    // least-loaded is a strategy like the others (fair scheduling).
    app.post(
        "/ojs/v1/workers/fetch",
        json!({"queues": ["a"], "strategy": "least-loaded"}),
    )
    .await
    .expect(200);
    // Without a pool to supply them, the queues are required.
    for body in [json!({}), json!({"worker_id": "w1"}), json!({"queues": []})] {
        app.post("/ojs/v1/workers/fetch", body)
            .await
            .expect_error(400, "invalid_request");
    }
}

#[tokio::test]
async fn with_aging_an_old_job_overtakes_newer_urgent_ones_at_the_configured_rate() {
    let app = TestApp::spawn_with(|c| {
        c.jobs.priority_aging_interval = Some(std::time::Duration::from_secs(1));
    })
    .await;
    // Waited 6 s at priority 4: effective priority -2, ahead of a new priority 0.
    let old = app.push_id(with_priority("age", &json!(4))).await;
    // Waited 3.5 s at priority 4: effective 0.5, behind a new 0 but ahead of a new 1.
    let middle = app.push_id(with_priority("age", &json!(4))).await;
    app.sql(&format!(
        "update ojs_job set enqueued_at = now() - interval '6 s' where id = '{old}';
         update ojs_job set enqueued_at = now() - interval '3.5 s' where id = '{middle}';"
    ))
    .await;
    let urgent = app.push_id(with_priority("age", &json!(0))).await;
    let high = app.push_id(with_priority("age", &json!(1))).await;
    let jobs = app.fetch(json!({"queues": ["age"], "count": 10})).await;
    let ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            old.as_str(),
            urgent.as_str(),
            middle.as_str(),
            high.as_str()
        ]
    );
    // Ordering only: the stored priority is what every response shows.
    assert_eq!(jobs[0]["priority"], 4);
    assert_eq!(app.job(&old).await["priority"], 4);
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["priority"]["aging"], true);
    assert_eq!(manifest["priority"]["aging_interval_ms"], 1000);
}

#[tokio::test]
async fn without_aging_waiting_never_beats_priority() {
    let app = TestApp::spawn().await;
    let old = app.push_id(with_priority("noage", &json!(4))).await;
    app.sql(&format!(
        "update ojs_job set enqueued_at = now() - interval '1 day' where id = '{old}'"
    ))
    .await;
    let urgent = app.push_id(with_priority("noage", &json!(3))).await;
    let jobs = app.fetch(json!({"queues": ["noage"], "count": 2})).await;
    assert_eq!(jobs[0]["id"], urgent.as_str());
    assert_eq!(jobs[1]["id"], old.as_str());
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["priority"]["aging"], false);
}

#[tokio::test]
async fn priority_stats_count_available_jobs_per_priority() {
    let app = TestApp::spawn().await;
    for p in [0, 2, 2, 10, 10, 10] {
        app.push(with_priority("stats", &json!(p))).await;
    }
    let mut later = with_priority("stats", &json!(1));
    later["scheduled_at"] = json!("+1h");
    app.push(later).await;
    let resp = app
        .get("/ojs/v1/queues/stats/priority-stats")
        .await
        .expect(200);
    // Numeric order (10 after 2), only non-empty buckets, scheduled jobs not counted.
    assert_eq!(
        resp.text,
        r#"{"queue":"stats","counts_by_priority":{"0":1,"2":2,"10":3},"distribution":[{"priority":0,"count":1},{"priority":2,"count":2},{"priority":10,"count":3}],"total":6}"#
    );
    app.fetch_one("stats", "w").await;
    let resp = app
        .get("/ojs/v1/queues/stats/priority-stats")
        .await
        .expect(200);
    assert_eq!(resp.json["counts_by_priority"]["0"], Value::Null);
    assert_eq!(resp.json["total"], 5);

    app.get("/ojs/v1/queues/nobody/priority-stats")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/queues/Bad%20Name/priority-stats")
        .await
        .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn priority_metrics_are_exposed() {
    let app = TestApp::spawn().await;
    app.push(with_priority("met", &json!(3))).await;
    app.push(with_priority("met", &json!(3))).await;
    app.push(with_priority("met", &json!(1))).await;
    app.fetch_one("met", "w").await;
    let metrics = app.get("/metrics").await.expect(200).text;
    for line in [
        r#"ojs_queue_available_by_priority{queue="met",priority="3"} 2"#,
        r#"ojs_job_wait_duration_by_priority_seconds_count{queue="met",priority="1"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line}:\n{metrics}"
        );
    }
}

#[tokio::test]
async fn a_worker_registered_with_a_strategy_fetches_by_it_unless_the_fetch_says_otherwise() {
    let app = TestApp::spawn().await;
    fill(&app, &["reg-a", "reg-b"], 50).await;
    app.register(
        json!({"worker_id": "weighted-worker", "strategy": "weighted",
               "weights": {"reg-a": 1, "reg-b": 1}}),
    )
    .await
    .expect(201);
    let spread = app
        .fetch(json!({"queues": ["reg-a", "reg-b"], "count": 10, "worker_id": "weighted-worker"}))
        .await;
    assert_eq!(spread.iter().filter(|j| j["queue"] == "reg-b").count(), 5);
    // The request's own strategy wins over the registration.
    let strict = app
        .fetch(
            json!({"queues": ["reg-a", "reg-b"], "count": 10, "worker_id": "weighted-worker",
                      "strategy": "strict"}),
        )
        .await;
    assert!(strict.iter().all(|j| j["queue"] == "reg-a"), "{strict:?}");
    // Registering again with other defaults applies at once.
    app.register(json!({"worker_id": "weighted-worker", "strategy": "strict"}))
        .await
        .expect(200);
    let again = app
        .fetch(json!({"queues": ["reg-a", "reg-b"], "count": 10, "worker_id": "weighted-worker"}))
        .await;
    assert!(again.iter().all(|j| j["queue"] == "reg-a"), "{again:?}");
    // Invalid registration weights are refused like a FETCH's.
    app.register(json!({"worker_id": "w2", "weights": {"reg-a": -1}}))
        .await
        .expect_error(400, "invalid_request");
}
