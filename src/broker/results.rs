//! Job results (the OJS results extension): a job's outcome once it ended, awaited without
//! polling, and many at once.
//!
//! A result is served while it lives: as long as the job is kept (its queue's retention), or
//! for the job's `result_ttl` seconds after it ended when that is shorter; a `result_ttl` of 0
//! means the ACK kept no result at all. Past that, reading it answers [`Outcome::Pruned`].
//!
//! Waiting costs the database nothing while it lasts: the first waiter of a job flags it
//! (`ojs_job.result_awaited`), and the statement that ends a flagged job announces it on
//! `ojs_job_ended`, which every replica's notifier hears and passes to its waiters
//! ([`crate::wakeup::results`]). A woken waiter reads the job once more.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;

use super::Broker;
use crate::error::{Error, Result};
use crate::job::{JobId, JobState, RawJson};
use crate::store;
use crate::store::result::ResultRow;

/// What reading a job's result found.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The job ended and its result (or error) is served.
    Ready(JobResult),
    /// The job has not ended (a wait, if asked for, timed out).
    Pending(JobState),
    /// The job ended, but its result is no longer served: its `result_ttl` ran out (`at`), it
    /// kept none (`result_ttl` 0), or the job itself is gone since the wait began.
    Pruned {
        state: Option<JobState>,
        at: Option<DateTime<Utc>>,
    },
}

/// A finished job's outcome.
#[derive(Debug, Clone)]
pub struct JobResult {
    pub job_id: JobId,
    pub state: JobState,
    pub result: Option<RawJson>,
    pub error: Option<RawJson>,
    /// When the outcome was stored: when the job ended.
    pub stored_at: DateTime<Utc>,
    /// When it stops being served, if sooner than the job's own end of retention.
    pub expires_at: Option<DateTime<Utc>>,
    pub size_bytes: Option<i32>,
}

/// How a result was asked for (the `method` label of `ojs_result_retrievals_total`).
#[derive(Debug, Clone, Copy)]
pub enum Retrieval {
    Poll,
    Wait,
    Bulk,
    Stream,
}

impl Retrieval {
    fn as_str(self) -> &'static str {
        match self {
            Retrieval::Poll => "poll",
            Retrieval::Wait => "wait",
            Retrieval::Bulk => "bulk",
            Retrieval::Stream => "stream",
        }
    }
}

impl Outcome {
    /// The `outcome` label of `ojs_result_retrievals_total`.
    fn label(&self) -> &'static str {
        match self {
            Outcome::Ready(_) => "ready",
            Outcome::Pending(_) => "pending",
            Outcome::Pruned { .. } => "pruned",
        }
    }

    fn of(row: ResultRow, now: DateTime<Utc>) -> Outcome {
        let Some(ended_at) = row.ended_at.filter(|_| row.state.is_terminal()) else {
            return Outcome::Pending(row.state);
        };
        let expires_at = match row.result_ttl {
            Some(0) => {
                return Outcome::Pruned {
                    state: Some(row.state),
                    at: Some(ended_at),
                };
            }
            Some(secs) if secs > 0 => ended_at.checked_add_signed(TimeDelta::seconds(secs)),
            _ => None,
        };
        if let Some(at) = expires_at.filter(|at| *at <= now) {
            return Outcome::Pruned {
                state: Some(row.state),
                at: Some(at),
            };
        }
        Outcome::Ready(JobResult {
            job_id: JobId(row.id),
            state: row.state,
            result: row.result,
            error: row.error,
            stored_at: ended_at,
            expires_at,
            size_bytes: row.size_bytes,
        })
    }
}

impl Broker {
    /// Job `id`'s result, waiting up to `wait` for the job to end (no wait: read it once).
    pub async fn job_result(&self, id: JobId, wait: Duration) -> Result<Outcome> {
        let (method, outcome) = if wait.is_zero() {
            let read = self.read_result(id).await?;
            (Retrieval::Poll, read.ok_or(Error::JobNotFound(id))?)
        } else {
            let awaited = self.await_result(id, Instant::now() + wait).await?;
            (Retrieval::Wait, awaited)
        };
        crate::telemetry::result_retrieved(method.as_str(), outcome.label());
        Ok(outcome)
    }

    /// [`Broker::job_result`] with a wait, for a stream of the job's progress and outcome
    /// (counted as a `stream` retrieval).
    pub async fn job_result_streamed(&self, id: JobId, wait: Duration) -> Result<Outcome> {
        let outcome = self.await_result(id, Instant::now() + wait).await?;
        if !matches!(outcome, Outcome::Pending(_)) {
            crate::telemetry::result_retrieved(Retrieval::Stream.as_str(), outcome.label());
        }
        Ok(outcome)
    }

    async fn read_result(&self, id: JobId) -> Result<Option<Outcome>> {
        let row = store::result::read(&self.db, &[id.0]).await?.pop();
        Ok(row.map(|row| Outcome::of(row, Utc::now())))
    }

    /// Reads the job until it ended or `deadline` passed, woken by its end (see the module
    /// doc). The watch is armed before each read, so an end announced between the read and
    /// the wait still wakes it.
    async fn await_result(&self, id: JobId, deadline: Instant) -> Result<Outcome> {
        let watch = self.announcer.notifier().results().watch(id.0);
        let mut flagged = false;
        let mut seen = false;
        loop {
            let changed = watch.changed();
            if !flagged {
                // Its own statement, before the read: an end committed after the read then
                // finds the flag and is announced.
                // A job found unfinished here and gone at the read was removed while awaited.
                seen = store::result::mark_awaited(&self.db, id.0).await?;
                flagged = true;
            }
            let outcome = match self.read_result(id).await? {
                Some(outcome) => outcome,
                // Gone while awaited: deleted, or completed in a queue that keeps no
                // completed jobs.
                None if seen => {
                    return Ok(Outcome::Pruned {
                        state: None,
                        at: None,
                    });
                }
                None => return Err(Error::JobNotFound(id)),
            };
            let Outcome::Pending(state) = outcome else {
                return Ok(outcome);
            };
            seen = true;
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Ok(Outcome::Pending(state));
            }
        }
    }

    /// The results of `ids` (at most [`MAX_BULK_RESULTS`]), in their order; `None` for a job
    /// that does not exist.
    pub async fn job_results(&self, ids: &[JobId]) -> Result<Vec<(JobId, Option<Outcome>)>> {
        let uuids: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
        let rows: std::collections::HashMap<uuid::Uuid, ResultRow> =
            store::result::read(&self.db, &uuids)
                .await?
                .into_iter()
                .map(|row| (row.id, row))
                .collect();
        let now = Utc::now();
        let answers = ids
            .iter()
            .map(|id| {
                (
                    *id,
                    rows.get(&id.0).cloned().map(|row| Outcome::of(row, now)),
                )
            })
            .collect::<Vec<_>>();
        for (_, outcome) in &answers {
            if let Some(outcome) = outcome {
                crate::telemetry::result_retrieved(Retrieval::Bulk.as_str(), outcome.label());
            }
        }
        Ok(answers)
    }
}

/// The most jobs one bulk result read may name.
pub const MAX_BULK_RESULTS: usize = 1000;
