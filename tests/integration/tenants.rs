//! Tenants: `X-OJS-Tenant` (or a key bound to a tenant) tags a request's jobs and scopes what
//! it reads, cancels and fetches; the admin tenant pages count them.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Resp, TestApp};

/// A request with `X-OJS-Tenant: tenant` (and a key, when given).
async fn as_tenant(
    app: &TestApp,
    tenant: Option<&str>,
    key: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Resp {
    let authorization = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(t) = tenant {
        headers.push(("x-ojs-tenant", t));
    }
    if let Some(value) = &authorization {
        headers.push(("authorization", value));
    }
    app.send(
        method,
        path,
        body.map(|b| b.to_string().into_bytes()),
        &headers,
    )
    .await
}

async fn push_as(app: &TestApp, tenant: &str, body: Value) -> Value {
    as_tenant(
        app,
        Some(tenant),
        None,
        Method::POST,
        "/ojs/v1/jobs",
        Some(body),
    )
    .await
    .expect(201)
    .json["job"]
        .clone()
}

async fn fetch_as(app: &TestApp, tenant: Option<&str>, queue: &str, count: usize) -> Vec<Value> {
    let body = json!({"queues": [queue], "worker_id": "w-t", "count": count});
    as_tenant(
        app,
        tenant,
        None,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(body),
    )
    .await
    .expect(200)
    .json["jobs"]
        .as_array()
        .unwrap()
        .clone()
}

fn tenants_of(jobs: &[Value]) -> Vec<&str> {
    jobs.iter()
        .map(|j| j["meta"]["tenant_id"].as_str().unwrap_or("-"))
        .collect()
}

#[tokio::test]
async fn the_header_tags_every_job_of_a_request_and_a_conflict_is_refused() {
    let app = TestApp::spawn().await;
    let job = push_as(
        &app,
        "acme",
        json!({"type": "t.a", "queue": "tq", "args": [], "meta": {"k": 1}}),
    )
    .await;
    assert_eq!(job["meta"], json!({"k": 1, "tenant_id": "acme"}));
    // The same tenant in the body is fine; another is refused, and nothing is written.
    push_as(
        &app,
        "acme",
        json!({"type": "t.a", "queue": "tq", "args": [], "meta": {"tenant_id": "acme"}}),
    )
    .await;
    let before = app.job_count().await;
    let e = as_tenant(
        &app,
        Some("acme"),
        None,
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "t.a", "args": [], "meta": {"tenant_id": "beta"}})),
    )
    .await
    .expect_error(400, "invalid_request");
    assert_eq!(e.json["error"]["details"]["field"], "$.meta.tenant_id");
    for bad in ["-lead", "has space", "ü", &"x".repeat(256)] {
        let e = as_tenant(
            &app,
            Some(bad),
            None,
            Method::POST,
            "/ojs/v1/jobs",
            Some(json!({"type": "t.a", "args": []})),
        )
        .await;
        // A header value that is not ASCII never reaches the server as such; either way 400.
        assert_eq!(e.status, 400, "{bad:?}: {}", e.text);
    }
    assert_eq!(app.job_count().await, before);

    // A batch: every job, all or nothing.
    let batch = as_tenant(
        &app,
        Some("acme"),
        None,
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({"jobs": [{"type": "t.a", "args": [1]}, {"type": "t.a", "args": [2]}]})),
    )
    .await
    .expect(201)
    .json;
    assert_eq!(
        tenants_of(batch["jobs"].as_array().unwrap()),
        ["acme", "acme"]
    );
    // A workflow: every step.
    let flow = as_tenant(
        &app,
        Some("acme"),
        None,
        Method::POST,
        "/ojs/v1/workflows",
        Some(json!({"type": "chain", "steps": [{"type": "t.a", "args": []}, {"type": "t.b", "args": []}]})),
    )
    .await
    .expect(201)
    .json;
    let flow_id = flow["workflow"]["id"].as_str().unwrap().to_owned();
    let tagged: i64 = sqlx::query_scalar(
        "select count(*) from ojs_job where extra ->> 'workflow_id' = $1 and tenant = 'acme'",
    )
    .bind(&flow_id)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(tagged, 2, "{flow}");

    // Without the header nothing is added, and a body's tenant is kept as sent.
    let plain = app
        .push(json!({"type": "t.a", "args": [], "meta": {"tenant_id": "gamma"}}))
        .await;
    assert_eq!(plain["meta"], json!({"tenant_id": "gamma"}));
    let none = app.push(json!({"type": "t.a", "args": []})).await;
    assert_eq!(none["meta"], json!({}));
}

