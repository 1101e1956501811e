//! Queue consumption strategies (priority extension §7): which of a FETCH's queues each of its
//! `count` slots is served from.
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

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;

/// How a FETCH spreads its slots over its queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Strategy {
    /// Queues in the order given (the default).
    #[default]
    Strict,
    /// Queues served in proportion to their weights.
    Weighted,
    /// Queues served in turn.
    RoundRobin,
}

impl Strategy {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Strict => "strict",
            Strategy::Weighted => "weighted",
            Strategy::RoundRobin => "round-robin",
        }
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Strategy::Strict),
            "weighted" => Ok(Strategy::Weighted),
            "round-robin" => Ok(Strategy::RoundRobin),
            other => Err(format!(
                "strategy must be strict, weighted or round-robin, not {other:?}"
            )),
        }
    }
}

/// Largest accepted queue weight.
pub const MAX_WEIGHT: u32 = 1_000_000;

/// Queue weights by name; a queue not named weighs 1 (contract §4.3.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Weights(pub HashMap<String, u32>);

impl Weights {
    /// The weight of `queue`.
    pub fn of(&self, queue: &str) -> u32 {
        self.0.get(queue).copied().unwrap_or(1)
    }

    /// As stored with a worker registration: a JSON object, keys sorted.
    pub fn to_json(&self) -> String {
        let sorted: std::collections::BTreeMap<&str, u32> =
            self.0.iter().map(|(q, w)| (q.as_str(), *w)).collect();
        serde_json::to_string(&sorted).unwrap_or_else(|_| "{}".to_owned())
    }

    /// From [`Weights::to_json`]'s form; `None` if it is not one.
    pub fn from_json(text: &str) -> Option<Weights> {
        serde_json::from_str::<HashMap<String, u32>>(text)
            .ok()
            .map(|w| Weights(w.into_iter().map(|(q, n)| (q, n.min(MAX_WEIGHT))).collect()))
    }
}

/// Parses the `OJS_QUEUE_WEIGHTS` setting: `queue=weight` pairs separated by commas.
pub fn parse_weights_setting(text: &str) -> Result<Weights, String> {
    let mut weights = HashMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (queue, weight) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not queue=weight"))?;
        let (queue, weight) = (queue.trim(), weight.trim());
        if !crate::job::is_valid_queue(queue) {
            return Err(format!("{queue:?} is not a valid queue name"));
        }
        let weight: u32 = weight
            .parse()
            .ok()
            .filter(|w| *w <= MAX_WEIGHT)
            .ok_or_else(|| {
                format!("weight of {queue} must be an integer from 0 to {MAX_WEIGHT}")
            })?;
        weights.insert(queue.to_owned(), weight);
    }
    Ok(Weights(weights))
}

/// Passes are rebased (all reduced by the smallest) once the smallest exceeds this, so that
/// they keep their precision however long the process runs.
const REBASE_AT: f64 = 1e9;

/// Most distinct queue lists remembered; beyond it the oldest state is dropped (a forgotten
/// list starts again from equal passes, which costs fairness for a few slots only).
const MAX_LISTS: usize = 10_000;

/// A FETCH's queues with their weights, in the order it names them.
type QueueList = Vec<(String, u32)>;

/// The passes of every queue list this process has served by weight.
#[derive(Debug, Default)]
pub struct Dispatcher {
    lists: Mutex<HashMap<QueueList, Vec<f64>>>,
}

impl Dispatcher {
    /// Reserves `slots` dispatches over `queues` (name, weight) among those still `open` (not
    /// found empty by this FETCH): how many each queue should give. Queues of weight 0 get
    /// nothing.
    pub fn reserve(&self, queues: &[(String, u32)], open: &[bool], slots: usize) -> Vec<usize> {
        let mut lists = self.lists.lock().expect("dispatcher lock");
        if !lists.contains_key(queues) && lists.len() >= MAX_LISTS {
            lists.clear();
        }
        let pass = lists
            .entry(queues.to_vec())
            .or_insert_with(|| vec![0.0; queues.len()]);
        let mut given = vec![0; queues.len()];
        for _ in 0..slots {
            let next = (0..queues.len())
                .filter(|&i| open[i] && queues[i].1 > 0)
                .min_by(|&a, &b| pass[a].total_cmp(&pass[b]).then(a.cmp(&b)));
            let Some(i) = next else { break };
            given[i] += 1;
            pass[i] += 1.0 / f64::from(queues[i].1);
        }
        let floor = pass.iter().copied().fold(f64::INFINITY, f64::min);
        if floor > REBASE_AT {
            pass.iter_mut().for_each(|p| *p -= floor);
        }
        given
    }

