//! Rolling upgrades: this release keeps serving while the next release's migration expands the
//! schema under it. A rolling update migrates the database when the first new replica starts;
//! the replicas still on this release go on with connections (and prepared statements) made
//! before. What an expand-only migration may do (`tests/integration/migration_lint.rs` keeps new
//! migrations to it): add a nullable column or one with a default to any table (the job tables
//! included, with `ojs_job_all` restated), add tables, add functions under new names.
//!
//! The test makes those changes to every table of the schema at once, between two runs of the
//! same traffic through one server: every request of the second run must be answered as the
//! first was (no 5xx, the same statuses), the maintenance passes must work, and no job may be
//! lost.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use ojsd::maintenance::Service;

use crate::support::{TestApp, job};

/// The column every table gains, as the next release's migration would add one.
const ADDED: &str = "next_release_column";

/// One round of traffic through most of the API: every job operation (enqueue, claim, ACK
/// answering the whole job, NACK, retry, cancel, dead letter), durable execution, workflows,
/// cron, webhooks, tenants, queues, the admin reads and every documented GET without a path
/// parameter. Returns each request's `method path` and status, in order.
async fn traffic(app: &TestApp, round: &str) -> Vec<(String, u16)> {
    let mut seen = Vec::new();
    let q = format!("upgrade-{round}");
    let worker = format!("worker-{round}");
    let mut call = async |method: Method, path: String, body: Option<Value>| -> Value {
        let resp = tokio::time::timeout(
            Duration::from_secs(30),
            app.api.send(
                method.clone(),
                &path,
                body.map(|b| b.to_string().into_bytes()),
                &[
                    ("content-type", "application/json"),
                    ("prefer", "return=representation"),
                ],
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{method} {path} answered within 30 s"));
        assert!(
            resp.status < 500,
            "{method} {path} answered {}: {}",
            resp.status,
            resp.text
        );
        let label = path.replace(round, "R");
        let label = label
            .split('/')
            .map(|part| {
                if uuid::Uuid::parse_str(part).is_ok() {
                    "{id}"
                } else {
                    part
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        seen.push((format!("{method} {label}"), resp.status));
        resp.json
    };

    // Jobs: one ACKed with its whole answer, one NACKed into a retry, one dead, one cancelled.
    call(
        Method::POST,
        "/ojs/v1/workers/register".into(),
        Some(json!({"worker_id": worker, "queues": [q]})),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let pushed = call(
            Method::POST,
            "/ojs/v1/jobs".into(),
            Some(job("upgrade.work", &q)),
        )
        .await;
        ids.push(pushed["job"]["id"].as_str().unwrap().to_owned());
    }
    call(
        Method::POST,
        "/ojs/v1/jobs/batch".into(),
        Some(json!({"jobs": [job("upgrade.batch", &q), job("upgrade.batch", &q)]})),
    )
    .await;
    let fetched = call(
        Method::POST,
        "/ojs/v1/workers/fetch".into(),
        Some(json!({"queues": [q], "worker_id": worker, "count": 2})),
    )
    .await;
    let claimed: Vec<String> = fetched["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(claimed.len(), 2, "two jobs claimed in round {round}");
    let acked = call(
        Method::POST,
        "/ojs/v1/workers/ack".into(),
        Some(json!({"job_id": claimed[0], "worker_id": worker, "result": {"ok": round}})),
    )
    .await;
    assert_eq!(acked["job"]["state"], "completed", "{acked}");
    assert_eq!(acked["job"]["result"], json!({"ok": round}));
    call(
        Method::POST,
        "/ojs/v1/workers/nack".into(),
        Some(json!({"job_id": claimed[1], "worker_id": worker, "error": {"message": "again"}})),
    )
    .await;
    call(
        Method::POST,
        "/ojs/v1/workers/heartbeat".into(),
        Some(json!({"worker_id": worker})),
    )
    .await;
    for id in ids.iter().chain(&claimed) {
        // (`/events` is a stream of the job's changes: it ends only when the job has.)
        for tail in ["", "/history", "/lineage", "/steps", "/signals", "/result"] {
            call(Method::GET, format!("/ojs/v1/jobs/{id}{tail}"), None).await;
        }
    }
    call(
        Method::POST,
        "/ojs/v1/jobs/results".into(),
        Some(json!({"job_ids": [claimed[0]]})),
    )
    .await;
    call(Method::DELETE, format!("/ojs/v1/jobs/{}", ids[2]), None).await;
    let dead_q = format!("{q}-dead");
    let dead = call(
        Method::POST,
        "/ojs/v1/jobs".into(),
        Some(json!({"type": "upgrade.dead", "queue": dead_q, "args": [],
                    "options": {"retry": {"max_attempts": 1}}})),
    )
    .await;
    let dead = dead["job"]["id"].as_str().unwrap().to_owned();
    call(
        Method::POST,
        "/ojs/v1/workers/fetch".into(),
        Some(json!({"queues": [dead_q], "worker_id": worker})),
    )
    .await;
    call(
        Method::POST,
        "/ojs/v1/workers/nack".into(),
        Some(json!({"job_id": dead, "worker_id": worker, "error": {"message": "no"}})),
    )
    .await;
    call(Method::GET, format!("/ojs/v1/dead-letter/{dead}"), None).await;
    call(
        Method::POST,
        format!("/ojs/v1/dead-letter/{dead}/retry"),
        None,
    )
    .await;

    // Durable execution: a checkpoint, a step, a wait ended by a signal.
    let durable_q = format!("{q}-durable");
    call(
        Method::POST,
        "/ojs/v1/jobs".into(),
        Some(json!({"type": "upgrade.saga", "queue": durable_q, "args": []})),
    )
    .await;
    let saga = call(
        Method::POST,
        "/ojs/v1/workers/fetch".into(),
        Some(json!({"queues": [durable_q], "worker_id": worker})),
    )
    .await;
    let saga = saga["jobs"][0]["id"].as_str().unwrap().to_owned();
    call(
        Method::PUT,
        format!("/ojs/v1/jobs/{saga}/checkpoint"),
        Some(json!({"state": {"at": 1}})),
    )
    .await;
    call(
        Method::POST,
        format!("/ojs/v1/jobs/{saga}/steps/charge"),
        Some(json!({"attempt": 1, "result": {"charged": true}})),
    )
    .await;
    call(
        Method::POST,
        "/ojs/v1/workers/wait".into(),
        Some(json!({"job_id": saga, "signal": "approved", "worker_id": worker})),
    )
    .await;
    call(
        Method::POST,
        format!("/ojs/v1/jobs/{saga}/signals/approved"),
        Some(json!({"payload": {"by": "ops"}})),
    )
    .await;
    let resumed = call(
        Method::POST,
        "/ojs/v1/workers/fetch".into(),
        Some(json!({"queues": [durable_q], "worker_id": worker})),
    )
    .await;
    assert_eq!(
        resumed["jobs"][0]["steps"]["charge"]["result"],
        json!({"charged": true})
    );
    call(
        Method::POST,
        "/ojs/v1/workers/ack".into(),
        Some(json!({"job_id": saga, "worker_id": worker})),
    )
    .await;

    // Workflows, cron, webhooks, tenants, queues.
    let flow = call(
        Method::POST,
        "/ojs/v1/workflows".into(),
        Some(
            json!({"type": "chain", "name": format!("flow-{round}"), "steps": [
            {"type": "upgrade.step", "args": [], "options": {"queue": format!("{q}-flow")}},
            {"type": "upgrade.step", "args": [], "options": {"queue": format!("{q}-flow")}}]}),
        ),
    )
    .await;
    let flow = flow["workflow"]["id"].as_str().unwrap().to_owned();
    call(Method::GET, format!("/ojs/v1/workflows/{flow}"), None).await;
    call(
        Method::POST,
        format!("/ojs/v1/workflows/{flow}/cancel"),
        None,
    )
    .await;
    let cron = format!("cron-{round}");
    call(
        Method::POST,
        "/ojs/v1/cron".into(),
        Some(json!({"name": cron, "expression": "0 0 1 1 *",
                    "job_template": {"type": "upgrade.cron", "queue": q, "args": []}})),
    )
    .await;
    call(Method::GET, format!("/ojs/v1/cron/{cron}"), None).await;
    call(Method::GET, format!("/ojs/v1/cron/{cron}/runs"), None).await;
    call(Method::DELETE, format!("/ojs/v1/cron/{cron}"), None).await;
    let hook = call(
        Method::POST,
        "/ojs/v1/webhooks/subscriptions".into(),
        Some(
            json!({"url": "https://example.com/hook", "events": ["job.completed"],
                    "secret": "s1"}),
        ),
    )
    .await;
    let hook = hook["subscription"]["id"]
        .as_str()
        .or(hook["id"].as_str())
        .unwrap()
        .to_owned();
    call(
        Method::GET,
        format!("/ojs/v1/webhooks/subscriptions/{hook}"),
        None,
    )
    .await;
    call(
        Method::PATCH,
        format!("/ojs/v1/webhooks/subscriptions/{hook}"),
        Some(json!({"active": false})),
    )
    .await;
    call(
        Method::DELETE,
        format!("/ojs/v1/webhooks/subscriptions/{hook}"),
        None,
    )
    .await;
    let tenant = format!("tenant-{round}");
    call(
        Method::PUT,
        format!("/ojs/v1/admin/tenants/{tenant}/limits"),
        Some(json!({"max_concurrency": 5})),
    )
    .await;
    call(Method::GET, format!("/ojs/v1/admin/tenants/{tenant}"), None).await;
    call(
        Method::GET,
        format!("/ojs/v1/admin/tenants/{tenant}/stats"),
        None,
    )
    .await;
    call(
        Method::DELETE,
        format!("/ojs/v1/admin/tenants/{tenant}"),
        None,
    )
    .await;
    call(Method::POST, format!("/ojs/v1/queues/{q}/pause"), None).await;
    call(Method::POST, format!("/ojs/v1/queues/{q}/resume"), None).await;
    for tail in ["", "/stats", "/config", "/priority-stats"] {
        call(Method::GET, format!("/ojs/v1/queues/{q}{tail}"), None).await;
    }
    call(Method::GET, format!("/ojs/v1/admin/workers/{worker}"), None).await;

    // Every documented read without a path parameter.
    let doc: Value = app
        .api
        .client
        .get(format!("{}/ojs/openapi.json", app.api.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut reads: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, item)| !path.contains('{') && item.get("get").is_some())
        // Streams never end by themselves.
        .filter(|(path, _)| !path.ends_with("/events") && !path.ends_with("/stream"))
        .map(|(path, _)| path.clone())
        .collect();
    reads.sort();
    for path in reads {
        call(Method::GET, path, None).await;
    }
    seen
}

/// What the next release's migration may do, done to every table at once: a column added to
/// each (nullable, with a default where Postgres allows one), a new table, a new function, and `ojs_job_all` restated
/// with the job tables' new column, as a migration adding a job column must.
async fn expand_every_table(app: &TestApp) {
    let tables: Vec<String> = sqlx::query_scalar(
        "select c.relname::text from pg_class c
           join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = current_schema() and c.relkind in ('r', 'p')
            and c.relname not like 'refinery%' and not c.relispartition
          order by 1",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert!(tables.len() > 20, "the schema's tables: {tables:?}");
    let view: String = sqlx::query_scalar("select pg_get_viewdef('ojs_job_all'::regclass)")
        .fetch_one(app.pool())
        .await
        .unwrap();
    let restated = view
        .replacen(
            "\n   FROM ojs_job\n",
            &format!(",\n    ojs_job.{ADDED}\n   FROM ojs_job\n"),
            1,
        )
        .replacen(
            "\n   FROM ojs_job_done d",
            &format!(",\n    d.{ADDED}\n   FROM ojs_job_done d"),
            1,
        );
    assert_eq!(
        restated.matches(ADDED).count(),
        2,
        "ojs_job_all's definition has the expected shape: {view}"
    );
    let mut tx = app.pool().begin().await.unwrap();
    let mut with_default = 0;
    for table in &tables {
        // Postgres adds no column with a default to a table whose row type a function takes
        // (the job tables, ojs_workflow): a migration adds a nullable one there.
        sqlx::raw_sql("savepoint added")
            .execute(&mut *tx)
            .await
            .unwrap();
        let added = sqlx::raw_sql(&format!(
            "alter table {table} add column {ADDED} text default 'next'"
        ))
        .execute(&mut *tx)
        .await;
        match added {
            Ok(_) => with_default += 1,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("0A000") => {
                sqlx::raw_sql(&format!(
                    "rollback to savepoint added; alter table {table} add column {ADDED} text"
                ))
                .execute(&mut *tx)
                .await
                .unwrap();
            }
            Err(e) => panic!("adding a column to {table}: {e}"),
        }
    }
    assert!(
        with_default > 10,
        "most tables took a column with a default"
    );
    sqlx::raw_sql(&format!(
        "create or replace view ojs_job_all as {restated}\n\
         create table ojs_next_release_table (id bigint generated always as identity primary key);\n\
         create function ojs_next_release_function(job_id uuid) returns int language sql as 'select 1';"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_release_keeps_serving_after_the_next_releases_expand_migration() {
    let app = TestApp::spawn().await;
    // Twice before, so the connections of the pool have prepared what the traffic sends.
    let before = traffic(&app, "one").await;
    traffic(&app, "two").await;
    let earlier = "select count(*) from ojs_job_all where queue like 'upgrade-one%' or queue like 'upgrade-two%'";
    let jobs_before: i64 = sqlx::query_scalar(earlier)
        .fetch_one(app.pool())
        .await
        .unwrap();

    expand_every_table(&app).await;

    let after = traffic(&app, "three").await;
    assert_eq!(
        after.iter().map(|(r, _)| r).collect::<Vec<_>>(),
        before.iter().map(|(r, _)| r).collect::<Vec<_>>()
    );
    for ((request, was), (_, is)) in before.iter().zip(&after) {
        assert_eq!(was, is, "{request}: {was} before the migration, {is} after");
    }
    let jobs_after: i64 = sqlx::query_scalar(earlier)
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(
        jobs_after, jobs_before,
        "every job of the rounds before is still there"
    );

    // The maintenance passes read and write the same tables.
    app.reap_after(Duration::from_secs(3600)).await;
    app.cron_firer().run_once(None).await.expect("a cron pass");
    let stored: i64 = sqlx::query_scalar(&format!(
        "select count(*) from ojs_event where {ADDED} = 'next'"
    ))
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert!(
        stored > 0,
        "events written after the migration carry its default"
    );
}
