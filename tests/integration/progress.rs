//! Job progress: reported by the worker that holds a job, read back by anyone.

use serde_json::{Value, json};

use crate::harness::{Resp, TestApp};

async fn put(app: &TestApp, id: &str, body: Value) -> Resp {
    app.send(
        reqwest::Method::PUT,
        &format!("/ojs/v1/jobs/{id}/progress"),
        Some(body.to_string().into_bytes()),
        &[("content-type", "application/json")],
    )
    .await
}

#[tokio::test]
async fn a_running_job_reports_progress_and_anyone_reads_it() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "prg"}))
        .await;
    let before = app
        .get(&format!("/ojs/v1/jobs/{id}/progress"))
        .await
        .expect(200)
        .json;
    assert_eq!(before["progress"], 0.0);
    assert_eq!(before["state"], "available");
    assert!(before.get("updated_at").is_none());
    // Only a running job takes reports.
    put(&app, &id, json!({"progress": 0.1}))
        .await
        .expect_error(409, "conflict");

    app.fetch_one("prg", "w-1").await;
    let saved = put(
        &app,
        &id,
        json!({"progress": 0.75, "message": "Three quarters done", "data": {"rows": 750}}),
    )
    .await
    .expect(200)
    .json;
    assert_eq!(saved["progress"], 0.75);
    assert_eq!(saved["job_id"], id.as_str());
    let read = app
        .get(&format!("/ojs/v1/jobs/{id}/progress"))
        .await
        .expect(200)
        .json;
    assert_eq!(read["progress"], 0.75);
    assert_eq!(read["message"], "Three quarters done");
    assert_eq!(read["data"], json!({"rows": 750}));
    assert_eq!(read["state"], "active");
    assert!(read["updated_at"].is_string());

    // The SDKs' path: the job in the body, a percentage, clamped; the holder may name itself,
    // another worker may not overwrite.
    let sdk = app
        .post(
            "/ojs/v1/workers/progress",
            json!({"job_id": id, "percentage": 140, "worker_id": "w-1"}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(sdk["progress"], 1.0);
    assert!(
        sdk.get("message").is_none(),
        "a report replaces the last one"
    );
    app.post(
        "/ojs/v1/workers/progress",
        json!({"job_id": id, "percentage": 10, "worker_id": "w-stale"}),
    )
    .await
    .expect_error(409, "conflict");
    assert_eq!(
        put(&app, &id, json!({"progress": -3}))
            .await
            .expect(200)
            .json["progress"],
        0.0
    );

    // A retry starts from nothing; a completed job reads as done.
    app.post(
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "error": {"message": "boom"}}),
    )
    .await
    .expect(200);
    app.sql(&format!(
        "update ojs_job set state = 'available', next_retry_at = null where id = '{id}'"
    ))
    .await;
    app.fetch_one("prg", "w-2").await;
    let fresh = app
        .get(&format!("/ojs/v1/jobs/{id}/progress"))
        .await
        .expect(200)
        .json;
    assert_eq!(fresh["progress"], 0.0, "{fresh}");
    app.post("/ojs/v1/workers/ack", json!({"job_id": id}))
        .await
        .expect(200);
    let done = app
        .get(&format!("/ojs/v1/jobs/{id}/progress"))
        .await
        .expect(200)
        .json;
    assert_eq!(done["progress"], 1.0);
    assert_eq!(done["state"], "completed");
}

#[tokio::test]
async fn bad_progress_reports_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "prg-bad"}))
        .await;
    app.fetch_one("prg-bad", "w").await;
    put(&app, &id, json!({"progress": 0.5, "message": "half"}))
        .await
        .expect(200);
    for (body, field) in [
        (json!({}), "$.progress"),
        (json!({"progress": "half"}), "$.progress"),
        (json!({"percentage": true}), "$.percentage"),
        (json!({"progress": 0.6, "message": 5}), "$.message"),
        (
            json!({"progress": 0.6, "message": "x".repeat(1001)}),
            "$.message",
        ),
        (json!({"progress": 0.6, "data": [1]}), "$.data"),
        (json!({"progress": 0.6, "worker_id": ""}), "$.worker_id"),
    ] {
        let resp = put(&app, &id, body.clone())
            .await
            .expect_error(400, "invalid_request");
        assert!(resp.text.contains(field), "{body}: {}", resp.text);
    }
    app.post("/ojs/v1/workers/progress", json!({"progress": 0.6}))
        .await
        .expect_error(400, "invalid_request");
    put(
        &app,
        "019539a4-0000-7000-8000-000000000000",
        json!({"progress": 0.1}),
    )
    .await
    .expect_error(404, "not_found");
    app.get("/ojs/v1/jobs/not-a-job/progress")
        .await
        .expect_error(404, "not_found");
    let read = app
        .get(&format!("/ojs/v1/jobs/{id}/progress"))
        .await
        .expect(200)
        .json;
    assert_eq!(read["progress"], 0.5);
    assert_eq!(read["message"], "half");
}
