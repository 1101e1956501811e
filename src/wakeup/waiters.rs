//! Long polls parked on their queues, in the order they started waiting.
//!
//! A FETCH that found nothing parks here until it is woken, handed jobs, or its time is up:
//! - **Woken**: a commit that made `n` jobs of a queue available wakes at most `n` of the
//!   queue's parked FETCHes, the longest-waiting first; the others stay parked. A woken FETCH
//!   claims, and parks again in its old place if the claim found nothing.
//! - **Handed jobs**: an enqueue may take a parked FETCH out of the line and write its new job
//!   already active for it (see [`crate::broker`]); the FETCH then answers with that job
//!   without a claim of its own. Whoever takes a FETCH delivers to it exactly once: the jobs
//!   written for it, or a wake-up when the write did not give it any. Jobs written for a FETCH
//!   that went away in between are made available again ([`give_back`]).
//!
//! A FETCH that is between a claim and parking cannot be woken; it would miss the jobs of a
//! commit in between. So every wake-up stamps its queue, and [`Waiters::park`] refuses (the
//! FETCH claims again at once) when one of the FETCH's queues was stamped since the
//! [`Waiters::mark`] taken before its claim.
//!
//! Also kept here, for the FETCHes and their timers: when the next scheduled or retryable
//! job is due ([`Waiters::next_due`]), so a FETCH promotes due jobs only when there may be some.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::job::Job;

/// How long a learned "next due" time is trusted. Jobs made scheduled or retryable by another
/// replica are not reported here: this bounds how late such a job can be promoted by a FETCH
/// of this process (the maintenance promoter also promotes it meanwhile).
pub const NEXT_DUE_TRUST: Duration = Duration::from_secs(1);

/// Queue stamps kept before they are forgotten at once (a FETCH in flight then claims again).
const STAMPS_MAX: usize = 4_096;

/// Where an enqueue may write a job for a parked FETCH, and how much room it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffTarget {
    /// The fetching worker, recorded as the reservation owner.
    pub worker_id: Option<String>,
    /// The reservation length the FETCH asked for (wins over the job's own).
    pub visibility_timeout_ms: Option<i64>,
    /// The worker's pool, recorded on the job.
    pub pool: Option<String>,
    /// At most this many jobs for the FETCH.
    pub room: usize,
}

/// What a parked FETCH receives.
#[derive(Debug)]
pub enum Delivery {
    /// Jobs may be available: claim.
    Poll,
    /// Jobs written active for this FETCH.
    Jobs(Vec<Job>),
}

/// A moment in the sequence of wake-ups (see [`Waiters::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark(u64);

/// The parked FETCHes of this process.
#[derive(Debug, Default)]
pub struct Waiters {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Numbers of parked FETCHes and of stamps.
    next_id: u64,
    /// The sequence of wake-ups: each stamp takes the next value.
    clock: u64,
    /// Each queue's parked FETCHes, by when they first parked.
    lines: HashMap<Arc<str>, BTreeSet<u64>>,
    parked: HashMap<u64, Parked>,
    /// The last wake-up of each queue (on the clock).
    stamps: HashMap<Arc<str>, u64>,
    /// Stamps older than this were forgotten: any mark before it is stale.
    forgotten_before: u64,
    next_due: NextDue,
    /// Bumped whenever the next due time is forgotten.
    due_version: u64,
}

#[derive(Debug)]
struct Parked {
    queues: Vec<Arc<str>>,
    handoff: Option<Arc<HandoffTarget>>,
    tx: oneshot::Sender<Delivery>,
}

/// When the next scheduled or retryable job is due, as last learned.
#[derive(Debug, Default, Clone, Copy)]
struct NextDue {
    /// `None`: unknown. `Some(None)`: none is waiting. `Some(Some(t))`: the earliest is due at t.
    at: Option<Option<Instant>>,
    learned: Option<Instant>,
}

/// A FETCH's place in line, and where its delivery arrives.
#[derive(Debug)]
pub struct Parking {
    pub id: u64,
    pub rx: oneshot::Receiver<Delivery>,
}

/// A parked FETCH taken out of line by an enqueue, which owes it one delivery.
#[derive(Debug)]
pub struct Taken {
    pub target: Arc<HandoffTarget>,
    tx: oneshot::Sender<Delivery>,
}

