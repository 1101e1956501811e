//! Statements on `ojs_cron` (the entries) and `ojs_cron_run` (the run ledger), migration V14.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::JobState;

/// A stored entry.
#[derive(Debug, Clone)]
pub struct CronRow {
    pub name: String,
    pub expression: String,
    pub timezone: String,
    pub overlap_policy: String,
    pub enabled: bool,
    pub description: Option<String>,
    /// The job template (JSON object text).
    pub job_template: String,
    pub next_run_at: Option<DateTime<Utc>>,
    pub next_local: Option<NaiveDateTime>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub run_count: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An entry to write (register, re-register or change).
#[derive(Debug, Clone)]
pub struct NewCron<'a> {
    pub name: &'a str,
    pub expression: &'a str,
    pub timezone: &'a str,
    pub overlap_policy: &'a str,
    pub enabled: bool,
    pub description: Option<&'a str>,
    pub job_template: &'a str,
    /// The first occurrence counted from now (`None` when disabled or never).
    pub next: Option<(DateTime<Utc>, NaiveDateTime)>,
    /// The tenant registering it: an entry of another tenant (or of none) of that name is
    /// left as it was.
    pub tenant: Option<&'a str>,
}

/// Registers an entry, or updates the one of that name: returns it and whether it is new.
///
/// An entry whose schedule (expression and zone) is unchanged and that stays enabled keeps its
/// next occurrence, so registering the same entries at every start of an application neither
/// skips nor repeats an occurrence. Registering an identical entry changes nothing, not even
/// `updated_at`.
///
/// `None` when the name is an entry of a tenant other than `c.tenant` (or of none), which is
/// left as it was. A request acting as no tenant may change any entry; the entry then belongs
/// to no tenant.
pub async fn upsert(
    db: impl PgExecutor<'_>,
    c: &NewCron<'_>,
) -> Result<Option<(CronRow, bool)>, sqlx::Error> {
    let (next_run_at, next_local) = c.next.unzip();
    let row = sqlx::query!(
        r#"
        insert into ojs_cron as c (name, expression, timezone, overlap_policy, enabled,
                                   description, job_template, next_run_at, next_local, tenant)
        values ($1, $2, $3, $4, $5, $6, $7::text::json, $8, $9, $10)
        on conflict (name) do update
           set expression = excluded.expression,
               timezone = excluded.timezone,
               overlap_policy = excluded.overlap_policy,
               enabled = excluded.enabled,
               description = excluded.description,
               job_template = excluded.job_template,
               next_run_at = case when c.enabled and excluded.enabled
                                        and c.expression = excluded.expression
                                        and c.timezone = excluded.timezone
                                   then c.next_run_at else excluded.next_run_at end,
               next_local = case when c.enabled and excluded.enabled
                                       and c.expression = excluded.expression
                                       and c.timezone = excluded.timezone
                                  then c.next_local else excluded.next_local end,
               updated_at = case when (c.expression, c.timezone, c.overlap_policy, c.enabled,
                                       c.description, c.job_template::text)
                                      is distinct from
                                      (excluded.expression, excluded.timezone,
                                       excluded.overlap_policy, excluded.enabled,
                                       excluded.description, excluded.job_template::text)
                                 then now() else c.updated_at end,
               tenant = excluded.tenant
         where $10::text is null or c.tenant = $10
        returning name, expression, timezone, overlap_policy, enabled, description,
                  job_template::text as "job_template!", next_run_at, next_local, last_run_at,
                  run_count, created_at, updated_at, (xmax = 0) as "created!"
        "#,
        c.name,
        c.expression,
        c.timezone,
        c.overlap_policy,
        c.enabled,
        c.description,
        c.job_template,
        next_run_at,
        next_local,
        c.tenant,
    )
    .fetch_optional(db)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some((
        CronRow {
            name: row.name,
            expression: row.expression,
            timezone: row.timezone,
            overlap_policy: row.overlap_policy,
            enabled: row.enabled,
            description: row.description,
            job_template: row.job_template,
            next_run_at: row.next_run_at,
            next_local: row.next_local,
            last_run_at: row.last_run_at,
            run_count: row.run_count,
            created_at: row.created_at,
            updated_at: row.updated_at,
        },
        row.created,
    )))
}

/// The entry `name`; with `lock`, locked until the transaction ends (a change or a firing).
pub async fn get(
    db: impl PgExecutor<'_>,
    name: &str,
    lock: bool,
) -> Result<Option<CronRow>, sqlx::Error> {
    if lock {
        sqlx::query_as!(
            CronRow,
            r#"
            select name, expression, timezone, overlap_policy, enabled, description,
                   job_template::text as "job_template!", next_run_at, next_local, last_run_at,
                   run_count, created_at, updated_at
              from ojs_cron where name = $1
               for update
            "#,
            name,
        )
        .fetch_optional(db)
        .await
    } else {
        sqlx::query_as!(
            CronRow,
            r#"
            select name, expression, timezone, overlap_policy, enabled, description,
                   job_template::text as "job_template!", next_run_at, next_local, last_run_at,
                   run_count, created_at, updated_at
              from ojs_cron where name = $1
            "#,
            name,
        )
        .fetch_optional(db)
        .await
    }
}

