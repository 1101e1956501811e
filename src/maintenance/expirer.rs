//! The expirer: waiting jobs that may no longer start are discarded.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::service::{Context, Pass, Service};
use crate::store;

/// Expirer settings.
#[derive(Debug, Clone)]
pub struct ExpirerConfig {
    /// Pause between passes (short enough to expire jobs within 1 s).
    pub interval: Duration,
    /// Jobs per statement.
    pub batch_size: i64,
}

/// ojsd's defaults (the settings' defaults, see [`crate::config`]).
impl Default for ExpirerConfig {
    fn default() -> Self {
        ExpirerConfig {
            interval: Duration::from_millis(500),
            batch_size: 1_000,
        }
    }
}

/// Discards `scheduled`, `available`, `pending` and `retryable` jobs whose `expires_at`,
/// enqueue TTL or total timeout passed (error `expired`; dead-lettered per `on_exhaustion`).
/// FETCH already never hands such a job out; this makes its state say so. Each pass also
/// removes draining queues (being deleted) whose last unfinished job has ended.
pub struct Expirer {
    context: Context,
    config: ExpirerConfig,
}

impl Expirer {
    pub fn new(context: Context, config: ExpirerConfig) -> Expirer {
        Expirer { context, config }
    }
}

impl Service for Expirer {
    fn name(&self) -> &'static str {
        "expirer"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let size = self.config.batch_size;
        // Queues being deleted whose last job has ended are removed now.
        let mut tx = self.context.begin("scheduler").await?;
        let removed = store::queue::complete_draining(&mut *tx).await?;
        tx.commit().await?;
        crate::telemetry::queues_deleted(removed.len());
        self.context
            .batches("scheduler", |conn| {
                Box::pin(async move {
                    let expired = store::job::expire_due(conn, now, size).await?;
                    crate::telemetry::jobs_expired(&expired);
                    let expired: i64 = expired.iter().map(|(_, _, n)| n).sum();
                    Ok((expired as u64, expired >= size))
                })
            })
            .await
    }
}
