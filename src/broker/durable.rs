//! Steps that run once and jobs that sleep until a signal or a time (durable execution over
//! HTTP, past the OJS extensions).
//!
//! A **step** is recorded by the worker holding the job's current attempt, under a name of its
//! choosing, with what the step returned; every later attempt gets the recorded steps with
//! FETCH (`steps`, by name) and skips them. The first record of a step stands: a second one,
//! from any worker, replica or retry, is refused with the first result.
//!
//! A **wait** ends the attempt instead of an ACK or a NACK: the job is scheduled again, at the
//! wait's time limit or (waiting only for a signal) with no time at all, and gives its attempt
//! back. A **signal** sent to a job waiting for it makes the job available at once; one sent to
//! a job that does not wait for it yet is kept, and ends the job's next wait for that name at
//! once. The FETCH that resumes the job hands the latest `wait` (how it ended) and the
//! `signals` delivered so far, by name. The database orders each signal with the job's wait
//! (the job's row lock), so a wait ends once, on any replica.

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

use super::Broker;
use crate::error::{Error, Result};
use crate::job::durable::Step;
use crate::job::{JobId, JobState};
use crate::store;
use crate::store::step::{Durable, SentRow};

/// What a signal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SignalOutcome {
    /// The job waited for it: it is available again.
    Delivered,
    /// The job did not wait for it: kept for its next wait for that name.
    Kept,
    /// A signal with the same key was sent before: nothing was stored (the first one's id and
    /// times are answered).
    Duplicate,
}

/// A signal sent to a job, as [`Broker::signal`] answers it.
#[derive(Debug, Clone)]
pub struct Signalled {
    pub job_id: JobId,
    pub name: String,
    pub id: i64,
    pub outcome: SignalOutcome,
    /// The job's state after the signal.
    pub job_state: JobState,
    pub sent_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// A wait as [`Broker::wait`] asks for it.
#[derive(Debug, Clone, Copy)]
pub struct WaitRequest<'a> {
    pub job_id: JobId,
    /// The attempt the worker holds (checked when given).
    pub attempt: Option<i32>,
    /// The worker (checked against the job's holder when given).
    pub worker_id: Option<&'a str>,
    /// The signal that ends the wait.
    pub signal: Option<&'a str>,
    /// When the wait ends without the signal.
    pub until: Option<DateTime<Utc>>,
}

/// What a wait did.
#[derive(Debug, Clone)]
pub struct Waited {
    /// `scheduled` (waiting), or `available` when a kept signal ended the wait at once.
    pub job_state: JobState,
    /// The signal that ended it at once, if one had been kept.
    pub signal_id: Option<i64>,
    /// The attempt the next run will have (the waiting one's, given back).
    pub attempt: i32,
}

impl Broker {
    /// Records step `name` of job `id` with `result` (see the module doc). The job must be
    /// active at `attempt` and, when `worker_id` is given, held by it; a step recorded before
    /// is refused with [`Error::StepRecorded`], carrying the first record.
    pub async fn record_step(
        &self,
        id: JobId,
        name: &str,
        attempt: i32,
        worker_id: Option<&str>,
        result: Option<&RawValue>,
    ) -> Result<Step> {
        let row = store::step::record(&self.db, id.0, name, attempt, worker_id, result).await?;
        let Some(state) = row.job_state else {
            return Err(Error::JobNotFound(id));
        };
        if row.recorded
            && let Some(recorded) = row.step
        {
            return Ok(recorded);
        }
        if state != JobState::Active {
            return Err(Error::InvalidTransition {
                job_id: id,
                operation: "record a step of",
                current: state,
                allowed: &[JobState::Active],
            });
        }
        if let Some(current) = row.attempt.filter(|&current| current != attempt) {
            return Err(Error::StaleAttempt {
                job_id: id,
                attempt,
                current,
            });
        }
        if let (Some(holder), Some(worker)) = (&row.holder, worker_id)
            && holder != worker
        {
            return Err(Error::NotOwner {
                job_id: id,
                owner: holder.clone(),
            });
        }
        // Held, and not recorded: the step was recorded before, by this statement's snapshot
        // or (when the race was that close) by a transaction that committed during it.
        let first = match row.step {
            Some(first) => Some(first),
            None => store::step::get(&self.db, id.0, name).await?,
        };
        match first {
            Some(first) => Err(Error::StepRecorded(Box::new(first))),
            // Cannot happen (a step is never deleted while its job exists); answered as the
            // race it would be.
            None => Err(Error::Database(sqlx::Error::RowNotFound)),
        }
    }

    /// Job `id`'s steps, latest wait and signals.
    pub async fn durable(&self, id: JobId) -> Result<Durable> {
        store::step::durable(&self.db, id.0)
            .await?
            .ok_or(Error::JobNotFound(id))
    }

    /// Sends signal `name` (with `payload`; `key` sends it once) to job `id`.
    pub async fn signal(
        &self,
        id: JobId,
        name: &str,
        payload: Option<&RawValue>,
        key: Option<&str>,
    ) -> Result<Signalled> {
        let SentRow {
            outcome,
            job_state,
            signal_id,
            sent_at,
            delivered_at,
        } = store::step::send_signal(&self.db, id.0, name, payload, key).await?;
        let outcome = match outcome.as_str() {
            "delivered" => SignalOutcome::Delivered,
            "kept" => SignalOutcome::Kept,
            "duplicate" => SignalOutcome::Duplicate,
            "finished" => {
                return Err(Error::InvalidTransition {
                    job_id: id,
                    operation: "signal",
                    current: job_state.unwrap_or(JobState::Completed),
                    allowed: SIGNALLABLE,
                });
            }
            _ => return Err(Error::JobNotFound(id)),
        };
        let (Some(id_no), Some(sent_at), Some(job_state)) = (signal_id, sent_at, job_state) else {
            return Err(Error::Database(sqlx::Error::RowNotFound));
        };
        Ok(Signalled {
            job_id: id,
            name: name.to_owned(),
            id: id_no,
            outcome,
            job_state,
            sent_at,
            delivered_at,
        })
    }

    /// Ends an active job's attempt with a wait (see the module doc).
    pub async fn wait(&self, request: WaitRequest<'_>) -> Result<Waited> {
        let id = request.job_id;
        let row = store::step::wait(
            &self.db,
            id.0,
            request.attempt,
            request.worker_id,
            request.signal,
            request.until,
        )
        .await?;
        let state = row.job_state.unwrap_or(JobState::Completed);
        match row.outcome.as_str() {
            "waiting" | "signalled" => Ok(Waited {
                job_state: state,
                signal_id: row.signal_id,
                attempt: row.attempt.unwrap_or_default() + 1,
            }),
            "state" => Err(Error::InvalidTransition {
                job_id: id,
                operation: "wait with",
                current: state,
                allowed: &[JobState::Active],
            }),
            "owner" => Err(Error::NotOwner {
                job_id: id,
                owner: row.holder.unwrap_or_default(),
            }),
            "attempt" => Err(Error::StaleAttempt {
                job_id: id,
                attempt: request.attempt.unwrap_or_default(),
                current: row.attempt.unwrap_or_default(),
            }),
            _ => Err(Error::JobNotFound(id)),
        }
    }
}

/// The states a job takes a signal in (delivered, or kept for its next wait).
const SIGNALLABLE: &[JobState] = &[
    JobState::Scheduled,
    JobState::Available,
    JobState::Pending,
    JobState::Retryable,
    JobState::Active,
];
