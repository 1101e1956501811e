//! PUSH, batch PUSH, INFO, CANCEL and ACTIVATE through the HTTP API.

use reqwest::Method;
use serde_json::json;

use crate::support::{TestApp, job};

#[tokio::test]
async fn push_returns_201_with_the_complete_envelope_and_location() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": ["a@b.c"]}),
        )
        .await
        .expect(201);
    let j = &resp.json["job"];
    let id = j["id"].as_str().unwrap();
    assert_eq!(
        resp.header("location"),
        Some(format!("/ojs/v1/jobs/{id}").as_str())
    );
    assert_eq!(
        resp.header("content-type"),
        Some("application/openjobspec+json")
    );
    assert_eq!(resp.header("ojs-version"), Some("1.0"));
    assert!(resp.header("x-request-id").unwrap().starts_with("req_"));
    assert_eq!(j["specversion"], "1.0.0-rc.1");
    assert_eq!(j["type"], "email.send");
    assert_eq!(j["queue"], "default");
    assert_eq!(j["state"], "available");
    assert_eq!(j["priority"], 2);
    assert_eq!(j["attempt"], 0);
    assert_eq!(j["max_attempts"], 3);
    assert_eq!(j["meta"], json!({}));
    assert_eq!(j["timeout"], 1800);
    assert_eq!(j["timeout_ms"], 1_800_000);
    assert_eq!(j["retry"]["initial_interval"], "PT1S");
    assert_eq!(j["created_at"], j["enqueued_at"]);
    assert_eq!(j["errors"], json!([]), "always present: {j}");
    for absent in ["started_at", "completed_at", "error", "result", "worker_id"] {
        assert!(j.get(absent).is_none(), "{absent} must be absent: {j}");
    }
    // Server timestamps: UTC, milliseconds, Z.
    let created = j["created_at"].as_str().unwrap();
    assert_eq!(created.len(), 24, "{created}");
    assert!(created.ends_with('Z'));
}

