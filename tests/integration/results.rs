//! Job results (the OJS results extension): read once the job ended, awaited without polling
//! (woken by the job's end on any replica), read many at once, kept for the job's
//! `result_ttl`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Client, Resp, TestApp};

fn result_path(id: &str) -> String {
    format!("/ojs/v1/jobs/{id}/result")
}

async fn wait_for(api: &Client, id: &str, timeout_secs: u64) -> Resp {
    api.get(&format!(
        "{}?wait=true&timeout={timeout_secs}",
        result_path(id)
    ))
    .await
}

/// Starts a waiting read of `id`'s result in the background (not contract-checked: the test
/// reads the answer it resolves to).
fn spawn_wait(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    timeout_secs: u64,
) -> tokio::task::JoinHandle<(u16, Value, Instant)> {
    let request = http.get(format!(
        "{base}/ojs/v1/jobs/{id}/result?wait=true&timeout={timeout_secs}"
    ));
    tokio::spawn(async move {
        let resp = request.send().await.expect("request reaches the server");
        let status = resp.status().as_u16();
        let body = resp.json::<Value>().await.expect("a JSON body");
        (status, body, Instant::now())
    })
}

/// Whether `id` is flagged as awaited (`ojs_job_all.result_awaited`).
async fn awaited(app: &TestApp, id: &str) -> Option<bool> {
    sqlx::query_scalar("select result_awaited from ojs_job_all where id = $1::uuid")
        .bind(id)
        .fetch_one(app.pool())
        .await
        .unwrap()
}

/// Waits (up to 5 s) until `id` is flagged as awaited: a waiter has started waiting.
async fn until_awaited(app: &TestApp, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while awaited(app, id).await != Some(true) {
        assert!(Instant::now() < deadline, "{id} awaited within 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_result_is_read_once_the_job_ended_with_its_metadata() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res"}))
        .await;
    // Not ended: 408 at once, with the state.
    let pending = app
        .get(&result_path(&id))
        .await
        .expect_error(408, "result_not_ready");
    assert_eq!(pending.json["error"]["details"]["state"], "available");
    assert_eq!(pending.json["error"]["retryable"], true);
    assert_ne!(pending.header("connection"), Some("close"));

    let job = app.fetch_one("res", "w1").await;
    app.ack(json!({"job_id": job["id"], "worker_id": "w1", "result": {"url": "s3://x", "n": 2}}))
        .await
        .expect(200);
    let got = app.get(&result_path(&id)).await.expect(200).json;
    assert_eq!(got["job_id"], id.as_str());
    assert_eq!(got["state"], "completed");
    assert_eq!(got["result"], json!({"url": "s3://x", "n": 2}));
    assert_eq!(
        got["result_stored_at"],
        app.job(&id).await["completed_at"],
        "stored when the job completed"
    );
    assert_eq!(got["result_size_bytes"], r#"{"url":"s3://x","n":2}"#.len());
    assert!(got.get("result_expires_at").is_none(), "kept with the job");
    assert!(got.get("error").is_none());

    // A JSON type is kept as sent; no result reads as null.
    let bare = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res"}))
        .await;
    let job = app.fetch_one("res", "w1").await;
    app.ack(json!({"job_id": job["id"], "result": 42}))
        .await
        .expect(200);
    assert_eq!(
        app.get(&result_path(&bare)).await.expect(200).json["result"],
        42
    );

    app.get(&result_path("01a22755-c990-7268-94f2-3e9b007407a3"))
        .await
        .expect_error(404, "not_found");
    app.get(&result_path("not-a-job"))
        .await
        .expect_error(404, "not_found");
}

