//! The grouped write of single-job PUSHes: [`PushWriter`] flushes a group in one statement,
//! handing new jobs straight to parked FETCHes of their queue (written already active for
//! them) and giving back what a FETCH that went away can no longer take.

use super::prepare::admit_tenants;
use crate::broker::configs::Configs;
use crate::db::Db;
use crate::db::HotConnections;
use crate::error::{Error, Result};
use crate::hold::SystemHold;
use crate::job::envelope::NewJob;
use crate::job::{Job, JobState};
use crate::store;
use crate::store::job::{HandTo, Handoffs};
use crate::telemetry;
use crate::wakeup::waiters::{Taken, Waiters};
use std::sync::Arc;

/// [`insert_jobs`] in `tx`, then the admission of the jobs' tenants ([`admit_tenants`]).
pub(super) async fn insert_admitted(
    tx: &mut sqlx::PgConnection,
    jobs: &[NewJob],
    strict_queues: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    let rows = insert_jobs(&mut *tx, jobs, strict_queues).await?;
    admit_tenants(tx, jobs).await?;
    Ok(rows)
}

/// [`store::job::insert_many`] without hand-offs, counting the queues it created.
pub(in crate::broker) async fn insert_jobs(
    db: impl sqlx::PgExecutor<'_>,
    jobs: &[NewJob],
    strict_queues: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    insert_handing(db, jobs, strict_queues, Handoffs::default()).await
}

/// [`store::job::insert_many`], counting the queues it created.
pub(super) async fn insert_handing(
    db: impl sqlx::PgExecutor<'_>,
    jobs: &[NewJob],
    strict_queues: bool,
    handoffs: Handoffs<'_>,
) -> Result<Vec<Job>, sqlx::Error> {
    let (jobs, queues_created) = store::job::insert_many(db, jobs, strict_queues, handoffs).await?;
    telemetry::queues_created(queues_created);
    Ok(jobs)
}

/// Writes groups of single-job PUSH requests, handing new jobs to FETCHes parked on their
/// queues where it can.
pub(super) struct PushWriter {
    pub(super) db: Db,
    /// Where the group's statement runs.
    pub(super) hot: HotConnections,
    pub(super) strict_queues: bool,
    pub(super) configs: Arc<Configs>,
    pub(super) waiters: Arc<Waiters>,
    pub(super) default_visibility_timeout_ms: i64,
    /// Maintenance mode: nothing is handed to parked FETCHes while it is in force.
    pub(super) hold: SystemHold,
}

/// A parked FETCH taken for jobs of a group, and which jobs (by index) are written for it.
pub(super) struct Handing {
    taken: Taken,
    queue: String,
    jobs: Vec<usize>,
}

impl PushWriter {
    /// Writes a group of single-job PUSH requests in one statement. When that fails (a
    /// client-chosen id taken, or two requests naming the same id), each job is written alone,
    /// so each request gets the outcome it would have had by itself (and no job of the group is
    /// handed off).
    pub(super) async fn flush(self: Arc<Self>, jobs: Vec<NewJob>) -> Vec<Result<Job>> {
        let handing = self.take_waiters(&jobs).await;
        let mut to: Vec<Option<HandTo<'_>>> = vec![None; jobs.len()];
        for h in &handing {
            for &i in &h.jobs {
                to[i] = Some(HandTo {
                    worker_id: h.taken.target.worker_id.as_deref(),
                    visibility_timeout_ms: h.taken.target.visibility_timeout_ms,
                    pool: h.taken.target.pool.as_deref(),
                });
            }
        }
        let handoffs = Handoffs {
            to: if handing.is_empty() { &[] } else { &to },
            default_visibility_timeout_ms: self.default_visibility_timeout_ms,
        };
        let written = match self.hot.acquire().await {
            Ok(mut conn) => {
                let written = insert_handing(&mut *conn, &jobs, self.strict_queues, handoffs).await;
                conn.settle(written).await
            }
            Err(e) => Err(e),
        };
        let failed = match written {
            Ok(rows) if rows.len() == jobs.len() => {
                self.deliver(handing, &rows).await;
                return rows.into_iter().map(Ok).collect();
            }
            Ok(_) => Error::Database(sqlx::Error::RowNotFound),
            Err(e) => e.into(),
        };
        for h in handing {
            h.taken.poll();
        }
        if jobs.len() == 1 {
            return vec![Err(failed)];
        }
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let written =
                insert_jobs(&self.db, std::slice::from_ref(&job), self.strict_queues).await;
            out.push(match written {
                Ok(mut rows) if rows.len() == 1 => Ok(rows.remove(0)),
                Ok(_) => Err(Error::Database(sqlx::Error::RowNotFound)),
                Err(e) => Err(e.into()),
            });
        }
        out
    }

    /// Takes parked FETCHes for the jobs of a group that can be handed off: one FETCH per job
    /// while FETCHes are parked on its queue, then more jobs for the FETCHes taken, up to their
    /// room. A job can be handed off when it will be available at once (not scheduled, not
    /// pending, no unique policy) on a queue whose dispatch is not limited or tenant-fair.
    async fn take_waiters(&self, jobs: &[NewJob]) -> Vec<Handing> {
        let mut handing: Vec<Handing> = Vec::new();
        if !jobs.iter().any(|j| self.waiters.any_parked(&j.queue)) || self.hold.is_on() {
            return handing;
        }
        let Ok(configs) = self.configs.current(&self.db).await else {
            return handing;
        };
        for (i, job) in jobs.iter().enumerate() {
            if job.scheduled_at.is_some()
                || job.pending
                || job.unique.is_some()
                || configs.of(&job.queue).limits_dispatch()
                || configs.is_tenant_fair(&job.queue)
                // A job of a tenant with a concurrency limit waits for its tenant (the insert
                // holds it), so it is never written active.
                || job.tenant_limits.is_some_and(|l| l.max_concurrency.is_some())
            {
                continue;
            }
            if let Some(taken) = self.waiters.take(&job.queue) {
                handing.push(Handing {
                    taken,
                    queue: job.queue.clone(),
                    jobs: vec![i],
                });
            } else if let Some(h) = handing
                .iter_mut()
                .filter(|h| h.queue == job.queue && h.jobs.len() < h.taken.target.room)
                .min_by_key(|h| h.jobs.len())
            {
                h.jobs.push(i);
            }
        }
        handing
    }

    /// Gives each taken FETCH the jobs written `active` for it (a wake-up when there are
    /// none); jobs whose FETCH went away meanwhile are given back.
    async fn deliver(&self, handing: Vec<Handing>, rows: &[Job]) {
        for h in handing {
            let jobs: Vec<Job> = h
                .jobs
                .iter()
                .map(|&i| &rows[i])
                .filter(|job| job.state == JobState::Active)
                .cloned()
                .collect();
            let n = jobs.len();
            match h.taken.deliver(jobs) {
                Ok(()) => telemetry::jobs_handed_off(n),
                Err(gone) => crate::wakeup::waiters::give_back(&self.db, &gone).await,
            }
        }
    }
}
