//! Response shapes the official OJS clients read: the admin UI (`openjobspec/ojs-admin-ui`)
//! and the SDKs. Each test names the client field it protects; the OJS binding's own shape is
//! asserted beside it, because both must hold.

use serde_json::{Value, json};

use crate::support::TestApp;

/// The job attributes of a wrapped-and-bare body: `job`, and the same attributes beside it.
fn assert_wrapped_and_bare(body: &Value) {
    let job = body["job"].as_object().expect("a wrapped job");
    let mut bare = body.as_object().unwrap().clone();
    bare.remove("job");
    assert_eq!(&bare, job, "the attributes beside `job` are the job's");
}

/// The Rust SDK reads a bare job from GET and DELETE `/jobs/{id}` and from a dead-letter retry;
/// the binding (and every other SDK) reads `{"job": ...}`.
#[tokio::test]
async fn job_reads_cancels_and_dead_letter_retries_answer_wrapped_and_bare() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [1], "queue": "shape"}))
        .await;
    let got = app
        .get(&format!("/ojs/v1/jobs/{id}"))
        .await
        .expect(200)
        .json;
    assert_wrapped_and_bare(&got);
    assert_eq!(got["id"], id.as_str());
    assert_eq!(got["type"], "a.b");

    let cancelled = app
        .delete(&format!("/ojs/v1/jobs/{id}"))
        .await
        .expect(200)
        .json;
    assert_wrapped_and_bare(&cancelled);
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(cancelled["previous_state"], "available");

    let dead = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "shape-dl", "retry": {"max_attempts": 1}}),
        )
        .await;
    app.fetch_one("shape-dl", "w").await;
    app.nack(json!({"job_id": dead, "error": {"message": "boom"}}))
        .await
        .expect(200);
    let retried = app
        .post(&format!("/ojs/v1/dead-letter/{dead}/retry"), json!({}))
        .await
        .expect(200)
        .json;
    assert_wrapped_and_bare(&retried);
    assert_eq!(retried["state"], "available");
}

/// The admin UI's job detail reads `errors.length`, `metadata` (lifecycle timestamps) and
/// `retry_policy`.
#[tokio::test]
async fn the_admin_job_detail_has_errors_metadata_and_retry_policy() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "detail", "retry": {"max_attempts": 2}}),
        )
        .await;
    let fresh = app
        .get(&format!("/ojs/v1/admin/jobs/{id}"))
        .await
        .expect(200)
        .json;
    assert_eq!(fresh["errors"], json!([]), "{fresh}");
    assert_eq!(fresh["retry_policy"], fresh["retry"], "{fresh}");
    assert_eq!(fresh["retry_policy"]["max_attempts"], 2, "{fresh}");
    let metadata = fresh["metadata"].as_object().expect("metadata");
    assert_eq!(metadata["created_at"], fresh["created_at"]);
    assert_eq!(metadata["enqueued_at"], fresh["enqueued_at"]);
    assert!(metadata.get("started_at").is_none(), "{fresh}");

    app.fetch_one("detail", "w").await;
    app.nack(json!({"job_id": id, "error": {"message": "boom", "type": "Flaky"}}))
        .await
        .expect(200);
    let failed = app
        .get(&format!("/ojs/v1/admin/jobs/{id}"))
        .await
        .expect(200)
        .json;
    assert_eq!(
        failed["errors"].as_array().map(Vec::len),
        Some(1),
        "{failed}"
    );
    assert!(failed["metadata"]["started_at"].is_string(), "{failed}");

    // The data plane carries `errors` too, but not the admin additions.
    let plain = app.job(&id).await;
    assert_eq!(plain["errors"], failed["errors"]);
    assert!(plain.get("metadata").is_none() && plain.get("retry_policy").is_none());
}

