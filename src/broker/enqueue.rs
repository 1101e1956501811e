//! PUSH: the queue configuration applied to validated jobs, the write (grouped with concurrent
//! single-job PUSHes, or alone, or under unique-key locks), what a full queue does by its
//! overflow policy, and what a PUSH tells afterwards (wakeups, metrics, back-pressure).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use super::configs::{Configs, Snapshot};
use super::group::GroupCommit;
use super::{GROUP_FLUSHERS, Settings};
use crate::db::HotConnections;
use crate::error::{Error, Result};
use crate::hold::SystemHold;
use crate::job::DispatchPlace;
use crate::job::envelope::{Limits, NewJob, Rejection};
use crate::job::retry::RetryPolicy;
use crate::job::{Job, JobState};
use crate::job_schema::{Check, SchemaSet};
use crate::queue_config::OverflowPolicy;
use crate::store;
use crate::store::job::{HandTo, Handoffs};
use crate::store::refusal::{Refusal, refusal};
use crate::telemetry;
use crate::wakeup::Announcer;
use crate::wakeup::waiters::{Taken, Waiters};

/// Most single-job PUSH requests written by one statement.
const PUSH_GROUP_MAX: usize = 256;

/// Jobs above this size (`args` + `meta`) are written alone, so a group stays a few MiB at most.
const PUSH_GROUP_MAX_JOB_BYTES: usize = 16 * 1024;

/// How often a PUSH blocked on a full queue looks for room again.
const BLOCK_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How a pushed job came to be in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// A new job was created.
    Created,
    /// A unique `ignore` policy returned the existing job; nothing was created.
    Deduplicated,
    /// A unique `replace_except_schedule` policy updated the existing scheduled job in place.
    ReplacedInPlace,
}

/// One job of a PUSH response.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub job: Job,
    pub outcome: PushOutcome,
}

/// Who is pushing, and how long they may wait for room.
#[derive(Debug, Clone, Default)]
pub struct PushContext {
    /// The producer identity (`OJS-Producer` header), checked against a queue's `producers`.
    pub producer: Option<String>,
    /// How long an enqueue into a full `block` queue may wait (`OJS-Block-Timeout`).
    pub block_timeout: Duration,
}

/// What a PUSH wrote, and the pressure on the fullest bounded queue it wrote to when that is
/// at or past the queue's `warning_threshold`.
#[derive(Debug, Clone)]
pub struct PushResult {
    pub jobs: Vec<Pushed>,
    pub pressure: Option<Pressure>,
    /// What the schema check found in jobs of `warn`-mode schemas (`jobs[i]: ` first in a
    /// batch).
    pub warnings: Vec<String>,
}

/// A bounded queue's depth against its bound.
#[derive(Debug, Clone)]
pub struct Pressure {
    pub queue: String,
    pub depth: i64,
    pub bound: i64,
}

impl Pressure {
    /// Depth / bound.
    pub fn ratio(&self) -> f64 {
        self.depth as f64 / self.bound.max(1) as f64
    }
}

/// The PUSH side of the broker.
#[derive(Debug)]
pub(super) struct Enqueuer {
    pub(super) db: PgPool,
    configs: Arc<Configs>,
    limits: Limits,
    pub(super) strict_queues: bool,
    /// Wakes long polls here at once and tells other replicas (after commit).
    pub(super) announcer: Announcer,
    /// Single-job PUSH requests, written together (see [`super::group`]).
    pushes: GroupCommit<NewJob, Result<Job>>,
    /// When this process last recorded `queue.full` per queue (and `tenant.limit_exceeded`
    /// per tenant, as `tenant:<id>`).
    full_events: Mutex<HashMap<String, Instant>>,
}

