//! Enqueue from SQL (`ojs_enqueue`, `ojs_enqueue_batch`, `ojs_enqueue_type`; migration V21):
//! the same answers as PUSH for the same bodies, inside the caller's transaction.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection;

use crate::support::{TestApp, job};

/// What a SQL enqueue answered: the function's JSON, or the refusal's status (from SQLSTATE
/// OJ<status>) and the OJS error body (from DETAIL).
#[derive(Debug)]
enum Answer {
    Ok(Value),
    Refused { status: u16, body: Value },
}

impl Answer {
    #[track_caller]
    fn refused(self, status: u16, code: &str) -> Value {
        match self {
            Answer::Refused { status: s, body } => {
                assert_eq!(
                    (s, body["error"]["code"].as_str()),
                    (status, Some(code)),
                    "{body}"
                );
                assert_eq!(body["error"]["type"], code);
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty())
                );
                body
            }
            Answer::Ok(v) => panic!("expected a refusal {status} {code}, got {v}"),
        }
    }

    #[track_caller]
    fn ok(self) -> Value {
        match self {
            Answer::Ok(v) => v,
            Answer::Refused { status, body } => panic!("refused {status}: {body}"),
        }
    }
}

/// Runs `select <function>($1::json)` on `conn` (in whatever transaction it is in).
async fn call(conn: &mut sqlx::PgConnection, function: &str, body: &str) -> Answer {
    let statement = format!("select {function}($1::json)::text");
    match sqlx::query_scalar::<_, String>(&statement)
        .bind(body)
        .fetch_one(&mut *conn)
        .await
    {
        Ok(text) => Answer::Ok(serde_json::from_str(&text).unwrap()),
        Err(sqlx::Error::Database(e)) => {
            let code = e.code().unwrap_or_default().to_string();
            let pg = e
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .expect("a Postgres error");
            assert!(
                code.starts_with("OJ"),
                "not an enqueue refusal: {code} {} {:?}",
                pg.message(),
                pg.detail()
            );
            let body: Value = serde_json::from_str(pg.detail().expect("DETAIL")).unwrap();
            assert_eq!(
                body["error"]["message"],
                pg.message(),
                "message = the error's"
            );
            Answer::Refused {
                status: code[2..].parse().expect("OJ<status>"),
                body,
            }
        }
        Err(e) => panic!("{statement}: {e}"),
    }
}

/// A SQL enqueue in its own transaction, committed.
async fn sql_enqueue(app: &TestApp, function: &str, body: &Value) -> Answer {
    let mut tx = app.pool().begin().await.unwrap();
    let answer = call(&mut tx, function, &body.to_string()).await;
    match answer {
        Answer::Ok(_) => tx.commit().await.unwrap(),
        Answer::Refused { .. } => tx.rollback().await.unwrap(),
    }
    answer
}

