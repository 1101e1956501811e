//! Tenant scope on every route: with tenant `a`'s keys (producer, worker, admin, and an
//! unbound admin key sending `X-OJS-Tenant: a`), every operation of the served OpenAPI document
//! is tried against tenant `b`'s jobs (in each state), workflow, worker and cron entry. No
//! answer may be a 2xx about `b`'s things, no answer may carry any of them, and afterwards `b`'s
//! rows are exactly as they were. A route added later is walked too, by construction.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestApp;

const A: &str = "tenant-a";
const B: &str = "tenant-b";
const B_WORKER: &str = "worker-of-b";
const B_CRON: &str = "cron-of-b";
const B_SECRET: &str = "b-secret-9f1c";

/// A request, raw (streams must not be read to their end), with an optional key and tenant.
async fn call(
    app: &TestApp,
    key: Option<&str>,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let mut request = app
        .api
        .client
        .request(method, format!("{}{path}", app.api.base))
        .timeout(Duration::from_secs(10));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(tenant) = tenant {
        request = request.header("x-ojs-tenant", tenant);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let mut response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let stream = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !stream {
        return (status, response.text().await.expect("a body"));
    }
    // An event stream never ends: what it sends in a moment is what it carries.
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    (status, text)
}

/// `b`'s world, made acting as `b` before any key exists.
struct World {
    /// `b`'s jobs: available, pending, scheduled, active, dead-lettered, completed.
    jobs: Vec<String>,
    workflow: String,
    workflow_jobs: Vec<String>,
}

impl World {
    /// Everything that names something of `b`'s.
    fn markers(&self) -> Vec<String> {
        let mut markers: Vec<String> = self
            .jobs
            .iter()
            .chain(&self.workflow_jobs)
            .cloned()
            .collect();
        markers.extend(
            [&self.workflow, B_WORKER, B_CRON, B, B_SECRET]
                .iter()
                .map(|s| s.to_string()),
        );
        markers
    }
}

async fn as_b(app: &TestApp, method: Method, path: &str, body: Value) -> Value {
    let (status, text) = call(app, None, Some(B), method, path, Some(&body)).await;
    assert!((200..300).contains(&status), "{path} as b: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

async fn b_job(app: &TestApp, queue: &str, extra: Value) -> String {
    let mut job = json!({"type": "b.work", "queue": queue, "args": [B_SECRET]});
    job.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    as_b(app, Method::POST, "/ojs/v1/jobs", job).await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn b_claim(app: &TestApp, queue: &str) -> String {
    let fetched = as_b(
        app,
        Method::POST,
        "/ojs/v1/workers/fetch",
        json!({"queues": [queue], "worker_id": B_WORKER}),
    )
    .await;
    fetched["jobs"][0]["id"].as_str().unwrap().to_owned()
}

async fn make_world(app: &TestApp) -> World {
    as_b(
        app,
        Method::POST,
        "/ojs/v1/workers/register",
        json!({"worker_id": B_WORKER, "queues": ["qb"]}),
    )
    .await;
    let available = b_job(app, "qb", json!({})).await;
    let pending = b_job(app, "qb", json!({"pending": true})).await;
    let scheduled = b_job(app, "qb", json!({"scheduled_at": "+PT1H"})).await;
    b_job(app, "qb-run", json!({})).await;
    let active = b_claim(app, "qb-run").await;
    b_job(app, "qb-dead", json!({"retry": {"max_attempts": 1}})).await;
    let dead = b_claim(app, "qb-dead").await;
    as_b(
        app,
        Method::POST,
        "/ojs/v1/workers/nack",
        json!({"job_id": dead, "worker_id": B_WORKER, "error": {"message": B_SECRET}}),
    )
    .await;
    b_job(app, "qb-done", json!({})).await;
    let done = b_claim(app, "qb-done").await;
    as_b(
        app,
        Method::POST,
        "/ojs/v1/workers/ack",
        json!({"job_id": done, "worker_id": B_WORKER, "result": {"r": B_SECRET}}),
    )
    .await;
    let workflow = as_b(
        app,
        Method::POST,
        "/ojs/v1/workflows",
        json!({"type": "chain", "name": "b-flow", "steps": [
            {"type": "b.step", "args": [B_SECRET], "options": {"queue": "qb-flow"}},
            {"type": "b.step", "args": [B_SECRET], "options": {"queue": "qb-flow"}}]}),
    )
    .await;
    let workflow_id = workflow["workflow"]["id"].as_str().unwrap().to_owned();
    let workflow_jobs = workflow["workflow"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["job_id"].as_str().map(str::to_owned))
        .collect();
    as_b(
        app,
        Method::POST,
        "/ojs/v1/cron",
        json!({"name": B_CRON, "expression": "0 0 1 1 *",
               "job_template": {"type": "b.cron", "queue": "qb", "args": [B_SECRET]}}),
    )
    .await;
    World {
        jobs: vec![available, pending, scheduled, active, dead, done],
        workflow: workflow_id,
        workflow_jobs,
    }
}

/// A digest of every row of `b`'s, and of the events about them.
async fn fingerprint(app: &TestApp) -> String {
    sqlx::query_scalar::<_, String>(
        r#"
        with b_jobs as (select id from ojs_job_all where tenant = $1)
        select md5(coalesce(string_agg(x, '|' order by x), '')) from (
            select j::text as x from ojs_job_all j where j.tenant = $1
            union all select w::text from ojs_workflow w where w.tenant = $1
            union all select n::text from ojs_workflow_node n
                       join ojs_workflow w on w.id = n.workflow_id where w.tenant = $1
            union all select k::text from ojs_worker k where k.id = $2
            union all select c::text from ojs_cron c where c.name = $3
            union all select count(*)::text from ojs_event e
                       where e.job_id in (select id from b_jobs)
                          or e.job_ids && array(select id from b_jobs)
                          or e.subject in ($2, $3)
        ) rows
        "#,
    )
    .bind(B)
    .bind(B_WORKER)
    .bind(B_CRON)
    .fetch_one(app.pool())
    .await
    .unwrap()
}

/// The concrete paths of a documented template, naming `b`'s things where it names one.
fn paths(template: &str, world: &World) -> Vec<String> {
    let fill = |id: &str| {
        template
            .replace("{worker_id}", B_WORKER)
            .replace("{directive}", "quiet")
            .replace("{action}", "cancel")
            .replace("{type}", "b.work")
            .replace("{version}", "1")
            .replace("{key}", "queue:qb")
            .replace("{id}", id)
            .replace("{name}", id)
    };
    if template.starts_with("/ojs/v1/workflows/") {
        return vec![fill(&world.workflow)];
    }
    if template.starts_with("/ojs/v1/admin/tenants/") {
        return vec![fill(B)];
    }
    if template.starts_with("/ojs/v1/cron") {
        return vec![fill(B_CRON)];
    }
    if template.contains("/queues/") || template.contains("/pools/") {
        return vec![fill("qb")];
    }
    if template.contains("{id}")
        && (template.contains("/jobs/") || template.contains("dead-letter"))
    {
        return world.jobs.iter().map(|id| fill(id)).collect();
    }
    vec![fill("0196b7a0-0000-7000-8000-000000000000")]
}

/// Bodies that would act on `b`'s things, were the rule broken.
fn bodies(method: &Method, template: &str, world: &World) -> Vec<Option<Value>> {
    if *method == Method::GET {
        return vec![None];
    }
    let jobs = &world.jobs;
    let each = |f: &dyn Fn(&String) -> Value| jobs.iter().map(|j| Some(f(j))).collect();
    match template {
        "/ojs/v1/workers/ack" => each(&|j| json!({"job_id": j})),
        "/ojs/v1/workers/nack" => {
            each(&|j| json!({"job_id": j, "error": {"message": "x"}, "worker_id": B_WORKER}))
        }
        "/ojs/v1/workers/ack/batch" => each(&|j| json!({"acks": [{"job_id": j}]})),
        "/ojs/v1/workers/nack/batch" => {
            each(&|j| json!({"nacks": [{"job_id": j, "error": {"message": "x"}}]}))
        }
        "/ojs/v1/workers/progress" => each(&|j| json!({"job_id": j, "progress": 0.5})),
        "/ojs/v1/workers/heartbeat" | "/ojs/v1/workers/beat" => vec![
            Some(json!({"worker_id": B_WORKER, "active_jobs": jobs})),
            Some(json!({"worker_id": "worker-of-a", "active_jobs": jobs})),
        ],
        "/ojs/v1/workers/fetch" => vec![
            Some(json!({"queues": ["qb", "qb-flow"], "worker_id": B_WORKER})),
            Some(json!({"queues": ["qb", "qb-flow"], "count": 10})),
        ],
        "/ojs/v1/workers/register" => vec![Some(json!({"worker_id": B_WORKER}))],
        "/ojs/v1/jobs/{id}/progress" => vec![Some(json!({"progress": 0.5}))],
        "/ojs/v1/jobs/{id}" | "/ojs/v1/admin/jobs/{id}" => vec![Some(json!({"priority": 1}))],
        "/ojs/v1/cron/{name}" | "/ojs/v1/crons/{id}" => vec![Some(json!({"enabled": false}))],
        "/ojs/v1/jobs" => vec![Some(json!({"type": "a.work", "args": [], "id": jobs[0]}))],
        _ => vec![Some(json!({"confirm": true, "filter": {}}))],
    }
}

#[tokio::test]
async fn one_tenant_sees_and_changes_nothing_of_anothers_on_any_route() {
    let app = TestApp::spawn().await;
    let world = make_world(&app).await;
    let markers = world.markers();

    // Keys, now that b's world exists: from here on every request needs one.
    let create_key = |body: Value| {
        let app = &app;
        async move {
            let admin = body.get("admin").and_then(Value::as_str).map(str::to_owned);
            let (status, text) = call(
                app,
                admin.as_deref(),
                None,
                Method::POST,
                "/ojs/v1/admin/keys",
                Some(&body["key"]),
            )
            .await;
            assert_eq!(status, 201, "{text}");
            serde_json::from_str::<Value>(&text).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let root = create_key(json!({"key": {"role": "admin"}})).await;
    let mut identities = Vec::new();
    for role in ["producer", "worker", "admin"] {
        let key = create_key(json!({"admin": root, "key": {"role": role, "tenant": A}})).await;
        identities.push((format!("a's {role} key"), key, None));
    }
    identities.push(("X-OJS-Tenant: a".to_owned(), root.clone(), Some(A)));

    let before = fingerprint(&app).await;
    let doc: Value = serde_json::from_str(
        &call(&app, None, None, Method::GET, "/ojs/openapi.json", None)
            .await
            .1,
    )
    .unwrap();
    let mut walked = 0;
    let mut failures = Vec::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        if template == "/ojs/v1/admin/reset" {
            continue;
        }
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let method: Method = method.to_uppercase().parse().unwrap();
            let names_b = template.contains('{')
                && !template.contains("/queues/{name}")
                && !template.contains("/pools/")
                && !template.contains("/schemas/")
                && !template.contains("/rate-limits/")
                && !template.contains("/keys/")
                && !template.contains("/webhooks/")
                && !template.contains("{action}");
            for path in paths(template, &world) {
                let query = if method == Method::DELETE {
                    "?confirm=true"
                } else {
                    ""
                };
                for body in bodies(&method, template, &world) {
                    for (who, key, tenant) in &identities {
                        let path = format!("{path}{query}");
                        let (status, text) = call(
                            &app,
                            Some(key),
                            *tenant,
                            method.clone(),
                            &path,
                            body.as_ref(),
                        )
                        .await;
                        walked += 1;
                        assert!(status < 500, "{method} {path} ({who}): {status} {text}");
                        if !(200..300).contains(&status) {
                            continue;
                        }
                        if names_b {
                            failures.push(format!("{method} {path} ({who}): {status} {text}"));
                        } else if let Some(m) = markers.iter().find(|m| text.contains(m.as_str())) {
                            failures.push(format!(
                                "{method} {path} ({who}) answered {status} with b's {m}: {text}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(walked > 500, "{walked} requests");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(fingerprint(&app).await, before, "b's rows changed");
}

#[tokio::test]
async fn the_four_requests_that_crossed_the_line_answer_404_and_change_nothing() {
    let app = TestApp::spawn().await;
    let world = make_world(&app).await;
    let before = fingerprint(&app).await;
    let job = &world.jobs[0];
    let workflow = &world.workflow;
    for (method, path) in [
        (Method::GET, format!("/ojs/v1/jobs/{job}/events")),
        (Method::GET, format!("/ojs/v1/jobs/{job}/progress")),
        (Method::GET, format!("/ojs/v1/workflows/{workflow}")),
        (Method::DELETE, format!("/ojs/v1/workflows/{workflow}")),
        (Method::POST, format!("/ojs/v1/workflows/{workflow}/cancel")),
    ] {
        let (status, text) = call(&app, None, Some(A), method.clone(), &path, None).await;
        assert_eq!(status, 404, "{method} {path}: {text}");
        assert!(text.contains("not_found"), "{text}");
    }
    assert_eq!(fingerprint(&app).await, before);
    // b itself still reads and cancels them.
    let (status, _) = call(
        &app,
        None,
        Some(B),
        Method::GET,
        &format!("/ojs/v1/jobs/{job}/progress"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, text) = call(
        &app,
        None,
        Some(B),
        Method::DELETE,
        &format!("/ojs/v1/workflows/{workflow}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn a_tenant_reads_and_acts_on_its_own_things_through_the_same_routes() {
    let app = TestApp::spawn().await;
    let world = make_world(&app).await;
    let as_a = |method: Method, path: String, body: Option<Value>| {
        let app = &app;
        async move {
            let (status, text) = call(app, None, Some(A), method, &path, body.as_ref()).await;
            (
                status,
                serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
                text,
            )
        }
    };
    let (status, job, _) = as_a(
        Method::POST,
        "/ojs/v1/jobs".into(),
        Some(json!({"type": "a.work", "queue": "qa", "args": []})),
    )
    .await;
    assert_eq!(status, 201);
    let id = job["job"]["id"].as_str().unwrap().to_owned();
    for path in [
        format!("/ojs/v1/jobs/{id}"),
        format!("/ojs/v1/jobs/{id}/progress"),
        format!("/ojs/v1/admin/jobs/{id}"),
    ] {
        let (status, _, text) = as_a(Method::GET, path.clone(), None).await;
        assert_eq!(status, 200, "{path}: {text}");
    }
    // Its worker: registered, heartbeating, fetching its job; ACK.
    let (status, _, text) = as_a(
        Method::POST,
        "/ojs/v1/workers/register".into(),
        Some(json!({"worker_id": "worker-of-a", "queues": ["qa"]})),
    )
    .await;
    assert_eq!(status, 201, "{text}");
    let (status, fetched, text) = as_a(
        Method::POST,
        "/ojs/v1/workers/fetch".into(),
        Some(json!({"queues": ["qa", "qb"], "worker_id": "worker-of-a", "count": 10})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(fetched["jobs"].as_array().unwrap().len(), 1, "{fetched}");
    let (status, _, text) = as_a(
        Method::POST,
        "/ojs/v1/workers/heartbeat".into(),
        Some(json!({"worker_id": "worker-of-a", "active_jobs": [id]})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, _, text) = as_a(
        Method::POST,
        "/ojs/v1/workers/ack".into(),
        Some(json!({"job_id": id, "worker_id": "worker-of-a"})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, _, text) = as_a(
        Method::GET,
        "/ojs/v1/workers/worker-of-a/health".into(),
        None,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    // Listings show its own only.
    let (_, workers, _) = as_a(Method::GET, "/ojs/v1/admin/workers".into(), None).await;
    let listed: Vec<&str> = workers["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["worker-of-a"]);
    let (_, jobs, _) = as_a(Method::GET, "/ojs/v1/admin/jobs".into(), None).await;
    assert_eq!(jobs["pagination"]["total"], 1, "{jobs}");
    let (_, other, _) = as_a(Method::GET, format!("/ojs/v1/admin/jobs?tenant={B}"), None).await;
    assert_eq!(other["pagination"]["total"], 0, "{other}");
    // Queue counts are its own jobs' counts.
    let (_, queue, _) = as_a(Method::GET, "/ojs/v1/queues/qb".into(), None).await;
    assert_eq!(queue["queue"]["name"], "qb");
    assert_eq!(queue["stats"]["available"], 0, "{queue}");
    // Its workflow and cron entry.
    let (status, flow, text) = as_a(
        Method::POST,
        "/ojs/v1/workflows".into(),
        Some(json!({"type": "chain", "steps": [{"type": "a.step", "args": []}]})),
    )
    .await;
    assert_eq!(status, 201, "{text}");
    let flow = flow["workflow"]["id"].as_str().unwrap().to_owned();
    let (_, flows, _) = as_a(Method::GET, "/ojs/v1/workflows".into(), None).await;
    assert_eq!(flows["pagination"]["total"], 1, "{flows}");
    let (status, _, _) = as_a(Method::GET, format!("/ojs/v1/workflows/{flow}"), None).await;
    assert_eq!(status, 200);
    let (status, cron, text) = as_a(
        Method::POST,
        "/ojs/v1/cron".into(),
        Some(json!({"name": "cron-of-a", "expression": "0 0 1 1 *",
                    "job_template": {"type": "a.cron", "args": [], "meta": {"k": 1}}})),
    )
    .await;
    assert_eq!(status, 201, "{text}");
    assert_eq!(
        cron["cron"]["job_template"]["meta"],
        json!({"k": 1, "tenant_id": A}),
        "{cron}"
    );
    let (_, crons, _) = as_a(Method::GET, "/ojs/v1/cron".into(), None).await;
    assert_eq!(crons["count"], 1, "{crons}");
    // b's cron name is taken, and stays b's.
    let (status, _, text) = as_a(
        Method::POST,
        "/ojs/v1/cron".into(),
        Some(json!({"name": B_CRON, "expression": "* * * * *", "job_template": {"type": "a.x"}})),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    // Events: its own only, and the cursor goes on past b's.
    // (Events are delivered once every older transaction of the cluster has ended.)
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        let (_, events, _) = as_a(Method::GET, "/ojs/v1/events?limit=1000".into(), None).await;
        let text = serde_json::to_string(&events["events"]).unwrap();
        if text.contains(&id) || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for marker in world.markers() {
        assert!(!text.contains(&marker), "b's {marker} in a's events");
    }
    assert!(text.contains(&id), "a's own job's events");
    // A unique policy finds duplicates among the tenant's own jobs only: a job like b's is a's
    // own new job, not b's answered back.
    let unique = json!({"type": "b.once", "queue": "qb-once", "args": [B_SECRET],
                        "unique": {"keys": ["type", "queue", "args"]}});
    let b_once =
        as_b(&app, Method::POST, "/ojs/v1/jobs", unique.clone()).await["job"]["id"].clone();
    let (status, like_b, text) = as_a(Method::POST, "/ojs/v1/jobs".into(), Some(unique)).await;
    assert_eq!(status, 201, "{text}");
    assert_ne!(like_b["job"]["id"], b_once);
    assert_eq!(like_b["job"]["meta"]["tenant_id"], A);
}

#[tokio::test]
async fn a_tenants_queue_stream_carries_its_events_only() {
    let app = TestApp::spawn().await;
    let (status, _) = call(
        &app,
        None,
        Some(B),
        Method::POST,
        "/ojs/v1/jobs",
        Some(&json!({"type": "b.work", "queue": "shared", "args": [B_SECRET]})),
    )
    .await;
    assert_eq!(status, 201);
    // Replay from the start of the log, then live.
    let mut stream = app
        .api
        .client
        .get(format!("{}/ojs/v1/queues/shared/events", app.api.base))
        .header("x-ojs-tenant", A)
        .header("last-event-id", "evt_00000000-0000-7000-8000-000000000000")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    for tenant in [B, A] {
        call(
            &app,
            None,
            Some(tenant),
            Method::POST,
            "/ojs/v1/jobs",
            Some(&json!({"type": "x.work", "queue": "shared", "args": [tenant]})),
        )
        .await;
    }
    let a_job = sqlx::query_scalar::<_, uuid::Uuid>("select id from ojs_job where tenant = $1")
        .bind(A)
        .fetch_one(app.pool())
        .await
        .unwrap()
        .to_string();
    // b's second job was enqueued before a's: had it leaked, it would come first. (Events are
    // delivered once every older transaction of the cluster has ended; other tests' may hold
    // them back a while.)
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !text.contains(&a_job) {
        match tokio::time::timeout_at(deadline, stream.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    assert!(text.contains(&a_job), "a's event: {text}");
    let b_jobs = sqlx::query_scalar::<_, uuid::Uuid>("select id from ojs_job where tenant = $1")
        .bind(B)
        .fetch_all(app.pool())
        .await
        .unwrap();
    for id in b_jobs {
        assert!(
            !text.contains(&id.to_string()),
            "b's job {id} in a's stream: {text}"
        );
    }
}
