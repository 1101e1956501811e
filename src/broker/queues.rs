//! Queue operations: explicit creation, pause and resume, and what a queue looks like with its
//! live counts.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::Broker;
use super::configs::Snapshot;
use crate::error::{Error, Result};
use crate::job::dispatch::DispatchPlace;
use crate::queue_config::{self, DEFAULT_LAYER, QueueConfig};
use crate::store;
use crate::store::queue::{Bounds, QueueCounts, QueueRow, QueueState};

/// How a queue is deleted ([OJS queue deletion]).
///
/// [OJS queue deletion]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#53-queue-deletion
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

/// The bounds the database enforces for a resolved configuration.
fn bounds(config: &QueueConfig) -> Option<Bounds<'static>> {
    config.is_bounded().then(|| Bounds {
        max_jobs: config.max_size,
        max_bytes: config.max_size_bytes,
        overflow_policy: config.overflow_policy.as_str(),
    })
}

/// A queue with its live job counts.
#[derive(Debug, Clone)]
pub struct QueueStats {
    pub queue: Queue,
    pub counts: QueueCounts,
}

impl Broker {
    /// Creates a queue explicitly, with `config` as its own configuration when given;
    /// `QueueExists` if it exists (however it came to).
    pub async fn create_queue(&self, name: &str, config: Option<&Value>) -> Result<Queue> {
        let mut tx = self.db.begin().await?;
        if !store::queue::ensure(&mut *tx, name, false).await? {
            return Err(Error::QueueExists(name.to_owned()));
        }
        crate::telemetry::queues_created(1);
        if let Some(body) = config {
            self.configure_in(&mut tx, name, body).await?;
        }
        tx.commit().await?;
        if config.is_some() {
            self.configs.reload(&self.db).await?;
        }
        self.queue(name).await
    }

    /// The resolved queue configurations now in force.
    pub async fn queue_configs(&self) -> Result<Arc<Snapshot>> {
        Ok(self.configs.current(&self.db).await?)
    }

    /// The resolved configuration of `name` (`_default`: what queues without their own values
    /// get); `QueueNotFound` for an unknown queue.
    pub async fn queue_config(&self, name: &str) -> Result<Arc<QueueConfig>> {
        if name != DEFAULT_LAYER {
            self.queue(name).await?;
        }
        let configs = self.configs.current(&self.db).await?;
        Ok(if name == DEFAULT_LAYER {
            configs.default.clone()
        } else {
            configs.of(name).clone()
        })
    }

    /// Changes the configuration of `name` (or `_default`) by a config PUT body (merge rules
    /// of [`queue_config::apply_patch`]), creating an unknown queue. Applies to jobs
    /// enqueued and dispatch decisions made afterwards; returns the new resolved configuration.
    pub async fn set_queue_config(&self, name: &str, body: &Value) -> Result<Arc<QueueConfig>> {
        let mut tx = self.db.begin().await?;
        let resolved = self.configure_in(&mut tx, name, body).await?;
        tx.commit().await?;
        self.configs.reload(&self.db).await?;
        Ok(Arc::new(resolved))
    }

