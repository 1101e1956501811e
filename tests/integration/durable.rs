//! Steps that run once and jobs that sleep until a signal or a time: recorded by the worker
//! holding the current attempt, once; handed to later attempts by FETCH; waits that leave the
//! claim path and end once, on a signal from HTTP or SQL or on their time.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::app::InProcessReplica;
use crate::support::{Client, Resp, TestApp};

fn step_path(id: &str, name: &str) -> String {
    format!("/ojs/v1/jobs/{id}/steps/{name}")
}

fn signal_path(id: &str, name: &str) -> String {
    format!("/ojs/v1/jobs/{id}/signals/{name}")
}

async fn record(api: &Client, id: &str, name: &str, body: Value) -> Resp {
    api.post(&step_path(id, name), body).await
}

async fn wait(api: &Client, body: Value) -> Resp {
    api.post("/ojs/v1/workers/wait", body).await
}

/// Fetches from `queue` as `worker`, returning the jobs (none when nothing is available).
async fn fetch(api: &Client, queue: &str, worker: &str) -> Vec<Value> {
    api.post(
        "/ojs/v1/workers/fetch",
        json!({"queues": [queue], "worker_id": worker, "count": 5}),
    )
    .await
    .expect(200)
    .json["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A server and a second replica on its database (a client of each), and a job of `queue`
/// held by worker `w`.
async fn two_replicas_and_an_active_job(
    queue: &str,
) -> (TestApp, InProcessReplica, [Client; 2], String) {
    let app = TestApp::spawn().await;
    let replica = app.spawn_replica(|_| {}).await;
    let apis = [
        Client::new(app.base.clone()),
        Client::new(replica.base.clone()),
    ];
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": queue}))
        .await;
    app.fetch_one(queue, "w").await;
    (app, replica, apis, id)
}

/// Makes a retryable job available now (instead of waiting out its backoff).
/// Asserts that job `id`'s history has an event `matches` accepts.
async fn assert_history_has(app: &TestApp, id: &str, matches: impl Fn(&Value) -> bool) {
    let history = app
        .get(&format!("/ojs/v1/jobs/{id}/history"))
        .await
        .expect(200)
        .json;
    assert!(
        history["events"].as_array().unwrap().iter().any(matches),
        "{history}"
    );
}

async fn retry_now(app: &TestApp, id: &str) {
    app.sql(&format!(
        "update ojs_job set state = 'available', next_retry_at = null where id = '{id}'"
    ))
    .await;
}

#[tokio::test]
async fn a_step_is_recorded_once_and_the_retry_skips_it() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "order.saga", "args": [7], "queue": "steps"}))
        .await;
    let first = app.fetch_one("steps", "w-1").await;
    assert_eq!(first["attempt"], 1);
    assert!(first.get("steps").is_none(), "{first}");

    let recorded = record(
        &app,
        &id,
        "charge-card",
        json!({"attempt": 1, "worker_id": "w-1", "result": {"charge": "ch_1", "cents": 4200}}),
    )
    .await
    .expect(201)
    .json;
    assert_eq!(recorded["step"]["name"], "charge-card");
    assert_eq!(recorded["step"]["result"]["charge"], "ch_1");
    assert_eq!(recorded["step"]["attempt"], 1);
    assert_eq!(recorded["step"]["worker_id"], "w-1");

    // The same step again, even with another result: refused, with the first record.
    let again = record(
        &app,
        &id,
        "charge-card",
        json!({"attempt": 1, "result": {"charge": "ch_2"}}),
    )
    .await
    .expect_error(409, "step_already_recorded");
    assert_eq!(
        again.json["error"]["details"]["step"]["result"]["charge"],
        "ch_1"
    );
    // A step with no result records null.
    let bare = record(&app, &id, "reserve", json!({"attempt": 1}))
        .await
        .expect(201);
    assert_eq!(bare.json["step"]["result"], Value::Null);

    app.nack(json!({"job_id": id, "worker_id": "w-1", "error": {"message": "ship failed"}}))
        .await
        .expect(200);
    // Between attempts no step is taken.
    record(&app, &id, "ship", json!({"attempt": 1}))
        .await
        .expect_error(409, "conflict");
    retry_now(&app, &id).await;
    let second = app.fetch_one("steps", "w-2").await;
    assert_eq!(second["attempt"], 2);
    // The claim looked the steps up for this job only (it is flagged); a plain job claimed
    // beside it gets none.
    let plain = app
        .push_id(json!({"type": "order.saga", "args": [8], "queue": "steps-plain"}))
        .await;
    let plain_job = app.fetch_one("steps-plain", "w-2").await;
    assert_eq!(plain_job["id"], plain.as_str());
    assert!(plain_job.get("steps").is_none(), "{plain_job}");
    let flags: Vec<Option<bool>> =
        sqlx::query_scalar("select durable from ojs_job where id = any($1::uuid[]) order by id")
            .bind(vec![id.clone(), plain.clone()])
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(flags, [Some(true), None]);
    assert_eq!(second["steps"]["charge-card"]["result"]["cents"], 4200);
    assert_eq!(second["steps"]["charge-card"]["attempt"], 1);
    assert_eq!(second["steps"]["reserve"]["result"], Value::Null);
    // The first attempt's worker is stale now.
    let stale = record(&app, &id, "ship", json!({"attempt": 1, "worker_id": "w-1"}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(stale.json["error"]["details"]["current_attempt"], 2);
    record(&app, &id, "ship", json!({"attempt": 2, "worker_id": "w-1"}))
        .await
        .expect_error(409, "conflict");
    record(
        &app,
        &id,
        "ship",
        json!({"attempt": 2, "worker_id": "w-2", "result": "trk-9"}),
    )
    .await
    .expect(201);

    let steps = app
        .get(&format!("/ojs/v1/jobs/{id}/steps"))
        .await
        .expect(200)
        .json;
    let names: Vec<&str> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["charge-card", "reserve", "ship"]);
    // INFO shows them, and the history has each record.
    let info = app.job(&id).await;
    assert_eq!(info["steps"]["ship"]["result"], "trk-9");
    let history = app
        .get(&format!("/ojs/v1/jobs/{id}/history"))
        .await
        .expect(200)
        .json;
    let recorded: Vec<&Value> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "job.step_recorded")
        .collect();
    assert_eq!(recorded.len(), 3, "{history}");
    assert_eq!(recorded[0]["data"]["step"], "charge-card");
    assert_eq!(recorded[0]["actor"]["id"], "w-1");

    app.ack(json!({"job_id": id, "worker_id": "w-2"}))
        .await
        .expect(200);
    // A finished job takes no step; its steps stay readable.
    record(&app, &id, "late", json!({"attempt": 2}))
        .await
        .expect_error(409, "conflict");
    app.get(&format!("/ojs/v1/jobs/{id}/steps"))
        .await
        .expect(200);
}