/// The value of the metric line starting with `prefix` (0 when absent).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn result_sizes_and_refused_results_are_measured() {
    let app = TestApp::spawn().await;
    let before = app.get("/metrics").await.expect(200).text;
    let rejected = metric(&before, "ojs_result_rejected_total ");
    for (i, result) in [json!("x".repeat(100)), json!({"k": "y".repeat(5000)})]
        .into_iter()
        .enumerate()
    {
        app.push_id(json!({"type": "r.sized", "args": [i], "queue": "res-metrics"}))
            .await;
        let job = app.fetch_one("res-metrics", "w").await;
        if i == 0 {
            app.ack(json!({"job_id": job["id"], "result": "z".repeat(1024 * 1024 + 1)}))
                .await
                .expect_error(413, "envelope_too_large");
        }
        app.ack(json!({"job_id": job["id"], "result": result}))
            .await
            .expect(200);
    }
    // An ACK without a result records no size.
    app.push_id(json!({"type": "r.sized", "args": [], "queue": "res-metrics"}))
        .await;
    let job = app.fetch_one("res-metrics", "w").await;
    app.ack(json!({"job_id": job["id"]})).await.expect(200);

    let after = app.get("/metrics").await.expect(200).text;
    let series = r#"{queue="res-metrics",type="r.sized""#;
    let count = format!("ojs_result_size_bytes_count{series}}}");
    assert_eq!(metric(&after, &count), 2.0, "{after}");
    let sum = metric(&after, &format!("ojs_result_size_bytes_sum{series}}}"));
    assert_eq!(sum, (102 + 5008) as f64);
    let small = format!("ojs_result_size_bytes_bucket{series},le=\"256\"}}");
    assert_eq!(metric(&after, &small), 1.0, "{after}");
    assert!(metric(&after, "ojs_result_rejected_total ") >= rejected + 1.0);
}

#[tokio::test]
async fn a_discarded_job_answers_its_error_and_a_cancelled_one_no_result() {
    let app = TestApp::spawn().await;
    let failing = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res", "retry": {"max_attempts": 1}}))
        .await;
    let job = app.fetch_one("res", "w1").await;
    app.nack(json!({"job_id": job["id"], "error": {"code": "boom", "message": "it broke"}}))
        .await
        .expect(200);
    let got = app.get(&result_path(&failing)).await.expect(200).json;
    assert_eq!(got["state"], "discarded");
    assert_eq!(got["result"], Value::Null);
    assert_eq!(got["error"]["message"], "it broke");

    let cancelled = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res"}))
        .await;
    app.delete(&format!("/ojs/v1/jobs/{cancelled}"))
        .await
        .expect(200);
    let got = app.get(&result_path(&cancelled)).await.expect(200).json;
    assert_eq!(got["state"], "cancelled");
    assert_eq!(got["result"], Value::Null);
}

#[tokio::test]
async fn a_wait_is_answered_when_the_job_ends_on_another_replica_and_times_out_otherwise() {
    let app = TestApp::spawn().await;
    let replica = app.spawn_replica(|_| {}).await;
    app.wait_for_listeners(2).await;
    let other = Client::new(replica.base.clone());
    let id = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res"}))
        .await;

    // No end: the wait runs out with 408 and the job's state.
    let started = Instant::now();
    let timed_out = wait_for(&other, &id, 1)
        .await
        .expect_error(408, "result_not_ready");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(timed_out.json["error"]["details"]["state"], "available");
    assert_eq!(
        awaited(&app, &id).await,
        Some(true),
        "the wait flagged the job"
    );

    // Two clients wait on the replica; the job ends on the first server.
    let http = reqwest::Client::new();
    let waiters = [
        spawn_wait(&http, &replica.base, &id, 20),
        spawn_wait(&http, &replica.base, &id, 20),
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let job = app.fetch_one("res", "w1").await;
    let acked = Instant::now();
    app.ack(json!({"job_id": job["id"], "result": {"ok": true}}))
        .await
        .expect(200);
    for waiter in waiters {
        let (status, body, answered) = waiter.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"], json!({"ok": true}));
        assert!(
            answered.duration_since(acked) < Duration::from_secs(5),
            "woken by the end, not by the timeout"
        );
    }
    // A wait on an ended job answers at once.
    wait_for(&other, &id, 20).await.expect(200);
    replica.stop().await;
}

#[tokio::test]
async fn a_failure_that_discards_the_job_and_a_removal_end_the_wait() {
    let app = TestApp::spawn().await;
    let http = reqwest::Client::new();
    let base = app.api.base.clone();

    let failing = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res", "retry": {"max_attempts": 1}}))
        .await;
    let waiter = spawn_wait(&http, &base, &failing, 20);
    until_awaited(&app, &failing).await;
    let job = app.fetch_one("res", "w1").await;
    app.nack(json!({"job_id": job["id"], "error": {"message": "no"}}))
        .await
        .expect(200);
    let (status, body, _) = waiter.await.unwrap();
    assert_eq!((status, body["state"].as_str()), (200, Some("discarded")));

    // A job removed while awaited (here by SQL) ends the wait with 410.
    let removed = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "res"}))
        .await;
    let waiter = spawn_wait(&http, &base, &removed, 20);
    until_awaited(&app, &removed).await;
    app.sql(&format!("delete from ojs_job where id = '{removed}'"))
        .await;
    let (status, body, _) = waiter.await.unwrap();
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["error"]["code"], "RESULT_PRUNED");
}

