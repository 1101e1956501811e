//! Planner statistics: `ANALYZE ojs_job` whenever the table has doubled or halved in size
//! since the statistics were last taken here.
//!
//! The server's statements are planned once per connection, generically (`app.rs`), and a
//! plan is kept until the statistics of a table it reads change. A plan made while the table
//! was small (a new install, a queue just vacuumed) reads it whole, which is right then and
//! ruinous once it has grown: when a transaction pins the MVCC horizon, ojs_job grows by every
//! claimed and finished job's old row versions, long before autovacuum (one pass a minute at
//! most, by default) gets to it, and a plan that reads the table whole reads them all. Taking
//! the statistics when the size has changed by half makes every server connection plan again
//! for the size the table has. `ANALYZE` reads a bounded sample and blocks no reader or
//! writer.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::service::{Context, Pass, Service};
use crate::store;

/// Settings.
#[derive(Debug, Clone)]
pub struct PlannerStatsConfig {
    pub interval: Duration,
}

impl Default for PlannerStatsConfig {
    fn default() -> Self {
        PlannerStatsConfig {
            interval: Duration::from_secs(2),
        }
    }
}

/// Tables smaller than this many pages are read whole by any plan at little cost. Above it the
/// statistics follow every doubling: a plan made for a table of a few pages reads it whole,
/// and it is cheap only while the table stays that small (at 64 pages, a single ACK reading
/// the table whole cost a w3-latency run a tenth of Postgres' CPU).
const SMALL_TABLE_PAGES: i64 = 8;

/// The service.
#[derive(Debug)]
pub struct PlannerStats {
    context: Context,
    config: PlannerStatsConfig,
    /// Pages of ojs_job when its statistics were last taken here (`None`: not yet).
    analyzed_at_pages: Mutex<Option<i64>>,
}

impl PlannerStats {
    pub fn new(context: Context, config: PlannerStatsConfig) -> PlannerStats {
        PlannerStats {
            context,
            config,
            analyzed_at_pages: Mutex::default(),
        }
    }
}

/// Whether a table of `pages` pages needs new statistics, taken last at `analyzed` pages.
fn stale(analyzed: Option<i64>, pages: i64) -> bool {
    match analyzed {
        None => true,
        Some(then) => {
            pages.max(then) >= SMALL_TABLE_PAGES && (pages >= then * 2 || pages * 2 <= then)
        }
    }
}

impl Service for PlannerStats {
    fn name(&self) -> &'static str {
        "planner-stats"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, _now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let db = &self.context.db;
        let pages = store::job::table_pages(db).await?;
        let analyzed = *self.analyzed_at_pages.lock().expect("planner stats lock");
        if !stale(analyzed, pages) {
            return Ok(Pass::default());
        }
        store::job::analyze(db).await?;
        tracing::debug!(pages, "ojs_job statistics taken");
        *self.analyzed_at_pages.lock().expect("planner stats lock") = Some(pages);
        Ok(Pass {
            processed: 1,
            more: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_are_taken_first_then_when_the_size_doubles_or_halves() {
        assert!(stale(None, 0));
        assert!(!stale(Some(1), 7));
        assert!(stale(Some(1), 8));
        assert!(stale(Some(0), 8));
        assert!(!stale(Some(8), 15));
        assert!(stale(Some(8), 16));
        assert!(!stale(Some(100), 199));
        assert!(stale(Some(100), 200));
        assert!(stale(Some(100), 50));
        assert!(!stale(Some(100), 51));
        assert!(!stale(Some(6), 3));
    }
}
