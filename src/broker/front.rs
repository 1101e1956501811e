//! The [`Broker`]: the front every HTTP handler calls, holding the database, the settings, the
//! resolved queue configurations and the components of the hot paths; and the operations on
//! one job (PUSH, FETCH, ACK, NACK, INFO, CANCEL, ACTIVATE, priority). The rest of the API
//! adds its operations to [`Broker`] from a file of its own.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use tokio_util::sync::CancellationToken;

use super::complete::{Completer, NackRequest, Nacked};
use super::configs::Configs;
use super::enqueue::{Enqueuer, PushContext, PushResult};
use super::fetch::{FetchRequest, Fetcher};
use super::settings::Settings;
use super::webhook_sender::Sender;
use crate::db::HotConnections;
use crate::error::{Error, Result};
use crate::hold::SystemHold;
use crate::job::envelope::NewJob;
use crate::job::failure::JobError;
use crate::job::{Job, JobId, JobState};
use crate::store;
use crate::store::hold::HoldRow;
use crate::store::job::Completed;
use crate::telemetry;
use crate::wakeup::Announcer;

/// The broker: the database, settings, the resolved queue configurations, and the components
/// of the hot paths. Cheap to clone (every part is shared).
#[derive(Debug, Clone)]
pub struct Broker {
    pub(super) db: Db,
    pub(super) settings: Settings,
    /// Wakes long polls here at once and tells other replicas (after commit).
    pub(super) announcer: Announcer,
    /// Resolved queue configurations and pools, cached per process.
    pub(super) configs: Arc<Configs>,
    pub(super) enqueuer: Arc<Enqueuer>,
    pub(super) fetcher: Arc<Fetcher>,
    pub(super) completer: Arc<Completer>,
    pub(super) gauges: Arc<GaugeReads>,
    /// Maintenance mode: while in force nothing is handed out.
    pub(super) hold: SystemHold,
    /// Sends webhook deliveries (the leader's deliverer and the test endpoint).
    pub(super) webhook_sender: Sender,
}

/// When the database-backed gauges were last read (`gauges.rs`).
#[derive(Debug, Default)]
pub(super) struct GaugeReads {
    pub(super) read_at: tokio::sync::Mutex<Option<std::time::Instant>>,
}

/// Result of a CANCEL.
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub job: Job,
    /// The state the job was cancelled from (`cancelled` when it already was).
    pub previous_state: JobState,
}

impl Broker {
    /// A broker on `db`. Starts the group-commit flushers, so it must be called within a Tokio
    /// runtime; `announcer`'s task must run for other replicas to hear of new jobs.
    pub fn new(
        db: Db,
        hot: HotConnections,
        settings: Settings,
        announcer: Announcer,
        hold: SystemHold,
    ) -> Broker {
        let configs = Arc::new(Configs::new(settings.schema_validation));
        let enqueuer = Enqueuer::new(
            db.clone(),
            hot.clone(),
            configs.clone(),
            &settings,
            announcer.clone(),
            hold.clone(),
        );
        let fetcher = Fetcher::new(
            db.clone(),
            hot.clone(),
            configs.clone(),
            settings.clone(),
            announcer.notifier().clone(),
            hold.clone(),
        );
        let webhook_sender = Sender::new(settings.webhooks.clone());
        Broker {
            webhook_sender,
            enqueuer: Arc::new(enqueuer),
            fetcher: Arc::new(fetcher),
            completer: Arc::new(Completer::new(
                db.clone(),
                hot,
                configs.clone(),
                settings.keep_completed,
            )),
            gauges: Arc::default(),
            db,
            settings,
            announcer,
            configs,
            hold,
        }
    }

    /// Maintenance mode as this replica knows it.
    pub fn hold(&self) -> &SystemHold {
        &self.hold
    }

    /// Maintenance mode as stored (this replica learns it at once).
    pub async fn maintenance(&self) -> Result<HoldRow> {
        let row = store::hold::read(&self.db).await?;
        self.hold.learned(row.clone());
        Ok(row)
    }

