//! The maintenance services, driven with `run_once(now)` instead of sleeping.

use std::time::{Duration, Instant};

use ojsd::maintenance::{
    Expirer, ExpirerConfig, Pass, Promoter, PromoterConfig, Pruner, PrunerConfig, Reaper,
    ReaperConfig, Service, StaleWorkers, StaleWorkersConfig,
};
use serde_json::{Value, json};

use crate::support::{TestApp, job};

const DAY: Duration = Duration::from_secs(86_400);

fn promoter(app: &TestApp) -> Promoter {
    Promoter::new(
        app.maintenance(),
        PromoterConfig {
            interval: Duration::from_millis(250),
            batch_size: 100,
        },
    )
}

fn reaper(app: &TestApp) -> Reaper {
    Reaper::new(
        app.maintenance(),
        ReaperConfig {
            interval: Duration::from_millis(500),
            batch_size: 100,
        },
    )
}

fn expirer(app: &TestApp) -> Expirer {
    Expirer::new(
        app.maintenance(),
        ExpirerConfig {
            interval: Duration::from_millis(500),
            batch_size: 100,
        },
    )
}

fn stale_workers(app: &TestApp) -> StaleWorkers {
    StaleWorkers::new(
        app.maintenance(),
        StaleWorkersConfig {
            interval: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_secs(45),
            batch_size: 100,
        },
    )
}

pub(crate) fn pruner_config() -> PrunerConfig {
    PrunerConfig {
        interval: Duration::from_secs(60),
        completed: 7 * DAY,
        cancelled: 7 * DAY,
        discarded: 30 * DAY,
        events: 7 * DAY,
        max_events: 1_000_000,
        stale_workers: DAY,
        cron_runs: 7 * DAY,
        batch_size: 2,
    }
}

/// Runs `service` once as if `offset` had passed.
async fn run_later(app: &TestApp, service: &impl Service, offset: Duration) -> Pass {
    let now = app.db_now_plus(offset).await;
    service.run_once(Some(now)).await.expect("maintenance pass")
}

async fn fetch_as(app: &TestApp, queue: &str, worker: &str, visibility_ms: u64) -> Value {
    let jobs = app
        .fetch(
            json!({"queues": [queue], "worker_id": worker, "visibility_timeout_ms": visibility_ms}),
        )
        .await;
    assert_eq!(jobs.len(), 1, "expected a job from {queue}");
    jobs[0].clone()
}

#[tokio::test]
async fn promoter_makes_due_jobs_available() {
    let app = TestApp::spawn().await;
    let soon = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "scheduled_at": "+PT1H"}))
        .await;
    let later = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "scheduled_at": "+PT2H"}))
        .await;
    let retried = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "r",
                         "retry": {"initial_interval": "PT10M", "jitter": false}}))
        .await;
    app.fetch_one("r", "w").await;
    app.nack(json!({"job_id": retried, "error": {"message": "later"}}))
        .await
        .expect(200);

    let nothing = run_later(&app, &promoter(&app), Duration::from_secs(60)).await;
    assert_eq!(nothing.processed, 0);
    let pass = run_later(&app, &promoter(&app), Duration::from_secs(90 * 60)).await;
    assert_eq!(
        pass,
        Pass {
            processed: 2,
            more: false
        }
    );
    let promoted = app.job(&soon).await;
    assert_eq!(promoted["state"], "available");
    // FIFO position is the due time, however late the promotion ran.
    assert_eq!(promoted["enqueued_at"], promoted["scheduled_at"]);
    assert_eq!(app.job(&retried).await["state"], "available");
    assert_eq!(app.job(&later).await["state"], "scheduled");
    assert_eq!(
        app.job_event_types(&soon).await,
        ["job.scheduled", "job.enqueued"]
    );
}

