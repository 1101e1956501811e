//! The worker protocol: registration, directives, deregistration, and the operator's view.

use serde_json::json;

use crate::support::{TestApp, job};

#[tokio::test]
async fn registration_creates_then_updates_the_worker() {
    let app = TestApp::spawn().await;
    let resp = app
        .register(json!({"worker_id": "w-1", "hostname": "pod-a", "pid": 42, "queues": ["default", "email"],
                   "labels": ["v2"], "strategy": "weighted", "weights": {"email": 3}}))
        .await
        .expect(201);
    let body = &resp.json;
    assert_eq!(body["ok"], true);
    assert_eq!(body["worker_id"], "w-1");
    assert_eq!(body["state"], "running");
    assert_eq!(body["heartbeat_interval"], 15);
    assert_eq!(body["heartbeat_timeout"], 45);
    assert_eq!(body["visibility_timeout_default"], 1800);
    assert!(body["server_time"].is_string());

    // The wrapped form, for a known id: 200, and what it omits is kept.
    app.register(json!({"worker": {"id": "w-1", "concurrency": 4}}))
        .await
        .expect(200);
    let worker = app.get("/ojs/v1/admin/workers/w-1").await.expect(200).json;
    assert_eq!(worker["id"], "w-1");
    assert_eq!(worker["hostname"], "pod-a");
    assert_eq!(worker["concurrency"], 4);
    assert_eq!(worker["queues"], json!(["default", "email"]));
    assert_eq!(worker["labels"], json!(["v2"]));
    assert_eq!(worker["weights"], json!({"email": 3}));
    assert_eq!(worker["state"], "running");
    assert_eq!(worker["active_job_ids"], json!([]));
    assert_eq!(
        app.event_types().await,
        ["worker.started", "worker.heartbeat"],
        "started once, heartbeat sampled"
    );
}

#[tokio::test]
async fn registration_rejects_bad_fields() {
    let app = TestApp::spawn().await;
    for (body, field) in [
        (json!({}), "$.worker_id"),
        (json!({"worker_id": ""}), "$.worker_id"),
        (json!({"worker_id": "w", "pid": "x"}), "$.pid"),
        (
            json!({"worker_id": "w", "concurrency": -1}),
            "$.concurrency",
        ),
        (
            json!({"worker_id": "w", "queues": ["Bad Queue"]}),
            "$.queues[0]",
        ),
        (
            json!({"worker_id": "w", "strategy": "random"}),
            "$.strategy",
        ),
        (
            json!({"worker_id": "w", "weights": {"q": -1}}),
            "$.weights.q",
        ),
        (json!({"worker_id": "w", "pool": "NO"}), "$.pool"),
        (json!({"worker": 5}), "$.worker"),
    ] {
        let resp = app
            .register(body.clone())
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(resp.json["error"]["details"]["field"], field, "{body}");
    }
}

#[tokio::test]
async fn directives_reach_the_worker_and_only_escalate() {
    let app = TestApp::spawn().await;
    app.push(job("a.b", "q")).await;
    app.register(json!({"worker_id": "w"})).await.expect(201);
    app.post("/ojs/v1/admin/workers/nobody/quiet", json!({}))
        .await
        .expect_error(404, "not_found");

    let resp = app
        .send(
            reqwest::Method::POST,
            "/ojs/v1/admin/workers/w/quiet",
            None,
            &[],
        )
        .await
        .expect(200);
    assert_eq!(
        resp.json,
        json!({"worker_id": "w", "directive": "quiet", "state": "quiet"})
    );
    let beat = app.heartbeat(json!({"worker_id": "w"})).await.expect(200);
    assert_eq!(
        (beat.json["state"].as_str(), beat.json["directive"].as_str()),
        (Some("quiet"), Some("quiet"))
    );
    // A worker told to be quiet gets no work, even if it asks.
    assert!(
        app.fetch(json!({"queues": ["q"], "worker_id": "w"}))
            .await
            .is_empty()
    );
    assert_eq!(
        app.fetch(json!({"queues": ["q"], "worker_id": "other"}))
            .await
            .len(),
        1
    );

    app.post("/ojs/v1/admin/workers/w/terminate", json!({}))
        .await
        .expect(200);
    let resp = app
        .post("/ojs/v1/admin/workers/w/quiet", json!({}))
        .await
        .expect(200);
    assert_eq!(
        resp.json["directive"], "terminate",
        "directives never de-escalate"
    );
    let health = app.get("/ojs/v1/workers/w/health").await.expect(503);
    assert_eq!(health.json["state"], "terminate");
    assert!(health.header("retry-after").is_some());
    assert!(app.event_types().await.contains(&"worker.quiet".to_owned()));
}