#[tokio::test]
async fn the_default_retry_policy_is_stored_short_and_served_in_full() {
    let app = TestApp::spawn().await;
    let plain = app
        .post("/ojs/v1/jobs", json!({"type": "a.b", "args": []}))
        .await
        .expect(201);
    let custom = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "retry": {"max_attempts": 7, "x_note": 1}}),
        )
        .await
        .expect(201);
    let stored = |id: String| {
        let pool = app.db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("select retry::text from ojs_job where id = $1::uuid")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let plain_id = plain.json["job"]["id"].as_str().unwrap().to_owned();
    let custom_id = custom.json["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(stored(plain_id.clone()).await, "{}");
    assert!(
        stored(custom_id.clone())
            .await
            .contains(r#""max_attempts":7"#)
    );
    for (id, attempts) in [(plain_id, 3), (custom_id, 7)] {
        let got = app.get(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
        let retry = &got.json["job"]["retry"];
        assert_eq!(retry["max_attempts"], attempts, "{retry}");
        assert_eq!(retry["initial_interval"], "PT1S", "{retry}");
        assert_eq!(retry["backoff_strategy"], "exponential", "{retry}");
        assert_eq!(retry["on_exhaustion"], "dead_letter", "{retry}");
    }
}

#[tokio::test]
async fn client_json_is_kept_verbatim_and_reads_are_byte_identical() {
    let app = TestApp::spawn().await;
    let body = r#"{"x_first":{"b":1,"a":[1.50,1e3]},"type":"report.build","args":[{"z":1,"a":2},12345678901234567890,1.0],"meta":{"trace_id":"t","z":true,"a":null},"x_last":"kept"}"#;
    let resp = app.post_text("/ojs/v1/jobs", body).await.expect(201);
    assert!(
        resp.text
            .contains(r#""args":[{"z":1,"a":2},12345678901234567890,1.0]"#),
        "{}",
        resp.text
    );
    assert!(
        resp.text
            .contains(r#""meta":{"trace_id":"t","z":true,"a":null}"#)
    );
    // Unknown attributes come after the known ones, in the order received.
    assert!(
        resp.text
            .ends_with(r#""x_first":{"b":1,"a":[1.50,1e3]},"x_last":"kept"}}"#),
        "{}",
        resp.text
    );
    let id = resp.json["job"]["id"].as_str().unwrap();
    let first = app.get(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    let second = app.get(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    assert_eq!(first.text, second.text);
    assert_eq!(first.json["job"], resp.json["job"]);
}

#[tokio::test]
async fn whitespace_in_the_request_is_not_echoed() {
    let app = TestApp::spawn().await;
    let resp = app
        .post_text(
            "/ojs/v1/jobs",
            "{ \"type\" : \"a.b\",\n \"args\" : [ 1, \"x y\" ] }",
        )
        .await
        .expect(201);
    assert!(resp.text.contains(r#""args":[1,"x y"]"#), "{}", resp.text);
}

#[tokio::test]
async fn options_shape_is_accepted_and_top_level_wins() {
    let app = TestApp::spawn().await;
    let j = app
        .push(json!({
            "type": "report.generate",
            "args": [42],
            "priority": 1,
            "meta": {"a": 1},
            "options": {
                "queue": "reports",
                "priority": 9,
                "timeout_ms": 300000,
                "metadata": {"a": 0, "b": 2},
                "tags": ["finance"],
                "retry": {"max_attempts": 5},
                "unknown_option": true
            }
        }))
        .await;
    assert_eq!(j["queue"], "reports");
    assert_eq!(j["priority"], 1);
    assert_eq!(j["timeout"], 300);
    assert_eq!(j["timeout_ms"], 300_000);
    assert_eq!(j["meta"], json!({"a": 1, "b": 2}));
    assert_eq!(j["tags"], json!(["finance"]));
    assert_eq!(j["max_attempts"], 5);
    assert!(j.get("options").is_none() && j.get("unknown_option").is_none());
}

#[tokio::test]
async fn system_managed_attributes_from_the_client_are_ignored() {
    let app = TestApp::spawn().await;
    let j = app
        .push(json!({"type": "a.b", "args": [], "state": "completed", "attempt": 7, "result": 1, "created_at": "2000-01-01T00:00:00Z"}))
        .await;
    assert_eq!(j["state"], "available");
    assert_eq!(j["attempt"], 0);
    assert!(j.get("result").is_none());
    assert_ne!(j["created_at"], "2000-01-01T00:00:00Z");
}

#[tokio::test]
async fn future_scheduled_at_makes_a_scheduled_job_and_is_echoed_verbatim() {
    let app = TestApp::spawn().await;
    let j = app
        .push(json!({"type": "a.b", "args": [], "scheduled_at": "2099-01-01T09:30:00+02:00"}))
        .await;
    assert_eq!(j["state"], "scheduled");
    assert_eq!(j["scheduled_at"], "2099-01-01T09:30:00+02:00");
    assert!(j.get("enqueued_at").is_none(), "never available yet: {j}");
    // delay_until is an alias, and a past time means available now.
    let past = app
        .push(
            json!({"type": "a.b", "args": [], "options": {"delay_until": "2020-01-01T00:00:00Z"}}),
        )
        .await;
    assert_eq!(past["state"], "available");
    assert_eq!(past["scheduled_at"], "2020-01-01T00:00:00Z");
    // A relative time is resolved by the server and echoed in server format.
    let relative = app
        .push(json!({"type": "a.b", "args": [], "scheduled_at": "+PT1H"}))
        .await;
    assert_eq!(relative["state"], "scheduled");
    assert!(relative["scheduled_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn pending_job_waits_for_activate() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "pending": true, "queue": "staged"}))
        .await;
    assert_eq!(app.job(&id).await["state"], "pending");
    assert!(app.fetch(json!({"queues": ["staged"]})).await.is_empty());
    let resp = app
        .post(&format!("/ojs/v1/jobs/{id}/activate"), json!({}))
        .await
        .expect(200);
    assert_eq!(resp.json["job"]["state"], "available");
    assert_eq!(resp.json["job"]["previous_state"], "pending");
    assert!(resp.json["job"]["activated_at"].is_string());
    assert!(resp.json["job"]["enqueued_at"].is_string());
    assert_eq!(app.fetch(json!({"queues": ["staged"]})).await.len(), 1);
    // Activating again is an invalid transition.
    app.post(&format!("/ojs/v1/jobs/{id}/activate"), json!({}))
        .await
        .expect_error(409, "conflict");
    // Without a body at all.
    let resp = app
        .send(
            Method::POST,
            "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000/activate",
            None,
            &[],
        )
        .await;
    resp.expect_error(404, "not_found");
}

#[tokio::test]
async fn info_of_unknown_or_malformed_ids_is_404() {
    let app = TestApp::spawn().await;
    let resp = app
        .get("/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000")
        .await
        .expect_error(404, "not_found");
    assert_eq!(resp.json["error"]["details"]["resource_type"], "job");
    assert_eq!(resp.json["error"]["retryable"], false);
    for bad in [
        "not-a-uuid",
        "019539A4-0000-7000-8000-000000000000",
        "550e8400-e29b-41d4-a716-446655440000",
    ] {
        app.get(&format!("/ojs/v1/jobs/{bad}"))
            .await
            .expect_error(404, "not_found");
    }
}

#[tokio::test]
async fn client_supplied_id_is_used_and_a_second_use_is_a_duplicate() {
    let app = TestApp::spawn().await;
    let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
    let j = app.push(json!({"type": "a.b", "args": [], "id": id})).await;
    assert_eq!(j["id"], id);
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [1], "id": id}),
        )
        .await
        .expect_error(409, "duplicate");
    assert_eq!(resp.json["error"]["details"]["existing_job_id"], id);
    assert_eq!(
        app.job(id).await["args"],
        json!([]),
        "the first job is untouched"
    );
}

#[tokio::test]
async fn cancel_moves_non_terminal_jobs_and_is_idempotent() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    let resp = app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    assert_eq!(resp.json["job"]["state"], "cancelled");
    assert_eq!(resp.json["job"]["previous_state"], "available");
    assert!(resp.json["job"]["cancelled_at"].is_string());
    assert!(resp.json["job"].get("completed_at").is_none());
    // Again: still 200, unchanged.
    let again = app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    assert_eq!(
        again.json["job"]["cancelled_at"],
        resp.json["job"]["cancelled_at"]
    );
    assert_eq!(again.json["job"]["previous_state"], "cancelled");

    for (state_job, expected_previous) in [
        (
            json!({"type": "a.b", "args": [], "scheduled_at": "2099-01-01T00:00:00Z"}),
            "scheduled",
        ),
        (
            json!({"type": "a.b", "args": [], "pending": true}),
            "pending",
        ),
    ] {
        let id = app.push_id(state_job).await;
        let resp = app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
        assert_eq!(resp.json["job"]["previous_state"], expected_previous);
    }
}

#[tokio::test]
async fn cancel_of_a_finished_job_is_409_and_of_an_unknown_job_404() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w1").await;
    app.ack(json!({"job_id": id})).await.expect(200);
    let resp = app
        .delete(&format!("/ojs/v1/jobs/{id}"))
        .await
        .expect_error(409, "conflict");
    assert_eq!(resp.json["error"]["details"]["current_state"], "completed");
    assert_eq!(app.job(&id).await["state"], "completed");
    app.delete("/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000")
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn cancelling_an_active_job_records_an_error_and_tells_the_worker() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w1").await;
    let resp = app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    let j = &resp.json["job"];
    assert_eq!(j["previous_state"], "active");
    assert_eq!(j["error"]["code"], "cancelled");
    assert_eq!(j["errors"][0]["attempt"], 1);
    assert!(j["started_at"].is_string(), "kept on cancel");
    let beat = app
        .heartbeat(json!({"worker_id": "w1", "active_jobs": [id]}))
        .await
        .expect(200);
    assert_eq!(beat.json["jobs_cancelled"], json!([id]));
    assert_eq!(beat.json["jobs_extended"], json!([]));
    app.ack(json!({"job_id": id, "worker_id": "w1"}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(app.job(&id).await["state"], "cancelled");
}

#[tokio::test]
async fn batch_enqueues_in_order_and_returns_every_job() {
    let app = TestApp::spawn().await;
    let jobs: Vec<_> = (0..50)
        .map(|i| json!({"type": "a.b", "args": [i], "queue": "batch"}))
        .collect();
    let resp = app
        .post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    assert_eq!(resp.json["count"], 50);
    let returned = resp.json["jobs"].as_array().unwrap();
    for (i, j) in returned.iter().enumerate() {
        assert_eq!(j["args"], json!([i]));
        assert_eq!(j["state"], "available");
    }
    // Generated ids sort in array order, and FETCH hands them out FIFO.
    let ids: Vec<&str> = returned.iter().map(|j| j["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted);
    let fetched = app.fetch(json!({"queues": ["batch"], "count": 50})).await;
    let fetched_ids: Vec<&str> = fetched.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(fetched_ids, ids);
}

#[tokio::test]
async fn batch_with_client_ids_keeps_request_order_for_fetch() {
    let app = TestApp::spawn().await;
    // Ids deliberately in descending order: arrival order, not id order, decides FIFO.
    let ids = [
        "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
        "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0e",
        "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0d",
    ];
    let jobs: Vec<_> = ids
        .iter()
        .map(|id| json!({"type": "a.b", "args": [], "queue": "fifo", "id": id}))
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    let fetched = app.fetch(json!({"queues": ["fifo"], "count": 3})).await;
    let fetched_ids: Vec<&str> = fetched.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(fetched_ids, ids);
}

#[tokio::test]
async fn batch_is_all_or_nothing() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("a.b", "q"), job("a.b", "q"), {"type": "Bad Type", "args": []}, job("a.b", "q")]}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(resp.json["error"]["details"]["index"], 2);
    assert!(
        resp.json["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("jobs[2]: ")
    );
    assert_eq!(app.job_count().await, 0);

    // A duplicate id inside the batch, or one that exists already, also writes nothing.
    let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
    let dup = json!({"type": "a.b", "args": [], "id": id});
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("a.b", "q"), dup, dup]}),
        )
        .await
        .expect_error(409, "duplicate");
    assert_eq!(resp.json["error"]["details"]["index"], 2);
    assert_eq!(app.job_count().await, 0);
    app.push(dup.clone()).await;
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("a.b", "q"), dup]}),
        )
        .await
        .expect_error(409, "duplicate");
    assert_eq!(resp.json["error"]["details"]["index"], 1);
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn batch_shape_errors() {
    let app = TestApp::spawn().await;
    app.post("/ojs/v1/jobs/batch", json!({}))
        .await
        .expect_error(400, "invalid_request");
    app.post("/ojs/v1/jobs/batch", json!({"jobs": []}))
        .await
        .expect_error(400, "invalid_request");
    app.post("/ojs/v1/jobs/batch", json!({"jobs": {"type": "a"}}))
        .await
        .expect_error(400, "invalid_request");
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("a.b", "q"), "not an object"]}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(resp.json["error"]["details"]["index"], 1);
    let too_many: Vec<_> = (0..10_001)
        .map(|_| json!({"type": "a", "args": []}))
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": too_many}))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(app.job_count().await, 0);
}
