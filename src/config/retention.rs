//! `retention`: how long finished jobs, events, stale workers and cron runs are kept.

use std::time::Duration;

use super::values::{span, span_default};
use crate::maintenance::PrunerConfig;

pub const DEFAULT_RETENTION_COMPLETED: &str = "P7D";
pub const DEFAULT_RETENTION_CANCELLED: &str = "P7D";
pub const DEFAULT_RETENTION_DISCARDED: &str = "P30D";
pub const DEFAULT_EVENT_RETENTION: &str = "P7D";
pub const DEFAULT_EVENT_MAX_COUNT: u64 = 1_000_000;
pub const DEFAULT_STALE_WORKER_RETENTION: &str = "P1D";
/// How long cron run-ledger rows are kept.
pub const DEFAULT_CRON_HISTORY_RETENTION: &str = "P7D";

#[derive(Debug, Clone, clap::Args)]
pub struct Retention {
    /// How long completed jobs are kept.
    #[arg(
        long = "retention-completed",
        id = "retention_completed",
        env = "OJS_RETENTION_COMPLETED",
        value_parser = span,
        default_value = DEFAULT_RETENTION_COMPLETED,
    )]
    pub completed: Duration,

    /// How long cancelled jobs are kept.
    #[arg(
        long = "retention-cancelled",
        id = "retention_cancelled",
        env = "OJS_RETENTION_CANCELLED",
        value_parser = span,
        default_value = DEFAULT_RETENTION_CANCELLED,
    )]
    pub cancelled: Duration,

    /// How long discarded jobs (dead-lettered or not) are kept.
    #[arg(
        long = "retention-discarded",
        id = "retention_discarded",
        env = "OJS_RETENTION_DISCARDED",
        value_parser = span,
        default_value = DEFAULT_RETENTION_DISCARDED,
    )]
    pub discarded: Duration,

    /// How long events are kept.
    #[arg(
        long = "event-retention",
        id = "event_retention",
        env = "OJS_EVENT_RETENTION",
        value_parser = span,
        default_value = DEFAULT_EVENT_RETENTION,
    )]
    pub events: Duration,

    /// Most events kept; older ones beyond it are pruned.
    #[arg(
        long = "event-max-count",
        id = "event_max_count",
        env = "OJS_EVENT_MAX_COUNT",
        default_value_t = DEFAULT_EVENT_MAX_COUNT,
    )]
    pub max_events: u64,

    /// How long a stale worker stays listed before it is deleted.
    #[arg(
        long = "stale-worker-retention",
        id = "stale_worker_retention",
        env = "OJS_STALE_WORKER_RETENTION",
        value_parser = span,
        default_value = DEFAULT_STALE_WORKER_RETENTION,
    )]
    pub stale_workers: Duration,

    /// How long the cron run ledger (`ojs_cron_run`, one row per occurrence of each entry)
    /// keeps a row; rows of runs that may still be running are kept.
    #[arg(
        long = "cron-history-retention",
        id = "cron_history_retention",
        env = "OJS_CRON_HISTORY_RETENTION",
        value_parser = span,
        default_value = DEFAULT_CRON_HISTORY_RETENTION,
    )]
    pub cron_runs: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            completed: span_default(DEFAULT_RETENTION_COMPLETED),
            cancelled: span_default(DEFAULT_RETENTION_CANCELLED),
            discarded: span_default(DEFAULT_RETENTION_DISCARDED),
            events: span_default(DEFAULT_EVENT_RETENTION),
            max_events: DEFAULT_EVENT_MAX_COUNT,
            stale_workers: span_default(DEFAULT_STALE_WORKER_RETENTION),
            cron_runs: span_default(DEFAULT_CRON_HISTORY_RETENTION),
        }
    }
}

impl Retention {
    /// The pruner's retention periods (its interval and batch size are the maintenance
    /// section's).
    pub fn pruner(&self) -> PrunerConfig {
        PrunerConfig {
            completed: self.completed,
            cancelled: self.cancelled,
            discarded: self.discarded,
            events: self.events,
            max_events: i64::try_from(self.max_events).unwrap_or(i64::MAX),
            stale_workers: self.stale_workers,
            cron_runs: self.cron_runs,
            ..PrunerConfig::default()
        }
    }

    /// Whether completed jobs are kept (a zero `OJS_RETENTION_COMPLETED` deletes them on ACK).
    pub fn keeps_completed(&self) -> bool {
        !self.completed.is_zero()
    }
}
