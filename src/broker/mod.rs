//! The OJS operations — PUSH, INFO, CANCEL, ACTIVATE, FETCH, ACK, FAIL (NACK), BEAT, the
//! worker protocol, the dead-letter queue and the event log — on top of the store.
//!
//! HTTP handlers parse and validate requests, call one operation here and render its result.
//! An operation runs its statements (in one transaction when it needs several to be atomic)
//! and turns "nothing matched" into the precise reason: not found, wrong state, wrong owner.

mod admin;
pub mod configs;
mod dead_letter;
pub mod dispatch;
mod group;
pub mod pools;
mod queues;
pub mod scheduling;
mod workers;

pub use admin::{AdminQueue, AdminQueueDetail, BulkAction, BulkOutcome, RECENT_WINDOW};
pub use configs::Snapshot as QueueConfigs;
pub use dispatch::{MAX_WEIGHT, Strategy, Weights, parse_weights_setting};
pub use queues::{DeleteStrategy, Deleted, Queue, QueueStats};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::job::envelope::{Limits, NewJob};
use crate::job::failure::{self, JobError, Outcome, Reclaim};
use crate::job::retry::RetryPolicy;
use crate::job::unique::OnConflict;
use crate::job::{Job, JobId, JobState};
use crate::notifier::Announcer;
use crate::pool::Pool;
use crate::store;
use crate::store::job::{ClaimParams, CompleteParams, FailParams, FailTarget};
use crate::store::queue::QueueRefusal;
use crate::telemetry;
use crate::timestamp::ClientTime;
use configs::{Configs, Snapshot};
use dispatch::{Guarantee, Plan};
use group::GroupCommit;

/// Due scheduled/retryable jobs a FETCH promotes per queue kind and call (the promoter
/// service handles the rest of a large backlog).
const FETCH_PROMOTE_LIMIT: i64 = 1_000;

/// A fetching worker's `last_seen_at` is written at most this often per worker and process.
const SEEN_WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// Settings of the broker operations.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Envelope validation limits and defaults.
    pub limits: Limits,
    /// Reservation length when neither the fetch nor the job names one, in milliseconds.
    pub default_visibility_timeout_ms: i64,
    /// How often a long-polling fetch polls even without a notification.
    pub fetch_poll_interval: Duration,
    /// A worker without a heartbeat for this long is stale.
    pub heartbeat_timeout: Duration,
    /// Whether the test-only directive hook (contract §6.5) is on.
    pub test_hooks: bool,
    /// Queue consumption strategy imposed on every FETCH (`None`: the FETCH chooses).
    pub fetch_strategy: Option<Strategy>,
    /// Queue weights imposed on every weighted FETCH (`None`: the FETCH's own).
    pub queue_weights: Option<Weights>,
    /// Enqueues to a queue that does not exist are refused instead of creating it.
    pub strict_queues: bool,
}

/// Flusher tasks per group-commit queue: enough to keep a statement in flight while the next
/// group forms, few enough to leave the pool's connections to everything else.
const GROUP_FLUSHERS: usize = 2;

/// Most single-job PUSH requests written by one statement.
const PUSH_GROUP_MAX: usize = 256;

/// Jobs above this size (`args` + `meta`) are written alone, so a group stays a few MiB at most.
const PUSH_GROUP_MAX_JOB_BYTES: usize = 16 * 1024;

/// Most ACKs written by one statement.
const ACK_GROUP_MAX: usize = 512;

/// The broker: a pool, settings, the availability announcer and the group-commit queues.
#[derive(Debug, Clone)]
pub struct Broker {
    pool: PgPool,
    settings: Settings,
    /// Wakes long polls here at once and tells other replicas (after commit).
    announcer: Announcer,
    /// Single-job PUSH requests, written together (see [`group`]).
    pushes: Arc<GroupCommit<NewJob, Result<Job>>>,
    /// ACK requests, written together.
    acks: Arc<GroupCommit<AckItem, Result<Option<Job>>>>,
    /// Fetching workers recently recorded as seen (so FETCH writes `last_seen_at` rarely),
    /// with the fetch defaults they registered.
    seen_workers: Arc<Mutex<HashMap<String, (Instant, FetchDefaults)>>>,
    /// Resolved queue configurations.
    configs: Arc<Configs>,
    /// When this process last recorded `queue.full` per queue.
    full_events: Arc<Mutex<HashMap<String, Instant>>>,
    /// State of the strategies and starvation guarantees.
    dispatcher: Arc<dispatch::Dispatcher>,
    /// Dispatch counts, backlog depths and overload events of fair scheduling.
    scheduling: Arc<scheduling::Scheduling>,
}

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

/// Who is pushing, and how long they may wait for room (contract §1.3).
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

/// How often a PUSH blocked on a full queue looks for room again.
const BLOCK_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Whether a write failed because the jobs were prepared with an outdated configuration.
fn is_stale_config(e: &Error) -> bool {
    matches!(e, Error::Database(db)
        if matches!(store::queue::queue_refusal(db), Some((QueueRefusal::StaleConfig, _))))
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
                let raw = crate::json::raw(merged);
                job.retry = RetryPolicy::parse(&raw, "$.retry").map_err(|v| Error::Rejected {
                    index,
                    rejection: crate::job::envelope::Rejection::InvalidRetry(v),
                })?;
            }
            Ok(job)
        })
        .collect()
}

/// A FETCH request, validated.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Queues in order of preference (deduplicated).
    pub queues: Vec<String>,
    /// Jobs wanted, 1..=1000.
    pub count: usize,
    pub worker_id: Option<String>,
    pub visibility_timeout_ms: Option<i64>,
    /// How long to wait for work when none is available right away.
    pub wait: Duration,
    /// How the slots are spread over the queues, when the request says.
    pub strategy: Option<Strategy>,
    /// Queue weights of the `weighted` strategy, when the request gives them.
    pub weights: Option<Weights>,
}

/// What a worker registered with that its FETCHes use: its pool and capacity, and the
/// strategy and weights for when no pool configuration applies (contract §4.3.5).
#[derive(Debug, Clone, Default)]
struct FetchDefaults {
    strategy: Option<Strategy>,
    weights: Option<Weights>,
    pool: Option<String>,
    concurrency: Option<i32>,
}

impl FetchDefaults {
    /// From the stored registration.
    fn from_stored(r: store::worker::Registration) -> FetchDefaults {
        FetchDefaults {
            strategy: r.strategy.and_then(|s| s.parse().ok()),
            weights: r.weights.and_then(|w| Weights::from_json(&w)),
            pool: r.pool,
            concurrency: r.concurrency,
        }
    }
}

/// The pool that applies to workers that name none (contract §5.8).
pub const DEFAULT_POOL: &str = "default";

/// Jobs a worker runs at once when it did not say (`least-loaded`, contract §4.3.1).
const DEFAULT_WORKER_CONCURRENCY: i64 = 10;

