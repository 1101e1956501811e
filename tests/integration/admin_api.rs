//! The admin API: statistics, queues, jobs, bulk actions and the admin dead-letter routes.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Resp, TestApp, ids, job};

/// DELETE with a JSON body.
async fn delete_with(app: &TestApp, path: &str, body: Value) -> Resp {
    app.send(
        Method::DELETE,
        path,
        Some(body.to_string().into_bytes()),
        &[("content-type", "application/json")],
    )
    .await
}

/// Fetches one job of `queue` and acknowledges it; returns its id.
async fn complete_one(app: &TestApp, queue: &str) -> String {
    let id = app.fetch_one(queue, "w").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.ack(json!({"job_id": id})).await.expect(200);
    id
}

/// Fetches one job of `queue` and fails it with `code` (`DISCARD` discards it without
/// dead-lettering; a one-attempt job with another code is dead-lettered); returns its id.
async fn fail_one(app: &TestApp, queue: &str, code: &str) -> String {
    let id = app.fetch_one(queue, "w").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.nack(json!({"job_id": id, "error": {"message": "boom", "code": code}}))
        .await
        .expect(200);
    id
}

/// A one-attempt job on `queue`, so that its first failure discards it.
fn fragile(job_type: &str, queue: &str) -> Value {
    json!({"type": job_type, "args": [], "queue": queue, "retry": {"max_attempts": 1}})
}

