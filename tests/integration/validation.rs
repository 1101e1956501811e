//! Bad input gets the OJS error body with the right status — and writes nothing.

use reqwest::Method;
use serde_json::json;

use crate::support::{TestApp, job};

#[tokio::test]
async fn envelope_field_errors_are_400_invalid_request_naming_the_field() {
    let app = TestApp::spawn().await;
    let cases = [
        (json!({"args": []}), "$.type"),
        (json!({"type": "", "args": []}), "$.type"),
        (json!({"type": "Email.Send", "args": []}), "$.type"),
        (json!({"type": "email send", "args": []}), "$.type"),
        (json!({"type": "1email.send", "args": []}), "$.type"),
        (json!({"type": "email@send!", "args": []}), "$.type"),
        (json!({"type": 5, "args": []}), "$.type"),
        (json!({"type": "a.b"}), "$.args"),
        (json!({"type": "a.b", "args": null}), "$.args"),
        (json!({"type": "a.b", "args": {"k": 1}}), "$.args"),
        (json!({"type": "a.b", "args": "x"}), "$.args"),
        (json!({"type": "a.b", "args": 42}), "$.args"),
        (json!({"type": "a.b", "args": true}), "$.args"),
        (
            json!({"type": "a.b", "args": [], "queue": "Default"}),
            "$.queue",
        ),
        (
            json!({"type": "a.b", "args": [], "options": {"queue": "my_queue!"}}),
            "$.options.queue",
        ),
        (json!({"type": "a.b", "args": [], "queue": "-x"}), "$.queue"),
        (
            json!({"type": "a.b", "args": [], "queue": "a".repeat(129)}),
            "$.queue",
        ),
        (
            json!({"type": "a.b", "args": [], "id": "not-a-uuid"}),
            "$.id",
        ),
        (json!({"type": "a.b", "args": [], "id": ""}), "$.id"),
        (
            json!({"type": "a.b", "args": [], "id": "550e8400-e29b-41d4-a716-446655440000"}),
            "$.id",
        ),
        (json!({"type": "a.b", "args": [], "meta": [1]}), "$.meta"),
        (
            json!({"type": "a.b", "args": [], "priority": 1.5}),
            "$.priority",
        ),
        (
            json!({"type": "a.b", "args": [], "priority": "urgent"}),
            "$.priority",
        ),
        (
            json!({"type": "a.b", "args": [], "timeout": -1}),
            "$.timeout",
        ),
        (
            json!({"type": "a.b", "args": [], "scheduled_at": "2026-01-01T00:00:00"}),
            "$.scheduled_at",
        ),
        (
            json!({"type": "a.b", "args": [], "expires_at": "tomorrow"}),
            "$.expires_at",
        ),
        (
            json!({"type": "a.b", "args": [], "options": 3}),
            "$.options",
        ),
        (
            json!({"type": "a.b", "args": [], "specversion": "2.0"}),
            "$.specversion",
        ),
        (
            json!({"type": "a.b", "args": [], "tags": ["a", 1]}),
            "$.tags",
        ),
        (json!({"type": "a.b", "args": [], "schema": ""}), "$.schema"),
        (
            json!({"type": "a.b", "args": [], "pending": "yes"}),
            "$.pending",
        ),
        (
            json!({"type": "a.b", "args": [], "pending": true, "scheduled_at": "2099-01-01T00:00:00Z"}),
            "$.pending",
        ),
        (
            json!({"type": "a.b", "args": [], "visibility_timeout_ms": 0}),
            "$.visibility_timeout_ms",
        ),
        (
            json!({"type": "a.b", "args": [], "unique": {"on_conflict": "merge"}}),
            "$.unique.on_conflict",
        ),
        (
            json!({"type": "a.b", "args": [], "enqueue_ttl": 0}),
            "$.enqueue_ttl",
        ),
        // The database no longer restates these checks (migration V11): this is their guard.
        (
            json!({"type": "a.b", "args": [], "total_timeout": 0}),
            "$.total_timeout",
        ),
        (
            json!({"type": "a.b", "args": [], "timeout_ms": -5}),
            "$.timeout_ms",
        ),
        (
            json!({"type": "a.b", "args": [], "options": {"visibility_timeout_ms": -1}}),
            "$.options.visibility_timeout_ms",
        ),
    ];
    for (body, field) in cases {
        let resp = app.post("/ojs/v1/jobs", body.clone()).await;
        assert_eq!(resp.status, 400, "{body} -> {}", resp.text);
        let resp = resp.expect_error(400, "invalid_request");
        assert_eq!(resp.json["error"]["retryable"], false);
        assert_eq!(
            resp.json["error"]["details"]["field"], field,
            "{body} -> {}",
            resp.text
        );
        let messages = resp.json["error"]["details"]["validation_errors"]
            .as_array()
            .unwrap();
        assert!(!messages.is_empty());
    }
    assert_eq!(app.job_count().await, 0, "nothing was written");
}

