//! The pruner: retention of finished jobs, events and stale workers.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Context, Pass, Service};
use crate::job::JobState;
use crate::store;

/// Pruner settings.
#[derive(Debug, Clone)]
pub struct PrunerConfig {
    /// Pause between passes (contract §1.9: at least every 5 minutes).
    pub interval: Duration,
    /// Completed jobs are kept this long after `completed_at` (default 7 days).
    pub completed: Duration,
    /// Cancelled jobs are kept this long after `cancelled_at` (default 7 days).
    pub cancelled: Duration,
    /// Discarded jobs, dead-lettered or not, are kept this long after `discarded_at`
    /// (default 30 days).
    pub discarded: Duration,
    /// Events are kept this long (default 7 days)…
    pub events: Duration,
    /// …and at most this many (default 1,000,000).
    pub max_events: i64,
    /// Stale workers are listed this long before they are deleted (default 24 hours).
    pub stale_workers: Duration,
    /// Rows per statement.
    pub batch_size: i64,
}

/// Deletes, oldest first and in short batches, finished jobs past their retention (reporting
/// dead-lettered ones as `dead_letter.pruned`), events past theirs, and workers stale for a day.
/// Deleting finished rows touches neither the FETCH index nor any row a worker can hold.
pub struct Pruner {
    context: Context,
    config: PrunerConfig,
}

impl Pruner {
    pub fn new(context: Context, config: PrunerConfig) -> Pruner {
        Pruner { context, config }
    }

    /// Deletes `target` rows in batches; returns rows deleted and whether work is left.
    async fn prune(&self, target: Target) -> Result<Pass, sqlx::Error> {
        let size = self.config.batch_size;
        self.context
            .batches("scheduler", |conn| {
                Box::pin(async move {
                    let deleted = match target {
                        Target::Jobs(state, cutoff) => {
                            store::job::prune_finished(conn, state, cutoff, size).await?
                        }
                        Target::Events(cutoff, max) => {
                            store::event::prune(conn, cutoff, max, size).await?
                        }
                        Target::Workers(cutoff) => store::worker::prune(conn, cutoff, size).await?,
                    };
                    Ok((deleted as u64, deleted >= size))
                })
            })
            .await
    }
}

/// What a batch deletes.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Jobs in this terminal state finished before the cutoff.
    Jobs(JobState, DateTime<Utc>),
    /// Events before the cutoff or beyond the count.
    Events(DateTime<Utc>, i64),
    /// Workers stale (or only seen fetching) since before the cutoff.
    Workers(DateTime<Utc>),
}

/// The cutoff `retention` before `now` (the beginning of time for absurdly long retentions).
fn since(now: DateTime<Utc>, retention: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(retention)
        .ok()
        .and_then(|r| now.checked_sub_signed(r))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

impl Service for Pruner {
    fn name(&self) -> &'static str {
        "pruner"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let now = match now {
            Some(now) => now,
            None => {
                sqlx::query_scalar!(r#"select now() as "now!""#)
                    .fetch_one(&self.context.pool)
                    .await?
            }
        };
        let c = &self.config;
        let targets = [
            Target::Jobs(JobState::Completed, since(now, c.completed)),
            Target::Jobs(JobState::Cancelled, since(now, c.cancelled)),
            Target::Jobs(JobState::Discarded, since(now, c.discarded)),
            Target::Events(since(now, c.events), c.max_events),
            Target::Workers(since(now, c.stale_workers)),
        ];
        let mut pass = Pass::default();
        for target in targets {
            let done = self.prune(target).await?;
            pass.processed += done.processed;
            pass.more |= done.more;
        }
        Ok(pass)
    }
}
