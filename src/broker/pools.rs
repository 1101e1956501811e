//! Worker pools and the scheduling statistics.

use std::collections::BTreeMap;

use serde_json::json;

use super::Broker;
use crate::error::{Error, Result};
use crate::scheduling::pool::{StoredPool, WorkerPool};
use crate::scheduling::starvation;
use crate::store;
use crate::store::pool::{FairQueue, PoolUsage};

/// The window of the scheduling statistics.
pub const STATS_WINDOW_SECS: i64 = 60;

/// A pool as the API shows it.
#[derive(Debug, Clone)]
pub struct PoolView {
    pub stored: StoredPool,
    pub usage: PoolUsage,
}

impl PoolView {
    /// Active jobs over the pool's concurrency (`None` without one; a pool of concurrency 0 is
    /// fully used).
    pub fn utilization(&self) -> Option<f64> {
        self.stored.pool.concurrency.map(|c| {
            if c > 0 {
                self.usage.active_jobs as f64 / f64::from(c)
            } else {
                1.0
            }
        })
    }
}

/// What a pool PUT did.
#[derive(Debug, Clone)]
pub struct PoolPut {
    pub created: bool,
    pub view: PoolView,
}

/// One queue of the scheduling statistics.
#[derive(Debug, Clone)]
pub struct QueueScheduling {
    pub queue: String,
    pub dispatched: i64,
    pub ratio: f64,
    pub avg_wait_ms: i64,
    pub active: i64,
}

/// The scheduling statistics ([OJS scheduling statistics]).
///
/// [OJS scheduling statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#102-scheduling-statistics
#[derive(Debug, Clone)]
pub struct SchedulingStats {
    pub queues: Vec<QueueScheduling>,
    pub total: i64,
    /// Queues of pools with starvation prevention that are starved now.
    pub starved: Vec<String>,
    pub pools: Vec<PoolView>,
}

impl Broker {
    /// Creates or replaces a pool. Makes its queues tenant-fair (or not) to match, in the same
    /// transaction, with enqueues held off so none lands between the two orders; records
    /// `scheduling.rebalanced` when the strategy or weights of an existing pool change.
    pub async fn put_pool(&self, pool: WorkerPool) -> Result<PoolPut> {
        let mut tx = self.db.begin().await?;
        store::locks::lock_out_enqueues(&mut tx).await?;
        let (before, stored) = store::pool::put(&mut tx, &pool).await?;
        sync_fair_queues(&mut tx).await?;
        store::queue::bump_generation(&mut *tx).await?;
        if let Some(before) = &before
            && (before.strategy != pool.strategy || before.weights != pool.weights)
        {
            let data = json!({
                "pool": pool.name,
                "previous_strategy": before.strategy.as_str(),
                "new_strategy": pool.strategy.as_str(),
                "previous_weights": before.weights,
                "new_weights": pool.weights,
            });
            store::event::insert_subject_event(
                &mut *tx,
                "scheduling.rebalanced",
                &pool.name,
                &data,
            )
            .await?;
        }
        tx.commit().await?;
        self.configs.reload(&self.db).await?;
        let usage = self.pool_usage(&pool.name).await?;
        Ok(PoolPut {
            created: before.is_none(),
            view: PoolView { stored, usage },
        })
    }

    /// Deletes a pool; its queues stop being tenant-fair unless another pool makes them so.
    pub async fn delete_pool(&self, name: &str) -> Result<()> {
        let mut tx = self.db.begin().await?;
        store::locks::lock_out_enqueues(&mut tx).await?;
        if !store::pool::delete(&mut tx, name).await? {
            return Err(Error::PoolNotFound(name.to_owned()));
        }
        sync_fair_queues(&mut tx).await?;
        store::queue::bump_generation(&mut *tx).await?;
        tx.commit().await?;
        self.configs.reload(&self.db).await?;
        Ok(())
    }

    /// Every pool, by name, with its live members and active jobs.
    pub async fn pools(&self) -> Result<Vec<PoolView>> {
        let stored = store::pool::all(&self.db).await?;
        let usage = self.all_pool_usage().await?;
        Ok(stored
            .into_iter()
            .map(|stored| PoolView {
                usage: usage.get(&stored.pool.name).copied().unwrap_or_default(),
                stored,
            })
            .collect())
    }