    /// [`Broker::set_queue_config`] inside `tx`.
    async fn configure_in(
        &self,
        tx: &mut sqlx::PgConnection,
        name: &str,
        body: &Value,
    ) -> Result<QueueConfig> {
        let is_default = name == DEFAULT_LAYER;
        let (stored, created) = store::queue::lock_config(&mut *tx, name).await?;
        crate::telemetry::queues_created(i64::from(created));
        if !is_default
            && store::queue::get(&mut *tx, name).await?.map(|q| q.state)
                == Some(QueueState::Draining)
        {
            return Err(Error::QueueDraining {
                queue: name.to_owned(),
                operation: "configure",
            });
        }
        let empty = Value::Object(Map::new());
        let default_layer = if is_default {
            empty.clone()
        } else {
            store::queue::default_layer(&mut *tx).await?
        };
        let mut layer = match stored {
            Value::Object(layer) => layer,
            _ => Map::new(),
        };
        let changed = queue_config::apply_patch(&mut layer, body, (!is_default).then_some(name))
            .map_err(Error::InvalidConfig)?;
        let layer = Value::Object(layer);
        let resolved = if is_default {
            QueueConfig::resolve(&layer, &empty)
        } else {
            QueueConfig::resolve(&default_layer, &layer)
        }
        .map_err(Error::InvalidConfig)?;
        store::queue::write_config(&mut *tx, name, &layer, &changed).await?;
        store::queue::set_bounds(&mut *tx, name, bounds(&resolved)).await?;
        if is_default {
            // Every queue inherits the new bounds unless it sets its own.
            for (queue, own) in store::queue::all_layers(&mut *tx).await? {
                let config =
                    QueueConfig::resolve(&layer, &own).unwrap_or_else(|_| resolved.clone());
                store::queue::set_bounds(&mut *tx, &queue, bounds(&config)).await?;
            }
        }
        Ok(resolved)
    }

    /// One queue's row.
    pub async fn queue(&self, name: &str) -> Result<Queue> {
        store::queue::get(&self.db, name)
            .await?
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))
    }

    /// One queue with its counts (of `tenant`'s jobs only, when given).
    pub async fn queue_stats(&self, name: &str, tenant: Option<&str>) -> Result<QueueStats> {
        let queue = self.queue(name).await?;
        Ok(self.with_counts(vec![queue], tenant).await?.remove(0))
    }

    /// Queues by name, a page at a time, with their counts (of `tenant`'s jobs only, when
    /// given); and how many there are.
    pub async fn queues(
        &self,
        state: Option<QueueState>,
        tenant: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<QueueStats>, i64)> {
        let (rows, total) = store::queue::list(&self.db, state, limit, offset).await?;
        Ok((self.with_counts(rows, tenant).await?, total))
    }

    /// `queues` with their counts, read in one statement.
    async fn with_counts(
        &self,
        queues: Vec<Queue>,
        tenant: Option<&str>,
    ) -> Result<Vec<QueueStats>> {
        let names: Vec<String> = queues.iter().map(|q| q.name.clone()).collect();
        let mut counts = store::queue::counts(&self.db, &names, tenant).await?;
        Ok(queues
            .into_iter()
            .map(|queue| QueueStats {
                counts: counts.remove(&queue.name).unwrap_or_default(),
                queue,
            })
            .collect())
    }

    /// Deletes a queue ([OJS queue deletion]). Waiting jobs are discarded or moved per
    /// `strategy` in the same transaction; while active jobs remain the queue is `draining`
    /// (fetchable, refusing new jobs and pause), and the expirer removes it once they have ended.
    ///
    /// [OJS queue deletion]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#53-queue-deletion
    pub async fn delete_queue(&self, name: &str, strategy: &DeleteStrategy) -> Result<Deleted> {
        let mut tx = self.db.begin().await?;
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
                crate::telemetry::queues_created(i64::from(
                    store::queue::ensure(&mut *tx, to, true).await?,
                ));
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
        if !draining {
            crate::telemetry::queues_deleted(1);
        }
        if let DeleteStrategy::Move(to) = strategy
            && moved_available > 0
        {
            self.announcer.announce(
                to,
                usize::try_from(moved_available).unwrap_or(usize::MAX),
                DispatchPlace::START,
            );
        }
        Ok(Deleted {
            jobs_affected,
            draining,
        })
    }

    /// Pauses (FETCH skips the queue; enqueues are accepted, active jobs finish) or resumes a
    /// queue, creating it if it does not exist yet. Idempotent; a draining queue refuses.
    pub async fn set_queue_paused(&self, name: &str, paused: bool) -> Result<Queue> {
        crate::telemetry::queues_created(i64::from(
            store::queue::ensure(&self.db, name, true).await?,
        ));
        let queue = store::queue::set_paused(&self.db, name, paused)
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
            self.announcer
                .announce(name, usize::MAX, DispatchPlace::START);
        }
        Ok(queue)
    }
}
