//! Per-tenant limits (multi-tenancy extension MT-003/MT-004): concurrency kept with the rate-limit
//! keys' hold and release, enqueue rate and depth admitted under the tenant's row lock — exact
//! across replicas — set and shown by the admin API, counted in `/metrics`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestApp;

/// A request acting as `tenant` (when given) to `base`.
async fn send(
    client: &reqwest::Client,
    base: &str,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = client
        .request(method, format!("{base}{path}"))
        .timeout(Duration::from_secs(30));
    if let Some(tenant) = tenant {
        request = request.header("x-ojs-tenant", tenant);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        headers,
    )
}

async fn set_limits(app: &TestApp, tenant: &str, limits: Value) -> Value {
    app.put(&format!("/ojs/v1/admin/tenants/{tenant}/limits"), limits)
        .await
        .json
}

async fn push_as(app: &TestApp, tenant: &str, queue: &str, n: usize) {
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"type": "t.work", "queue": queue, "args": [i]}))
        .collect();
    let (status, body, _) = send(
        &app.api.client,
        &app.api.base,
        Some(tenant),
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(&json!({"jobs": jobs})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn concurrency_holds_under_32_fetchers_on_two_replicas_and_other_tenants_go_on() {
    const LIMIT: i64 = 3;
    let app = TestApp::spawn().await;
    let replica = app.spawn_replica(|_| {}).await;
    set_limits(&app, "acme", json!({"max_concurrency": LIMIT})).await;
    push_as(&app, "acme", "shared", 60).await;
    push_as(&app, "beta", "shared", 20).await;
    // Held back, out of the dispatch order: only the limit's worth may be claimed.
    let held: i64 = sqlx::query_scalar(
        "select count(*) from ojs_job where tenant = 'acme' and rate_held = false",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(held, 60 - LIMIT);

    let running = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let done: Arc<tokio::sync::Mutex<HashMap<String, usize>>> = Arc::default();
    let bases = [app.api.base.clone(), replica.base.clone()];
    let mut fetchers = Vec::new();
    for n in 0..32 {
        let base = bases[n % 2].clone();
        let client = app.api.client.clone();
        let (running, most, done) = (running.clone(), most.clone(), done.clone());
        fetchers.push(tokio::spawn(async move {
            let worker = format!("w{n}");
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                if done.lock().await.values().sum::<usize>() >= 80 {
                    return;
                }
                let (status, body, _) = send(
                    &client,
                    &base,
                    None,
                    Method::POST,
                    "/ojs/v1/workers/fetch",
                    Some(&json!({"queues": ["shared"], "worker_id": worker, "wait_ms": 200})),
                )
                .await;
                assert_eq!(status, 200, "{body}");
                let Some(job) = body["jobs"].get(0).cloned() else {
                    continue;
                };
                let acme = job["meta"]["tenant_id"] == "acme";
                if acme {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
                if acme {
                    running.fetch_sub(1, Ordering::SeqCst);
                }
                let (status, body, _) = send(
                    &client,
                    &base,
                    None,
                    Method::POST,
                    "/ojs/v1/workers/ack",
                    Some(&json!({"job_id": job["id"], "worker_id": worker})),
                )
                .await;
                assert_eq!(status, 200, "{body}");
                *done
                    .lock()
                    .await
                    .entry(job["meta"]["tenant_id"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }));
    }
    for f in fetchers {
        f.await.unwrap();
    }
    let done = done.lock().await.clone();
    assert_eq!(done.get("acme"), Some(&60), "{done:?}");
    assert_eq!(done.get("beta"), Some(&20), "{done:?}");
    let most = most.load(Ordering::SeqCst);
    assert!(most <= LIMIT, "{most} of acme's jobs ran at once");
    assert!(most >= 2, "the limit, not a trickle: {most}");
    replica.stop().await;
}

#[tokio::test]
async fn depth_and_enqueue_rate_refuse_with_429_exactly_across_replicas() {
    let app = TestApp::spawn().await;
    let replica = app.spawn_replica(|_| {}).await;
    set_limits(&app, "deep", json!({"max_queue_depth": 10})).await;
    set_limits(
        &app,
        "fast",
        json!({"max_enqueue_rate": {"limit": 5, "period": "PT1H"}}),
    )
    .await;
    for (tenant, allowed) in [("deep", 10), ("fast", 5)] {
        let bases = [app.api.base.clone(), replica.base.clone()];
        let pushes: Vec<_> = (0..32)
            .map(|n| {
                let base = bases[n % 2].clone();
                let client = app.api.client.clone();
                tokio::spawn(async move {
                    send(
                        &client,
                        &base,
                        Some(tenant),
                        Method::POST,
                        "/ojs/v1/jobs",
                        Some(&json!({"type": "t.work", "queue": "q", "args": [n]})),
                    )
                    .await
                })
            })
            .collect();
        let mut accepted = 0;
        for p in pushes {
            let (status, body, headers) = p.await.unwrap();
            match status {
                201 => accepted += 1,
                429 => {
                    assert_eq!(body["error"]["code"], "TENANT_LIMIT_EXCEEDED", "{body}");
                    assert_eq!(body["error"]["details"]["tenant_id"], tenant);
                    assert!(headers.contains_key("retry-after"), "{headers:?}");
                }
                other => panic!("{other}: {body}"),
            }
        }
        assert_eq!(accepted, allowed, "{tenant}");
        let stored: i64 = sqlx::query_scalar("select count(*) from ojs_job where tenant = $1")
            .bind(tenant)
            .fetch_one(app.pool())
            .await
            .unwrap();
        assert_eq!(stored, allowed, "{tenant}: nothing refused was written");
    }
    let e = send(
        &app.api.client,
        &app.api.base,
        Some("deep"),
        Method::POST,
        "/ojs/v1/jobs",
        Some(&json!({"type": "t.work", "args": []})),
    )
    .await
    .1;
    assert_eq!(e["error"]["details"]["limit"], "max_queue_depth");
    assert_eq!(e["error"]["details"]["maximum"], 10);
    // A batch is admitted whole or not at all; room made by a claim lets the next one in.
    set_limits(&app, "deep", json!({"max_queue_depth": 12})).await;
    let three: Vec<Value> = (0..3)
        .map(|i| json!({"type": "t.work", "queue": "q", "args": [i]}))
        .collect();
    let three = json!({"jobs": three});
    let batch = || {
        send(
            &app.api.client,
            &app.api.base,
            Some("deep"),
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(&three),
        )
    };
    assert_eq!(batch().await.0, 429);
    app.fetch(json!({"queues": ["q"], "count": 5, "worker_id": "w"}))
        .await;
    let (status, body, _) = batch().await;
    assert_eq!(status, 201, "{body}");
    // Other tenants, and requests acting as none, are not limited.
    push_as(&app, "other", "q", 30).await;
    app.push(json!({"type": "t.work", "queue": "q", "args": []}))
        .await;
    // The refusal is an event and a metric.
    assert!(
        app.event_types()
            .await
            .contains(&"tenant.limit_exceeded".to_owned())
    );
    let metrics = app.get("/metrics").await.text;
    assert!(
        metrics.contains(
            r#"ojs_tenant_limit_exceeded_total{tenant_id="deep",limit="max_queue_depth"}"#
        ),
        "{metrics}"
    );
    replica.stop().await;
}

#[tokio::test]
async fn the_sql_door_keeps_the_same_limits() {
    let app = TestApp::spawn().await;
    set_limits(
        &app,
        "sql",
        json!({"max_queue_depth": 1, "max_concurrency": 0}),
    )
    .await;
    let job = r#"{"type": "t.work", "queue": "q", "args": [], "meta": {"tenant_id": "sql"}}"#;
    let held: bool = sqlx::query_scalar("select ojs_enqueue($1::json) is not null")
        .bind(job)
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert!(held);
    let refused = sqlx::query("select ojs_enqueue($1::json)")
        .bind(job)
        .execute(app.pool())
        .await
        .unwrap_err();
    let db = refused.as_database_error().unwrap();
    assert_eq!(db.code().as_deref(), Some("OJ429"));
    let pg = db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .unwrap();
    let body: Value = serde_json::from_str(pg.detail().unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "TENANT_LIMIT_EXCEEDED");
    // Suspended (max_concurrency 0): its job waits, held, and no FETCH gets it.
    assert!(
        app.fetch(json!({"queues": ["q"], "worker_id": "w"}))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn held_jobs_go_when_the_limit_rises_or_goes_and_a_retry_waits_for_its_tenant() {
    let app = TestApp::spawn().await;
    set_limits(&app, "acme", json!({"max_concurrency": 1})).await;
    push_as(&app, "acme", "q", 4).await;
    let first = app
        .fetch(json!({"queues": ["q"], "count": 10, "worker_id": "w"}))
        .await;
    assert_eq!(first.len(), 1, "one at a time");
    // A NACK that retries at once makes the job available again: it waits for its tenant,
    // and the room it made lets one go.
    let failed = app
        .nack(json!({"job_id": first[0]["id"], "worker_id": "w",
                     "error": {"message": "again"}}))
        .await
        .expect(200)
        .json;
    assert_eq!(failed["job"]["state"], "retryable", "{failed}");
    // Raising the limit lets more go at once, on this replica and the others.
    set_limits(&app, "acme", json!({"max_concurrency": 3})).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < 3 && Instant::now() < deadline {
        got.extend(
            app.fetch(json!({"queues": ["q"], "count": 10, "worker_id": "w"}))
                .await,
        );
    }
    assert_eq!(got.len(), 3);
    // Removing the limits releases everything held.
    app.delete("/ojs/v1/admin/tenants/acme").await.expect(200);
    let held: i64 = sqlx::query_scalar(
        "select count(*) from ojs_job where tenant = 'acme' and rate_held = false",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(held, 0);
}

#[tokio::test]
async fn limits_are_set_shown_and_removed_by_an_admin_and_never_by_a_tenant() {
    let app = TestApp::spawn().await;
    let created = app
        .put(
            "/ojs/v1/admin/tenants/acme",
            json!({"tenant_id": "acme", "reason": "free tier",
                   "limits": {"max_concurrency": 2, "max_queue_depth": 100,
                              "max_enqueue_rate": {"limit": 60, "period": "PT1M"}}}),
        )
        .await
        .expect(201)
        .json;
    assert_eq!(created["configured"], true);
    assert_eq!(created["reason"], "free tier");
    assert_eq!(created["limits"]["max_concurrency"], 2);
    assert_eq!(created["limits"]["max_concurrent_jobs"], 2);
    assert_eq!(created["limits"]["max_jobs_per_second"], 1.0);
    assert_eq!(
        created["limits"]["max_enqueue_rate"],
        json!({"limit": 60, "period": "PT1M"})
    );
    // Only what is named changes; null removes a limit.
    let changed = app
        .put(
            "/ojs/v1/admin/tenants/acme/limits",
            json!({"max_queue_depth": null, "max_concurrency": 0}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(changed["limits"]["max_queue_depth"], Value::Null);
    assert_eq!(changed["limits"]["max_concurrency"], 0);
    assert_eq!(changed["state"], "suspended");
    assert!(changed["limits"]["max_enqueue_rate"].is_object());
    // Configured without jobs: listed and shown.
    let listed = app.get("/ojs/v1/admin/tenants").await.expect(200).json;
    assert_eq!(listed["items"][0]["id"], "acme", "{listed}");
    push_as(&app, "acme", "q", 2).await;
    let stats = app
        .get("/ojs/v1/admin/tenants/acme/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(
        stats["limits"]["max_concurrency"],
        json!({"limit": 0, "current": 0, "held": 2}),
        "{stats}"
    );
    assert_eq!(stats["limits"]["max_enqueue_rate"]["current"], 2);
    let metrics = app.get("/metrics").await.text;
    assert!(
        metrics.contains(r#"ojs_tenant_jobs{tenant_id="acme",state="held"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"ojs_tenant_limit{tenant_id="acme",limit="max_concurrency"} 0"#));
    // Bad limits are named and change nothing.
    for (body, field) in [
        (json!({"max_concurrency": -1}), "$.max_concurrency"),
        (json!({"max_queue_depth": "x"}), "$.max_queue_depth"),
        (
            json!({"max_enqueue_rate": {"limit": 0, "period": "PT1S"}}),
            "$.max_enqueue_rate.limit",
        ),
        (json!({"max_scheduled": 5}), "$.max_scheduled"),
    ] {
        let e = app
            .put("/ojs/v1/admin/tenants/acme/limits", body.clone())
            .await
            .expect_error(400, "invalid_request")
            .json;
        assert_eq!(e["error"]["details"]["field"], field, "{body}: {e}");
    }
    for (body, field) in [
        (json!({"tenant_id": "other"}), "$.tenant_id"),
        (json!({"fairness_weight": 3}), "$.fairness_weight"),
        (json!({"limits": [1]}), "$.limits"),
    ] {
        let e = app
            .put("/ojs/v1/admin/tenants/acme", body.clone())
            .await
            .expect_error(400, "invalid_request")
            .json;
        assert_eq!(e["error"]["details"]["field"], field, "{body}: {e}");
    }
    let shown = app.get("/ojs/v1/admin/tenants/acme").await.expect(200).json;
    assert_eq!(shown["limits"]["max_concurrency"], 0);
    assert_eq!(shown["usage"]["held"], 2);
    // A tenant cannot change its own limits, even with an admin key bound to it.
    let (status, _, _) = send(
        &app.api.client,
        &app.api.base,
        Some("acme"),
        Method::PUT,
        "/ojs/v1/admin/tenants/acme/limits",
        Some(&json!({"max_concurrency": 100})),
    )
    .await;
    assert_eq!(status, 403);
    // Removed: its events tell the story, and it is no longer configured.
    app.delete("/ojs/v1/admin/tenants/acme").await.expect(200);
    app.delete("/ojs/v1/admin/tenants/acme")
        .await
        .expect_error(404, "not_found");
    let types = app.event_types().await;
    for t in ["tenant.created", "tenant.updated", "tenant.deleted"] {
        assert!(types.contains(&t.to_owned()), "{t}: {types:?}");
    }
}
