//! Dispatch bookkeeping of one process (not scheduling policy, which is [`crate::scheduling`]):
//! dispatch counts waiting to be flushed to the database (the scheduling statistics and
//! starvation detection read them there, over all replicas), backlog depths for
//! `least-loaded`, and the rate limit of `scheduling.pool_overloaded` events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use tokio::time::Instant;

use crate::job::Job;
use crate::store;
use crate::store::pool::DispatchCount;

/// How long a backlog depth read for `least-loaded` is reused.
const DEPTH_TTL: Duration = Duration::from_millis(250);

/// Depths are counted up to this many jobs per queue (deeper is "deep enough").
pub const DEPTH_CAP: i64 = 100_000;

/// At most one `scheduling.pool_overloaded` per pool and process this often.
const OVERLOAD_EVENT_INTERVAL: Duration = Duration::from_secs(10);

/// Dispatch counts by (second, queue, pool): (jobs, summed wait in ms).
type Counts = HashMap<(DateTime<Utc>, String, String), (i64, i64)>;

/// Backlog depths by queue list: (read at, available per queue).
type Depths = HashMap<Vec<String>, (Instant, Vec<i64>)>;

/// The bookkeeping.
#[derive(Debug, Default)]
pub struct DispatchStats {
    /// (second, queue, pool) → (dispatched, summed wait in ms), not yet in the database.
    pending: Mutex<Counts>,
    /// Queue list → (read at, available per queue).
    depths: Mutex<Depths>,
    /// Pool → last `pool_overloaded` event.
    overloaded: Mutex<HashMap<String, Instant>>,
}

impl DispatchStats {
    /// Counts `jobs`, just claimed by a member of `pool` (`""` for none).
    pub fn record(&self, jobs: &[Job], pool: &str) {
        if jobs.is_empty() {
            return;
        }
        let mut pending = self.pending.lock().expect("dispatch-stats lock");
        for job in jobs {
            let started = job.started_at.unwrap_or_else(Utc::now);
            let second = started
                .duration_trunc(TimeDelta::seconds(1))
                .unwrap_or(started);
            let wait_ms = job
                .enqueued_at
                .map_or(0, |at| (started - at).num_milliseconds().max(0));
            let entry = pending
                .entry((second, job.queue.clone(), pool.to_owned()))
                .or_default();
            entry.0 += 1;
            entry.1 += wait_ms;
        }
    }

    /// Adds the counts not yet written to the database. On failure they are kept for the
    /// next flush.
    pub async fn flush(&self, db: &Db) -> Result<(), sqlx::Error> {
        let taken: Vec<_> = std::mem::take(&mut *self.pending.lock().expect("dispatch-stats lock"))
            .into_iter()
            .collect();
        if taken.is_empty() {
            return Ok(());
        }
        let rows: Vec<DispatchCount> = taken
            .iter()
            .map(|((second, queue, pool), (n, wait))| DispatchCount {
                second: *second,
                queue: queue.clone(),
                pool: pool.clone(),
                dispatched: *n,
                wait_ms: *wait,
            })
            .collect();
        if let Err(e) = store::pool::add_dispatches(db, &rows).await {
            let mut pending = self.pending.lock().expect("dispatch-stats lock");
            for (key, (n, wait)) in taken {
                let entry = pending.entry(key).or_default();
                entry.0 += n;
                entry.1 += wait;
            }
            return Err(e);
        }
        Ok(())
    }

    /// Available jobs of each of `queues` (counted up to [`DEPTH_CAP`]), read at most every
    /// [`DEPTH_TTL`] per queue list.
    pub async fn depths(&self, db: &Db, queues: &[String]) -> Result<Vec<i64>, sqlx::Error> {
        let now = Instant::now();
        if let Some((at, depths)) = self.depths.lock().expect("dispatch-stats lock").get(queues)
            && now.duration_since(*at) < DEPTH_TTL
        {
            return Ok(depths.clone());
        }
        let rows = store::pool::available(db, queues, DEPTH_CAP).await?;
        let depths: Vec<i64> = queues
            .iter()
            .map(|q| rows.iter().find(|(name, _)| name == q).map_or(0, |r| r.1))
            .collect();
        let mut cache = self.depths.lock().expect("dispatch-stats lock");
        if cache.len() > 1_000 {
            cache.clear();
        }
        cache.insert(queues.to_vec(), (now, depths.clone()));
        Ok(depths)
    }

    /// Whether a `pool_overloaded` event for `pool` is due now (and, if so, notes it).
    pub fn overload_event_due(&self, pool: &str) -> bool {
        let now = Instant::now();
        let mut last = self.overloaded.lock().expect("dispatch-stats lock");
        match last.get(pool) {
            Some(at) if now.duration_since(*at) < OVERLOAD_EVENT_INTERVAL => false,
            _ => {
                last.insert(pool.to_owned(), now);
                true
            }
        }
    }
}