#[tokio::test]
async fn promoter_wakes_long_polling_fetchers() {
    // With a 60 s poll interval only the notification can deliver the job in time.
    let app = TestApp::spawn_with(|c| {
        c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(60_000);
        c.maintenance.enabled = false;
    })
    .await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "wake", "scheduled_at": "+PT1H"}))
        .await;
    let started = Instant::now();
    let waiter = app.spawn_fetch(&json!({"queues": ["wake"], "wait_ms": 10_000}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    run_later(&app, &promoter(&app), Duration::from_secs(7200)).await;
    let body = waiter.await.unwrap();
    assert_eq!(body["jobs"][0]["id"], id.as_str());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn reaper_returns_jobs_whose_reservation_expired() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"max_attempts": 2}}))
        .await;
    fetch_as(&app, "q", "w1", 1_000).await;
    assert_eq!(
        run_later(&app, &reaper(&app), Duration::ZERO)
            .await
            .processed,
        0
    );

    let pass = run_later(&app, &reaper(&app), Duration::from_secs(2)).await;
    assert_eq!(pass.processed, 1);
    let job = app.job(&id).await;
    assert_eq!(job["state"], "available", "attempts remain: straight back");
    assert_eq!(job["attempt"], 1, "the lost attempt already counted");
    assert_eq!(job["error"]["code"], "visibility_timeout");
    assert!(job.get("started_at").is_none());
    assert!(job.get("next_retry_at").is_none(), "no backoff");

    // The worker that lost the reservation can no longer report on it.
    app.ack(json!({"job_id": id, "worker_id": "w1"}))
        .await
        .expect_error(409, "conflict");
    let beat = app
        .heartbeat(json!({"worker_id": "w1", "active_jobs": [id]}))
        .await
        .expect(200);
    assert_eq!(beat.json["jobs_lost"], json!([id]));

    // The second (last) attempt also runs out: discarded into the dead-letter queue.
    fetch_as(&app, "q", "w2", 1_000).await;
    run_later(&app, &reaper(&app), Duration::from_secs(2)).await;
    let job = app.job(&id).await;
    assert_eq!(job["state"], "discarded");
    assert_eq!(job["attempt"], 2);
    assert!(job["dead_lettered_at"].is_string());
    assert_eq!(job["errors"].as_array().unwrap().len(), 2);
    let types = app.job_event_types(&id).await;
    assert_eq!(
        types,
        [
            "job.enqueued",
            "job.started",
            "job.failed",
            "job.stalled",
            "job.enqueued",
            "job.started",
            "job.failed",
            "job.stalled",
            "job.discarded",
            "dead_letter.added"
        ]
    );
}

#[tokio::test]
async fn reaper_enforces_the_execution_timeout_despite_heartbeats() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "timeout": 1,
                         "retry": {"max_attempts": 3, "initial_interval": "PT1M", "jitter": false}}))
        .await;
    let final_id = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "final", "timeout": 1,
                         "retry": {"max_attempts": 3, "non_retryable_errors": ["timeout"]}}),
        )
        .await;
    fetch_as(&app, "q", "w", 60_000).await;
    fetch_as(&app, "final", "w", 60_000).await;
    // Heartbeats extend the reservation, never the execution timeout.
    app.heartbeat(json!({"worker_id": "w", "active_jobs": [id, final_id]}))
        .await
        .expect(200);
    let pass = run_later(&app, &reaper(&app), Duration::from_millis(1_500)).await;
    assert_eq!(pass.processed, 2);

    let job = app.job(&id).await;
    assert_eq!(job["state"], "retryable");
    assert_eq!(job["error"]["code"], "timeout");
    assert_eq!(job["retry_delay_ms"], 60_000);
    assert!(
        app.job_event_types(&id)
            .await
            .contains(&"job.timeout".to_owned())
    );

    let job = app.job(&final_id).await;
    assert_eq!(job["state"], "discarded", "timeout listed as non-retryable");
    assert!(job["dead_lettered_at"].is_string());
}

#[tokio::test]
async fn reaper_discards_jobs_past_their_total_timeout() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "q", "total_timeout": 5, "timeout": 5,
                         "retry": {"max_attempts": 10}}),
        )
        .await;
    fetch_as(&app, "q", "w", 3_600_000).await;
    assert_eq!(
        run_later(&app, &reaper(&app), Duration::from_secs(4))
            .await
            .processed,
        0
    );
    run_later(&app, &reaper(&app), Duration::from_secs(6)).await;
    let job = app.job(&id).await;
    assert_eq!(job["state"], "discarded", "whatever attempts remain");
    assert_eq!(job["error"]["code"], "expired");
    let kinds: Vec<String> = sqlx::query_scalar(
        "select data ->> 'timeout_kind' from ojs_event_log where type = 'job.timeout' and job_id = $1::uuid",
    )
    .bind(&id)
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(kinds, ["total"]);
}

