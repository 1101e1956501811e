//! A job's execution history (`GET /ojs/v1/jobs/{id}/history`): its events from the event log,
//! oldest first, named as the OJS execution-history extension names them, with who did each,
//! in pages.

use serde_json::{Value, json};

use crate::support::TestApp;

fn history_path(id: &str) -> String {
    format!("/ojs/v1/jobs/{id}/history")
}

/// `(event_type, actor type)` of each event of a page.
fn kinds(page: &Value) -> Vec<(String, String)> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event_type"].as_str().unwrap().to_owned(),
                e["actor"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_jobs_history_names_its_creation_attempts_checkpoints_and_end_with_their_actors() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "h.t", "args": [], "queue": "hist"}))
        .await;
    let job = app.fetch_one("hist", "w-1").await;
    app.put(
        &format!("/ojs/v1/jobs/{id}/checkpoint"),
        json!({"state": {"step": 1}, "worker_id": "w-1"}),
    )
    .await
    .expect(200);
    app.ack(json!({"job_id": job["id"], "worker_id": "w-1", "result": 1}))
        .await
        .expect(200);
    let page = app.get(&history_path(&id)).await.expect(200).json;
    assert_eq!(page["job_id"], id.as_str());
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    assert_eq!(
        kinds(&page),
        pairs(&[
            ("job.created", "client"),
            ("job.attempt_started", "worker"),
            ("job.checkpoint_saved", "worker"),
            ("job.attempt_completed", "client"),
        ]),
        "{page}"
    );
    assert_eq!(page["total"], 4);
    assert_eq!(page["next_cursor"], Value::Null);
    let started = &page["events"][1];
    assert_eq!(started["type"], "job.started");
    assert_eq!(
        (started["from"].as_str(), started["to"].as_str()),
        (Some("available"), Some("active"))
    );
    assert_eq!(started["actor"]["id"], "w-1");
    assert!(started["id"].as_str().unwrap().starts_with("evt_"));

    // A failure that discards the job.
    let failing = app
        .push_id(json!({"type": "h.t", "args": [], "queue": "hist", "retry": {"max_attempts": 1}}))
        .await;
    let job = app.fetch_one("hist", "w-2").await;
    app.nack(json!({"job_id": job["id"], "worker_id": "w-2", "error": {"message": "no"}}))
        .await
        .expect(200);
    let page = app.get(&history_path(&failing)).await.expect(200).json;
    let types: Vec<String> = kinds(&page).into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        types,
        [
            "job.created",
            "job.attempt_started",
            "job.attempt_failed",
            "job.discarded",
            "dead_letter.added"
        ],
        "{page}"
    );
}

#[tokio::test]
async fn the_history_comes_in_pages_and_bad_input_is_refused() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "h.t", "args": [], "queue": "pages"}))
        .await;
    let job = app.fetch_one("pages", "w").await;
    for n in 0..3 {
        app.put(
            &format!("/ojs/v1/jobs/{id}/checkpoint"),
            json!({"state": n}),
        )
        .await
        .expect(200);
    }
    app.ack(json!({"job_id": job["id"]})).await.expect(200);

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{}?limit=2&cursor={c}", history_path(&id)),
            None => format!("{}?limit=2", history_path(&id)),
        };
        let page = app.get(&path).await.expect(200).json;
        assert_eq!(page["total"], 6);
        for e in page["events"].as_array().unwrap() {
            seen.push(e["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6, "every event once: {seen:?}");
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen);

    for (query, field) in [
        ("limit=-1", "query.limit"),
        ("limit=many", "query.limit"),
        ("cursor=nope", "query.cursor"),
    ] {
        let resp = app
            .get(&format!("{}?{query}", history_path(&id)))
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(resp.json["error"]["details"]["field"], field, "{query}");
    }
    app.get(&history_path("01a22755-c990-7268-94f2-3e9b007407a3"))
        .await
        .expect_error(404, "not_found");
}