/// Many records of one step at once, from two replicas: exactly one is recorded, every other
/// is answered with it.
#[tokio::test]
async fn racing_records_of_a_step_keep_exactly_one() {
    let (app, _replica, apis, id) = two_replicas_and_an_active_job("race").await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let api = apis[i % 2].clone();
            let path = step_path(&id, "pay");
            tokio::spawn(async move { api.post(&path, json!({"attempt": 1, "result": i})).await })
        })
        .collect();
    let mut created = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        let resp = task.await.unwrap();
        match resp.status {
            201 => created.push(resp.json["step"]["result"].clone()),
            409 => refused.push(resp.json["error"]["details"]["step"]["result"].clone()),
            other => panic!("{other}: {}", resp.text),
        }
    }
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(refused.len(), 19);
    assert!(refused.iter().all(|r| *r == created[0]), "{refused:?}");
    let rows: i64 = sqlx::query_scalar("select count(*) from ojs_job_step")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn a_job_waits_for_a_signal_and_resumes_with_its_payload() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "order.approve", "args": [], "queue": "approvals"}))
        .await;
    let job = app.fetch_one("approvals", "w-1").await;
    assert_eq!(job["attempt"], 1);
    let waited = wait(
        &app,
        json!({"job_id": id, "worker_id": "w-1", "attempt": 1, "signal": "approval"}),
    )
    .await
    .expect(200)
    .json;
    assert_eq!(waited["state"], "scheduled");
    assert_eq!(waited["outcome"], "waiting");
    assert_eq!(waited["attempt"], 1, "the next run is attempt 1 again");
    assert_eq!(app.job(&id).await["attempt"], 0, "no attempt is running");

    // Off the claim path: nothing to fetch, and the worker's late ACK no longer matches.
    assert!(fetch(&app, "approvals", "w-2").await.is_empty());
    app.ack(json!({"job_id": id, "worker_id": "w-1"}))
        .await
        .expect_error(409, "conflict");
    let info = app.job(&id).await;
    assert_eq!(info["state"], "scheduled");
    assert_eq!(info["wait"]["signal"], "approval");
    assert!(info["wait"].get("ended_by").is_none(), "{info}");

    let sent = app
        .post(
            &signal_path(&id, "approval"),
            json!({"payload": {"approved_by": "ana"}}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(sent["signal"]["outcome"], "delivered");
    assert_eq!(sent["signal"]["job_state"], "available");
    // A second one finds the job no longer waiting: kept for a later wait, not a second wake.
    let second = app
        .post(&signal_path(&id, "approval"), json!({}))
        .await
        .expect(200)
        .json;
    assert_eq!(second["signal"]["outcome"], "kept");

    let resumed = fetch(&app, "approvals", "w-2").await;
    assert_eq!(resumed.len(), 1);
    let resumed = &resumed[0];
    assert_eq!(resumed["attempt"], 1, "a wait gives its attempt back");
    assert_eq!(
        resumed["signals"]["approval"]["payload"]["approved_by"],
        "ana"
    );
    assert_eq!(resumed["wait"]["ended_by"], "signal");
    assert!(fetch(&app, "approvals", "w-3").await.is_empty());

    // The kept signal ends the next wait for it at once.
    let again = wait(
        &app,
        json!({"job_id": id, "worker_id": "w-2", "signal": "approval"}),
    )
    .await
    .expect(200)
    .json;
    assert_eq!(again["outcome"], "signalled");
    assert_eq!(again["state"], "available");
    let listed = app
        .get(&format!("/ojs/v1/jobs/{id}/signals"))
        .await
        .expect(200)
        .json;
    let signals = listed["signals"].as_array().unwrap();
    assert_eq!(signals.len(), 2);
    assert!(signals.iter().all(|s| s.get("delivered_at").is_some()));
    assert_eq!(
        app.job_event_types(&id)
            .await
            .iter()
            .filter(|t| *t == "job.signalled")
            .count(),
        2
    );
    assert_history_has(&app, &id, |e| {
        e["event_type"] == "job.waiting" && e["actor"]["id"] == "w-1"
    })
    .await;
}

/// A signal sent many times at once, through two replicas, to a waiting job: the job wakes
/// once; the other signals are kept (or, with the same key, stored once).
#[tokio::test]
async fn a_signal_sent_twice_wakes_the_job_once() {
    let (app, _replica, apis, id) = two_replicas_and_an_active_job("once").await;
    wait(&app, json!({"job_id": id, "signal": "go"}))
        .await
        .expect(200);
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let api = apis[i % 2].clone();
            let path = signal_path(&id, "go");
            // Half of them are one signal sent again (the same key), as a retrying webhook does.
            let body = if i < 8 {
                json!({"key": "hook-1", "payload": i})
            } else {
                json!({"payload": i})
            };
            tokio::spawn(async move { api.post(&path, body).await.expect(200).json })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap()["signal"]["outcome"].clone());
    }
    let delivered = outcomes.iter().filter(|o| *o == "delivered").count();
    assert_eq!(delivered, 1, "{outcomes:?}");
    let rows: i64 = sqlx::query_scalar("select count(*) from ojs_job_signal where key = 'hook-1'")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(rows, 1);
    assert_eq!(fetch(&app, "once", "w2").await.len(), 1);
    assert!(fetch(&app, "once", "w3").await.is_empty());
    let woken = app
        .job_event_types(&id)
        .await
        .iter()
        .filter(|t| *t == "job.signalled")
        .count();
    assert_eq!(woken, 1);
}