#[tokio::test]
async fn expirer_discards_waiting_jobs_past_their_deadlines() {
    let app = TestApp::spawn().await;
    let expires = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "expires_at": "+PT10S"}))
        .await;
    let scheduled = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "q", "scheduled_at": "+PT1H",
                         "expires_at": "+PT30S"}),
        )
        .await;
    let ttl = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "enqueue_ttl": 5}))
        .await;
    let no_dlq = app
        .push_id(
            json!({"type": "a.b", "args": [], "queue": "q", "expires_at": "+PT10S",
                         "retry": {"on_exhaustion": "discard"}}),
        )
        .await;
    let fresh = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "expires_at": "+P1D"}))
        .await;
    // Claimed once, so its enqueue TTL no longer applies.
    let claimed = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "claimed", "enqueue_ttl": 5}))
        .await;
    app.fetch_one("claimed", "w").await;
    app.nack(json!({"job_id": claimed, "requeue": true}))
        .await
        .expect(200);

    assert_eq!(
        run_later(&app, &expirer(&app), Duration::from_secs(2))
            .await
            .processed,
        0
    );
    let pass = run_later(&app, &expirer(&app), Duration::from_secs(60)).await;
    assert_eq!(pass.processed, 4);
    for id in [&expires, &scheduled, &ttl] {
        let job = app.job(id).await;
        assert_eq!(job["state"], "discarded", "{job}");
        assert_eq!(job["error"]["code"], "expired");
        assert!(job["completed_at"].is_string());
        assert!(job["dead_lettered_at"].is_string(), "{job}");
    }
    let job = app.job(&no_dlq).await;
    assert_eq!(job["state"], "discarded");
    assert!(job.get("dead_lettered_at").is_none());
    assert_eq!(app.job(&fresh).await["state"], "available");
    assert_eq!(app.job(&claimed).await["state"], "available");
    assert!(
        app.job(&ttl).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("enqueue_ttl")
    );
    assert_eq!(
        app.job_event_types(&expires).await,
        [
            "job.enqueued",
            "job.expired",
            "job.discarded",
            "dead_letter.added"
        ]
    );
    let reason: String = sqlx::query_scalar(
        "select data ->> 'reason' from ojs_event_log where type = 'job.discarded' and job_id = $1::uuid",
    )
    .bind(&expires)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(reason, "expired");
}

#[tokio::test]
async fn pruner_deletes_finished_jobs_past_their_retention() {
    let app = TestApp::spawn().await;
    let completed = app.push_id(job("a.b", "done")).await;
    app.fetch_one("done", "w").await;
    app.ack(json!({"job_id": completed})).await.expect(200);
    let cancelled = app.push_id(job("a.b", "gone")).await;
    app.delete(&format!("/ojs/v1/jobs/{cancelled}"))
        .await
        .expect(200);
    let discarded = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "dlq", "retry": {"max_attempts": 1}}))
        .await;
    app.fetch_one("dlq", "w").await;
    app.nack(json!({"job_id": discarded, "error": {"message": "no"}}))
        .await
        .expect(200);
    let waiting = app.push_id(job("a.b", "waiting")).await;
    let running = app.push_id(job("a.b", "running")).await;
    app.fetch_one("running", "w").await;

    let pruner = Pruner::new(app.maintenance(), pruner_config());
    run_later(&app, &pruner, 6 * DAY).await;
    assert_eq!(
        app.job_count().await,
        5,
        "nothing is past its retention yet"
    );
    run_later(&app, &pruner, 8 * DAY).await;
    app.get(&format!("/ojs/v1/jobs/{completed}"))
        .await
        .expect_error(404, "not_found");
    app.get(&format!("/ojs/v1/jobs/{cancelled}"))
        .await
        .expect_error(404, "not_found");
    assert_eq!(app.job(&discarded).await["state"], "discarded");
    let events: i64 = sqlx::query_scalar("select count(*) from ojs_event")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(events, 0, "events older than 7 days are gone");

    // Keep events from here on: in this simulated future they would be past retention at once.
    let pruner = Pruner::new(
        app.maintenance(),
        PrunerConfig {
            events: 36_500 * DAY,
            ..pruner_config()
        },
    );
    run_later(&app, &pruner, 31 * DAY).await;
    app.get(&format!("/ojs/v1/jobs/{discarded}"))
        .await
        .expect_error(404, "not_found");
    let pruned: Value =
        sqlx::query_scalar("select data from ojs_event_log where type = 'dead_letter.pruned'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(pruned, json!({"queue": "dlq", "count": 1}));

    // Unfinished jobs are never pruned, however old.
    run_later(&app, &pruner, 3650 * DAY).await;
    assert_eq!(app.job(&waiting).await["state"], "available");
    assert_eq!(app.job(&running).await["state"], "active");
}

