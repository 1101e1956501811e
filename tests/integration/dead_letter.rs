//! The dead-letter queue API.

use serde_json::json;

use crate::support::{TestApp, ids};

/// A job of `job_type` on `queue` whose only attempt failed with `error_type`; its id.
async fn dead_letter(app: &TestApp, job_type: &str, queue: &str, error_type: &str) -> String {
    let job = app
        .factory(queue)
        .of_type(job_type)
        .discarded_with(json!({"message": "boom", "type": error_type}))
        .await;
    assert!(job["dead_lettered_at"].is_string(), "dead-lettered: {job}");
    job["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn lists_filters_and_counts_dead_letters() {
    let app = TestApp::spawn().await;
    let a = dead_letter(&app, "billing.charge", "billing", "Timeout").await;
    let b = dead_letter(&app, "billing.refund", "billing", "Declined").await;
    let c = dead_letter(&app, "email.send", "email", "Timeout").await;
    // Discarded by a DISCARD directive: not dead-lettered.
    let skipped = app
        .push_id(json!({"type": "email.send", "args": [], "queue": "email"}))
        .await;
    app.fetch_one("email", "w").await;
    app.nack(json!({"job_id": skipped, "error": {"message": "no", "code": "DISCARD"}}))
        .await
        .expect(200);

    let all = app.get("/ojs/v1/dead-letter").await.expect(200).json;
    assert_eq!(
        ids(&all["jobs"]),
        [c.as_str(), b.as_str(), a.as_str()],
        "newest first"
    );
    assert_eq!(all["pagination"]["total"], 3);
    assert_eq!(all["jobs"][0]["errors"].as_array().unwrap().len(), 1);
    assert!(all["jobs"][0]["dead_lettered_at"].is_string());

    let billing = app
        .get("/ojs/v1/dead-letter?queue=billing")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&billing["jobs"]), [b.as_str(), a.as_str()]);
    let typed = app
        .get("/ojs/v1/dead-letter?type=billing.*")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&typed["jobs"]).len(), 2);
    let exact = app
        .get("/ojs/v1/dead-letter?type=email.send")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&exact["jobs"]), [c.as_str()]);
    let timeouts = app
        .get("/ojs/v1/dead-letter?error_type=Timeout&limit=1")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&timeouts["jobs"]), [c.as_str()]);
    assert_eq!(timeouts["pagination"]["has_more"], true);
    app.get("/ojs/v1/dead-letter?since=yesterday")
        .await
        .expect_error(400, "invalid_request");

    let stats = app.get("/ojs/v1/dead-letter/stats").await.expect(200).json;
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["by_queue"], json!({"billing": 2, "email": 1}));
    assert_eq!(stats["by_error_type"], json!({"Timeout": 2, "Declined": 1}));
    assert_eq!(stats["retention"]["max_age"], "P30D");

    let one = app
        .get(&format!("/ojs/v1/dead-letter/{a}"))
        .await
        .expect(200);
    assert_eq!(one.json["job"]["id"], a.as_str());
    app.get(&format!("/ojs/v1/dead-letter/{skipped}"))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn a_retried_dead_letter_starts_over() {
    let app = TestApp::spawn().await;
    let id = dead_letter(&app, "a.b", "q", "E").await;
    let resp = app
        .send(
            reqwest::Method::POST,
            &format!("/ojs/v1/dead-letter/{id}/retry"),
            None,
            &[],
        )
        .await
        .expect(200);
    let job = &resp.json["job"];
    assert_eq!(job["state"], "available");
    assert_eq!(job["attempt"], 0);
    assert!(job["errors"] == json!([]) && job.get("error").is_none());
    assert!(job.get("dead_lettered_at").is_none() && job.get("discarded_at").is_none());
    assert!(job.get("completed_at").is_none());
    assert!(job["re_enqueued_at"].is_string());
    assert_eq!(job["enqueued_at"], job["re_enqueued_at"]);
    let again = app.fetch_one("q", "w2").await;
    assert_eq!(
        (again["id"].as_str(), again["attempt"].as_i64()),
        (Some(id.as_str()), Some(1))
    );
    assert!(app.job_event_types(&id).await.ends_with(&[
        "dead_letter.retried".to_owned(),
        "job.enqueued".to_owned(),
        "job.started".to_owned()
    ]));
    // No longer in the dead-letter queue.
    app.post(&format!("/ojs/v1/dead-letter/{id}/retry"), json!({}))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn a_retry_may_override_fields_validated_as_on_enqueue() {
    let app = TestApp::spawn().await;
    let id = dead_letter(&app, "a.b", "q", "E").await;
    let bad = app
        .post(
            &format!("/ojs/v1/dead-letter/{id}/retry"),
            json!({"override": {"priority": -1}}),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(bad.json["error"]["details"]["field"], "$.override.priority");
    app.post(
        &format!("/ojs/v1/dead-letter/{id}/retry"),
        json!({"override": {"retry": {"max_attempts": -2}}}),
    )
    .await
    .expect_error(422, "validation_error");
    app.post(
        &format!("/ojs/v1/dead-letter/{id}/retry"),
        json!({"override": {"type": "x.y"}}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.post(
        &format!("/ojs/v1/dead-letter/{id}/retry"),
        json!({"override": [1]}),
    )
    .await
    .expect_error(400, "invalid_request");
    assert_eq!(app.job(&id).await["state"], "discarded", "nothing changed");

    let resp = app
        .post(
            &format!("/ojs/v1/dead-letter/{id}/retry"),
            json!({"override": {"queue": "fixed", "priority": 0, "args": ["new"],
                                "meta": {"why": "manual"}, "retry": {"max_attempts": 5}}}),
        )
        .await
        .expect(200);
    let job = &resp.json["job"];
    assert_eq!(job["queue"], "fixed");
    assert_eq!(job["priority"], 0);
    assert_eq!(job["args"], json!(["new"]));
    assert_eq!(job["meta"], json!({"why": "manual"}));
    assert_eq!(job["max_attempts"], 5);
    assert_eq!(job["retry"]["max_attempts"], 5);
    assert_eq!(app.fetch_one("fixed", "w").await["id"], id.as_str());
}

#[tokio::test]
async fn bulk_retry_delete_and_purge() {
    let app = TestApp::spawn().await;
    let a = dead_letter(&app, "a.b", "one", "E").await;
    let b = dead_letter(&app, "a.b", "two", "E").await;
    let c = dead_letter(&app, "a.b", "two", "E").await;

    app.post(
        "/ojs/v1/dead-letter/retry",
        json!({"filter": {"queue": "two"}}),
    )
    .await
    .expect_error(400, "invalid_request");
    let resp = app
        .post(
            "/ojs/v1/dead-letter/retry",
            json!({"filter": {"queue": "two"}, "confirm": true}),
        )
        .await
        .expect(200);
    assert_eq!(
        resp.json,
        json!({"action": "retry", "matched": 2, "succeeded": 2, "failed": 0, "retried": 2, "errors": []})
    );
    assert_eq!(app.job(&b).await["state"], "available");
    assert_eq!(app.job(&c).await["state"], "available");

    let resp = app
        .delete(&format!("/ojs/v1/dead-letter/{a}"))
        .await
        .expect(200);
    assert_eq!(resp.json, json!({"deleted": true, "job_id": a}));
    app.get(&format!("/ojs/v1/jobs/{a}"))
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/ojs/v1/dead-letter/{a}"))
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("/ojs/v1/dead-letter/{b}"))
        .await
        .expect_error(404, "not_found");
    assert!(
        app.job_event_types(&a)
            .await
            .contains(&"dead_letter.deleted".to_owned())
    );

    let d = dead_letter(&app, "a.b", "three", "E").await;
    app.delete("/ojs/v1/dead-letter")
        .await
        .expect_error(400, "invalid_request");
    let resp = app
        .send(
            reqwest::Method::DELETE,
            "/ojs/v1/dead-letter",
            Some(
                json!({"queue": "elsewhere", "confirm": true})
                    .to_string()
                    .into_bytes(),
            ),
            &[("content-type", "application/json")],
        )
        .await
        .expect(200);
    assert_eq!(resp.json, json!({"purged_count": 0}));
    let resp = app
        .delete("/ojs/v1/dead-letter?confirm=true&queue=three")
        .await
        .expect(200);
    assert_eq!(resp.json, json!({"purged_count": 1}));
    app.get(&format!("/ojs/v1/jobs/{d}"))
        .await
        .expect_error(404, "not_found");
}
