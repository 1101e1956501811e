//! Checkpoints (OJS durable execution): the latest state a job saved, readable by anyone the job
//! is visible to, and handed to the job's next attempt by FETCH (the claim statement reads it).
//!
//! A job takes saves until it finishes: in any waiting state (a producer may seed one) or while
//! active. A save that names its `worker_id` is fenced: the job must be active and held by that
//! worker, so a worker whose claim lapsed cannot overwrite its successor's progress. Once the
//! job finishes, its checkpoint stays readable (and deletable) until the job is pruned.

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

use super::Broker;
use crate::error::{Error, Result};
use crate::job::{JobId, JobState, RawJson};
use crate::store;

/// The states a job takes a checkpoint in.
const SAVABLE: &[JobState] = &[
    JobState::Scheduled,
    JobState::Available,
    JobState::Pending,
    JobState::Retryable,
    JobState::Active,
];

/// A job's latest checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub job_id: JobId,
    /// The saved state; `None` in the answer to a save (the caller has it).
    pub state: Option<RawJson>,
    /// 1 for the first save, one more for each later one.
    pub sequence: i32,
    pub created_at: DateTime<Utc>,
}

impl Broker {
    /// Saves `state` as job `id`'s latest checkpoint (see the module doc for who may).
    pub async fn save_checkpoint(
        &self,
        id: JobId,
        worker_id: Option<&str>,
        state: &RawValue,
    ) -> Result<Checkpoint> {
        let row = store::checkpoint::save(&self.db, id.0, worker_id, state)
            .await?
            .ok_or(Error::JobNotFound(id))?;
        if let (Some(sequence), Some(created_at)) = (row.sequence, row.created_at) {
            return Ok(Checkpoint {
                job_id: id,
                state: None,
                sequence,
                created_at,
            });
        }
        let allowed = if worker_id.is_some() {
            &[JobState::Active][..]
        } else {
            SAVABLE
        };
        if !allowed.contains(&row.state) {
            return Err(Error::InvalidTransition {
                job_id: id,
                operation: "checkpoint",
                current: row.state,
                allowed,
            });
        }
        Err(Error::NotOwner {
            job_id: id,
            owner: row.worker_id.unwrap_or_default(),
        })
    }

    /// Job `id`'s latest checkpoint.
    pub async fn checkpoint(&self, id: JobId) -> Result<Checkpoint> {
        let row = store::checkpoint::get(&self.db, id.0)
            .await?
            .ok_or(Error::JobNotFound(id))?;
        match (row.state, row.sequence, row.created_at) {
            (Some(state), Some(sequence), Some(created_at)) => Ok(Checkpoint {
                job_id: id,
                state: Some(state),
                sequence,
                created_at,
            }),
            _ => Err(Error::CheckpointNotFound(id)),
        }
    }

    /// Deletes job `id`'s checkpoint; whether it had one.
    pub async fn delete_checkpoint(&self, id: JobId) -> Result<bool> {
        store::checkpoint::delete(&self.db, id.0)
            .await?
            .ok_or(Error::JobNotFound(id))
    }
}