#[tokio::test]
async fn a_tenant_sees_cancels_and_fetches_only_its_own_jobs() {
    let app = TestApp::spawn().await;
    // B's job is first in the queue.
    let b = push_as(
        &app,
        "beta",
        json!({"type": "t.a", "queue": "shared", "args": ["b"]}),
    )
    .await;
    let a = push_as(
        &app,
        "alpha",
        json!({"type": "t.a", "queue": "shared", "args": ["a"]}),
    )
    .await;
    let untagged = app
        .push(json!({"type": "t.a", "queue": "shared", "args": ["none"]}))
        .await;
    let (a_id, b_id) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());

    // Reads: another tenant's job (or an untagged one) does not exist for a tenant.
    for (tenant, id, status) in [
        ("alpha", a_id, 200),
        ("alpha", b_id, 404),
        ("beta", b_id, 200),
        ("alpha", untagged["id"].as_str().unwrap(), 404),
    ] {
        let path = format!("/ojs/v1/jobs/{id}");
        let r = as_tenant(&app, Some(tenant), None, Method::GET, &path, None).await;
        assert_eq!(r.status, status, "{tenant} GET {id}: {}", r.text);
    }
    // Cancel and reprioritise: refused as not found, the job untouched.
    let path = format!("/ojs/v1/jobs/{b_id}");
    as_tenant(&app, Some("alpha"), None, Method::DELETE, &path, None)
        .await
        .expect_error(404, "not_found");
    as_tenant(
        &app,
        Some("alpha"),
        None,
        Method::PATCH,
        &path,
        Some(json!({"priority": 0})),
    )
    .await
    .expect_error(404, "not_found");
    let b_now = app.job(b_id).await;
    assert_eq!(
        (b_now["state"].as_str(), b_now["priority"].as_i64()),
        (Some("available"), Some(2))
    );

    // FETCH: alpha gets its job though beta's is ahead; the untagged job is nobody's.
    let got = fetch_as(&app, Some("alpha"), "shared", 10).await;
    assert_eq!(tenants_of(&got), ["alpha"]);
    assert!(fetch_as(&app, Some("alpha"), "shared", 10).await.is_empty());
    // Without a tenant a FETCH takes any job, in queue order.
    let rest = fetch_as(&app, None, "shared", 10).await;
    assert_eq!(tenants_of(&rest), ["beta", "-"]);

    // A tenant's own cancel works.
    let c = push_as(
        &app,
        "alpha",
        json!({"type": "t.a", "queue": "shared", "args": []}),
    )
    .await;
    let path = format!("/ojs/v1/jobs/{}", c["id"].as_str().unwrap());
    as_tenant(&app, Some("alpha"), None, Method::DELETE, &path, None)
        .await
        .expect(200);
}

