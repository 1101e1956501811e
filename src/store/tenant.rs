//! Tenants as the jobs name them (`ojs_job.tenant`, migration V24): a tenant exists while some
//! retained job (waiting, running or finished) carries its id, or while an operator's
//! configuration (`ojs_tenant`, its limits: migration V28) names it. Read through the partial indexes
//! `ojs_job_tenant_idx` and `ojs_job_done_tenant_idx`, which hold only jobs with a tenant.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::rate_limit::Window;
use crate::tenant::Limits;

/// One tenant with its jobs' counts.
#[derive(Debug, Clone, Default)]
pub struct TenantRow {
    pub tenant: String,
    /// When its oldest retained job was created.
    pub first_seen_at: Option<DateTime<Utc>>,
    /// Queues holding its jobs.
    pub queues: i64,
    /// Workers running its jobs now.
    pub workers: i64,
    pub scheduled: i64,
    pub available: i64,
    pub pending: i64,
    pub active: i64,
    pub retryable: i64,
    pub completed: i64,
    pub discarded: i64,
    pub cancelled: i64,
    /// Completed in the last 24 hours.
    pub completed_24h: i64,
    /// Discarded (failed for good) in the last 24 hours.
    pub failed_24h: i64,
}

impl TenantRow {
    /// Every retained job of the tenant.
    pub fn total_jobs(&self) -> i64 {
        self.scheduled
            + self.available
            + self.pending
            + self.active
            + self.retryable
            + self.completed
            + self.discarded
            + self.cancelled
    }
}

/// Tenants by id, `limit` from `offset`, with how many there are.
pub async fn list(
    db: impl PgExecutor<'_>,
    limit: i64,
    offset: i64,
) -> Result<(Vec<TenantRow>, i64), sqlx::Error> {
    counts(db, None, limit, offset).await
}

/// One tenant (all counts zero when no retained job names it).
pub async fn get(db: impl PgExecutor<'_>, tenant: &str) -> Result<TenantRow, sqlx::Error> {
    let (rows, _) = counts(db, Some(tenant), 1, 0).await?;
    Ok(rows.into_iter().next().unwrap_or_else(|| TenantRow {
        tenant: tenant.to_owned(),
        ..TenantRow::default()
    }))
}

/// The tenants' counts (only `only`'s when given), by id.
async fn counts(
    db: impl PgExecutor<'_>,
    only: Option<&str>,
    limit: i64,
    offset: i64,
) -> Result<(Vec<TenantRow>, i64), sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        with tenants as (
            select j.tenant,
                   min(j.created_at) as first_seen_at,
                   count(distinct j.queue) as queues,
                   count(distinct j.worker_id) filter (where j.state = 'active') as workers,
                   count(*) filter (where j.state = 'scheduled') as scheduled,
                   count(*) filter (where j.state = 'available') as available,
                   count(*) filter (where j.state = 'pending') as pending,
                   count(*) filter (where j.state = 'active') as active,
                   count(*) filter (where j.state = 'retryable') as retryable,
                   count(*) filter (where j.state = 'completed') as completed,
                   count(*) filter (where j.state = 'discarded') as discarded,
                   count(*) filter (where j.state = 'cancelled') as cancelled,
                   count(*) filter (where j.state = 'completed'
                                      and j.completed_at > now() - interval '24 hours') as completed_24h,
                   count(*) filter (where j.state = 'discarded'
                                      and j.discarded_at > now() - interval '24 hours') as failed_24h
              from ojs_job_all j
             where j.tenant <> '' and ($3::text is null or j.tenant = $3)
             group by j.tenant
        )
        -- And the tenants an operator configured (migration V28), with no jobs yet.
        select coalesce(t.tenant, c.id) as "tenant!",
               coalesce(t.first_seen_at, c.created_at) as first_seen_at,
               coalesce(t.queues, 0) as "queues!", coalesce(t.workers, 0) as "workers!",
               coalesce(t.scheduled, 0) as "scheduled!", coalesce(t.available, 0) as "available!",
               coalesce(t.pending, 0) as "pending!", coalesce(t.active, 0) as "active!",
               coalesce(t.retryable, 0) as "retryable!", coalesce(t.completed, 0) as "completed!",
               coalesce(t.discarded, 0) as "discarded!", coalesce(t.cancelled, 0) as "cancelled!",
               coalesce(t.completed_24h, 0) as "completed_24h!",
               coalesce(t.failed_24h, 0) as "failed_24h!", count(*) over () as "total!"
          from tenants t
          full join (select x.id, x.created_at from ojs_tenant x
                      where $3::text is null or x.id = $3) c on c.id = t.tenant
         order by 1
         limit $1 offset $2
        "#,
        limit,
        offset,
        only,
    )
    .fetch_all(db)
    .await?;
    let total = rows.first().map_or(0, |r| r.total);
    let tenants = rows
        .into_iter()
        .map(|r| TenantRow {
            tenant: r.tenant,
            first_seen_at: r.first_seen_at,
            queues: r.queues,
            workers: r.workers,
            scheduled: r.scheduled,
            available: r.available,
            pending: r.pending,
            active: r.active,
            retryable: r.retryable,
            completed: r.completed,
            discarded: r.discarded,
            cancelled: r.cancelled,
            completed_24h: r.completed_24h,
            failed_24h: r.failed_24h,
        })
        .collect();
    Ok((tenants, total))
}

