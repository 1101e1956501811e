//! The [`Enqueuer`]: a PUSH's jobs written in one statement (grouped with concurrent single-job
//! PUSHes, or alone), or by a full queue's overflow policy, waiting for room (`block`) or dropping
//! the oldest jobs.

use super::outcome::{PushContext, PushResult, Pushed};
use super::prepare::{created, is_stale_config, prepare, refusal_error, schema_warnings};
use super::writer::{PushWriter, insert_admitted, insert_jobs};
use crate::broker::configs::{Configs, Snapshot};
use crate::broker::group::GROUP_FLUSHERS;
use crate::broker::group::GroupCommit;
use crate::broker::settings::Settings;
use crate::db::Db;
use crate::db::HotConnections;
use crate::error::{Error, Result};
use crate::hold::SystemHold;
use crate::job::Job;
use crate::job::envelope::{Limits, NewJob};
use crate::queue_config::OverflowPolicy;
use crate::store;
use crate::store::refusal::{Refusal, refusal};
use crate::telemetry;
use crate::wakeup::Announcer;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// Most single-job PUSH requests written by one statement.
const PUSH_GROUP_MAX: usize = 256;

/// Jobs above this size (`args` + `meta`) are written alone, so a group stays a few MiB at most.
const PUSH_GROUP_MAX_JOB_BYTES: usize = 16 * 1024;

/// How often a PUSH blocked on a full queue looks for room again.
const BLOCK_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The PUSH side of the broker.
#[derive(Debug)]
pub(in crate::broker) struct Enqueuer {
    pub(in crate::broker) db: Db,
    pub(super) configs: Arc<Configs>,
    pub(super) limits: Limits,
    pub(in crate::broker) strict_queues: bool,
    /// Wakes long polls here at once and tells other replicas (after commit).
    pub(in crate::broker) announcer: Announcer,
    /// Single-job PUSH requests, written together (see [`crate::broker::group`]).
    pub(super) pushes: GroupCommit<NewJob, Result<Job>>,
    /// When this process last recorded `queue.full` per queue (and `tenant.limit_exceeded`
    /// per tenant, as `tenant:<id>`).
    pub(super) full_events: Mutex<HashMap<String, Instant>>,
}

impl Enqueuer {
    /// Starts the group-commit flushers of single-job PUSHes (within a Tokio runtime).
    pub(in crate::broker) fn new(
        db: Db,
        hot: HotConnections,
        configs: Arc<Configs>,
        settings: &Settings,
        announcer: Announcer,
        hold: SystemHold,
    ) -> Enqueuer {
        let strict_queues = settings.strict_queues;
        let writer = Arc::new(PushWriter {
            db: db.clone(),
            hot,
            strict_queues,
            configs: configs.clone(),
            waiters: announcer.notifier().waiters().clone(),
            default_visibility_timeout_ms: settings.default_visibility_timeout_ms,
            hold,
        });
        let pushes = GroupCommit::spawn(GROUP_FLUSHERS, PUSH_GROUP_MAX, move |jobs| {
            writer.clone().flush(jobs)
        });
        Enqueuer {
            db,
            configs,
            limits: settings.limits,
            strict_queues,
            announcer,
            pushes,
            full_events: Mutex::default(),
        }
    }