#[tokio::test]
async fn a_thousand_waiters_on_two_replicas_are_all_answered_with_their_jobs_results() {
    const JOBS: usize = 1_000;
    let app = TestApp::spawn().await;
    let replica = app.spawn_replica(|_| {}).await;
    app.wait_for_listeners(2).await;
    let jobs: Vec<Value> = (0..JOBS)
        .map(|i| json!({"type": "r.t", "args": [i], "queue": "many"}))
        .collect();
    let mut ids = Vec::with_capacity(JOBS);
    for chunk in jobs.chunks(500) {
        let pushed = app
            .post("/ojs/v1/jobs/batch", json!({"jobs": chunk}))
            .await
            .expect(201);
        ids.extend(
            pushed.json["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_owned()),
        );
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let bases = [app.api.base.clone(), replica.base.clone()];
    let waiters: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| spawn_wait(&http, &bases[i % 2], id, 30))
        .collect();
    // Every job flagged: every waiter is waiting.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let flagged: i64 = sqlx::query_scalar("select count(*) from ojs_job where result_awaited")
            .fetch_one(app.pool())
            .await
            .unwrap();
        if flagged as usize == JOBS {
            break;
        }
        assert!(Instant::now() < deadline, "{flagged} of {JOBS} waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A worker takes them all and ACKs them in batches, each with its own result.
    let mut taken = 0;
    while taken < JOBS {
        let batch = app
            .fetch(json!({"queues": ["many"], "worker_id": "w", "count": 100}))
            .await;
        let acks: Vec<Value> = batch
            .iter()
            .map(|j| json!({"job_id": j["id"], "result": {"arg": j["args"][0]}}))
            .collect();
        taken += acks.len();
        app.post("/ojs/v1/workers/ack/batch", json!({"acks": acks}))
            .await
            .expect(200);
    }
    for (i, waiter) in waiters.into_iter().enumerate() {
        let (status, body, _) = waiter.await.unwrap();
        assert_eq!(status, 200, "waiter {i}: {body}");
        assert_eq!(body["job_id"], ids[i].as_str());
        assert_eq!(body["result"], json!({"arg": i}), "waiter {i}");
    }
    replica.stop().await;
}

#[tokio::test]
async fn result_ttl_zero_keeps_no_result_and_a_short_one_expires() {
    let app = TestApp::spawn().await;
    let ephemeral = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ttl", "result_ttl": 0}))
        .await;
    let short = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ttl", "result_ttl": 1}))
        .await;
    let long = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ttl", "result_ttl": 3600}))
        .await;
    // 0.0 is 0: kept as the integer, so the ACK keeps no result either.
    let ephemeral_float = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ttl", "result_ttl": 0.0}))
        .await;
    assert_eq!(app.job(&ephemeral_float).await["result_ttl"], json!(0));
    for _ in 0..4 {
        let job = app.fetch_one("ttl", "w").await;
        app.ack(json!({"job_id": job["id"], "result": {"secret": 1}}))
            .await
            .expect(200);
    }
    // The ACK kept no result: not in the job, nor in its event.
    let gone = app
        .get(&result_path(&ephemeral))
        .await
        .expect_error(410, "RESULT_PRUNED");
    assert_eq!(gone.json["error"]["details"]["job_id"], ephemeral.as_str());
    assert!(
        app.job(&ephemeral)
            .await
            .get("result")
            .is_none_or(Value::is_null)
    );
    assert_eq!(app.job(&ephemeral).await["result_ttl"], 0, "kept as sent");
    app.get(&result_path(&ephemeral_float))
        .await
        .expect_error(410, "RESULT_PRUNED");

    let kept = app.get(&result_path(&long)).await.expect(200).json;
    let stored =
        chrono::DateTime::parse_from_rfc3339(kept["result_stored_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(kept["result_expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(expires - stored, chrono::TimeDelta::seconds(3600));

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let expired = app
        .get(&result_path(&short))
        .await
        .expect_error(410, "RESULT_PRUNED");
    assert!(expired.json["error"]["details"]["expired_at"].is_string());
    // The job itself is still there.
    assert_eq!(app.job(&short).await["state"], "completed");
}

#[tokio::test]
async fn a_queues_result_ttl_applies_to_jobs_that_name_none() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/_default/config",
        json!({"result_ttl": 3600}),
    )
    .await
    .expect(200);
    app.put("/ojs/v1/queues/ephemeral/config", json!({"result_ttl": 0}))
        .await
        .expect(200);
    let config = app.get("/ojs/v1/queues/ephemeral/config").await.expect(200);
    assert_eq!(config.json["config"]["result_ttl"], 0, "{}", config.json);
    let bad = app
        .put("/ojs/v1/queues/ephemeral/config", json!({"result_ttl": -2}))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(bad.json["error"]["details"]["field"], "$.result_ttl");

    let dropped = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ephemeral"}))
        .await;
    let own = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ephemeral", "result_ttl": -1}))
        .await;
    let inherited = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "other"}))
        .await;
    assert_eq!(app.job(&dropped).await["result_ttl"], 0, "the queue's");
    assert_eq!(app.job(&own).await["result_ttl"], -1, "the job's own");
    assert_eq!(app.job(&inherited).await["result_ttl"], 3600, "_default's");
    for queue in ["ephemeral", "ephemeral", "other"] {
        let job = app.fetch_one(queue, "w").await;
        app.ack(json!({"job_id": job["id"], "result": {"n": 1}}))
            .await
            .expect(200);
    }
    app.get(&result_path(&dropped))
        .await
        .expect_error(410, "RESULT_PRUNED");
    let kept = app.get(&result_path(&own)).await.expect(200).json;
    assert_eq!(kept["result"], json!({"n": 1}));
    assert!(kept.get("result_expires_at").is_none_or(Value::is_null));
    let timed = app.get(&result_path(&inherited)).await.expect(200).json;
    assert!(timed["result_expires_at"].is_string(), "{timed}");

    // Resetting the queue's value inherits _default's again, for jobs enqueued from then on.
    app.put(
        "/ojs/v1/queues/ephemeral/config",
        json!({"result_ttl": null}),
    )
    .await
    .expect(200);
    let later = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "ephemeral"}))
        .await;
    assert_eq!(app.job(&later).await["result_ttl"], 3600);
}