/// Something a request names by id, whose tenant decides who may see it.
#[derive(Debug, Clone)]
pub enum Owned {
    Job(Uuid),
    Workflow(Uuid),
    Worker(String),
    Cron(String),
}

/// The tenant `resource` belongs to: `None` when it does not exist, `Some(None)` when it
/// belongs to no tenant. One primary-key read.
pub async fn owner(
    db: impl PgExecutor<'_>,
    resource: &Owned,
) -> Result<Option<Option<String>>, sqlx::Error> {
    let row = match resource {
        // A tenant-fair queue's job without a tenant has '' (migration V8): no tenant.
        Owned::Job(id) => {
            sqlx::query_scalar!(
                "select nullif(tenant, '') from ojs_job_all where id = $1",
                id
            )
            .fetch_optional(db)
            .await?
        }
        Owned::Workflow(id) => {
            sqlx::query_scalar!("select tenant from ojs_workflow where id = $1", id)
                .fetch_optional(db)
                .await?
        }
        Owned::Worker(id) => {
            sqlx::query_scalar!("select tenant from ojs_worker where id = $1", id)
                .fetch_optional(db)
                .await?
        }
        Owned::Cron(name) => {
            sqlx::query_scalar!("select tenant from ojs_cron where name = $1", name)
                .fetch_optional(db)
                .await?
        }
    };
    Ok(row)
}

/// A job's queue and tenant.
#[derive(Debug, Clone)]
pub struct JobOwner {
    pub id: Uuid,
    pub queue: String,
    /// `None`: the job belongs to no tenant.
    pub tenant: Option<String>,
}

