//! Completion: ACK (grouped with concurrent ACKs) and NACK of claimed jobs, single or in
//! batches, fenced on the claim, and the reasons a worker's report is refused.
//!
//! ACK goes through group commit and NACK does not: an ACK is one short update, so concurrent
//! ones share a statement and a commit; a NACK first reads the job to apply its retry policy,
//! which a group would have to do for every member anyway.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::db::Db;
use uuid::Uuid;

use super::configs::Configs;
use super::group::GROUP_FLUSHERS;
use super::group::GroupCommit;
use crate::db::HotConnections;
use crate::error::{Error, Result};
use crate::job::failure::JobError;
use crate::job::lifecycle::{self, FailTarget};
use crate::job::{Job, JobId, JobState};
use crate::store;
use crate::store::job::{CompleteParams, Completed, DeleteOnAck, FailParams};
use crate::telemetry;

/// Most ACKs written by one statement.
const ACK_GROUP_MAX: usize = 512;

/// How long an ACK flusher waits for the flush in flight to end before it writes what queued
/// up meanwhile beside it.
const ACK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(20);

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

/// One queued ACK.
#[derive(Debug)]
struct AckItem {
    id: JobId,
    worker_id: Option<String>,
    result: Option<String>,
}

/// The completion side of the broker.
#[derive(Debug)]
pub(super) struct Completer {
    db: Db,
    /// Where ACK and NACK statements run.
    hot: HotConnections,
    /// ACK requests, written together.
    acks: GroupCommit<AckItem, Result<Option<Completed>>>,
    /// Where an ACK learns whether its queue keeps completed jobs.
    retention: CompletedRetention,
}

/// Which queues keep their completed jobs: the queue configurations, over the server's setting.
#[derive(Debug, Clone)]
struct CompletedRetention {
    configs: Arc<Configs>,
    /// False when the server's own retention of completed jobs is zero.
    keep_by_default: bool,
}

impl CompletedRetention {
    /// The queues whose completed jobs are deleted on ACK.
    async fn delete_on_ack(&self, db: &Db) -> std::result::Result<DeleteOnAck, sqlx::Error> {
        Ok(self
            .configs
            .current(db)
            .await?
            .delete_on_ack(self.keep_by_default))
    }
}

impl Completer {
    /// Starts the group-commit flushers of ACKs (within a Tokio runtime).
    pub(super) fn new(
        db: Db,
        hot: HotConnections,
        configs: Arc<Configs>,
        keep_completed: bool,
    ) -> Completer {
        let retention = CompletedRetention {
            configs,
            keep_by_default: keep_completed,
        };
        let group_db = db.clone();
        let group_hot = hot.clone();
        let group_retention = retention.clone();
        // Patient flushers: an ACK statement costs mostly per statement, so the ACKs that
        // arrive during one are written by the next as one group (w2-sdk: 18% less Postgres
        // CPU per job than two flushers taking turns); a second runs only beside a flush that
        // is stuck for longer than ACK_PATIENCE.
        let acks =
            GroupCommit::spawn_patient(GROUP_FLUSHERS, ACK_GROUP_MAX, ACK_PATIENCE, move |acks| {
                flush_acks(
                    group_db.clone(),
                    group_hot.clone(),
                    group_retention.clone(),
                    acks,
                )
            });
        Completer {
            db,
            hot,
            acks,
            retention,
        }
    }

