//! The stale-worker detector: workers that stopped heartbeating lose their jobs.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Context, MAX_BATCHES_PER_PASS, Pass, Service};
use crate::broker::release_jobs;
use crate::job::failure::Reclaim;
use crate::store;

/// Stale-worker detector settings.
#[derive(Debug, Clone)]
pub struct StaleWorkersConfig {
    /// Pause between passes (contract §1.9: at least every 5 s).
    pub interval: Duration,
    /// A worker whose last heartbeat (or registration) is older than this is stale
    /// (contract §6.4: three heartbeat intervals, 45 s by default).
    pub heartbeat_timeout: Duration,
    /// Workers and jobs per statement.
    pub batch_size: i64,
}

/// Declares silent workers stale (`worker.stopped`, reason `error`) and releases every job they
/// still hold like a lost reservation, with error `worker_death`: back to `available` while
/// attempts remain, else `discarded`. Workers only ever seen fetching are never declared stale.
pub struct StaleWorkers {
    context: Context,
    config: StaleWorkersConfig,
}

impl StaleWorkers {
    pub fn new(context: Context, config: StaleWorkersConfig) -> StaleWorkers {
        StaleWorkers { context, config }
    }
}

impl Service for StaleWorkers {
    fn name(&self) -> &'static str {
        "stale_workers"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let mut pass = Pass::default();
        let batch = self.config.batch_size;
        for _ in 0..MAX_BATCHES_PER_PASS {
            let mut tx = self.context.begin("reaper").await?;
            let newly_stale =
                store::worker::mark_stale(&mut *tx, self.config.heartbeat_timeout, now, batch)
                    .await?;
            for worker in &newly_stale {
                tracing::warn!(worker_id = %worker, "worker stopped heartbeating; releasing its jobs");
            }
            // Includes workers whose jobs an earlier pass could not release in one batch.
            let stale = store::worker::stale_with_jobs(&mut *tx, batch).await?;
            let held = store::job::lock_held_by(&mut *tx, &stale, batch).await?;
            let released = release_jobs(&mut tx, &held, |_| Reclaim::WorkerDeath, now).await?;
            tx.commit().await?;
            pass.processed += (newly_stale.len() + released.len()) as u64;
            pass.more = newly_stale.len() as i64 >= batch || held.len() as i64 >= batch;
            if !pass.more {
                break;
            }
        }
        Ok(pass)
    }
}
