//! Tenants as the jobs name them (`ojs_job.tenant`, migration V24): a tenant exists while some
//! retained job (waiting, running or finished) carries its id. Read through the partial indexes
//! `ojs_job_tenant_idx` and `ojs_job_done_tenant_idx`, which hold only jobs with a tenant.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

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
        select t.tenant as "tenant!", t.first_seen_at, t.queues as "queues!",
               t.workers as "workers!", t.scheduled as "scheduled!", t.available as "available!",
               t.pending as "pending!", t.active as "active!", t.retryable as "retryable!",
               t.completed as "completed!", t.discarded as "discarded!",
               t.cancelled as "cancelled!", t.completed_24h as "completed_24h!",
               t.failed_24h as "failed_24h!", count(*) over () as "total!"
          from tenants t
         order by t.tenant
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
    db: &sqlx::PgPool,
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
    if !subjects.workflows.is_empty() {
        let rows = sqlx::query!(
            r#"select id, tenant as "tenant!" from ojs_workflow
                where id = any($1::uuid[]) and tenant is not null"#,
            &subjects.workflows
        )
        .fetch_all(db)
        .await?;
        owners.workflows = rows.into_iter().map(|r| (r.id, r.tenant)).collect();
    }
    if !subjects.workers.is_empty() {
        let rows = sqlx::query!(
            r#"select id, tenant as "tenant!" from ojs_worker
                where id = any($1::text[]) and tenant is not null"#,
            &subjects.workers
        )
        .fetch_all(db)
        .await?;
        owners.workers = rows.into_iter().map(|r| (r.id, r.tenant)).collect();
    }
    if !subjects.crons.is_empty() {
        let rows = sqlx::query!(
            r#"select name, tenant as "tenant!" from ojs_cron
                where name = any($1::text[]) and tenant is not null"#,
            &subjects.crons
        )
        .fetch_all(db)
        .await?;
        owners.crons = rows.into_iter().map(|r| (r.name, r.tenant)).collect();
    }
    Ok(owners)
}
