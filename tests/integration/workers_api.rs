//! FETCH, ACK, NACK and heartbeats through the HTTP API.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestApp, ids, job};

#[tokio::test]
async fn fetch_hands_out_lower_priority_numbers_first_then_fifo() {
    let app = TestApp::spawn().await;
    let mut expected = Vec::new();
    let low_a = app
        .push_id(json!({"type": "a.b", "args": ["low a"], "queue": "q", "priority": 5}))
        .await;
    let normal_a = app
        .push_id(json!({"type": "a.b", "args": ["normal a"], "queue": "q"}))
        .await;
    let urgent = app
        .push_id(json!({"type": "a.b", "args": ["urgent"], "queue": "q", "priority": 0}))
        .await;
    let normal_b = app
        .push_id(json!({"type": "a.b", "args": ["normal b"], "queue": "q"}))
        .await;
    let low_b = app
        .push_id(json!({"type": "a.b", "args": ["low b"], "queue": "q", "priority": 5}))
        .await;
    expected.extend([urgent, normal_a, normal_b, low_a, low_b]);
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(
            app.fetch_one("q", "w").await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(got, expected);
    assert!(app.fetch(json!({"queues": ["q"]})).await.is_empty());
}

#[tokio::test]
async fn fetch_reads_queues_strictly_in_the_order_given() {
    let app = TestApp::spawn().await;
    let low = app.push_id(job("a.b", "low")).await;
    let high = app.push_id(job("a.b", "high")).await;
    let urgent_low = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "low", "priority": 0}))
        .await;
    let first = app.fetch(json!({"queues": ["high", "low"]})).await;
    assert_eq!(ids(&first), [high]);
    // A count spanning queues drains the first queue before touching the next.
    let rest = app
        .fetch(json!({"queues": ["high", "low"], "count": 10}))
        .await;
    assert_eq!(ids(&rest), [urgent_low, low]);
}

