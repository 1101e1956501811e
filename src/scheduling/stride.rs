//! The dispatcher: which of a FETCH's queues each of its `count` slots is served from, by
//! strategy.
//!
//! - `strict`: queues in the order given; a later queue only when the earlier ones are empty.
//! - `weighted`: stride scheduling over the queues by weight. Every queue has a *pass*, the
//!   number of jobs it was given divided by its weight; each slot goes to the open queue with
//!   the smallest pass (ties: the earlier queue), whose pass then grows by `1 / weight`. Over any
//!   run of dispatches the shares follow the weights to within one slot per queue, and a queue
//!   of weight `w` out of a total `W` waits at most about `W / w` slots: a small weight is
//!   served less, never starved. The sequence is deterministic.
//! - `round-robin`: `weighted` with every weight 1.
//!
//! The passes live in this process, shared by every FETCH that names the same queues with the
//! same weights, so concurrent workers together follow the weights (a FETCH reserves its slots
//! before claiming). A queue found empty is given back the slots it could not fill and is
//! brought up to the smallest pass of the others, so that when work arrives again it takes its
//! share from then on instead of a burst to catch up on the time it was idle.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::strategy::{Guarantee, QueueList, Strategy};

/// Passes are rebased (all reduced by the smallest) once the smallest exceeds this, so that
/// they keep their precision however long the process runs.
const REBASE_AT: f64 = 1e9;

/// Most distinct queue lists remembered; beyond it the oldest state is dropped (a forgotten
/// list starts again from equal passes, which costs fairness for a few slots only).
const MAX_LISTS: usize = 10_000;

/// A queue found empty is not owed a starvation slot for this long (its work arrives by the
/// time a FETCH tries it again, or it is simply empty).
const EMPTY_BACKOFF: Duration = Duration::from_millis(50);

/// How one FETCH's slots are spread: over `queues`, by `strategy`, with an optional
/// starvation `guarantee`, sharing state with every FETCH of the same `scope` (a pool name, or
/// empty for request-level settings) and queue list.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    pub scope: &'a str,
    pub queues: &'a [(String, u32)],
    pub strategy: Strategy,
    pub guarantee: Option<Guarantee>,
    /// For `strict` (and `least-loaded`, which is strict over the deepest queues first): the
    /// order in which queues are preferred; `None` = list order.
    pub preference: Option<&'a [usize]>,
}

/// What the dispatcher remembers of one scope and queue list.
#[derive(Debug)]
struct ListState {
    /// Stride passes (weighted and round-robin).
    pass: Vec<f64>,
    /// Slots given within the guarantee's window, oldest first.
    window: VecDeque<(Instant, usize)>,
    /// Slots per queue in `window`.
    in_window: Vec<usize>,
    /// When each queue was last given a slot (or found empty); starts at the first FETCH.
    last_served: Vec<Instant>,
    /// Until when a queue found empty is not owed slots.
    empty_until: Vec<Option<Instant>>,
}

impl ListState {
    fn new(n: usize, now: Instant) -> ListState {
        ListState {
            pass: vec![0.0; n],
            window: VecDeque::new(),
            in_window: vec![0; n],
            last_served: vec![now; n],
            empty_until: vec![None; n],
        }
    }

    /// Forgets slots older than `window`.
    fn expire(&mut self, window: Duration, now: Instant) {
        while let Some(&(at, i)) = self.window.front() {
            if now.duration_since(at) < window {
                break;
            }
            self.window.pop_front();
            self.in_window[i] -= 1;
        }
    }

