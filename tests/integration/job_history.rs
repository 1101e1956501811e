//! Completed jobs leave `ojs_job` for `ojs_job_done` (migration V15): the ACK moves them, reads
//! find them, retention drops their days, and a database of the previous release migrates in
//! place with nothing lost.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::maintenance::pruner_config;
use crate::support::{TestApp, TestDb, job};
use ojsd::maintenance::{Pruner, PrunerConfig, Service};

/// One pass of the pruner (the maintenance tests' settings, batches of 100) at the database's now.
pub(crate) async fn prune_once(app: &TestApp) {
    let pruner = Pruner::new(
        app.maintenance(),
        PrunerConfig {
            batch_size: 100,
            ..pruner_config()
        },
    );
    let now = app.db_now_plus(Duration::ZERO).await;
    pruner.run_once(Some(now)).await.unwrap();
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(app.pool()).await.unwrap()
}

#[tokio::test]
async fn an_ack_moves_the_job_out_of_the_live_table_and_every_read_still_finds_it() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w").await;
    app.ack(json!({"job_id": id, "result": {"n": 1}}))
        .await
        .expect(200);
    assert_eq!(count(&app, "select count(*) from ojs_job").await, 0);
    assert_eq!(count(&app, "select count(*) from ojs_job_done").await, 1);
    assert_eq!(
        count(&app, "select count(*) from ojs_job_done_default").await,
        0,
        "today has its partition"
    );
    let info = app.job(&id).await;
    assert_eq!(info["state"], "completed");
    assert_eq!(info["result"], json!({"n": 1}));
    // The admin listing and the queue's counts see it.
    let listed = app
        .get("/ojs/v1/admin/jobs?state=completed")
        .await
        .expect(200)
        .json;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let stats = app.get("/ojs/v1/queues/q/stats").await.expect(200).json;
    assert_eq!(stats["stats"]["completed"], 1, "{stats}");
    // A completed job cannot change: 409 as before, not 404.
    app.delete(&format!("/ojs/v1/jobs/{id}"))
        .await
        .expect_error(409, "conflict");
    app.send(
        Method::PATCH,
        &format!("/ojs/v1/jobs/{id}"),
        Some(json!({"priority": 0}).to_string().into_bytes()),
        &[("content-type", "application/json")],
    )
    .await
    .expect_error(409, "conflict");
    // Its client-supplied id stays taken.
    app.post("/ojs/v1/jobs", json!({"id": id, "type": "a.b", "args": []}))
        .await
        .expect_error(409, "duplicate");
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [{"type": "a.b", "args": []}, {"id": id, "type": "a.b", "args": []}]}),
    )
    .await
    .expect_error(409, "duplicate");
    assert_eq!(count(&app, "select count(*) from ojs_job").await, 0);
}