/// The queue and tenant of each of `ids` that exists.
pub async fn job_owners(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<JobOwner>, sqlx::Error> {
    sqlx::query_as!(
        JobOwner,
        r#"select id as "id!", queue as "queue!", nullif(tenant, '') as tenant
             from ojs_job_all where id = any($1::uuid[])"#,
        ids
    )
    .fetch_all(db)
    .await
}

/// What events are about, by kind of owner: the ids to look the owners up by.
#[derive(Debug, Clone, Default)]
pub struct EventSubjects {
    pub jobs: Vec<Uuid>,
    pub workflows: Vec<Uuid>,
    pub workers: Vec<String>,
    pub crons: Vec<String>,
}

/// The owners of [`EventSubjects`]: `(kind, id) → tenant` for every subject that exists and
/// belongs to a tenant (a subject absent here belongs to none, or is gone).
#[derive(Debug, Clone, Default)]
pub struct SubjectOwners {
    pub jobs: std::collections::HashMap<Uuid, String>,
    pub workflows: std::collections::HashMap<Uuid, String>,
    pub workers: std::collections::HashMap<String, String>,
    pub crons: std::collections::HashMap<String, String>,
}

/// Looks up the tenants of `subjects`: one read per kind that has any.
pub async fn subject_owners(
    db: impl crate::store::Pool<'_>,
    subjects: &EventSubjects,
) -> Result<SubjectOwners, sqlx::Error> {
    let mut owners = SubjectOwners::default();
    if !subjects.jobs.is_empty() {
        for owner in job_owners(db, &subjects.jobs).await? {
            if let Some(tenant) = owner.tenant {
                owners.jobs.insert(owner.id, tenant);
            }
        }
    }
    if !(subjects.workflows.is_empty() && subjects.workers.is_empty() && subjects.crons.is_empty())
    {
        let rows = sqlx::query!(
            r#"
            select 'workflow' as "kind!", id::text as "id!", tenant as "tenant!" from ojs_workflow
             where id = any($1::uuid[]) and tenant is not null
            union all
            select 'worker', id, tenant from ojs_worker
             where id = any($2::text[]) and tenant is not null
            union all
            select 'cron', name, tenant from ojs_cron
             where name = any($3::text[]) and tenant is not null
            "#,
            &subjects.workflows,
            &subjects.workers,
            &subjects.crons,
        )
        .fetch_all(db)
        .await?;
        for r in rows {
            match r.kind.as_str() {
                "workflow" => {
                    if let Ok(id) = r.id.parse() {
                        owners.workflows.insert(id, r.tenant);
                    }
                }
                "worker" => {
                    owners.workers.insert(r.id, r.tenant);
                }
                _ => {
                    owners.crons.insert(r.id, r.tenant);
                }
            }
        }
    }
    Ok(owners)
}

/// A configured tenant (`ojs_tenant`, migration V28).
#[derive(Debug, Clone)]
pub struct TenantConfig {
    pub id: String,
    pub limits: Limits,
    /// Why the limits were last changed.
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

struct ConfigRow {
    id: String,
    max_concurrency: Option<i32>,
    max_enqueue_rate: Option<i32>,
    enqueue_period_ms: Option<i64>,
    max_queue_depth: Option<i32>,
    reason: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ConfigRow> for TenantConfig {
    fn from(r: ConfigRow) -> TenantConfig {
        TenantConfig {
            id: r.id,
            limits: Limits {
                max_concurrency: r.max_concurrency,
                max_enqueue_rate: r
                    .max_enqueue_rate
                    .zip(r.enqueue_period_ms)
                    .map(|(limit, period_ms)| Window { limit, period_ms }),
                max_queue_depth: r.max_queue_depth,
            },
            reason: r.reason,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Every configured tenant, by id.
pub async fn configured(db: impl PgExecutor<'_>) -> Result<Vec<TenantConfig>, sqlx::Error> {
    let rows = sqlx::query_as!(
        ConfigRow,
        r#"
        select id, max_concurrency, max_enqueue_rate, enqueue_period_ms, max_queue_depth, reason,
               created_at, updated_at
          from ojs_tenant order by id
        "#
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(TenantConfig::from).collect())
}

/// The configuration of `tenant`, if it has one.
pub async fn config(
    db: impl PgExecutor<'_>,
    tenant: &str,
) -> Result<Option<TenantConfig>, sqlx::Error> {
    let row = sqlx::query_as!(
        ConfigRow,
        r#"
        select id, max_concurrency, max_enqueue_rate, enqueue_period_ms, max_queue_depth, reason,
               created_at, updated_at
          from ojs_tenant where id = $1
        "#,
        tenant
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(TenantConfig::from))
}

/// [`config`], locked until the transaction ends (a change of limits merges over it).
pub async fn config_locked(
    db: impl PgExecutor<'_>,
    tenant: &str,
) -> Result<Option<TenantConfig>, sqlx::Error> {
    let row = sqlx::query_as!(
        ConfigRow,
        r#"
        select id, max_concurrency, max_enqueue_rate, enqueue_period_ms, max_queue_depth, reason,
               created_at, updated_at
          from ojs_tenant where id = $1 for update
        "#,
        tenant
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(TenantConfig::from))
}

/// Sets `tenant`'s limits (a new row, or the row's limits replaced), bumps the configuration
/// generation (every replica's enqueues apply them from their next statement on) and writes
/// `tenant.created` or `tenant.updated`, in one statement. Returns the row and whether it is
/// new.
pub async fn set(
    db: impl PgExecutor<'_>,
    tenant: &str,
    limits: &Limits,
    reason: Option<&str>,
) -> Result<(TenantConfig, bool), sqlx::Error> {
    let (rate, period) = limits
        .max_enqueue_rate
        .map(|w| (w.limit, w.period_ms))
        .unzip();
    let row = sqlx::query!(
        r#"
        with saved as (
            insert into ojs_tenant as t (id, max_concurrency, max_enqueue_rate,
                                         enqueue_period_ms, max_queue_depth, reason)
            values ($1, $2, $3, $4, $5, $6)
            on conflict on constraint ojs_tenant_pkey do update
               set max_concurrency = excluded.max_concurrency,
                   max_enqueue_rate = excluded.max_enqueue_rate,
                   enqueue_period_ms = excluded.enqueue_period_ms,
                   max_queue_depth = excluded.max_queue_depth,
                   reason = excluded.reason,
                   updated_at = now()
            returning t.*, (t.xmax = 0) as created
        ),
        generation as (
            update ojs_queue_config_generation set generation = generation + 1
        ),
        event as (
            insert into ojs_event (type, subject, data)
            select case when s.created then 'tenant.created' else 'tenant.updated' end, s.id,
                   jsonb_build_object('tenant_id', s.id, 'reason', s.reason,
                                      'limits', jsonb_build_object(
                                          'max_concurrency', s.max_concurrency,
                                          'max_enqueue_rate', s.max_enqueue_rate,
                                          'enqueue_period_ms', s.enqueue_period_ms,
                                          'max_queue_depth', s.max_queue_depth))
              from saved s
        )
        select id as "id!", max_concurrency, max_enqueue_rate, enqueue_period_ms,
               max_queue_depth, reason, created_at as "created_at!",
               updated_at as "updated_at!", created as "created!"
          from saved
        "#,
        tenant,
        limits.max_concurrency,
        rate,
        period,
        limits.max_queue_depth,
        reason,
    )
    .fetch_one(db)
    .await?;
    let config = TenantConfig::from(ConfigRow {
        id: row.id,
        max_concurrency: row.max_concurrency,
        max_enqueue_rate: row.max_enqueue_rate,
        enqueue_period_ms: row.enqueue_period_ms,
        max_queue_depth: row.max_queue_depth,
        reason: row.reason,
        created_at: row.created_at,
        updated_at: row.updated_at,
    });
    Ok((config, row.created))
}

/// Removes `tenant`'s configuration (its limits with it), bumps the configuration generation
/// and writes `tenant.deleted`; returns it as it was.
pub async fn remove(
    db: impl PgExecutor<'_>,
    tenant: &str,
) -> Result<Option<TenantConfig>, sqlx::Error> {
    let row = sqlx::query_as!(
        ConfigRow,
        r#"
        with gone as (
            delete from ojs_tenant t where t.id = $1 returning t.*
        ),
        generation as (
            update ojs_queue_config_generation set generation = generation + 1
             where exists (select from gone)
        ),
        event as (
            insert into ojs_event (type, subject, data)
            select 'tenant.deleted', g.id, jsonb_build_object('tenant_id', g.id) from gone g
        )
        select id as "id!", max_concurrency, max_enqueue_rate, enqueue_period_ms,
               max_queue_depth, reason, created_at as "created_at!", updated_at as "updated_at!"
          from gone
        "#,
        tenant,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(TenantConfig::from))
}

/// Releases `tenant`'s held jobs as far as its concurrency allows (`ojs_tenant_release`);
/// returns the queues that gained jobs, with how many. `wake`: the database wakes their long
/// polls (an enqueue announces them itself). Committed without waiting for the WAL flush, as a
/// key's release is (`store::rate_limit::release`): a release lost in a crash leaves its jobs
/// held, and the releasers release them again.
pub async fn release(
    db: impl PgExecutor<'_>,
    tenant: &str,
    wake: bool,
) -> Result<Vec<(String, i32)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select r.released_queue as "queue!", r.released_jobs as "jobs!"
          from set_config('synchronous_commit', 'off', true),
               ojs_tenant_release($1, $2) r
        "#,
        tenant,
        wake,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.jobs)).collect())
}

/// Admits an enqueue's jobs by their tenants' enqueue rate and depth (`ojs_tenant_admit`), in
/// the enqueue's transaction, after its insert: `tenants` each once, with how many jobs each
/// enqueues. Past a limit the database refuses (SQLSTATE OJ005).
pub async fn admit(
    db: impl PgExecutor<'_>,
    tenants: &[String],
    jobs: &[i32],
) -> Result<(), sqlx::Error> {
    sqlx::query!("select ojs_tenant_admit($1, $2)", tenants, jobs)
        .execute(db)
        .await?;
    Ok(())
}

/// Up to `limit` tenants holding jobs back (an enqueue whose process died between its commit
/// and its release, a notification lost with its replica): one loose walk of
/// `ojs_job_tenant_held_idx`.
pub async fn holding(db: impl PgExecutor<'_>, limit: i64) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with recursive held(tenant) as (
            (select j.tenant from ojs_job j
              where j.phase = 'available' and j.rate_held = false
              order by j.tenant limit 1)
            union all
            select (select j.tenant from ojs_job j
                     where j.phase = 'available' and j.rate_held = false and j.tenant > h.tenant
                     order by j.tenant limit 1)
              from held h
             where h.tenant is not null
        )
        select h.tenant as "tenant!" from held h where h.tenant is not null limit $1
        "#,
        limit,
    )
    .fetch_all(db)
    .await
}