    /// The queue the guarantee says must have the next slot, if any: a queue that went
    /// without a slot for the whole window, else the one furthest below its minimum share.
    /// The minimum is kept with one slot to spare, so any window, not only those ending at a
    /// dispatch, holds it.
    fn owed(&self, g: Guarantee, open: &[bool], now: Instant) -> Option<usize> {
        let eligible =
            |i: &usize| open[*i] && self.empty_until[*i].is_none_or(|until| now >= until);
        let starved = (0..open.len())
            .filter(eligible)
            .filter(|&i| now.duration_since(self.last_served[i]) >= g.window)
            .min_by_key(|&i| self.last_served[i]);
        if starved.is_some() || g.min_ratio <= 0.0 {
            return starved;
        }
        let required = g.min_ratio * (self.window.len() + 1) as f64 + 1.0;
        (0..open.len())
            .filter(eligible)
            .map(|i| (i, required - self.in_window[i] as f64))
            .filter(|(_, deficit)| *deficit > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
    }
}

/// The scheduling state of every scope and queue list this process has served.
///
/// The state is per process on purpose: each replica's dispatches follow the weights (and
/// keep every guaranteed share) on their own, and a sum of sequences that each follow given
/// proportions follows them too, so the shares hold over all replicas together without a
/// shared row every FETCH would have to lock. What must be exact across replicas (pool
/// concurrency, a worker's active jobs, backlog depth, starvation events, statistics) is read
/// from the database instead.
#[derive(Debug, Default)]
pub struct Dispatcher {
    lists: Mutex<HashMap<(String, QueueList), ListState>>,
}

impl Dispatcher {
    /// Reserves `slots` dispatches by `plan` among the queues still `open` (not found empty by
    /// this FETCH): how many each queue should give. Queues of weight 0 get nothing.
    pub fn reserve(&self, plan: &Plan<'_>, open: &[bool], slots: usize) -> Vec<usize> {
        let now = Instant::now();
        let queues = plan.queues;
        let mut lists = self.lists.lock().expect("dispatcher lock");
        let key = (plan.scope.to_owned(), queues.to_vec());
        if !lists.contains_key(&key) && lists.len() >= MAX_LISTS {
            lists.clear();
        }
        let state = lists
            .entry(key)
            .or_insert_with(|| ListState::new(queues.len(), now));
        let open: Vec<bool> = (0..queues.len())
            .map(|i| open[i] && queues[i].1 > 0)
            .collect();
        let natural: Vec<usize> = match plan.preference {
            Some(order) => order.to_vec(),
            None => (0..queues.len()).collect(),
        };
        let mut given = vec![0; queues.len()];
        for _ in 0..slots {
            if let Some(g) = plan.guarantee {
                state.expire(g.window, now);
            }
            let pick = plan
                .guarantee
                .and_then(|g| state.owed(g, &open, now))
                .or_else(|| match plan.strategy {
                    Strategy::Strict | Strategy::LeastLoaded => {
                        natural.iter().copied().find(|&i| open[i])
                    }
                    Strategy::Weighted | Strategy::RoundRobin => (0..queues.len())
                        .filter(|&i| open[i])
                        .min_by(|&a, &b| state.pass[a].total_cmp(&state.pass[b]).then(a.cmp(&b))),
                });
            let Some(i) = pick else { break };
            given[i] += 1;
            state.pass[i] += 1.0 / f64::from(queues[i].1.max(1));
            state.last_served[i] = now;
            if plan.guarantee.is_some() {
                state.window.push_back((now, i));
                state.in_window[i] += 1;
            }
        }
        let floor = state.pass.iter().copied().fold(f64::INFINITY, f64::min);
        if floor > REBASE_AT {
            state.pass.iter_mut().for_each(|p| *p -= floor);
        }
        given
    }

