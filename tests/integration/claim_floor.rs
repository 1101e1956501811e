//! Claims start their walk of the dispatch index at the queue's claim floor
//! (`ojsd::wakeup::floors`), and nothing that becomes available below the floor is passed over.
//! Also: the planner statistics follow the size of ojs_job (`maintenance::PlannerStats`).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::processes::Replica;
use crate::support::{Client, TestApp, TestDb};
use ojsd::maintenance::{PlannerStats, PlannerStatsConfig, Service};

fn normal(name: &str) -> Value {
    json!({"type": "a.b", "args": [name], "queue": "q"})
}

async fn fetch_id(app: &TestApp) -> String {
    app.fetch_one("q", "w").await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_more_urgent_job_enqueued_after_a_claim_is_claimed_next() {
    let app = TestApp::spawn().await;
    let first = app.push_id(normal("first")).await;
    let second = app.push_id(normal("second")).await;
    assert_eq!(fetch_id(&app).await, first);
    // The floor is now at `first`; this job goes before it in dispatch order.
    let urgent = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "priority": 0}))
        .await;
    assert_eq!(fetch_id(&app).await, urgent);
    assert_eq!(fetch_id(&app).await, second);
}

#[tokio::test]
async fn a_job_whose_priority_was_raised_is_claimed_next() {
    let app = TestApp::spawn().await;
    let first = app.push_id(normal("first")).await;
    let second = app.push_id(normal("second")).await;
    let third = app.push_id(normal("third")).await;
    assert_eq!(fetch_id(&app).await, first);
    app.send(
        Method::PATCH,
        &format!("/ojs/v1/jobs/{third}"),
        Some(json!({"priority": 0}).to_string().into_bytes()),
        &[("content-type", "application/json")],
    )
    .await
    .expect(200);
    assert_eq!(fetch_id(&app).await, third);
    assert_eq!(fetch_id(&app).await, second);
}

#[tokio::test]
async fn a_job_released_before_the_floor_is_claimed_again() {
    let app = TestApp::spawn().await;
    let first = app.push_id(normal("first")).await;
    let second = app.push_id(normal("second")).await;
    let third = app.push_id(normal("third")).await;
    assert_eq!(fetch_id(&app).await, first);
    assert_eq!(fetch_id(&app).await, second);
    // Put `first` back where it was, as another server's rollback would, and tell the
    // replicas the way statements do (`queue` without a sender).
    app.sql(&format!(
        "update ojs_job set state = 'available', worker_id = null, started_at = null, \
         visible_until = null, timeout_at = null where id = '{first}'; \
         select pg_notify('ojs_job_available', 'q')"
    ))
    .await;
    // The notification reaches the listener shortly.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let got = loop {
        let jobs = app
            .fetch(json!({"queues": ["q"], "worker_id": "w", "count": 1, "wait_ms": 200}))
            .await;
        if let Some(job) = jobs.first() {
            break job["id"].as_str().unwrap().to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "nothing claimed");
    };
    // Either it was claimed first, or `third` was and `first` follows.
    if got == third {
        assert_eq!(fetch_id(&app).await, first);
    } else {
        assert_eq!(got, first);
        assert_eq!(fetch_id(&app).await, third);
    }
}

#[tokio::test]
async fn a_more_urgent_job_enqueued_on_another_replica_reaches_a_waiting_fetch() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("OJS_SKIP_MIGRATIONS", "true"),
        ("OJS_MAINTENANCE", "false"),
    ];
    let a = Replica::start(&url, "floor-a", &env);
    let b = Replica::start(&url, "floor-b", &env);
    let api_a = Client::new(&a.base);
    let api_b = api_a.of(&b.base);
    // A claims one job, raising its floor to it.
    api_a.push(normal("first")).await;
    let fetch = json!({"queues": ["q"], "worker_id": "w", "count": 1});
    assert_eq!(api_a.fetch(fetch).await.len(), 1);
    // A waits; B enqueues a job that goes before A's floor.
    let waiting = api_a
        .spawn_fetch(&json!({"queues": ["q"], "worker_id": "w", "count": 1, "wait_ms": 10_000}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let urgent = api_b
        .push(json!({"type": "a.b", "args": [], "queue": "q", "priority": 0}))
        .await["id"]
        .clone();
    let got = waiting.await.expect("fetch task");
    assert_eq!(got["jobs"][0]["id"], urgent);
}

#[tokio::test]
async fn planner_statistics_are_taken_when_the_job_table_has_grown() {
    let app = TestApp::spawn().await;
    let stats = PlannerStats::new(app.maintenance(), PlannerStatsConfig::default());
    // The first pass takes them; an unchanged table needs no second.
    assert_eq!(stats.run_once(None).await.unwrap().processed, 1);
    assert_eq!(stats.run_once(None).await.unwrap().processed, 0);
    let jobs: Vec<Value> = (0..3000).map(|i| normal(&format!("j{i}"))).collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    assert_eq!(stats.run_once(None).await.unwrap().processed, 1);
    let estimate: f32 =
        sqlx::query_scalar("select reltuples from pg_class where relname = 'ojs_job'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(estimate >= 2000.0, "statistics of {estimate} rows");
    assert_eq!(stats.run_once(None).await.unwrap().processed, 0);
}

#[tokio::test]
async fn a_fetch_claims_the_jobs_its_own_promotion_made_available_below_the_floor() {
    // No promoter: only FETCH promotes, and its claim runs before the promotion's notification
    // can have reached the floors.
    let app = TestApp::spawn_with(|c| c.maintenance.enabled = false).await;
    for queue in ["p1", "p2", "p3"] {
        // Due in an hour: nothing can promote it before the test moves its due time.
        let late = app
            .push(json!({"type": "a.b", "args": [], "queue": queue, "scheduled_at": "+PT1H"}))
            .await;
        assert_eq!(late["state"], "scheduled");
        let late = late["id"].as_str().unwrap().to_owned();
        // Claimed: the floor rises past `on_time`'s place.
        let on_time = app
            .push_id(json!({"type": "a.b", "args": [], "queue": queue}))
            .await;
        let first = app
            .fetch(json!({"queues": [queue], "worker_id": "w"}))
            .await;
        assert_eq!(first.len(), 1);
        assert_eq!(first[0]["id"], on_time.as_str());
        // `late` falls due as of a second before `on_time` was enqueued: promotion makes a job
        // available as of its due time, which puts it below the floor. No clock is raced: the
        // due time is written, and only the next FETCH promotes (its replica learnt of a
        // scheduled job when `late` was pushed, and the first FETCH did not come up short).
        app.sql(&format!(
            "update ojs_job set scheduled_at = \
               (select enqueued_at from ojs_job where id = '{on_time}') - interval '1 second' \
             where id = '{late}'"
        ))
        .await;
        let jobs = app
            .fetch(json!({"queues": [queue], "worker_id": "w"}))
            .await;
        assert_eq!(
            jobs.len(),
            1,
            "{queue}: the FETCH that promoted the job claims it"
        );
        assert_eq!(jobs[0]["id"], late.as_str());
    }
}
