//! Unique jobs: fingerprints, conflict policies, and strong uniqueness under concurrency.

use serde_json::{Value, json};

use crate::support::{TestApp, count, statuses};

fn unique_job(args: Value, unique: Value) -> Value {
    let mut job = json!({"type": "report.build", "queue": "u"});
    job["args"] = args;
    job["unique"] = unique;
    job
}

#[tokio::test]
async fn reject_refuses_a_duplicate_with_its_details() {
    let app = TestApp::spawn().await;
    let policy = json!({"keys": ["type", "args"], "period": "PT1H"});
    let first = app.push(unique_job(json!([1]), policy.clone())).await;
    assert_eq!(first["unique"], policy);
    assert_eq!(first["unique_key"].as_str().unwrap().len(), 64);
    let resp = app
        .post("/ojs/v1/jobs", unique_job(json!([1]), policy.clone()))
        .await
        .expect_error(409, "duplicate");
    let details = &resp.json["error"]["details"];
    assert_eq!(details["existing_job_id"], first["id"]);
    assert_eq!(details["existing_job_state"], "available");
    assert_eq!(details["unique_key"], first["unique_key"]);
    // Different args are a different job.
    app.push(unique_job(json!([2]), policy)).await;
    assert_eq!(app.job_count().await, 2);
}

#[tokio::test]
async fn ignore_returns_the_existing_job() {
    let app = TestApp::spawn().await;
    let policy = json!({"on_conflict": "ignore"});
    let first = app.push(unique_job(json!([1]), policy.clone())).await;
    let resp = app
        .post("/ojs/v1/jobs", unique_job(json!([99]), policy))
        .await
        .expect(200);
    assert_eq!(resp.json["deduplicated"], true);
    assert_eq!(resp.json["job"]["id"], first["id"]);
    assert_eq!(resp.json["job"]["args"], json!([1]));
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn replace_cancels_the_existing_job_but_never_a_running_one() {
    let app = TestApp::spawn().await;
    let policy = json!({"on_conflict": "replace"});
    let first = app.push(unique_job(json!([1]), policy.clone())).await;
    let second = app.push(unique_job(json!([2]), policy.clone())).await;
    assert_ne!(first["id"], second["id"]);
    assert_eq!(
        app.job(first["id"].as_str().unwrap()).await["state"],
        "cancelled"
    );
    // Once the surviving job runs, a replacement is refused instead.
    app.fetch_one("u", "w").await;
    app.post("/ojs/v1/jobs", unique_job(json!([3]), policy))
        .await
        .expect_error(409, "duplicate");
    assert_eq!(
        app.job(second["id"].as_str().unwrap()).await["state"],
        "active"
    );
}

#[tokio::test]
async fn replace_except_schedule_updates_a_scheduled_job_in_place() {
    let app = TestApp::spawn().await;
    let policy = json!({"on_conflict": "replace_except_schedule"});
    let mut first = unique_job(json!([1]), policy.clone());
    first["scheduled_at"] = json!("2099-05-01T00:00:00Z");
    let first = app.push(first).await;
    let mut second = unique_job(json!([2]), policy);
    second["scheduled_at"] = json!("2099-06-01T00:00:00Z");
    second["priority"] = json!(0);
    let resp = app.post("/ojs/v1/jobs", second).await.expect(200);
    assert_eq!(resp.json["replaced"], true);
    let j = &resp.json["job"];
    assert_eq!(j["id"], first["id"]);
    assert_eq!(j["args"], json!([2]));
    assert_eq!(j["priority"], 0);
    assert_eq!(
        j["scheduled_at"], "2099-05-01T00:00:00Z",
        "the schedule is kept"
    );
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn period_and_states_limit_what_counts_as_a_duplicate() {
    let app = TestApp::spawn().await;
    // `period_ms` is the Go and Java SDKs' spelling of `period`.
    for (args, policy) in [
        (
            json!([1]),
            json!({"keys": ["type", "args"], "period": "PT1M"}),
        ),
        (
            json!([2]),
            json!({"keys": ["type", "args"], "period_ms": 60_000}),
        ),
    ] {
        let first = app.push(unique_job(args.clone(), policy.clone())).await;
        let id = first["id"].as_str().unwrap();
        app.post("/ojs/v1/jobs", unique_job(args.clone(), policy.clone()))
            .await
            .expect_error(409, "duplicate");
        app.sql(&format!(
            "update ojs_job set created_at = now() - interval '2 minutes' where id = '{id}'"
        ))
        .await;
        app.push(unique_job(args, policy)).await;
    }

    // A completed job does not block by default, but does when its state is listed.
    let done = app
        .push(json!({"type": "done.job", "args": [], "queue": "d", "unique": {}}))
        .await;
    app.fetch_one("d", "w").await;
    app.ack(json!({"job_id": done["id"]})).await.expect(200);
    app.push(json!({"type": "done.job", "args": [], "queue": "d", "unique": {}}))
        .await;
    app.post(
        "/ojs/v1/jobs",
        json!({"type": "done.job", "args": [], "queue": "d", "unique": {"states": ["completed"]}}),
    )
    .await
    .expect_error(409, "duplicate");
}

#[tokio::test]
async fn upgrade_priority_raises_an_ignored_duplicates_urgency() {
    let app = TestApp::spawn().await;
    let policy = json!({"on_conflict": "ignore", "upgrade_priority": true});
    let mut first = unique_job(json!([]), policy.clone());
    first["priority"] = json!(4);
    let first = app.push(first).await;
    let mut urgent = unique_job(json!([]), policy);
    urgent["priority"] = json!(1);
    let resp = app.post("/ojs/v1/jobs", urgent).await.expect(200);
    assert_eq!(resp.json["job"]["id"], first["id"]);
    assert_eq!(resp.json["job"]["priority"], 1);
}

#[tokio::test]
async fn batches_apply_policies_per_item_and_stay_atomic() {
    let app = TestApp::spawn().await;
    let existing = app
        .push(unique_job(
            json!(["a"]),
            json!({"keys": ["args"], "on_conflict": "ignore"}),
        ))
        .await;
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                unique_job(json!(["a"]), json!({"keys": ["args"], "on_conflict": "ignore"})),
                unique_job(json!(["b"]), json!({"keys": ["args"]})),
                {"type": "plain.job", "args": []},
            ]}),
        )
        .await
        .expect(201);
    let jobs = resp.json["jobs"].as_array().unwrap();
    assert_eq!(jobs[0]["id"], existing["id"]);
    assert_eq!(jobs[0]["deduplicated"], true);
    assert!(jobs[1].get("deduplicated").is_none());
    assert_eq!(app.job_count().await, 3);

    // A rejected item, or two items sharing a key, fail the whole batch.
    let before = app.job_count().await;
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "plain.job", "args": []},
                unique_job(json!(["b"]), json!({"keys": ["args"]})),
            ]}),
        )
        .await
        .expect_error(409, "duplicate");
    assert_eq!(resp.json["error"]["details"]["index"], 1);
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [
            unique_job(json!(["c"]), json!({"keys": ["args"]})),
            unique_job(json!(["c"]), json!({"keys": ["args"]})),
        ]}),
    )
    .await
    .expect_error(409, "duplicate");
    assert_eq!(app.job_count().await, before);
}

