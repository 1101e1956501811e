//! Workflows (migration V18): chains run in order and pass results, groups finish when every
//! member has, batch callbacks fire exactly once however many workers finish members at once,
//! cancel stops what has not started, and a bad definition writes nothing.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::TestApp;

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(app.pool()).await.unwrap()
}

async fn create(app: &TestApp, body: Value) -> Value {
    let resp = app.post("/ojs/v1/workflows", body).await.expect(201);
    let id = resp.json["workflow"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        resp.header("location"),
        Some(format!("/ojs/v1/workflows/{id}").as_str())
    );
    resp.json["workflow"].clone()
}

async fn workflow(app: &TestApp, id: &Value) -> Value {
    let resp = app
        .get(&format!("/ojs/v1/workflows/{}", id.as_str().unwrap()))
        .await
        .expect(200);
    assert_eq!(
        resp.json["workflow"]["id"], resp.json["id"],
        "wrapped and bare"
    );
    resp.json["workflow"].clone()
}

fn step(t: &str, queue: &str) -> Value {
    json!({"type": t, "args": [t], "options": {"queue": queue}})
}

async fn nothing_to_fetch(app: &TestApp, queue: &str) {
    let jobs = app
        .fetch(json!({"queues": [queue], "worker_id": "w-empty"}))
        .await;
    assert!(jobs.is_empty(), "{queue} holds {jobs:?}");
}

#[tokio::test]
async fn a_chain_runs_its_steps_in_order_and_passes_every_earlier_result() {
    let app = TestApp::spawn().await;
    let w = create(
        &app,
        json!({"type": "chain", "name": "pipeline", "priority": 1,
               "steps": [step("s.zero", "c"), step("s.one", "c"), step("s.two", "c")]}),
    )
    .await;
    assert_eq!(w["state"], "running");
    assert_eq!(w["steps_total"], 3);
    assert_eq!(w["steps"][1]["state"], "waiting");
    assert_eq!(w["steps"][1]["job_id"], Value::Null);

    let first = app.fetch_one("c", "w1").await;
    assert_eq!(first["type"], "s.zero");
    assert_eq!(first["workflow_id"], w["id"]);
    assert_eq!(first["workflow_step"], 0);
    assert_eq!(first["priority"], 1);
    nothing_to_fetch(&app, "c").await;
    // A held step cannot be started by hand.
    let held = workflow(&app, &w["id"]).await;
    let held_job: String = sqlx::query_scalar(
        "select job_id::text from ojs_workflow_node where workflow_id = $1::uuid and idx = 1",
    )
    .bind(w["id"].as_str().unwrap())
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(held["steps"][0]["state"], "active");
    app.post(&format!("/ojs/v1/jobs/{held_job}/activate"), json!({}))
        .await
        .expect_error(409, "conflict");

    app.ack(json!({"job_id": first["id"], "result": {"rows": 3}}))
        .await
        .expect(200);
    let second = app.fetch_one("c", "w1").await;
    assert_eq!(second["type"], "s.one");
    assert_eq!(second["parent_results"], json!([{"rows": 3}]));
    assert_eq!(second["priority"], 1, "successors inherit the priority");
    app.ack(json!({"job_id": second["id"], "result": "two"}))
        .await
        .expect(200);
    let third = app.fetch_one("c", "w1").await;
    assert_eq!(third["parent_results"], json!([{"rows": 3}, "two"]));
    app.ack(json!({"job_id": third["id"]})).await.expect(200);

    let done = workflow(&app, &w["id"]).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["steps_completed"], 3);
    assert_eq!(done["steps"][0]["result"], json!({"rows": 3}));
    assert_eq!(done["metadata"]["completed_count"], 3);
    assert!(done["completed_at"].is_string());
    let events = count(
        &app,
        "select count(*) from ojs_event where type like 'workflow.%'",
    )
    .await;
    // created, three step_completed, completed.
    assert_eq!(events, 5);
}