/// Envelopes covering every attribute the server reads, valid and not, at the top level and in
/// `options`; JSON text, so that repeated keys and spacing can be sent too. `{ID}` is replaced by
/// a fresh UUIDv7 for each run, `{KEY}` by a fresh rate-limit key.
fn corpus() -> Vec<String> {
    let optional: Vec<(&str, Vec<Value>)> = vec![
        (
            "queue",
            vec![
                json!("default"),
                json!("q-1.b"),
                json!("Default"),
                json!("-x"),
                json!("a".repeat(128)),
                json!("a".repeat(129)),
                json!(5),
                json!(""),
                json!(null),
            ],
        ),
        (
            "priority",
            vec![
                json!(0),
                json!(1),
                json!(255),
                json!(256),
                json!(-1),
                json!(1.5),
                json!(2.0),
                json!(3e0),
                json!("high"),
                json!("BULK"),
                json!("urgent"),
                json!("3"),
                json!(true),
                json!(null),
                json!(99999999999999999999.0),
            ],
        ),
        (
            "timeout",
            vec![
                json!(30),
                json!(0),
                json!(-1),
                json!("1m"),
                json!(1.5),
                json!(3_153_600_000i64),
                json!(3_153_600_001i64),
            ],
        ),
        (
            "timeout_ms",
            vec![json!(1500), json!(0), json!(-5), json!("x"), json!(1e3)],
        ),
        (
            "scheduled_at",
            vec![
                json!("2026-01-01T00:00:00Z"),
                json!("2099-01-01T00:00:00Z"),
                json!("2099-01-01T00:00:00.123456789+05:30"),
                json!("2099-01-01t00:00:00z"),
                json!("2099-01-01T00:00:00-00:30"),
                json!("2026-01-01T00:00:00"),
                json!("2026-01-01 00:00:00Z"),
                json!("2026-02-30T00:00:00Z"),
                json!("2026-01-01T24:00:00Z"),
                json!("2026-13-01T00:00:00Z"),
                json!("0000-01-01T00:00:00Z"),
                json!("9999-12-31T23:59:59-01:00"),
                json!("0001-01-01T00:30:00+01:00"),
                json!("2026-01-01T00:00:00+24:00"),
                json!("+PT1H"),
                json!("+1h30m"),
                json!("+500ms"),
                json!("+P1W2DT3H4M5.5S"),
                json!("+pt10s"),
                json!("+P1Y"),
                json!("+PT"),
                json!("+P"),
                json!("+"),
                json!("+1h1h"),
                json!("+1x"),
                json!("+PT1.5M"),
                json!("+P36600D"),
                json!("+P1W1Y"),
                json!("+P1D1W"),
                json!("+PT1S1H"),
                json!("+P1.5D"),
                json!("+PT1X"),
                json!("+P1Q"),
                json!("+1.5.5s"),
                json!("+1s."),
                json!("+ 1s"),
                json!("+1s "),
                json!("+PT1H30M0.5S"),
                json!("+99999999999999999999999s"),
                json!("+18446744073709551615ms"),
                json!("+1e3s"),
                json!("+,5s"),
                json!("+1,5s"),
                json!("+0.0001s"),
                json!("+0.123456m"),
                json!("+2h1H"),
                json!("tomorrow"),
                json!(12),
                json!(""),
            ],
        ),
        (
            "delay_until",
            vec![json!("+PT5S"), json!("2020-01-01T00:00:00Z"), json!("bad")],
        ),
        (
            "expires_at",
            vec![
                json!("2099-01-01T00:00:00Z"),
                json!("+PT10M"),
                json!("+0.5s"),
                json!("tomorrow"),
                json!(12),
            ],
        ),
        (
            "visibility_timeout_ms",
            vec![json!(1500), json!(0), json!(-1), json!("PT1S"), json!(1.5)],
        ),
        (
            "visibility_timeout",
            vec![
                json!(30),
                json!("PT1M"),
                json!("1m30s"),
                json!("1.5s"),
                json!(0),
                json!("-1s"),
                json!("PT0S"),
                json!(3_153_600_001i64),
                json!(true),
            ],
        ),
        (
            "pending",
            vec![json!(true), json!(false), json!("yes"), json!(1)],
        ),
        (
            "tags",
            vec![
                json!(["a", "b"]),
                json!([]),
                json!(["a", 1]),
                json!("a"),
                json!({}),
                json!(["é\"\\\n"]),
            ],
        ),
        ("schema", vec![json!("urn:x"), json!(""), json!(5)]),
        (
            "enqueue_ttl",
            vec![
                json!(60),
                json!(0),
                json!(-1),
                json!(1.5),
                json!(2_147_483_648i64),
            ],
        ),
        (
            "total_timeout",
            vec![json!(3600), json!(0), json!(10), json!("1h")],
        ),
        (
            "result_ttl",
            vec![
                json!(60),
                json!(0),
                json!(-1),
                json!(-2),
                json!(2.0),
                json!(1.5),
                json!("60"),
                json!(true),
                json!(null),
                json!(2_147_483_647i64),
                json!(2_147_483_648i64),
            ],
        ),
        (
            "retry",
            vec![
                json!({"max_attempts": 5}),
                json!({"max_attempts": 0}),
                json!({"max_attempts": -1}),
                json!({"max_attempts": 2.5}),
                json!({"initial_interval": "PT2S", "max_interval": "PT1S"}),
                json!({"initial_interval": "1.5s"}),
                json!({"initial_interval": "PT10M"}),
                json!({"initial_interval_ms": 1500}),
                json!({"initial_interval_ms": -1}),
                json!({"initial_interval": "PT1S", "initial_interval_ms": 2000}),
                json!({"initial_interval": "PT1S", "initial_interval_ms": 1000}),
                json!({"initial_interval": "PT0S"}),
                json!({"initial_interval": 5}),
                json!({"max_interval": "P1Y"}),
                json!({"max_interval": "0.123456m"}),
                json!({"backoff_coefficient": 0}),
                json!({"backoff_coefficient": 1.5}),
                json!({"backoff_coefficient": 3}),
                json!({"backoff_coefficient": "2"}),
                json!({"jitter": false}),
                json!({"jitter": "no"}),
                json!({"non_retryable_errors": ["a.*", "b"]}),
                json!({"non_retryable_errors": "a"}),
                json!({"on_exhaustion": "discard"}),
                json!({"on_exhaustion": "x"}),
                json!({"backoff_type": "linear"}),
                json!({"backoff_strategy": "polynomial", "backoff_type": "x"}),
                json!({"backoff_strategy": "poly"}),
                json!({"x_custom": 1, "max_attempts": 3, "y": null}),
                json!({"max_attempts": null}),
                json!({}),
                json!([]),
                json!("x"),
            ],
        ),
        ("retry_policy", vec![json!({"max_attempts": 2}), json!(7)]),
        (
            "rate_limit",
            vec![
                json!({"key": "{KEY}", "concurrency": 5, "rate": {"limit": 100, "period": "PT1M"},
                       "throttle": {"limit": 10, "period": "second"}, "on_limit": "drop"}),
                json!({"max_per_second": 3}),
                json!({"key": "{KEY}", "rate": 1, "period": "second"}),
                json!({"key": "{KEY}", "rate": 2, "period": "PT0.5S"}),
                json!({"key": "only.a-key:1"}),
                json!({"concurrency": 0}),
                json!({"key": "-bad", "concurrency": -1, "rate": {"limit": 0, "period": "never"},
                       "on_limit": "later", "x": 1}),
                json!({"key": "{KEY}", "rate": {"limit": 1}}),
                json!({"key": "{KEY}", "rate": {"limit": 1, "period": "day", "burst": 2}}),
                json!({"key": "{KEY}", "rate": 1}),
                json!({"key": "{KEY}", "rate": 1.5, "period": "hour"}),
                json!({"key": "{KEY}", "period": "second"}),
                json!({"max_per_second": 2, "throttle": {"limit": 1, "period": "PT1S"}}),
                json!({"max_per_second": 0}),
                json!({"key": "{KEY}", "throttle": 5}),
                json!({"key": null}),
                json!({"key": "{KEY}".repeat(256)}),
                json!({}),
                json!([]),
                json!("k"),
            ],
        ),
    ];
    let mut out = Vec::new();
    for (name, values) in &optional {
        for value in values {
            let mut top = json!({"type": "a.b", "args": [1, "x"]});
            top[*name] = value.clone();
            out.push(top.to_string());
            let nested = json!({"type": "a.b", "args": [], "options": {*name: value}});
            out.push(nested.to_string());
        }
    }
    let fixed = [
        // type, args, id, specversion, meta, options, unknown attributes.
        r#"{"args":[]}"#,
        r#"{"type":"","args":[]}"#,
        r#"{"type":"Email.Send","args":[]}"#,
        r#"{"type":"email send","args":[]}"#,
        r#"{"type":"1email","args":[]}"#,
        r#"{"type":"a..b","args":[]}"#,
        r#"{"type":"a.","args":[]}"#,
        r#"{"type":"a-b.c_d9","args":[]}"#,
        r#"{"type":5,"args":[]}"#,
        r#"{"type":null,"args":[]}"#,
        r#"{"type":"a.b"}"#,
        r#"{"type":"a.b","args":null}"#,
        r#"{"type":"a.b","args":{"k":1}}"#,
        r#"{"type":"a.b","args":"x"}"#,
        r#"{"type":"a.b","args":[null,{"z":1.50,"a":[]},"\u00e9"]}"#,
        r#"{ "type" : "a.b" , "args" : [ 1 , { "k" : "v w" } ] , "meta" : { "x" : [ 1 ] } }"#,
        r#"{"type":"a.b","args":[],"id":"{ID}"}"#,
        r#"{"type":"a.b","args":[],"id":"not-a-uuid"}"#,
        r#"{"type":"a.b","args":[],"id":""}"#,
        r#"{"type":"a.b","args":[],"id":null}"#,
        r#"{"type":"a.b","args":[],"id":5}"#,
        r#"{"type":"a.b","args":[],"id":"550e8400-e29b-41d4-a716-446655440000"}"#,
        r#"{"type":"a.b","args":[],"id":"019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F"}"#,
        r#"{"type":"a.b","args":[],"specversion":"1.0.0-rc.1"}"#,
        r#"{"type":"a.b","args":[],"specversion":"1.0"}"#,
        r#"{"type":"a.b","args":[],"specversion":"2.0"}"#,
        r#"{"type":"a.b","args":[],"specversion":1}"#,
        r#"{"type":"a.b","args":[],"specversion":null}"#,
        r#"{"type":"a.b","args":[],"meta":{"a":1,"trace_id":"t1"}}"#,
        r#"{"type":"a.b","args":[],"meta":[1]}"#,
        r#"{"type":"a.b","args":[],"meta":"x"}"#,
        r#"{"type":"a.b","args":[],"meta":null}"#,
        r#"{"type":"a.b","args":[],"meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}"#,
        r#"{"type":"a.b","args":[],"meta":{"a":1,"c":3},"options":{"metadata":{"a":0,"b":2},"meta":{"b":20}}}"#,
        r#"{"type":"a.b","args":[],"options":{"metadata":{"a":0}}}"#,
        r#"{"type":"a.b","args":[],"options":{"metadata":[1]},"meta":"x"}"#,
        r#"{"type":"a.b","args":[],"meta":{"a":1,"a":2}}"#,
        r#"{"type":"a.b","args":[],"meta":{"a":1,"a":2},"options":{"meta":{"b":1}}}"#,
        r#"{"type":"a.b","args":[],"options":3}"#,
        r#"{"type":"a.b","args":[],"options":[]}"#,
        r#"{"type":"a.b","args":[],"options":null}"#,
        r#"{"type":"a.b","args":[],"options":{}}"#,
        r#"{"type":"a.b","args":[],"options":{"queue":"q","priority":7,"timeout_ms":5000,"delay_until":"2020-01-01T00:00:00Z","tags":["x"]},"priority":1}"#,
        r#"{"type":"a.b","args":[],"timeout":30,"timeout_ms":1500}"#,
        r#"{"type":"a.b","args":[],"timeout":"x","options":{"timeout_ms":1500}}"#,
        r#"{"type":"a.b","args":[],"visibility_timeout":"PT1M","options":{"visibility_timeout_ms":5}}"#,
        r#"{"type":"a.b","args":[],"x_b":1,"state":"completed","x_a":{"n":true},"attempt":9,"result":1,"x_c":null}"#,
        r#"{"x_first":1,"type":"a.b","args":[],"x_first":2,"x_last":[]}"#,
        r#"{"type":"a.b","args":[],"type":"c.d"}"#,
        r#"{"type":"a.b","args":[],"pending":true,"scheduled_at":"2099-01-01T00:00:00Z"}"#,
        r#"{"type":"a.b","args":[],"pending":true,"scheduled_at":"2020-01-01T00:00:00Z"}"#,
        r#"{"type":"a.b","args":[],"pending":true,"scheduled_at":"+PT1S"}"#,
        r#"{"type":"a.b","args":[],"total_timeout":10,"timeout":60}"#,
        r#"{"type":"a.b","args":[],"total_timeout":60,"timeout":60,"enqueue_ttl":5}"#,
        r#"{"type":"a.b","args":[],"options":{"workflow":{"chain":[]}}}"#,
        // Several problems at once, and their order.
        r#"{"type":"Bad","args":{},"queue":"Q"}"#,
        r#"{"type":"T","args":[],"priority":-5}"#,
        r#"{"type":"T","args":[],"priority":-5,"retry":{"max_attempts":-1}}"#,
        r#"{"type":"a.b","args":[],"priority":-5,"retry":{"max_attempts":-1}}"#,
        r#"{"type":"a.b","args":[],"retry":{"max_attempts":-1,"jitter":1}}"#,
        r#"{"type":"Email.Send","args":{},"options":{"queue":"Default"},"id":"nope"}"#,
        r#"{"type":"a.b","args":[],"meta":[1],"priority":-1,"tags":1}"#,
        r#"{"type":"a.b","args":[],"result_ttl":-5,"total_timeout":1,"timeout":60}"#,
        r#"{"type":"a.b","args":[],"result_ttl":"x","tags":1}"#,
    ];
    out.extend(fixed.iter().map(|s| s.to_string()));
    // meta past 64 KiB: 413 before field validation.
    out.push(json!({"type": "A", "args": [], "meta": {"k": "x".repeat(64 * 1024)}}).to_string());
    out
}