    /// Queue `index` of `queues` filled `unused` fewer slots than reserved because it ran out
    /// of jobs: the slots are given back and the queue is brought up to the smallest pass of the
    /// other queues that still take work.
    pub fn release(&self, queues: &[(String, u32)], open: &[bool], index: usize, unused: usize) {
        let mut lists = self.lists.lock().expect("dispatcher lock");
        let Some(pass) = lists.get_mut(queues) else {
            return;
        };
        let weight = f64::from(queues[index].1.max(1));
        pass[index] -= unused as f64 / weight;
        let others = (0..queues.len())
            .filter(|&i| i != index && open[i] && queues[i].1 > 0)
            .map(|i| pass[i])
            .fold(f64::INFINITY, f64::min);
        if others.is_finite() {
            pass[index] = pass[index].max(others);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(weights: &[(&str, u32)]) -> Vec<(String, u32)> {
        weights.iter().map(|(q, w)| (q.to_string(), *w)).collect()
    }

    #[test]
    fn slots_follow_the_weights_one_at_a_time_and_in_bulk() {
        let queues = list(&[("a", 5), ("b", 3), ("c", 1)]);
        let open = [true; 3];
        let d = Dispatcher::default();
        let mut total = [0; 3];
        for _ in 0..900 {
            for (i, n) in d.reserve(&queues, &open, 1).into_iter().enumerate() {
                total[i] += n;
            }
        }
        assert_eq!(total, [500, 300, 100]);
        let d = Dispatcher::default();
        assert_eq!(d.reserve(&queues, &open, 9), vec![5, 3, 1]);
    }

    #[test]
    fn a_small_weight_is_served_within_a_bounded_number_of_slots() {
        let queues = list(&[("big", 100), ("small", 1)]);
        let d = Dispatcher::default();
        let mut since_small = 0;
        for _ in 0..10_000 {
            let given = d.reserve(&queues, &[true, true], 1);
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
        assert_eq!(d.reserve(&queues, &[true, true, true], 4), vec![0, 2, 2]);
        assert_eq!(d.reserve(&queues, &[true, false, true], 3), vec![0, 0, 3]);
        assert_eq!(d.reserve(&queues, &[true, false, false], 3), vec![0, 0, 0]);
    }

    #[test]
    fn an_idle_queue_does_not_catch_up_in_a_burst() {
        let queues = list(&[("a", 1), ("b", 1)]);
        let d = Dispatcher::default();
        // `b` is empty for 100 slots: each time its reservation comes back unused.
        for _ in 0..100 {
            let given = d.reserve(&queues, &[true, true], 1);
            if given[1] == 1 {
                d.release(&queues, &[true, true], 1, 1);
            }
        }
        // Work arrives in `b`: from now on it shares equally, it does not get 50 slots in a row.
        let given = d.reserve(&queues, &[true, true], 10);
        assert!(given[1] <= 6, "{given:?}");
    }

    #[test]
    fn the_weights_setting_is_parsed_and_checked() {
        let w = parse_weights_setting("critical=5, default=2,low=0").unwrap();
        assert_eq!(w.of("critical"), 5);
        assert_eq!(w.of("low"), 0);
        assert_eq!(w.of("other"), 1);
        assert!(parse_weights_setting("a=-1").is_err());
        assert!(parse_weights_setting("a").is_err());
        assert!(parse_weights_setting("A=1").is_err());
        assert_eq!(parse_weights_setting("").unwrap(), Weights::default());
    }
}