#[tokio::test]
async fn a_chain_step_that_fails_after_its_retries_stops_the_chain() {
    let app = TestApp::spawn().await;
    let mut failing = step("s.fail", "c");
    failing["options"]["retry"] = json!({"max_attempts": 1});
    let w = create(
        &app,
        json!({"type": "chain", "steps": [step("s.ok", "c"), failing, step("s.never", "c")]}),
    )
    .await;
    let first = app.fetch_one("c", "w").await;
    app.ack_job(&first, "w").await;
    let second = app.fetch_one("c", "w").await;
    app.nack(json!({"job_id": second["id"], "error": {"code": "boom", "message": "no"}}))
        .await
        .expect(200);
    nothing_to_fetch(&app, "c").await;
    let failed = workflow(&app, &w["id"]).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["steps_completed"], 1);
    assert_eq!(failed["steps_failed"], 1);
    assert_eq!(failed["failed_step_index"], 1);
    assert_eq!(failed["steps"][2]["state"], "cancelled");
    assert_eq!(failed["errors"][0]["code"], "boom");
    assert_eq!(failed["failed_job_ids"], json!([second["id"]]));
    // The step that never ran has no job left.
    assert_eq!(
        count(&app, "select count(*) from ojs_job where type = 's.never'").await,
        0
    );
}

#[tokio::test]
async fn a_group_finishes_when_every_member_has_and_a_failure_touches_no_sibling() {
    let app = TestApp::spawn().await;
    let mut failing = step("g.fail", "g");
    failing["options"]["retry"] = json!({"max_attempts": 1});
    let w = create(
        &app,
        json!({"type": "group", "jobs": [step("g.a", "g"), failing, step("g.b", "g")]}),
    )
    .await;
    assert_eq!(w["jobs_total"], 3);
    let jobs = app
        .fetch(json!({"queues": ["g"], "worker_id": "w", "count": 10}))
        .await;
    assert_eq!(jobs.len(), 3, "every member runs at once");
    for job in &jobs {
        if job["type"] == "g.fail" {
            app.nack(json!({"job_id": job["id"], "error": {"message": "x"}}))
                .await
                .expect(200);
        }
    }
    assert_eq!(workflow(&app, &w["id"]).await["state"], "running");
    for job in jobs.iter().filter(|j| j["type"] != "g.fail") {
        app.ack_job(job, "w").await;
    }
    let done = workflow(&app, &w["id"]).await;
    assert_eq!(done["state"], "failed");
    assert_eq!(done["jobs_completed"], 2);
    assert_eq!(done["jobs_failed"], 1);
}