/// What a tenant uses of its limits now.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitUsage {
    /// Jobs in flight: released to workers and not yet claimed, or active.
    pub in_flight: i64,
    /// Jobs held back by its concurrency limit.
    pub held: i64,
    /// Jobs waiting (scheduled, available, pending, retryable).
    pub waiting: i64,
    /// Jobs enqueued within its enqueue-rate window.
    pub enqueued: i64,
}

/// `tenant`'s use of `limits` (the enqueue window's when it has a rate).
pub async fn usage(
    db: impl PgExecutor<'_>,
    tenant: &str,
    limits: &Limits,
) -> Result<LimitUsage, sqlx::Error> {
    let period_ms = limits.max_enqueue_rate.map(|w| w.period_ms);
    let row = sqlx::query!(
        r#"
        select (select count(*) from ojs_job j
                 where j.tenant = $1 and j.tenant <> ''
                   and j.in_flight and j.rate_held is not false) as "in_flight!",
               (select count(*) from ojs_job j
                 where j.tenant = $1 and j.phase = 'available' and j.rate_held = false) as "held!",
               (select count(*) from ojs_job j
                 where j.tenant = $1 and j.tenant <> '' and j.phase <> 'taken') as "waiting!",
               (select coalesce(sum(w.jobs), 0) from ojs_rate_window w
                 where $2::int8 is not null and w.key = 'tenant:' || $1
                   and w.started_at > now() - $2 * interval '1 millisecond')::int8 as "enqueued!"
        "#,
        tenant,
        period_ms,
    )
    .fetch_one(db)
    .await?;
    Ok(LimitUsage {
        in_flight: row.in_flight,
        held: row.held,
        waiting: row.waiting,
        enqueued: row.enqueued,
    })
}