    /// Turns maintenance mode on (`reason`, lifting after `duration` when given) or off; in
    /// force on this replica at once, on the others within [`crate::hold::RELOAD_INTERVAL`].
    pub async fn set_maintenance(
        &self,
        enabled: bool,
        reason: Option<&str>,
        duration: Option<Duration>,
    ) -> Result<HoldRow> {
        let ms = duration.map(crate::wire::duration::millis);
        let row = store::hold::set(&self.db, enabled, reason, ms).await?;
        self.hold.learned(row.clone());
        Ok(row)
    }

    /// The broker's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// PUSH (see `enqueue.rs`): writes validated jobs atomically, in request order.
    pub async fn push(&self, jobs: Vec<NewJob>, ctx: &PushContext) -> Result<PushResult> {
        self.enqueuer.push(jobs, ctx).await
    }

    /// FETCH (see `fetch.rs`): claims up to `count` jobs, waiting up to `wait` for work.
    /// Returns early (empty) on `shutdown`.
    pub async fn fetch(
        &self,
        req: &FetchRequest,
        shutdown: &CancellationToken,
    ) -> Result<Vec<Job>> {
        self.fetcher.fetch(req, shutdown).await
    }

    /// ACK: `active` → `completed`, answering what an ACK reports of the job.
    pub async fn ack(
        &self,
        id: JobId,
        worker_id: Option<&str>,
        result: Option<&str>,
    ) -> Result<Completed> {
        self.completer.ack(id, worker_id, result).await
    }

    /// ACK answering the whole job as the ACK left it (one statement of its own).
    pub async fn ack_whole(
        &self,
        id: JobId,
        worker_id: Option<&str>,
        result: Option<&str>,
    ) -> Result<Job> {
        self.completer.ack_whole(id, worker_id, result).await
    }

    /// ACK of many jobs (ojsd's batch extension): each gets its own outcome, in order.
    pub async fn ack_many(
        &self,
        worker_id: Option<&str>,
        acks: &[(JobId, Option<&str>)],
    ) -> Result<Vec<Result<Completed>>> {
        self.completer.ack_many(worker_id, acks).await
    }

    /// NACK: records the failure and lets the retry policy choose retryable or discarded
    /// (or puts the job straight back with `requeue`).
    pub async fn nack(&self, req: NackRequest) -> Result<Nacked> {
        self.nack_many(vec![req])
            .await?
            .pop()
            .expect("one outcome per request")
    }

    /// NACK of many jobs (ojsd's batch extension): each gets its own outcome, in order.
    pub async fn nack_many(&self, reqs: Vec<NackRequest>) -> Result<Vec<Result<Nacked>>> {
        let nacked = self.completer.nack_many(reqs).await?;
        if nacked
            .iter()
            .any(|n| n.as_ref().is_ok_and(|n| n.job.state == JobState::Retryable))
        {
            // A retry comes due: FETCHes promote again until they learn when.
            self.announcer.notifier().waiters().forget_next_due();
        }
        Ok(nacked)
    }

    /// Why a single-job heartbeat for `id` was refused: the worker no longer holds it.
    pub async fn reservation_lost(&self, id: JobId, worker_id: &str) -> Error {
        self.completer.reservation_lost(id, worker_id).await
    }

    /// INFO: one job.
    pub async fn info(&self, id: JobId) -> Result<Job> {
        store::job::get(&self.db, id)
            .await?
            .ok_or(Error::JobNotFound(id))
    }

    /// INFO as served: the job with its recorded steps, latest wait and delivered signals
    /// among its attributes (durable execution).
    pub async fn show(&self, id: JobId) -> Result<Job> {
        store::job::get_shown(&self.db, id)
            .await?
            .ok_or(Error::JobNotFound(id))
    }