/// Members finished by many workers at once, through single ACKs, batch ACKs and NACKs: the
/// callbacks fire exactly once, with every member's result in member order.
#[tokio::test]
async fn batch_callbacks_fire_exactly_once_when_many_workers_finish_members_at_once() {
    let app = TestApp::spawn().await;
    let members: Vec<Value> = (0..120)
        .map(|i| {
            json!({"type": "b.member", "args": [i],
                   "options": {"queue": "b", "retry": {"max_attempts": 1}}})
        })
        .collect();
    let w = create(
        &app,
        json!({"type": "batch", "jobs": members,
               "callbacks": {"on_complete": step("cb.complete", "cb"),
                             "on_success": step("cb.success", "cb"),
                             "on_failure": step("cb.failure", "cb")}}),
    )
    .await;
    let jobs = app
        .fetch(json!({"queues": ["b"], "worker_id": "w", "count": 200}))
        .await;
    assert_eq!(jobs.len(), 120);
    let mut tasks = Vec::new();
    for (n, chunk) in jobs.chunks(10).enumerate() {
        let client: crate::support::Client = (*app).clone();
        let chunk: Vec<Value> = chunk.to_vec();
        tasks.push(tokio::spawn(async move {
            for job in &chunk {
                let i = job["args"][0].as_i64().unwrap();
                if i == 7 {
                    client
                        .nack(json!({"job_id": job["id"], "error": {"message": "seven"}}))
                        .await
                        .expect(200);
                } else if n % 2 == 0 {
                    client
                        .ack(json!({"job_id": job["id"], "result": {"i": i}}))
                        .await
                        .expect(200);
                } else {
                    client
                        .post(
                            "/ojs/v1/workers/ack/batch",
                            json!({"acks": [{"job_id": job["id"], "result": {"i": i}}]}),
                        )
                        .await
                        .expect(200);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let callbacks = app
        .fetch(json!({"queues": ["cb"], "worker_id": "w", "count": 10}))
        .await;
    let mut types: Vec<&str> = callbacks
        .iter()
        .map(|j| j["type"].as_str().unwrap())
        .collect();
    types.sort();
    assert_eq!(types, ["cb.complete", "cb.failure"]);
    let results = callbacks[0]["parent_results"].as_array().unwrap();
    assert_eq!(results.len(), 120);
    for (i, r) in results.iter().enumerate() {
        if i == 7 {
            assert_eq!(r, &Value::Null, "a member that failed gives null");
        } else {
            assert_eq!(r, &json!({"i": i}));
        }
    }
    assert_eq!(
        count(
            &app,
            "select count(*) from ojs_event where type = 'workflow.callback_fired'"
        )
        .await,
        2
    );
    let running = workflow(&app, &w["id"]).await;
    assert_eq!(running["state"], "running", "until the callbacks finish");
    assert_eq!(running["callbacks"]["on_success"]["state"], "not_fired");
    for cb in &callbacks {
        app.ack_job(cb, "w").await;
    }
    let done = workflow(&app, &w["id"]).await;
    assert_eq!(done["state"], "failed", "a member failed: {done}");
    assert_eq!(done["jobs_completed"], 119);
    assert_eq!(done["callbacks"]["on_complete"]["state"], "completed");
}

#[tokio::test]
async fn cancel_stops_what_has_not_started_and_a_running_job_no_longer_advances_it() {
    let app = TestApp::spawn().await;
    let w = create(
        &app,
        json!({"type": "chain", "steps": [step("x.a", "x"), step("x.b", "x"), step("x.c", "x")]}),
    )
    .await;
    let id = w["id"].as_str().unwrap().to_owned();
    let first = app.fetch_one("x", "w").await;
    let resp = app
        .delete(&format!("/ojs/v1/workflows/{id}"))
        .await
        .expect(200);
    assert_eq!(resp.json["workflow"]["state"], "cancelled");
    assert_eq!(resp.json["workflow"]["steps_cancelled"], 2);
    app.ack_job(&first, "w").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    nothing_to_fetch(&app, "x").await;
    let after = workflow(&app, &w["id"]).await;
    assert_eq!(after["state"], "cancelled");
    assert_eq!(after["steps"][0]["state"], "completed");
    assert_eq!(after["steps"][1]["state"], "cancelled");
    app.post(&format!("/ojs/v1/workflows/{id}/cancel"), json!({}))
        .await
        .expect_error(409, "conflict");
    app.get("/ojs/v1/workflows/01a21ca6-b30b-72f8-809c-21da5c9f85db")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/workflows/not-an-id")
        .await
        .expect_error(404, "not_found");
    let listed = app
        .get("/ojs/v1/workflows?state=cancelled")
        .await
        .expect(200);
    assert_eq!(listed.json["items"][0]["id"], w["id"]);
    assert_eq!(listed.json["pagination"]["total"], 1);
}

#[tokio::test]
async fn a_bad_definition_is_a_400_naming_every_bad_item_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/workflows",
            json!({"type": "batch",
                   "jobs": [step("ok.a", "q"), {"args": []}, {"type": "ok.c", "args": 1}],
                   "callbacks": {"on_success": {"type": "", "args": []}, "on_finish": step("x.y", "q")}}),
        )
        .await
        .expect_error(400, "invalid_request");
    let details = &resp.json["error"]["details"];
    assert_eq!(details["reason"], "invalid_workflow");
    let paths: Vec<&str> = details["validation_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "$.callbacks.on_finish",
            "$.jobs[1].type",
            "$.jobs[2].args",
            "$.callbacks.on_success.type"
        ]
    );
    app.post(
        "/ojs/v1/workflows",
        json!({"type": "chain", "steps": [{"type": "a.b", "args": [], "steps": []}]}),
    )
    .await
    .expect_error(422, "unsupported");
    app.post("/ojs/v1/workflows", json!({"type": "chain", "steps": []}))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(count(&app, "select count(*) from ojs_job").await, 0);
    assert_eq!(count(&app, "select count(*) from ojs_workflow").await, 0);
}

/// A queue that keeps no completed jobs still passes results along: workflow jobs are kept.
#[tokio::test]
async fn results_reach_the_next_step_when_the_queue_keeps_no_completed_jobs() {
    let app = TestApp::spawn_with(|c| c.retention.completed = Duration::ZERO).await;
    let plain = app
        .push_id(json!({"type": "p.p", "args": [], "queue": "z"}))
        .await;
    let w = create(
        &app,
        json!({"type": "chain", "steps": [step("z.a", "z"), step("z.b", "z")]}),
    )
    .await;
    let jobs = app
        .fetch(json!({"queues": ["z"], "worker_id": "w", "count": 10}))
        .await;
    for job in &jobs {
        app.ack(json!({"job_id": job["id"], "result": {"from": job["type"]}}))
            .await
            .expect(200);
    }
    assert_eq!(
        count(
            &app,
            &format!("select count(*) from ojs_job_all where id = '{plain}'")
        )
        .await,
        0,
        "a plain job is forgotten"
    );
    let next = app.fetch_one("z", "w").await;
    assert_eq!(next["parent_results"], json!([{"from": "z.a"}]));
    app.ack_job(&next, "w").await;
    assert_eq!(workflow(&app, &w["id"]).await["state"], "completed");
}

#[tokio::test]
async fn the_admin_ui_reads_steps_progress_counts_and_metrics() {
    let app = TestApp::spawn().await;
    let w = create(
        &app,
        json!({"type": "batch", "jobs": [step("u.a", "u"), step("u.b", "u")],
               "callbacks": {"on_complete": step("u.cb", "ucb")}}),
    )
    .await;
    let id = w["id"].as_str().unwrap().to_owned();
    // The bare detail carries `steps` with ids, job ids and dependencies for every type.
    let bare = app
        .get(&format!("/ojs/v1/workflows/{id}"))
        .await
        .expect(200)
        .json;
    let steps = bare["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0]["id"], "0");
    assert_eq!(steps[0]["job_ids"].as_array().unwrap().len(), 1);
    assert_eq!(steps[2]["depends_on"], json!(["0", "1"]));
    assert_eq!(steps[2]["job_ids"], json!([]));

    let job = app.fetch_one("u", "w").await;
    app.ack_job(&job, "w").await;
    let progress = app
        .get(&format!("/ojs/v1/workflows/{id}/progress"))
        .await
        .expect(200)
        .json;
    assert_eq!(progress["workflow_id"], w["id"]);
    assert_eq!(progress["progress"], 50.0);
    assert_eq!(
        progress["steps"][0]["progress"].as_i64().unwrap()
            + progress["steps"][1]["progress"].as_i64().unwrap(),
        100
    );

    let stats = app.get("/ojs/v1/admin/stats").await.expect(200).json;
    assert_eq!(stats["workflows"]["running"], 1, "{stats}");
    let metrics = app.get("/metrics").await.expect(200);
    let text = metrics.text;
    assert!(
        text.contains(r#"ojs_workflows{state="running"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn retention_removes_a_finished_workflow_with_its_nodes() {
    let app = TestApp::spawn().await;
    let done = create(&app, json!({"type": "group", "jobs": [step("r.a", "r")]})).await;
    let running = create(&app, json!({"type": "group", "jobs": [step("r.b", "r2")]})).await;
    let job = app.fetch_one("r", "w").await;
    app.ack_job(&job, "w").await;
    assert_eq!(workflow(&app, &done["id"]).await["state"], "completed");
    // Ended longer ago than completed jobs are kept (7 days by default).
    sqlx::query("update ojs_workflow set completed_at = now() - interval '8 days', created_at = now() - interval '9 days' where state = 'completed'")
        .execute(app.pool())
        .await
        .unwrap();
    crate::job_history::prune_once(&app).await;
    app.get(&format!(
        "/ojs/v1/workflows/{}",
        done["id"].as_str().unwrap()
    ))
    .await
    .expect_error(404, "not_found");
    assert_eq!(workflow(&app, &running["id"]).await["state"], "running");
    assert_eq!(
        count(&app, "select count(*) from ojs_workflow_node").await,
        1,
        "the pruned workflow's node went with it"
    );
}

/// The dependency form, as the Go SDK sends it: no `type`, steps with `id` and `depends_on`.
fn dag_step(id: &str, depends_on: &[&str], queue: &str) -> Value {
    json!({"id": id, "type": format!("d.{id}"), "args": [id], "depends_on": depends_on,
           "options": {"queue": queue}})
}

#[tokio::test]
async fn a_dag_runs_each_step_once_its_dependencies_completed_with_their_results() {
    let app = TestApp::spawn().await;
    // a → (b, c) → d, d listing c before b.
    let w = create(
        &app,
        json!({"name": "diamond", "steps": [
            dag_step("a", &[], "d"), dag_step("b", &["a"], "d"),
            dag_step("c", &["a"], "d"), dag_step("d", &["c", "b"], "d")]}),
    )
    .await;
    assert_eq!(w["type"], "dag");
    assert_eq!(w["steps_total"], 4);
    assert_eq!(w["steps"][3]["id"], "d");
    assert_eq!(w["steps"][3]["depends_on"], json!(["c", "b"]));
    assert_eq!(w["steps"][3]["state"], "waiting");

    let a = app.fetch_one("d", "w").await;
    assert_eq!(a["type"], "d.a");
    assert!(a.get("depends_on").is_none(), "the graph is the workflow's");
    nothing_to_fetch(&app, "d").await;
    app.ack(json!({"job_id": a["id"], "result": "A"}))
        .await
        .expect(200);
    let both = app
        .fetch(json!({"queues": ["d"], "worker_id": "w", "count": 10}))
        .await;
    let mut types: Vec<&str> = both.iter().map(|j| j["type"].as_str().unwrap()).collect();
    types.sort();
    assert_eq!(types, ["d.b", "d.c"]);
    for job in &both {
        assert_eq!(job["parent_results"], json!(["A"]));
    }
    let (b, c) = if both[0]["type"] == "d.b" {
        (&both[0], &both[1])
    } else {
        (&both[1], &both[0])
    };
    app.ack(json!({"job_id": b["id"], "result": "B"}))
        .await
        .expect(200);
    nothing_to_fetch(&app, "d").await;
    let half = workflow(&app, &w["id"]).await;
    assert_eq!(half["steps_completed"], 2);
    assert_eq!(half["steps"][3]["state"], "waiting");
    app.ack(json!({"job_id": c["id"], "result": "C"}))
        .await
        .expect(200);
    let d = app.fetch_one("d", "w").await;
    assert_eq!(
        d["parent_results"],
        json!(["C", "B"]),
        "in depends_on order"
    );
    app.ack_job(&d, "w").await;
    let done = workflow(&app, &w["id"]).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["steps_completed"], 4);
    let step_ids: Vec<Value> = sqlx::query_scalar(
        "select data -> 'step_id' from ojs_event where type = 'workflow.step_completed' order by seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(step_ids.len(), 4);
    assert_eq!(step_ids[0], "a");
}

#[tokio::test]
async fn a_failed_dag_step_fails_the_workflow_and_what_was_released_runs_on() {
    let app = TestApp::spawn().await;
    let mut a = dag_step("a", &[], "f");
    a["options"]["retry"] = json!({"max_attempts": 1});
    let w = create(
        &app,
        json!({"steps": [a, dag_step("b", &[], "f"), dag_step("after-a", &["a"], "f"),
                         dag_step("after-b", &["b"], "f")]}),
    )
    .await;
    let roots = app
        .fetch(json!({"queues": ["f"], "worker_id": "w", "count": 10}))
        .await;
    assert_eq!(roots.len(), 2);
    let (a, b) = if roots[0]["type"] == "d.a" {
        (&roots[0], &roots[1])
    } else {
        (&roots[1], &roots[0])
    };
    app.nack(json!({"job_id": a["id"], "error": {"code": "bad", "message": "a failed"}}))
        .await
        .expect(200);
    let failed = workflow(&app, &w["id"]).await;
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["failed_step_index"], 0);
    assert_eq!(failed["steps"][2]["state"], "cancelled");
    assert_eq!(failed["steps"][3]["state"], "cancelled");
    // b was running: it finishes, and releases nothing.
    app.ack_job(b, "w").await;
    nothing_to_fetch(&app, "f").await;
    let after = workflow(&app, &w["id"]).await;
    assert_eq!(after["state"], "failed");
    assert_eq!(after["steps"][1]["state"], "completed");
    assert_eq!(after["steps"][3]["state"], "cancelled");
}

#[tokio::test]
async fn a_bad_dag_is_a_400_naming_the_step_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/workflows",
            json!({"steps": [dag_step("a", &["c"], "q"), dag_step("b", &["a"], "q"),
                             dag_step("c", &["b"], "q")]}),
        )
        .await
        .expect_error(400, "invalid_request");
    let errors = &resp.json["error"]["details"]["validation_errors"];
    assert_eq!(errors[0]["path"], "$.steps[0].depends_on", "{errors}");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("cycle"),
        "{errors}"
    );
    let resp = app
        .post(
            "/ojs/v1/workflows",
            json!({"steps": [dag_step("a", &["nope"], "q"), {"type": "x.y", "args": []}]}),
        )
        .await
        .expect_error(400, "invalid_request");
    let paths: Vec<&str> = resp.json["error"]["details"]["validation_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["$.steps[1].id", "$.steps[0].depends_on[0]"]);
    assert_eq!(count(&app, "select count(*) from ojs_workflow").await, 0);
    assert_eq!(count(&app, "select count(*) from ojs_job").await, 0);
}

#[tokio::test]
async fn a_held_step_cancelled_by_hand_or_a_purged_member_still_ends_its_workflow() {
    let app = TestApp::spawn().await;
    // A chain whose held second step is cancelled by hand fails there.
    let chain = create(
        &app,
        json!({"type": "chain", "steps": [step("h.a", "h"), step("h.b", "h"), step("h.c", "h")]}),
    )
    .await;
    let held: String = sqlx::query_scalar(
        "select job_id::text from ojs_workflow_node where workflow_id = $1::uuid and idx = 1",
    )
    .bind(chain["id"].as_str().unwrap())
    .fetch_one(app.pool())
    .await
    .unwrap();
    app.delete(&format!("/ojs/v1/jobs/{held}"))
        .await
        .expect(200);
    let failed = workflow(&app, &chain["id"]).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["failed_step_index"], 1);
    assert_eq!(failed["steps"][2]["state"], "cancelled");
    // The first step runs on, and releases nothing.
    let first = app.fetch_one("h", "w").await;
    app.ack_job(&first, "w").await;
    nothing_to_fetch(&app, "h").await;

    // A batch whose members and held callbacks are purged ends, firing nothing.
    let batch = create(
        &app,
        json!({"type": "batch", "jobs": [step("p.a", "p"), step("p.b", "p")],
               "callbacks": {"on_complete": step("p.cb", "p")}}),
    )
    .await;
    let resp = app
        .delete("/ojs/v1/admin/queues/p/jobs?confirm=true")
        .await
        .expect(200);
    assert_eq!(resp.json["purged_count"], 3);
    let ended = workflow(&app, &batch["id"]).await;
    assert_eq!(ended["state"], "failed", "{ended}");
    assert_eq!(ended["jobs_failed"], 2);
    assert_eq!(ended["callbacks"]["on_complete"]["state"], "cancelled");
    assert_eq!(ended["errors"][0]["code"], "deleted");
    nothing_to_fetch(&app, "p").await;
}

#[tokio::test]
async fn a_job_can_embed_the_chain_that_follows_it() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "e.first", "args": [1], "priority": 0, "options": {"queue": "e"},
                   "workflow": {"chain": [
                       {"type": "e.second", "args": [2]},
                       {"type": "e.third", "args": [3], "priority": 4, "options": {"queue": "e2"}}]}}),
        )
        .await
        .expect(201);
    let job = &resp.json["job"];
    assert_eq!(job["type"], "e.first");
    assert!(job.get("workflow").is_none(), "the key is consumed");
    let w = &resp.json["workflow"];
    assert_eq!(w["type"], "chain");
    assert_eq!(w["state"], "running");
    assert_eq!(w["steps_total"], 3);
    assert_eq!(
        resp.header("location"),
        Some(format!("/ojs/v1/jobs/{}", job["id"].as_str().unwrap()).as_str())
    );

    let first = app.fetch_one("e", "w").await;
    assert_eq!(first["id"], job["id"]);
    assert_eq!(first["workflow_id"], w["id"]);
    nothing_to_fetch(&app, "e").await;
    app.ack(json!({"job_id": first["id"], "result": "one"}))
        .await
        .expect(200);
    let second = app.fetch_one("e", "w").await;
    assert_eq!(second["type"], "e.second");
    assert_eq!(second["priority"], 0, "the posted job's priority");
    assert_eq!(second["parent_results"], json!(["one"]));
    app.ack_job(&second, "w").await;
    let third = app.fetch_one("e2", "w").await;
    assert_eq!(third["priority"], 4, "its own");
    app.ack_job(&third, "w").await;
    assert_eq!(workflow(&app, &w["id"]).await["state"], "completed");

    // Refusals write nothing.
    let bad = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "e.first", "args": [], "workflow": {"chain": [{"args": []}], "x": 1}}),
        )
        .await
        .expect_error(400, "invalid_request");
    let paths: Vec<&str> = bad.json["error"]["details"]["validation_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["$.workflow.x", "$.workflow.chain[0].type"]);
    app.post(
        "/ojs/v1/jobs",
        json!({"type": "e.first", "args": [], "workflow": {"group": [{"type": "a.b", "args": []}]}}),
    )
    .await
    .expect_error(422, "unsupported");
    app.post(
        "/ojs/v1/jobs",
        json!({"type": "e.first", "args": [], "workflow": []}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [{"type": "e.first", "args": [], "workflow": {"chain": [{"type": "a.b", "args": []}]}}]}),
    )
    .await
    .expect_error(422, "unsupported");
    assert_eq!(count(&app, "select count(*) from ojs_workflow").await, 1);
    assert_eq!(count(&app, "select count(*) from ojs_job").await, 0);
    // `"workflow": null` is no workflow: a plain job.
    let plain = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "e.plain", "args": [], "workflow": null}),
        )
        .await
        .expect(201);
    assert!(plain.json.get("workflow").is_none());
    assert_eq!(count(&app, "select count(*) from ojs_workflow").await, 1);
}

#[tokio::test]
async fn a_workflow_job_its_client_staged_is_activated_by_hand_once_released() {
    let app = TestApp::spawn().await;
    let mut staged = step("s.staged", "s");
    staged["pending"] = json!(true);
    let w = create(&app, json!({"type": "group", "jobs": [staged]})).await;
    nothing_to_fetch(&app, "s").await;
    let job_id = w["jobs"][0]["job_id"].as_str().unwrap().to_owned();
    app.post(&format!("/ojs/v1/jobs/{job_id}/activate"), json!({}))
        .await
        .expect(200);
    let job = app.fetch_one("s", "w").await;
    app.ack_job(&job, "w").await;
    assert_eq!(workflow(&app, &w["id"]).await["state"], "completed");
}
