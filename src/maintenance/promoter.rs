//! The promoter: due `scheduled` and `retryable` jobs become `available`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::service::{Context, Pass, Service};
use crate::store;

/// Promoter settings.
#[derive(Debug, Clone)]
pub struct PromoterConfig {
    /// Pause between passes. Jobs become available within about this long of their due time
    /// (ojsd aims for 500 ms; the OJS conformance levels ask for 1 s, see [delayed jobs]).
    ///
    /// [delayed jobs]: https://github.com/openjobspec/spec/blob/main/spec/ojs-conformance.md#231-delayed-jobs-l2-del
    pub interval: Duration,
    /// Jobs of each kind (scheduled, retryable) per statement.
    pub batch_size: i64,
}

/// ojsd's defaults (the settings' defaults, see [`crate::config`]).
impl Default for PromoterConfig {
    fn default() -> Self {
        PromoterConfig {
            interval: Duration::from_millis(250),
            batch_size: 1_000,
        }
    }
}

/// Moves due jobs of every queue to `available`, earliest due first, and notifies their queues
/// (waking long-polling fetchers).
pub struct Promoter {
    context: Context,
    config: PromoterConfig,
}

impl Promoter {
    pub fn new(context: Context, config: PromoterConfig) -> Promoter {
        Promoter { context, config }
    }
}

impl Service for Promoter {
    fn name(&self) -> &'static str {
        "promoter"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let size = self.config.batch_size;
        // Maintenance mode: due jobs wait (they keep their place: promoted later, their
        // enqueued_at is their due time); dead-lettered jobs still move.
        let held = self.context.hold.is_on();
        self.context
            .batches("scheduler", |conn| {
                Box::pin(async move {
                    let promoted = if held {
                        0
                    } else {
                        store::job::promote_due(&mut *conn, None, now, size)
                            .await?
                            .jobs
                    };
                    // Dead-lettered jobs of queues with a dead-letter queue move there.
                    let routed = store::dead_letter::route(&mut *conn, size).await?;
                    if !routed.is_empty() {
                        let payloads: Vec<String> =
                            routed.iter().map(|q| format!("{q} maintenance")).collect();
                        store::notify_available(&mut *conn, &payloads).await?;
                    }
                    Ok((promoted as u64, promoted >= size))
                })
            })
            .await
    }
}
