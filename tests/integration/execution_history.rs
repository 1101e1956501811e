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

fn lineage_path(id: &str) -> String {
    format!("/ojs/v1/jobs/{id}/lineage")
}

/// The job id of step `idx` of workflow `workflow`.
async fn step_job(app: &TestApp, workflow: &Value, idx: i32) -> String {
    sqlx::query_scalar(
        "select job_id::text from ojs_workflow_node where workflow_id = $1::uuid and idx = $2",
    )
    .bind(workflow["id"].as_str().unwrap())
    .bind(idx)
    .fetch_one(app.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_lineage_names_the_workflow_neighbours_the_root_and_the_clients_own_parent() {
    let app = TestApp::spawn().await;
    let step = |t: &str| json!({"type": t, "args": [], "options": {"queue": "lin"}});
    let chain = app
        .post(
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [step("a"), step("b"), step("c")]}),
        )
        .await
        .expect(201)
        .json;
    let (first, middle, last) = (
        step_job(&app, &chain, 0).await,
        step_job(&app, &chain, 1).await,
        step_job(&app, &chain, 2).await,
    );
    let got = app.get(&lineage_path(&middle)).await.expect(200).json;
    assert_eq!(got["job_id"], middle.as_str());
    assert_eq!(got["parent_id"], first.as_str());
    assert_eq!(got["parent_ids"], json!([first]));
    assert_eq!(got["children"], json!([{"job_id": last}]));
    assert_eq!(got["root_id"], first.as_str());
    assert_eq!(got["workflow_id"], chain["id"]);
    assert_eq!(got["workflow_type"], "chain");
    assert_eq!(got["workflow_step"], 1);
    assert_eq!(got["attempts"], 0);
    let head = app.get(&lineage_path(&first)).await.expect(200).json;
    assert_eq!(head["parent_id"], Value::Null);
    assert_eq!(head["root_id"], first.as_str());

    // A dag step with two dependencies.
    let dag = app
        .post(
            "/ojs/v1/workflows",
            json!({"name": "d", "steps": [
                {"id": "x", "type": "x", "args": [], "depends_on": [], "options": {"queue": "lin"}},
                {"id": "y", "type": "y", "args": [], "depends_on": [], "options": {"queue": "lin"}},
                {"id": "z", "type": "z", "args": [], "depends_on": ["x", "y"],
                 "options": {"queue": "lin"}},
            ]}),
        )
        .await
        .expect(201)
        .json;
    let (x, y, z) = (
        step_job(&app, &dag, 0).await,
        step_job(&app, &dag, 1).await,
        step_job(&app, &dag, 2).await,
    );
    let got = app.get(&lineage_path(&z)).await.expect(200).json;
    assert_eq!(got["parent_ids"], json!([x, y]), "{got}");
    let got = app.get(&lineage_path(&x)).await.expect(200).json;
    assert_eq!(got["children"], json!([{"job_id": z}]));

    // A plain job: its own attributes, or itself as its root.
    let parent = "01a22755-c990-7268-94f2-3e9b007407a3";
    let own = app
        .push_id(json!({"type": "p", "args": [], "parent_id": parent, "root_id": parent}))
        .await;
    let got = app.get(&lineage_path(&own)).await.expect(200).json;
    assert_eq!(
        (got["parent_id"].as_str(), got["root_id"].as_str()),
        (Some(parent), Some(parent))
    );
    assert_eq!(got["workflow_id"], Value::Null);
    assert_eq!(got["children"], json!([]));
    let plain = app.push_id(json!({"type": "p", "args": []})).await;
    assert_eq!(
        app.get(&lineage_path(&plain)).await.expect(200).json["root_id"],
        plain.as_str()
    );
    app.get(&lineage_path("01a22755-c990-7268-94f2-3e9b007407a4"))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn a_lineage_names_the_cron_run_that_enqueued_the_job() {
    use ojsd::maintenance::Service;
    let app = TestApp::spawn().await;
    app.post(
        "/ojs/v1/cron",
        json!({"name": "nightly", "expression": "0 0 * * *",
               "job_template": {"type": "n.t", "args": [], "options": {"queue": "cronq"}}}),
    )
    .await
    .expect(201);
    app.sql(
        "update ojs_cron set next_local = '2030-01-01T00:00:00', next_run_at = '2030-01-01T00:00:00Z' where name = 'nightly'",
    )
    .await;
    app.cron_firer()
        .run_once(Some("2030-01-01T00:00:00.200Z".parse().unwrap()))
        .await
        .expect("a cron pass");
    let job = app.fetch_one("cronq", "w").await;
    let got = app
        .get(&lineage_path(job["id"].as_str().unwrap()))
        .await
        .expect(200)
        .json;
    assert_eq!(got["cron"]["name"], "nightly", "{got}");
    assert_eq!(got["cron"]["scheduled_time"], "2030-01-01T00:00:00.000Z");
    assert_eq!(got["attempts"], 1);
}