    /// Queue `index` of the plan filled `unused` fewer slots than reserved because it ran out
    /// of jobs: the slots are given back, the queue is brought up to the smallest pass of the
    /// other queues that still take work (so that when work arrives it takes its share from
    /// then on instead of a burst to catch up on the time it was idle), and it is not owed
    /// guaranteed slots for a moment.
    pub fn release(&self, plan: &Plan<'_>, open: &[bool], index: usize, unused: usize) {
        let now = Instant::now();
        let queues = plan.queues;
        let mut lists = self.lists.lock().expect("dispatcher lock");
        let Some(state) = lists.get_mut(&(plan.scope.to_owned(), queues.to_vec())) else {
            return;
        };
        let weight = f64::from(queues[index].1.max(1));
        state.pass[index] -= unused as f64 / weight;
        let others = (0..queues.len())
            .filter(|&i| i != index && open[i] && queues[i].1 > 0)
            .map(|i| state.pass[i])
            .fold(f64::INFINITY, f64::min);
        if others.is_finite() {
            state.pass[index] = state.pass[index].max(others);
        }
        let mut left = unused;
        for pos in (0..state.window.len()).rev() {
            if left == 0 {
                break;
            }
            if state.window[pos].1 == index {
                state.window.remove(pos);
                state.in_window[index] -= 1;
                left -= 1;
            }
        }
        state.empty_until[index] = Some(now + EMPTY_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(weights: &[(&str, u32)]) -> Vec<(String, u32)> {
        weights.iter().map(|(q, w)| (q.to_string(), *w)).collect()
    }

    fn plan(queues: &[(String, u32)]) -> Plan<'_> {
        Plan {
            scope: "",
            queues,
            strategy: Strategy::Weighted,
            guarantee: None,
            preference: None,
        }
    }

    #[test]
    fn strict_with_a_minimum_share_gives_every_queue_its_share_in_every_stretch() {
        let queues = list(&[("critical", 1), ("default", 1), ("analytics", 1)]);
        let plan = Plan {
            strategy: Strategy::Strict,
            guarantee: Some(Guarantee {
                window: Duration::from_secs(3600),
                min_ratio: 0.10,
            }),
            ..plan(&queues)
        };
        let d = Dispatcher::default();
        let mut picks = Vec::new();
        for _ in 0..2_000 {
            let given = d.reserve(&plan, &[true; 3], 1);
            picks.push(given.iter().position(|n| *n == 1).unwrap());
        }
        // Every stretch of 100 or more dispatches gives each of the lower queues 10 %.
        for start in 0..picks.len() - 100 {
            for len in [100, 250, 1000] {
                let Some(run) = picks.get(start..start + len) else {
                    continue;
                };
                for q in [1, 2] {
                    let n = run.iter().filter(|p| **p == q).count();
                    assert!(n * 10 >= len, "queue {q}: {n} of {len} from {start}");
                }
            }
        }
        // The rest goes to the first queue, as strict wants.
        let first = picks.iter().filter(|p| **p == 0).count();
        assert!(first >= 1_550, "{first}");
        // Without the guarantee strict serves only the first queue.
        let d = Dispatcher::default();
        let plain = Plan {
            guarantee: None,
            ..plan
        };
        assert_eq!(d.reserve(&plain, &[true; 3], 50), vec![50, 0, 0]);
        assert_eq!(d.reserve(&plain, &[false, true, true], 5), vec![0, 5, 0]);
    }

    #[test]
    fn a_queue_without_a_slot_for_the_whole_window_gets_the_next_one() {
        let queues = list(&[("hot", 1), ("cold", 1)]);
        let plan = Plan {
            strategy: Strategy::Strict,
            guarantee: Some(Guarantee {
                window: Duration::from_millis(30),
                min_ratio: 0.0,
            }),
            ..plan(&queues)
        };
        let d = Dispatcher::default();
        assert_eq!(d.reserve(&plan, &[true; 2], 10), vec![10, 0]);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(d.reserve(&plan, &[true; 2], 10), vec![9, 1]);
    }

    #[test]
    fn least_loaded_prefers_the_given_order() {
        let queues = list(&[("small", 1), ("big", 1)]);
        let order = [1, 0];
        let plan = Plan {
            strategy: Strategy::LeastLoaded,
            preference: Some(&order),
            ..plan(&queues)
        };
        let d = Dispatcher::default();
        assert_eq!(d.reserve(&plan, &[true; 2], 3), vec![0, 3]);
        assert_eq!(d.reserve(&plan, &[true, false], 3), vec![3, 0]);
    }

    #[test]
    fn slots_follow_the_weights_one_at_a_time_and_in_bulk() {
        let queues = list(&[("a", 5), ("b", 3), ("c", 1)]);
        let open = [true; 3];
        let d = Dispatcher::default();
        let mut total = [0; 3];
        for _ in 0..900 {
            for (i, n) in d.reserve(&plan(&queues), &open, 1).into_iter().enumerate() {
                total[i] += n;
            }
        }
        assert_eq!(total, [500, 300, 100]);
        let d = Dispatcher::default();
        assert_eq!(d.reserve(&plan(&queues), &open, 9), vec![5, 3, 1]);
    }

    #[test]
    fn a_small_weight_is_served_within_a_bounded_number_of_slots() {
        let queues = list(&[("big", 100), ("small", 1)]);
        let d = Dispatcher::default();
        let mut since_small = 0;
        for _ in 0..10_000 {
            let given = d.reserve(&plan(&queues), &[true, true], 1);
            if given[1] == 1 {
                since_small = 0;
            } else {
                since_small += 1;
                assert!(since_small <= 101, "small queue waited {since_small} slots");
            }
        }
    }

    #[test]
    fn weight_zero_is_never_served_and_closed_queues_are_skipped() {
        let queues = list(&[("a", 0), ("b", 1), ("c", 1)]);
        let d = Dispatcher::default();
        assert_eq!(
            d.reserve(&plan(&queues), &[true, true, true], 4),
            vec![0, 2, 2]
        );
        assert_eq!(
            d.reserve(&plan(&queues), &[true, false, true], 3),
            vec![0, 0, 3]
        );
        assert_eq!(
            d.reserve(&plan(&queues), &[true, false, false], 3),
            vec![0, 0, 0]
        );
    }

    #[test]
    fn an_idle_queue_does_not_catch_up_in_a_burst() {
        let queues = list(&[("a", 1), ("b", 1)]);
        let d = Dispatcher::default();
        // `b` is empty for 100 slots: each time its reservation comes back unused.
        for _ in 0..100 {
            let given = d.reserve(&plan(&queues), &[true, true], 1);
            if given[1] == 1 {
                d.release(&plan(&queues), &[true, true], 1, 1);
            }
        }
        // Work arrives in `b`: from now on it shares equally, it does not get 50 slots in a row.
        let given = d.reserve(&plan(&queues), &[true, true], 10);
        assert!(given[1] <= 6, "{given:?}");
    }
}
