//! The batch ACK/NACK extension, and group commit of concurrent single-job requests.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::{TestApp, count, job, statuses};

/// Pushes `n` jobs to `queue` and fetches them all as `worker`; returns their ids.
async fn claimed(app: &TestApp, queue: &str, worker: &str, n: usize) -> Vec<String> {
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"type": "a.b", "args": [i], "queue": queue}))
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    let fetched = app
        .fetch(json!({"queues": [queue], "count": n, "worker_id": worker}))
        .await;
    assert_eq!(fetched.len(), n);
    fetched
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_manifest_lists_the_batch_ack_extension() {
    let app = TestApp::spawn().await;
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    let names = manifest["extensions"].as_array().unwrap();
    assert!(names.contains(&json!("batch-ack")), "{names:?}");
    let ext = manifest["extension_details"]["experimental"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "batch-ack")
        .cloned()
        .expect("batch-ack listed");
    assert_eq!(
        ext["endpoints"],
        json!([
            "POST /ojs/v1/workers/ack/batch",
            "POST /ojs/v1/workers/nack/batch"
        ])
    );
}

#[tokio::test]
async fn batch_ack_completes_every_job_and_answers_each_in_order() {
    let app = TestApp::spawn().await;
    let ids = claimed(&app, "q", "w", 5).await;
    let acks: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            if i % 2 == 0 {
                json!({"job_id": id, "result": {"n": i}})
            } else {
                json!({"job_id": id})
            }
        })
        .collect();
    let resp = app
        .post(
            "/ojs/v1/workers/ack/batch",
            json!({"worker_id": "w", "acks": acks}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["acknowledged"], 5);
    assert_eq!(resp.json["failed"], 0);
    let results = resp.json["results"].as_array().unwrap();
    for (i, (item, id)) in results.iter().zip(&ids).enumerate() {
        assert_eq!(item["job_id"], id.as_str());
        assert_eq!(item["acknowledged"], true);
        assert_eq!(item["state"], "completed");
        assert!(item["completed_at"].is_string());
        let j = app.job(id).await;
        assert_eq!(j["state"], "completed");
        if i % 2 == 0 {
            assert_eq!(j["result"], json!({"n": i}));
        }
    }
    assert_eq!(
        app.job_event_types(&ids[0]).await,
        ["job.enqueued", "job.started", "job.completed"]
    );
}