#[tokio::test]
async fn a_wait_with_a_time_limit_ends_by_time() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "timed"}))
        .await;
    app.fetch_one("timed", "w").await;
    let waited = wait(
        &app,
        json!({"job_id": id, "signal": "never", "timeout_ms": 300}),
    )
    .await
    .expect(200)
    .json;
    assert!(waited["until"].is_string(), "{waited}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let job = loop {
        if let Some(job) = fetch(&app, "timed", "w").await.pop() {
            break job;
        }
        assert!(Instant::now() < deadline, "the wait never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(job["wait"]["ended_by"], "time");
    assert_eq!(job["signals"], json!({}));
    // The signal that comes too late is kept for a next wait.
    let late = app
        .post(&signal_path(&id, "never"), json!({}))
        .await
        .expect(200)
        .json;
    assert_eq!(late["signal"]["outcome"], "kept");
}

#[tokio::test]
async fn signals_from_sql_join_the_callers_transaction() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "sqlsig"}))
        .await;
    app.fetch_one("sqlsig", "w").await;
    wait(&app, json!({"job_id": id, "signal": "paid"}))
        .await
        .expect(200);

    let mut tx = app.pool().begin().await.unwrap();
    let outcome: String = sqlx::query_scalar("select ojs_signal($1::uuid, 'paid', '{\"n\": 1}')")
        .bind(&id)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(outcome, "delivered");
    tx.rollback().await.unwrap();
    assert_eq!(app.job(&id).await["state"], "scheduled", "rolled back");

    let outcome: String = sqlx::query_scalar("select ojs_signal($1::uuid, 'paid', '{\"n\": 2}')")
        .bind(&id)
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(outcome, "delivered");
    let job = fetch(&app, "sqlsig", "w").await.pop().expect("woken");
    assert_eq!(job["signals"]["paid"]["payload"]["n"], 2);

    // Refusals carry the OJS error body.
    let unknown = sqlx::query("select ojs_signal(gen_random_uuid(), 'paid')")
        .execute(app.pool())
        .await
        .unwrap_err();
    let unknown = unknown.as_database_error().unwrap();
    assert_eq!(unknown.code().as_deref(), Some("OJ404"));
    let bad = sqlx::query("select ojs_signal($1::uuid, '')")
        .bind(&id)
        .execute(app.pool())
        .await
        .unwrap_err();
    assert_eq!(
        bad.as_database_error().unwrap().code().as_deref(),
        Some("OJ400")
    );
    for name in ["a\nb", "x\u{85}"] {
        let bad = sqlx::query("select ojs_signal($1::uuid, $2)")
            .bind(&id)
            .bind(name)
            .execute(app.pool())
            .await
            .unwrap_err();
        assert_eq!(
            bad.as_database_error().unwrap().code().as_deref(),
            Some("OJ400")
        );
    }
    let fine: String = sqlx::query_scalar("select ojs_signal($1::uuid, 'é-ok/1', null, 'k')")
        .bind(&id)
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(fine, "kept");
    app.ack(json!({"job_id": id, "worker_id": "w"}))
        .await
        .expect(200);
    let finished = sqlx::query("select ojs_signal($1::uuid, 'paid')")
        .bind(&id)
        .execute(app.pool())
        .await
        .unwrap_err();
    assert_eq!(
        finished.as_database_error().unwrap().code().as_deref(),
        Some("OJ409")
    );
}