#[tokio::test]
async fn stats_count_queues_workers_jobs_and_recent_throughput() {
    let app = TestApp::spawn().await;
    let empty = app.get("/ojs/v1/admin/stats").await.expect(200).json;
    assert_eq!(empty["queues"], 0);
    assert_eq!(empty["workers"], 0);
    assert_eq!(
        empty["jobs"],
        json!({"available": 0, "active": 0, "scheduled": 0, "pending": 0, "retryable": 0,
               "completed": 0, "discarded": 0, "cancelled": 0})
    );
    assert_eq!(
        empty["throughput"],
        json!({"processed_per_minute": 0.0, "failed_per_minute": 0.0})
    );
    assert!(empty["uptime_seconds"].is_u64());

    app.register(json!({"worker_id": "w-1", "queues": ["a"]}))
        .await;
    for _ in 0..3 {
        app.push(job("a.b", "a")).await;
    }
    app.push(fragile("a.b", "b")).await;
    app.push(json!({"type": "a.b", "args": [], "queue": "b", "scheduled_at": "+PT1H"}))
        .await;
    complete_one(&app, "a").await;
    fail_one(&app, "b", "handler_error").await;
    app.fetch_one("a", "w").await;

    let stats = app.get("/ojs/v1/admin/stats").await.expect(200).json;
    assert_eq!(stats["queues"], 2);
    assert_eq!(
        stats["workers"], 2,
        "the registered worker and the fetching one"
    );
    assert_eq!(
        stats["jobs"],
        json!({"available": 1, "active": 1, "scheduled": 1, "pending": 0, "retryable": 0,
               "completed": 1, "discarded": 1, "cancelled": 0})
    );
    // One completion and one discard within the last five minutes.
    assert_eq!(
        stats["throughput"],
        json!({"processed_per_minute": 0.2, "failed_per_minute": 0.2})
    );

    // Finished longer ago than the window: no longer throughput.
    app.sql("update ojs_job set completed_at = completed_at - interval '6 minutes', discarded_at = discarded_at - interval '6 minutes' where state = 'discarded';
             update ojs_job_done set completed_at = completed_at - interval '6 minutes'")
        .await;
    let later = app.get("/ojs/v1/admin/stats").await.expect(200).json;
    assert_eq!(later["throughput"]["processed_per_minute"], 0.0);
    assert_eq!(later["jobs"]["completed"], 1);
    // A worker silent for longer than the heartbeat timeout is not counted.
    app.sql("update ojs_worker set last_heartbeat_at = now() - interval '1 hour' where id = 'w-1'")
        .await;
    assert_eq!(
        app.get("/ojs/v1/admin/stats").await.expect(200).json["workers"],
        1
    );
}

#[tokio::test]
async fn queues_are_listed_with_counts_throughput_and_latency() {
    let app = TestApp::spawn().await;
    for _ in 0..4 {
        app.push(job("a.b", "alpha")).await;
    }
    app.push(fragile("a.b", "beta")).await;
    app.push(job("a.b", "beta")).await;
    let done: Vec<String> = vec![
        complete_one(&app, "alpha").await,
        complete_one(&app, "alpha").await,
        complete_one(&app, "alpha").await,
    ];
    fail_one(&app, "beta", "handler_error").await;
    // Execution times of 100, 200 and 300 ms.
    for (i, id) in done.iter().enumerate() {
        app.sql(&format!(
            "update ojs_job_done set started_at = completed_at - interval '{} milliseconds' where id = '{id}'",
            (i + 1) * 100
        ))
        .await;
    }
    app.post("/ojs/v1/queues/gamma/pause", json!({}))
        .await
        .expect(200);

    let list = app.get("/ojs/v1/admin/queues").await.expect(200).json;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    let alpha = &list["items"][0];
    assert_eq!(alpha["state"], "active");
    assert_eq!(alpha["paused"], false);
    assert_eq!(
        alpha["counts"],
        json!({"available": 1, "active": 0, "scheduled": 0, "pending": 0, "retryable": 0,
               "completed": 3, "discarded": 0, "cancelled": 0})
    );
    assert_eq!(
        alpha["throughput"],
        json!({"processed_per_minute": 0.6, "failed_per_minute": 0.0})
    );
    assert_eq!(
        alpha["latency_ms"],
        json!({"p50": 200, "p95": 290, "p99": 298})
    );
    assert!(alpha["created_at"].is_string());
    let beta = &list["items"][1];
    assert_eq!(beta["throughput"]["failed_per_minute"], 0.2);
    assert_eq!(beta["latency_ms"], json!({}), "nothing completed");
    let gamma = &list["items"][2];
    assert_eq!(
        (&gamma["state"], &gamma["paused"]),
        (&json!("paused"), &json!(true))
    );
    assert_eq!(list["pagination"]["total"], 3);
    assert_eq!(list["pagination"]["per_page"], 20);

    let page = app
        .get("/ojs/v1/admin/queues?per_page=2&page=2")
        .await
        .expect(200)
        .json;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(page["items"][0]["name"], "gamma");
    assert_eq!(page["pagination"]["page"], 2);
    app.get("/ojs/v1/admin/queues?limit=-1")
        .await
        .expect_error(400, "invalid_request");

    let one = app.get("/ojs/v1/admin/queues/alpha").await.expect(200).json;
    assert_eq!(one["name"], "alpha");
    assert_eq!(one["counts"], alpha["counts"]);
    assert_eq!(one["latency_ms"], alpha["latency_ms"]);
    // The resolved configuration, the same object the queue API shows, its `backpressure`
    // adding the live state.
    let config = app
        .get("/ojs/v1/queues/alpha/config")
        .await
        .expect(200)
        .json;
    let mut shown = one["configuration"].clone();
    let pressure = shown["backpressure"].as_object_mut().unwrap();
    for live in ["enabled", "threshold", "current_depth", "state"] {
        assert!(pressure.remove(live).is_some(), "{live}: {one}");
    }
    assert_eq!(shown, config["config"]);
    assert_eq!(one["configuration"]["overflow_policy"], "reject");
    let waiting = app
        .get("/ojs/v1/admin/jobs?queue=alpha&state=available")
        .await
        .expect(200)
        .json;
    assert_eq!(
        one["oldest_available_at"],
        waiting["items"][0]["enqueued_at"]
    );
    let idle = app.get("/ojs/v1/admin/queues/gamma").await.expect(200).json;
    assert!(idle.get("oldest_available_at").is_none());

    app.get("/ojs/v1/admin/queues/nope")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/admin/queues/Bad_Name")
        .await
        .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn purging_a_queue_deletes_its_jobs_in_the_states_named() {
    let app = TestApp::spawn().await;
    for _ in 0..4 {
        app.push(job("a.b", "q")).await;
    }
    app.push(json!({"type": "a.b", "args": [], "queue": "q", "scheduled_at": "+PT1H"}))
        .await;
    app.push(job("a.b", "other")).await;
    let completed = complete_one(&app, "q").await;
    let active = app.fetch_one("q", "w").await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    app.delete("/ojs/v1/admin/queues/q/jobs")
        .await
        .expect_error(400, "invalid_request");
    delete_with(
        &app,
        "/ojs/v1/admin/queues/q/jobs",
        json!({"confirm": false}),
    )
    .await
    .expect_error(400, "invalid_request");
    let refused = delete_with(
        &app,
        "/ojs/v1/admin/queues/q/jobs",
        json!({"confirm": true, "states": ["available", "active"]}),
    )
    .await
    .expect_error(400, "invalid_request");
    assert_eq!(refused.json["error"]["details"]["field"], "$.states");
    delete_with(
        &app,
        "/ojs/v1/admin/queues/q/jobs",
        json!({"confirm": true, "states": ["finished"]}),
    )
    .await
    .expect_error(400, "invalid_request");
    delete_with(
        &app,
        "/ojs/v1/admin/queues/q/jobs",
        json!({"confirm": true, "older_than": "yesterday"}),
    )
    .await
    .expect_error(400, "invalid_request");
    delete_with(
        &app,
        "/ojs/v1/admin/queues/nope/jobs",
        json!({"confirm": true}),
    )
    .await
    .expect_error(404, "not_found");
    assert_eq!(app.job_count().await, 6, "nothing was purged yet");

    // Created before a time in the past: none.
    let resp = delete_with(
        &app,
        "/ojs/v1/admin/queues/q/jobs",
        json!({"confirm": true, "older_than": "2020-01-01T00:00:00Z"}),
    )
    .await
    .expect(200);
    assert_eq!(resp.json["purged_count"], 0);

    let resp = app
        .delete("/ojs/v1/admin/queues/q/jobs?confirm=true&states=completed")
        .await
        .expect(200);
    assert_eq!(
        resp.json,
        json!({"purged_count": 1, "states": ["completed"]})
    );
    app.get(&format!("/ojs/v1/jobs/{completed}"))
        .await
        .expect_error(404, "not_found");

    // Every state but active by default.
    let resp = delete_with(
        &app,
        "/ojs/v1/admin/queues/q/jobs",
        json!({"confirm": true}),
    )
    .await
    .expect(200);
    assert_eq!(resp.json["purged_count"], 3, "two available, one scheduled");
    assert_eq!(
        resp.json["states"],
        json!([
            "scheduled",
            "available",
            "pending",
            "retryable",
            "completed",
            "cancelled",
            "discarded"
        ])
    );
    assert_eq!(app.job(&active).await["state"], "active");
    assert_eq!(
        app.job_count().await,
        2,
        "the active job and the other queue's"
    );
}

#[tokio::test]
async fn jobs_are_listed_filtered_sorted_and_paged() {
    let app = TestApp::spawn().await;
    let a = app
        .push_id(json!({"type": "email.send", "args": [], "queue": "mail", "priority": 5}))
        .await;
    let b = app
        .push_id(json!({"type": "email.digest", "args": [], "queue": "mail", "priority": 1}))
        .await;
    let c = app
        .push_id(
            json!({"type": "report.build", "args": [], "queue": "reports",
                        "scheduled_at": "+PT1H", "priority": 3}),
        )
        .await;
    let d = app
        .push_id(json!({"type": "report.build", "args": [], "queue": "reports", "priority": 0}))
        .await;
    complete_one(&app, "reports").await;

    let all = app.get("/ojs/v1/admin/jobs").await.expect(200).json;
    assert_eq!(
        ids(&all["items"]),
        [&d, &c, &b, &a].map(String::as_str),
        "newest first"
    );
    assert_eq!(all["pagination"]["total"], 4);
    let first = &all["items"][0];
    assert_eq!(first["id"], d.as_str());
    assert_eq!(first["type"], "report.build");
    assert_eq!(first["queue"], "reports");
    assert_eq!(first["state"], "completed");
    assert_eq!(first["priority"], 0);
    assert_eq!(first["attempt"], 1);
    assert!(first["max_attempts"].is_i64());
    for key in ["created_at", "enqueued_at", "started_at", "completed_at"] {
        assert!(first[key].is_string(), "{key}");
    }
    assert!(
        all["items"][1].get("enqueued_at").is_none(),
        "scheduled: never available yet"
    );
    assert!(
        all["items"][1].get("args").is_none(),
        "a summary, not the job"
    );

    let asc = app
        .get("/ojs/v1/admin/jobs?order=asc")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&asc["items"]), [&a, &b, &c, &d].map(String::as_str));
    let by_priority = app
        .get("/ojs/v1/admin/jobs?sort=priority&order=asc")
        .await
        .expect(200)
        .json;
    assert_eq!(
        ids(&by_priority["items"]),
        [&d, &b, &c, &a].map(String::as_str)
    );
    let by_schedule = app
        .get("/ojs/v1/admin/jobs?sort=scheduled_at")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&by_schedule["items"])[0], c.as_str());

    let mail = app
        .get("/ojs/v1/admin/jobs?queue=mail")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&mail["items"]), [&b, &a].map(String::as_str));
    let email = app
        .get("/ojs/v1/admin/jobs?type=email.*")
        .await
        .expect(200)
        .json;
    assert_eq!(email["pagination"]["total"], 2);
    let exact = app
        .get("/ojs/v1/admin/jobs?type=email.send")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&exact["items"]), [a.as_str()]);
    let states = app
        .get("/ojs/v1/admin/jobs?state=completed,scheduled")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&states["items"]), [&d, &c].map(String::as_str));
    let future = app
        .get("/ojs/v1/admin/jobs?since=2999-01-01T00:00:00Z")
        .await
        .expect(200)
        .json;
    assert_eq!(future["pagination"]["total"], 0);
    let past = app
        .get("/ojs/v1/admin/jobs?until=2999-01-01T00:00:00%2B02:00")
        .await
        .expect(200)
        .json;
    assert_eq!(past["pagination"]["total"], 4);

    let paged = app.get("/ojs/v1/admin/jobs?limit=3").await.expect(200).json;
    assert_eq!(paged["items"].as_array().unwrap().len(), 3);
    assert_eq!(paged["pagination"]["has_more"], true);
    let cursor = paged["pagination"]["next_cursor"].as_str().unwrap();
    let rest = app
        .get(&format!("/ojs/v1/admin/jobs?limit=3&cursor={cursor}"))
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&rest["items"]), [a.as_str()]);

    for bad in [
        "sort=name",
        "order=up",
        "state=done",
        "since=yesterday",
        "queue=Not%20A%20Queue",
        "page=0",
    ] {
        app.get(&format!("/ojs/v1/admin/jobs?{bad}"))
            .await
            .expect_error(400, "invalid_request");
    }
}

