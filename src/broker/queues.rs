//! Queue operations: explicit creation, pause and resume, and what a queue looks like with its
//! live counts.

use super::Broker;
use crate::error::{Error, Result};
use crate::store;
use crate::store::queue::{QueueCounts, QueueRow, QueueState};

/// A queue: its row.
pub type Queue = QueueRow;

/// A queue with its live job counts.
#[derive(Debug, Clone)]
pub struct QueueStats {
    pub queue: Queue,
    pub counts: QueueCounts,
}

impl Broker {
    /// Creates a queue explicitly; `QueueExists` if it exists (however it came to).
    pub async fn create_queue(&self, name: &str) -> Result<Queue> {
        if !store::queue::ensure(&self.pool, name, false).await? {
            return Err(Error::QueueExists(name.to_owned()));
        }
        self.queue(name).await
    }

    /// One queue's row.
    pub async fn queue(&self, name: &str) -> Result<Queue> {
        store::queue::get(&self.pool, name)
            .await?
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))
    }

    /// One queue with its counts.
    pub async fn queue_stats(&self, name: &str) -> Result<QueueStats> {
        let queue = self.queue(name).await?;
        let counts = store::queue::counts(&self.pool, name).await?;
        Ok(QueueStats { queue, counts })
    }

    /// Queues by name, a page at a time, with their counts; and how many there are.
    pub async fn queues(
        &self,
        state: Option<QueueState>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<QueueStats>, i64)> {
        let (rows, total) = store::queue::list(&self.pool, state, limit, offset).await?;
        let mut out = Vec::with_capacity(rows.len());
        for queue in rows {
            let counts = store::queue::counts(&self.pool, &queue.name).await?;
            out.push(QueueStats { queue, counts });
        }
        Ok((out, total))
    }

    /// Pauses (FETCH skips the queue; enqueues are accepted, active jobs finish) or resumes a
    /// queue, creating it if it does not exist yet. Idempotent; a draining queue refuses.
    pub async fn set_queue_paused(&self, name: &str, paused: bool) -> Result<Queue> {
        store::queue::ensure(&self.pool, name, true).await?;
        let queue = store::queue::set_paused(&self.pool, name, paused)
            .await?
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))?;
        if queue.state == QueueState::Draining {
            return Err(Error::QueueDraining {
                queue: name.to_owned(),
                operation: if paused { "pause" } else { "resume" },
            });
        }
        if !paused {
            // Long polls waiting on the queue (here and on other replicas) look again.
            self.announcer.announce(name, usize::MAX);
        }
        Ok(queue)
    }
}
