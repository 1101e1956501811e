//! Where a job goes next, decided without touching the database: the state a new job starts in,
//! and where a failed or reclaimed attempt sends it (by its retry policy, see [`super::failure`]).
//! The store writes what is decided here (`store::job::insert_many`, `store::job::fail_many`).

use chrono::{DateTime, Utc};

use super::envelope::NewJob;
use super::failure::{self, JobError, Outcome, Reclaim};
use super::retry::RetryPolicy;
use super::{Job, JobState};
use crate::wire::timestamp::ClientTime;

/// Where a failed attempt sends the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailTarget {
    /// Back to `available` immediately (NACK `requeue`, or a lost reservation).
    Available,
    /// `retryable` after `delay_ms`.
    Retryable { delay_ms: i64 },
    /// `discarded`, dead-lettered or not.
    Discarded { dead_letter: bool },
}

impl FailTarget {
    /// Where the retry policy's outcome sends the job.
    pub fn from_outcome(outcome: Outcome) -> FailTarget {
        match outcome {
            Outcome::Requeue => FailTarget::Available,
            Outcome::Retry { delay_ms } => FailTarget::Retryable {
                delay_ms: i64::try_from(delay_ms).unwrap_or(i64::MAX),
            },
            Outcome::Discard { dead_letter, .. } => FailTarget::Discarded { dead_letter },
        }
    }
}

/// The state a new job will start in, as of `now`. The enqueue statement decides it again with
/// the database clock; this is the same decision made ahead of the insert, for the unique
/// checks among the jobs of one request.
pub fn initial_state(job: &NewJob, now: DateTime<Utc>) -> JobState {
    let future = match &job.scheduled_at {
        Some(ClientTime::Absolute { at, .. }) => *at > now,
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

/// Where a worker's failure report (NACK) of attempt `job.attempt` sends `job`, by its retry
/// policy. (A NACK with `requeue` sends it back at once: [`FailTarget::Available`].)
pub fn after_failure(job: &Job, error: &JobError, rng: &mut impl rand::Rng) -> FailTarget {
    let policy = RetryPolicy::from_stored(&job.retry.0);
    FailTarget::from_outcome(failure::decide(&policy, job.attempt, error, rng))
}

/// How the server ends the attempt of an active job it takes away from its worker (the reaper,
/// the stale-worker detector, a deregistration): where the job goes and the error recorded
/// (compact JSON), per [`failure::reclaim`].
pub fn release(job: &Job, cause: Reclaim, rng: &mut impl rand::Rng) -> (FailTarget, String) {
    let policy = RetryPolicy::from_stored(&job.retry.0);
    let (outcome, error) = failure::reclaim(&policy, job.attempt, cause, rng);
    (FailTarget::from_outcome(outcome), error.to_json())
}

/// [`release`] of each of `jobs`, for the cause `cause(job)`, in order.
pub fn releases(jobs: &[Job], cause: impl Fn(&Job) -> Reclaim) -> Vec<(FailTarget, String)> {
    let mut rng = rand::rng();
    jobs.iter()
        .map(|job| release(job, cause(job), &mut rng))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::envelope;
    use crate::job::failure::DiscardReason;

    fn new_job(text: &str) -> NewJob {
        envelope::parse_for_test(text)
    }

    #[test]
    fn a_new_job_starts_pending_scheduled_or_available() {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        let state = |text: &str| initial_state(&new_job(text), now);
        assert_eq!(state(r#"{"type":"a","args":[]}"#), JobState::Available);
        assert_eq!(
            state(r#"{"type":"a","args":[],"scheduled_at":"2026-11-24T12:00:01Z"}"#),
            JobState::Scheduled
        );
        assert_eq!(
            state(r#"{"type":"a","args":[],"scheduled_at":"2026-11-24T11:59:59Z"}"#),
            JobState::Available
        );
        assert_eq!(
            state(r#"{"type":"a","args":[],"delay_until":"+PT5S"}"#),
            JobState::Scheduled
        );
        assert_eq!(
            state(r#"{"type":"a","args":[],"pending":true}"#),
            JobState::Pending
        );
    }

    #[test]
    fn outcomes_map_to_targets() {
        assert_eq!(
            FailTarget::from_outcome(Outcome::Requeue),
            FailTarget::Available
        );
        assert_eq!(
            FailTarget::from_outcome(Outcome::Retry { delay_ms: 1_500 }),
            FailTarget::Retryable { delay_ms: 1_500 }
        );
        assert_eq!(
            FailTarget::from_outcome(Outcome::Retry { delay_ms: u64::MAX }),
            FailTarget::Retryable { delay_ms: i64::MAX }
        );
        assert_eq!(
            FailTarget::from_outcome(Outcome::Discard {
                dead_letter: true,
                reason: DiscardReason::Exhausted
            }),
            FailTarget::Discarded { dead_letter: true }
        );
    }
}