impl Taken {
    /// Gives the FETCH its jobs; returns them when it has gone away.
    pub fn deliver(self, jobs: Vec<Job>) -> Result<(), Vec<Job>> {
        if jobs.is_empty() {
            self.poll();
            return Ok(());
        }
        self.tx.send(Delivery::Jobs(jobs)).map_err(|d| match d {
            Delivery::Jobs(jobs) => jobs,
            Delivery::Poll => Vec::new(),
        })
    }

    /// Nothing was written for the FETCH: it claims instead.
    pub fn poll(self) {
        let _ = self.tx.send(Delivery::Poll);
    }
}

/// Makes jobs written active for a FETCH that cannot answer with them (it went away, or the
/// hold came into force while it claimed) available again, in their old place and with their
/// attempt not counted. One that cannot be given back (the database is down) is released when
/// its reservation runs out, as if its worker had died.
pub async fn give_back(db: &crate::db::Db, jobs: &[Job]) {
    match crate::store::job::give_back(db, jobs).await {
        Ok(n) => tracing::debug!(jobs = n, "gave back jobs a FETCH could not answer with"),
        Err(e) => tracing::warn!(
            error = %e,
            jobs = jobs.len(),
            "could not give back jobs a FETCH could not answer with; their reservations will run out"
        ),
    }
}

impl Waiters {
    /// The current moment, to take before a claim that may be followed by [`Waiters::park`].
    pub fn mark(&self) -> Mark {
        Mark(self.lock().clock)
    }

    /// Parks a FETCH on `queues` (at its old place when `id` is given), unless one of them was
    /// woken since `since`: then `None`, and the FETCH should claim again now. `handoff` says
    /// whether and how an enqueue may write jobs for it.
    pub fn park(
        &self,
        id: Option<u64>,
        queues: &[String],
        since: Mark,
        handoff: Option<HandoffTarget>,
    ) -> Option<Parking> {
        let mut inner = self.lock();
        if since.0 < inner.forgotten_before
            || queues
                .iter()
                .any(|q| inner.stamps.get(q.as_str()).is_some_and(|&at| at > since.0))
        {
            return None;
        }
        let id = id.unwrap_or_else(|| {
            inner.next_id += 1;
            inner.next_id
        });
        let (tx, rx) = oneshot::channel();
        let queues: Vec<Arc<str>> = queues.iter().map(|q| Arc::from(q.as_str())).collect();
        for queue in &queues {
            inner.lines.entry(queue.clone()).or_default().insert(id);
        }
        inner.parked.insert(
            id,
            Parked {
                queues,
                handoff: handoff.map(Arc::new),
                tx,
            },
        );
        Some(Parking { id, rx })
    }

    /// Takes a parked FETCH out of line. `true`: it was parked and nobody owes it anything;
    /// `false`: it was woken or taken, and its delivery is on the way.
    pub fn leave(&self, id: u64) -> bool {
        self.lock().remove(id).is_some()
    }

    /// `jobs` jobs of `queue` became available (`usize::MAX`: an unknown number): wakes up to
    /// that many of its parked FETCHes, longest-waiting first.
    pub fn wake(&self, queue: &str, jobs: usize) {
        let mut inner = self.lock();
        let mut woken = 0;
        while woken < jobs {
            let Some(id) = inner
                .lines
                .get(queue)
                .and_then(|line| line.first().copied())
            else {
                break;
            };
            match inner.remove(id) {
                Some(parked) => {
                    let _ = parked.tx.send(Delivery::Poll);
                }
                // Not parked (cannot happen: lines hold parked FETCHes only); never loop on it.
                None => {
                    if let Some(line) = inner.lines.get_mut(queue) {
                        line.remove(&id);
                    }
                }
            }
            woken += 1;
        }
        // FETCHes between a claim and parking may be owed the jobs nobody parked was woken for.
        if woken < jobs {
            inner.stamp(queue);
        }
    }

    /// Anything may have changed: wakes every parked FETCH, and every FETCH in flight claims
    /// again before parking.
    pub fn wake_all(&self) {
        let mut inner = self.lock();
        inner.clock += 1;
        inner.forgotten_before = inner.clock;
        inner.stamps.clear();
        inner.lines.clear();
        for (_, parked) in inner.parked.drain() {
            let _ = parked.tx.send(Delivery::Poll);
        }
        inner.next_due = NextDue::default();
        inner.due_version += 1;
    }