    /// PUSH: applies the queues' configuration to validated jobs (access rules and defaults),
    /// writes them atomically (all or none) and returns them in request order. A queue at its
    /// bound refuses, drops its oldest waiting jobs, or is waited on, per its overflow policy.
    pub(in crate::broker) async fn push(
        &self,
        jobs: Vec<NewJob>,
        ctx: &PushContext,
    ) -> Result<PushResult> {
        let deadline = Instant::now() + ctx.block_timeout;
        let mut stale = 0;
        loop {
            let (configs, prepared) = self.prepare_current(&jobs, ctx).await?;
            let result = match self.write_pushed(&prepared, None).await {
                Err(Error::QueueFull {
                    policy: OverflowPolicy::DropOldest,
                    ..
                }) => self.push_dropping_oldest(&prepared).await,
                other => other,
            };
            match result {
                Err(e) if is_stale_config(&e) && stale < 3 => {
                    stale += 1;
                    self.configs.reload(&self.db).await?;
                }
                Err(Error::QueueFull {
                    policy: OverflowPolicy::Block,
                    ..
                }) if Instant::now() < deadline => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(left.min(BLOCK_POLL_INTERVAL)).await;
                }
                Err(Error::QueueFull {
                    ref queue,
                    depth,
                    bound,
                    policy,
                    ..
                }) => {
                    self.queue_full(queue, depth, bound, policy, &jobs).await;
                    return Err(result.expect_err("matched an error"));
                }
                Ok(jobs) => {
                    let mut out = PushResult {
                        jobs,
                        pressure: None,
                        warnings: schema_warnings(&prepared),
                    };
                    self.after_push(&mut out, &configs).await;
                    return Ok(out);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// PUSH inside the caller's transaction (the cron firer's): the queue configuration
    /// applied, the jobs written in `tx`, which the caller commits, then calls
    /// [`Enqueuer::after_commit`]. A full `drop_oldest` queue makes room in `tx`; any other
    /// full queue refuses at once (nothing waits). Each attempt runs in a savepoint, so a
    /// refusal leaves `tx` usable.
    pub(in crate::broker) async fn push_in(
        &self,
        tx: &mut sqlx::PgConnection,
        jobs: &[NewJob],
        ctx: &PushContext,
    ) -> Result<(Vec<Pushed>, Arc<Snapshot>)> {
        use sqlx::Connection;
        let mut stale = 0;
        loop {
            let (configs, prepared) = self.prepare_current(jobs, ctx).await?;
            let mut attempt = tx.begin().await?;
            let mut result = self.write_pushed(&prepared, Some(&mut attempt)).await;
            if let Err(Error::QueueFull {
                policy: OverflowPolicy::DropOldest,
                ..
            }) = result
            {
                attempt.rollback().await?;
                attempt = tx.begin().await?;
                result = self.write_dropping_oldest(&mut attempt, &prepared).await;
            }
            match result {
                Ok(pushed) => {
                    attempt.commit().await?;
                    return Ok((pushed, configs));
                }
                Err(e) if is_stale_config(&e) && stale < 3 => {
                    attempt.rollback().await?;
                    stale += 1;
                    self.configs.reload(&self.db).await?;
                }
                Err(e) => {
                    attempt.rollback().await?;
                    return Err(e);
                }
            }
        }
    }

    /// Whether the queue configuration admits `job` from `ctx` (job type and producer rules),
    /// without writing it.
    pub(in crate::broker) async fn admissible(
        &self,
        job: &NewJob,
        ctx: &PushContext,
    ) -> Result<()> {
        self.prepare_current(std::slice::from_ref(job), ctx)
            .await
            .map(|_| ())
    }

    /// [`prepare`] with the cached configuration; a refusal is only answered once the
    /// configuration is known to be current (another replica may have just registered a
    /// schema or changed a queue's rules), else the jobs are prepared again with the new one.
    /// An accepted job needs no such check: the enqueue statement refuses a stale generation.
    async fn prepare_current(
        &self,
        jobs: &[NewJob],
        ctx: &PushContext,
    ) -> Result<(Arc<Snapshot>, Vec<NewJob>)> {
        let configs = self.configs.current(&self.db).await?;
        match prepare(jobs, &configs, ctx, &self.limits) {
            Ok(prepared) => Ok((configs, prepared)),
            Err(refused) => {
                let latest = self.configs.verified(&self.db).await?;
                if latest.generation == configs.generation {
                    return Err(refused);
                }
                let prepared = prepare(jobs, &latest, ctx, &self.limits)?;
                Ok((latest, prepared))
            }
        }
    }

    /// What a PUSH made with [`Enqueuer::push_in`] tells once its transaction committed:
    /// metrics, wake-ups, back-pressure.
    pub(in crate::broker) async fn after_commit(
        &self,
        jobs: Vec<Pushed>,
        configs: &Snapshot,
    ) -> PushResult {
        let mut out = PushResult {
            jobs,
            pressure: None,
            warnings: Vec::new(),
        };
        self.after_push(&mut out, configs).await;
        out
    }

    /// Writes prepared jobs (in `tx` when given, which the caller commits).
    async fn write_pushed(
        &self,
        jobs: &[NewJob],
        tx: Option<&mut sqlx::PgConnection>,
    ) -> Result<Vec<Pushed>> {
        let mut seen = HashSet::with_capacity(jobs.len());
        for (index, job) in jobs.iter().enumerate() {
            if !seen.insert(job.id) {
                return Err(Error::DuplicateId {
                    job_id: job.id,
                    index: Some(index),
                });
            }
        }
        let batch = jobs.len() > 1;
        let admitted = jobs
            .iter()
            .any(|j| j.tenant_limits.is_some_and(|l| l.limits_enqueue()));
        let result = if let Some(tx) = tx {
            insert_admitted(tx, jobs, self.strict_queues)
                .await
                .map(created)
                .map_err(Error::from)
        } else if jobs.iter().any(|j| j.unique.is_some()) {
            self.push_unique(jobs, batch).await
        } else if admitted {
            // A tenant's enqueue rate or depth is counted after the insert, in its transaction.
            async {
                let mut tx = self.db.begin().await?;
                let rows = insert_admitted(&mut tx, jobs, self.strict_queues).await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(rows)
            }
            .await
            .map(created)
            .map_err(Error::from)
        } else if let [job] = jobs
            && job.args.len() + job.meta.len() <= PUSH_GROUP_MAX_JOB_BYTES
        {
            match self.pushes.submit(job.clone()).await {
                Some(outcome) => outcome.map(|job| created(vec![job])),
                None => Err(Error::Database(sqlx::Error::PoolClosed)),
            }
        } else {
            insert_jobs(&self.db, jobs, self.strict_queues)
                .await
                .map(created)
                .map_err(Error::from)
        };
        match result {
            Err(Error::Database(e)) => Err(match refusal(&e) {
                // A client-supplied id is taken (possibly by a concurrent request).
                Some(Refusal::DuplicateJobId) => self.duplicate_id_error(jobs, batch, e).await,
                Some(Refusal::TenantLimit(limit)) => {
                    self.tenant_limited(&limit).await;
                    Error::TenantLimitExceeded(limit)
                }
                Some(refused) => refusal_error(refused, jobs, batch, e),
                None => Error::Database(e),
            }),
            other => other,
        }
    }

    /// PUSH into a full `drop_oldest` queue: in one transaction, under the queue's capacity
    /// row lock, discards the oldest waiting jobs of every such queue of the request (error
    /// `overflow`, not dead-lettered) until the new jobs fit, then writes them. Refuses when
    /// the queue cannot make room (its unfinished jobs are active, or the request alone is
    /// larger than the bound).
    async fn push_dropping_oldest(&self, jobs: &[NewJob]) -> Result<Vec<Pushed>> {
        let mut tx = self.db.begin().await?;
        let pushed = self.write_dropping_oldest(&mut tx, jobs).await?;
        tx.commit().await?;
        Ok(pushed)
    }

    /// [`Enqueuer::push_dropping_oldest`] in `tx` (the caller commits; the drops are counted
    /// in the metrics as soon as they are written).
    async fn write_dropping_oldest(
        &self,
        tx: &mut sqlx::PgConnection,
        jobs: &[NewJob],
    ) -> Result<Vec<Pushed>> {
        let mut queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        let mut dropped = Vec::new();
        for queue in queues {
            let incoming: Vec<&NewJob> = jobs.iter().filter(|j| j.queue == queue).collect();
            let bytes: i64 = incoming
                .iter()
                .map(|j| (j.args.len() + j.meta.len()) as i64)
                .sum();
            let mut freed =
                store::queue::drop_oldest(&mut *tx, queue, incoming.len() as i64, bytes).await?;
            dropped.append(&mut freed);
        }
        let result = self.write_pushed(jobs, Some(tx)).await;
        match result {
            Ok(pushed) => {
                for (queue, job_type) in &dropped {
                    telemetry::queue_overflow(queue, OverflowPolicy::DropOldest);
                    tracing::debug!(queue, job_type, "dropped the oldest job to make room");
                }
                Ok(pushed)
            }
            // Still full: the bound cannot be met by dropping; refuse like `reject`.
            Err(Error::QueueFull {
                queue,
                depth,
                bound,
                bound_bytes,
                index,
                ..
            }) => Err(Error::QueueFull {
                queue,
                depth,
                bound,
                bound_bytes,
                index,
                policy: OverflowPolicy::DropOldest,
            }),
            Err(e) => Err(e),
        }
    }

    /// After a primary-key violation: the first job whose client-supplied id exists.
    async fn duplicate_id_error(
        &self,
        jobs: &[NewJob],
        batch: bool,
        violation: sqlx::Error,
    ) -> Error {
        let supplied: Vec<Uuid> = jobs
            .iter()
            .filter(|j| j.id_supplied)
            .map(|j| j.id.0)
            .collect();
        let existing: HashSet<Uuid> = match store::job::existing_ids(&self.db, &supplied).await {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => return e.into(),
        };
        match jobs.iter().position(|j| existing.contains(&j.id.0)) {
            Some(index) => Error::DuplicateId {
                job_id: jobs[index].id,
                index: batch.then_some(index),
            },
            // The clashing row is gone again; report the first supplied id.
            None => match jobs.iter().position(|j| j.id_supplied) {
                Some(index) => Error::DuplicateId {
                    job_id: jobs[index].id,
                    index: batch.then_some(index),
                },
                // Only generated ids clashed: not the client's doing.
                None => Error::Database(violation),
            },
        }
    }
}