#[tokio::test]
async fn a_worker_reporting_drain_or_quiet_gets_no_work() {
    let app = TestApp::spawn().await;
    app.push(job("a.b", "q")).await;
    let beat = app
        .heartbeat(json!({"worker_id": "w", "state": "drain"}))
        .await
        .expect(200);
    assert_eq!(beat.json["state"], "terminate");
    assert_eq!(beat.json["directive"], "");
    assert!(
        app.fetch(json!({"queues": ["q"], "worker_id": "w"}))
            .await
            .is_empty()
    );
    app.heartbeat(json!({"worker_id": "w", "state": "running"}))
        .await
        .expect(200);
    assert_eq!(
        app.fetch(json!({"queues": ["q"], "worker_id": "w"}))
            .await
            .len(),
        1
    );
}

#[tokio::test]
async fn test_directives_from_job_metadata_need_test_hooks() {
    for hooks in [true, false] {
        let app = TestApp::spawn_with(|c| c.server.test_hooks = hooks).await;
        let id = app
            .push_id(json!({"type": "a.b", "args": [], "queue": "q",
                            "options": {"metadata": {"test_directive": "terminate"}}}))
            .await;
        app.fetch_one("q", "w").await;
        let beat = app
            .heartbeat(json!({"worker_id": "w", "active_jobs": [id]}))
            .await
            .expect(200);
        let expected = if hooks { "terminate" } else { "running" };
        assert_eq!(beat.json["state"], expected, "test hooks {hooks}");
    }
}

#[tokio::test]
async fn deregistration_releases_the_workers_jobs() {
    let app = TestApp::spawn().await;
    let a = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"max_attempts": 3}}))
        .await;
    let b = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"max_attempts": 1}}))
        .await;
    app.register(json!({"worker_id": "w"})).await.expect(201);
    let jobs = app
        .fetch(json!({"queues": ["q"], "worker_id": "w", "count": 2}))
        .await;
    assert_eq!(jobs.len(), 2);

    let resp = app.delete("/ojs/v1/workers/w").await.expect(200);
    assert_eq!(
        resp.json,
        json!({"deregistered": true, "worker_id": "w", "jobs_requeued": 2})
    );
    let job_a = app.job(&a).await;
    assert_eq!(job_a["state"], "available");
    assert_eq!(job_a["error"]["code"], "shutdown");
    let job_b = app.job(&b).await;
    assert_eq!(job_b["state"], "discarded", "its only attempt was spent");
    assert!(job_b["dead_lettered_at"].is_string());
    app.delete("/ojs/v1/workers/w")
        .await
        .expect_error(404, "not_found");
    let stopped: serde_json::Value =
        sqlx::query_scalar("select data from ojs_event_log where type = 'worker.stopped'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(stopped["reason"], "shutdown");
}

#[tokio::test]
async fn the_worker_list_pages_and_counts_by_state() {
    let app = TestApp::spawn().await;
    for i in 0..5 {
        app.heartbeat(json!({"worker_id": format!("w{i}")}))
            .await
            .expect(200);
    }
    app.post("/ojs/v1/admin/workers/w1/quiet", json!({}))
        .await
        .expect(200);
    app.post("/ojs/v1/admin/workers/w2/terminate", json!({}))
        .await
        .expect(200);
    // Seen fetching only: listed too.
    app.fetch(json!({"queues": ["q"], "worker_id": "z-fetcher"}))
        .await;
    app.push(job("a.b", "q")).await;
    let held = app.fetch_one("q", "w0").await;

    let page = app
        .get("/ojs/v1/admin/workers?per_page=2&page=1")
        .await
        .expect(200);
    let body = &page.json;
    assert_eq!(body["items"].as_array().unwrap().len(), 2);
    assert_eq!(body["items"][0]["id"], "w0");
    assert_eq!(body["items"][0]["active_jobs"], 1);
    assert!(body["items"][0].get("active_job_ids").is_none());
    assert_eq!(
        body["summary"],
        json!({"total": 6, "running": 4, "quiet": 1, "terminate": 1, "stale": 0})
    );
    assert_eq!(body["pagination"]["total"], 6);
    assert_eq!(body["pagination"]["has_more"], true);
    let cursor = body["pagination"]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = app
        .get(&format!("/ojs/v1/admin/workers?limit=2&cursor={cursor}"))
        .await
        .expect(200);
    assert_eq!(next.json["items"][0]["id"], "w2");
    assert_eq!(next.json["items"][0]["state"], "terminate");
    let last = app.get("/ojs/v1/admin/workers?offset=5").await.expect(200);
    assert_eq!(last.json["items"][0]["id"], "z-fetcher");
    assert!(last.json["items"][0].get("last_heartbeat_at").is_none());

    let detail = app.get("/ojs/v1/admin/workers/w0").await.expect(200);
    assert_eq!(detail.json["active_job_ids"], json!([held["id"]]));
    app.get("/ojs/v1/admin/workers?limit=x")
        .await
        .expect_error(400, "invalid_request");
    // Only stale workers can be deleted by an operator.
    app.delete("/ojs/v1/admin/workers/w0")
        .await
        .expect_error(409, "conflict");
}