/// Fields of a job that differ between two enqueues of the same body (its id and the moments
/// it was written), removed before comparing; relative times are compared by input only.
fn comparable(job: &Value, body: &str) -> Value {
    let mut job = job.clone();
    let map = job.as_object_mut().expect("a job object");
    for key in ["id", "created_at", "enqueued_at"] {
        map.remove(key);
    }
    if body.contains("\"+") || body.contains("delay_until") {
        map.remove("scheduled_at");
        map.remove("expires_at");
    }
    job
}

/// The parts of an error that must agree: status, code, the field, every violation's path,
/// and the index in a batch.
fn error_signature(status: u16, body: &Value) -> Value {
    let e = &body["error"];
    let paths: Vec<Value> = e["details"]["validation_errors"]
        .as_array()
        .map(|v| v.iter().map(|x| x["path"].clone()).collect())
        .unwrap_or_default();
    json!({
        "status": status,
        "code": e["code"],
        "field": e["details"]["field"],
        "paths": paths,
        "index": e["details"]["index"],
        "retryable": e["retryable"],
        // Messages too, except where the door is named (the unsupported features, the producer).
        "message": if e["code"] == "unsupported" || e["details"]["reason"] == "producer_not_allowed" {
            Value::Null
        } else {
            json!([e["message"], e["details"]["validation_errors"]])
        },
    })
}