#[tokio::test]
async fn pruner_works_in_bounded_batches_and_caps_the_event_count() {
    let app = TestApp::spawn().await;
    // One request per job: each enqueue writes its own event row, and the count cap keeps or
    // drops whole rows.
    for i in 0..25 {
        app.post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [i], "queue": "q"}),
        )
        .await
        .expect(201);
    }
    app.sql("update ojs_job set state = 'completed', completed_at = now()")
        .await;
    // Eight days on: past the 7 days' retention of completed jobs (the walk of finished jobs
    // stops at the ids of that cutoff, so the jobs must really be that old).
    let later = Duration::from_secs(8 * 86_400);
    let pruner = Pruner::new(
        app.maintenance(),
        PrunerConfig {
            max_events: 3,
            // Events outlive the eight days below: the count cap is what this checks.
            events: Duration::from_secs(30 * 86_400),
            ..pruner_config()
        },
    );
    // Batches of 2, at most 10 per target and pass: 20 jobs, then the rest next pass.
    let first = run_later(&app, &pruner, later).await;
    assert!(first.more, "{first:?}");
    assert_eq!(app.job_count().await, 5);
    for _ in 0..10 {
        if !run_later(&app, &pruner, later).await.more {
            break;
        }
    }
    assert_eq!(app.job_count().await, 0);
    // 25 enqueued events (the SQL update above wrote none), of which the newest 3 are kept.
    let left: Vec<String> = sqlx::query_scalar("select type from ojs_event_log order by xid, seq")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert_eq!(left, ["job.enqueued"; 3]);
}

/// Finished jobs are pruned along the primary key, up to the UUIDv7 of the cutoff: a job
/// whose id does not tell its time (here one stamped far in the future) is left to the full
/// sweep, which the first pass and every `FULL_SWEEP_EVERY`-th one make.
#[tokio::test]
async fn a_finished_job_whose_id_hides_its_age_is_pruned_by_the_full_sweep() {
    use ojsd::maintenance::FULL_SWEEP_EVERY;

    let app = TestApp::spawn().await;
    let ordinary = app.push_id(job("a.b", "q")).await;
    let pruner = Pruner::new(app.maintenance(), pruner_config());
    // The first pass is a sweep; nothing is old yet.
    run_later(&app, &pruner, Duration::ZERO).await;
    app.sql(&format!(
        "insert into ojs_job (id, type, queue, args, state, max_attempts, retry, timeout_ms,
                              created_at, cancelled_at)
         values ('fff00000-0000-7000-8000-000000000000', 'a.b', 'q', '[]', 'cancelled', 3, '{{}}',
                 1000, now(), now());
         update ojs_job set state = 'cancelled', cancelled_at = now() where id = '{ordinary}'"
    ))
    .await;
    // Eight days on (cancelled jobs are kept seven): the walk finds the ordinary job at once…
    let later = Duration::from_secs(8 * 86_400);
    run_later(&app, &pruner, later).await;
    let left: Vec<String> = sqlx::query_scalar("select id::text from ojs_job")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert_eq!(left, ["fff00000-0000-7000-8000-000000000000"]);
    // …and the other only on the next full sweep.
    for _ in 2..FULL_SWEEP_EVERY {
        run_later(&app, &pruner, later).await;
    }
    assert_eq!(app.job_count().await, 1);
    run_later(&app, &pruner, later).await;
    assert_eq!(app.job_count().await, 0);
}