#[tokio::test]
async fn a_tenants_long_poll_wakes_for_its_job_and_leaves_others_jobs_alone() {
    let app = TestApp::spawn().await;
    let base = app.api.base.clone();
    let waiting = tokio::spawn(async move {
        ojsd::app::install_tls();
        let client = reqwest::Client::new();
        let started = Instant::now();
        let resp: Value = client
            .post(format!("{base}/ojs/v1/workers/fetch"))
            .header("x-ojs-tenant", "alpha")
            .json(&json!({"queues": ["lp"], "worker_id": "w-a", "wait_ms": 5000}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (resp, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Beta's job is not handed to alpha's waiting FETCH; alpha's is.
    let b = push_as(
        &app,
        "beta",
        json!({"type": "t.a", "queue": "lp", "args": []}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    push_as(
        &app,
        "alpha",
        json!({"type": "t.a", "queue": "lp", "args": []}),
    )
    .await;
    let (resp, waited) = waiting.await.unwrap();
    assert_eq!(
        tenants_of(resp["jobs"].as_array().unwrap()),
        ["alpha"],
        "{resp}"
    );
    assert!(
        waited < Duration::from_secs(4),
        "woken, not timed out: {waited:?}"
    );
    assert_eq!(
        app.job(b["id"].as_str().unwrap()).await["state"],
        "available"
    );
}

#[tokio::test]
async fn a_key_bound_to_a_tenant_acts_as_that_tenant() {
    let app = TestApp::spawn().await;
    let admin = app.create_key(None, json!({"role": "admin"})).await;
    let bound = app
        .create_key(Some(&admin), json!({"role": "producer", "tenant": "acme"}))
        .await;
    // An admin key may be bound too (it administers that tenant alone); a bad tenant is
    // refused.
    app.create_key(Some(&admin), json!({"role": "admin", "tenant": "acme"}))
        .await;
    as_tenant(
        &app,
        None,
        Some(&admin),
        Method::POST,
        "/ojs/v1/admin/keys",
        Some(json!({"role": "producer", "tenant": "no spaces"})),
    )
    .await
    .expect_error(400, "invalid_request");
    let listed = as_tenant(
        &app,
        None,
        Some(&admin),
        Method::GET,
        "/ojs/v1/admin/keys",
        None,
    )
    .await
    .expect(200)
    .json;
    assert!(
        listed["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["tenant"] == "acme"),
        "{listed}"
    );

    // Its jobs are tagged without a header; a header naming another tenant is refused.
    let job = as_tenant(
        &app,
        None,
        Some(&bound),
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "t.a", "args": []})),
    )
    .await
    .expect(201)
    .json["job"]
        .clone();
    assert_eq!(job["meta"]["tenant_id"], "acme");
    as_tenant(
        &app,
        Some("beta"),
        Some(&bound),
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "t.a", "args": []})),
    )
    .await
    .expect_error(403, "forbidden");
    as_tenant(
        &app,
        Some("acme"),
        Some(&bound),
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "t.a", "args": []})),
    )
    .await
    .expect(201);
    // Another tenant's job does not exist for it, even without a header.
    let other = as_tenant(
        &app,
        Some("beta"),
        Some(&admin),
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "t.a", "args": []})),
    )
    .await
    .expect(201)
    .json["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    as_tenant(
        &app,
        None,
        Some(&bound),
        Method::GET,
        &format!("/ojs/v1/jobs/{other}"),
        None,
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn the_admin_tenant_pages_count_each_tenants_jobs() {
    let app = TestApp::spawn().await;
    for (tenant, queue) in [
        ("alpha", "q1"),
        ("alpha", "q2"),
        ("alpha", "q2"),
        ("beta", "q1"),
    ] {
        push_as(
            &app,
            tenant,
            json!({"type": "t.a", "queue": queue, "args": []}),
        )
        .await;
    }
    app.push(json!({"type": "t.a", "queue": "q1", "args": []}))
        .await;
    // One of alpha's runs, and one completes.
    let running = fetch_as(&app, Some("alpha"), "q1", 1).await;
    let done = fetch_as(&app, Some("alpha"), "q2", 1).await;
    app.ack_job(&done[0], "w-t").await.expect(200);

    let list = app
        .get("/ojs/v1/admin/tenants?page=1&per_page=1")
        .await
        .expect(200)
        .json;
    assert_eq!(list["pagination"]["total"], 2, "{list}");
    let alpha = &list["items"][0];
    assert_eq!(alpha["id"], "alpha");
    assert_eq!(alpha["name"], "alpha");
    assert_eq!(alpha["state"], "active");
    assert_eq!(alpha["stats"]["queues"], 2);
    assert_eq!(alpha["stats"]["workers"], 1);
    assert_eq!(alpha["stats"]["jobs"]["active"], 1);
    assert_eq!(alpha["stats"]["jobs"]["available"], 1);
    assert_eq!(alpha["stats"]["jobs"]["completed"], 1);
    assert!(alpha["created_at"].is_string());
    let second = app
        .get("/ojs/v1/admin/tenants?page=2&per_page=1")
        .await
        .expect(200)
        .json;
    assert_eq!(second["items"][0]["id"], "beta");

    let one = app
        .get("/ojs/v1/admin/tenants/alpha")
        .await
        .expect(200)
        .json;
    assert_eq!(&one, alpha);
    app.get("/ojs/v1/admin/tenants/nobody")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/admin/tenants/bad%20id")
        .await
        .expect_error(400, "invalid_request");

    let stats = app
        .get("/ojs/v1/admin/tenants/alpha/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(stats["tenant_id"], "alpha");
    assert_eq!(stats["total_jobs"], 3);
    assert_eq!(stats["jobs"]["completed_24h"], 1);
    let nobody = app
        .get("/ojs/v1/admin/tenants/nobody/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(nobody["total_jobs"], 0);

    let jobs = app
        .get("/ojs/v1/admin/tenants/alpha/jobs?state=active,completed")
        .await
        .expect(200)
        .json;
    let ids: Vec<&str> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(jobs["pagination"]["total"], 2, "{jobs}");
    assert!(ids.contains(&running[0]["id"].as_str().unwrap()));
    // The manifest says so, for the admin UI.
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["capabilities"]["multi_tenancy"], true);
    assert_eq!(manifest["capabilities"]["job_versioning"], true);
}