#[tokio::test]
async fn every_problem_is_reported_at_once() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "Bad", "args": {}, "queue": "Q"}),
        )
        .await
        .expect_error(400, "invalid_request");
    let paths: Vec<&str> = resp.json["error"]["details"]["validation_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["$.type", "$.args", "$.queue"]);
    assert!(
        resp.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2 more problems")
    );
}

#[tokio::test]
async fn priority_follows_the_priority_extension() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "priority": -1}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(resp.json["error"]["message"], "priority must be >= 0");
    assert_eq!(resp.json["error"]["details"]["min"], 0);
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "options": {"priority": 256}}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(
        resp.json["error"]["message"],
        "priority must be <= 255 (maximum supported priority)"
    );
    assert_eq!(resp.json["error"]["details"]["max_priority"], 255);
    assert_eq!(resp.json["error"]["details"]["value"], 256);
    assert_eq!(app.job_count().await, 0);
    for (given, stored) in [
        (json!(0), 0),
        (json!(255), 255),
        (json!("critical"), 0),
        (json!("BULK"), 4),
    ] {
        let j = app
            .push(json!({"type": "a.b", "args": [], "priority": given}))
            .await;
        assert_eq!(j["priority"], stored);
    }
}

#[tokio::test]
async fn max_priority_is_configurable_upward() {
    let app = TestApp::spawn_with(|c| c.jobs.max_priority = 1000).await;
    assert_eq!(
        app.push(json!({"type": "a.b", "args": [], "priority": 1000}))
            .await["priority"],
        1000
    );
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "priority": 1001}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(resp.json["error"]["details"]["max_priority"], 1000);
    let manifest = app.get("/ojs/manifest").await.expect(200);
    assert_eq!(manifest.json["priority"]["max"], 1000);
}

#[tokio::test]
async fn retry_policy_errors_are_422_validation_error_after_field_errors() {
    let app = TestApp::spawn().await;
    for (retry, field) in [
        (json!({"max_attempts": -1}), "max_attempts"),
        (json!({"backoff_coefficient": 0.5}), "backoff_coefficient"),
        (json!({"initial_interval": "soon"}), "initial_interval"),
        (json!({"initial_interval": "P1M"}), "initial_interval"),
        (
            json!({"initial_interval": "PT10S", "max_interval": "PT1S"}),
            "max_interval",
        ),
        (json!({"on_exhaustion": "explode"}), "on_exhaustion"),
        (json!({"backoff_strategy": "random"}), "backoff_strategy"),
        (json!("three times"), "retry"),
    ] {
        let resp = app
            .post(
                "/ojs/v1/jobs",
                json!({"type": "a.b", "args": [], "retry": retry}),
            )
            .await
            .expect_error(422, "validation_error");
        let message = resp.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{message} should name {field}");
    }
    // A field error is reported first (400) even when the retry policy is also wrong.
    app.post(
        "/ojs/v1/jobs",
        json!({"type": "Bad", "args": [], "retry": {"max_attempts": -1}}),
    )
    .await
    .expect_error(400, "invalid_request");
    assert_eq!(app.job_count().await, 0);
}

#[tokio::test]
async fn retry_policy_accepts_both_duration_spellings_and_echoes_iso() {
    let app = TestApp::spawn().await;
    let j = app
        .push(json!({"type": "a.b", "args": [], "retry": {"initial_interval": "1s", "max_interval": "300s", "backoff_coefficient": 2, "x_note": "kept"}}))
        .await;
    assert_eq!(j["retry"]["initial_interval"], "PT1S");
    assert_eq!(j["retry"]["max_interval"], "PT5M");
    assert_eq!(j["retry"]["backoff_coefficient"], 2.0);
    assert_eq!(j["retry"]["x_note"], "kept");
    assert_eq!(j["retry"]["on_exhaustion"], "dead_letter");
}