#[tokio::test]
async fn stale_workers_lose_their_jobs() {
    let app = TestApp::spawn().await;
    let held = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "retry": {"max_attempts": 3}}))
        .await;
    let by_fetcher = app.push_id(job("a.b", "other")).await;
    app.heartbeat(json!({"worker_id": "w1"})).await.expect(200);
    fetch_as(&app, "q", "w1", 3_600_000).await;
    // A worker only ever seen fetching is listed but never declared stale.
    fetch_as(&app, "other", "fetch-only", 3_600_000).await;

    assert_eq!(
        run_later(&app, &stale_workers(&app), Duration::from_secs(30))
            .await
            .processed,
        0
    );
    let pass = run_later(&app, &stale_workers(&app), Duration::from_secs(46)).await;
    assert_eq!(
        pass.processed, 2,
        "one worker declared stale, one job released"
    );
    let job = app.job(&held).await;
    assert_eq!(job["state"], "available");
    assert_eq!(job["attempt"], 1, "recovery does not count an attempt");
    assert_eq!(job["error"]["code"], "worker_death");
    assert_eq!(app.job(&by_fetcher).await["state"], "active");
    let worker = app.get("/ojs/v1/admin/workers/w1").await.expect(200);
    assert_eq!(worker.json["state"], "stale");
    assert_eq!(worker.json["stale"], true);
    let stopped: Vec<Value> =
        sqlx::query_scalar("select data from ojs_event_log where type = 'worker.stopped'")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(
        stopped,
        [json!({"worker_id": "w1", "reason": "error",
                                "uptime_ms": stopped[0]["uptime_ms"]})]
    );

    // A stale worker that heartbeats again runs again, but its lost reservation stays lost.
    let beat = app
        .heartbeat(json!({"worker_id": "w1", "active_jobs": [held]}))
        .await
        .expect(200);
    assert_eq!(beat.json["state"], "running");
    assert_eq!(beat.json["jobs_lost"], json!([held]));
    assert_eq!(
        app.get("/ojs/v1/workers/w1/health").await.expect(200).json["state"],
        "running"
    );

    // Stale workers are listed for a day, then deleted (and fetch-only ones not seen for a day).
    app.heartbeat(json!({"worker_id": "w3"})).await.expect(200);
    run_later(&app, &stale_workers(&app), Duration::from_secs(46)).await;
    let pruner = Pruner::new(app.maintenance(), pruner_config());
    run_later(&app, &pruner, DAY + Duration::from_secs(3600)).await;
    app.get("/ojs/v1/admin/workers/w3")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/admin/workers/fetch-only")
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn the_leader_runs_maintenance_on_its_own() {
    let app = TestApp::spawn_with(|c| {
        c.maintenance.enabled = true;
        c.maintenance.promote_interval = std::time::Duration::from_millis(100);
        c.maintenance.reap_interval = std::time::Duration::from_millis(100);
    })
    .await;
    let scheduled = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q", "scheduled_at": "+PT1S"}))
        .await;
    let abandoned = app.push_id(job("a.b", "r")).await;
    fetch_as(&app, "r", "w", 500).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, a) = (app.job(&scheduled).await, app.job(&abandoned).await);
        if s["state"] == "available" && a["state"] == "available" {
            break;
        }
        assert!(Instant::now() < deadline, "not promoted/reclaimed: {s} {a}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (leader, held): (String, bool) =
        sqlx::query_as("select leader_id, held from ojs_leadership")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(held);
    let health = app.get("/ojs/v1/health").await.expect(200);
    assert_eq!(health.json["instance"]["id"], leader.as_str());
    assert_eq!(health.json["instance"]["leader"], true);
    let source: String = sqlx::query_scalar(
        "select source from ojs_event_log where job_id = $1::uuid and type = 'job.enqueued' order by xid desc, seq desc limit 1",
    )
    .bind(&scheduled)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(source, format!("ojs://ojs-server/scheduler/{leader}"));
}

/// A job of `queue` failed for good (one attempt, dead-lettered).
async fn dead_letter_one(app: &TestApp, queue: &str) -> String {
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": queue, "retry": {"max_attempts": 1}}))
        .await;
    app.fetch_one(queue, "w").await;
    app.nack(json!({"job_id": id, "error": {"code": "boom", "message": "no"}}))
        .await
        .expect(200);
    id
}

