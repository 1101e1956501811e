//! Queue operations: explicit creation, pause and resume, and what a queue looks like with its
//! live counts.

use serde_json::json;

use super::Broker;
use crate::error::{Error, Result};
use crate::store;
use crate::store::queue::{QueueCounts, QueueRow, QueueState};

/// How a queue is deleted (contract §4.4.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteStrategy {
    /// Only an empty queue (no unfinished job) is deleted.
    Reject,
    /// Waiting jobs are discarded (`queue_deleted`); active ones finish.
    Discard,
    /// Waiting jobs move to this queue; active ones finish.
    Move(String),
}

impl DeleteStrategy {
    /// The wire name.
    pub fn name(&self) -> &'static str {
        match self {
            DeleteStrategy::Reject => "reject",
            DeleteStrategy::Discard => "discard",
            DeleteStrategy::Move(_) => "move",
        }
    }
}

/// What a deletion did.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// Jobs discarded or moved.
    pub jobs_affected: i64,
    /// Whether active jobs remain: the queue is `draining` until they end.
    pub draining: bool,
}

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
        Ok(self.with_counts(vec![queue]).await?.remove(0))
    }

    /// Queues by name, a page at a time, with their counts; and how many there are.
    pub async fn queues(
        &self,
        state: Option<QueueState>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<QueueStats>, i64)> {
        let (rows, total) = store::queue::list(&self.pool, state, limit, offset).await?;
        Ok((self.with_counts(rows).await?, total))
    }

    /// `queues` with their counts, read in one statement.
    async fn with_counts(&self, queues: Vec<Queue>) -> Result<Vec<QueueStats>> {
        let names: Vec<String> = queues.iter().map(|q| q.name.clone()).collect();
        let mut counts = store::queue::counts(&self.pool, &names).await?;
        Ok(queues
            .into_iter()
            .map(|queue| QueueStats {
                counts: counts.remove(&queue.name).unwrap_or_default(),
                queue,
            })
            .collect())
    }

    /// Deletes a queue (contract §4.4.6). Waiting jobs are discarded or moved per `strategy`
    /// in the same transaction; while active jobs remain the queue is `draining` (fetchable,
    /// refusing new jobs and pause), and the expirer removes it once they have ended.
    pub async fn delete_queue(&self, name: &str, strategy: &DeleteStrategy) -> Result<Deleted> {
        let mut tx = self.pool.begin().await?;
        let target = store::queue::lock_for_delete(&mut *tx, name)
            .await?
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))?;
        if target.state == QueueState::Draining {
            return Err(Error::QueueDraining {
                queue: name.to_owned(),
                operation: "delete",
            });
        }
        let mut moved_available = 0;
        let jobs_affected = match strategy {
            DeleteStrategy::Reject if target.waiting + target.active > 0 => {
                return Err(Error::QueueNotEmpty {
                    queue: name.to_owned(),
                    non_terminal: target.waiting + target.active,
                });
            }
            DeleteStrategy::Reject => 0,
            DeleteStrategy::Discard => store::queue::discard_waiting(&mut *tx, name).await?,
            DeleteStrategy::Move(to) => {
                store::queue::ensure(&mut *tx, to, true).await?;
                let (moved, available) = store::queue::move_waiting(&mut *tx, name, to).await?;
                moved_available = available;
                moved
            }
        };
        let mut deletion = json!({"strategy": strategy.name(), "jobs_affected": jobs_affected});
        if let DeleteStrategy::Move(to) = strategy {
            deletion["target_queue"] = json!(to);
        }
        let draining = target.active > 0;
        store::queue::finish_delete(&mut *tx, name, &deletion, draining).await?;
        tx.commit().await?;
        if let DeleteStrategy::Move(to) = strategy
            && moved_available > 0
        {
            self.announcer
                .announce(to, usize::try_from(moved_available).unwrap_or(usize::MAX));
        }
        Ok(Deleted {
            jobs_affected,
            draining,
        })
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
