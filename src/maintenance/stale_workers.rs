//! The stale-worker detector: workers that stopped heartbeating lose their jobs.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::service::{Context, Pass, Service};
use crate::job::failure::Reclaim;
use crate::job::lifecycle;
use crate::store;
use crate::telemetry;

/// Stale-worker detector settings.
#[derive(Debug, Clone)]
pub struct StaleWorkersConfig {
    /// Pause between passes (short enough to check at least every 5 s).
    pub interval: Duration,
    /// A worker whose last heartbeat (or registration) is older than this is stale. ojsd's
    /// default is three heartbeat intervals (45 s with the default 15 s interval), in line with
    /// the core spec's [BEAT]; the worker protocol's own default is 30 s (see
    /// [dead worker detection]).
    ///
    /// [BEAT]: https://github.com/openjobspec/spec/blob/main/spec/ojs-core.md#75-beat
    /// [dead worker detection]: https://github.com/openjobspec/spec/blob/main/spec/ojs-worker-protocol.md#101-heartbeat-based-detection
    pub heartbeat_timeout: Duration,
    /// Workers and jobs per statement.
    pub batch_size: i64,
}

/// ojsd's defaults (the settings' defaults, see [`crate::config`]).
impl Default for StaleWorkersConfig {
    fn default() -> Self {
        StaleWorkersConfig {
            interval: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_secs(45),
            batch_size: 1_000,
        }
    }
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
        let size = self.config.batch_size;
        let timeout = self.config.heartbeat_timeout;
        self.context
            .batches("reaper", |conn| {
                Box::pin(async move {
                    let newly_stale =
                        store::worker::mark_stale(&mut *conn, timeout, now, size).await?;
                    for worker in &newly_stale {
                        tracing::warn!(worker_id = %worker, "worker stopped heartbeating; releasing its jobs");
                    }
                    // Includes workers whose jobs an earlier pass could not release in one batch.
                    let stale = store::worker::stale_with_jobs(&mut *conn, size).await?;
                    let held = store::job::lock_held_by(&mut *conn, &stale, size).await?;
                    let decided = lifecycle::releases(&held, |_| Reclaim::WorkerDeath);
                    let released = store::job::release_many(conn, &held, &decided, now).await?;
                    telemetry::attempts_finished(&released);
                    let full = newly_stale.len() as i64 >= size || held.len() as i64 >= size;
                    Ok(((newly_stale.len() + released.len()) as u64, full))
                })
            })
            .await
    }
}