/// The admin UI joins `queues` of every worker; a worker registered without queues shows its
/// pool's, or none.
#[tokio::test]
async fn every_worker_lists_its_queues() {
    let app = TestApp::spawn().await;
    app.send(
        reqwest::Method::PUT,
        "/ojs/v1/admin/pools/crew",
        Some(br#"{"queues": ["crew-a", "crew-b"]}"#.to_vec()),
        &[("content-type", "application/json")],
    )
    .await
    .expect(201);
    for body in [
        json!({"worker_id": "own", "queues": ["mine"]}),
        json!({"worker_id": "member", "pool": "crew"}),
        json!({"worker_id": "bare"}),
    ] {
        app.register(body).await.expect(201);
    }
    let listed = app.get("/ojs/v1/admin/workers").await.expect(200).json;
    let queues = |id: &str| {
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {listed}"))["queues"]
            .clone()
    };
    assert_eq!(queues("own"), json!(["mine"]));
    assert_eq!(queues("member"), json!(["crew-a", "crew-b"]));
    assert_eq!(queues("bare"), json!([]));
    let one = app.get("/ojs/v1/admin/workers/bare").await.expect(200).json;
    assert_eq!(one["queues"], json!([]), "{one}");
}

/// The admin UI changes priority with `PATCH /ojs/v1/admin/jobs/{id}` and lists scheduled jobs
/// by `scheduled_at`.
#[tokio::test]
async fn admin_jobs_take_a_priority_patch_and_list_scheduled_at() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "later", "scheduled_at": "+1h"}))
        .await;
    let patched = app
        .send(
            reqwest::Method::PATCH,
            &format!("/ojs/v1/admin/jobs/{id}"),
            Some(br#"{"priority": 0}"#.to_vec()),
            &[("content-type", "application/json")],
        )
        .await
        .expect(200);
    assert_eq!(patched.json["previous_priority"], 2, "{}", patched.text);
    assert_eq!(app.job(&id).await["priority"], 0);
    let refused = app
        .send(
            reqwest::Method::PATCH,
            &format!("/ojs/v1/admin/jobs/{id}"),
            Some(br#"{"priority": -1}"#.to_vec()),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert_eq!(app.job(&id).await["priority"], 0);

    let listed = app
        .get("/ojs/v1/admin/jobs?state=scheduled&sort=scheduled_at&order=asc")
        .await
        .expect(200)
        .json;
    let item = &listed["items"][0];
    assert_eq!(item["id"], id.as_str());
    assert_eq!(item["scheduled_at"], app.job(&id).await["scheduled_at"]);
}

/// The queue detail's `backpressure` reports bound, depth and state for the admin UI.
#[tokio::test]
async fn a_bounded_queue_reports_its_backpressure_state() {
    let app = TestApp::spawn().await;
    app.post(
        "/ojs/v1/queues",
        json!({"name": "tight", "config": {"max_size": 4, "warning_threshold": 0.5}}),
    )
    .await
    .expect(201);
    let pressure = |body: &Value| body["configuration"]["backpressure"].clone();
    let detail = app.get("/ojs/v1/admin/queues/tight").await.expect(200).json;
    let bp = pressure(&detail);
    assert_eq!(bp["enabled"], true, "{bp}");
    assert_eq!(bp["threshold"], 4);
    assert_eq!(bp["current_depth"], 0);
    assert_eq!(bp["state"], "normal");
    for expected in ["normal", "warning", "warning", "critical"] {
        app.push(json!({"type": "a.b", "args": [], "queue": "tight"}))
            .await;
        let bp = pressure(&app.get("/ojs/v1/admin/queues/tight").await.expect(200).json);
        assert_eq!(bp["state"], expected, "{bp}");
    }
    assert_eq!(
        pressure(&app.get("/ojs/v1/admin/queues/tight").await.json)["current_depth"],
        4
    );

    app.push(json!({"type": "a.b", "args": [], "queue": "open"}))
        .await;
    let open = pressure(&app.get("/ojs/v1/admin/queues/open").await.expect(200).json);
    assert_eq!(open["enabled"], false, "{open}");
    assert_eq!(open["state"], "normal");
    assert!(open["current_depth"].is_null() && open["threshold"].is_null());
}

/// The dashboard's throughput chart: per-period counts, every period present, oldest first.
#[tokio::test]
async fn stats_history_counts_enqueued_processed_and_failed_per_period() {
    let app = TestApp::spawn().await;
    for i in 0..3 {
        app.push(
            json!({"type": "a.b", "args": [i], "queue": "hist", "retry": {"max_attempts": 1}}),
        )
        .await;
    }
    let done = app.fetch_one("hist", "w").await;
    app.ack(json!({"job_id": done["id"]})).await.expect(200);
    let failed = app.fetch_one("hist", "w").await;
    app.nack(json!({"job_id": failed["id"], "error": {"message": "boom"}}))
        .await
        .expect(200);
    app.push(json!({"type": "a.b", "args": [], "queue": "elsewhere"}))
        .await;

    let sum = |body: &Value, key: &str| -> i64 {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[key].as_i64().unwrap())
            .sum()
    };
    // Events are readable once no older transaction is running; wait for the last one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let body = loop {
        let body = app
            .get("/ojs/v1/admin/stats/history?period=1m&queue=hist")
            .await
            .expect(200)
            .json;
        if sum(&body, "failed") == 1 || std::time::Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(body["period"], "PT1M");
    let points = body["data"].as_array().unwrap();
    assert_eq!(points.len(), 12, "{body}");
    let times: Vec<chrono::DateTime<chrono::Utc>> = points
        .iter()
        .map(|p| p["timestamp"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| (w[1] - w[0]).num_seconds() == 60),
        "{body}"
    );
    assert_eq!(sum(&body, "enqueued"), 3, "{body}");
    assert_eq!(sum(&body, "processed"), 1, "{body}");
    assert_eq!(sum(&body, "failed"), 1, "{body}");
    let all = app
        .get("/ojs/v1/admin/stats/history?period=1m")
        .await
        .expect(200)
        .json;
    assert_eq!(sum(&all, "enqueued"), 4, "{all}");

    let since = app
        .get("/ojs/v1/admin/stats/history?period=1h&since=2020-01-01T00:00:00Z")
        .await
        .expect(200)
        .json;
    assert_eq!(since["data"].as_array().unwrap().len(), 1_440, "capped");
    for bad in [
        "period=0s",
        "period=2d",
        "period=soon",
        "queue=Bad%20Name",
        "since=yesterday",
    ] {
        app.get(&format!("/ojs/v1/admin/stats/history?{bad}"))
            .await
            .expect_error(400, "invalid_request");
    }
}

/// The admin UI's unique-jobs page: the jobs that hold a unique key, with when it ends.
#[tokio::test]
async fn unique_jobs_lists_the_holders_of_unique_keys() {
    let app = TestApp::spawn().await;
    let timed = app
        .push_id(json!({"type": "u.timed", "args": [], "queue": "uq",
                        "unique": {"period": "PT1H"}}))
        .await;
    let plain = app
        .push_id(json!({"type": "u.plain", "args": [], "queue": "uq", "unique": {}}))
        .await;
    let kept = app
        .push_id(json!({"type": "u.kept", "args": [], "queue": "uq-done",
                        "unique": {"states": ["completed"]}}))
        .await;
    app.push(json!({"type": "u.none", "args": [], "queue": "uq"}))
        .await;
    // A completed job holds no key unless its policy counts completed jobs.
    let done = app
        .push_id(json!({"type": "u.done", "args": [], "queue": "uq-done2", "unique": {}}))
        .await;
    for (queue, id) in [("uq-done", &kept), ("uq-done2", &done)] {
        let j = app.fetch_one(queue, "w").await;
        assert_eq!(j["id"], id.as_str());
        app.ack(json!({"job_id": id})).await.expect(200);
    }

    let body = app
        .get("/ojs/v1/unique-jobs?page=1&per_page=25")
        .await
        .expect(200)
        .json;
    assert_eq!(body["pagination"]["total"], 3, "{body}");
    let items = body["items"].as_array().unwrap();
    let item = |id: &str| {
        items
            .iter()
            .find(|i| i["job_id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {body}"))
            .clone()
    };
    let t = item(&timed);
    let job = app.job(&timed).await;
    assert_eq!(t["key"], job["unique_key"]);
    assert_eq!(t["type"], "u.timed");
    assert_eq!(t["queue"], "uq");
    assert_eq!(t["state"], "available");
    let created: chrono::DateTime<chrono::Utc> =
        job["created_at"].as_str().unwrap().parse().unwrap();
    let until: chrono::DateTime<chrono::Utc> = t["locked_until"].as_str().unwrap().parse().unwrap();
    assert_eq!((until - created).num_seconds(), 3600);
    assert!(item(&plain).get("locked_until").is_none());
    assert_eq!(item(&kept)["state"], "completed");
}

/// The manifest claims rate limiting (per-queue limits exist) and the admin UI's rate-limits
/// page lists each limited queue with its use.
#[tokio::test]
async fn rate_limited_queues_are_listed_with_their_use() {
    let app = TestApp::spawn().await;
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["capabilities"]["rate_limiting"], true);
    app.post(
        "/ojs/v1/queues",
        json!({"name": "throttled", "config": {"rate_limit": {"limit": 2, "period": "1m"}}}),
    )
    .await
    .expect(201);
    for i in 0..3 {
        app.push(json!({"type": "a.b", "args": [i], "queue": "throttled"}))
            .await;
    }
    app.push(json!({"type": "a.b", "args": [], "queue": "free"}))
        .await;
    let got = app
        .fetch(json!({"queues": ["throttled"], "count": 3, "worker_id": "w"}))
        .await;
    assert_eq!(got.len(), 2, "the limit holds");

    let body = app
        .get("/ojs/v1/rate-limits?page=1&per_page=25")
        .await
        .expect(200)
        .json;
    assert_eq!(body["pagination"]["total"], 1, "{body}");
    assert_eq!(
        body["items"][0],
        json!({"kind": "queue", "key": "throttled", "queue": "throttled", "limit": 2,
               "period": "PT1M", "active": 2, "waiting": 1,
               "rate": {"limit": 2, "period": "PT1M", "current_count": 2}, "waiting_count": 1})
    );
}