    /// One pool.
    pub async fn pool_view(&self, name: &str) -> Result<PoolView> {
        self.pools()
            .await?
            .into_iter()
            .find(|p| p.stored.pool.name == name)
            .ok_or_else(|| Error::PoolNotFound(name.to_owned()))
    }

    async fn all_pool_usage(&self) -> Result<BTreeMap<String, PoolUsage>> {
        let timeout = crate::wire::duration::millis(self.settings.heartbeat_timeout);
        Ok(store::pool::usage(&self.db, timeout).await?)
    }

    async fn pool_usage(&self, name: &str) -> Result<PoolUsage> {
        Ok(self
            .all_pool_usage()
            .await?
            .get(name)
            .copied()
            .unwrap_or_default())
    }

    /// Writes this process's dispatch counts to the database (every replica does so about
    /// every second; the statistics read them there).
    pub async fn flush_dispatch_counts(&self) -> Result<()> {
        Ok(self.fetcher.stats.flush(&self.db).await?)
    }

    /// The scheduling statistics over the last minute, over all replicas.
    pub async fn scheduling_stats(&self) -> Result<SchedulingStats> {
        self.flush_dispatch_counts().await?;
        let pools = self.pools().await?;
        let pool_queues: Vec<String> = pools
            .iter()
            .flat_map(|p| p.stored.pool.queues.iter().cloned())
            .collect();
        let rows = store::pool::dispatches(&self.db, STATS_WINDOW_SECS, &pool_queues).await?;
        let total: i64 = rows.iter().map(|r| r.dispatched).sum();
        let queues = rows
            .into_iter()
            .map(|r| QueueScheduling {
                ratio: if total > 0 {
                    r.dispatched as f64 / total as f64
                } else {
                    0.0
                },
                avg_wait_ms: if r.dispatched > 0 {
                    r.wait_ms / r.dispatched
                } else {
                    0
                },
                queue: r.queue,
                dispatched: r.dispatched,
                active: r.active,
            })
            .collect();
        let stored: Vec<StoredPool> = pools.iter().map(|p| p.stored.clone()).collect();
        let records = store::pool::watched_dispatches(&self.db, &stored).await?;
        let mut starved: Vec<String> = starvation::starved(&stored, &records)
            .into_iter()
            .map(|s| s.queue)
            .collect();
        starved.sort();
        starved.dedup();
        Ok(SchedulingStats {
            queues,
            total,
            starved,
            pools,
        })
    }
}

/// Brings `ojs_fair_queue` in line with the pools: the queues of pools with tenant fairness
/// enabled become tenant-fair (their backlog tagged), the others plain again. Two pools may
/// not give one queue different tenant settings.
async fn sync_fair_queues(tx: &mut sqlx::PgConnection) -> Result<()> {
    let pools = store::pool::all(&mut *tx).await?;
    let mut desired: BTreeMap<String, FairQueue> = BTreeMap::new();
    for pool in pools
        .iter()
        .map(|p| &p.pool)
        .filter(|p| p.tenant_fairness.enabled)
    {
        for queue in &pool.queues {
            let fair = FairQueue {
                queue: queue.clone(),
                pool: pool.name.clone(),
                weights: json!(pool.tenant_fairness.weights),
                default_weight: i32::try_from(pool.tenant_fairness.default_weight)
                    .unwrap_or(i32::MAX),
            };
            match desired.get(queue) {
                Some(other)
                    if other.weights != fair.weights
                        || other.default_weight != fair.default_weight =>
                {
                    return Err(Error::invalid(
                        "$.tenant_fairness",
                        format!(
                            "queue {queue:?} is tenant-fair under pool {:?} with other tenant weights; \
                             pools sharing a queue must agree on them",
                            other.pool
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    desired.insert(queue.clone(), fair);
                }
            }
        }
    }
    let current = store::pool::fair_queues(&mut *tx).await?;
    for stale in current.iter().filter(|c| !desired.contains_key(&c.queue)) {
        store::pool::make_unfair(&mut *tx, &stale.queue).await?;
    }
    for fair in desired.values() {
        if current.iter().any(|c| c == fair) {
            continue;
        }
        store::pool::make_fair(&mut *tx, fair).await?;
    }
    Ok(())
}
