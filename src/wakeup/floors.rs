//! Where a queue's claim starts its walk of the dispatch index.
//!
//! A claimed job's old row version stays in `ojs_job_dispatch_idx` until VACUUM removes it,
//! and VACUUM can remove nothing that the oldest open transaction of the database may still
//! see. While some transaction stays open (a long report, a forgotten `BEGIN`), every claim
//! walks the entries of every job claimed since it began, in front of the first available
//! job: at 800 jobs/s that is 48,000 entries after a minute, ~3.5 ms of every claim, and the
//! queue falls behind. This is how Postgres queues die in production.
//!
//! So each process remembers, per queue, a *floor*: a place in dispatch order that no
//! claimable job of the queue is known to be below. The claim starts its index scan there
//! (a B-tree descent, whatever lies below). The floor rises to the first job each claim
//! takes, and is lowered by everything that makes a job available:
//! - this process's enqueues lower it to their jobs' places ([`ClaimFloors::lower`], from
//!   [`crate::wakeup::Announcer::announce`]);
//! - other replicas' enqueues lower it to the place their notification carries;
//! - every other notification of available jobs (promotion, released reservations, retries
//!   of dead letters, a resumed queue, a lost listener) resets it to the start;
//! - a failed or abandoned claim resets it (its jobs may be available again);
//! - and whatever was missed despite all that (another replica's claim that rolled back, a
//!   priority changed on another replica) is found by the walk from the start that every
//!   queue's claim takes at least every [`FULL_WALK_INTERVAL`].
//!
//! A claim that was running while a floor was lowered may not raise it above the lowest
//! place lowered to meanwhile: its snapshot may predate the job that caused it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use crate::job::Job;
use crate::job::dispatch::DispatchPlace;

/// A queue's claim walks its dispatch index from the start at least this often.
pub const FULL_WALK_INTERVAL: Duration = Duration::from_secs(1);

/// One queue's floor and the claims of it running now.
#[derive(Debug)]
struct QueueFloor {
    floor: DispatchPlace,
    /// When a claim of the queue last walked from the start.
    walked_at: Option<Instant>,
    /// Running claims: ticket id and the lowest place lowered to since it began.
    running: Vec<(u64, DispatchPlace)>,
}

impl Default for QueueFloor {
    fn default() -> Self {
        QueueFloor {
            floor: DispatchPlace::START,
            walked_at: None,
            running: Vec::new(),
        }
    }
}

/// The floors of every queue this process claims from.
#[derive(Debug, Default)]
pub struct ClaimFloors {
    queues: Mutex<HashMap<String, QueueFloor>>,
    tickets: AtomicU64,
}

/// A claim that is running: where it starts, and what to tell the floor when it ends
/// ([`Claim::took`], [`Claim::failed`]). A claim dropped unfinished resets the floor.
#[derive(Debug)]
pub struct Claim<'a> {
    floors: &'a ClaimFloors,
    queue: String,
    id: u64,
    /// Where the claim's walk starts.
    pub from: DispatchPlace,
    finished: bool,
}

impl ClaimFloors {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, QueueFloor>) -> T) -> T {
        f(&mut self.queues.lock().expect("claim floors lock"))
    }

    /// A claim of `queue` begins.
    pub fn begin(&self, queue: &str) -> Claim<'_> {
        let id = self.tickets.fetch_add(1, AtomicOrdering::Relaxed);
        let from = self.with(|queues| {
            let q = queues.entry(queue.to_owned()).or_default();
            q.running.push((id, DispatchPlace::END));
            let now = Instant::now();
            if q.walked_at
                .is_none_or(|at| now.duration_since(at) >= FULL_WALK_INTERVAL)
            {
                q.walked_at = Some(now);
                DispatchPlace::START
            } else {
                q.floor
            }
        });
        Claim {
            floors: self,
            queue: queue.to_owned(),
            id,
            from,
            finished: false,
        }
    }

    /// Jobs of `queue` became available at or after `to` (`DispatchPlace::START`: anywhere).
    pub fn lower(&self, queue: &str, to: DispatchPlace) {
        self.with(|queues| {
            if let Some(q) = queues.get_mut(queue) {
                q.floor = q.floor.min(to);
                for (_, lowest) in &mut q.running {
                    *lowest = lowest.min(to);
                }
            }
        });
    }

    /// Jobs of any queue may have become available anywhere.
    pub fn reset_all(&self) {
        self.with(|queues| {
            for q in queues.values_mut() {
                q.floor = DispatchPlace::START;
                for (_, lowest) in &mut q.running {
                    *lowest = DispatchPlace::START;
                }
            }
            // Queues without a running claim need no entry: they start from the start.
            queues.retain(|_, q| !q.running.is_empty());
        });
    }

    fn end(&self, claim: &Claim<'_>, outcome: Option<Result<Option<DispatchPlace>, ()>>) {
        self.with(|queues| {
            let Some(q) = queues.get_mut(&claim.queue) else {
                return;
            };
            let Some(at) = q.running.iter().position(|(id, _)| *id == claim.id) else {
                return;
            };
            let (_, lowest) = q.running.swap_remove(at);
            match outcome {
                // Its jobs are claimed: nothing claimable is below the first of them, except
                // what became available since the claim's snapshot.
                Some(Ok(Some(first))) => q.floor = q.floor.max(first.min(lowest)),
                // It took nothing: no news.
                Some(Ok(None)) => {}
                // It failed, or was dropped: what it had locked may be available again.
                Some(Err(())) | None => {
                    q.floor = DispatchPlace::START;
                    for (_, other) in &mut q.running {
                        *other = DispatchPlace::START;
                    }
                }
            }
        });
    }
}

