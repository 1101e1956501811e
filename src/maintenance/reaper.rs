//! The reaper: active jobs whose time is up are taken back from their workers.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::service::{Context, Pass, Service};
use crate::job::failure::Reclaim;
use crate::job::{Job, lifecycle};
use crate::store;
use crate::telemetry;

/// Reaper settings.
#[derive(Debug, Clone)]
pub struct ReaperConfig {
    /// Pause between passes (short enough to enforce deadlines within 1 s).
    pub interval: Duration,
    /// Jobs per statement.
    pub batch_size: i64,
}

/// ojsd's defaults (the settings' defaults, see [`crate::config`]).
impl Default for ReaperConfig {
    fn default() -> Self {
        ReaperConfig {
            interval: Duration::from_millis(500),
            batch_size: 1_000,
        }
    }
}

/// Reclaims active jobs past a deadline, earliest first:
///
/// * total timeout passed → `discarded` (error `expired`), whatever attempts remain;
/// * execution timeout passed → the attempt fails with error `timeout` and the retry policy
///   decides (`retryable` or `discarded`); heartbeats do not extend it;
/// * reservation (`visible_until`) passed → back to `available` at once while attempts remain
///   (error `visibility_timeout`; the attempt already counted), else `discarded`.
///
/// Discards enter the dead-letter queue per `on_exhaustion`. The worker's later ACK/NACK gets
/// 409 (the claim is fenced); its next heartbeat lists the job in `jobs_lost`.
pub struct Reaper {
    context: Context,
    config: ReaperConfig,
}

impl Reaper {
    pub fn new(context: Context, config: ReaperConfig) -> Reaper {
        Reaper { context, config }
    }
}

/// Which of a job's deadlines ran out first matters less than which one decides: the total
/// timeout ends the job, the execution timeout fails the attempt, the reservation returns it.
fn cause(job: &Job, now: DateTime<Utc>) -> Reclaim {
    if job.total_deadline_at.is_some_and(|at| at <= now) {
        Reclaim::TotalTimeout
    } else if job.timeout_at.is_some_and(|at| at <= now) {
        Reclaim::ExecutionTimeout
    } else {
        Reclaim::VisibilityTimeout
    }
}

impl Service for Reaper {
    fn name(&self) -> &'static str {
        "reaper"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let size = self.config.batch_size;
        self.context
            .batches("reaper", |conn| {
                Box::pin(async move {
                    let overdue = store::job::lock_overdue(&mut *conn, now, size).await?;
                    let db_now = overdue.now;
                    let decided = lifecycle::releases(&overdue.jobs, |job| cause(job, db_now));
                    let released =
                        store::job::release_many(conn, &overdue.jobs, &decided, now).await?;
                    telemetry::attempts_finished(&released);
                    Ok((released.len() as u64, overdue.more))
                })
            })
            .await
    }
}