/// How one FETCH is served once the server's configuration is applied (contract §4.3.1 steps
/// 2–5): the governing pool, the queues (with weights) and how slots spread over them.
#[derive(Debug, Clone)]
struct Route {
    pool: Option<Arc<Pool>>,
    queues: Vec<(String, u32)>,
    strategy: Strategy,
    guarantee: Option<Guarantee>,
}

impl Route {
    fn pool_name(&self) -> Option<&str> {
        self.pool.as_deref().map(|p| p.name.as_str())
    }

    fn queue_names(&self) -> Vec<String> {
        self.queues.iter().map(|(q, _)| q.clone()).collect()
    }
}

/// A NACK request, validated.
#[derive(Debug, Clone)]
pub struct NackRequest {
    pub job_id: JobId,
    pub worker_id: Option<String>,
    /// The reported error (optional only with `requeue`).
    pub error: Option<JobError>,
    pub requeue: bool,
}

/// What a NACK did.
#[derive(Debug, Clone)]
pub struct Nacked {
    pub job: Job,
    /// Whether the job went to the dead-letter queue.
    pub dead_lettered: bool,
}

/// Result of a CANCEL.
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub job: Job,
    /// The state the job was cancelled from (`cancelled` when it already was).
    pub previous_state: JobState,
}

/// One queued ACK.
#[derive(Debug)]
struct AckItem {
    id: JobId,
    worker_id: Option<String>,
    result: Option<String>,
}

