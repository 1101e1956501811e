//! Job progress: reported by the worker that holds a job, read back by anyone.

use serde_json::{Value, json};

use crate::support::{Resp, TestApp, sse_data};

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
    app.nack(json!({"job_id": id, "error": {"message": "boom"}}))
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
    app.ack(json!({"job_id": id})).await.expect(200);
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

/// Reads the stream until `n` data events arrived or it ends (10 s at most).
async fn read_events(resp: &mut reqwest::Response, text: &mut String, n: usize) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sse_data(text, None).len() < n && std::time::Instant::now() < deadline {
        match tokio::time::timeout(std::time::Duration::from_millis(500), resp.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) | Ok(Err(_)) => return false,
            Err(_) => {}
        }
    }
    true
}

/// The admin UI follows a running job's progress over SSE: the progress now, each report,
/// and the final state, after which the stream ends.
#[tokio::test]
async fn progress_streams_until_the_job_finishes() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "prg-sse"}))
        .await;
    app.fetch_one("prg-sse", "w").await;
    ojsd::app::install_tls();
    let client = reqwest::Client::new();
    let mut resp = client
        .get(format!("{}/ojs/v1/jobs/{id}/progress/stream", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    assert!(read_events(&mut resp, &mut text, 1).await);
    assert_eq!(sse_data(&text, None)[0]["progress"], 0.0);

    put(&app, &id, json!({"progress": 0.4, "message": "going"}))
        .await
        .expect(200);
    assert!(read_events(&mut resp, &mut text, 2).await);
    let second = &sse_data(&text, None)[1];
    assert_eq!(second["progress"], 0.4, "{text}");
    assert_eq!(second["message"], "going");

    app.ack(json!({"job_id": id})).await.expect(200);
    assert!(read_events(&mut resp, &mut text, 3).await);
    let last = &sse_data(&text, None)[2];
    assert_eq!(last["state"], "completed", "{text}");
    assert_eq!(last["progress"], 1.0);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match resp.chunk().await {
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ends with the job");

    app.get("/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000/progress/stream")
        .await
        .expect_error(404, "not_found");
}