impl Claim<'_> {
    /// The claim took `jobs` (none is fine), claimed in plain dispatch order.
    pub fn took<'j>(self, jobs: impl IntoIterator<Item = &'j Job>) {
        self.finish_at(Ok(DispatchPlace::earliest(jobs)));
    }

    /// The claim failed: what it had locked may be available again.
    pub fn failed(self) {
        self.finish_at(Err(()));
    }

    /// The claim ended: it took jobs from `Ok(Some(first))` on, nothing, or failed.
    fn finish_at(mut self, outcome: Result<Option<DispatchPlace>, ()>) {
        self.finished = true;
        self.floors.end(&self, Some(outcome));
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.floors.end(self, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(priority: i32, time_ms: f64) -> DispatchPlace {
        DispatchPlace { priority, time_ms }
    }

    /// Where a claim of `queue` would start now (the claim takes nothing).
    fn from(floors: &ClaimFloors, queue: &str) -> DispatchPlace {
        let claim = floors.begin(queue);
        let from = claim.from;
        claim.finish_at(Ok(None));
        from
    }

    /// A floor that the first (full) walk of the interval has already been taken from.
    fn walked(floors: &ClaimFloors, queue: &str) {
        assert_eq!(from(floors, queue), DispatchPlace::START);
    }

    fn claim_to(floors: &ClaimFloors, queue: &str, first: DispatchPlace) {
        floors.begin(queue).finish_at(Ok(Some(first)));
    }

    #[test]
    fn a_claim_raises_the_floor_to_its_first_job_and_the_next_claim_starts_there() {
        let floors = ClaimFloors::default();
        walked(&floors, "q");
        claim_to(&floors, "q", key(2, 100.0));
        assert_eq!(from(&floors, "q"), key(2, 100.0));
        // Never lowered by a claim that started later in the order.
        claim_to(&floors, "q", key(2, 50.0));
        assert_eq!(from(&floors, "q"), key(2, 100.0));
    }

    #[test]
    fn a_more_urgent_job_lowers_the_floor() {
        let floors = ClaimFloors::default();
        walked(&floors, "q");
        claim_to(&floors, "q", key(2, 100.0));
        floors.lower("q", key(2, 200.0));
        assert_eq!(from(&floors, "q"), key(2, 100.0));
        floors.lower("q", key(1, 500.0));
        assert_eq!(from(&floors, "q"), key(1, 500.0));
        floors.lower("other", key(0, 0.0));
        assert_eq!(from(&floors, "q"), key(1, 500.0));
        floors.reset_all();
        assert_eq!(from(&floors, "q"), DispatchPlace::START);
    }

    #[test]
    fn a_claim_running_while_the_floor_was_lowered_cannot_raise_it_past_the_lowering() {
        let floors = ClaimFloors::default();
        walked(&floors, "q");
        let running = floors.begin("q");
        // A job committed after the claim's snapshot, earlier than what the claim takes.
        floors.lower("q", key(2, 10.0));
        running.finish_at(Ok(Some(key(2, 100.0))));
        assert_eq!(from(&floors, "q"), key(2, 10.0));
    }

    #[test]
    fn a_failed_or_dropped_claim_resets_the_floor() {
        let floors = ClaimFloors::default();
        walked(&floors, "q");
        claim_to(&floors, "q", key(2, 100.0));
        floors.begin("q").finish_at(Err(()));
        assert_eq!(from(&floors, "q"), DispatchPlace::START);
        walked(&floors, "q");
        claim_to(&floors, "q", key(2, 100.0));
        drop(floors.begin("q"));
        assert_eq!(from(&floors, "q"), DispatchPlace::START);
    }

    #[test]
    fn a_claim_walks_from_the_start_at_least_once_an_interval() {
        let floors = ClaimFloors::default();
        walked(&floors, "q");
        claim_to(&floors, "q", key(2, 100.0));
        floors.with(|queues| {
            queues.get_mut("q").expect("queue").walked_at =
                Instant::now().checked_sub(FULL_WALK_INTERVAL)
        });
        assert_eq!(from(&floors, "q"), DispatchPlace::START);
        assert_eq!(from(&floors, "q"), key(2, 100.0));
    }
}