    /// CANCEL: any non-terminal job (an active one included) becomes `cancelled`; cancelling a
    /// cancelled job again succeeds and changes nothing.
    pub async fn cancel(&self, id: JobId) -> Result<Cancelled> {
        let error = JobError::server("cancelled", "The job was cancelled while it was running.");
        if let Some((job, previous_state)) =
            store::job::cancel(&self.db, id, &error.to_json()).await?
        {
            telemetry::job_cancelled(&job);
            return Ok(Cancelled {
                job,
                previous_state,
            });
        }
        let job = self.info(id).await?;
        if job.state == JobState::Cancelled {
            return Ok(Cancelled {
                previous_state: JobState::Cancelled,
                job,
            });
        }
        Err(Error::InvalidTransition {
            job_id: id,
            operation: "cancel",
            current: job.state,
            allowed: &JobState::CANCELLABLE,
        })
    }

    /// Changes the priority of an `available` or `scheduled` job: returns the job and its
    /// previous priority. Setting the priority it already has succeeds and records nothing.
    pub async fn set_priority(&self, id: JobId, priority: i32) -> Result<(Job, i32)> {
        let Some(change) = store::job::set_priority(&self.db, id, priority, false).await? else {
            // Not a live job: a completed one (ojs_job_done) cannot change, a missing one is
            // not found.
            let job = self.info(id).await?;
            return Err(Error::InvalidTransition {
                job_id: id,
                operation: "change the priority of",
                current: job.state,
                allowed: &JobState::PRIORITY_CHANGEABLE,
            });
        };
        if !JobState::PRIORITY_CHANGEABLE.contains(&change.state) {
            return Err(Error::InvalidTransition {
                job_id: id,
                operation: "change the priority of",
                current: change.state,
                allowed: &JobState::PRIORITY_CHANGEABLE,
            });
        }
        match change.job {
            Some(job) => {
                self.announcer.moved(&job);
                telemetry::priority_changed(&job);
                Ok((job, change.previous))
            }
            // Same priority as before: nothing to write.
            None => Ok((self.info(id).await?, change.previous)),
        }
    }

    /// ACTIVATE: `pending` → `available`.
    pub async fn activate(&self, id: JobId) -> Result<Job> {
        if let Some(job) = store::job::activate(&self.db, id).await? {
            return Ok(job);
        }
        let job = self.info(id).await?;
        if job.state == JobState::Pending
            && let Some(workflow) = crate::workflow::held_by(&job.extra.0)
        {
            return Err(Error::HeldByWorkflow {
                job_id: id,
                workflow,
            });
        }
        Err(Error::InvalidTransition {
            job_id: id,
            operation: "activate",
            current: job.state,
            allowed: &[JobState::Pending],
        })
    }

    /// Deletes all jobs, workflows, workers, events, queues with their configuration, cron
    /// entries with their runs, rate-limit keys, registered schemas and webhook subscriptions, and
    /// turns maintenance mode off (test hook).
    ///
    /// Its truncations lock table after table, so a transaction of the server's own (an ACK
    /// group, the reaper) that locks two of them the other way round can deadlock with it, and
    /// Postgres aborts one of the two: a reset that lost is run again, a few times.
    pub async fn reset(&self) -> Result<()> {
        let mut attempt = 0;
        while let Err(e) = self.delete_everything().await {
            let retryable = matches!(
                e.as_database_error().and_then(|d| d.code()).as_deref(),
                Some("40P01" | "55P03")
            );
            attempt += 1;
            if !retryable || attempt == 5 {
                return Err(e.into());
            }
            tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
        }
        self.fetcher.forget_all();
        self.configs.reload(&self.db).await?;
        Ok(())
    }

    /// [`reset`](Self::reset)'s one transaction.
    async fn delete_everything(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.db.begin().await?;
        store::cron::delete_all(&mut tx).await?;
        store::workflow::delete_all(&mut *tx).await?;
        store::job::delete_all(&mut *tx).await?;
        store::worker::delete_all(&mut *tx).await?;
        store::event::delete_all(&mut *tx).await?;
        store::queue::delete_all(&mut *tx).await?;
        store::pool::reset(&mut tx).await?;
        store::rate_limit::delete_all(&mut tx).await?;
        store::hold::clear(&mut *tx).await?;
        store::schema::delete_all(&mut *tx).await?;
        store::webhook::delete_all(&mut *tx).await?;
        store::tenant::delete_all(&mut *tx).await?;
        tx.commit().await
    }
}