#[tokio::test]
async fn fetch_returns_count_jobs_with_claim_fields() {
    let app = TestApp::spawn().await;
    for i in 0..5 {
        app.push(json!({"type": "a.b", "args": [i], "queue": "q"}))
            .await;
    }
    let resp = app
        .post("/ojs/v1/workers/fetch", json!({"queues": ["q"], "count": 3, "worker_id": "w-7", "visibility_timeout_ms": 60000}))
        .await
        .expect(200);
    let jobs = resp.json["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3);
    assert_eq!(resp.json["job"], jobs[0]);
    for j in jobs {
        assert_eq!(j["state"], "active");
        assert_eq!(j["attempt"], 1);
        assert_eq!(j["worker_id"], "w-7");
        assert!(j["started_at"].is_string());
        let started =
            chrono::DateTime::parse_from_rfc3339(j["started_at"].as_str().unwrap()).unwrap();
        let until =
            chrono::DateTime::parse_from_rfc3339(j["visible_until"].as_str().unwrap()).unwrap();
        assert_eq!((until - started).num_milliseconds(), 60_000);
    }
    let info = app.job(jobs[0]["id"].as_str().unwrap()).await;
    assert_eq!(info["state"], "active");
}

#[tokio::test]
async fn fetch_of_an_empty_or_unknown_queue_is_an_empty_list() {
    let app = TestApp::spawn().await;
    let resp = app
        .post("/ojs/v1/workers/fetch", json!({"queues": ["nothing-here"]}))
        .await
        .expect(200);
    assert_eq!(resp.json, json!({"jobs": []}));
}

#[tokio::test]
async fn reservation_length_comes_from_the_job_then_the_server_default() {
    let app = TestApp::spawn_with(|c| {
        c.jobs.default_visibility_timeout = std::time::Duration::from_secs(120)
    })
    .await;
    app.push(json!({"type": "a.b", "args": [], "queue": "q", "visibility_timeout": "PT30S"}))
        .await;
    app.push(job("a.b", "q")).await;
    let span = |j: &Value| {
        let started =
            chrono::DateTime::parse_from_rfc3339(j["started_at"].as_str().unwrap()).unwrap();
        let until =
            chrono::DateTime::parse_from_rfc3339(j["visible_until"].as_str().unwrap()).unwrap();
        (until - started).num_seconds()
    };
    assert_eq!(span(&app.fetch_one("q", "w").await), 30);
    assert_eq!(span(&app.fetch_one("q", "w").await), 120);
}

#[tokio::test]
async fn long_poll_is_woken_by_an_enqueue() {
    // With a 60 s poll interval only the notification can deliver the job within the wait.
    let app = TestApp::spawn_with(|c| {
        c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(60_000)
    })
    .await;
    let started = Instant::now();
    let waiter = app.spawn_fetch(&json!({"queues": ["other", "wake"], "wait_ms": 10_000}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.push(job("a.b", "unrelated")).await;
    let id = app.push_id(job("a.b", "wake")).await;
    let body = waiter.await.unwrap();
    assert_eq!(body["jobs"][0]["id"], id.as_str());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered before the wait ran out"
    );
}

#[tokio::test]
async fn long_poll_returns_empty_when_the_wait_runs_out() {
    let app = TestApp::spawn().await;
    let started = Instant::now();
    let resp = app
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": ["idle"], "wait_ms": 300}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["jobs"], json!([]));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn fetch_promotes_due_scheduled_and_retryable_jobs() {
    let app = TestApp::spawn().await;
    let scheduled = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "scheduled_at": "+PT1H"}))
        .await;
    assert!(
        app.fetch(json!({"queues": ["q"]})).await.is_empty(),
        "not due yet"
    );
    // Move the due time into the past instead of sleeping. A FETCH trusts what it learned of
    // the next due time for a while: a due time changed by hand is seen once that runs out.
    app.sql(&format!(
        "update ojs_job set scheduled_at = now() - interval '1 second' where id = '{scheduled}'"
    ))
    .await;
    tokio::time::sleep(ojsd::wakeup::waiters::NEXT_DUE_TRUST).await;
    let got = app.fetch_one("q", "w").await;
    assert_eq!(got["id"], scheduled.as_str());
    assert!(got["enqueued_at"].is_string());

    app.nack(json!({"job_id": scheduled, "error": {"message": "try later"}}))
        .await
        .expect(200);
    assert_eq!(app.job(&scheduled).await["state"], "retryable");
    assert!(
        app.fetch(json!({"queues": ["q"]})).await.is_empty(),
        "backoff not elapsed"
    );
    app.sql(&format!(
        "update ojs_job set next_retry_at = now() - interval '1 second' where id = '{scheduled}'"
    ))
    .await;
    tokio::time::sleep(ojsd::wakeup::waiters::NEXT_DUE_TRUST).await;
    let again = app.fetch_one("q", "w").await;
    assert_eq!(again["id"], scheduled.as_str());
    assert_eq!(again["attempt"], 2);
}

#[tokio::test]
async fn fetch_never_hands_out_an_expired_job() {
    let app = TestApp::spawn().await;
    let expired = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "q", "expires_at": "2020-01-01T00:00:00Z"}),
        )
        .await;
    let ttl_passed = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "enqueue_ttl": 60}))
        .await;
    app.sql(&format!(
        "update ojs_job set created_at = now() - interval '2 minutes', claim_deadline_at = now() - interval '1 minute' where id = '{ttl_passed}'"
    ))
    .await;
    let fresh = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "q", "expires_at": "2099-01-01T00:00:00Z"}),
        )
        .await;
    let got = app.fetch(json!({"queues": ["q"], "count": 10})).await;
    assert_eq!(ids(&got), [fresh]);
    assert_eq!(app.job(&expired).await["state"], "available");
}

