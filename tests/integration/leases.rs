//! Leases (migration V29): a claim's jobs are found through one `ojs_lease` row per FETCH, not
//! through indexes over active jobs. Each statement that ends active jobs counts them off their
//! lease; the reaper deletes a lease once none of its jobs is left and releases only jobs past
//! their own deadline; a worker's, queue's and pool's active jobs are read through them.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Connection;

use crate::support::{TestApp, TestDb, job};

/// `(open, jobs)` of each lease of `worker`, in lease order.
async fn leases_of(app: &TestApp, worker: &str) -> Vec<(i32, i32)> {
    sqlx::query_as("select open, jobs from ojs_lease where worker_id = $1 order by id")
        .bind(worker)
        .fetch_all(app.pool())
        .await
        .unwrap()
}

async fn push_n(app: &TestApp, queue: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(app.push_id(job("lease.test", queue)).await);
    }
    ids
}

async fn fetch_n(
    app: &TestApp,
    queue: &str,
    worker: &str,
    n: usize,
    visibility_ms: u64,
) -> Vec<Value> {
    let jobs = app
        .fetch(json!({"queues": [queue], "worker_id": worker, "count": n,
                       "visibility_timeout_ms": visibility_ms}))
        .await;
    assert_eq!(jobs.len(), n, "expected {n} jobs from {queue}");
    jobs
}