/// A page of entries by name (`offset`, `limit`), optionally only the enabled (or disabled)
/// ones.
pub async fn list(
    db: impl PgExecutor<'_>,
    enabled: Option<bool>,
    tenant: Option<&str>,
    offset: i64,
    limit: i64,
) -> Result<Vec<CronRow>, sqlx::Error> {
    sqlx::query_as!(
        CronRow,
        r#"
        select name, expression, timezone, overlap_policy, enabled, description,
               job_template::text as "job_template!", next_run_at, next_local, last_run_at,
               run_count, created_at, updated_at
          from ojs_cron
         where ($1::boolean is null or enabled = $1) and ($4::text is null or tenant = $4)
         order by name
         offset $2
         limit $3
        "#,
        enabled,
        offset,
        limit,
        tenant,
    )
    .fetch_all(db)
    .await
}

/// How many entries there are (optionally only the enabled, or disabled, ones; only
/// `tenant`'s when given).
pub async fn count(
    db: impl PgExecutor<'_>,
    enabled: Option<bool>,
    tenant: Option<&str>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from ojs_cron
            where ($1::boolean is null or enabled = $1) and ($2::text is null or tenant = $2)"#,
        enabled,
        tenant,
    )
    .fetch_one(db)
    .await
}

/// Deletes the entry `name`: returns it as it was. Its runs' jobs and ledger rows stay.
pub async fn delete(db: impl PgExecutor<'_>, name: &str) -> Result<Option<CronRow>, sqlx::Error> {
    sqlx::query_as!(
        CronRow,
        r#"
        delete from ojs_cron where name = $1
        returning name, expression, timezone, overlap_policy, enabled, description,
                  job_template::text as "job_template!", next_run_at, next_local, last_run_at,
                  run_count, created_at, updated_at
        "#,
        name,
    )
    .fetch_optional(db)
    .await
}

/// Names of the enabled entries due at `now`, earliest first (at most `limit`).
pub async fn due(
    db: impl PgExecutor<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select name from ojs_cron
         where enabled and next_run_at is not null and next_run_at <= $1
         order by next_run_at
         limit $2
        "#,
        now,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Locks the entry `name` if it is still due at `now` and no other firer holds it.
pub async fn lock_due(
    db: impl PgExecutor<'_>,
    name: &str,
    now: DateTime<Utc>,
) -> Result<Option<CronRow>, sqlx::Error> {
    sqlx::query_as!(
        CronRow,
        r#"
        select name, expression, timezone, overlap_policy, enabled, description,
               job_template::text as "job_template!", next_run_at, next_local, last_run_at,
               run_count, created_at, updated_at
          from ojs_cron
         where name = $1 and enabled and next_run_at is not null and next_run_at <= $2
           for update skip locked
        "#,
        name,
        now,
    )
    .fetch_optional(db)
    .await
}

/// Moves an entry to its next occurrence; `ran`: the occurrence `last_run_at` enqueued a job.
pub async fn advance(
    db: impl PgExecutor<'_>,
    name: &str,
    next: Option<(DateTime<Utc>, NaiveDateTime)>,
    ran: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    let (next_run_at, next_local) = next.unzip();
    sqlx::query!(
        r#"
        update ojs_cron
           set next_run_at = $2, next_local = $3,
               last_run_at = coalesce($4, last_run_at),
               run_count = run_count + ($4::timestamptz is not null)::int
         where name = $1
        "#,
        name,
        next_run_at,
        next_local,
        ran,
    )
    .fetch_optional(db)
    .await?;
    Ok(())
}

/// A row of the run ledger.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub cron_name: &'a str,
    pub scheduled_at: DateTime<Utc>,
    /// `None`: enqueued (`job_id` set); else skipped for this reason.
    pub skipped: Option<&'a str>,
    pub job_id: Option<Uuid>,
    pub missed: i64,
    pub error: Option<&'a serde_json::Value>,
    pub fired_at: DateTime<Utc>,
    /// Held `pending` until the earlier runs finish (overlap policy `enqueue`).
    pub held: bool,
}

/// Whether the ledger has a row for this occurrence of the entry.
pub async fn run_exists(
    db: impl PgExecutor<'_>,
    cron_name: &str,
    scheduled_at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select exists (select 1 from ojs_cron_run where cron_name = $1 and scheduled_at = $2) as "exists!""#,
        cron_name,
        scheduled_at,
    )
    .fetch_one(db)
    .await
}