/// The SQLSTATE and the OJS error body (DETAIL) of a refused SQL call.
fn sql_refusal(e: &sqlx::Error) -> (String, Value) {
    let db = e.as_database_error().expect("a database error");
    let detail = db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .and_then(|pg| pg.detail())
        .expect("a DETAIL");
    (
        db.code().expect("a SQLSTATE").into_owned(),
        serde_json::from_str(detail).expect("DETAIL is the OJS error body"),
    )
}

/// What an OJS error body says, without the members only the HTTP door adds (request id,
/// documentation link, hint, type).
fn said(body: &Value) -> Value {
    let e = &body["error"];
    json!({"code": e["code"], "message": e["message"], "retryable": e["retryable"],
           "details": e["details"]})
}

/// `ojs_record_step(...)` as text (its JSON), or its refusal.
async fn record_from_sql(
    db: impl sqlx::PgExecutor<'_>,
    id: &str,
    attempt: i32,
    name: &str,
    result: Option<&str>,
    worker: Option<&str>,
) -> Result<Value, (String, Value)> {
    sqlx::query_scalar::<_, String>("select ojs_record_step($1::uuid, $2, $3, $4::jsonb, $5)::text")
        .bind(id)
        .bind(attempt)
        .bind(name)
        .bind(result)
        .bind(worker)
        .fetch_one(db)
        .await
        .map(|text| serde_json::from_str(&text).unwrap())
        .map_err(|e| sql_refusal(&e))
}