#[tokio::test]
async fn the_validation_corpus_gets_the_same_answer_through_both_doors() {
    let app = TestApp::spawn().await;
    let mut conn = sqlx::PgConnection::connect_with(&app.db.options)
        .await
        .unwrap();
    let mut compared = (0, 0);
    let mut differ = Vec::new();
    for template in corpus() {
        // A fresh id, and a rate-limit key of its own (what a key allows depends on the jobs
        // enqueued under it before).
        let body = template
            .replace("{ID}", &uuid::Uuid::now_v7().to_string())
            .replace("{KEY}", &format!("k-{}", uuid::Uuid::now_v7().simple()));
        // SQL first, rolled back, so that an id the body names is free for the HTTP request.
        let mut tx = conn.begin().await.unwrap();
        let sql = call(&mut tx, "ojs_enqueue", &body).await;
        tx.rollback().await.unwrap();
        let http = app.post_text("/ojs/v1/jobs", &body).await;
        match sql {
            Answer::Ok(sql) => {
                assert_eq!(http.status, 201, "{body}: SQL accepted, HTTP {}", http.text);
                assert_eq!(
                    comparable(&sql["job"], &body),
                    comparable(&http.json["job"], &body),
                    "{body}: the jobs differ"
                );
                // The SQL rendering of the stored row is the server's (GET).
                let id = http.json["job"]["id"].as_str().unwrap();
                let rendered: String = sqlx::query_scalar(
                    "select ojs_job_wire(j)::text from ojs_job j where id = $1::uuid",
                )
                .bind(id)
                .fetch_one(&mut conn)
                .await
                .unwrap();
                let got = app.get(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
                assert_eq!(
                    serde_json::from_str::<Value>(&rendered).unwrap(),
                    got.json["job"],
                    "{body}: ojs_job_wire differs from GET"
                );
                compared.0 += 1;
            }
            Answer::Refused { status, body: sql } => {
                assert!(
                    http.status >= 400,
                    "{body}: SQL refused {sql}, HTTP accepted"
                );
                let (a, b) = (
                    error_signature(status, &sql),
                    error_signature(http.status, &http.json),
                );
                if a != b {
                    differ.push(format!("{body}\n  SQL  {a}\n  HTTP {b}"));
                }
                compared.1 += 1;
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} answers differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    assert!(compared.0 > 100 && compared.1 > 100, "{compared:?}");
}

#[tokio::test]
async fn batches_get_the_same_answer_through_both_doors() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/typed/config",
        json!({"allowed_job_types": ["x.*"], "default_retry": {"max_attempts": 9}}),
    )
    .await
    .expect(200);
    let ok = json!({"type": "a.b", "args": [1]});
    let not_allowed = json!({"type": "a.b", "args": [], "queue": "typed"});
    let id = uuid::Uuid::now_v7().to_string();
    let cases = vec![
        json!({"jobs": [ok, {"type": "c.d", "args": [], "queue": "other", "priority": 4}]}),
        json!({"jobs": [ok, {"type": "Bad", "args": []}]}),
        json!({"jobs": [ok, ok, {"type": "a.b", "args": [], "retry": {"max_attempts": -1}}]}),
        json!({"jobs": [ok, 5]}),
        json!({"jobs": [ok, {"type": "a.b", "args": [], "meta": {"k": "x".repeat(64 * 1024)}}]}),
        json!({"jobs": [{"type": "a.b", "args": [], "id": id}, {"type": "a.b", "args": [], "id": id}]}),
        json!({"jobs": [ok, {"type": "a.b", "args": [], "options": {"workflow": {}}}]}),
        // Every envelope is read before any queue's rules apply.
        json!({"jobs": [not_allowed, {"type": "Bad", "args": []}]}),
        json!({"jobs": [ok, not_allowed]}),
        json!({"jobs": [{"type": "x.y", "args": [], "queue": "typed", "retry": {"jitter": false}}, ok]}),
        json!({"jobs": [{"type": "x.y", "args": [], "queue": "typed", "retry": {"initial_interval": "PT1M"}}]}),
        json!({"jobs": []}),
        json!({"jobs": {}}),
        json!({"jobs": null}),
        json!({}),
    ];
    let mut conn = sqlx::PgConnection::connect_with(&app.db.options)
        .await
        .unwrap();
    for body in cases {
        let text = body.to_string();
        let mut tx = conn.begin().await.unwrap();
        let sql = call(&mut tx, "ojs_enqueue_batch", &text).await;
        tx.rollback().await.unwrap();
        let http = app.post_text("/ojs/v1/jobs/batch", &text).await;
        match sql {
            Answer::Ok(sql) => {
                assert_eq!(http.status, 201, "{text}: {}", http.text);
                assert_eq!(sql["count"], http.json["count"]);
                let strip = |v: &Value| -> Vec<Value> {
                    v["jobs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|j| comparable(j, &text))
                        .collect()
                };
                assert_eq!(strip(&sql), strip(&http.json), "{text}");
            }
            Answer::Refused { status, body: sql } => assert_eq!(
                error_signature(status, &sql),
                error_signature(http.status, &http.json),
                "{text}: SQL {sql} / HTTP {}",
                http.text
            ),
        }
    }
}

#[tokio::test]
async fn a_rolled_back_enqueue_leaves_nothing_behind() {
    let app = TestApp::spawn().await;
    let events_before: i64 = sqlx::query_scalar("select count(*) from ojs_event")
        .fetch_one(app.pool())
        .await
        .unwrap();
    let mut tx = app.pool().begin().await.unwrap();
    let job = call(
        &mut tx,
        "ojs_enqueue",
        &json!({"type": "receipt.send", "args": [1], "queue": "fresh"}).to_string(),
    )
    .await
    .ok();
    assert_eq!(job["job"]["state"], "available");
    let seen_inside: i64 = sqlx::query_scalar("select count(*) from ojs_job")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(seen_inside, 1, "the caller sees its own job");
    assert_eq!(
        app.job_count().await,
        0,
        "nobody else sees it before commit"
    );
    tx.rollback().await.unwrap();

    assert_eq!(app.job_count().await, 0);
    let events_after: i64 = sqlx::query_scalar("select count(*) from ojs_event")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(events_after, events_before, "no event");
    let queues: i64 = sqlx::query_scalar("select count(*) from ojs_queue where name = 'fresh'")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(queues, 0, "no implicit queue");
    assert!(
        app.fetch(json!({"queues": ["fresh"], "count": 1}))
            .await
            .is_empty(),
        "no job to fetch"
    );
}

#[tokio::test]
async fn a_committed_enqueue_is_handed_to_a_long_polling_worker_at_once() {
    let app = TestApp::spawn_with(|c| {
        c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(60_000)
    })
    .await;
    // The server listens before the worker parks.
    app.wait_for_listeners(1).await;
    let waiting = app.spawn_fetch(&json!({"queues": ["receipts"], "count": 1, "wait_ms": 20000}));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut tx = app.pool().begin().await.unwrap();
    let job = call(
        &mut tx,
        "ojs_enqueue",
        &json!({"type": "receipt.send", "args": ["order-1"], "queue": "receipts"}).to_string(),
    )
    .await
    .ok();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "nothing is handed out before the commit"
    );
    tx.commit().await.unwrap();
    let committed = Instant::now();
    let fetched = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the long poll was not woken")
        .unwrap();
    let took = committed.elapsed();
    assert_eq!(fetched["jobs"][0]["id"], job["job"]["id"]);
    assert!(
        took < Duration::from_secs(1),
        "handed out {took:?} after the commit"
    );
}

#[tokio::test]
async fn a_literal_a_jsonb_and_a_text_body_are_all_taken() {
    let app = TestApp::spawn().await;
    for statement in [
        r#"select ojs_enqueue('{"type": "a.b", "args": [1]}')"#,
        r#"select ojs_enqueue('{"type": "a.b", "args": [1]}'::jsonb)"#,
        r#"select ojs_enqueue('{"type": "a.b", "args": [1]}'::text)"#,
        r#"select ojs_enqueue('{"type": "a.b", "args": [1]}'::json)"#,
        r#"select ojs_enqueue_batch('{"jobs": [{"type": "a.b", "args": [1]}]}')"#,
        r#"select ojs_enqueue_batch('{"jobs": [{"type": "a.b", "args": [1]}]}'::jsonb)"#,
    ] {
        let answer: Value = sqlx::query_scalar(statement)
            .fetch_one(app.pool())
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        let job = answer.get("job").unwrap_or_else(|| &answer["jobs"][0]);
        assert_eq!(job["args"], json!([1]), "{statement}");
    }
    assert_eq!(app.job_count().await, 6);
}

#[tokio::test]
async fn the_typed_form_enqueues_the_same_job() {
    let app = TestApp::spawn().await;
    let id: uuid::Uuid = sqlx::query_scalar(
        "select ojs_enqueue_type('report.build', '[7]', queue => 'reports', priority => 1,
                                 meta => '{\"tenant_id\": \"t1\"}', options => '{\"tags\": [\"x\"]}')",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    let job = app.job(&id.to_string()).await;
    assert_eq!(job["type"], "report.build");
    assert_eq!(job["args"], json!([7]));
    assert_eq!(job["queue"], "reports");
    assert_eq!(job["priority"], 1);
    assert_eq!(job["meta"], json!({"tenant_id": "t1"}));
    assert_eq!(job["tags"], json!(["x"]));
    assert_eq!(job["state"], "available");

    let at = app.db_now_plus(Duration::from_secs(3600)).await;
    let chosen = uuid::Uuid::now_v7();
    let id: uuid::Uuid =
        sqlx::query_scalar("select ojs_enqueue_type('report.build', scheduled_at => $1, id => $2)")
            .bind(at)
            .bind(chosen)
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(id, chosen);
    let job = app.job(&id.to_string()).await;
    assert_eq!(job["state"], "scheduled");
    assert_eq!(job["args"], json!([]));

    // Refusals are the JSON form's.
    let err = sqlx::query_scalar::<_, uuid::Uuid>("select ojs_enqueue_type('Bad.Type')")
        .fetch_one(app.pool())
        .await
        .unwrap_err();
    assert_eq!(
        err.as_database_error().unwrap().code().as_deref(),
        Some("OJ400")
    );
}

#[tokio::test]
async fn a_client_id_makes_a_retried_enqueue_a_duplicate_not_a_second_job() {
    let app = TestApp::spawn().await;
    let id = uuid::Uuid::now_v7().to_string();
    let body = json!({"type": "a.b", "args": [], "id": id});
    sql_enqueue(&app, "ojs_enqueue", &body).await.ok();
    let again = sql_enqueue(&app, "ojs_enqueue", &body)
        .await
        .refused(409, "duplicate");
    assert_eq!(again["error"]["details"]["existing_job_id"], id.as_str());
    // Also once the job has completed (it then lives in ojs_job_done).
    let fetched = app.fetch_one("default", "w").await;
    app.ack_job(&fetched, "w").await.expect(200);
    sql_enqueue(&app, "ojs_enqueue", &body)
        .await
        .refused(409, "duplicate");
    // In a batch: the index of the job whose id is taken.
    let batch = json!({"jobs": [{"type": "a.b", "args": []}, body]});
    let refused = sql_enqueue(&app, "ojs_enqueue_batch", &batch)
        .await
        .refused(409, "duplicate");
    assert_eq!(refused["error"]["details"]["index"], 1);
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn what_v1_does_not_do_is_refused_and_nothing_is_written() {
    let app = TestApp::spawn().await;
    for (body, field) in [
        (
            json!({"type": "a.b", "args": [], "unique": {"keys": ["type"]}}),
            "$.unique",
        ),
        (
            json!({"type": "a.b", "args": [], "options": {"unique": {"keys": ["type"]}}}),
            "$.options.unique",
        ),
        (
            json!({"type": "a.b", "args": [], "workflow": {"chain": [{"type": "c.d", "args": []}]}}),
            "$.workflow",
        ),
    ] {
        let refused = sql_enqueue(&app, "ojs_enqueue", &body)
            .await
            .refused(422, "unsupported");
        assert_eq!(refused["error"]["details"]["field"], field, "{body}");
    }
    assert_eq!(app.job_count().await, 0);
}

#[tokio::test]
async fn a_rate_limited_job_from_sql_is_released_by_its_key_once_committed() {
    let app = TestApp::spawn().await;
    let keyed = |n: i64| {
        json!({"type": "api.call", "args": [n], "queue": "calls",
               "rate_limit": {"key": "partner-api", "concurrency": 1}})
    };
    let mut tx = app.pool().begin().await.unwrap();
    let first = call(&mut tx, "ojs_enqueue", &keyed(1).to_string())
        .await
        .ok();
    let second = call(&mut tx, "ojs_enqueue", &keyed(2).to_string())
        .await
        .ok();
    assert_eq!(
        first["job"]["rate_limit"],
        json!({"key": "partner-api", "concurrency": 1, "on_limit": "wait"})
    );
    tx.commit().await.unwrap();
    // The key lets one go (the releasers heard of it at the commit), and the next once the
    // first is done.
    let mut fetched = Vec::new();
    for _ in 0..100 {
        fetched = app.fetch(json!({"queues": ["calls"], "count": 2})).await;
        if !fetched.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fetched.len(), 1, "concurrency 1: {fetched:?}");
    assert_eq!(fetched[0]["id"], first["job"]["id"]);
    app.ack_job(&fetched[0], "w").await.expect(200);
    let mut next = Vec::new();
    for _ in 0..100 {
        next = app.fetch(json!({"queues": ["calls"], "count": 2})).await;
        if !next.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(next.len(), 1);
    assert_eq!(next[0]["id"], second["job"]["id"]);
}

/// The job PUSH answers for `job` sent by `producer` (`OJS-Producer`).
async fn push_as(app: &TestApp, producer: &str, job: &Value) -> Value {
    app.send(
        reqwest::Method::POST,
        "/ojs/v1/jobs",
        Some(job.to_string().into_bytes()),
        &[
            ("content-type", "application/json"),
            ("ojs-producer", producer),
        ],
    )
    .await
    .expect(201)
    .json
}

#[tokio::test]
async fn the_queue_configuration_applies_as_it_does_to_push() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/billing/config",
        json!({"allowed_job_types": ["invoice.*"], "producers": ["billing-*"],
               "default_timeout": 90, "visibility_timeout": 45, "result_ttl": 120,
               "default_retry": {"max_attempts": 7, "jitter": false}}),
    )
    .await
    .expect(200);
    let invoice = json!({"type": "invoice.send", "args": [], "queue": "billing",
                         "retry": {"max_attempts": 2}});

    // Producers: the setting ojs.producer names the caller.
    let refused = sql_enqueue(&app, "ojs_enqueue", &invoice)
        .await
        .refused(400, "invalid_request");
    assert_eq!(
        refused["error"]["details"]["reason"],
        "producer_not_allowed"
    );
    let mut tx = app.pool().begin().await.unwrap();
    sqlx::query("select set_config('ojs.producer', 'billing-api', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let sql = call(&mut tx, "ojs_enqueue", &invoice.to_string())
        .await
        .ok();
    let other = call(
        &mut tx,
        "ojs_enqueue",
        &json!({"type": "email.send", "args": [], "queue": "billing"}).to_string(),
    )
    .await
    .refused(400, "JOB_TYPE_NOT_ALLOWED");
    assert_eq!(other["error"]["details"]["field"], "$.type");
    tx.rollback().await.unwrap();

    // Defaults: the same job as PUSH makes.
    let http = push_as(&app, "billing-api", &invoice).await;
    assert_eq!(sql["job"]["timeout_ms"], 90_000);
    assert_eq!(sql["job"]["visibility_timeout_ms"], 45_000);
    assert_eq!(sql["job"]["retry"]["max_attempts"], 2);
    assert_eq!(sql["job"]["retry"]["jitter"], false);
    assert_eq!(sql["job"]["result_ttl"], 120);
    assert_eq!(comparable(&sql["job"], ""), comparable(&http["job"], ""));

    // A job's own result_ttl (even null) wins over its queue's.
    for own in [json!(0), json!(null)] {
        let mut job = invoice.clone();
        job["result_ttl"] = own.clone();
        let mut tx = app.pool().begin().await.unwrap();
        sqlx::query("select set_config('ojs.producer', 'billing-api', true)")
            .execute(&mut *tx)
            .await
            .unwrap();
        let sql = call(&mut tx, "ojs_enqueue", &job.to_string()).await.ok();
        tx.rollback().await.unwrap();
        let http = push_as(&app, "billing-api", &job).await;
        assert_eq!(sql["job"]["result_ttl"], own);
        assert_eq!(comparable(&sql["job"], ""), comparable(&http["job"], ""));
    }
}

#[tokio::test]
async fn queue_bounds_draining_and_strict_queues_refuse_as_push_does() {
    let app = TestApp::spawn_with(|c| c.jobs.strict_queues = true).await;
    let refused = sql_enqueue(&app, "ojs_enqueue", &job("a.b", "nowhere"))
        .await
        .refused(400, "invalid_request");
    assert_eq!(refused["error"]["details"]["reason"], "unknown_queue");

    app.post("/ojs/v1/queues", json!({"name": "small"}))
        .await
        .expect(201);
    app.put("/ojs/v1/queues/small/config", json!({"max_size": 2}))
        .await
        .expect(200);
    sql_enqueue(
        &app,
        "ojs_enqueue_batch",
        &json!({"jobs": [job("a.b", "small"), job("a.b", "small")]}),
    )
    .await
    .ok();
    let full = sql_enqueue(&app, "ojs_enqueue", &job("a.b", "small"))
        .await
        .refused(429, "QUEUE_FULL");
    assert_eq!(full["error"]["retryable"], true);
    assert_eq!(full["error"]["details"]["bound"], 2);
    let http = app.post("/ojs/v1/jobs", job("a.b", "small")).await;
    assert_eq!(
        error_signature(429, &full),
        error_signature(http.status, &http.json)
    );

    // A paused queue takes jobs; FETCH skips it.
    app.post("/ojs/v1/queues/small/pause", json!({}))
        .await
        .expect(200);
    app.put("/ojs/v1/queues/small/config", json!({"max_size": null}))
        .await
        .expect(200);
    let paused = sql_enqueue(&app, "ojs_enqueue", &job("a.b", "small"))
        .await
        .ok();
    assert_eq!(paused["job"]["state"], "available");
    assert!(
        app.fetch(json!({"queues": ["small"], "count": 5}))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_full_drop_oldest_queue_makes_room_as_push_does() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/ring/config",
        json!({"max_size": 2, "overflow_policy": "drop_oldest"}),
    )
    .await
    .expect(200);
    let first = sql_enqueue(&app, "ojs_enqueue", &job("a.b", "ring"))
        .await
        .ok();
    sql_enqueue(&app, "ojs_enqueue", &job("a.b", "ring"))
        .await
        .ok();
    let third = sql_enqueue(&app, "ojs_enqueue", &job("a.b", "ring"))
        .await
        .ok();
    assert_eq!(third["job"]["state"], "available");
    let dropped = app.job(first["job"]["id"].as_str().unwrap()).await;
    assert_eq!(dropped["state"], "discarded");
    assert_eq!(dropped["error"]["code"], "overflow");
    // A batch larger than the bound cannot be made room for.
    let batch = json!({"jobs": [job("a.b", "ring"), job("a.b", "ring"), job("a.b", "ring")]});
    let full = sql_enqueue(&app, "ojs_enqueue_batch", &batch)
        .await
        .refused(429, "QUEUE_FULL");
    assert_eq!(full["error"]["details"]["strategy"], "drop_oldest");
    let http = app.post("/ojs/v1/jobs/batch", batch).await;
    assert_eq!(
        error_signature(429, &full),
        error_signature(http.status, &http.json)
    );
}

#[tokio::test]
async fn the_servers_settings_reach_sql() {
    let app = TestApp::spawn_with(|c| {
        c.jobs.max_priority = 1000;
        c.jobs.default_timeout = std::time::Duration::from_secs(60);
        c.jobs.allow_hyphenated_types = Some(false);
    })
    .await;
    let job = sql_enqueue(
        &app,
        "ojs_enqueue",
        &json!({"type": "a.b", "args": [], "priority": 999}),
    )
    .await
    .ok();
    assert_eq!(job["job"]["priority"], 999);
    assert_eq!(job["job"]["timeout_ms"], 60_000);
    sql_enqueue(&app, "ojs_enqueue", &json!({"type": "a-b", "args": []}))
        .await
        .refused(400, "invalid_request");
}

#[tokio::test]
async fn the_producer_role_may_enqueue_and_nothing_else() {
    let app = TestApp::spawn().await;
    let role = format!("ojs_test_app_{}", uuid::Uuid::now_v7().simple());
    app.admin_sql(&format!("create role {role}; grant ojs_producer to {role}"))
        .await;
    let mut conn = sqlx::PgConnection::connect_with(&app.db.options)
        .await
        .unwrap();
    sqlx::query(&format!("set role {role}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let body = job("a.b", "roles").to_string();
    let answer = call(&mut conn, "ojs_enqueue", &body).await.ok();
    assert_eq!(answer["job"]["state"], "available");
    for statement in [
        "select count(*) from ojs_job",
        "delete from ojs_job",
        "update ojs_setting set strict_queues = true",
        "select ojs_insert_jobs('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', false, 0, '{}', '{}', '{}', '{}', 0, '{}', '{}')",
    ] {
        let err = sqlx::query(statement).execute(&mut conn).await.unwrap_err();
        assert_eq!(
            err.as_database_error().unwrap().code().as_deref(),
            Some("42501"),
            "{statement}: {err}"
        );
    }
    // Without the role, the functions are not open to anyone.
    sqlx::query("reset role").execute(&mut conn).await.unwrap();
    let outsider = format!("ojs_test_outsider_{}", uuid::Uuid::now_v7().simple());
    app.admin_sql(&format!("create role {outsider}")).await;
    sqlx::query(&format!("set role {outsider}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let err = sqlx::query("select ojs_enqueue('{}')")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(
        err.as_database_error().unwrap().code().as_deref(),
        Some("42501")
    );
    drop(conn);
    app.admin_sql(&format!("drop role {role}; drop role {outsider}"))
        .await;
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn jobs_enqueued_from_sql_show_in_the_metrics() {
    let app = TestApp::spawn_with(|c| c.maintenance.enabled = true).await;
    // The leader counts them.
    for _ in 0..200 {
        let leader: Option<String> =
            sqlx::query_scalar("select leader_id from ojs_leader where expires_at > now()")
                .fetch_optional(app.pool())
                .await
                .unwrap();
        if leader.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let queue = format!("sqlmetrics{}", uuid::Uuid::now_v7().simple());
    sql_enqueue(
        &app,
        "ojs_enqueue_batch",
        &json!({"jobs": [job("sql.counted", &queue), job("sql.counted", &queue)]}),
    )
    .await
    .ok();
    let wanted = format!("ojs_job_enqueued_total{{queue=\"{queue}\",type=\"sql.counted\"}} 2");
    let mut text = String::new();
    for _ in 0..100 {
        text = app.get("/metrics").await.text;
        if text.contains(&wanted) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{wanted} not in /metrics:\n{}",
        text.lines()
            .filter(|l| l.contains("enqueued"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
