//! Manifest, probes, metrics, the test-only reset, and shutdown.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestApp, job};

#[tokio::test]
async fn manifest_describes_the_server() {
    let app = TestApp::spawn().await;
    let resp = app.get("/ojs/manifest").await.expect(200);
    let m = &resp.json;
    assert_eq!(m["specversion"], "1.0");
    assert_eq!(m["implementation"]["name"], "ojsd");
    assert_eq!(m["protocols"], json!(["http"]));
    assert_eq!(m["backend"], "postgres");
    assert_eq!(m["priority"]["default"], 2);
    assert_eq!(m["priority"]["max"], 255);
    assert_eq!(m["priority"]["order"], "ascending");
    assert_eq!(m["limits"]["max_fetch_count"], 1000);
    assert_eq!(
        resp.header("content-type"),
        Some("application/openjobspec+json")
    );
    // Byte-identical on every read.
    assert_eq!(app.get("/ojs/manifest").await.text, resp.text);
    // `extensions` is the binding's list of names (the Rust and Go SDKs parse it so); the
    // structured form is in `extension_details`.
    let names = m["extensions"].as_array().expect("a list");
    assert!(names.iter().all(serde_json::Value::is_string), "{names:?}");
    let detailed: Vec<&serde_json::Value> = ["official", "experimental"]
        .iter()
        .flat_map(|g| m["extension_details"][g].as_array().unwrap())
        .map(|e| &e["name"])
        .collect();
    assert_eq!(names.iter().collect::<Vec<_>>(), detailed);
    for name in ["priority", "cron", "workflows", "rate-limiting"] {
        assert!(names.contains(&json!(name)), "{name} in {names:?}");
    }
}

/// For deployments with the official Python SDK, which reads only bodies labelled
/// `application/json`: every JSON response, errors included, is labelled so.
#[tokio::test]
async fn json_responses_can_be_labelled_application_json() {
    let app = TestApp::spawn_with(|c| {
        c.server.response_content_type = ojsd::config::ResponseContentType::Json;
    })
    .await;
    let pushed = app.post("/ojs/v1/jobs", job("a.b", "q")).await.expect(201);
    assert_eq!(pushed.header("content-type"), Some("application/json"));
    let id = pushed.json["job"]["id"].as_str().unwrap().to_owned();
    for path in [format!("/ojs/v1/jobs/{id}"), "/ojs/manifest".to_owned()] {
        let resp = app.get(&path).await.expect(200);
        assert_eq!(
            resp.header("content-type"),
            Some("application/json"),
            "{path}"
        );
    }
    let missing = app
        .get("/ojs/v1/jobs/00000000-0000-7000-8000-000000000000")
        .await
        .expect(404);
    assert_eq!(missing.json["error"]["code"], "not_found");
    assert_eq!(missing.header("content-type"), Some("application/json"));
    let metrics = app.get("/metrics").await.expect(200);
    assert_eq!(metrics.header("content-type"), Some("text/plain"));
}

#[tokio::test]
async fn health_and_readiness() {
    let app = TestApp::spawn().await;
    app.push(job("a.b", "h-one")).await;
    app.push(job("a.b", "h-two")).await;
    app.post("/ojs/v1/queues/h-two/pause", json!({}))
        .await
        .expect(200);
    app.register(json!({"worker_id": "h-w"})).await.expect(201);
    for path in ["/ojs/v1/health", "/health"] {
        let resp = app.get(path).await.expect(200);
        assert_eq!(resp.json["status"], "ok");
        assert_eq!(resp.json["backend"]["type"], "postgres");
        assert_eq!(resp.json["backend"]["status"], "ok");
        // The admin UI's blocks.
        assert_eq!(
            resp.json["queues"],
            json!({"total": 2, "paused": 1}),
            "{}",
            resp.text
        );
        assert_eq!(
            resp.json["workers"],
            json!({"total": 1, "active": 1, "stale": 0}),
            "{}",
            resp.text
        );
    }
    for path in ["/ojs/v1/ready", "/ready"] {
        assert_eq!(app.get(path).await.expect(200).json["status"], "ready");
    }
}