async fn put_config(app: &TestApp, queue: &str, body: Value) {
    app.send(
        reqwest::Method::PUT,
        &format!("/ojs/v1/queues/{queue}/config"),
        Some(body.to_string().into_bytes()),
        &[("content-type", "application/json")],
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn pruner_follows_each_queues_retention_and_dead_letter_settings() {
    let app = TestApp::spawn().await;
    put_config(&app, "_default", json!({"retention": {"completed": "P2D"}})).await;
    put_config(
        &app,
        "keep",
        json!({"retention": {"completed": "P20D"}, "dead_letter_ttl": "P1D"}),
    )
    .await;
    put_config(&app, "small", json!({"dead_letter_max_size": 2})).await;
    let mut done = Vec::new();
    for queue in ["plain", "keep"] {
        let id = app.push_id(job("a.b", queue)).await;
        app.fetch_one(queue, "w").await;
        app.ack(json!({"job_id": id})).await.expect(200);
        done.push(id);
    }
    let kept_dead = dead_letter_one(&app, "keep").await;
    let mut small = Vec::new();
    for _ in 0..4 {
        small.push(dead_letter_one(&app, "small").await);
    }

    let pruner = Pruner::new(app.maintenance(), pruner_config());
    run_later(&app, &pruner, Duration::from_secs(3600)).await;
    // dead_letter_max_size 2: only the two newest dead letters of `small` remain.
    for (i, id) in small.iter().enumerate() {
        let status = app.get(&format!("/ojs/v1/jobs/{id}")).await.status;
        assert_eq!(status, if i < 2 { 404 } else { 200 }, "dead letter {i}");
    }
    run_later(&app, &pruner, 3 * DAY).await;
    // _default's 2 days for completed jobs; `keep`'s dead letters last 1 day, its
    // completed jobs 20.
    app.get(&format!("/ojs/v1/jobs/{}", done[0]))
        .await
        .expect_error(404, "not_found");
    app.get(&format!("/ojs/v1/jobs/{kept_dead}"))
        .await
        .expect_error(404, "not_found");
    assert_eq!(app.job(&done[1]).await["state"], "completed");
    run_later(&app, &pruner, 21 * DAY).await;
    app.get(&format!("/ojs/v1/jobs/{}", done[1]))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn exhausted_jobs_are_re_enqueued_to_the_dead_letter_queue_with_their_error() {
    let app = TestApp::spawn().await;
    let before = dead_letter_one(&app, "payments").await;
    put_config(
        &app,
        "payments",
        json!({"dead_letter_queue": "payments-dlq"}),
    )
    .await;
    let failed = dead_letter_one(&app, "payments").await;
    assert_eq!(app.job(&failed).await["state"], "discarded");

    let promoter = promoter(&app);
    promoter.run_once(None).await.unwrap();
    let routed = app.job(&failed).await;
    assert_eq!(routed["state"], "available");
    assert_eq!(routed["queue"], "payments-dlq");
    assert_eq!(routed["original_queue"], "payments");
    assert_eq!(routed["error"]["code"], "boom");
    assert_eq!(routed["attempt"], 0);
    // Jobs dead-lettered before the routing was configured stay where they are.
    let old = app.job(&before).await;
    assert_eq!(old["queue"], "payments");
    assert_eq!(old["state"], "discarded");
    // The dead-letter queue is an ordinary queue: its workers fetch the job.
    let fetched = app.fetch_one("payments-dlq", "dlq-worker").await;
    assert_eq!(fetched["id"], routed["id"]);
    let data: Value = sqlx::query_scalar(
        "select data from ojs_event_log where type = 'job.enqueued' and job_id = $1::uuid and queue = 'payments-dlq'",
    )
    .bind(&failed)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(data["dead_lettered_from"], "payments");
}

#[tokio::test]
async fn the_pruner_removes_progress_reports_of_jobs_that_are_gone() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "prg-gone"}))
        .await;
    app.fetch_one("prg-gone", "w").await;
    app.post(
        "/ojs/v1/workers/progress",
        json!({"job_id": id, "progress": 0.2}),
    )
    .await
    .expect(200);
    let count = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from ojs_job_progress")
            .fetch_one(app.pool())
            .await
            .unwrap()
    };
    let pruner = Pruner::new(app.maintenance(), pruner_config());
    run_later(&app, &pruner, Duration::ZERO).await;
    assert_eq!(count().await, 1, "the job still runs");
    app.sql(&format!("delete from ojs_job where id = '{id}'"))
        .await;
    run_later(&app, &pruner, Duration::ZERO).await;
    assert_eq!(count().await, 0);
}

#[tokio::test]
async fn the_pruner_removes_checkpoints_of_jobs_that_are_gone() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "cp-gone"}))
        .await;
    app.send(
        reqwest::Method::PUT,
        &format!("/ojs/v1/jobs/{id}/checkpoint"),
        Some(br#"{"state": {"n": 1}}"#.to_vec()),
        &[("content-type", "application/json")],
    )
    .await
    .expect(200);
    let count = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from ojs_job_checkpoint")
            .fetch_one(app.pool())
            .await
            .unwrap()
    };
    let pruner = Pruner::new(app.maintenance(), pruner_config());
    run_later(&app, &pruner, Duration::ZERO).await;
    assert_eq!(count().await, 1, "the job still waits");
    app.sql(&format!("delete from ojs_job where id = '{id}'"))
        .await;
    run_later(&app, &pruner, Duration::ZERO).await;
    assert_eq!(count().await, 0);
}