/// The Go and Java SDKs (and the HTTP binding's own example) send intervals as `*_ms` integers;
/// they are applied, not kept as unknown attributes.
#[tokio::test]
async fn retry_intervals_in_milliseconds_are_applied() {
    let app = TestApp::spawn().await;
    let j = app
        .push(json!({"type": "a.b", "args": [], "queue": "ms",
                     "retry": {"max_attempts": 3, "initial_interval_ms": 2000,
                               "max_interval_ms": 60000, "jitter": false}}))
        .await;
    assert_eq!(j["retry"]["initial_interval"], "PT2S", "{j}");
    assert_eq!(j["retry"]["max_interval"], "PT1M", "{j}");
    assert!(j["retry"].get("initial_interval_ms").is_none(), "{j}");
    app.fetch_one("ms", "w").await;
    let nacked = app
        .nack(json!({"job_id": j["id"], "error": {"code": "boom", "message": "x"}}))
        .await
        .expect(200);
    assert_eq!(
        nacked.json["job"]["retry_delay_ms"], 2000,
        "{}",
        nacked.text
    );

    // Both spellings may be given when they agree; anything else is named.
    let j = app
        .push(json!({"type": "a.b", "args": [],
                     "retry": {"initial_interval": "PT3S", "initial_interval_ms": 3000}}))
        .await;
    assert_eq!(j["retry"]["initial_interval"], "PT3S");
    for (retry, field) in [
        (
            json!({"initial_interval": "PT3S", "initial_interval_ms": 4000}),
            "$.retry.initial_interval_ms",
        ),
        (
            json!({"initial_interval_ms": 0}),
            "$.retry.initial_interval_ms",
        ),
        (
            json!({"initial_interval_ms": -5}),
            "$.retry.initial_interval_ms",
        ),
        (
            json!({"initial_interval_ms": "1s"}),
            "$.retry.initial_interval_ms",
        ),
        (json!({"max_interval_ms": 1.5}), "$.retry.max_interval_ms"),
        (
            json!({"initial_interval_ms": 5000, "max_interval_ms": 1000}),
            "$.retry.max_interval",
        ),
    ] {
        let resp = app
            .post(
                "/ojs/v1/jobs",
                json!({"type": "a.b", "args": [], "retry": retry}),
            )
            .await
            .expect_error(422, "validation_error");
        assert!(resp.text.contains(field), "{retry}: {}", resp.text);
    }
}

#[tokio::test]
async fn features_not_offered_are_refused_with_422_unsupported() {
    let app = TestApp::spawn().await;
    for body in [
        json!({"type": "a.b", "args": [], "workflow": {"batch": [{"type": "c.d", "args": []}]}}),
        json!({"type": "a.b", "args": [], "options": {"workflow": {"chain": [{"type": "c.d", "args": []}]}}}),
    ] {
        app.post("/ojs/v1/jobs", body)
            .await
            .expect_error(422, "unsupported");
    }
    assert_eq!(app.job_count().await, 0);
}

#[tokio::test]
async fn malformed_bodies_are_400_invalid_payload() {
    let app = TestApp::spawn().await;
    for body in [
        "",
        "   ",
        "{ invalid json }",
        "[1,2]",
        "\"text\"",
        "null",
        "{\"type\": \"a\"",
    ] {
        let resp = app.post_text("/ojs/v1/jobs", body).await;
        resp.expect_error(400, "invalid_payload");
    }
    // The error position refers to what was sent, not to a reformatted body.
    let resp = app.post_text("/ojs/v1/jobs", "{\n  \"type\": x\n}").await;
    let resp = resp.expect_error(400, "invalid_payload");
    assert!(
        resp.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("line 2"),
        "{}",
        resp.text
    );
    // Invalid UTF-8.
    let resp = app
        .send(
            Method::POST,
            "/ojs/v1/jobs",
            Some(vec![b'{', 0xff, b'}']),
            &[("content-type", "application/json")],
        )
        .await;
    resp.expect_error(400, "invalid_payload");
    assert_eq!(app.job_count().await, 0);
}

