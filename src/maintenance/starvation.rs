//! Starvation watch: records `scheduling.queue_starved` when a queue of a pool with starvation
//! prevention has had work and no dispatch, on any replica, for longer than the pool's
//! `rotation_interval` (decided by [`crate::scheduling::starvation`]); once per episode (a
//! dispatch ends it). Also prunes old dispatch counts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::service::{Context, Pass, Service};
use crate::scheduling::starvation;
use crate::store;

/// Dispatch counts are kept this long (the statistics read the last minute).
const KEEP_COUNTS_SECS: i64 = 600;

/// Settings.
#[derive(Debug, Clone)]
pub struct StarvationConfig {
    pub interval: Duration,
}

impl Default for StarvationConfig {
    fn default() -> Self {
        StarvationConfig {
            interval: Duration::from_secs(1),
        }
    }
}

/// (pool, queue) → the last dispatch of the starvation episode already reported.
type Reported = HashMap<(String, String), Option<DateTime<Utc>>>;

/// The service.
#[derive(Debug)]
pub struct StarvationWatch {
    context: Context,
    config: StarvationConfig,
    reported: Mutex<Reported>,
}

impl StarvationWatch {
    pub fn new(context: Context, config: StarvationConfig) -> StarvationWatch {
        StarvationWatch {
            context,
            config,
            reported: Mutex::default(),
        }
    }
}

impl Service for StarvationWatch {
    fn name(&self) -> &'static str {
        "starvation"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, _now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let db = &self.context.db;
        let pools = store::pool::all(db).await?;
        let records = store::pool::watched_dispatches(db, &pools).await?;
        let starved = starvation::starved(&pools, &records);
        let mut due = Vec::new();
        {
            let mut reported = self.reported.lock().expect("starvation lock");
            reported.retain(|key, _| {
                starved
                    .iter()
                    .any(|s| (&s.pool, &s.queue) == (&key.0, &key.1))
            });
            for s in &starved {
                let key = (s.pool.clone(), s.queue.clone());
                if reported.get(&key) != Some(&s.last_dispatch) {
                    reported.insert(key, s.last_dispatch);
                    due.push(s);
                }
            }
        }
        for s in &due {
            let ms = u64::try_from(s.idle_ms).unwrap_or(0);
            let data = json!({
                "queue": s.queue,
                "pool": s.pool,
                "duration": crate::wire::duration::format_iso(ms),
                "duration_ms": ms,
                "available_count": s.available,
            });
            store::event::insert_queue_event(db, "scheduling.queue_starved", &s.queue, &data)
                .await?;
            crate::telemetry::queue_starved(&s.queue);
        }
        let pruned = store::pool::prune_dispatches(db, KEEP_COUNTS_SECS).await?;
        Ok(Pass {
            processed: due.len() as u64 + pruned,
            more: false,
        })
    }
}