#[tokio::test]
async fn ack_completes_with_result_and_removes_the_error() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"initial_interval": "PT1S", "jitter": false}}))
        .await;
    app.fetch_one("q", "w").await;
    app.nack(json!({"job_id": id, "error": {"message": "flaky"}}))
        .await
        .expect(200);
    app.sql(&format!(
        "update ojs_job set next_retry_at = now() where id = '{id}'"
    ))
    .await;
    app.fetch_one("q", "w").await;
    // Raw text: the result's number spelling must survive (json! would rewrite 2.50 as 2.5).
    let resp = app
        .post_text(
            "/ojs/v1/workers/ack",
            &format!(r#"{{"job_id":"{id}","worker_id":"w","result":{{"rows":[1,2.50]}}}}"#),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["acknowledged"], true);
    assert_eq!(resp.json["id"], id.as_str());
    assert_eq!(resp.json["job_id"], id.as_str());
    assert_eq!(resp.json["state"], "completed");
    assert!(resp.json["completed_at"].is_string());
    assert!(resp.json.get("job").is_none(), "{}", resp.text);
    let info = app.get(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    assert!(
        info.text.contains(r#""result":{"rows":[1,2.50]}"#),
        "{}",
        info.text
    );
    let j = app.job(&id).await;
    assert_eq!(j["state"], "completed");
    assert!(j.get("error").is_none());
    assert_eq!(j["errors"].as_array().unwrap().len(), 1, "history is kept");
    assert_eq!(j["attempt"], 2);
}

#[tokio::test]
async fn ack_answers_the_whole_job_only_when_asked() {
    let app = TestApp::spawn().await;
    let ack = |id: &str, prefer: Option<&'static str>| {
        let body = json!({"job_id": id, "worker_id": "w", "result": {"n": 1}}).to_string();
        let app = &app;
        async move {
            let mut headers = vec![("content-type", "application/json")];
            headers.extend(prefer.map(|p| ("prefer", p)));
            app.send(
                Method::POST,
                "/ojs/v1/workers/ack",
                Some(body.into_bytes()),
                &headers,
            )
            .await
            .expect(200)
        }
    };
    let plain = app.push_id(job("a.b", "q")).await;
    let asked = app.push_id(job("a.b", "q")).await;
    let other = app.push_id(job("a.b", "q")).await;
    app.fetch(json!({"queues": ["q"], "worker_id": "w", "count": 3}))
        .await;

    let resp = ack(&plain, None).await;
    assert_eq!(resp.json["state"], "completed");
    assert!(resp.json.get("job").is_none(), "{}", resp.text);
    assert_eq!(resp.header("preference-applied"), None);

    // RFC 7240: among other preferences, in any case.
    let resp = ack(&asked, Some("respond-async, RETURN=representation")).await;
    assert_eq!(
        resp.header("preference-applied"),
        Some("return=representation")
    );
    assert_eq!(resp.json["job"]["id"], asked.as_str());
    assert_eq!(resp.json["job"]["state"], "completed");
    assert_eq!(resp.json["job"]["result"], json!({"n": 1}));
    assert_eq!(resp.json["job"]["completed_at"], resp.json["completed_at"]);
    assert_eq!(resp.json["job"], app.job(&asked).await);

    // Any other preference is ignored.
    let resp = ack(&other, Some("return=minimal")).await;
    assert!(resp.json.get("job").is_none(), "{}", resp.text);
    // Asked or not, an ACK of a finished job is refused the same way.
    let again = app
        .send(
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(
                json!({"job_id": asked, "worker_id": "w"})
                    .to_string()
                    .into_bytes(),
            ),
            &[
                ("content-type", "application/json"),
                ("prefer", "return=representation"),
            ],
        )
        .await;
    again.expect_error(409, "conflict");
}

#[tokio::test]
async fn ack_and_nack_need_an_active_job() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    let resp = app
        .ack(json!({"job_id": id}))
        .await
        .expect_error(409, "conflict");
    let details = &resp.json["error"]["details"];
    assert_eq!(details["current_state"], "available");
    assert_eq!(details["expected_state"], "active");
    assert_eq!(details["allowed_states"], json!(["active"]));
    app.nack(json!({"job_id": id, "error": {"message": "m"}}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(app.job(&id).await["state"], "available");
    let unknown = "019539a4-0000-7000-8000-000000000000";
    app.ack(json!({"job_id": unknown}))
        .await
        .expect_error(404, "not_found");
    app.nack(json!({"job_id": unknown, "error": {"message": "m"}}))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn ack_result_over_1_mib_is_413() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w").await;
    app.ack(json!({"job_id": id, "result": "x".repeat(1024 * 1024 + 1)}))
        .await
        .expect_error(413, "envelope_too_large");
    assert_eq!(app.job(&id).await["state"], "active");
}

#[tokio::test]
async fn nack_with_retries_left_is_retryable_with_backoff() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"max_attempts": 3, "initial_interval": "PT2S", "backoff_coefficient": 3, "jitter": false}}))
        .await;
    for (attempt, delay) in [(1, 2_000), (2, 6_000)] {
        app.fetch_one("q", "w").await;
        let resp = app
            .nack(json!({"job_id": id, "worker_id": "w", "error": {"code": "E_NET", "message": format!("failure {attempt}"), "details": {"error_class": "NetworkError"}, "backtrace": ["a", "b"]}}))
            .await
            .expect(200);
        assert_eq!(resp.json["state"], "retryable");
        assert_eq!(resp.json["attempt"], attempt);
        assert_eq!(resp.json["max_attempts"], 3);
        assert_eq!(resp.json["retry_delay_ms"], delay);
        assert_eq!(resp.json["next_attempt_at"], resp.json["next_retry_at"]);
        assert!(resp.json.get("discarded_at").is_none());
        app.sql(&format!(
            "update ojs_job set next_retry_at = now() where id = '{id}'"
        ))
        .await;
    }
    let j = app.job(&id).await;
    let errors = j["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["attempt"], 1);
    assert_eq!(errors[1]["attempt"], 2);
    assert_eq!(errors[1]["message"], "failure 2");
    assert_eq!(errors[1]["code"], "E_NET");
    assert_eq!(errors[1]["type"], "NetworkError");
    assert_eq!(errors[1]["backtrace"], json!(["a", "b"]));
    assert!(errors[1]["occurred_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(j["error"]["message"], "failure 2");
    assert!(j.get("error").unwrap().get("attempt").is_none());
}

#[tokio::test]
async fn nack_on_the_last_attempt_discards_into_the_dead_letter_queue() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"max_attempts": 1}}))
        .await;
    app.fetch_one("q", "w").await;
    let resp = app
        .nack(json!({"job_id": id, "error": {"message": "fatal"}}))
        .await
        .expect(200);
    assert_eq!(resp.json["state"], "discarded");
    assert_eq!(resp.json["dead_lettered"], true);
    assert!(resp.json["discarded_at"].is_string());
    assert!(resp.json["completed_at"].is_string());
    assert!(resp.json.get("next_attempt_at").is_none());
    let j = app.job(&id).await;
    assert!(j["dead_lettered_at"].is_string());
    let in_view: i64 =
        sqlx::query_scalar("select count(*) from ojs_dead_letter where id = $1::uuid")
            .bind(&id)
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(in_view, 1);
}