#[tokio::test]
async fn a_body_is_read_only_when_its_content_type_is_json() {
    let app = TestApp::spawn().await;
    let body = json!({"type": "a.b", "args": []}).to_string().into_bytes();
    // What a cross-site form or a typeless fetch sends is refused, and nothing is enqueued.
    for headers in [
        &[("content-type", "text/plain")][..],
        &[("content-type", "application/x-www-form-urlencoded")][..],
        &[("content-type", "multipart/form-data; boundary=x")][..],
        &[][..],
    ] {
        app.send(Method::POST, "/ojs/v1/jobs", Some(body.clone()), headers)
            .await
            .expect_error(415, "unsupported_media_type");
    }
    assert_eq!(app.job_count().await, 0);
    // Parameters are ignored; an empty body needs no type where a body is optional.
    app.send(
        Method::POST,
        "/ojs/v1/jobs",
        Some(body),
        &[(
            "content-type",
            "application/openjobspec+json; charset=utf-8",
        )],
    )
    .await
    .expect(201);
    app.send(
        Method::POST,
        "/ojs/v1/queues/q/pause",
        Some(Vec::new()),
        &[],
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn size_limits_are_413_envelope_too_large() {
    let app = TestApp::spawn().await;
    let big = "x".repeat(1024 * 1024);
    let resp = app
        .post("/ojs/v1/jobs", json!({"type": "a.b", "args": [big]}))
        .await
        .expect_error(413, "envelope_too_large");
    assert_eq!(resp.json["error"]["details"]["max_size"], 1024 * 1024);
    assert!(resp.json["error"]["details"]["size"].as_u64().unwrap() > 1024 * 1024);
    let meta = "x".repeat(64 * 1024);
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "meta": {"k": meta}}),
        )
        .await
        .expect_error(413, "envelope_too_large");
    assert_eq!(resp.json["error"]["details"]["field"], "meta");
    // Far beyond the read limit: refused before it is buffered.
    let huge = "y".repeat(3 * 1024 * 1024);
    app.post("/ojs/v1/jobs", json!({"type": "a.b", "args": [huge]}))
        .await
        .expect_error(413, "envelope_too_large");
    // A PUSH with an embedded workflow is held to the same limit.
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [big], "workflow": {"chain": [{"type": "c.d", "args": []}]}}),
        )
        .await
        .expect_error(413, "envelope_too_large");
    assert_eq!(resp.json["error"]["details"]["field"], "envelope");
    assert_eq!(app.job_count().await, 0);
    // Just under the limit is fine.
    let fits = "z".repeat(1024 * 1024 - 100);
    app.post("/ojs/v1/jobs", json!({"type": "a.b", "args": [fits]}))
        .await
        .expect(201);
}

#[tokio::test]
async fn nesting_deeper_than_32_levels_is_refused() {
    let app = TestApp::spawn().await;
    let deep = format!(
        "{{\"type\":\"a.b\",\"args\":{}1{}}}",
        "[".repeat(40),
        "]".repeat(40)
    );
    app.post_text("/ojs/v1/jobs", &deep)
        .await
        .expect_error(400, "invalid_request");
    let fine = format!(
        "{{\"type\":\"a.b\",\"args\":{}1{}}}",
        "[".repeat(30),
        "]".repeat(30)
    );
    app.post_text("/ojs/v1/jobs", &fine).await.expect(201);
}

#[tokio::test]
async fn worker_request_errors() {
    let app = TestApp::spawn().await;
    let id = "019539a4-0000-7000-8000-000000000000";
    let cases = [
        ("/ojs/v1/workers/fetch", json!({}), "$.queues"),
        ("/ojs/v1/workers/fetch", json!({"queues": []}), "$.queues"),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": "default"}),
            "$.queues",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["Bad Queue"]}),
            "$.queues[0]",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "count": 0}),
            "$.count",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "count": 1001}),
            "$.count",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "count": "5"}),
            "$.count",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "wait_ms": -1}),
            "$.wait_ms",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "visibility_timeout_ms": 0}),
            "$.visibility_timeout_ms",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "strategy": "random"}),
            "$.strategy",
        ),
        (
            "/ojs/v1/workers/fetch",
            json!({"queues": ["q"], "worker_id": ""}),
            "$.worker_id",
        ),
        ("/ojs/v1/workers/ack", json!({}), "$.job_id"),
        ("/ojs/v1/workers/ack", json!({"job_id": "nope"}), "$.job_id"),
        ("/ojs/v1/workers/ack", json!({"job_id": 5}), "$.job_id"),
        ("/ojs/v1/workers/nack", json!({"job_id": id}), "$.error"),
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"code": "x"}}),
            "$.error.message",
        ),
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": "boom"}),
            "$.error",
        ),
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"message": "m", "retryable": "no"}}),
            "$.error.retryable",
        ),
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "requeue": "yes"}),
            "$.requeue",
        ),
        ("/ojs/v1/workers/heartbeat", json!({}), "$.worker_id"),
        (
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "state": "sleeping"}),
            "$.state",
        ),
        (
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "active_jobs": ["nope"]}),
            "$.active_jobs[0]",
        ),
        (
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "active_jobs": "x"}),
            "$.active_jobs",
        ),
        (
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "pid": "x"}),
            "$.pid",
        ),
    ];
    for (path, body, field) in cases {
        let resp = app.post(path, body.clone()).await;
        assert_eq!(resp.status, 400, "{path} {body} -> {}", resp.text);
        let resp = resp.expect_error(400, "invalid_request");
        assert_eq!(
            resp.json["error"]["details"]["field"], field,
            "{path} {body} -> {}",
            resp.text
        );
    }
}