#[tokio::test]
async fn duplicates_within_one_batch_follow_the_later_jobs_policy() {
    let app = TestApp::spawn().await;
    let resp = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                unique_job(json!(["x"]), json!({"keys": ["args"]})),
                unique_job(json!(["x"]), json!({"keys": ["args"], "on_conflict": "ignore"})),
                unique_job(json!(["x"]), json!({"keys": ["args"], "states": ["completed"]})),
            ]}),
        )
        .await
        .expect(201);
    let jobs = resp.json["jobs"].as_array().unwrap();
    // The second resolves to the first; the third only conflicts with completed jobs.
    assert_eq!(jobs[1]["id"], jobs[0]["id"]);
    assert_eq!(jobs[1]["deduplicated"], true);
    assert_ne!(jobs[2]["id"], jobs[0]["id"]);
    assert_eq!(app.job_count().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pushes_of_one_unique_job_create_it_once() {
    let app = TestApp::spawn().await;
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            app.spawn_post(
                "/ojs/v1/jobs",
                &json!({"type": "once.only", "args": [i], "unique": {}}),
            )
        })
        .collect();
    let statuses = statuses(tasks).await;
    assert_eq!(count(&statuses, 201), 1, "{statuses:?}");
    assert_eq!(count(&statuses, 409), 11, "{statuses:?}");
    assert_eq!(app.job_count().await, 1);
}