#[tokio::test]
async fn non_retryable_errors_and_directives_skip_retries() {
    let app = TestApp::spawn().await;
    let policy = json!({"max_attempts": 5, "non_retryable_errors": ["ValidationError", "auth.*"], "on_exhaustion": "discard"});
    let cases = [
        (
            json!({"message": "m", "type": "ValidationError"}),
            "discarded",
            false,
        ),
        (
            json!({"message": "m", "code": "auth.expired"}),
            "discarded",
            false,
        ),
        (
            json!({"message": "m", "details": {"error_class": "ValidationError"}}),
            "discarded",
            false,
        ),
        (
            json!({"message": "m", "retryable": false}),
            "discarded",
            false,
        ),
        (
            json!({"message": "m", "code": "DISCARD"}),
            "discarded",
            false,
        ),
        (
            json!({"message": "m", "code": "DEAD_LETTER"}),
            "discarded",
            true,
        ),
        (
            json!({"message": "m", "code": "RETRY", "retryable": false}),
            "retryable",
            false,
        ),
        (
            json!({"message": "m", "type": "authentication"}),
            "retryable",
            false,
        ),
    ];
    for (error, state, dead_lettered) in cases {
        let id = app
            .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": policy}))
            .await;
        app.fetch_one("q", "w").await;
        let resp = app
            .nack(json!({"job_id": id, "error": error}))
            .await
            .expect(200);
        assert_eq!(resp.json["state"], state, "{error}");
        if state == "discarded" {
            assert_eq!(resp.json["dead_lettered"], dead_lettered, "{error}");
        }
    }
}