    /// Takes the longest-waiting FETCH parked on `queue` that accepts jobs written for it.
    pub fn take(&self, queue: &str) -> Option<Taken> {
        let mut inner = self.lock();
        let id = inner
            .lines
            .get(queue)?
            .iter()
            .copied()
            .find(|id| inner.parked.get(id).is_some_and(|p| p.handoff.is_some()))?;
        let parked = inner.remove(id)?;
        Some(Taken {
            target: parked
                .handoff
                .expect("only FETCHes that accept hand-offs are taken"),
            tx: parked.tx,
        })
    }

    /// Whether a FETCH that accepts hand-offs is parked on `queue`: it claimed in vain, and no
    /// job was made available there since (a wake would have taken it out of line).
    pub fn handoff_parked(&self, queue: &str) -> bool {
        let inner = self.lock();
        inner.lines.get(queue).is_some_and(|line| {
            line.iter()
                .any(|id| inner.parked.get(id).is_some_and(|p| p.handoff.is_some()))
        })
    }

    /// How many FETCHes are parked on `queue`.
    pub fn parked_on(&self, queue: &str) -> usize {
        self.lock().lines.get(queue).map_or(0, |line| line.len())
    }

    /// Whether any FETCH is parked on `queue`.
    pub fn any_parked(&self, queue: &str) -> bool {
        self.lock()
            .lines
            .get(queue)
            .is_some_and(|line| !line.is_empty())
    }

    /// Whether a scheduled or retryable job may be due by now (also when that is not known).
    pub fn may_be_due(&self) -> bool {
        let inner = self.lock();
        let now = Instant::now();
        match inner.next_due {
            NextDue {
                at: Some(at),
                learned: Some(learned),
            } if now.duration_since(learned) < NEXT_DUE_TRUST => at.is_some_and(|at| at <= now),
            _ => true,
        }
    }

    /// When a parked FETCH should look again for jobs coming due: the next due time when it
    /// is known and trusted until then, else `None` (the FETCH polls on its timer).
    pub fn next_due(&self) -> Option<Instant> {
        let inner = self.lock();
        match inner.next_due {
            NextDue {
                at: Some(Some(at)),
                learned: Some(learned),
            } if at.duration_since(learned) < NEXT_DUE_TRUST => Some(at),
            _ => None,
        }
    }

    /// The version of what is known of the next due time, to take before asking the database.
    pub fn due_version(&self) -> u64 {
        self.lock().due_version
    }

    /// Learned from the database: the next scheduled or retryable job is due in `due_in`
    /// (`None`: none is waiting; zero: some may be due now), as asked at `version` (ignored
    /// when a job was scheduled here since: the answer may not include it).
    pub fn learned_next_due(&self, version: u64, due_in: Option<Duration>) {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.due_version == version {
            inner.next_due = NextDue {
                at: Some(due_in.map(|d| now + d)),
                learned: Some(now),
            };
        }
    }

    /// A job was made scheduled or retryable here: the next due time is no longer known.
    pub fn forget_next_due(&self) {
        let mut inner = self.lock();
        inner.next_due = NextDue::default();
        inner.due_version += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("waiters lock")
    }
}

impl Inner {
    /// Takes a parked FETCH out of every line it is in.
    fn remove(&mut self, id: u64) -> Option<Parked> {
        let parked = self.parked.remove(&id)?;
        for queue in &parked.queues {
            if let Some(line) = self.lines.get_mut(queue) {
                line.remove(&id);
                if line.is_empty() {
                    self.lines.remove(queue);
                }
            }
        }
        Some(parked)
    }

