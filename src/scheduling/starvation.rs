//! Starvation detection: a queue of a pool with starvation prevention is *starved* when it has
//! had work and no dispatch, on any replica, for longer than the pool's `rotation_interval`.
//!
//! Dispatches are counted by every process and written to the database every
//! [`COUNT_FLUSH_INTERVAL`], so a queue counts as starved only once it has been idle that much
//! longer than its interval. The statistics API and the starvation watch (a maintenance service)
//! both read the records and decide here.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::scheduling::pool::{StoredPool, WorkerPool};

/// How often each process writes its dispatch counts to the database.
pub const COUNT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);

/// What the database knows of one queue's dispatches.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDispatch {
    pub queue: String,
    /// When it was last dispatched from (the end of that second; `None`: not within the
    /// recorded minutes).
    pub last_dispatch: Option<DateTime<Utc>>,
    /// Jobs it has available now (counted up to a cap).
    pub available: i64,
    /// The database clock when this was read.
    pub now: DateTime<Utc>,
}

/// A starved queue of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Starved {
    pub pool: String,
    pub queue: String,
    /// Since the last dispatch (or since the pool was saved, if later).
    pub idle_ms: i64,
    pub available: i64,
    /// The last dispatch seen (identifies the episode).
    pub last_dispatch: Option<DateTime<Utc>>,
}

/// The pools among `pools` whose queues are watched: those with starvation prevention.
fn watched(pools: &[StoredPool]) -> impl Iterator<Item = &StoredPool> {
    pools.iter().filter(|p| p.pool.starvation.enabled)
}

/// The queues whose dispatch records [`starved`] needs (empty: nothing is watched).
pub fn watched_queues(pools: &[StoredPool]) -> Vec<String> {
    watched(pools)
        .flat_map(|p| p.pool.queues.iter().cloned())
        .collect()
}

/// The starved queues of `pools`, given the dispatch records of [`watched_queues`].
pub fn starved(pools: &[StoredPool], records: &[QueueDispatch]) -> Vec<Starved> {
    let mut out = Vec::new();
    for stored in watched(pools) {
        let pool: &WorkerPool = &stored.pool;
        let saved = stored.updated_at;
        for r in records.iter().filter(|r| pool.queues.contains(&r.queue)) {
            if r.available == 0 {
                continue;
            }
            let since = r.last_dispatch.map_or(saved, |last| last.max(saved));
            let idle_ms = (r.now - since).num_milliseconds();
            let limit =
                pool.starvation.rotation_interval_ms + COUNT_FLUSH_INTERVAL.as_millis() as u64;
            if idle_ms > i64::try_from(limit).unwrap_or(i64::MAX) {
                out.push(Starved {
                    pool: pool.name.clone(),
                    queue: r.queue.clone(),
                    idle_ms,
                    available: r.available,
                    last_dispatch: r.last_dispatch,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use serde_json::json;

    use super::*;

    fn stored(name: &str, body: &serde_json::Value, saved: DateTime<Utc>) -> StoredPool {
        StoredPool {
            pool: WorkerPool::parse(name, body).unwrap(),
            created_at: saved,
            updated_at: saved,
        }
    }

    fn record(
        queue: &str,
        last: Option<DateTime<Utc>>,
        available: i64,
        now: DateTime<Utc>,
    ) -> QueueDispatch {
        QueueDispatch {
            queue: queue.to_owned(),
            last_dispatch: last,
            available,
            now,
        }
    }

    #[test]
    fn a_queue_with_work_and_no_dispatch_past_its_interval_is_starved() {
        let now = Utc::now();
        let long_ago = now - TimeDelta::minutes(10);
        let pools = [
            stored(
                "p",
                &json!({"queues": ["a", "b", "c", "d"],
                       "starvation_prevention": {"enabled": true, "rotation_interval": "PT2S"}}),
                long_ago,
            ),
            stored("plain", &json!({"queues": ["a", "z"]}), long_ago),
        ];
        assert_eq!(watched_queues(&pools), ["a", "b", "c", "d"]);
        let records = [
            // Idle 3 s: past 2 s plus the flush lag.
            record("a", Some(now - TimeDelta::seconds(3)), 5, now),
            // Idle 2.3 s: within the flush lag.
            record("b", Some(now - TimeDelta::milliseconds(2_300)), 5, now),
            // Idle for long, but nothing to dispatch.
            record("c", Some(long_ago), 0, now),
            // Never dispatched: idle since the pool was saved.
            record("d", None, 1, now),
        ];
        let starved = starved(&pools, &records);
        let queues: Vec<&str> = starved.iter().map(|s| s.queue.as_str()).collect();
        assert_eq!(queues, ["a", "d"]);
        assert_eq!(starved[0].pool, "p");
        assert_eq!(starved[0].idle_ms, 3_000);
        assert_eq!(starved[1].idle_ms, 600_000);
    }

    #[test]
    fn a_pool_saved_recently_starts_its_queues_afresh() {
        let now = Utc::now();
        let pools = [stored(
            "p",
            &json!({"queues": ["a"], "starvation_prevention": {"enabled": true, "rotation_interval": "PT2S"}}),
            now - TimeDelta::seconds(1),
        )];
        let records = [record("a", Some(now - TimeDelta::minutes(5)), 3, now)];
        assert!(starved(&pools, &records).is_empty());
    }
}