#[tokio::test]
async fn health_reports_an_unreachable_database_as_503() {
    let app =
        TestApp::spawn_with(|c| c.database.acquire_timeout = std::time::Duration::from_millis(500))
            .await;
    // Cut the server off from its database.
    app.admin_sql(&format!(
        "alter database {} with allow_connections false",
        app.db.name
    ))
    .await;
    app.admin_sql(&format!(
        "select pg_terminate_backend(pid) from pg_stat_activity where datname = '{}' and application_name = 'ojsd'",
        app.db.name
    ))
    .await;
    let resp = app.get("/ojs/v1/health").await.expect(503);
    assert_eq!(resp.json["status"], "unhealthy");
    assert_eq!(resp.json["backend"]["status"], "unhealthy");
    assert!(resp.header("retry-after").is_some());
    assert_eq!(
        app.get("/ready").await.expect(503).json["status"],
        "not_ready"
    );
    // Requests that need the database get 503 backend_error, never a hang or a 500.
    let resp = app
        .post("/ojs/v1/jobs", job("a.b", "q"))
        .await
        .expect_error(503, "backend_error");
    assert!(resp.header("retry-after").is_some());
    app.admin_sql(&format!(
        "alter database {} with allow_connections true",
        app.db.name
    ))
    .await;
    // And the server recovers by itself once the database is back (its pool may first hand
    // out a connection opened while it was away: within a few seconds, not necessarily at once).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let resp = app.post("/ojs/v1/jobs", job("a.b", "q")).await;
        if resp.status == 201 || std::time::Instant::now() > deadline {
            resp.expect(201);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn metrics_are_prometheus_text() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("metered.job", "metered")).await;
    app.fetch_one("metered", "w").await;
    app.ack(json!({"job_id": id})).await.expect(200);
    let resp = app.get("/metrics").await.expect(200);
    assert_eq!(resp.header("content-type"), Some("text/plain"));
    assert!(
        resp.text
            .contains(r#"ojs_job_enqueued_total{queue="metered",type="metered.job"}"#),
        "{}",
        resp.text
    );
    assert!(
        resp.text
            .contains(r#"ojs_job_completed_total{queue="metered",type="metered.job"}"#)
    );
    assert!(resp.text.contains("ojs_http_requests_total"));
}

/// Each queue's latency, the age of its oldest available job, is a gauge workers can be scaled
/// on; a queue that drained reads 0.
#[tokio::test]
async fn the_age_of_each_queues_oldest_available_job_is_a_gauge() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "lagging")).await;
    app.sql(&format!(
        "update ojs_job set enqueued_at = now() - interval '90 seconds' where id = '{id}'"
    ))
    .await;
    let gauge = |text: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(r#"ojs_queue_oldest_available_age_seconds{queue="lagging"}"#))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let first = app.get("/metrics").await.expect(200).text;
    let age = gauge(&first).unwrap_or_else(|| panic!("no gauge in:\n{first}"));
    assert!((90.0..200.0).contains(&age), "{age}");

    app.fetch_one("lagging", "w").await;
    // Gauges are read at most every 5 s.
    tokio::time::sleep(std::time::Duration::from_millis(5_100)).await;
    let drained = app.get("/metrics").await.expect(200).text;
    assert_eq!(gauge(&drained), Some(0.0), "{drained}");
}

#[tokio::test]
async fn reset_exists_only_with_test_hooks() {
    let app = TestApp::spawn().await;
    app.push(job("a.b", "q")).await;
    app.heartbeat(json!({"worker_id": "w"})).await.expect(200);
    assert_eq!(
        app.post("/ojs/v1/admin/reset", json!({}))
            .await
            .expect(200)
            .json,
        json!({"reset": true})
    );
    assert_eq!(app.job_count().await, 0);

    let production = TestApp::spawn_with(|c| c.server.test_hooks = false).await;
    production.push(job("a.b", "q")).await;
    production
        .post("/ojs/v1/admin/reset", json!({}))
        .await
        .expect_error(404, "not_found");
    assert_eq!(production.job_count().await, 1);
}

#[tokio::test]
async fn shutdown_ends_long_polls_and_stops_cleanly() {
    let app = TestApp::spawn().await;
    let client = app.client.clone();
    let url = format!("{}/ojs/v1/workers/fetch", app.base);
    let poll = tokio::spawn(async move {
        client
            .post(url)
            .json(&json!({"queues": ["q"], "wait_ms": 30000}))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    app.until_parked("q", 1).await;
    let stopped = tokio::time::timeout(Duration::from_secs(10), app.stop()).await;
    assert!(
        matches!(stopped, Ok(Ok(()))),
        "stops without waiting out the long poll"
    );
    assert_eq!(
        poll.await.unwrap().unwrap(),
        200,
        "the in-flight long poll was answered"
    );
}

/// A built admin UI is served at `/ojs/admin/` when configured, as a single-page app.
#[tokio::test]
async fn a_configured_admin_ui_is_served_under_ojs_admin() {
    let dir = std::env::temp_dir().join(format!("ojsd-ui-test-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(dir.join("index.html"), "<!doctype html><title>ui</title>").unwrap();
    std::fs::write(dir.join("assets/index-1.js"), "console.log(1)").unwrap();
    let ui = dir.clone();
    let app = TestApp::spawn_with(move |c| c.server.admin_ui_dir = Some(ui)).await;

    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = no_redirects
        .get(format!("{}/ojs/admin", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(base.status(), 308);
    assert_eq!(base.headers()["location"], "/ojs/admin/");
    for page in ["/ojs/admin/", "/ojs/admin/jobs", "/ojs/admin/dead-letter"] {
        let resp = app.get(page).await.expect(200);
        assert_eq!(resp.text, "<!doctype html><title>ui</title>", "{page}");
        assert_eq!(
            resp.header("content-type"),
            Some("text/html; charset=utf-8")
        );
    }
    for asset in [
        "/ojs/admin/assets/index-1.js",
        "/ojs/admin/workflows/assets/index-1.js",
    ] {
        let resp = app.get(asset).await.expect(200);
        assert_eq!(resp.text, "console.log(1)", "{asset}");
        assert_eq!(
            resp.header("content-type"),
            Some("text/javascript; charset=utf-8")
        );
    }
    app.get("/ojs/admin/assets/missing.js")
        .await
        .expect_error(404, "not_found");
    std::fs::remove_dir_all(&dir).unwrap();

    let plain = TestApp::spawn().await;
    plain
        .get("/ojs/admin/")
        .await
        .expect_error(404, "not_found");
    // The settings page's middleware list: none run in the server.
    assert_eq!(
        plain.get("/ojs/v1/middleware").await.expect(200).json,
        json!({"enqueue": [], "execution": []})
    );
}