#[tokio::test]
async fn batch_ack_answers_stale_items_without_failing_the_others() {
    let app = TestApp::spawn().await;
    let ids = claimed(&app, "q", "w", 3).await;
    // One was cancelled meanwhile, one is held by another worker.
    app.delete(&format!("/ojs/v1/jobs/{}", ids[1]))
        .await
        .expect(200);
    let other = claimed(&app, "q2", "someone-else", 1).await;
    let waiting = app.push_id(job("a.b", "q3")).await;
    let resp = app
        .post(
            "/ojs/v1/workers/ack/batch",
            json!({"worker_id": "w", "acks": [
                {"job_id": ids[0]}, {"job_id": ids[1]}, {"job_id": other[0]},
                {"job_id": waiting}, {"job_id": ids[2]}, {"job_id": ids[2]},
                {"job_id": "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f"},
            ]}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["acknowledged"], 2, "{}", resp.json);
    assert_eq!(resp.json["failed"], 5);
    let r = resp.json["results"].as_array().unwrap();
    assert_eq!(r[0]["state"], "completed");
    let state_conflict = |item: &Value, state: &str| {
        assert_eq!(item["error"]["code"], "conflict", "{item}");
        assert_eq!(item["error"]["details"]["current_state"], state, "{item}");
    };
    state_conflict(&r[1], "cancelled");
    assert_eq!(r[2]["error"]["code"], "conflict", "not the owner: {}", r[2]);
    assert!(
        r[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("someone-else"),
        "{}",
        r[2]
    );
    state_conflict(&r[3], "available");
    assert_eq!(r[4]["state"], "completed");
    // Named twice: the second ACK is answered as it would be after the first.
    state_conflict(&r[5], "completed");
    assert_eq!(r[6]["error"]["code"], "not_found");
    assert_eq!(r[6]["job_id"], "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f");
    // Nothing that failed was touched.
    assert_eq!(app.job(&ids[1]).await["state"], "cancelled");
    assert_eq!(app.job(&other[0]).await["state"], "active");
    assert_eq!(app.job(&waiting).await["state"], "available");
}

#[tokio::test]
async fn batch_ack_rejects_malformed_requests_whole() {
    let app = TestApp::spawn().await;
    let ids = claimed(&app, "q", "w", 1).await;
    let path = "/ojs/v1/workers/ack/batch";
    for (body, field) in [
        (json!({"worker_id": "w"}), "$.acks"),
        (json!({"acks": []}), "$.acks"),
        (json!({"acks": {"job_id": ids[0]}}), "$.acks"),
        (json!({"acks": [{"job_id": ids[0]}, 7]}), "$.acks[1]"),
        (
            json!({"acks": [{"job_id": ids[0]}, {"job_id": "nope"}]}),
            "$.acks[1].job_id",
        ),
        (json!({"acks": [{"result": 1}]}), "$.acks[0].job_id"),
        (
            json!({"worker_id": 5, "acks": [{"job_id": ids[0]}]}),
            "$.worker_id",
        ),
    ] {
        let resp = app
            .post(path, body.clone())
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(
            resp.json["error"]["details"]["field"], field,
            "{body}: {}",
            resp.json
        );
    }
    let too_many: Vec<Value> = (0..10_001).map(|_| json!({"job_id": ids[0]})).collect();
    app.post(path, json!({"acks": too_many}))
        .await
        .expect_error(400, "invalid_request");
    // A rejected request changed nothing.
    assert_eq!(app.job(&ids[0]).await["state"], "active");
}

#[tokio::test]
async fn batch_nack_applies_each_jobs_retry_policy() {
    let app = TestApp::spawn().await;
    let ids = claimed(&app, "q", "w", 2).await;
    let last = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "once", "retry": {"max_attempts": 1}}))
        .await;
    app.fetch_one("once", "w").await;
    let resp = app
        .post(
            "/ojs/v1/workers/nack/batch",
            json!({"worker_id": "w", "nacks": [
                {"job_id": ids[0], "error": {"message": "flaky", "code": "e1"}},
                {"job_id": ids[1], "requeue": true},
                {"job_id": last, "error": {"message": "fatal"}},
                {"job_id": ids[0], "error": {"message": "again"}},
            ]}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["nacked"], 3, "{}", resp.json);
    assert_eq!(resp.json["failed"], 1);
    let r = resp.json["results"].as_array().unwrap();
    assert_eq!(r[0]["state"], "retryable");
    assert!(r[0]["next_attempt_at"].is_string());
    assert_eq!(r[1]["state"], "available");
    assert_eq!(r[2]["state"], "discarded");
    assert_eq!(r[2]["dead_lettered"], true);
    assert_eq!(r[3]["error"]["code"], "invalid_request", "{}", r[3]);
    let j = app.job(&ids[0]).await;
    assert_eq!(j["errors"].as_array().unwrap().len(), 1, "failed once: {j}");
    assert_eq!(j["error"]["code"], "e1");
    // The requeued job can be fetched again at once.
    assert_eq!(app.fetch_one("q", "w2").await["id"], ids[1].as_str());

    // Malformed: an error is needed unless requeueing.
    app.post(
        "/ojs/v1/workers/nack/batch",
        json!({"nacks": [{"job_id": ids[1]}]}),
    )
    .await
    .expect_error(400, "invalid_request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_single_pushes_share_commits_and_each_gets_its_own_job() {
    let app = TestApp::spawn().await;
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let api = app.api.clone();
            tokio::spawn(async move {
                let job = api
                    .push(json!({"type": "a.b", "args": [i], "queue": "grouped"}))
                    .await;
                (i, job)
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for task in tasks {
        let (i, job) = task.await.unwrap();
        assert_eq!(
            job["args"],
            json!([i]),
            "each request gets its own job back"
        );
        assert_eq!(job["state"], "available");
        ids.insert(job["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 64);
    assert_eq!(app.job_count().await, 64);
    // Rows a transaction wrote carry its id (`xmin`): fewer transactions than jobs means
    // requests shared commits.
    let transactions: i64 = sqlx::query_scalar(
        "select count(distinct xmin::text) from ojs_job where queue = 'grouped'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert!(
        transactions < 64,
        "64 concurrent pushes were committed in {transactions} transactions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pushes_of_one_client_id_create_it_once() {
    let app = TestApp::spawn().await;
    let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            app.spawn_post(
                "/ojs/v1/jobs",
                &json!({"type": "a.b", "args": [i], "id": id}),
            )
        })
        .collect();
    let statuses = statuses(tasks).await;
    assert_eq!(count(&statuses, 201), 1, "{statuses:?}");
    assert_eq!(count(&statuses, 409), 15, "{statuses:?}");
    assert_eq!(app.job_count().await, 1);
    // Other requests in the same groups were not affected: a later push still works.
    app.push(job("a.b", "default")).await;
    assert_eq!(app.job_count().await, 2);
}

#[tokio::test]
async fn a_batch_ack_whose_statement_fails_for_one_job_completes_the_others() {
    let app = TestApp::spawn().await;
    let ids = claimed(&app, "q", "w", 3).await;
    // A completion that fails in the database for one job only (as a workflow's advance
    // might): the statement writing all three fails, and each is then written alone.
    sqlx::raw_sql(&format!(
        r#"
        create function test_refuse() returns trigger language plpgsql as $$
        begin raise exception 'refused'; end $$;
        create trigger test_refuse after insert on ojs_job_done for each row
            when (new.id = '{}'::uuid) execute function test_refuse();
        "#,
        ids[1]
    ))
    .execute(app.pool())
    .await
    .unwrap();
    let resp = app
        .post(
            "/ojs/v1/workers/ack/batch",
            json!({"worker_id": "w", "acks": ids.iter().map(|id| json!({"job_id": id})).collect::<Vec<_>>()}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["acknowledged"], 2, "{}", resp.json);
    assert_eq!(resp.json["failed"], 1);
    let r = resp.json["results"].as_array().unwrap();
    assert_eq!(r[0]["state"], "completed");
    assert!(r[1]["error"]["code"].is_string(), "{}", r[1]);
    assert_eq!(r[2]["state"], "completed");
    assert_eq!(app.job(&ids[1]).await["state"], "active");
}
