//! Checkpoints (OJS durable execution): saved, read and deleted over HTTP, fenced by the
//! worker that holds the job, and handed by FETCH to the job's next attempt.

use serde_json::{Value, json};

use crate::support::{Resp, TestApp};

async fn save(app: &TestApp, method: reqwest::Method, id: &str, body: &str) -> Resp {
    app.send(
        method,
        &format!("/ojs/v1/jobs/{id}/checkpoint"),
        Some(body.as_bytes().to_vec()),
        &[("content-type", "application/json")],
    )
    .await
}

async fn put(app: &TestApp, id: &str, body: Value) -> Resp {
    save(app, reqwest::Method::PUT, id, &body.to_string()).await
}

async fn read(app: &TestApp, id: &str) -> Resp {
    app.get(&format!("/ojs/v1/jobs/{id}/checkpoint")).await
}

#[tokio::test]
async fn a_checkpoint_is_saved_read_replaced_and_deleted() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp"}))
        .await;
    read(&app, &id).await.expect_error(404, "not_found");

    let saved = put(&app, &id, json!({"state": {"rows": 500}}))
        .await
        .expect(200)
        .json;
    assert_eq!(saved["job_id"], id.as_str());
    assert_eq!(saved["sequence"], 1);
    assert_eq!(saved["checkpoint"]["sequence"], 1);
    assert!(saved["created_at"].is_string());
    assert!(
        saved.get("state").is_none(),
        "a save does not echo the state"
    );

    // POST (the specification's verb) saves too; a body without `state` is the state itself.
    save(&app, reqwest::Method::POST, &id, r#"["a", 2, null]"#)
        .await
        .expect(200);
    let got = read(&app, &id).await.expect(200).json;
    assert_eq!(got["state"], json!(["a", 2, null]));
    assert_eq!(got["sequence"], 2);
    assert_eq!(got["checkpoint"]["state"], json!(["a", 2, null]));
    save(&app, reqwest::Method::PUT, &id, r#"{"rows": 900}"#)
        .await
        .expect(200);
    assert_eq!(
        read(&app, &id).await.expect(200).json["state"],
        json!({"rows": 900})
    );

    let deleted = app
        .delete(&format!("/ojs/v1/jobs/{id}/checkpoint"))
        .await
        .expect(200)
        .json;
    assert_eq!(deleted, json!({"deleted": true, "job_id": id}));
    let again = app
        .delete(&format!("/ojs/v1/jobs/{id}/checkpoint"))
        .await
        .expect(200)
        .json;
    assert_eq!(again["deleted"], false);
    read(&app, &id).await.expect_error(404, "not_found");
    // A checkpoint saved after a delete starts counting again.
    assert_eq!(
        put(&app, &id, json!({"state": 1})).await.expect(200).json["sequence"],
        1
    );
}

#[tokio::test]
async fn the_next_attempt_gets_the_checkpoint_with_its_fetch() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp-retry",
                        "retry": {"max_attempts": 3, "initial_interval": "PT1S"}}))
        .await;
    let plain = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp-retry"}))
        .await;
    let first = app.fetch_one("cp-retry", "w-1").await;
    assert_eq!(first["id"], id.as_str());
    assert!(first.get("checkpoint").is_none(), "{first}");
    put(
        &app,
        &id,
        json!({"state": {"cursor": "abc-750"}, "worker_id": "w-1"}),
    )
    .await
    .expect(200);
    app.nack(json!({"job_id": id, "worker_id": "w-1", "error": {"message": "flaky"}}))
        .await
        .expect(200);
    app.sql(&format!(
        "update ojs_job set state = 'available', next_retry_at = null where id = '{id}'"
    ))
    .await;
    let fetched = app
        .post(
            "/ojs/v1/workers/fetch",
            json!({"queues": ["cp-retry"], "worker_id": "w-2", "count": 2}),
        )
        .await
        .expect(200)
        .json;
    let jobs = fetched["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{fetched}");
    for job in jobs {
        if job["id"] == id.as_str() {
            assert_eq!(job["attempt"], 2);
            assert_eq!(
                job["checkpoint"],
                json!({"state": {"cursor": "abc-750"}, "sequence": 1})
            );
        } else {
            assert_eq!(job["id"], plain.as_str());
            assert!(job.get("checkpoint").is_none(), "{job}");
        }
    }
    // Kept, read-only, once the job has finished.
    app.ack(json!({"job_id": id, "worker_id": "w-2"}))
        .await
        .expect(200);
    assert_eq!(read(&app, &id).await.expect(200).json["sequence"], 1);
    put(&app, &id, json!({"state": 2}))
        .await
        .expect_error(409, "conflict");
}

#[tokio::test]
async fn a_save_naming_a_worker_is_fenced_by_the_claim() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp-fence"}))
        .await;
    // Waiting: anyone may seed a checkpoint, but no worker holds the job yet.
    put(&app, &id, json!({"state": 1, "worker_id": "w-1"}))
        .await
        .expect_error(409, "conflict");
    app.fetch_one("cp-fence", "w-1").await;
    put(&app, &id, json!({"state": 2, "worker_id": "w-stale"}))
        .await
        .expect_error(409, "conflict");
    put(&app, &id, json!({"state": 3, "worker_id": "w-1"}))
        .await
        .expect(200);
    assert_eq!(read(&app, &id).await.expect(200).json["state"], 3);
}

#[tokio::test]
async fn bad_checkpoints_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp-bad"}))
        .await;
    put(&app, &id, json!({"state": {"kept": true}}))
        .await
        .expect(200);
    put(&app, &id, json!({"state": 1, "worker_id": 7}))
        .await
        .expect_error(400, "invalid_request");
    put(&app, &id, json!({"state": 1, "worker_id": ""}))
        .await
        .expect_error(400, "invalid_request");
    let broken = save(&app, reqwest::Method::PUT, &id, r#"{"state": "#).await;
    assert_eq!(broken.status, 400, "{}", broken.text);
    let big = json!({"state": "x".repeat(1024 * 1024)});
    let resp = put(&app, &id, big).await;
    assert_eq!(resp.status, 413, "{}", resp.text);
    assert!(resp.text.contains("$.state"), "{}", resp.text);
    put(
        &app,
        "019539a4-0000-7000-8000-000000000000",
        json!({"state": 1}),
    )
    .await
    .expect_error(404, "not_found");
    read(&app, "not-a-job").await.expect_error(404, "not_found");
    app.delete("/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000/checkpoint")
        .await
        .expect_error(404, "not_found");
    let got = read(&app, &id).await.expect(200).json;
    assert_eq!(got["state"], json!({"kept": true}));
    assert_eq!(got["sequence"], 1);

    // A cancelled job takes no more saves.
    app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    put(&app, &id, json!({"state": 2}))
        .await
        .expect_error(409, "conflict");
}

#[tokio::test]
async fn each_save_is_an_event() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp-events"}))
        .await;
    put(&app, &id, json!({"state": [1]})).await.expect(200);
    put(&app, &id, json!({"state": [1, 2]})).await.expect(200);
    let rows: Vec<(i32, i32)> = sqlx::query_as(
        "select (data->>'sequence')::int, (data->>'size_bytes')::int from ojs_event
          where type = 'job.checkpointed' and job_id = $1::uuid order by seq",
    )
    .bind(&id)
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(rows, vec![(1, 3), (2, 5)]);
}