/// No index of `ojs_job` reads `state` (migration V30): a cancel of an active job changes no
/// indexed column, so Postgres updates the row in place (HOT), as it does a heartbeat.
/// Counted by the transaction's own statistics, which no other session's writes disturb.
#[tokio::test]
async fn the_cancel_of_an_active_job_is_a_hot_update() {
    use ojsd::job::JobId;
    use ojsd::store::job::cancel;

    let app = TestApp::spawn().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = app.push_id(job("a.b", "q")).await;
        app.fetch_one("q", "w").await;
        ids.push(JobId(uuid::Uuid::parse_str(&id).unwrap()));
    }
    let mut tx = app.pool().begin().await.unwrap();
    for id in &ids {
        let cancelled = cancel(&mut *tx, *id, r#"{"message":"stop"}"#)
            .await
            .unwrap();
        assert!(cancelled.is_some());
    }
    let (updated, hot): (i64, i64) = sqlx::query_as(
        "select pg_stat_get_xact_tuples_updated('ojs_job'::regclass),
                pg_stat_get_xact_tuples_hot_updated('ojs_job'::regclass)",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((updated, hot), (3, 3), "every cancel is HOT");
}

#[tokio::test]
async fn retention_drops_whole_days_and_deletes_what_a_queue_keeps_for_less() {
    let app = TestApp::spawn().await;
    // Ten days of completed jobs in two queues: "short" keeps completed jobs for two days.
    app.put(
        "/ojs/v1/queues/short/config",
        json!({"retention": {"completed": "P2D"}}),
    )
    .await
    .expect(200);
    app.sql(
        "select ojs_job_done_partition(((now() at time zone 'UTC')::date - d))
           from generate_series(0, 10) d;
         insert into ojs_job_done (id, seq, type, queue, args, state, attempt, max_attempts,
                                   retry, timeout_ms, created_at, enqueued_at, started_at,
                                   completed_at)
         select gen_random_uuid(), d, 'a.b', q, '[]', 'completed', 1, 3, '{}', 1000, t, t, t, t
           from generate_series(0, 9) d, unnest(array['short', 'long']) q,
                lateral (select now() - d * interval '1 day' as t) x;",
    )
    .await;
    let days = count(
        &app,
        "select count(*) from ojs_job_done_partitions where low is not null",
    )
    .await;
    prune_once(&app).await;
    // Days ending before every queue's cutoff (seven days ago, the longest retention) are gone
    // whole; the rest are held to each queue's own: "long" keeps its last seven days, "short"
    // its last two.
    let left: Vec<(String, i64)> =
        sqlx::query_as("select queue, count(*) from ojs_job_done group by queue order by queue")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(left, [("long".to_owned(), 7), ("short".to_owned(), 2)]);
    let after = count(
        &app,
        "select count(*) from ojs_job_done_partitions where low is not null",
    )
    .await;
    assert!(after < days, "{after} of {days} day partitions left");
    assert_eq!(
        count(
            &app,
            "select count(*) from ojs_job_done_partitions where high <= now() - interval '7 days'"
        )
        .await,
        0
    );
    // The days ahead are made.
    assert!(
        count(
            &app,
            "select count(*) from ojs_job_done_partitions where low > now()"
        )
        .await
            >= 3
    );
}

#[tokio::test]
async fn a_day_whose_jobs_fell_into_the_default_partition_gets_none_and_is_pruned_row_by_row() {
    let app = TestApp::spawn().await;
    // A completed job of a day with no partition (say, the server was down for weeks).
    app.sql(
        "insert into ojs_job_done (id, seq, type, queue, args, state, attempt, max_attempts,
                                   retry, timeout_ms, created_at, completed_at)
         values (gen_random_uuid(), 1, 'a.b', 'q', '[]', 'completed', 1, 3, '{}', 1000,
                 now() - interval '40 days', now() - interval '40 days')",
    )
    .await;
    assert_eq!(
        count(&app, "select count(*) from ojs_job_done_default").await,
        1
    );
    let made: Option<String> = sqlx::query_scalar(
        "select ojs_job_done_partition(((now() - interval '40 days') at time zone 'UTC')::date)",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(made, None);
    prune_once(&app).await;
    assert_eq!(count(&app, "select count(*) from ojs_job_done").await, 0);
}

/// A database of the previous release (V14), holding jobs of every state, migrates in place:
/// every job reads the same afterwards, completed ones from ojs_job_done.
#[tokio::test]
async fn a_populated_database_of_the_previous_release_migrates_with_every_job_intact() {
    let db = TestDb::empty().await;
    let mut conn = sqlx::PgConnection::connect_with(&db.options).await.unwrap();
    ojsd_migrate::run_to(&mut conn, 14).await.unwrap();
    sqlx::raw_sql(
        "insert into ojs_job (id, type, queue, args, meta, state, attempt, max_attempts, retry,
                              timeout_ms, created_at, enqueued_at, scheduled_at, started_at,
                              visible_until, reservation_ms, timeout_at, worker_id, next_retry_at,
                              completed_at, cancelled_at, discarded_at, dead_lettered_at, result,
                              error, errors, unique_key, unique_policy, tags)
         select gen_random_uuid(), 'upgrade.test', 'q' || (g % 3), json_build_array(g),
                json_build_object('n', g), s::ojs_job_state,
                case when s in ('available', 'scheduled', 'pending') then 0 else 1 end, 3,
                '{\"max_attempts\": 3}', 60000, t - interval '1 hour',
                case when s <> 'scheduled' and s <> 'pending' then t - interval '30 minutes' end,
                case when s = 'scheduled' then now() + interval '1 day' end,
                case when s in ('active', 'completed', 'discarded', 'cancelled', 'retryable')
                     then t - interval '1 minute' end,
                case when s = 'active' then now() + interval '1 hour' end,
                case when s = 'active' then 3600000 end,
                case when s = 'active' then now() + interval '1 hour' end,
                case when s = 'active' then 'w-' || g end,
                case when s = 'retryable' then now() + interval '1 minute' end,
                case when s in ('completed', 'discarded') then t end,
                case when s = 'cancelled' then t end,
                case when s = 'discarded' then t end,
                case when s = 'discarded' and g % 2 = 0 then t end,
                case when s = 'completed' then json_build_object('ok', g) end,
                case when s = 'discarded' then '{\"message\": \"no\"}'::jsonb end,
                case when s = 'discarded' then '[{\"message\": \"no\"}]'::jsonb else '[]' end,
                case when g % 5 = 0 then 'k' || g end,
                case when g % 5 = 0 then '{\"key\": [\"type\"]}'::json end,
                array['t' || g]
           from generate_series(1, 400) g,
                lateral (select (array['scheduled', 'available', 'pending', 'active', 'retryable',
                                       'completed', 'cancelled', 'discarded'])[g % 8 + 1] as s,
                                -- Completed over the last twelve days: several partitions.
                                now() - (g % 12) * interval '1 day' as t) x",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let before: Vec<(uuid::Uuid, Value)> =
        sqlx::query_as("select id, to_jsonb(j) from ojs_job j order by id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(before.len(), 400);

    let report = ojsd_migrate::run(&mut conn).await.unwrap();
    assert!(
        report.applied.iter().any(|m| m == "V15__job_history"),
        "{report:?}"
    );
    let after: Vec<(uuid::Uuid, Value)> =
        // Less the columns later migrations add (V20's rate-limit key, V29's lease: null for
        // these jobs, or the lease V29 gives an active one; V30's phase, checked below, and
        // in_flight; V32's result_awaited).
        sqlx::query_as(
            "select id, to_jsonb(j) - 'rate_key' - 'rate_held' - 'lease_id' - 'phase' - 'in_flight'
                      - 'result_awaited' - 'durable'
               from ojs_job_all j order by id",
        )
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(after, before, "every job, column for column");
    let off_phase: i64 = sqlx::query_scalar(
        "select count(*) from ojs_job_all
          where phase::text <> case when state in ('scheduled', 'available', 'pending', 'retryable')
                                    then state::text else 'taken' end",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(off_phase, 0, "every job's phase follows its state");
    let (live_completed, done, in_default): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from ojs_job where state = 'completed'),
                (select count(*) from ojs_job_done),
                (select count(*) from ojs_job_done_default)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((live_completed, done, in_default), (0, 50, 0));
    // The server reads them through its own statements too.
    for (id, row) in before.iter().filter(|(_, r)| r["state"] == "completed") {
        let job = ojsd::store::job::get(&mut conn, ojsd::job::JobId(*id))
            .await
            .unwrap()
            .expect("a completed job is found");
        assert_eq!(job.state, ojsd::job::JobState::Completed);
        assert_eq!(row["result"]["ok"], json!(row["args"][0]));
    }
    conn.close().await.unwrap();
}

/// The ACK statement's two forms, called directly: when every queue keeps its completed jobs
/// (no second delete in the plan) and when some queue forgets them. Each completes only the
/// jobs its worker holds, answers each as the ACK left it, and writes one event row.
#[tokio::test]
async fn an_ack_group_completes_what_its_workers_hold_whether_or_not_a_queue_forgets() {
    use ojsd::job::{JobId, JobState};
    use ojsd::store::job::{CompleteParams, DeleteOnAck, complete_many};

    let app = TestApp::spawn().await;
    for (queues, keep) in [(["k1", "k2"], true), (["k3", "gone"], false)] {
        let mut ids = Vec::new();
        for queue in queues {
            for _ in 0..2 {
                let id = app.push_id(job("a.b", queue)).await;
                app.fetch_one(queue, "w").await;
                ids.push(uuid::Uuid::parse_str(&id).unwrap());
            }
        }
        let acks: Vec<CompleteParams<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| CompleteParams {
                id: JobId(*id),
                // The last job is held by "w", not "other": its ACK matches nothing.
                worker_id: Some(if i == 3 { "other" } else { "w" }),
                result: Some(r#"{"ok":true}"#),
            })
            .collect();
        let forget = if keep {
            DeleteOnAck::nothing()
        } else {
            DeleteOnAck {
                queues: vec!["gone".to_owned()],
                ..DeleteOnAck::default()
            }
        };
        assert_eq!(forget.keeps_all(), keep);
        let mut done = complete_many(app.pool(), &acks, &forget).await.unwrap();
        done.sort_by_key(|j| j.id);
        let mut expected: Vec<JobId> = ids[..3].iter().map(|id| JobId(*id)).collect();
        expected.sort();
        assert_eq!(done.iter().map(|j| j.id).collect::<Vec<_>>(), expected);
        for job in &done {
            assert_eq!(job.state, JobState::Completed);
            assert!(job.completed_at.is_some());
            assert_eq!(
                job.result.as_ref().map(|r| r.0.get()),
                Some(r#"{"ok":true}"#)
            );
        }
        let kept: i64 = sqlx::query_scalar("select count(*) from ojs_job_done where id = any($1)")
            .bind(&ids)
            .fetch_one(app.pool())
            .await
            .unwrap();
        // The third job is of the forgetting queue in the second round: deleted, not kept.
        assert_eq!(kept, if keep { 3 } else { 2 });
        let still_active: String =
            sqlx::query_scalar("select state::text from ojs_job where id = $1")
                .bind(ids[3])
                .fetch_one(app.pool())
                .await
                .unwrap();
        assert_eq!(still_active, "active");
        let events: Vec<Vec<uuid::Uuid>> = sqlx::query_scalar(
            "select job_ids from ojs_event where type = 'job.completed' and job_ids && $1 order by seq",
        )
        .bind(&ids)
        .fetch_all(app.pool())
        .await
        .unwrap();
        let mut listed: Vec<uuid::Uuid> = events.into_iter().flatten().collect();
        listed.sort();
        let mut want = ids[..3].to_vec();
        want.sort();
        assert_eq!(listed, want, "one job.completed per completed job");
    }
}