#[tokio::test]
async fn a_job_is_shown_bare_cancelled_and_retried() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [{"k": 1}], "queue": "q", "meta": {"m": true}}))
        .await;
    let shown = app
        .get(&format!("/ojs/v1/admin/jobs/{id}"))
        .await
        .expect(200)
        .json;
    let mut bare = shown.clone();
    let fields = bare.as_object_mut().unwrap();
    assert!(fields.remove("metadata").is_some() && fields.remove("retry_policy").is_some());
    assert_eq!(bare, app.job(&id).await, "the job object, not wrapped");
    app.get("/ojs/v1/admin/jobs/019539a4-0000-7000-8000-000000000000")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/admin/jobs/not-an-id")
        .await
        .expect_error(404, "not_found");

    // Retry applies to discarded jobs only.
    let refused = app
        .post(&format!("/ojs/v1/admin/jobs/{id}/retry"), json!({}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(
        refused.json["error"]["details"]["current_state"],
        "available"
    );

    let cancelled = app
        .post(&format!("/ojs/v1/admin/jobs/{id}/cancel"), json!({}))
        .await
        .expect(200)
        .json;
    assert_eq!(cancelled["job"]["state"], "cancelled");
    assert_eq!(cancelled["job"]["previous_state"], "available");
    app.send(
        Method::POST,
        &format!("/ojs/v1/admin/jobs/{id}/retry"),
        None,
        &[],
    )
    .await
    .expect_error(409, "conflict");
    app.post(
        "/ojs/v1/admin/jobs/019539a4-0000-7000-8000-000000000000/cancel",
        json!({}),
    )
    .await
    .expect_error(404, "not_found");
    app.post(
        "/ojs/v1/admin/jobs/019539a4-0000-7000-8000-000000000000/retry",
        json!({}),
    )
    .await
    .expect_error(404, "not_found");

    // Discarded by a handler directive: not in the dead-letter queue, still retryable here.
    app.push(job("a.b", "q")).await;
    let discarded = fail_one(&app, "q", "DISCARD").await;
    assert!(app.job(&discarded).await.get("dead_lettered_at").is_none());
    let retried = app
        .post(&format!("/ojs/v1/admin/jobs/{discarded}/retry"), json!({}))
        .await
        .expect(200)
        .json;
    assert_eq!(retried["job"]["state"], "available");
    assert_eq!(retried["job"]["attempt"], 0);
    assert_eq!(retried["job"]["errors"], json!([]));
    let events = app.job_event_types(&discarded).await;
    assert_eq!(events.last().map(String::as_str), Some("job.enqueued"));
    assert!(!events.contains(&"dead_letter.retried".to_owned()));

    // A dead-lettered one, with an override validated as on enqueue.
    app.push(fragile("a.b", "q2")).await;
    let dead = fail_one(&app, "q2", "handler_error").await;
    app.post(
        &format!("/ojs/v1/admin/jobs/{dead}/retry"),
        json!({"override": {"priority": -1}}),
    )
    .await
    .expect_error(400, "invalid_request");
    let retried = app
        .post(
            &format!("/ojs/v1/admin/jobs/{dead}/retry"),
            json!({"override": {"queue": "elsewhere"}}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(retried["job"]["queue"], "elsewhere");
    assert!(retried["job"].get("dead_lettered_at").is_none());
    assert!(
        app.job_event_types(&dead)
            .await
            .ends_with(&["dead_letter.retried".to_owned(), "job.enqueued".to_owned()])
    );
    assert_eq!(app.fetch_one("elsewhere", "w").await["id"], dead.as_str());
}

#[tokio::test]
async fn bulk_actions_need_confirmation_and_apply_to_their_states() {
    let app = TestApp::spawn().await;
    app.post(
        "/ojs/v1/admin/jobs/bulk/retry",
        json!({"filter": {"state": "discarded"}, "confirm": false}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.send(Method::POST, "/ojs/v1/admin/jobs/bulk/retry", None, &[])
        .await
        .expect_error(400, "invalid_request");
    app.post("/ojs/v1/admin/jobs/bulk/explode", json!({"confirm": true}))
        .await
        .expect_error(404, "not_found");
    let typo = app
        .post(
            "/ojs/v1/admin/jobs/bulk/cancel",
            json!({"filter": {"queu": "q"}, "confirm": true}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(typo.json["error"]["details"]["field"], "$.filter.queu");
    for filter in [
        json!({"state": "finished"}),
        json!({"state": 3}),
        json!({"since": "yesterday"}),
        json!({"queue": "Q Q"}),
        json!([1]),
    ] {
        app.post(
            "/ojs/v1/admin/jobs/bulk/cancel",
            json!({"filter": filter, "confirm": true}),
        )
        .await
        .expect_error(400, "invalid_request");
    }
    // A filter selecting only states the action does not apply to.
    app.post(
        "/ojs/v1/admin/jobs/bulk/delete",
        json!({"filter": {"state": ["available", "active"]}, "confirm": true}),
    )
    .await
    .expect_error(400, "invalid_request");

    for _ in 0..3 {
        app.push(fragile("x.fail", "q")).await;
    }
    let failed: Vec<String> = vec![
        fail_one(&app, "q", "handler_error").await,
        fail_one(&app, "q", "DISCARD").await,
        fail_one(&app, "q", "handler_error").await,
    ];
    app.push(job("x.wait", "q")).await;
    app.push(job("x.wait", "q")).await;
    app.push(job("x.wait", "other")).await;
    app.fetch_one("q", "w").await;

    // Retry: the discarded jobs of the queue, dead-lettered or not.
    let resp = app
        .post(
            "/ojs/v1/admin/jobs/bulk/retry",
            json!({"filter": {"queue": "q", "type": "x.*"}, "confirm": true}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(
        resp,
        json!({"action": "retry", "matched": 3, "succeeded": 3, "failed": 0, "errors": [],
               "retried": 3})
    );
    for id in &failed {
        assert_eq!(app.job(id).await["state"], "available");
    }

    // Cancel: unfinished jobs (the active one included).
    let resp = app
        .post(
            "/ojs/v1/admin/jobs/bulk/cancel",
            json!({"filter": {"queue": "q"}, "confirm": true}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(resp["matched"], 5);
    assert_eq!(resp["cancelled"], 5);
    assert_eq!(resp["failed"], 0);
    let other = app
        .get("/ojs/v1/admin/jobs?queue=other")
        .await
        .expect(200)
        .json;
    assert_eq!(
        other["items"][0]["state"], "available",
        "another queue: untouched"
    );

    // Delete: finished jobs only, here those of one type.
    let resp = app
        .post(
            "/ojs/v1/admin/jobs/bulk/delete",
            json!({"filter": {"type": "x.fail", "state": ["cancelled", "available"]},
                   "confirm": true}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(
        resp,
        json!({"action": "delete", "matched": 3, "succeeded": 3, "failed": 0, "errors": [],
               "deleted": 3})
    );
    assert_eq!(app.job_count().await, 3);
    let resp = app
        .post(
            "/ojs/v1/admin/jobs/bulk/delete",
            json!({"filter": {"queue": "q"}, "confirm": true}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(resp["deleted"], 2);
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn the_admin_dead_letter_routes_share_the_dead_letter_queue() {
    let app = TestApp::spawn().await;
    let empty = app.get("/ojs/v1/admin/dead-letter").await.expect(200).json;
    assert_eq!(empty["items"], json!([]));
    assert_eq!(empty["pagination"]["total"], 0);
    assert_eq!(empty["pagination"]["page"], 1);
    assert_eq!(empty["pagination"]["per_page"], 20);

    for queue in ["one", "two", "two"] {
        app.push(fragile("a.b", queue)).await;
    }
    let a = fail_one(&app, "one", "handler_error").await;
    let b = fail_one(&app, "two", "handler_error").await;
    let c = fail_one(&app, "two", "handler_error").await;

    let list = app.get("/ojs/v1/admin/dead-letter").await.expect(200).json;
    assert_eq!(ids(&list["items"]), [&c, &b, &a].map(String::as_str));
    assert!(list["items"][0]["dead_lettered_at"].is_string());
    let two = app
        .get("/ojs/v1/admin/dead-letter?queue=two&per_page=1")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&two["items"]), [c.as_str()]);
    assert_eq!(two["pagination"]["total"], 2);
    app.get("/ojs/v1/admin/dead-letter?until=soon")
        .await
        .expect_error(400, "invalid_request");

    let stats = app
        .get("/ojs/v1/admin/dead-letter/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["by_queue"], json!({"one": 1, "two": 2}));

    let retried = app
        .send(
            Method::POST,
            &format!("/ojs/v1/admin/dead-letter/{a}/retry"),
            None,
            &[],
        )
        .await
        .expect(200)
        .json;
    assert_eq!(retried["job"]["state"], "available");
    app.post(&format!("/ojs/v1/admin/dead-letter/{a}/retry"), json!({}))
        .await
        .expect_error(404, "not_found");

    let deleted = app
        .delete(&format!("/ojs/v1/admin/dead-letter/{b}"))
        .await
        .expect(204);
    assert!(deleted.text.is_empty());
    assert!(deleted.header("content-type").is_none());
    app.delete(&format!("/ojs/v1/admin/dead-letter/{b}"))
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/ojs/v1/admin/dead-letter/{a}"))
        .await
        .expect_error(404, "not_found");
    app.delete("/ojs/v1/admin/dead-letter/not-an-id")
        .await
        .expect_error(404, "not_found");

    app.post("/ojs/v1/admin/dead-letter/retry", json!({"filter": {}}))
        .await
        .expect_error(400, "invalid_request");
    let bulk = app
        .post(
            "/ojs/v1/admin/dead-letter/retry",
            json!({"filter": {"queue": "two"}, "confirm": true}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(bulk["retried"], 1);

    app.push(fragile("a.b", "three")).await;
    fail_one(&app, "three", "handler_error").await;
    app.delete("/ojs/v1/admin/dead-letter")
        .await
        .expect_error(400, "invalid_request");
    let purged = delete_with(&app, "/ojs/v1/admin/dead-letter", json!({"confirm": true}))
        .await
        .expect(200)
        .json;
    assert_eq!(purged, json!({"purged_count": 1}));
}