impl Broker {
    /// A broker on `pool`. Starts the group-commit flushers, so it must be called within a Tokio
    /// runtime; `announcer`'s task must run for other replicas to hear of new jobs.
    pub fn new(pool: PgPool, settings: Settings, announcer: Announcer) -> Broker {
        let push_pool = pool.clone();
        let strict_queues = settings.strict_queues;
        let pushes = GroupCommit::spawn(GROUP_FLUSHERS, PUSH_GROUP_MAX, move |jobs| {
            flush_pushes(push_pool.clone(), jobs, strict_queues)
        });
        let ack_pool = pool.clone();
        let acks = GroupCommit::spawn(GROUP_FLUSHERS, ACK_GROUP_MAX, move |acks| {
            flush_acks(ack_pool.clone(), acks)
        });
        Broker {
            pool,
            settings,
            announcer,
            pushes: Arc::new(pushes),
            acks: Arc::new(acks),
            seen_workers: Arc::default(),
            dispatcher: Arc::default(),
            scheduling: Arc::default(),
            configs: Arc::default(),
            full_events: Arc::default(),
        }
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The broker's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// PUSH: applies the queues' configuration to validated jobs (access rules and defaults),
    /// writes them atomically (all or none) and returns them in request order. A queue at its
    /// bound refuses, drops its oldest waiting jobs, or is waited on, per its overflow policy.
    pub async fn push(&self, jobs: Vec<NewJob>, ctx: &PushContext) -> Result<PushResult> {
        let deadline = Instant::now() + ctx.block_timeout;
        let mut stale = 0;
        loop {
            let configs = self.configs.current(&self.pool).await?;
            let prepared = prepare(&jobs, &configs, ctx, &self.settings.limits)?;
            let result = match self.write_pushed(&prepared, None).await {
                Err(Error::QueueFull { policy, .. }) if policy == "drop_oldest" => {
                    self.push_dropping_oldest(&prepared).await
                }
                other => other,
            };
            match result {
                Err(e) if is_stale_config(&e) && stale < 3 => {
                    stale += 1;
                    self.configs.reload(&self.pool).await?;
                }
                Err(Error::QueueFull { ref policy, .. })
                    if policy == "block" && Instant::now() < deadline =>
                {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(left.min(BLOCK_POLL_INTERVAL)).await;
                }
                Err(Error::QueueFull {
                    ref queue,
                    depth,
                    bound,
                    ref policy,
                    ..
                }) => {
                    self.queue_full(queue, depth, bound, policy, &jobs).await;
                    return Err(result.expect_err("matched an error"));
                }
                Ok(jobs) => {
                    let mut out = PushResult {
                        jobs,
                        pressure: None,
                    };
                    self.after_push(&mut out, &configs).await;
                    return Ok(out);
                }
                Err(e) => return Err(e),
            }
        }
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
        let created = |rows: Vec<Job>| {
            rows.into_iter()
                .map(|job| Pushed {
                    job,
                    outcome: PushOutcome::Created,
                })
                .collect()
        };
        let result = if let Some(tx) = tx {
            insert_jobs(tx, jobs, self.settings.strict_queues)
                .await
                .map(created)
                .map_err(Error::from)
        } else if jobs.iter().any(|j| j.unique.is_some()) {
            self.push_unique(jobs, batch).await
        } else if let [job] = jobs
            && job.args.len() + job.meta.len() <= PUSH_GROUP_MAX_JOB_BYTES
        {
            match self.pushes.submit(job.clone()).await {
                Some(outcome) => outcome.map(|job| created(vec![job])),
                None => Err(Error::Database(sqlx::Error::PoolClosed)),
            }
        } else {
            insert_jobs(&self.pool, jobs, self.settings.strict_queues)
                .await
                .map(created)
                .map_err(Error::from)
        };
        match result {
            Err(Error::Database(e))
                if let Some((refusal, queue)) = store::queue::queue_refusal(&e) =>
            {
                Err(match refusal {
                    QueueRefusal::Draining => Error::QueueDraining {
                        queue,
                        operation: "enqueue into",
                    },
                    QueueRefusal::Unknown => Error::UnknownQueue(queue),
                    QueueRefusal::Full(o) => Error::QueueFull {
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
                    QueueRefusal::StaleConfig => Error::Database(e),
                })
            }
            // A client-supplied id is taken (possibly by a concurrent request).
            Err(Error::Database(e)) if is_violation(&e, "ojs_job_pkey") => {
                Err(self.duplicate_id_error(jobs, batch, e).await)
            }
            other => other,
        }
    }

    /// After a successful PUSH: metrics, wakeups for the queues that gained available jobs,
    /// and the pressure of bounded queues (their depth against `warning_threshold`).
    async fn after_push(&self, pushed: &mut PushResult, configs: &Snapshot) {
        let new_jobs = || {
            pushed
                .jobs
                .iter()
                .filter(|p| p.outcome == PushOutcome::Created)
                .map(|p| &p.job)
        };
        telemetry::jobs_enqueued(new_jobs());
        let mut added: Vec<(&str, usize, usize)> = Vec::new();
        for job in new_jobs() {
            let available = usize::from(job.state == JobState::Available);
            match added.iter_mut().find(|(q, _, _)| *q == job.queue) {
                Some((_, n, a)) => {
                    *n += 1;
                    *a += available;
                }
                None => added.push((&job.queue, 1, available)),
            }
        }
        let mut pressure = None;
        for (queue, jobs, available) in added {
            if available > 0 {
                self.announcer.announce(queue, available);
            }
            let config = configs.of(queue);
            let Some(bound) = config.max_size else {
                continue;
            };
            // The counter as of now (other enqueues may have added to it meanwhile).
            let Ok(Some((depth, _))) = store::queue::capacity(&self.pool, queue).await else {
                continue;
            };
            let ratio = depth as f64 / bound as f64;
            telemetry::queue_pressure(queue, depth, bound);
            let before = (depth - jobs as i64) as f64 / bound as f64;
            if ratio >= config.warning_threshold && before < config.warning_threshold {
                let data = serde_json::json!({"queue": queue, "depth": depth, "bound": bound});
                if let Err(e) = store::event::insert_queue_event(
                    &self.pool,
                    "backpressure.warning",
                    queue,
                    &data,
                )
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

    /// After a PUSH refused for a full queue: `queue.full` and `backpressure.rejected`
    /// (at most one pair per queue per second from this process) and the metrics.
    async fn queue_full(&self, queue: &str, depth: i64, bound: i64, policy: &str, jobs: &[NewJob]) {
        telemetry::queue_overflow(queue, policy);
        let now = Instant::now();
        {
            let mut last = self.full_events.lock().expect("full-events lock");
            if last
                .get(queue)
                .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(1))
            {
                return;
            }
            if last.len() > 10_000 {
                last.clear();
            }
            last.insert(queue.to_owned(), now);
        }
        let job_type = jobs
            .iter()
            .find(|j| j.queue == queue)
            .map(|j| j.r#type.as_str());
        let full = serde_json::json!({"queue": queue, "depth": depth, "bound": bound});
        let rejected = serde_json::json!({"queue": queue, "depth": depth, "bound": bound, "job_type": job_type});
        for (kind, data) in [("queue.full", &full), ("backpressure.rejected", &rejected)] {
            if let Err(e) = store::event::insert_queue_event(&self.pool, kind, queue, data).await {
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
        let mut tx = self.pool.begin().await?;
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
                store::queue::drop_oldest(&mut tx, queue, incoming.len() as i64, bytes).await?;
            dropped.append(&mut freed);
        }
        let result = self.write_pushed(jobs, Some(&mut tx)).await;
        match result {
            Ok(pushed) => {
                tx.commit().await?;
                for (queue, job_type) in &dropped {
                    telemetry::queue_overflow(queue, "drop_oldest");
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
                policy: "drop_oldest".to_owned(),
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
        let existing: HashSet<Uuid> = match store::job::existing_ids(&self.pool, &supplied).await {
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

    /// PUSH when some jobs carry a unique policy: checks and writes under per-key locks.
    async fn push_unique(&self, jobs: &[NewJob], batch: bool) -> Result<Vec<Pushed>> {
        let mut tx = self.pool.begin().await?;
        let keys: Vec<&str> = jobs
            .iter()
            .filter_map(|j| j.unique.as_ref().map(|u| u.key.as_str()))
            .collect();
        store::job::lock_unique_keys(&mut *tx, &keys).await?;
        // A replacement in place may move a job to a queue that has no row yet (new jobs
        // register theirs as they are inserted). Strict queues are never created this way.
        if !self.settings.strict_queues {
            let mut queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
            queues.sort_unstable();
            queues.dedup();
            for queue in queues {
                crate::telemetry::queues_created(i64::from(
                    store::queue::ensure(&mut *tx, queue, true).await?,
                ));
            }
        }
        let (candidates, now) = store::job::unique_candidates(&mut *tx, &keys).await?;

        enum Plan {
            Create,
            Existing(Job, PushOutcome),
            /// Unique `ignore` against an earlier job of the same request: answered with it.
            SameAs(usize),
            ReplaceInPlace(Job),
            CancelThenCreate(Job),
        }
        let mut plans: Vec<Plan> = Vec::with_capacity(jobs.len());
        // Unique keys taken by earlier jobs of this request.
        let mut planned: HashMap<&str, usize> = HashMap::new();
        for (index, job) in jobs.iter().enumerate() {
            let index_hint = batch.then_some(index);
            let Some(unique) = &job.unique else {
                plans.push(Plan::Create);
                continue;
            };
            if let Some(&earlier) = planned.get(unique.key.as_str()) {
                let earlier_state = initial_state(&jobs[earlier]);
                if unique.policy.states.contains(&earlier_state) {
                    if unique.policy.on_conflict == OnConflict::Ignore {
                        plans.push(Plan::SameAs(earlier));
                        continue;
                    }
                    // Rejected, and replacing a job created by the same request is refused too.
                    return Err(Error::DuplicateUnique {
                        existing: jobs[earlier].id,
                        existing_state: earlier_state,
                        unique_key: unique.key.clone(),
                        index: index_hint,
                    });
                }
            }
            let duplicate = candidates
                .iter()
                .filter(|c| c.unique_key.as_deref() == Some(unique.key.as_str()))
                .filter(|c| unique.policy.states.contains(&c.state))
                .filter(|c| match (unique.policy.period_ms, now) {
                    (Some(period), Some(now)) => {
                        c.created_at + chrono::Duration::milliseconds(period as i64) > now
                    }
                    _ => true,
                })
                .max_by_key(|c| c.created_at);
            let plan = match duplicate {
                None => Plan::Create,
                Some(existing) => {
                    let reject = || Error::DuplicateUnique {
                        existing: existing.id,
                        existing_state: existing.state,
                        unique_key: unique.key.clone(),
                        index: index_hint,
                    };
                    match unique.policy.on_conflict {
                        OnConflict::Reject => return Err(reject()),
                        OnConflict::Ignore => {
                            let mut kept = existing.clone();
                            if unique.policy.upgrade_priority
                                && job.priority < existing.priority
                                && let Some(raised) = store::job::set_priority(
                                    &mut *tx,
                                    existing.id,
                                    job.priority,
                                    true,
                                )
                                .await?
                                .and_then(|change| change.job)
                            {
                                kept = raised;
                            }
                            Plan::Existing(kept, PushOutcome::Deduplicated)
                        }
                        // A running job is never replaced under the worker's feet.
                        _ if existing.state == JobState::Active => return Err(reject()),
                        OnConflict::ReplaceExceptSchedule
                            if existing.state == JobState::Scheduled =>
                        {
                            Plan::ReplaceInPlace(existing.clone())
                        }
                        OnConflict::Replace | OnConflict::ReplaceExceptSchedule => {
                            if existing.state.is_terminal() {
                                // Nothing to cancel: a finished job only blocks while in `states`.
                                Plan::Create
                            } else {
                                Plan::CancelThenCreate(existing.clone())
                            }
                        }
                    }
                }
            };
            if matches!(plan, Plan::Create | Plan::CancelThenCreate(_)) {
                planned.insert(unique.key.as_str(), index);
            }
            plans.push(plan);
        }

        let to_cancel: Vec<Uuid> = plans
            .iter()
            .filter_map(|p| match p {
                Plan::CancelThenCreate(existing) => Some(existing.id.0),
                _ => None,
            })
            .collect();
        if !to_cancel.is_empty() {
            let cancelled = store::job::cancel_replaced(&mut *tx, &to_cancel).await?;
            if cancelled.len() != to_cancel.len() {
                // A replaced job was claimed meanwhile (it is active now): keep it, refuse.
                let done: HashSet<Uuid> = cancelled.iter().map(|j| j.id.0).collect();
                let (index, existing) = plans
                    .iter()
                    .enumerate()
                    .find_map(|(i, p)| match p {
                        Plan::CancelThenCreate(e) if !done.contains(&e.id.0) => Some((i, e)),
                        _ => None,
                    })
                    .expect("a job that was not cancelled is among the planned ones");
                return Err(Error::DuplicateUnique {
                    existing: existing.id,
                    existing_state: JobState::Active,
                    unique_key: existing.unique_key.clone().unwrap_or_default(),
                    index: batch.then_some(index),
                });
            }
        }

        let mut replaced: HashMap<usize, Job> = HashMap::new();
        let mut create_indexes: Vec<usize> = Vec::new();
        for (index, plan) in plans.iter().enumerate() {
            match plan {
                Plan::Create | Plan::CancelThenCreate(_) => create_indexes.push(index),
                Plan::ReplaceInPlace(existing) => {
                    match store::job::replace_scheduled(&mut *tx, existing.id, &jobs[index]).await?
                    {
                        Some(job) => {
                            replaced.insert(index, job);
                        }
                        // Promoted meanwhile: replace it like any available job.
                        None => {
                            let cancelled =
                                store::job::cancel_replaced(&mut *tx, &[existing.id.0]).await?;
                            if cancelled.is_empty() {
                                return Err(Error::DuplicateUnique {
                                    existing: existing.id,
                                    existing_state: JobState::Active,
                                    unique_key: existing.unique_key.clone().unwrap_or_default(),
                                    index: batch.then_some(index),
                                });
                            }
                            create_indexes.push(index);
                        }
                    }
                }
                Plan::Existing(..) | Plan::SameAs(_) => {}
            }
        }
        create_indexes.sort_unstable();
        let to_create: Vec<NewJob> = create_indexes.iter().map(|&i| jobs[i].clone()).collect();
        let created = insert_jobs(&mut *tx, &to_create, self.settings.strict_queues).await?;
        tx.commit().await?;

        let created: HashMap<usize, Job> = create_indexes.into_iter().zip(created).collect();
        let out = plans
            .into_iter()
            .enumerate()
            .map(|(index, plan)| match plan {
                Plan::Existing(job, outcome) => Pushed { job, outcome },
                Plan::SameAs(earlier) => Pushed {
                    job: created[&earlier].clone(),
                    outcome: PushOutcome::Deduplicated,
                },
                Plan::ReplaceInPlace(_) if replaced.contains_key(&index) => Pushed {
                    job: replaced.remove(&index).expect("checked"),
                    outcome: PushOutcome::ReplacedInPlace,
                },
                _ => Pushed {
                    job: created[&index].clone(),
                    outcome: PushOutcome::Created,
                },
            })
            .collect();
        Ok(out)
    }

    /// INFO: one job.
    pub async fn info(&self, id: JobId) -> Result<Job> {
        store::job::get(&self.pool, id)
            .await?
            .ok_or(Error::JobNotFound(id))
    }

    /// CANCEL: any non-terminal job (an active one included) becomes `cancelled`; cancelling a
    /// cancelled job again succeeds and changes nothing.
    pub async fn cancel(&self, id: JobId) -> Result<Cancelled> {
        let error = JobError::server("cancelled", "The job was cancelled while it was running.");
        if let Some((job, previous_state)) =
            store::job::cancel(&self.pool, id, &error.to_json()).await?
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

    /// Changes the priority of an `available` or `scheduled` job (priority extension §8.1):
    /// returns the job and its previous priority. Setting the priority it already has succeeds
    /// and records nothing.
    pub async fn set_priority(&self, id: JobId, priority: i32) -> Result<(Job, i32)> {
        let change = store::job::set_priority(&self.pool, id, priority, false)
            .await?
            .ok_or(Error::JobNotFound(id))?;
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
                telemetry::priority_changed(&job);
                Ok((job, change.previous))
            }
            // Same priority as before: nothing to write.
            None => Ok((self.info(id).await?, change.previous)),
        }
    }

    /// ACTIVATE: `pending` → `available`.
    pub async fn activate(&self, id: JobId) -> Result<Job> {
        if let Some(job) = store::job::activate(&self.pool, id).await? {
            return Ok(job);
        }
        let job = self.info(id).await?;
        Err(Error::InvalidTransition {
            job_id: id,
            operation: "activate",
            current: job.state,
            allowed: &[JobState::Pending],
        })
    }

    /// FETCH: claims up to `count` jobs from the queues the request (or the worker's pool)
    /// names, spread by the effective strategy, waiting up to `wait` for work when none is
    /// available. Returns early (empty) on `shutdown`.
    pub async fn fetch(
        &self,
        req: &FetchRequest,
        shutdown: &CancellationToken,
    ) -> Result<Vec<Job>> {
        // Subscribe before the first attempt so a job enqueued in between still wakes us.
        let mut wakeups = (!req.wait.is_zero()).then(|| self.announcer.notifier().subscribe());
        let deadline = Instant::now() + req.wait;
        let mut queues = req.queues.clone();
        loop {
            let (jobs, route) = self.try_fetch(req).await?;
            if let Some(route) = route {
                queues = route.queue_names();
            }
            let now = Instant::now();
            if !jobs.is_empty() || now >= deadline || shutdown.is_cancelled() {
                return Ok(jobs);
            }
            let Some(rx) = wakeups.as_mut() else {
                return Ok(jobs);
            };
            let poll_at = (now + self.settings.fetch_poll_interval).min(deadline);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(Vec::new()),
                    () = tokio::time::sleep_until(poll_at) => break,
                    wakeup = rx.recv() => match wakeup {
                        Ok(w) if !w.take_for(&queues) => continue,
                        // Relevant, lagged (missed some) or closed: poll now.
                        _ => break,
                    },
                }
            }
        }
    }

    /// One attempt of a FETCH, with the route it took (`None`: the worker may take nothing
    /// now).
    ///
    /// Due scheduled and retryable jobs become available through the promoter (every
    /// `OJS_PROMOTE_INTERVAL_MS`, with `enqueued_at` = their due time, so they keep their FIFO
    /// place) or here: a fetch that finds fewer jobs than it wants promotes its queues' due jobs
    /// and claims again, so a job is never missed once due. A fetch that is served at once
    /// costs one statement per queue asked.
    async fn try_fetch(&self, req: &FetchRequest) -> Result<(Vec<Job>, Option<Route>)> {
        let registered = match &req.worker_id {
            Some(worker) => self.record_seen(worker).await?,
            None => FetchDefaults::default(),
        };
        let configs = self.configs.current(&self.pool).await?;
        let route = self.route(req, &registered, &configs)?;
        if route.queues.is_empty() {
            return Ok((Vec::new(), Some(route)));
        }
        let mut wanted = req.count;
        if route.strategy == Strategy::LeastLoaded
            && let Some(worker) = &req.worker_id
        {
            let capacity = registered
                .concurrency
                .map_or(DEFAULT_WORKER_CONCURRENCY, i64::from);
            let active = store::worker::active_jobs(&self.pool, worker).await?;
            wanted = wanted.min(usize::try_from(capacity - active).unwrap_or(0));
            if wanted == 0 {
                return Ok((Vec::new(), Some(route)));
            }
        }
        let names = route.queue_names();
        let queues: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut jobs = self.claim_routed(req, &route, wanted, Vec::new()).await?;
        if jobs.len() < wanted {
            // Claim again even when this promoted nothing: the promoter may have made the due
            // jobs available between the claim above and this promotion, and they are owed to
            // this FETCH as much as the ones promoted here.
            store::job::promote_due(&self.pool, Some(&queues), None, FETCH_PROMOTE_LIMIT).await?;
            jobs = self.claim_routed(req, &route, wanted, jobs).await?;
        }
        // A claim returns rows in no particular order: by queue preference, then dispatch order.
        let rank = |queue: &str| queues.iter().position(|q| *q == queue);
        jobs.sort_by_cached_key(|job| (rank(&job.queue), job.dispatch_key()));
        telemetry::jobs_started(&jobs);
        telemetry::jobs_dispatched(&jobs, route.pool_name().unwrap_or(DEFAULT_POOL));
        self.scheduling
            .record(&jobs, route.pool_name().unwrap_or(""));
        Ok((jobs, Some(route)))
    }

    /// Applies the server's configuration to a FETCH (contract §4.3.1 step 2): the worker's
    /// pool (or the `default` pool for a worker without one) replaces the request's queues,
    /// strategy, weights and starvation settings; otherwise the server-wide strategy and
    /// weights, else the request's, else those the worker registered with, else `strict`.
    /// Queues of isolated pools are dropped for everyone but their members.
    fn route(
        &self,
        req: &FetchRequest,
        registered: &FetchDefaults,
        configs: &Snapshot,
    ) -> Result<Route> {
        let pool = configs
            .pool(registered.pool.as_deref().unwrap_or(DEFAULT_POOL))
            .cloned();
        let mut route = match &pool {
            Some(p) => Route {
                queues: p
                    .queues
                    .iter()
                    .map(|q| {
                        let weight = match p.strategy {
                            Strategy::Weighted => p.weight(q),
                            _ => 1,
                        };
                        (q.clone(), weight)
                    })
                    .collect(),
                strategy: p.strategy,
                guarantee: p.starvation.enabled.then(|| Guarantee {
                    window: Duration::from_millis(p.starvation.rotation_interval_ms),
                    min_ratio: p.starvation.min_dispatch_ratio,
                }),
                pool: pool.clone(),
            },
            None => {
                if req.queues.is_empty() {
                    return Err(Error::invalid(
                        "$.queues",
                        "'queues' is required unless the worker belongs to a configured pool",
                    ));
                }
                let no_weights = Weights::default();
                let weights = (self.settings.queue_weights.as_ref())
                    .or(req.weights.as_ref())
                    .or(registered.weights.as_ref())
                    .unwrap_or(&no_weights);
                let strategy = (self.settings.fetch_strategy)
                    .or(req.strategy)
                    .or(registered.strategy)
                    .unwrap_or_default();
                Route {
                    queues: req
                        .queues
                        .iter()
                        .map(|q| {
                            let weight = match strategy {
                                Strategy::Weighted => weights.of(q),
                                _ => 1,
                            };
                            (q.clone(), weight)
                        })
                        .collect(),
                    strategy,
                    guarantee: None,
                    pool: None,
                }
            }
        };
        let member_of = route.pool_name().map(str::to_owned);
        route
            .queues
            .retain(|(q, _)| configs.serves(q, member_of.as_deref()));
        Ok(route)
    }

    /// Adds to `jobs` what the FETCH still wants (up to `wanted`) from the route's queues.
    /// Within a queue every strategy takes jobs in dispatch order (priority, then time
    /// available, or the tenant-fair order). Workflow steps (priority extension §9.2), when
    /// workflows exist, are created through PUSH with the root's priority unless they set their
    /// own, and so need nothing here.
    async fn claim_routed(
        &self,
        req: &FetchRequest,
        route: &Route,
        wanted: usize,
        mut jobs: Vec<Job>,
    ) -> Result<Vec<Job>> {
        let preference: Option<Vec<usize>> = if route.strategy == Strategy::LeastLoaded {
            // The deepest backlog first (seed 002 §7.2).
            let names = route.queue_names();
            let depths = self.scheduling.depths(&self.pool, &names).await?;
            let mut order: Vec<usize> = (0..names.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(depths[i]));
            Some(order)
        } else {
            None
        };
        let pool = route.pool.as_deref();
        if route.guarantee.is_none()
            && matches!(route.strategy, Strategy::Strict | Strategy::LeastLoaded)
        {
            let order: Vec<usize> = preference
                .clone()
                .unwrap_or_else(|| (0..route.queues.len()).collect());
            for i in order {
                let left = wanted - jobs.len();
                if left == 0 {
                    break;
                }
                let mut claimed = self
                    .claim(self.claim_params(req, &route.queues[i].0, left, pool), pool)
                    .await?;
                jobs.append(&mut claimed);
            }
            return Ok(jobs);
        }
        let plan = Plan {
            scope: route.pool_name().unwrap_or(""),
            queues: &route.queues,
            strategy: route.strategy,
            guarantee: route.guarantee,
            preference: preference.as_deref(),
        };
        let mut open = vec![true; route.queues.len()];
        while jobs.len() < wanted {
            let given = self.dispatcher.reserve(&plan, &open, wanted - jobs.len());
            if given.iter().all(|n| *n == 0) {
                break;
            }
            for (index, slots) in given.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                let claimed = self
                    .claim(
                        self.claim_params(req, &route.queues[index].0, slots, pool),
                        pool,
                    )
                    .await;
                let mut claimed = match claimed {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.dispatcher.release(&plan, &open, index, slots);
                        return Err(e.into());
                    }
                };
                if claimed.len() < slots {
                    open[index] = false;
                    self.dispatcher
                        .release(&plan, &open, index, slots - claimed.len());
                }
                jobs.append(&mut claimed);
            }
        }
        Ok(jobs)
    }

    /// Claims from one queue for a member of `pool` (if any). A pool with a `concurrency`
    /// and a queue with dispatch limits (`concurrency`, `rate_limit`) are claimed from under
    /// their dispatch locks, shared by every replica (the pool's first, always in that order),
    /// and never beyond what their limits leave: jobs that cannot start now stay available.
    async fn claim(
        &self,
        params: ClaimParams<'_>,
        pool: Option<&Pool>,
    ) -> Result<Vec<Job>, sqlx::Error> {
        let configs = self.configs.current(&self.pool).await?;
        let config = configs.of(params.queue);
        let fair = configs.is_tenant_fair(params.queue);
        let pool_limit = pool.and_then(|p| p.concurrency.map(|c| (p, i64::from(c))));
        if !config.limits_dispatch() && pool_limit.is_none() {
            let mut conn = self.pool.acquire().await?;
            return claim_rows(&mut conn, params, fair).await;
        }
        let mut tx = self.pool.begin().await?;
        let mut allowed = params.limit;
        if let Some((pool, limit)) = pool_limit {
            store::queue::lock_dispatch(&mut tx, &format!("pool:{}", pool.name)).await?;
            let active = store::pool::active_jobs(&mut *tx, &pool.name).await?;
            allowed = allowed.min(limit - active);
            if allowed <= 0 {
                drop(tx);
                self.pool_overloaded(pool, active).await;
                return Ok(Vec::new());
            }
        }
        let mut started_at = None;
        let mut rate = None;
        if config.limits_dispatch() {
            let queue = params.queue;
            let rate_key = format!("queue:{queue}");
            let period_ms = config
                .rate_limit
                .map_or(0, |r| i64::try_from(r.period_ms).unwrap_or(i64::MAX));
            store::queue::lock_dispatch(&mut tx, queue).await?;
            let (active, started, now) =
                store::queue::dispatch_usage(&mut tx, queue, &rate_key, period_ms).await?;
            if let Some(concurrency) = config.concurrency {
                allowed = allowed.min(concurrency - active);
            }
            if let Some(limit) = config.rate_limit {
                allowed = allowed.min(limit.limit - started);
                rate = Some((rate_key, period_ms));
            }
            started_at = Some(now);
        }
        if allowed <= 0 {
            return Ok(Vec::new());
        }
        let jobs = claim_rows(
            &mut tx,
            ClaimParams {
                limit: allowed,
                started_at: started_at.or(params.started_at),
                ..params
            },
            fair,
        )
        .await?;
        if let (Some((rate_key, period_ms)), Some(now)) = (rate, started_at)
            && !jobs.is_empty()
        {
            let n = i32::try_from(jobs.len()).unwrap_or(i32::MAX);
            store::queue::record_starts(&mut tx, &rate_key, n, now, period_ms).await?;
        }
        tx.commit().await?;
        Ok(jobs)
    }

    /// A member's FETCH found its pool at its concurrency: `scheduling.pool_overloaded` (at
    /// most every few seconds per pool and process) when the pool's queues have work waiting.
    async fn pool_overloaded(&self, pool: &Pool, active: i64) {
        if !self.scheduling.overload_event_due(&pool.name) {
            return;
        }
        let waiting = match store::pool::available(&self.pool, &pool.queues, 10_000).await {
            Ok(rows) => rows.iter().map(|r| r.1).sum::<i64>(),
            Err(e) => {
                tracing::warn!(error = %e, pool = %pool.name, "could not count a pool's waiting jobs");
                return;
            }
        };
        if waiting == 0 {
            return;
        }
        let data = serde_json::json!({
            "pool": pool.name, "active_jobs": active, "waiting_jobs": waiting,
            "concurrency": pool.concurrency,
        });
        if let Err(e) = store::event::insert_subject_event(
            &self.pool,
            "scheduling.pool_overloaded",
            &pool.name,
            &data,
        )
        .await
        {
            tracing::warn!(error = %e, pool = %pool.name, "could not record scheduling.pool_overloaded");
        }
    }

    /// The claim of `limit` jobs of `queue` for `req`.
    fn claim_params<'a>(
        &'a self,
        req: &'a FetchRequest,
        queue: &'a str,
        limit: usize,
        pool: Option<&'a Pool>,
    ) -> ClaimParams<'a> {
        ClaimParams {
            queue,
            limit: limit as i64,
            worker_id: req.worker_id.as_deref(),
            visibility_timeout_ms: req.visibility_timeout_ms,
            default_visibility_timeout_ms: self.settings.default_visibility_timeout_ms,
            started_at: None,
            pool: pool.map(|p| p.name.as_str()),
        }
    }

    /// Records a fetching worker as seen (contract §6.1), at most every few seconds per worker,
    /// and returns what it registered with (as of that write).
    async fn record_seen(&self, worker_id: &str) -> Result<FetchDefaults> {
        let now = Instant::now();
        {
            let mut seen = self.seen_workers.lock().expect("seen-workers lock");
            if let Some((at, defaults)) = seen.get(worker_id)
                && now.duration_since(*at) < SEEN_WRITE_INTERVAL
            {
                return Ok(defaults.clone());
            }
            if seen.len() >= 10_000 {
                seen.retain(|_, (at, _)| now.duration_since(*at) < SEEN_WRITE_INTERVAL);
            }
            seen.insert(worker_id.to_owned(), (now, FetchDefaults::default()));
        }
        match store::worker::record_seen(&self.pool, worker_id).await {
            Ok(registration) => {
                let defaults = FetchDefaults::from_stored(registration);
                self.seen_workers
                    .lock()
                    .expect("seen-workers lock")
                    .insert(worker_id.to_owned(), (now, defaults.clone()));
                Ok(defaults)
            }
            Err(e) => {
                self.seen_workers
                    .lock()
                    .expect("seen-workers lock")
                    .remove(worker_id);
                Err(e.into())
            }
        }
    }

    /// Forgets what was cached about a worker (it registered again: new fetch defaults).
    fn forget_seen(&self, worker_id: &str) {
        self.seen_workers
            .lock()
            .expect("seen-workers lock")
            .remove(worker_id);
    }

    /// ACK: `active` → `completed`.
    pub async fn ack(
        &self,
        id: JobId,
        worker_id: Option<&str>,
        result: Option<&str>,
    ) -> Result<Job> {
        let ack = AckItem {
            id,
            worker_id: worker_id.map(str::to_owned),
            result: result.map(str::to_owned),
        };
        let completed = match self.acks.submit(ack).await {
            Some(outcome) => outcome?,
            None => return Err(Error::Database(sqlx::Error::PoolClosed)),
        };
        if let Some(job) = completed {
            telemetry::attempt_finished(&job);
            return Ok(job);
        }
        Err(self.not_held(id, "acknowledge", worker_id).await)
    }

    /// ACK of many jobs (ojsd's batch extension): one statement for all of them. Each job gets
    /// its own outcome, in order; the call itself fails only when the database does.
    pub async fn ack_many(
        &self,
        worker_id: Option<&str>,
        acks: &[(JobId, Option<&str>)],
    ) -> Result<Vec<Result<Job>>> {
        let params: Vec<CompleteParams<'_>> = acks
            .iter()
            .map(|(id, result)| CompleteParams {
                id: *id,
                worker_id,
                result: *result,
            })
            .collect();
        let completed = complete_group(&self.pool, &params).await?;
        let mut out = Vec::with_capacity(acks.len());
        for ((id, _), job) in acks.iter().zip(completed) {
            out.push(match job {
                Some(job) => {
                    telemetry::attempt_finished(&job);
                    Ok(job)
                }
                None => Err(self.not_held(*id, "acknowledge", worker_id).await),
            });
        }
        Ok(out)
    }

    /// NACK: records the failure and lets the retry policy choose retryable or discarded
    /// (or puts the job straight back with `requeue`).
    pub async fn nack(&self, req: NackRequest) -> Result<Nacked> {
        self.nack_many(vec![req])
            .await?
            .pop()
            .expect("one outcome per request")
    }

    /// NACK of many jobs (ojsd's batch extension): one read and one write for all of them.
    /// Each request gets its own outcome, in order; the call itself fails only when the
    /// database does. A job named twice is failed once; the second request is answered as it
    /// would be after the first.
    pub async fn nack_many(&self, reqs: Vec<NackRequest>) -> Result<Vec<Result<Nacked>>> {
        let ids: Vec<Uuid> = reqs.iter().map(|r| r.job_id.0).collect();
        let jobs: HashMap<Uuid, Job> = store::job::get_many(&self.pool, &ids)
            .await?
            .into_iter()
            .map(|j| (j.id.0, j))
            .collect();
        let mut planned: HashSet<Uuid> = HashSet::with_capacity(reqs.len());
        // Per request: the decision (or why not), and the error JSON to record.
        let mut plans: Vec<Result<(FailTarget, Option<String>, i32)>> =
            Vec::with_capacity(reqs.len());
        for req in &reqs {
            plans.push(plan_nack(req, jobs.get(&req.job_id.0), &mut planned));
        }
        let failures: Vec<FailParams<'_>> = reqs
            .iter()
            .zip(&plans)
            .filter_map(|(req, plan)| {
                let (target, error, attempt) = plan.as_ref().ok()?;
                Some(FailParams {
                    id: req.job_id,
                    attempt: *attempt,
                    worker_id: req.worker_id.as_deref(),
                    error: error.as_deref(),
                    target: *target,
                })
            })
            .collect();
        let mut failed: HashMap<Uuid, Job> = if failures.is_empty() {
            HashMap::new()
        } else {
            store::job::fail_many(&self.pool, &failures, None)
                .await?
                .into_iter()
                .map(|j| (j.id.0, j))
                .collect()
        };
        let mut out = Vec::with_capacity(reqs.len());
        for (req, plan) in reqs.iter().zip(plans) {
            out.push(match plan {
                Err(e) => Err(e),
                Ok((target, ..)) => match failed.remove(&req.job_id.0) {
                    Some(job) => {
                        telemetry::attempt_finished(&job);
                        Ok(Nacked {
                            job,
                            dead_lettered: matches!(
                                target,
                                FailTarget::Discarded { dead_letter: true }
                            ),
                        })
                    }
                    // The claim changed between the read and the write (cancelled,
                    // reclaimed, ...).
                    None => Err(self
                        .not_held(req.job_id, "fail", req.worker_id.as_deref())
                        .await),
                },
            });
        }
        Ok(out)
    }

    /// Explains why `worker_id` cannot complete or fail job `id`.
    async fn not_held(&self, id: JobId, operation: &'static str, worker_id: Option<&str>) -> Error {
        match store::job::get(&self.pool, id).await {
            Err(e) => e.into(),
            Ok(None) => Error::JobNotFound(id),
            Ok(Some(job)) => match (job.state, job.worker_id.as_deref(), worker_id) {
                (JobState::Active, Some(owner), Some(worker)) if owner != worker => {
                    Error::NotOwner {
                        job_id: id,
                        owner: owner.to_owned(),
                    }
                }
                _ => invalid_for_worker(&job, operation),
            },
        }
    }

    /// Looks at one job the worker claims to hold, to explain a refused single-job heartbeat.
    pub async fn reservation_lost(&self, id: JobId, worker_id: &str) -> Error {
        match store::job::get(&self.pool, id).await {
            Err(e) => e.into(),
            Ok(None) => Error::JobNotFound(id),
            Ok(Some(job)) => Error::ReservationLost {
                job_id: id,
                current: job.state,
                owner: job.worker_id.filter(|owner| owner != worker_id),
            },
        }
    }

    /// Deletes all jobs, workers, events and queues with their configuration (test hook).
    pub async fn reset(&self) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        store::job::delete_all(&mut *tx).await?;
        store::worker::delete_all(&mut *tx).await?;
        store::event::delete_all(&mut *tx).await?;
        store::queue::delete_all(&mut *tx).await?;
        store::pool::reset(&mut tx).await?;
        tx.commit().await?;
        self.seen_workers.lock().expect("seen-workers lock").clear();
        self.configs.reload(&self.pool).await?;
        Ok(())
    }
}

/// What a NACK of `job` (as read) should do: the target, the error to record and the
/// attempt it fails; or why it cannot.
fn plan_nack(
    req: &NackRequest,
    job: Option<&Job>,
    planned: &mut HashSet<Uuid>,
) -> Result<(FailTarget, Option<String>, i32)> {
    let job = job.ok_or(Error::JobNotFound(req.job_id))?;
    if !planned.insert(job.id.0) {
        return Err(Error::invalid(
            "$.job_id",
            format!("job {} is named more than once in this request", job.id),
        ));
    }
    if job.state != JobState::Active {
        return Err(invalid_for_worker(job, "fail"));
    }
    if let (Some(worker), Some(owner)) = (req.worker_id.as_deref(), job.worker_id.as_deref())
        && worker != owner
    {
        return Err(Error::NotOwner {
            job_id: job.id,
            owner: owner.to_owned(),
        });
    }
    let outcome = match (&req.error, req.requeue) {
        (_, true) => Outcome::Requeue,
        (Some(error), false) => {
            let policy = RetryPolicy::from_stored(&job.retry.0);
            failure::decide(&policy, job.attempt, error, &mut rand::rng())
        }
        (None, false) => return Err(Error::invalid("$.error", "'error' is required")),
    };
    Ok((
        FailTarget::from_outcome(outcome),
        req.error.as_ref().map(JobError::to_json),
        job.attempt,
    ))
}

/// Writes a group of single-job PUSH requests in one statement. When that fails (a client-chosen
/// id taken, or two requests naming the same id), each job is written alone, so each request gets
/// the outcome it would have had by itself.
/// [`store::job::insert_many`], counting the queues it created.
async fn insert_jobs(
    db: impl sqlx::PgExecutor<'_>,
    jobs: &[NewJob],
    strict_queues: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    let (jobs, queues_created) = store::job::insert_many(db, jobs, strict_queues).await?;
    telemetry::queues_created(queues_created);
    Ok(jobs)
}

async fn flush_pushes(pool: PgPool, jobs: Vec<NewJob>, strict_queues: bool) -> Vec<Result<Job>> {
    if jobs.len() > 1 {
        match insert_jobs(&pool, &jobs, strict_queues).await {
            Ok(rows) if rows.len() == jobs.len() => return rows.into_iter().map(Ok).collect(),
            Ok(_) | Err(_) => {}
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        let written = insert_jobs(&pool, std::slice::from_ref(&job), strict_queues).await;
        out.push(match written {
            Ok(mut rows) if rows.len() == 1 => Ok(rows.remove(0)),
            Ok(_) => Err(Error::Database(sqlx::Error::RowNotFound)),
            Err(e) => Err(e.into()),
        });
    }
    out
}

/// Completes `acks` in one statement: for each, its completed job, or `None` when the job was
/// not an active job of that worker. A job named twice is completed by its first ACK only; the
/// later ones get `None`, as they would have after the first committed.
async fn complete_group(
    pool: &PgPool,
    acks: &[CompleteParams<'_>],
) -> std::result::Result<Vec<Option<Job>>, sqlx::Error> {
    let mut seen: HashSet<Uuid> = HashSet::with_capacity(acks.len());
    let first: Vec<bool> = acks.iter().map(|a| seen.insert(a.id.0)).collect();
    let distinct: Vec<CompleteParams<'_>> = acks
        .iter()
        .zip(&first)
        .filter(|(_, first)| **first)
        .map(|(a, _)| *a)
        .collect();
    let mut done: HashMap<Uuid, Job> = store::job::complete_many(pool, &distinct)
        .await?
        .into_iter()
        .map(|j| (j.id.0, j))
        .collect();
    Ok(acks
        .iter()
        .zip(first)
        .map(|(a, first)| if first { done.remove(&a.id.0) } else { None })
        .collect())
}

/// Writes a group of ACK requests (see [`complete_group`]). When the statement fails, each ACK
/// is written alone, so each request gets the outcome it would have had by itself.
async fn flush_acks(pool: PgPool, acks: Vec<AckItem>) -> Vec<Result<Option<Job>>> {
    fn params(a: &AckItem) -> CompleteParams<'_> {
        CompleteParams {
            id: a.id,
            worker_id: a.worker_id.as_deref(),
            result: a.result.as_deref(),
        }
    }
    let group: Vec<CompleteParams<'_>> = acks.iter().map(params).collect();
    match complete_group(&pool, &group).await {
        Ok(done) => done.into_iter().map(Ok).collect(),
        Err(e) if acks.len() == 1 => vec![Err(e.into())],
        Err(_) => {
            let mut out = Vec::with_capacity(acks.len());
            for ack in &group {
                out.push(
                    complete_group(&pool, std::slice::from_ref(ack))
                        .await
                        .map(|mut done| done.pop().flatten())
                        .map_err(Error::from),
                );
            }
            out
        }
    }
}

/// The state a new job will start in (the database decides `scheduled` with its own clock;
/// this is the same decision made ahead of the insert, for unique checks within a request).
fn initial_state(job: &NewJob) -> JobState {
    let future = match &job.scheduled_at {
        Some(ClientTime::Absolute { at, .. }) => *at > chrono::Utc::now(),
        Some(ClientTime::Relative { after_ms }) => *after_ms > 0,
        None => false,
    };
    if job.pending {
        JobState::Pending
    } else if future {
        JobState::Scheduled
    } else {
        JobState::Available
    }
}

/// The 409 for an ACK/NACK on a job that is not active.
fn invalid_for_worker(job: &Job, operation: &'static str) -> Error {
    Error::InvalidTransition {
        job_id: job.id,
        operation,
        current: job.state,
        allowed: &[JobState::Active],
    }
}

/// Whether `e` is a violation of the named constraint.
fn is_violation(e: &sqlx::Error, constraint: &str) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.constraint() == Some(constraint))
}

/// Takes locked active jobs away from their workers: each attempt ends with the error of
/// `cause(job)` and the job goes where [`failure::reclaim`] sends it (back to `available`,
/// `retryable`, or `discarded`). The jobs must be locked by the caller's transaction (so the
/// fenced update cannot miss them). Returns the jobs as they are now.
pub async fn release_jobs(
    conn: &mut sqlx::PgConnection,
    jobs: &[Job],
    cause: impl Fn(&Job) -> Reclaim,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<Vec<Job>, sqlx::Error> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let decided: Vec<(FailTarget, String)> = {
        let mut rng = rand::rng();
        jobs.iter()
            .map(|job| {
                let policy = RetryPolicy::from_stored(&job.retry.0);
                let (outcome, error) = failure::reclaim(&policy, job.attempt, cause(job), &mut rng);
                (FailTarget::from_outcome(outcome), error.to_json())
            })
            .collect()
    };
    let params: Vec<FailParams<'_>> = jobs
        .iter()
        .zip(&decided)
        .map(|(job, (target, error))| FailParams {
            id: job.id,
            attempt: job.attempt,
            worker_id: None,
            error: Some(error),
            target: *target,
        })
        .collect();
    let released = store::job::fail_many(&mut *conn, &params, now).await?;
    for job in &released {
        telemetry::attempt_finished(job);
    }
    Ok(released)
}

/// Claims from one queue, in the tenant-fair order when the queue is tenant-fair (then in plain
/// order for whatever the fair claim could not fill: jobs not tagged yet).
async fn claim_rows(
    conn: &mut sqlx::PgConnection,
    params: ClaimParams<'_>,
    fair: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    if !fair {
        return store::job::claim(&mut *conn, params).await;
    }
    let mut jobs = store::job::claim_fair(&mut *conn, params).await?;
    let short = params.limit - jobs.len() as i64;
    if short > 0 {
        let mut more = store::job::claim(
            &mut *conn,
            ClaimParams {
                limit: short,
                ..params
            },
        )
        .await?;
        jobs.append(&mut more);
    }
    Ok(jobs)
}