/// Every configured tenant (test hook reset only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_tenant").execute(db).await?;
    Ok(())
}

/// Most tenants labelled in `/metrics`; beyond them (by id) they are summed under `_other`
/// (the multi-tenancy extension's cardinality bound).
pub const MAX_LABELLED_TENANTS: i64 = 1_000;

/// One configured tenant's figures for `/metrics`.
#[derive(Debug, Clone)]
pub struct TenantGauge {
    /// The tenant, or `_other` for those past [`MAX_LABELLED_TENANTS`].
    pub tenant: String,
    pub limits: Limits,
    pub in_flight: i64,
    pub held: i64,
    pub waiting: i64,
}

/// The figures of the configured tenants (the first [`MAX_LABELLED_TENANTS`] by id, the rest
/// summed as `_other`, without limits): one read of their live jobs.
pub async fn gauges(db: impl PgExecutor<'_>) -> Result<Vec<TenantGauge>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        with configured as (
            select t.*, row_number() over (order by t.id) <= $1 as labelled from ojs_tenant t
        )
        select case when c.labelled then c.id else '_other' end as "tenant!",
               max(c.max_concurrency) filter (where c.labelled) as max_concurrency,
               max(c.max_enqueue_rate) filter (where c.labelled) as max_enqueue_rate,
               max(c.enqueue_period_ms) filter (where c.labelled) as enqueue_period_ms,
               max(c.max_queue_depth) filter (where c.labelled) as max_queue_depth,
               count(j.id) filter (where j.state in ('available', 'active')
                                     and j.rate_held is not false) as "in_flight!",
               count(j.id) filter (where j.state = 'available' and j.rate_held = false) as "held!",
               count(j.id) filter (where j.state in ('scheduled', 'available', 'pending',
                                                     'retryable')) as "waiting!"
          from configured c
          -- Through ojs_job_tenant_idx, waiting and in-flight jobs only.
          left join ojs_job j on j.tenant = c.id and j.tenant <> ''
                             and (j.phase <> 'taken' or j.in_flight)
         group by 1
         order by 1
        "#,
        MAX_LABELLED_TENANTS,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| TenantGauge {
            tenant: r.tenant,
            limits: Limits {
                max_concurrency: r.max_concurrency,
                max_enqueue_rate: r
                    .max_enqueue_rate
                    .zip(r.enqueue_period_ms)
                    .map(|(limit, period_ms)| Window { limit, period_ms }),
                max_queue_depth: r.max_queue_depth,
            },
            in_flight: r.in_flight,
            held: r.held,
            waiting: r.waiting,
        })
        .collect())
}
