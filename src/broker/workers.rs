//! The worker protocol: registration, heartbeats, directives, deregistration, and the
//! operator's view of workers.

use chrono::{DateTime, Utc};

use super::Broker;
use crate::error::{Error, Result};
use crate::job::failure::Reclaim;
use crate::job::lifecycle;
use crate::store;
use crate::store::worker::{HeartbeatOutcome, HeartbeatParams, WorkerRecord, WorkerReport};
use crate::telemetry;
use crate::worker::WorkerDirective;

/// Most jobs one deregistration releases per statement (it loops until none are left).
const RELEASE_BATCH: i64 = 1_000;

/// What a registration did.
#[derive(Debug, Clone)]
pub struct Registered {
    /// Whether the worker id was new.
    pub created: bool,
    /// The server directive already set for the worker.
    pub directive: WorkerDirective,
    pub server_time: DateTime<Utc>,
}

/// Worker counts by effective state.
#[derive(Debug, Clone, Copy)]
pub struct WorkerSummary {
    pub total: i64,
    pub running: i64,
    pub quiet: i64,
    pub terminate: i64,
    pub stale: i64,
}

impl Broker {
    /// BEAT: records the worker as alive and extends the reservations it still holds.
    pub async fn heartbeat(&self, params: &HeartbeatParams<'_>) -> Result<HeartbeatOutcome> {
        self.check_worker_tenant(&params.report).await?;
        let outcome = store::worker::heartbeat(&self.db, params).await?;
        // The heartbeat may carry registration data (a pool, a capacity) FETCH uses.
        self.fetcher.forget_seen(params.report.worker_id);
        Ok(outcome)
    }

    /// Registration (optional: the first heartbeat registers too).
    pub async fn register(&self, report: &WorkerReport<'_>) -> Result<Registered> {
        let (created, directive, server_time) = store::worker::register(&self.db, report)
            .await?
            .ok_or_else(|| Error::WorkerIdTaken(report.worker_id.to_owned()))?;
        self.fetcher.forget_seen(report.worker_id);
        Ok(Registered {
            created,
            directive,
            server_time,
        })
    }

    /// For a report made acting as a tenant: 409 unless the worker id is new or the tenant's.
    async fn check_worker_tenant(&self, report: &WorkerReport<'_>) -> Result<()> {
        let Some(tenant) = report.tenant else {
            return Ok(());
        };
        let worker = store::tenant::Owned::Worker(report.worker_id.to_owned());
        match store::tenant::owner(&self.db, &worker).await? {
            Some(owner) if owner.as_deref() != Some(tenant) => {
                Err(Error::WorkerIdTaken(report.worker_id.to_owned()))
            }
            _ => Ok(()),
        }
    }

    /// One worker as the API shows it.
    pub async fn worker(&self, worker_id: &str) -> Result<WorkerRecord> {
        store::worker::get(&self.db, worker_id, self.settings.heartbeat_timeout)
            .await?
            .ok_or_else(|| Error::WorkerNotFound(worker_id.to_owned()))
    }

    /// Workers by id, a page at a time, with the total and the counts by state.
    pub async fn workers(
        &self,
        tenant: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<WorkerRecord>, WorkerSummary)> {
        let timeout = self.settings.heartbeat_timeout;
        let items = store::worker::list(&self.db, None, tenant, timeout, limit, offset).await?;
        let (total, running, quiet, terminate, stale) =
            store::worker::summary(&self.db, tenant, timeout).await?;
        Ok((
            items,
            WorkerSummary {
                total,
                running,
                quiet,
                terminate,
                stale,
            },
        ))
    }

    /// Sends a directive (`quiet` or `terminate`) to a worker; it learns it from its next
    /// heartbeat. Directives only escalate. Returns the worker as it is now.
    pub async fn direct_worker(
        &self,
        worker_id: &str,
        directive: WorkerDirective,
    ) -> Result<WorkerRecord> {
        store::worker::escalate_directive(&self.db, worker_id, directive)
            .await?
            .ok_or_else(|| Error::WorkerNotFound(worker_id.to_owned()))?;
        self.worker(worker_id).await
    }

    /// Deregistration (`DELETE /ojs/v1/workers/{id}`): the worker's remaining jobs are released
    /// like a dead worker's, with error `shutdown`, and its record is removed. Returns how many
    /// jobs were released.
    pub async fn deregister(&self, worker_id: &str) -> Result<usize> {
        self.remove_worker(worker_id, Reclaim::Shutdown, false)
            .await
    }

    /// Operator deletion of a stale worker (`DELETE /ojs/v1/admin/workers/{id}`): 409 unless it
    /// is stale; its jobs are released with error `worker_death`.
    pub async fn delete_stale_worker(&self, worker_id: &str) -> Result<usize> {
        self.remove_worker(worker_id, Reclaim::WorkerDeath, true)
            .await
    }

    async fn remove_worker(
        &self,
        worker_id: &str,
        cause: Reclaim,
        only_stale: bool,
    ) -> Result<usize> {
        let mut tx = self.db.begin().await?;
        let workers = [worker_id.to_owned()];
        let mut released = 0;
        loop {
            let held = store::job::lock_held_by(&mut *tx, &workers, RELEASE_BATCH).await?;
            let done = (held.len() as i64) < RELEASE_BATCH;
            let decided = lifecycle::releases(&held, |_| cause);
            let moved = store::job::release_many(&mut *tx, &held, &decided, None).await?;
            telemetry::attempts_finished(&moved);
            released += moved.len();
            if done {
                break;
            }
        }
        let stale_after = only_stale.then_some(self.settings.heartbeat_timeout);
        if !store::worker::delete(&mut *tx, worker_id, stale_after).await? {
            // Nothing is written unless the whole removal happens.
            drop(tx);
            let worker = self.worker(worker_id).await?;
            return Err(Error::WorkerNotStale {
                worker_id: worker.id,
                state: worker.effective_state,
            });
        }
        tx.commit().await?;
        Ok(released)
    }
}