/// Writes a ledger row. Its key refuses a second row for one occurrence (the statement fails,
/// and with it the transaction that would have enqueued a second job).
pub async fn insert_run(db: impl PgExecutor<'_>, r: &NewRun<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        insert into ojs_cron_run (cron_name, scheduled_at, outcome, reason, job_id, missed,
                                  error, fired_at, open, held)
        values ($1, $2, case when $3::text is null then 'enqueued' else 'skipped' end, $3, $4,
                $5, $6, $7, $3::text is null, $8)
        "#,
        r.cron_name,
        r.scheduled_at,
        r.skipped,
        r.job_id,
        r.missed,
        r.error,
        r.fired_at,
        r.held,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A run of an entry that may not have finished, with its job's state now.
#[derive(Debug, Clone)]
pub struct OpenRun {
    pub scheduled_at: DateTime<Utc>,
    pub job_id: Uuid,
    pub held: bool,
    /// `None`: the job is gone (pruned or deleted).
    pub state: Option<JobState>,
}

/// The entry's runs that may not have finished, oldest first, with their jobs' states (the
/// ledger rows are locked until the transaction ends).
pub async fn open_runs(
    db: impl PgExecutor<'_>,
    cron_name: &str,
) -> Result<Vec<OpenRun>, sqlx::Error> {
    sqlx::query_as!(
        OpenRun,
        r#"
        select r.scheduled_at, r.job_id as "job_id!", r.held, j.state as "state?: JobState"
          from ojs_cron_run r
          left join ojs_job j on j.id = r.job_id
         where r.cron_name = $1 and r.open
         order by r.scheduled_at
           for update of r
        "#,
        cron_name,
    )
    .fetch_all(db)
    .await
}

/// Marks runs finished (`open` false), or, with `released`, no longer held.
pub async fn settle_runs(
    db: impl PgExecutor<'_>,
    cron_name: &str,
    finished: &[DateTime<Utc>],
    released: &[DateTime<Utc>],
) -> Result<(), sqlx::Error> {
    if finished.is_empty() && released.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        r#"
        update ojs_cron_run
           set open = open and not (scheduled_at = any($2)),
               held = held and not (scheduled_at = any($2) or scheduled_at = any($3))
         where cron_name = $1 and (scheduled_at = any($2) or scheduled_at = any($3))
        "#,
        cron_name,
        finished,
        released,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Entries with runs held back (overlap policy `enqueue`).
pub async fn with_held_runs(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select distinct cron_name as "name!" from ojs_cron_run
         where open and held
         limit $1
        "#,
        limit,
    )
    .fetch_all(db)
    .await
}

/// The entry's latest ledger rows, newest first.
pub async fn recent_runs(
    db: impl PgExecutor<'_>,
    cron_name: &str,
    limit: i64,
) -> Result<Vec<RunRow>, sqlx::Error> {
    sqlx::query_as!(
        RunRow,
        r#"
        select scheduled_at, outcome, reason, job_id, missed, error, fired_at
          from ojs_cron_run
         where cron_name = $1
         order by scheduled_at desc
         limit $2
        "#,
        cron_name,
        limit,
    )
    .fetch_all(db)
    .await
}

/// A ledger row as the API shows it.
#[derive(Debug, Clone)]
pub struct RunRow {
    pub scheduled_at: DateTime<Utc>,
    pub outcome: String,
    pub reason: Option<String>,
    pub job_id: Option<Uuid>,
    pub missed: i64,
    pub error: Option<serde_json::Value>,
    pub fired_at: DateTime<Utc>,
}

/// Deletes at most `limit` ledger rows handled before `before`, except those of runs still
/// unfinished (a row marked open whose job has finished, or is gone, goes: its entry may have
/// been deleted, and nothing would settle it); returns how many.
pub async fn prune_runs(
    db: impl PgExecutor<'_>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        delete from ojs_cron_run r
         using (select o.cron_name, o.scheduled_at from ojs_cron_run o
                 where o.fired_at < $1
                   and (not o.open
                        or not exists (select 1 from ojs_job j
                                        where j.id = o.job_id
                                          and j.state not in ('completed', 'cancelled', 'discarded')))
                 order by o.fired_at
                 limit $2) old
         where r.cron_name = old.cron_name and r.scheduled_at = old.scheduled_at
        "#,
        before,
        limit,
    )
    .execute(db)
    .await?;
    Ok(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
}

/// Records a cron event (`cron.triggered`, `cron.skipped`) about entry `name`.
pub async fn insert_event(
    db: impl PgExecutor<'_>,
    kind: &str,
    name: &str,
    job: Option<(Uuid, &str, &str)>,
    data: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    let (job_id, queue, job_type) = match job {
        Some((id, queue, job_type)) => (Some(id), Some(queue), Some(job_type)),
        None => (None, None, None),
    };
    sqlx::query!(
        r#"
        insert into ojs_event (type, subject, job_id, queue, job_type, data)
        values ($1, $2, $3, $4, $5, $6)
        "#,
        kind,
        name,
        job_id,
        queue,
        job_type,
        data,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes every entry and ledger row (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_cron")
        .execute(&mut *db)
        .await?;
    sqlx::query!("delete from ojs_cron_run")
        .execute(&mut *db)
        .await?;
    Ok(())
}