async fn active_job_ids(app: &TestApp, worker: &str) -> Vec<Value> {
    let resp = app
        .get(&format!("/ojs/v1/admin/workers/{worker}"))
        .await
        .expect(200);
    let worker = if resp.json["worker"].is_object() {
        &resp.json["worker"]
    } else {
        &resp.json
    };
    worker["active_job_ids"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_batch_ack_of_a_whole_fetch_deletes_its_lease() {
    let app = TestApp::spawn().await;
    push_n(&app, "q", 5).await;
    let jobs = fetch_n(&app, "q", "w", 5, 60_000).await;
    assert_eq!(leases_of(&app, "w").await, vec![(5, 5)]);
    assert_eq!(active_job_ids(&app, "w").await.len(), 5);

    let acks: Vec<Value> = jobs.iter().map(|j| json!({"job_id": j["id"]})).collect();
    let resp = app
        .post(
            "/ojs/v1/workers/ack/batch",
            json!({"worker_id": "w", "acks": acks}),
        )
        .await
        .expect(200);
    assert_eq!(resp.json["acknowledged"], 5);
    assert_eq!(leases_of(&app, "w").await, vec![]);
    assert!(active_job_ids(&app, "w").await.is_empty());
}

#[tokio::test]
async fn single_acks_and_nacks_count_jobs_off_and_the_last_one_deletes_the_lease() {
    let app = TestApp::spawn().await;
    push_n(&app, "q", 3).await;
    let jobs = fetch_n(&app, "q", "w", 3, 60_000).await;
    app.ack_job(&jobs[0], "w").await;
    assert_eq!(leases_of(&app, "w").await, vec![(2, 3)]);
    app.nack(json!({"job_id": jobs[1]["id"], "worker_id": "w", "error": {"message": "no"}}))
        .await
        .expect(200);
    assert_eq!(leases_of(&app, "w").await, vec![(1, 3)]);
    assert_eq!(active_job_ids(&app, "w").await, vec![jobs[2]["id"].clone()]);

    // The last job of the lease ends: the lease goes with it, leaving the reaper nothing.
    app.ack_job(&jobs[2], "w").await;
    assert_eq!(leases_of(&app, "w").await, vec![]);
    let pass = app.reap_after(Duration::ZERO).await;
    assert_eq!(pass.processed, 0, "nothing to release");
}

#[tokio::test]
async fn a_lease_whose_count_runs_ahead_stays_until_the_reaper_recounts_it() {
    let app = TestApp::spawn().await;
    push_n(&app, "q", 2).await;
    let jobs = fetch_n(&app, "q", "w", 2, 60_000).await;
    // A job that leaves without being counted off (an operator's delete in SQL): `open` now
    // runs ahead of the truth, so the last ACK leaves the lease to the reaper.
    sqlx::query("delete from ojs_job where id = $1::text::uuid")
        .bind(jobs[0]["id"].as_str().unwrap())
        .execute(app.pool())
        .await
        .unwrap();
    app.ack_job(&jobs[1], "w").await;
    assert_eq!(leases_of(&app, "w").await, vec![(1, 2)]);
    assert_eq!(app.reap_after(Duration::ZERO).await.processed, 0);
    assert_eq!(
        leases_of(&app, "w").await,
        vec![(1, 2)],
        "not due before its deadline"
    );
    let pass = app.reap_after(Duration::from_secs(120)).await;
    assert_eq!(pass.processed, 0, "no active job to release");
    assert_eq!(leases_of(&app, "w").await, vec![]);
}

#[tokio::test]
async fn the_reaper_releases_only_jobs_past_their_own_deadline_and_moves_the_lease_on() {
    let app = TestApp::spawn().await;
    push_n(&app, "q", 2).await;
    let jobs = fetch_n(&app, "q", "w", 2, 10_000).await;
    // The heartbeat extends one job's reservation to an hour; the lease still says 10 s.
    app.heartbeat(json!({"worker_id": "w", "active_jobs": [jobs[1]["id"]],
                          "visibility_timeout_ms": 3_600_000}))
        .await
        .expect(200);

    let pass = app.reap_after(Duration::from_secs(20)).await;
    assert_eq!(pass.processed, 1);
    assert_eq!(
        app.job(jobs[0]["id"].as_str().unwrap()).await["state"],
        "available"
    );
    assert_eq!(
        app.job(jobs[1]["id"].as_str().unwrap()).await["state"],
        "active"
    );
    // The lease keeps the one job, due at its deadline.
    let (open, due_in_s): (i32, f64) = sqlx::query_as(
        "select open, extract(epoch from due_at - now())::float8 from ojs_lease where worker_id = 'w'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(open, 1);
    // Its execution timeout (30 minutes by default) ends before the reservation.
    assert!(
        (1_700.0..=1_800.0).contains(&due_in_s),
        "due in {due_in_s} s"
    );
    // Nothing more is due before then.
    assert_eq!(app.reap_after(Duration::from_secs(60)).await.processed, 0);
    assert_eq!(
        app.reap_after(Duration::from_secs(1_900)).await.processed,
        1
    );
    // An execution timeout is a failed attempt: retried later.
    assert_eq!(
        app.job(jobs[1]["id"].as_str().unwrap()).await["state"],
        "retryable"
    );
    assert_eq!(leases_of(&app, "w").await, vec![]);
}

#[tokio::test]
async fn a_heartbeat_is_a_hot_update() {
    let app = TestApp::spawn().await;
    push_n(&app, "q", 1).await;
    let jobs = fetch_n(&app, "q", "w", 1, 60_000).await;
    let id = uuid::Uuid::parse_str(jobs[0]["id"].as_str().unwrap()).unwrap();
    let mut tx = app.pool().begin().await.unwrap();
    // The heartbeat's update, in a transaction whose own statistics say how it was written.
    let extended = sqlx::query(
        "update ojs_job set visible_until = now() + interval '1 minute' where id = $1 and state = 'active'",
    )
    .bind(id)
    .execute(&mut *tx)
    .await
    .unwrap();
    assert_eq!(extended.rows_affected(), 1);
    let (updated, hot): (i64, i64) = sqlx::query_as(
        "select pg_stat_get_xact_tuples_updated('ojs_job'::regclass),
                pg_stat_get_xact_tuples_hot_updated('ojs_job'::regclass)",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!((updated, hot), (1, 1), "no index reads visible_until");
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_or_handed_off_job_has_its_lease_too() {
    let app = TestApp::spawn().await;
    // A FETCH parked on an empty queue gets the next PUSH handed to it, with a lease.
    let fetch = app.spawn_post(
        "/ojs/v1/workers/fetch",
        &json!({"queues": ["h"], "worker_id": "parked", "wait_ms": 5_000}),
    );
    app.until_parked("h", 1).await;
    let id = app.push_id(job("lease.test", "h")).await;
    assert_eq!(fetch.await.unwrap(), 200);
    assert_eq!(leases_of(&app, "parked").await, vec![(1, 1)]);
    assert_eq!(active_job_ids(&app, "parked").await, vec![json!(id)]);

    app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    assert_eq!(app.job(&id).await["state"], "cancelled");
    assert_eq!(leases_of(&app, "parked").await, vec![]);
}

/// A database of the release before leases (V28), with jobs in every state and active jobs
/// held by two workers, migrates in place: every job reads the same, each active job gets a
/// lease (one per worker, queue and pool), and the server reaps and completes them as usual.
#[tokio::test]
async fn a_populated_database_of_the_previous_release_gets_leases_for_its_active_jobs() {
    let db = TestDb::empty().await;
    let mut conn = sqlx::PgConnection::connect_with(&db.options).await.unwrap();
    ojsd_migrate::run_to(&mut conn, 28).await.unwrap();
    sqlx::raw_sql(
        "insert into ojs_job (id, type, queue, args, meta, state, attempt, max_attempts, retry,
                              timeout_ms, created_at, enqueued_at, scheduled_at, started_at,
                              visible_until, reservation_ms, timeout_at, worker_id, pool,
                              next_retry_at, cancelled_at, discarded_at, completed_at,
                              dead_lettered_at,
                              error, errors, unique_key, unique_policy, tags, rate_key, rate_held)
         select gen_random_uuid(), 'upgrade.test', 'q' || (g % 3), json_build_array(g),
                json_build_object('n', g), s::ojs_job_state,
                case when s in ('available', 'scheduled', 'pending') then 0 else 1 end, 3,
                '{\"max_attempts\": 3}', 60000, now() - interval '1 hour',
                case when s <> 'scheduled' and s <> 'pending' then now() - interval '30 minutes' end,
                case when s = 'scheduled' then now() + interval '1 day' end,
                case when s in ('active', 'discarded', 'cancelled', 'retryable')
                     then now() - interval '1 minute' end,
                case when s = 'active' then now() + (g % 5 + 1) * interval '10 minutes' end,
                case when s = 'active' then 3600000 end,
                case when s = 'active' then now() + interval '1 hour' end,
                case when s = 'active' then 'w-' || (g % 2) end,
                case when s = 'active' and g % 4 = 0 then 'p' end,
                case when s = 'retryable' then now() + interval '1 minute' end,
                case when s = 'cancelled' then now() end,
                case when s = 'discarded' then now() end,
                case when s = 'discarded' then now() end,
                case when s = 'discarded' and g % 2 = 0 then now() end,
                case when s = 'discarded' then '{\"message\": \"no\"}'::jsonb end,
                case when s = 'discarded' then '[{\"message\": \"no\"}]'::jsonb else '[]' end,
                case when g % 5 = 0 then 'k' || g end,
                case when g % 5 = 0 then '{\"key\": [\"type\"]}'::json end,
                array['t' || g],
                case when g % 7 = 0 and s in ('available', 'active') then 'rk' end,
                case when g % 7 = 0 and s = 'available' then true end
           from generate_series(1, 700) g,
                lateral (select (array['scheduled', 'available', 'pending', 'active', 'retryable',
                                       'cancelled', 'discarded'])[g % 7 + 1] as s) x",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let before: Vec<(uuid::Uuid, Value)> =
        sqlx::query_as("select id, to_jsonb(j) from ojs_job j order by id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(before.len(), 700);

    let report = ojsd_migrate::run(&mut conn).await.unwrap();
    assert!(
        report.applied.iter().any(|m| m == "V29__leases"),
        "{report:?}"
    );
    let after: Vec<(uuid::Uuid, Value)> = sqlx::query_as(
        "select id, to_jsonb(j) - 'lease_id' - 'phase' - 'in_flight' - 'result_awaited' - 'durable'
           from ojs_job j order by id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(after, before, "every job, column for column");
    // Every active job is held by exactly one lease of its worker, queue and pool.
    let (active, held, leases, groups, strays): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from ojs_job where state = 'active'),
                (select count(*) from ojs_job_held h join ojs_job j on j.id = h.job_id
                  where h.worker_id = j.worker_id and h.queue = j.queue
                    and h.pool is not distinct from j.pool),
                (select count(*) from ojs_lease),
                (select count(distinct (worker_id, queue, pool)) from ojs_job where state = 'active'),
                (select count(*) from ojs_job where lease_id is not null and state <> 'active')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(active, 100);
    assert_eq!(held, active);
    assert_eq!((leases, groups), (9, 9), "one per worker, queue and pool");
    assert_eq!(strays, 0);
    let due_at_earliest: bool = sqlx::query_scalar(
        "select bool_and(l.due_at = (select min(least(j.visible_until, j.timeout_at))
                                       from ojs_job j where j.lease_id = l.id))
           from ojs_lease l",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(due_at_earliest);
    conn.close().await.unwrap();

    // The server takes over: the reaper releases them when their reservations end.
    let app = TestApp::spawn_on(db, |_| {}).await;
    assert_eq!(
        app.reap_after(Duration::from_secs(5 * 60)).await.processed,
        0
    );
    let mut released = 0;
    loop {
        let pass = app.reap_after(Duration::from_secs(2 * 3_600)).await;
        released += pass.processed;
        if !pass.more {
            break;
        }
    }
    assert_eq!(released, 100);
    let (active, leases): (i64, i64) = sqlx::query_as(
        "select (select count(*) from ojs_job where state = 'active'), (select count(*) from ojs_lease)",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!((active, leases), (0, 0));
}

#[tokio::test]
async fn leases_whose_jobs_another_transaction_holds_do_not_keep_the_reaper_spinning() {
    use ojsd::maintenance::{Reaper, ReaperConfig, Service};

    let app = TestApp::spawn().await;
    push_n(&app, "q", 2).await;
    fetch_n(&app, "q", "w1", 1, 1_000).await;
    fetch_n(&app, "q", "w2", 1, 1_000).await;
    let reaper = Reaper::new(
        app.maintenance(),
        ReaperConfig {
            interval: Duration::from_secs(1),
            batch_size: 1,
        },
    );
    let later = app.db_now_plus(Duration::from_secs(60)).await;
    // Another transaction holds both overdue jobs: the reaper skips them, and its full batches
    // of leases that stay due are no reason to run again at once.
    let mut tx = app.pool().begin().await.unwrap();
    sqlx::query("select 1 from ojs_job where state = 'active' for update")
        .execute(&mut *tx)
        .await
        .unwrap();
    let pass = reaper.run_once(Some(later)).await.unwrap();
    assert_eq!((pass.processed, pass.more), (0, false));
    tx.rollback().await.unwrap();
    // Once they are free, one batch of one lease after the other releases both.
    let pass = reaper.run_once(Some(later)).await.unwrap();
    assert_eq!((pass.processed, pass.more), (2, false));
    let leases: i64 = sqlx::query_scalar("select count(*) from ojs_lease")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(leases, 0);
}