#[tokio::test]
async fn bad_result_ttls_and_waits_are_refused_with_the_field() {
    let app = TestApp::spawn().await;
    for bad in [json!(-2), json!("60"), json!(1.5), json!(4_294_967_296_i64)] {
        let resp = app
            .post(
                "/ojs/v1/jobs",
                json!({"type": "r.t", "args": [], "result_ttl": bad}),
            )
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(
            resp.json["error"]["details"]["field"], "$.result_ttl",
            "{bad}"
        );
    }
    let id = app
        .push_id(json!({"type": "r.t", "args": [], "result_ttl": -1}))
        .await;
    for query in ["wait=yes", "wait=true&timeout=-1", "wait=true&timeout=soon"] {
        let resp = app
            .get(&format!("{}?{query}", result_path(&id)))
            .await
            .expect_error(400, "invalid_request");
        assert!(
            resp.json["error"]["details"]["field"]
                .as_str()
                .unwrap()
                .starts_with("query."),
            "{query}"
        );
    }
}

#[tokio::test]
async fn many_results_are_read_at_once() {
    let app = TestApp::spawn().await;
    let done = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "bulk"}))
        .await;
    let job = app.fetch_one("bulk", "w").await;
    app.ack(json!({"job_id": job["id"], "result": [1, 2]}))
        .await
        .expect(200);
    let waiting = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "bulk"}))
        .await;
    let unknown = "01a22755-c990-7268-94f2-3e9b007407a3";
    let got = app
        .post(
            "/ojs/v1/jobs/results",
            json!({"ids": [done, waiting, unknown]}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(
        got,
        json!({"results": {
            done.as_str(): {"state": "completed", "result": [1, 2]},
            waiting.as_str(): {"state": "available", "result": null},
            unknown: null,
        }})
    );

    for (body, field) in [
        (json!({}), "$.ids"),
        (json!({"ids": "x"}), "$.ids"),
        (json!({"ids": [done, "nope"]}), "$.ids[1]"),
        (json!({"ids": vec![unknown; 1001]}), "$.ids"),
    ] {
        let resp = app
            .post("/ojs/v1/jobs/results", body)
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(resp.json["error"]["details"]["field"], field);
    }
}

/// Reads the stream to its end (10 s at most); the text read.
async fn read_to_end(resp: &mut reqwest::Response) -> String {
    let mut text = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    text
}

/// Reads the stream until `n` events named `event` arrived (10 s at most).
async fn read_until(resp: &mut reqwest::Response, text: &mut String, event: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::support::sse_data(text, Some(event)).len() < n {
        assert!(Instant::now() < deadline, "{n} {event} event(s): {text}");
        if let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await
        {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test]
async fn the_stream_shows_progress_then_the_result_and_ends() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "r.t", "args": [], "queue": "stream"}))
        .await;
    app.fetch_one("stream", "w").await;
    ojsd::app::install_tls();
    let http = reqwest::Client::new();
    let open = |id: &str| {
        http.get(format!("{}/ojs/v1/jobs/{id}/result/stream", app.api.base))
            .send()
    };
    let mut resp = open(&id).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    read_until(&mut resp, &mut text, "progress", 1).await;
    app.put(
        &format!("/ojs/v1/jobs/{id}/progress"),
        json!({"progress": 0.5, "data": {"rows": 500}}),
    )
    .await
    .expect(200);
    read_until(&mut resp, &mut text, "progress", 2).await;
    assert_eq!(
        crate::support::sse_data(&text, Some("progress"))[1]["data"],
        json!({"rows": 500})
    );
    let acked = Instant::now();
    app.ack(json!({"job_id": id, "result": {"total": 1000}}))
        .await
        .expect(200);
    text.push_str(&read_to_end(&mut resp).await);
    assert!(
        acked.elapsed() < Duration::from_secs(5),
        "the stream ends with the job"
    );
    let results = crate::support::sse_data(&text, Some("result"));
    assert_eq!(results.len(), 1, "{text}");
    assert_eq!(results[0]["value"], json!({"total": 1000}));
    assert_eq!(results[0]["state"], "completed");

    // A discarded job's stream ends with its error; an ended job's stream at once.
    let failing = app
        .push_id(
            json!({"type": "r.t", "args": [], "queue": "stream", "retry": {"max_attempts": 1}}),
        )
        .await;
    let job = app.fetch_one("stream", "w").await;
    app.nack(json!({"job_id": job["id"], "error": {"message": "nope"}}))
        .await
        .expect(200);
    let mut resp = open(&failing).await.unwrap();
    let text = read_to_end(&mut resp).await;
    let errors = crate::support::sse_data(&text, Some("error"));
    assert_eq!(errors[0]["error"]["message"], "nope", "{text}");
    assert_eq!(errors[0]["state"], "discarded");

    app.get("/ojs/v1/jobs/01a22755-c990-7268-94f2-3e9b007407a3/result/stream")
        .await
        .expect_error(404, "not_found");
}
