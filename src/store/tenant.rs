//! Tenants as the jobs name them (`ojs_job.tenant`, migration V24): a tenant exists while some
//! retained job (waiting, running or finished) carries its id. Read through the partial indexes
//! `ojs_job_tenant_idx` and `ojs_job_done_tenant_idx`, which hold only jobs with a tenant.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

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