    /// ACK: `active` → `completed`, answering what an ACK reports of the job (grouped with
    /// concurrent ACKs into one statement).
    pub(super) async fn ack(
        &self,
        id: JobId,
        worker_id: Option<&str>,
        result: Option<&str>,
    ) -> Result<Completed> {
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
            telemetry::job_completed(&job.queue, &job.r#type, job.started_at, job.completed_at);
            if let Some(result) = result {
                telemetry::result_size(&job.queue, &job.r#type, result.len());
            }
            return Ok(job);
        }
        Err(self.not_held(id, "acknowledge", worker_id).await)
    }

    /// [`Completer::ack`] answering the whole job as the ACK left it, in a statement of its
    /// own (a worker asked for it: `Prefer: return=representation`).
    pub(super) async fn ack_whole(
        &self,
        id: JobId,
        worker_id: Option<&str>,
        result: Option<&str>,
    ) -> Result<Job> {
        let ack = CompleteParams {
            id,
            worker_id,
            result,
        };
        let delete_on_ack = self.retention.delete_on_ack(&self.db).await?;
        let done =
            complete_group::<Job>(&self.hot, std::slice::from_ref(&ack), &delete_on_ack).await?;
        if let Some(job) = done.into_iter().next().flatten() {
            telemetry::attempt_finished(&job);
            if let Some(result) = result {
                telemetry::result_size(&job.queue, &job.r#type, result.len());
            }
            return Ok(job);
        }
        Err(self.not_held(id, "acknowledge", worker_id).await)
    }

    /// ACK of many jobs (ojsd's batch extension): one statement for all of them. Each job gets
    /// its own outcome, in order; the call itself fails only when the database does.
    pub(super) async fn ack_many(
        &self,
        worker_id: Option<&str>,
        acks: &[(JobId, Option<&str>)],
    ) -> Result<Vec<Result<Completed>>> {
        let params: Vec<CompleteParams<'_>> = acks
            .iter()
            .map(|(id, result)| CompleteParams {
                id: *id,
                worker_id,
                result: *result,
            })
            .collect();
        let delete_on_ack = self.retention.delete_on_ack(&self.db).await?;
        let completed: Vec<Result<Option<Completed>>> =
            match complete_group::<Completed>(&self.hot, &params, &delete_on_ack).await {
                Ok(done) => done.into_iter().map(Ok).collect(),
                // One ACK's failure must not fail the others': jobs of workflows advance their
                // workflows in this statement, each under its workflow's row lock, so two
                // statements finishing jobs of the same workflows in another order can
                // deadlock, and one workflow's advance can fail alone. Each ACK is then
                // written by itself; the call fails only if every one of them does.
                Err(e) if params.len() > 1 => {
                    let mut one_by_one = Vec::with_capacity(params.len());
                    for ack in &params {
                        one_by_one.push(
                            complete_group::<Completed>(
                                &self.hot,
                                std::slice::from_ref(ack),
                                &delete_on_ack,
                            )
                            .await
                            .map(|mut done| done.pop().flatten())
                            .map_err(Error::from),
                        );
                    }
                    if one_by_one.iter().all(Result::is_err) {
                        return Err(e.into());
                    }
                    one_by_one
                }
                Err(e) => return Err(e.into()),
            };
        let mut out = Vec::with_capacity(acks.len());
        for ((id, result), job) in acks.iter().zip(completed) {
            out.push(match job {
                Ok(Some(job)) => {
                    telemetry::job_completed(
                        &job.queue,
                        &job.r#type,
                        job.started_at,
                        job.completed_at,
                    );
                    if let Some(result) = result {
                        telemetry::result_size(&job.queue, &job.r#type, result.len());
                    }
                    Ok(job)
                }
                Ok(None) => Err(self.not_held(*id, "acknowledge", worker_id).await),
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }

    /// NACK of many jobs (ojsd's batch extension): one read and one write for all of them.
    /// Each request gets its own outcome, in order; the call itself fails only when the
    /// database does. A job named twice is failed once; the second request is answered as it
    /// would be after the first.
    pub(super) async fn nack_many(&self, reqs: Vec<NackRequest>) -> Result<Vec<Result<Nacked>>> {
        let ids: Vec<Uuid> = reqs.iter().map(|r| r.job_id.0).collect();
        let jobs: HashMap<Uuid, Job> = store::job::get_many(&self.db, &ids)
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
            let mut conn = self.hot.acquire().await?;
            let failed = store::job::fail_many(&mut *conn, &failures, None).await;
            let failed = conn.settle(failed).await;
            failed?.into_iter().map(|j| (j.id.0, j)).collect()
        };
        // A worker's `rate_limit_until`: the job's key starts nothing before then.
        for req in &reqs {
            let (Some(until), Some(key)) = (
                req.error.as_ref().and_then(JobError::rate_limit_until),
                failed
                    .get(&req.job_id.0)
                    .and_then(|j| j.rate_key.as_deref()),
            ) else {
                continue;
            };
            let mut tx = self.db.begin().await?;
            store::rate_limit::block(&mut tx, key, until, req.job_id.0).await?;
            tx.commit().await?;
        }
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
        match store::job::get(&self.db, id).await {
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
    pub(super) async fn reservation_lost(&self, id: JobId, worker_id: &str) -> Error {
        match store::job::get(&self.db, id).await {
            Err(e) => e.into(),
            Ok(None) => Error::JobNotFound(id),
            Ok(Some(job)) => Error::ReservationLost {
                job_id: id,
                current: job.state,
                owner: job.worker_id.filter(|owner| owner != worker_id),
            },
        }
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
    let target = match (&req.error, req.requeue) {
        (_, true) => FailTarget::Available,
        (Some(error), false) => lifecycle::after_failure(job, error, &mut rand::rng()),
        (None, false) => return Err(Error::invalid("$.error", "'error' is required")),
    };
    Ok((
        target,
        req.error.as_ref().map(JobError::to_json),
        job.attempt,
    ))
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

/// What an ACK statement answers of each job it completed: only [`Completed`] (what an ACK
/// reports, single or batch) or the whole job (a single ACK that asked for it).
trait AckAnswer: Sized + Send {
    fn id(&self) -> Uuid;

    fn complete(
        conn: &mut sqlx::PgConnection,
        acks: &[CompleteParams<'_>],
        delete_on_ack: &DeleteOnAck,
    ) -> impl std::future::Future<Output = std::result::Result<Vec<Self>, sqlx::Error>> + Send;
}

impl AckAnswer for Job {
    fn id(&self) -> Uuid {
        self.id.0
    }

    async fn complete(
        conn: &mut sqlx::PgConnection,
        acks: &[CompleteParams<'_>],
        delete_on_ack: &DeleteOnAck,
    ) -> std::result::Result<Vec<Job>, sqlx::Error> {
        store::job::complete_many(conn, acks, delete_on_ack).await
    }
}

impl AckAnswer for Completed {
    fn id(&self) -> Uuid {
        self.id.0
    }

    async fn complete(
        conn: &mut sqlx::PgConnection,
        acks: &[CompleteParams<'_>],
        delete_on_ack: &DeleteOnAck,
    ) -> std::result::Result<Vec<Completed>, sqlx::Error> {
        store::job::complete_many_brief(conn, acks, delete_on_ack).await
    }
}

/// Completes `acks` in one statement: for each, what it answers of its completed job, or
/// `None` when the job was not an active job of that worker. A job named twice is completed by
/// its first ACK only; the later ones get `None`, as they would have after the first committed.
async fn complete_group<A: AckAnswer>(
    hot: &HotConnections,
    acks: &[CompleteParams<'_>],
    delete_on_ack: &DeleteOnAck,
) -> std::result::Result<Vec<Option<A>>, sqlx::Error> {
    let mut seen: HashSet<Uuid> = HashSet::with_capacity(acks.len());
    let first: Vec<bool> = acks.iter().map(|a| seen.insert(a.id.0)).collect();
    let distinct: Vec<CompleteParams<'_>> = acks
        .iter()
        .zip(&first)
        .filter(|(_, first)| **first)
        .map(|(a, _)| *a)
        .collect();
    let mut conn = hot.acquire().await?;
    let done = A::complete(&mut conn, &distinct, delete_on_ack).await;
    let done = conn.settle(done).await;
    let mut done: HashMap<Uuid, A> = done?.into_iter().map(|j| (j.id(), j)).collect();
    Ok(acks
        .iter()
        .zip(first)
        .map(|(a, first)| if first { done.remove(&a.id.0) } else { None })
        .collect())
}

/// Writes a group of ACK requests (see [`complete_group`]). When the statement fails, each ACK
/// is written alone, so each request gets the outcome it would have had by itself.
async fn flush_acks(
    db: Db,
    hot: HotConnections,
    retention: CompletedRetention,
    acks: Vec<AckItem>,
) -> Vec<Result<Option<Completed>>> {
    fn params(a: &AckItem) -> CompleteParams<'_> {
        CompleteParams {
            id: a.id,
            worker_id: a.worker_id.as_deref(),
            result: a.result.as_deref(),
        }
    }
    let group: Vec<CompleteParams<'_>> = acks.iter().map(params).collect();
    // Without the configurations the ACKs keep their jobs; the pruner deletes those of a
    // zero retention at its next pass.
    let delete_on_ack = retention.delete_on_ack(&db).await.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "queue configurations unavailable; keeping completed jobs");
        DeleteOnAck::nothing()
    });
    match complete_group(&hot, &group, &delete_on_ack).await {
        Ok(done) => done.into_iter().map(Ok).collect(),
        Err(e) if acks.len() == 1 => vec![Err(e.into())],
        Err(_) => {
            let mut out = Vec::with_capacity(acks.len());
            for ack in &group {
                out.push(
                    complete_group(&hot, std::slice::from_ref(ack), &delete_on_ack)
                        .await
                        .map(|mut done| done.pop().flatten())
                        .map_err(Error::from),
                );
            }
            out
        }
    }
}