#[tokio::test]
async fn unknown_paths_methods_and_versions() {
    let app = TestApp::spawn().await;
    app.get("/ojs/v1/nothing-here")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/jobs/")
        .await
        .expect_error(404, "not_found");
    let resp = app
        .send(Method::PUT, "/ojs/v1/jobs", None, &[])
        .await
        .expect_error(405, "invalid_request");
    assert_eq!(resp.header("allow"), Some("POST"));
    let resp = app
        .send(
            Method::POST,
            "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000",
            None,
            &[],
        )
        .await
        .expect_error(405, "invalid_request");
    assert!(resp.header("allow").unwrap().contains("DELETE"));
    app.send(
        Method::GET,
        "/ojs/manifest",
        None,
        &[("ojs-version", "2.0")],
    )
    .await
    .expect_error(422, "unsupported");
    for ok in ["1.0", "1.0.0", "1.0.0-rc.1"] {
        app.send(Method::GET, "/ojs/manifest", None, &[("ojs-version", ok)])
            .await
            .expect(200);
    }
}

#[tokio::test]
async fn request_ids_are_echoed_or_generated() {
    let app = TestApp::spawn().await;
    let resp = app
        .send(
            Method::GET,
            "/ojs/v1/jobs/not-a-job",
            None,
            &[("x-request-id", "trace-123")],
        )
        .await
        .expect_error(404, "not_found");
    assert_eq!(resp.header("x-request-id"), Some("trace-123"));
    assert_eq!(resp.json["error"]["request_id"], "trace-123");
    let too_long = "x".repeat(201);
    let resp = app
        .send(
            Method::GET,
            "/ojs/manifest",
            None,
            &[("x-request-id", &too_long)],
        )
        .await
        .expect(200);
    assert!(resp.header("x-request-id").unwrap().starts_with("req_"));
}

#[tokio::test]
async fn the_nul_character_is_refused_wherever_it_appears() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w").await;
    // PostgreSQL cannot store U+0000 in text, json it reads, or jsonb: 400, never a 500.
    for (path, body) in [
        ("/ojs/v1/jobs", json!({"type": "a.b", "args": ["a\u{0}b"]})),
        (
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "meta": {"k\u{0}": 1}}),
        ),
        (
            "/ojs/v1/workers/register",
            json!({"worker_id": "w", "hostname": "a\u{0}"}),
        ),
        (
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "labels": ["\u{0}"]}),
        ),
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": id, "error": {"message": "\u{0}"}}),
        ),
        (
            "/ojs/v1/workers/ack",
            json!({"job_id": id, "result": "\u{0}"}),
        ),
    ] {
        let resp = app
            .post(path, body)
            .await
            .expect_error(400, "invalid_request");
        assert!(
            resp.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("U+0000"),
            "{path}"
        );
    }
    // An escaped backslash followed by "u0000" is ordinary text.
    app.post_text("/ojs/v1/jobs", r#"{"type": "a.b", "args": ["\\u0000"]}"#)
        .await
        .expect(201);
    for path in [
        "/ojs/v1/dead-letter?queue=%00",
        "/ojs/v1/events?types=a%00",
        "/ojs/v1/admin/workers?limit=1&x%00=1",
    ] {
        app.get(path).await.expect_error(400, "invalid_request");
    }
    for path in ["/ojs/v1/admin/workers/%00", "/ojs/v1/workers/a%00b/health"] {
        app.get(path).await.expect_error(404, "not_found");
    }
    app.delete("/ojs/v1/workers/%00")
        .await
        .expect_error(404, "not_found");
    app.post("/ojs/v1/admin/workers/%00/quiet", json!({}))
        .await
        .expect_error(404, "not_found");
    assert_eq!(app.job(&id).await["state"], "active", "nothing changed");
}
