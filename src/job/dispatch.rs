//! A job's place in its queue's dispatch order, the order FETCH claims in.
//!
//! The order is written in SQL by the `ojs_job_dispatch_idx` index (migration V4, and V8 for
//! tenant-fair queues) and the claim's `ORDER BY` (`store::job::claim`); the plan tests keep
//! those two together. This module is its Rust side: [`Job::dispatch_key`], the exact order a
//! FETCH answers its jobs in, and [`DispatchPlace`], the coarser place a claim can start its
//! walk of the index from (see [`crate::wakeup::floors`]). Change the order in all of them at
//! once.

use std::cmp::Ordering;

use super::Job;

impl Job {
    /// Where an available job stands in its queue's dispatch order (smaller first): the order
    /// of the claim, `ojs_job_dispatch_idx` (migration V4). Without aging: priority, then the
    /// time the job became available, then `seq`. With aging the effective priority is
    /// `priority - waited / interval`, the same order as `became_available + priority *
    /// interval`.
    pub fn dispatch_key(&self) -> (i32, i128, i64) {
        let available_us = self
            .enqueued_at
            .map_or(i128::MAX, |t| i128::from(t.timestamp_micros()));
        if let Some(key) = self.fair_key {
            // The tenant-fair order (migration V8): priority, then virtual finish time.
            return (self.priority, (key * 1e9) as i128, self.seq);
        }
        match self.priority_aging_ms {
            None => (self.priority, available_us, self.seq),
            Some(ms) => (
                0,
                available_us + i128::from(self.priority) * i128::from(ms) * 1_000,
                self.seq,
            ),
        }
    }
}

/// A place in a queue's dispatch order: the first two columns of `ojs_job_dispatch_idx` after
/// the queue (migration V4), its effective priority and the time it is ordered by, in
/// milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatchPlace {
    pub priority: i32,
    pub time_ms: f64,
}

impl DispatchPlace {
    /// Before every job.
    pub const START: DispatchPlace = DispatchPlace {
        priority: i32::MIN,
        time_ms: f64::NEG_INFINITY,
    };
    /// After every job (the lowering a running claim has not seen yet: none).
    pub const END: DispatchPlace = DispatchPlace {
        priority: i32::MAX,
        time_ms: f64::INFINITY,
    };

    /// A place at or just before `job`'s in the plain dispatch order: the index computes the
    /// time in floating point from the timestamp, so the place is taken 1 ms earlier, which
    /// costs a claim at most the entries of the jobs of that millisecond. `None` for a job
    /// that is not in the index (it has no `enqueued_at`).
    pub fn of(job: &Job) -> Option<DispatchPlace> {
        let available_ms = job.enqueued_at?.timestamp_micros() as f64 / 1000.0;
        Some(match job.priority_aging_ms {
            None => DispatchPlace {
                priority: job.priority,
                time_ms: available_ms - 1.0,
            },
            Some(interval) => DispatchPlace {
                priority: 0,
                time_ms: available_ms + (f64::from(job.priority) * interval as f64) - 1.0,
            },
        })
    }

    /// The earliest place of `jobs` (`None` for none).
    pub fn earliest<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Option<DispatchPlace> {
        jobs.into_iter()
            .filter_map(DispatchPlace::of)
            .reduce(DispatchPlace::min)
    }

    /// The earlier of two places.
    pub fn min(self, other: DispatchPlace) -> DispatchPlace {
        if other.cmp_place(&self) == Ordering::Less {
            other
        } else {
            self
        }
    }

    /// The later of two places.
    pub fn max(self, other: DispatchPlace) -> DispatchPlace {
        if other.cmp_place(&self) == Ordering::Greater {
            other
        } else {
            self
        }
    }

    fn cmp_place(&self, other: &DispatchPlace) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then(self.time_ms.total_cmp(&other.time_ms))
    }

    /// As sent in a notification: `<priority> <time_ms>`.
    pub fn to_wire(self) -> String {
        format!("{} {}", self.priority, self.time_ms)
    }

    /// The place of a notification (`None` when it carries none or an unreadable one).
    pub fn from_wire(priority: &str, time_ms: &str) -> Option<DispatchPlace> {
        let key = DispatchPlace {
            priority: priority.parse().ok()?,
            time_ms: time_ms.parse().ok()?,
        };
        (!key.time_ms.is_nan()).then_some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(priority: i32, time_ms: f64) -> DispatchPlace {
        DispatchPlace { priority, time_ms }
    }

    #[test]
    fn places_order_by_priority_then_time() {
        assert_eq!(key(1, 5.0).min(key(2, 1.0)), key(1, 5.0));
        assert_eq!(key(2, 1.0).min(key(2, 0.5)), key(2, 0.5));
        assert_eq!(DispatchPlace::START.min(key(0, 0.0)), DispatchPlace::START);
        assert_eq!(key(0, 0.0).max(DispatchPlace::START), key(0, 0.0));
    }

    #[test]
    fn a_place_survives_the_wire() {
        let k = key(3, 1_790_000_000_123.456);
        let wire = k.to_wire();
        let (p, t) = wire.split_once(' ').expect("two fields");
        assert_eq!(DispatchPlace::from_wire(p, t), Some(k));
        assert_eq!(DispatchPlace::from_wire("x", "1"), None);
        assert_eq!(DispatchPlace::from_wire("1", "NaN"), None);
    }
}
