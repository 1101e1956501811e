//! Every SQL statement of the server, grouped by table.
//!
//! Each function is one statement and takes any executor, so the caller decides whether it runs
//! alone or inside a transaction. Time-dependent statements use the database clock (`now()`):
//! replicas never compare their own clocks. Maintenance statements take an optional `now` that
//! overrides it, so tests can move time without sleeping.
//!
//! # Write for the generic plan
//!
//! Every connection runs with `plan_cache_mode = force_generic_plan` (and `jit = off`; see
//! `app.rs`): a statement is planned once, blind to its parameters, and that plan serves every
//! execution. Write each statement so that its generic plan is the right one: literal state
//! predicates that match the partial indexes, a condition hidden from the planner when it
//! would pick the wrong index (`state::text = 'active'` in `job::transition`), sets of ids
//! read through arrays so their row estimate is right (`job::claim`), and a plan test for a new
//! hot statement. `migrations/README.md` ("Statements are planned once, generically") says
//! more.

pub mod admin;
pub mod api_key;
pub mod checkpoint;
pub mod counting;
pub mod cron;
pub mod dead_letter;
pub mod event;
pub mod hold;
pub mod job;
pub mod job_list;
pub mod leader;
pub mod locks;
pub mod pool;
pub mod progress;
pub mod queue;
pub mod rate_limit;
pub mod refusal;
pub mod result;
pub mod schema;
pub mod setting;
pub mod step;
pub mod tenant;
pub mod webhook;
pub mod worker;
pub mod workflow;

/// NOTIFY channel carrying the name of a queue that has new `available` jobs.
///
/// Enqueues do not notify in their own transaction: a transaction that notifies holds a global
/// lock from its commit until it ends, so notifying enqueues cannot share WAL flushes and
/// serialize on it. The process announces them afterwards, coalesced per queue
/// ([`crate::wakeup::Announcer`]). The rarer statements (promotion, requeue, activation) notify
/// in-statement, once per queue per statement, never once per job.
pub const JOB_AVAILABLE_CHANNEL: &str = "ojs_job_available";

/// NOTIFY channel of jobs enqueued from SQL (`ojs_enqueue()`, migration V21), sent when their
/// transaction commits: `queue type jobs scheduled`, one per queue and job type. The leader
/// counts them in the metrics; every replica forgets when the next job comes due.
pub const SQL_ENQUEUED_CHANNEL: &str = "ojs_job_enqueued";

/// NOTIFY channel of rate-limit keys that may have room (migration V20): the key. Every
/// replica's releaser then releases what the key allows (`ojs_rate_release`).
pub const RATE_KEY_CHANNEL: &str = "ojs_rate_key";

/// NOTIFY channel of tenants with a concurrency limit that may have room (migration V28): the
/// tenant id. Released by the same releaser (`ojs_tenant_release`).
pub const TENANT_CHANNEL: &str = "ojs_tenant";

/// `application_name` of every replica's listening connection (for operators: replicas find
/// each other's listeners in `ojs_listener`).
pub const LISTENER_APPLICATION_NAME: &str = "ojsd-listener";

/// The LIKE pattern of the values that start with `prefix`, whose backslashes, `%` and `_`
/// stand for themselves.
pub fn like_prefix(prefix: &str) -> String {
    format!(
        "{}%",
        prefix
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_")
    )
}

/// What the functions below that run several statements or open a transaction take: the
/// server's pool (`db::Db`, which runs each statement in a transaction of its own behind a
/// transaction-mode pooler) or a plain sqlx pool (tests, tools).
pub trait Pool<'a>:
    sqlx::Acquire<'a, Database = sqlx::Postgres> + sqlx::PgExecutor<'a> + Copy + Send
{
}

impl<'a, T> Pool<'a> for T where
    T: sqlx::Acquire<'a, Database = sqlx::Postgres> + sqlx::PgExecutor<'a> + Copy + Send
{
}

/// A transaction whose statements are planned for their values (`plan_cache_mode =
/// force_custom_plan`), for the few statements, such as listings with optional filters,
/// whose right plan depends on them (see "Write for the generic plan" above).
pub async fn planned_for_their_values<'a>(
    db: impl Pool<'a>,
) -> Result<sqlx::Transaction<'a, sqlx::Postgres>, sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("set local plan_cache_mode = force_custom_plan")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// The database clock: the one clock every replica goes by.
pub async fn now(
    db: impl sqlx::PgExecutor<'_>,
) -> Result<chrono::DateTime<chrono::Utc>, sqlx::Error> {
    sqlx::query_scalar!(r#"select now() as "now!""#)
        .fetch_one(db)
        .await
}

/// Runs the rest of the current transaction's statements on one process: no parallel workers.
/// For the counts of whole tables that monitoring reads: on a server with few cores, the workers
/// of a parallel scan would take every core from the job statements for the scan's duration.
pub async fn serial_reads(db: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query_scalar!(
        r#"select set_config('max_parallel_workers_per_gather', '0', true) as "set!""#
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// How long a listener's registration counts without being renewed (its pings renew it every
/// 2 s): a replica that died stops counting after this.
pub const LISTENER_FRESH_SECS: i32 = 10;

/// Whether another replica than `own` (an instance id) has a listening connection: one whose
/// registration in `ojs_listener` was renewed within [`LISTENER_FRESH_SECS`].
pub async fn other_listeners(
    db: impl sqlx::PgExecutor<'_>,
    own: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select exists (select 1 from ojs_listener
                        where instance_id <> $1
                          and seen_at > now() - make_interval(secs => $2)) as "any!"
        "#,
        own,
        f64::from(LISTENER_FRESH_SECS),
    )
    .fetch_one(db)
    .await
}

/// Registers (or renews) `instance`'s listening connection, backend `pid`, in `ojs_listener`;
/// with `prune`, also removes registrations not renewed for an hour.
pub async fn listening(
    db: impl sqlx::PgExecutor<'_>,
    instance: &str,
    pid: i32,
    prune: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        with pruned as (
            delete from ojs_listener
             where $3 and instance_id <> $1 and seen_at < now() - interval '1 hour'
        )
        insert into ojs_listener as l (instance_id, backend_pid)
        values ($1, $2)
        on conflict (instance_id) do update
           set backend_pid = excluded.backend_pid,
               started_at = case when l.backend_pid = excluded.backend_pid then l.started_at
                                 else now() end,
               seen_at = now()
        "#,
        instance,
        pid,
        prune,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Removes `instance`'s registration (its listener stopped).
pub async fn stopped_listening(
    db: impl sqlx::PgExecutor<'_>,
    instance: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_listener where instance_id = $1", instance)
        .execute(db)
        .await?;
    Ok(())
}

/// Notifies [`JOB_AVAILABLE_CHANNEL`] once with each of `payloads`: `"<queue> <sender>"`, so the
/// sending process can recognize (and skip) its own notifications, optionally followed by
/// `" <priority> <time_ms> <jobs>"`: where the new jobs start in the queue's dispatch order
/// ([`crate::wakeup::floors`]; `- -` when unknown) and how many there are. Statements that
/// notify in-statement send `"<queue>"` or `"<queue> - - - <jobs>"`; `migrations/README.md`
/// lists every form and sender.
pub async fn notify_available(
    db: impl sqlx::PgExecutor<'_>,
    payloads: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        select count(pg_notify('ojs_job_available', p)) as "notified!"
          from unnest($1::text[]) p
        "#,
        payloads,
    )
    .fetch_one(db)
    .await?;
    Ok(())
}
