//! What to scale workers on (`GET /ojs/v1/scaling`, `/ojs/v1/scaling/{name}`, and the worker
//! gauges of `/metrics`): the cluster's figures per queue, read from the database.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestApp, job};

/// Three jobs enqueued and one scheduled on `queue`; a worker declaring a concurrency of 4
/// holds one and has completed another.
async fn busy_queue(app: &TestApp, queue: &str) {
    app.register(json!({"worker_id": "scaler-w", "queues": [queue], "concurrency": 4}))
        .await
        .expect(201);
    for _ in 0..3 {
        app.push(job("scale.me", queue)).await;
    }
    let mut later = job("scale.me", queue);
    later["options"] = json!({"scheduled_at": "+PT1H"});
    app.push(later).await;
    let done = app.fetch_one(queue, "scaler-w").await;
    app.ack_job(&done, "scaler-w").await.expect(200);
    app.fetch_one(queue, "scaler-w").await;
}

#[tokio::test]
async fn a_queues_figures_are_its_jobs_latency_throughput_and_workers() {
    let app = TestApp::spawn().await;
    busy_queue(&app, "scaled").await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    let one = app.get("/ojs/v1/scaling/scaled").await.expect(200).json;
    assert_eq!(one["queue"], "scaled");
    assert_eq!(one["available"], 1);
    assert_eq!(one["active"], 1);
    assert_eq!(one["scheduled"], 1);
    assert_eq!(one["retryable"], 0);
    assert_eq!(one["pending"], 0);
    assert_eq!(one["backlog"], 2, "available + active: {one}");
    let age = one["oldest_available_age_seconds"].as_f64().unwrap();
    assert!((1.0..60.0).contains(&age), "the waiting job's age: {one}");
    // Over 60 s: three enqueued (the scheduled one is not, yet), one completed.
    assert_eq!(one["enqueue_rate"], json!(0.05));
    assert_eq!(one["completion_rate"], json!(0.017));
    assert_eq!(one["workers"], 1);
    assert_eq!(one["worker_capacity"], 4);
    assert_eq!(one["workers_busy"], 1);
    assert_eq!(one["utilization"], json!(0.25));

    let all = app.get("/ojs/v1/scaling").await.expect(200).json;
    assert_eq!(all["window_seconds"], 60);
    let listed = &all["queues"]["scaled"];
    for field in ["available", "active", "backlog", "workers", "utilization"] {
        assert_eq!(listed[field], one[field], "{field}");
    }

    // The same figures reach /metrics as gauges (read at most every 5 s). The gauges are the
    // process's: another test's server in this process may set this queue's series back to 0
    // between this server's read and the scrape, so a scrape may be tried again after the next
    // read.
    let line = |metrics: &str, name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{queue=\"scaled\"}}")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = app.get("/metrics").await.expect(200).text;
        let seen = (
            line(&metrics, "ojs_queue_workers"),
            line(&metrics, "ojs_queue_worker_utilization"),
            line(&metrics, "ojs_queue_oldest_available_age_seconds").map(|a| a >= 1.0),
        );
        if seen == (Some(1.0), Some(0.25), Some(true)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{seen:?}\n{metrics}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn an_idle_queue_reads_zeros_and_an_unknown_one_is_not_found() {
    let app = TestApp::spawn().await;
    app.push(job("scale.me", "drained")).await;
    let claimed = app.fetch_one("drained", "w").await;
    app.ack_job(&claimed, "w").await.expect(200);
    // Completed only: nothing waits or runs, but it has throughput.
    let drained = app.get("/ojs/v1/scaling/drained").await.expect(200).json;
    assert_eq!(drained["backlog"], 0);
    assert_eq!(drained["oldest_available_age_seconds"], json!(0.0));
    assert_eq!(drained["workers"], 0);
    assert!(drained.get("utilization").is_none(), "{drained}");

    app.post("/ojs/v1/queues", json!({"name": "empty"}))
        .await
        .expect(201);
    let empty = app.get("/ojs/v1/scaling/empty").await.expect(200).json;
    assert_eq!(empty["queue"], "empty");
    assert_eq!(empty["backlog"], 0);
    assert_eq!(empty["enqueue_rate"], json!(0.0));

    app.get("/ojs/v1/scaling/never-made")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/scaling/bad%20name")
        .await
        .expect_error(400, "invalid_request");
    let all = app.get("/ojs/v1/scaling").await.expect(200).json;
    assert!(all["queues"].get("never-made").is_none());
}

#[tokio::test]
async fn a_worker_key_reads_its_queues_and_tenants_are_refused() {
    let app = TestApp::spawn().await;
    busy_queue(&app, "a").await;
    app.push(job("scale.me", "b")).await;
    let admin = app
        .create_key(None, json!({"role": "admin", "name": "ops"}))
        .await;
    let key = |body: Value| app.create_key(Some(&admin), body);
    let worker_a = key(json!({"role": "worker", "queues": ["a"]})).await;
    let producer = key(json!({"role": "producer"})).await;

    let all = app
        .as_key(Some(&worker_a), Method::GET, "/ojs/v1/scaling", None)
        .await
        .expect(200)
        .json;
    assert!(all["queues"]["a"].is_object(), "{all}");
    assert!(
        all["queues"].get("b").is_none(),
        "a key of queue a sees only a: {all}"
    );
    app.as_key(Some(&worker_a), Method::GET, "/ojs/v1/scaling/a", None)
        .await
        .expect(200);
    app.as_key(Some(&worker_a), Method::GET, "/ojs/v1/scaling/b", None)
        .await
        .expect_error(403, "forbidden");
    app.as_key(Some(&producer), Method::GET, "/ojs/v1/scaling", None)
        .await
        .expect_error(403, "forbidden");
    app.send(Method::GET, "/ojs/v1/scaling", None, &[])
        .await
        .expect_error(401, "unauthenticated");
    let bearer = format!("Bearer {admin}");
    app.send(
        Method::GET,
        "/ojs/v1/scaling",
        None,
        &[("authorization", bearer.as_str()), ("x-ojs-tenant", "t1")],
    )
    .await
    .expect_error(403, "forbidden");
}