    fn stamp(&mut self, queue: &str) {
        self.clock += 1;
        if self.stamps.len() >= STAMPS_MAX && !self.stamps.contains_key(queue) {
            self.stamps.clear();
            self.forgotten_before = self.clock;
        }
        self.stamps.insert(queue.into(), self.clock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn target(worker: &str) -> HandoffTarget {
        HandoffTarget {
            worker_id: Some(worker.to_owned()),
            visibility_timeout_ms: None,
            pool: None,
            room: 1,
        }
    }

    fn woken(parking: &mut Parking) -> bool {
        matches!(parking.rx.try_recv(), Ok(Delivery::Poll))
    }

    #[test]
    fn a_wake_for_n_jobs_wakes_the_n_longest_waiting() {
        let w = Waiters::default();
        let mark = w.mark();
        let mut parked: Vec<Parking> = (0..4)
            .map(|_| w.park(None, &queues(&["q"]), mark, None).unwrap())
            .collect();
        w.wake("q", 2);
        let states: Vec<bool> = parked.iter_mut().map(woken).collect();
        assert_eq!(states, [true, true, false, false]);
        // The others are still parked; the woken ones have left the line.
        assert!(!w.leave(parked[0].id));
        assert!(w.leave(parked[2].id));
        w.wake("other", usize::MAX);
        assert!(!woken(&mut parked[3]));
        w.wake("q", usize::MAX);
        assert!(woken(&mut parked[3]));
    }

    #[test]
    fn a_fetch_woken_and_parked_again_keeps_its_place() {
        let w = Waiters::default();
        let mark = w.mark();
        let first = w.park(None, &queues(&["q"]), mark, None).unwrap();
        let mut second = w.park(None, &queues(&["q"]), mark, None).unwrap();
        w.wake("q", 1);
        // The first claims in vain and parks again, ahead of the second.
        let mark = w.mark();
        let mut again = w.park(Some(first.id), &queues(&["q"]), mark, None).unwrap();
        w.wake("q", 1);
        assert!(woken(&mut again));
        assert!(!woken(&mut second));
    }

    #[test]
    fn a_fetch_is_not_parked_past_a_wake_it_may_have_missed() {
        let w = Waiters::default();
        let mark = w.mark();
        // Nobody parked: the wake is stamped on the queue.
        w.wake("q", 1);
        assert!(w.park(None, &queues(&["q"]), mark, None).is_none());
        assert!(w.park(None, &queues(&["other"]), mark, None).is_some());
        let mark = w.mark();
        assert!(w.park(None, &queues(&["q"]), mark, None).is_some());
        // A wake that every job's FETCH took stamps nothing.
        let mark = w.mark();
        w.wake("q", 1);
        assert!(w.park(None, &queues(&["q"]), mark, None).is_some());
        w.wake_all();
        assert!(w.park(None, &queues(&["q"]), mark, None).is_none());
    }

    #[test]
    fn a_fetch_on_several_queues_is_woken_once() {
        let w = Waiters::default();
        let mut both = w.park(None, &queues(&["a", "b"]), w.mark(), None).unwrap();
        let mut b = w.park(None, &queues(&["b"]), w.mark(), None).unwrap();
        w.wake("a", 1);
        assert!(woken(&mut both));
        w.wake("b", 1);
        assert!(woken(&mut b));
    }

    #[test]
    fn a_hand_off_takes_the_longest_waiting_fetch_that_accepts_one() {
        let w = Waiters::default();
        let mark = w.mark();
        let plain = w.park(None, &queues(&["q"]), mark, None).unwrap();
        let mut one = w
            .park(None, &queues(&["q"]), mark, Some(target("one")))
            .unwrap();
        let two = w
            .park(None, &queues(&["q"]), mark, Some(target("two")))
            .unwrap();
        let taken = w.take("q").unwrap();
        assert_eq!(taken.target.worker_id.as_deref(), Some("one"));
        let second = w.take("q").unwrap();
        assert_eq!(second.target.worker_id.as_deref(), Some("two"));
        assert!(w.take("q").is_none(), "the plain FETCH takes no hand-off");
        assert!(!w.leave(one.id) && !w.leave(two.id));
        taken.deliver(Vec::new()).unwrap();
        assert!(woken(&mut one), "an empty delivery is a wake-up");
        assert!(w.leave(plain.id));
    }

    #[test]
    fn the_next_due_time_is_trusted_for_a_while() {
        let w = Waiters::default();
        assert!(w.may_be_due(), "unknown counts as due");
        w.learned_next_due(w.due_version(), None);
        assert!(!w.may_be_due());
        w.learned_next_due(w.due_version(), Some(Duration::from_secs(3600)));
        assert!(!w.may_be_due());
        assert_eq!(w.next_due(), None, "beyond the trust, the timer decides");
        w.learned_next_due(w.due_version(), Some(Duration::from_millis(200)));
        assert!(w.next_due().is_some());
        w.learned_next_due(w.due_version(), Some(Duration::ZERO));
        assert!(w.may_be_due());
        w.forget_next_due();
        assert!(w.may_be_due());
        // An answer asked for before a job was scheduled here is not taken.
        let asked = w.due_version();
        w.forget_next_due();
        w.learned_next_due(asked, None);
        assert!(w.may_be_due());
    }
}