impl Enqueuer {
    /// Starts the group-commit flushers of single-job PUSHes (within a Tokio runtime).
    pub(super) fn new(
        db: PgPool,
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
    pub(super) async fn push(&self, jobs: Vec<NewJob>, ctx: &PushContext) -> Result<PushResult> {
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
    pub(super) async fn push_in(
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
    pub(super) async fn admissible(&self, job: &NewJob, ctx: &PushContext) -> Result<()> {
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
    pub(super) async fn after_commit(&self, jobs: Vec<Pushed>, configs: &Snapshot) -> PushResult {
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

    /// After a successful PUSH: metrics, wakeups for the queues that gained available jobs,
    /// and the pressure of bounded queues (their depth against `warning_threshold`).
    async fn after_push(&self, pushed: &mut PushResult, configs: &Snapshot) {
        // Jobs written held (by a key or a tenant) are announced by their release.
        let held: HashSet<crate::job::JobId> = pushed
            .jobs
            .iter()
            .filter(|p| p.job.rate_key.is_some() || p.job.rate_held.is_some())
            .map(|p| p.job.id)
            .collect();
        self.release_keyed(&mut pushed.jobs).await;
        let new_jobs = || {
            pushed
                .jobs
                .iter()
                .filter(|p| p.outcome == PushOutcome::Created)
                .map(|p| &p.job)
        };
        telemetry::jobs_enqueued(new_jobs());
        if new_jobs().any(|job| job.state == JobState::Scheduled) {
            // It comes due: FETCHes promote again until they learn when.
            self.announcer.notifier().waiters().forget_next_due();
        }
        // Per queue: new jobs, new available jobs, and where the first of those is in the
        // dispatch order.
        let mut added: Vec<(&str, usize, usize, Option<DispatchPlace>)> = Vec::new();
        for job in new_jobs() {
            let (available, place) = if job.state == JobState::Available && !held.contains(&job.id)
            {
                (1, DispatchPlace::of(job).or(Some(DispatchPlace::START)))
            } else {
                (0, None)
            };
            match added.iter_mut().find(|(q, ..)| *q == job.queue) {
                Some((_, n, a, first)) => {
                    *n += 1;
                    *a += available;
                    if let Some(place) = place {
                        *first = Some(first.map_or(place, |f| f.min(place)));
                    }
                }
                None => added.push((&job.queue, 1, available, place)),
            }
        }
        let mut pressure = None;
        for (queue, jobs, available, first) in added {
            if available > 0 {
                self.announcer
                    .announce(queue, available, first.unwrap_or(DispatchPlace::START));
            }
            let config = configs.of(queue);
            let Some(bound) = config.max_size else {
                continue;
            };
            // The counter as of now (other enqueues may have added to it meanwhile).
            let Ok(Some((depth, _))) = store::queue::capacity(&self.db, queue).await else {
                continue;
            };
            let ratio = depth as f64 / bound as f64;
            telemetry::queue_pressure(queue, depth, bound);
            let before = (depth - jobs as i64) as f64 / bound as f64;
            if ratio >= config.warning_threshold && before < config.warning_threshold {
                let data = serde_json::json!({"queue": queue, "depth": depth, "bound": bound});
                if let Err(e) =
                    store::event::insert_queue_event(&self.db, "backpressure.warning", queue, &data)
                        .await
                {
                    tracing::warn!(error = %e, queue, "could not record backpressure.warning");
                }
            }
            if ratio >= config.warning_threshold
                && pressure
                    .as_ref()
                    .is_none_or(|p: &Pressure| ratio > p.ratio())
            {
                pressure = Some(Pressure {
                    queue: queue.to_owned(),
                    depth,
                    bound,
                });
            }
        }
        pushed.pressure = pressure;
    }

    /// New jobs with a rate-limit key were written held (migration V20): their keys let go
    /// what they allow now, and the jobs are reported as their keys left them (released, still
    /// held, or dropped). A key that cannot be released here is released by the releasers, which
    /// the enqueue notified.
    ///
    /// Jobs of a tenant with a concurrency limit were written held by their tenant (migration
    /// V28): the same, tenant by tenant (a released job with a key then waits for its key).
    async fn release_keyed(&self, jobs: &mut [Pushed]) {
        let tenant_held = |job: &Job| job.rate_held == Some(false);
        let keyed: Vec<usize> = (0..jobs.len())
            .filter(|&i| {
                jobs[i].outcome == PushOutcome::Created
                    && (jobs[i].job.rate_key.is_some() || tenant_held(&jobs[i].job))
            })
            .collect();
        if keyed.is_empty() {
            return;
        }
        let tenants: std::collections::BTreeSet<&str> = keyed
            .iter()
            .filter(|&&i| tenant_held(&jobs[i].job))
            .filter_map(|&i| jobs[i].job.tenant.as_deref())
            .collect();
        let keys: std::collections::BTreeSet<&str> = keyed
            .iter()
            .filter(|&&i| !tenant_held(&jobs[i].job))
            .filter_map(|&i| jobs[i].job.rate_key.as_deref())
            .collect();
        let releases = tenants
            .into_iter()
            .map(|t| (t, true))
            .chain(keys.into_iter().map(|k| (k, false)));
        for (name, tenant) in releases {
            let released = if tenant {
                store::tenant::release(&self.db, name, false).await
            } else {
                store::rate_limit::release(&self.db, name, false).await
            };
            match released {
                Ok(queues) => {
                    telemetry::rate_released(queues.iter().map(|(_, n)| n).sum());
                    // Jobs of this key (or tenant) enqueued earlier may be among those released.
                    for (queue, jobs) in queues {
                        self.announcer.announce(
                            &queue,
                            usize::try_from(jobs).unwrap_or(0),
                            DispatchPlace::START,
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, name, tenant, "could not release held jobs after an enqueue")
                }
            }
        }
        let ids: Vec<uuid::Uuid> = keyed.iter().map(|&i| jobs[i].job.id.0).collect();
        match store::job::get_many(&self.db, &ids).await {
            Ok(rows) => {
                for row in rows {
                    if let Some(&i) = keyed.iter().find(|&&i| jobs[i].job.id == row.id) {
                        jobs[i].job = row;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read back rate-limited jobs"),
        }
    }

    /// Whether a refusal event keyed `key` may be recorded now: at most one a second per key
    /// from this process (and then it is counted as recorded).
    fn event_due(&self, key: String) -> bool {
        let now = Instant::now();
        let mut last = self.full_events.lock().expect("full-events lock");
        if last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(1))
        {
            return false;
        }
        if last.len() > 10_000 {
            last.clear();
        }
        last.insert(key, now);
        true
    }

    /// After an enqueue refused for a tenant's limit: the metric, and `tenant.limit_exceeded`
    /// (at most one per tenant per second from this process).
    async fn tenant_limited(&self, limit: &store::refusal::TenantLimit) {
        telemetry::tenant_limit_exceeded(&limit.tenant_id, &limit.limit);
        // Queue names have no ':', so a tenant's key never meets a queue's.
        if !self.event_due(format!("tenant:{}", limit.tenant_id)) {
            return;
        }
        let data = serde_json::json!({"tenant_id": limit.tenant_id, "limit": limit.limit,
                                      "current": limit.current, "maximum": limit.maximum});
        if let Err(e) = store::event::insert_subject_event(
            &self.db,
            "tenant.limit_exceeded",
            &limit.tenant_id,
            &data,
        )
        .await
        {
            tracing::warn!(error = %e, tenant = limit.tenant_id, "could not record tenant.limit_exceeded");
        }
    }

    /// After a PUSH refused for a full queue: `queue.full` and `backpressure.rejected`
    /// (at most one pair per queue per second from this process) and the metrics.
    async fn queue_full(
        &self,
        queue: &str,
        depth: i64,
        bound: i64,
        policy: OverflowPolicy,
        jobs: &[NewJob],
    ) {
        telemetry::queue_overflow(queue, policy);
        if !self.event_due(queue.to_owned()) {
            return;
        }
        let job_type = jobs
            .iter()
            .find(|j| j.queue == queue)
            .map(|j| j.r#type.as_str());
        let full = serde_json::json!({"queue": queue, "depth": depth, "bound": bound});
        let rejected = serde_json::json!({"queue": queue, "depth": depth, "bound": bound, "job_type": job_type});
        for (kind, data) in [("queue.full", &full), ("backpressure.rejected", &rejected)] {
            if let Err(e) = store::event::insert_queue_event(&self.db, kind, queue, data).await {
                tracing::warn!(error = %e, queue, "could not record {kind}");
            }
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

/// Every row as newly created.
pub(super) fn created(rows: Vec<Job>) -> Vec<Pushed> {
    rows.into_iter()
        .map(|job| Pushed {
            job,
            outcome: PushOutcome::Created,
        })
        .collect()
}

/// Whether a write failed because the jobs were prepared with an outdated configuration.
fn is_stale_config(e: &Error) -> bool {
    matches!(e, Error::Database(db) if refusal(db) == Some(Refusal::StaleConfig))
}

/// The error of an enqueue the database refused because of a queue (see
/// [`store::refusal`]); `e` itself when the refusal is not the client's to hear about.
fn refusal_error(refused: Refusal, jobs: &[NewJob], batch: bool, e: sqlx::Error) -> Error {
    match refused {
        Refusal::Draining { queue } => Error::QueueDraining {
            queue,
            operation: "enqueue into",
        },
        Refusal::UnknownQueue { queue } => Error::UnknownQueue(queue),
        Refusal::Full { queue, overflow: o } => Error::QueueFull {
            index: batch
                .then(|| jobs.iter().position(|j| j.queue == queue))
                .flatten(),
            depth: o.depth,
            bound: o.bound.unwrap_or(o.depth),
            bound_bytes: o
                .bound_bytes
                .filter(|max| o.bound.is_none_or(|b| o.depth < b) && o.bytes <= *max),
            policy: o.policy,
            queue,
        },
        Refusal::TenantLimit(limit) => Error::TenantLimitExceeded(limit),
        Refusal::StaleConfig | Refusal::DuplicateJobId => Error::Database(e),
    }
}

/// The tenants of `jobs` an enqueue must be admitted by (their limits on enqueues, as the
/// jobs were prepared), each once, with how many of the jobs are theirs.
fn limited_tenants(jobs: &[NewJob]) -> (Vec<String>, Vec<i32>) {
    let mut tenants: Vec<String> = Vec::new();
    let mut counts: Vec<i32> = Vec::new();
    for job in jobs {
        if !job.tenant_limits.is_some_and(|l| l.limits_enqueue()) {
            continue;
        }
        let Some(tenant) = job.tenant_id() else {
            continue;
        };
        match tenants.iter().position(|t| *t == tenant) {
            Some(i) => counts[i] += 1,
            None => {
                tenants.push(tenant);
                counts.push(1);
            }
        }
    }
    (tenants, counts)
}

/// Admits `jobs`, just inserted in `tx`, by their tenants' enqueue rate and depth (nothing to
/// do, and no statement, when none of them has such limits).
pub(super) async fn admit_tenants(
    tx: &mut sqlx::PgConnection,
    jobs: &[NewJob],
) -> Result<(), sqlx::Error> {
    let (tenants, counts) = limited_tenants(jobs);
    if tenants.is_empty() {
        return Ok(());
    }
    store::tenant::admit(tx, &tenants, &counts).await
}

/// Applies each job's queue configuration: its access rules (`allowed_job_types`,
/// `producers`) and, where the job sets none of its own, the queue's `default_timeout`,
/// `visibility_timeout` and `default_retry` fields (the job's retry fields win one by one).
fn prepare(
    jobs: &[NewJob],
    configs: &Snapshot,
    ctx: &PushContext,
    limits: &Limits,
) -> Result<Vec<NewJob>> {
    let batch = jobs.len() > 1;
    jobs.iter()
        .enumerate()
        .map(|(index, job)| {
            let index = batch.then_some(index);
            let config = configs.of(&job.queue);
            if !config.allows_type(&job.r#type) {
                return Err(Error::JobTypeNotAllowed {
                    queue: job.queue.clone(),
                    job_type: job.r#type.clone(),
                    index,
                });
            }
            if !config.allows_producer(ctx.producer.as_deref()) {
                return Err(Error::ProducerNotAllowed {
                    queue: job.queue.clone(),
                    producer: ctx.producer.clone(),
                    index,
                });
            }
            let mut job = job.clone();
            job.config_generation = configs.generation;
            if configs.any_tenant_limits() {
                job.tenant_limits = job
                    .tenant_id()
                    .and_then(|tenant| configs.tenant_limits(&tenant).copied());
            }
            if !configs.schemas.is_empty() {
                check_schema(&mut job, &configs.schemas, index)?;
            }
            if !job.timeout_explicit {
                job.timeout_ms = config
                    .default_timeout
                    .map_or(limits.default_timeout_ms, |s| s * 1_000);
            }
            if job.visibility_timeout_ms.is_none() {
                job.visibility_timeout_ms = config.visibility_timeout.map(|s| s * 1_000);
            }
            if let Some(merged) = crate::queue_config::layered_retry(
                &config.default_retry,
                job.retry_input.as_deref(),
            ) {
                let raw = crate::wire::json::raw(merged);
                job.retry = RetryPolicy::parse(&raw, "$.retry").map_err(|v| Error::Rejected {
                    index,
                    rejection: Rejection::InvalidRetry(v),
                })?;
            }
            Ok(job)
        })
        .collect()
}

/// The schema warnings of `jobs`, each prefixed with `jobs[i]: ` in a batch.
fn schema_warnings(jobs: &[NewJob]) -> Vec<String> {
    let batch = jobs.len() > 1;
    jobs.iter()
        .enumerate()
        .flat_map(|(i, job)| {
            job.schema_warnings.iter().map(move |w| match batch {
                true => format!("jobs[{i}]: {w}"),
                false => w.clone(),
            })
        })
        .collect()
}

/// Checks `job` against its type's registered schema: a failure in `strict` mode refuses it,
/// one in `warn` mode is noted on the job (the PUSH answers with it).
fn check_schema(job: &mut NewJob, schemas: &SchemaSet, index: Option<usize>) -> Result<()> {
    let version = match job.version.as_deref() {
        Some(raw) => Some(serde_json::from_str::<serde_json::Value>(raw).map_err(|_| {
            Error::InvalidRequest {
                field: "$.version".to_owned(),
                message: "version is not valid JSON".to_owned(),
            }
        })?),
        None => None,
    };
    match schemas.check(&job.r#type, version.as_ref(), &job.args) {
        Check::Passed => Ok(()),
        Check::Warned(warnings) => {
            for w in &warnings {
                tracing::info!(job_type = %job.r#type, warning = %w, "job accepted with a schema warning");
            }
            job.schema_warnings = warnings;
            Ok(())
        }
        Check::Failed { schema, violations } => Err(Error::Rejected {
            index,
            rejection: Rejection::SchemaMismatch { schema, violations },
        }),
    }
}

/// [`insert_jobs`] in `tx`, then the admission of the jobs' tenants ([`admit_tenants`]).
async fn insert_admitted(
    tx: &mut sqlx::PgConnection,
    jobs: &[NewJob],
    strict_queues: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    let rows = insert_jobs(&mut *tx, jobs, strict_queues).await?;
    admit_tenants(tx, jobs).await?;
    Ok(rows)
}

/// [`store::job::insert_many`] without hand-offs, counting the queues it created.
pub(super) async fn insert_jobs(
    db: impl sqlx::PgExecutor<'_>,
    jobs: &[NewJob],
    strict_queues: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    insert_handing(db, jobs, strict_queues, Handoffs::default()).await
}

/// [`store::job::insert_many`], counting the queues it created.
async fn insert_handing(
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
struct PushWriter {
    db: PgPool,
    /// Where the group's statement runs.
    hot: HotConnections,
    strict_queues: bool,
    configs: Arc<Configs>,
    waiters: Arc<Waiters>,
    default_visibility_timeout_ms: i64,
    /// Maintenance mode: nothing is handed to parked FETCHes while it is in force.
    hold: SystemHold,
}

/// A parked FETCH taken for jobs of a group, and which jobs (by index) are written for it.
struct Handing {
    taken: Taken,
    queue: String,
    jobs: Vec<usize>,
}

impl PushWriter {
    /// Writes a group of single-job PUSH requests in one statement. When that fails (a
    /// client-chosen id taken, or two requests naming the same id), each job is written alone,
    /// so each request gets the outcome it would have had by itself (and no job of the group is
    /// handed off).
    async fn flush(self: Arc<Self>, jobs: Vec<NewJob>) -> Vec<Result<Job>> {
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
                conn.answered(&written);
                written
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
                Err(gone) => super::fetch::give_back(&self.db, &gone).await,
            }
        }
    }
}