#[tokio::test]
async fn a_step_recorded_from_sql_commits_with_the_callers_transaction_and_is_refused_as_over_http()
{
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "sqlstep"}))
        .await;
    app.fetch_one("sqlstep", "w").await;
    let steps = |app: &TestApp, id: &str| {
        let path = format!("/ojs/v1/jobs/{id}/steps");
        let api = app.api.clone();
        async move { api.get(&path).await.expect(200).json["steps"].clone() }
    };

    // Rolled back with the caller's transaction: nothing recorded, no event.
    let mut tx = app.pool().begin().await.unwrap();
    let step = record_from_sql(
        &mut *tx,
        &id,
        1,
        "charge",
        Some(r#"{"charge_id": "ch_1"}"#),
        Some("w"),
    )
    .await
    .unwrap();
    assert_eq!(step["result"], json!({"charge_id": "ch_1"}));
    assert_eq!(step["attempt"], 1);
    assert_eq!(step["worker_id"], "w");
    tx.rollback().await.unwrap();
    assert_eq!(steps(&app, &id).await, json!([]));

    // Committed: the same step as the HTTP route records, handed to the next attempt.
    let mut tx = app.pool().begin().await.unwrap();
    let step = record_from_sql(
        &mut *tx,
        &id,
        1,
        "charge",
        Some(r#"{"charge_id": "ch_2"}"#),
        None,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let listed = steps(&app, &id).await;
    assert_eq!(
        listed[0], step,
        "the route lists what the function answered"
    );
    assert_eq!(
        step["worker_id"], "w",
        "the holder, when the call names none"
    );
    assert_history_has(&app, &id, |e| e["type"] == "job.step_recorded").await;

    // A second record, from SQL or HTTP, is refused with the first: the same body both ways.
    let (sqlstate, sql_body) = record_from_sql(app.pool(), &id, 1, "charge", Some("1"), Some("w"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate, "OJ409");
    let http = record(
        &app,
        &id,
        "charge",
        json!({"attempt": 1, "worker_id": "w", "result": 1}),
    )
    .await
    .expect_error(409, "step_already_recorded");
    assert_eq!(said(&sql_body), said(&http.json));
    assert_eq!(
        sql_body["error"]["details"]["step"]["result"]["charge_id"],
        "ch_2"
    );

    // Another worker, and a stale attempt: refused as over HTTP.
    for (attempt, worker, http_body) in [
        (
            1,
            "other",
            json!({"attempt": 1, "worker_id": "other", "result": null}),
        ),
        (
            3,
            "w",
            json!({"attempt": 3, "worker_id": "w", "result": null}),
        ),
    ] {
        let (sqlstate, sql_body) =
            record_from_sql(app.pool(), &id, attempt, "ship", None, Some(worker))
                .await
                .unwrap_err();
        assert_eq!(sqlstate, "OJ409");
        let http = record(&app, &id, "ship", http_body).await.expect(409);
        assert_eq!(
            said(&sql_body),
            said(&http.json),
            "attempt {attempt}, worker {worker}"
        );
    }
    // A bad name, a bad attempt, an unknown job.
    let (sqlstate, body) = record_from_sql(app.pool(), &id, 1, "a\nb", None, None)
        .await
        .unwrap_err();
    assert_eq!(
        (
            sqlstate.as_str(),
            body["error"]["details"]["field"].as_str()
        ),
        ("OJ400", Some("name"))
    );
    let (sqlstate, _) = record_from_sql(app.pool(), &id, 0, "ship", None, None)
        .await
        .unwrap_err();
    assert_eq!(sqlstate, "OJ400");
    let unknown = "01a22755-c990-7268-94f2-3e9b007407a3";
    let (sqlstate, sql_body) = record_from_sql(app.pool(), unknown, 1, "ship", None, None)
        .await
        .unwrap_err();
    assert_eq!(sqlstate, "OJ404");
    let http = record(&app, unknown, "ship", json!({"attempt": 1}))
        .await
        .expect(404);
    assert_eq!(said(&sql_body), said(&http.json));
    // A finished job takes no step.
    app.ack(json!({"job_id": id, "worker_id": "w"}))
        .await
        .expect(200);
    let (sqlstate, sql_body) = record_from_sql(app.pool(), &id, 1, "ship", None, None)
        .await
        .unwrap_err();
    assert_eq!(sqlstate, "OJ409");
    let http = record(&app, &id, "ship", json!({"attempt": 1}))
        .await
        .expect(409);
    assert_eq!(said(&sql_body), said(&http.json));
}

#[tokio::test]
async fn bad_input_to_the_durable_routes_gets_the_ojs_error_body() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "bad"}))
        .await;
    let unknown = "01a22804-29a8-79f7-982a-45ee0e3ae49b";
    // Steps.
    record(&app, &id, "s", json!({}))
        .await
        .expect_error(400, "invalid_request");
    record(&app, &id, "s", json!({"attempt": 0}))
        .await
        .expect_error(400, "invalid_request");
    record(&app, &id, "s", json!({"attempt": "1"}))
        .await
        .expect_error(400, "invalid_request");
    record(&app, &id, "s", json!({"attempt": 1, "worker_id": ""}))
        .await
        .expect_error(400, "invalid_request");
    record(&app, &id, &"x".repeat(201), json!({"attempt": 1}))
        .await
        .expect_error(400, "invalid_request");
    record(&app, &id, "a%0Ab", json!({"attempt": 1}))
        .await
        .expect_error(400, "invalid_request");
    record(&app, unknown, "s", json!({"attempt": 1}))
        .await
        .expect_error(404, "not_found");
    record(&app, "not-a-job", "s", json!({"attempt": 1}))
        .await
        .expect_error(404, "not_found");
    app.post_text(&step_path(&id, "s"), "{\"attempt\":")
        .await
        .expect_error(400, "invalid_payload");
    let big = "y".repeat(1024 * 1024 + 1);
    record(&app, &id, "s", json!({"attempt": 1, "result": big}))
        .await
        .expect_error(413, "envelope_too_large");
    // Not active.
    record(&app, &id, "s", json!({"attempt": 1}))
        .await
        .expect_error(409, "conflict");
    app.get(&format!("/ojs/v1/jobs/{unknown}/steps"))
        .await
        .expect_error(404, "not_found");

    // Waits.
    app.fetch_one("bad", "w").await;
    wait(&app, json!({"job_id": id}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"signal": "s"}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": "nope", "signal": "s"}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": id, "signal": ""}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": id, "until": "2020-01-01T00:00:00Z"}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": id, "until": "tomorrow"}))
        .await
        .expect_error(400, "invalid_request");
    wait(
        &app,
        json!({"job_id": id, "until": "+PT1H", "timeout_ms": 1000}),
    )
    .await
    .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": id, "timeout_ms": -1}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": id, "signal": "s", "attempt": 0}))
        .await
        .expect_error(400, "invalid_request");
    wait(&app, json!({"job_id": id, "signal": "s", "attempt": 2}))
        .await
        .expect_error(409, "conflict");
    wait(
        &app,
        json!({"job_id": id, "signal": "s", "worker_id": "other"}),
    )
    .await
    .expect_error(409, "conflict");
    wait(&app, json!({"job_id": unknown, "signal": "s"}))
        .await
        .expect_error(404, "not_found");

    // Signals.
    app.post(&signal_path(unknown, "s"), json!({}))
        .await
        .expect_error(404, "not_found");
    app.post(&signal_path(&id, &"x".repeat(201)), json!({}))
        .await
        .expect_error(400, "invalid_request");
    app.post(&signal_path(&id, "s"), json!({"key": ""}))
        .await
        .expect_error(400, "invalid_request");
    app.post(&signal_path(&id, "s"), json!({"key": 5}))
        .await
        .expect_error(400, "invalid_request");
    app.post(&signal_path(&id, "s"), json!([1]))
        .await
        .expect_error(400, "invalid_payload");
    app.post(
        &signal_path(&id, "s"),
        json!({"payload": "z".repeat(1024 * 1024 + 1)}),
    )
    .await
    .expect_error(413, "envelope_too_large");
    app.ack(json!({"job_id": id, "worker_id": "w"}))
        .await
        .expect(200);
    app.post(&signal_path(&id, "s"), json!({}))
        .await
        .expect_error(409, "conflict");
    wait(&app, json!({"job_id": id, "signal": "s"}))
        .await
        .expect_error(409, "conflict");
}