#[tokio::test]
async fn nack_requeue_returns_the_job_immediately() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w").await;
    let resp = app
        .nack(json!({"job_id": id, "requeue": true}))
        .await
        .expect(200);
    assert_eq!(resp.json["state"], "available");
    let j = app.job(&id).await;
    assert!(j.get("started_at").is_none());
    assert!(
        j["errors"] == json!([]),
        "a requeue without error records none"
    );
    let again = app.fetch_one("q", "w").await;
    assert_eq!(again["attempt"], 2);
}

#[tokio::test]
async fn heartbeat_extends_the_reservation_and_registers_the_worker() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.post(
        "/ojs/v1/workers/fetch",
        json!({"queues": ["q"], "worker_id": "w1", "visibility_timeout_ms": 5000}),
    )
    .await
    .expect(200);
    let before = app.job(&id).await["visible_until"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app
        .heartbeat(json!({"worker_id": "w1", "active_jobs": [id], "visibility_timeout_ms": 600000, "hostname": "h1", "pid": 42}))
        .await
        .expect(200);
    assert_eq!(resp.json["state"], "running");
    assert_eq!(resp.json["directive"], "");
    assert_eq!(resp.json["acknowledged"], true);
    assert_eq!(resp.json["jobs_extended"], json!([id]));
    assert_eq!(resp.json["heartbeat_interval"], 15);
    assert!(resp.json["server_time"].is_string());
    let after = app.job(&id).await["visible_until"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(after > before, "{after} > {before}");
    let (hostname, pid): (Option<String>, Option<i32>) =
        sqlx::query_as("select hostname, pid from ojs_worker where id = 'w1'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!((hostname.as_deref(), pid), (Some("h1"), Some(42)));
    // The alias path and the worker-protocol spelling (count + active_job_ids).
    let resp = app
        .post(
            "/ojs/v1/workers/beat",
            json!({"worker_id": "w1", "active_jobs": 1, "active_job_ids": [id], "state": "quiet"}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["state"], "quiet");
    assert_eq!(resp.json["jobs_extended"], json!([id]));
}

#[tokio::test]
async fn heartbeat_reports_jobs_the_worker_no_longer_holds() {
    let app = TestApp::spawn().await;
    let mine = app.push_id(job("a.b", "q")).await;
    let theirs = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w1").await;
    app.fetch_one("q", "w2").await;
    let unknown = "019539a4-0000-7000-8000-000000000000";
    let resp = app
        .heartbeat(json!({"worker_id": "w1", "active_jobs": [mine, theirs, unknown]}))
        .await
        .expect(200);
    assert_eq!(resp.json["jobs_extended"], json!([mine]));
    let mut lost: Vec<String> = serde_json::from_value(resp.json["jobs_lost"].clone()).unwrap();
    lost.sort();
    let mut expected = vec![theirs.clone(), unknown.to_owned()];
    expected.sort();
    assert_eq!(lost, expected);
    // The drain state ranks as terminate.
    let resp = app
        .heartbeat(json!({"worker_id": "w1", "shutdown": true}))
        .await
        .expect(200);
    assert_eq!(resp.json["state"], "terminate");
}

#[tokio::test]
async fn worker_health_reflects_the_reported_state() {
    let app = TestApp::spawn().await;
    app.get("/ojs/v1/workers/nobody/health")
        .await
        .expect_error(404, "not_found");
    app.heartbeat(json!({"worker_id": "w1"})).await.expect(200);
    let resp = app.get("/ojs/v1/workers/w1/health").await.expect(200);
    assert_eq!(resp.json["state"], "running");
    assert_eq!(resp.json["active_jobs"], 0);
    app.post(
        "/ojs/v1/workers/beat",
        json!({"worker_id": "w1", "state": "drain", "active_jobs": 0, "shutdown": true}),
    )
    .await
    .expect(200);
    let resp = app.get("/ojs/v1/workers/w1/health").await.expect(503);
    assert_eq!(resp.json["state"], "drain");
    assert!(resp.header("retry-after").is_some());
    app.sql("update ojs_worker set state = 'running', last_heartbeat_at = now() - interval '1 minute' where id = 'w1'")
        .await;
    assert_eq!(
        app.get("/ojs/v1/workers/w1/health").await.expect(503).json["state"],
        "stale"
    );
}
