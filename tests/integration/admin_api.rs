//! The admin API: the admin dead-letter routes.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Resp, TestApp};

/// DELETE with a JSON body.
async fn delete_with(app: &TestApp, path: &str, body: Value) -> Resp {
    app.send(
        Method::DELETE,
        path,
        Some(body.to_string().into_bytes()),
        &[("content-type", "application/json")],
    )
    .await
}

/// Fetches one job of `queue` and fails it with `code` (`DISCARD` discards it without
/// dead-lettering; a one-attempt job with another code is dead-lettered); returns its id.
async fn fail_one(app: &TestApp, queue: &str, code: &str) -> String {
    let id = app.fetch_one(queue, "w").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.post(
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "error": {"message": "boom", "code": code}}),
    )
    .await
    .expect(200);
    id
}

/// A one-attempt job on `queue`, so that its first failure discards it.
fn fragile(job_type: &str, queue: &str) -> Value {
    json!({"type": job_type, "args": [], "queue": queue, "retry": {"max_attempts": 1}})
}

fn ids(items: &Value) -> Vec<&str> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_admin_dead_letter_routes_share_the_dead_letter_queue() {
    let app = TestApp::spawn().await;
    let empty = app.get("/ojs/v1/admin/dead-letter").await.expect(200).json;
    assert_eq!(empty["items"], json!([]));
    assert_eq!(empty["pagination"]["total"], 0);
    assert_eq!(empty["pagination"]["page"], 1);
    assert_eq!(empty["pagination"]["per_page"], 20);

    for queue in ["one", "two", "two"] {
        app.push(fragile("a.b", queue)).await;
    }
    let a = fail_one(&app, "one", "handler_error").await;
    let b = fail_one(&app, "two", "handler_error").await;
    let c = fail_one(&app, "two", "handler_error").await;

    let list = app.get("/ojs/v1/admin/dead-letter").await.expect(200).json;
    assert_eq!(ids(&list["items"]), [&c, &b, &a].map(String::as_str));
    assert!(list["items"][0]["dead_lettered_at"].is_string());
    let two = app
        .get("/ojs/v1/admin/dead-letter?queue=two&per_page=1")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&two["items"]), [c.as_str()]);
    assert_eq!(two["pagination"]["total"], 2);
    app.get("/ojs/v1/admin/dead-letter?until=soon")
        .await
        .expect_error(400, "invalid_request");

    let stats = app
        .get("/ojs/v1/admin/dead-letter/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["by_queue"], json!({"one": 1, "two": 2}));

    let retried = app
        .send(
            Method::POST,
            &format!("/ojs/v1/admin/dead-letter/{a}/retry"),
            None,
            &[],
        )
        .await
        .expect(200)
        .json;
    assert_eq!(retried["job"]["state"], "available");
    app.post(&format!("/ojs/v1/admin/dead-letter/{a}/retry"), json!({}))
        .await
        .expect_error(404, "not_found");

    let deleted = app
        .delete(&format!("/ojs/v1/admin/dead-letter/{b}"))
        .await
        .expect(204);
    assert!(deleted.text.is_empty());
    assert!(deleted.header("content-type").is_none());
    app.delete(&format!("/ojs/v1/admin/dead-letter/{b}"))
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/ojs/v1/admin/dead-letter/{a}"))
        .await
        .expect_error(404, "not_found");
    app.delete("/ojs/v1/admin/dead-letter/not-an-id")
        .await
        .expect_error(404, "not_found");

    app.post("/ojs/v1/admin/dead-letter/retry", json!({"filter": {}}))
        .await
        .expect_error(400, "invalid_request");
    let bulk = app
        .post(
            "/ojs/v1/admin/dead-letter/retry",
            json!({"filter": {"queue": "two"}, "confirm": true}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(bulk["retried"], 1);

    app.push(fragile("a.b", "three")).await;
    fail_one(&app, "three", "handler_error").await;
    app.delete("/ojs/v1/admin/dead-letter")
        .await
        .expect_error(400, "invalid_request");
    let purged = delete_with(&app, "/ojs/v1/admin/dead-letter", json!({"confirm": true}))
        .await
        .expect(200)
        .json;
    assert_eq!(purged, json!({"purged_count": 1}));
}
