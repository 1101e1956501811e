//! Fetch-order policy, as pure functions and plain state: which queues a FETCH reads, with which
//! weights, and how its slots are dealt over them. Nothing here reads or writes the database;
//! the broker feeds it what it read and carries out what it decides.
//!
//! - [`route`]: what governs one FETCH. A worker's pool wins over everything (a worker that
//!   names no pool is a member of the pool named [`DEFAULT_POOL`] when one is configured); then
//!   the server's settings, then the FETCH's own `strategy` and `weights`, then those the worker
//!   registered with; `strict` when nobody says. Queues of isolated pools are served to their
//!   members only.
//! - [`stride`]: the [`Dispatcher`], which deals a FETCH's slots over its queues by strategy
//!   and weight, with an optional starvation [`Guarantee`].
//! - [`starvation`]: which queues of pools with starvation prevention are starved, from the
//!   dispatch records of every replica.

pub mod pool;
pub mod starvation;
mod strategy;
pub mod stride;

use std::sync::Arc;
use std::time::Duration;

use crate::scheduling::pool::WorkerPool;

pub use strategy::{Guarantee, MAX_WEIGHT, QueueList, Strategy, Weights, parse_weights_setting};
pub use stride::{Dispatcher, Plan};

/// The pool that applies to workers that name none, when it is configured.
pub const DEFAULT_POOL: &str = "default";

/// Jobs a worker runs at once when it did not say (`least-loaded` serves it below this).
pub const DEFAULT_WORKER_CONCURRENCY: i32 = 10;

/// A strategy and weights as one source gives them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Preference<'a> {
    pub strategy: Option<Strategy>,
    pub weights: Option<&'a Weights>,
}

/// Everything that may choose a FETCH's strategy and weights when no pool does, in the order
/// they win.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    /// The server's settings (`OJS_FETCH_STRATEGY`, `OJS_QUEUE_WEIGHTS`).
    pub server: Preference<'a>,
    /// The FETCH's own `strategy` and `weights`.
    pub request: Preference<'a>,
    /// What the worker registered with.
    pub registered: Preference<'a>,
}

/// What [`route`] needs to know of the configured pools.
pub trait Pools {
    /// The pool named `name`, if configured.
    fn pool(&self, name: &str) -> Option<&Arc<WorkerPool>>;
    /// Whether `queue` may be served to a member of `member_of` (`None`: no pool).
    fn serves(&self, queue: &str, member_of: Option<&str>) -> bool;
}

/// How one FETCH is served: the governing pool, the queues (with weights) in order of
/// preference, and how slots spread over them.
#[derive(Debug, Clone)]
pub struct Route {
    pub pool: Option<Arc<WorkerPool>>,
    pub queues: QueueList,
    pub strategy: Strategy,
    pub guarantee: Option<Guarantee>,
}

impl Route {
    /// The governing pool's name.
    pub fn pool_name(&self) -> Option<&str> {
        self.pool.as_deref().map(|p| p.name.as_str())
    }

    /// The queues, in order.
    pub fn queue_names(&self) -> Vec<String> {
        self.queues.iter().map(|(q, _)| q.clone()).collect()
    }
}

/// A FETCH that names no queues, from a worker that belongs to no configured pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoQueues;

/// Decides how a FETCH for `queues` (possibly none, for a pool member) from a worker of pool
/// `member_of` is served; see the module docs for the precedence.
pub fn route(
    queues: &[String],
    member_of: Option<&str>,
    sources: &Sources<'_>,
    pools: &impl Pools,
) -> Result<Route, NoQueues> {
    let pool = pools.pool(member_of.unwrap_or(DEFAULT_POOL)).cloned();
    let mut route = match pool {
        Some(p) => Route {
            queues: p
                .queues
                .iter()
                .map(|q| {
                    let weight = match p.strategy {
                        Strategy::Weighted => p.weight(q),
                        _ => 1,
                    };
                    (q.clone(), weight)
                })
                .collect(),
            strategy: p.strategy,
            guarantee: p.starvation.enabled.then(|| Guarantee {
                window: Duration::from_millis(p.starvation.rotation_interval_ms),
                min_ratio: p.starvation.min_dispatch_ratio,
            }),
            pool: Some(p),
        },
        None => {
            if queues.is_empty() {
                return Err(NoQueues);
            }
            let no_weights = Weights::default();
            let weights = (sources.server.weights)
                .or(sources.request.weights)
                .or(sources.registered.weights)
                .unwrap_or(&no_weights);
            let strategy = (sources.server.strategy)
                .or(sources.request.strategy)
                .or(sources.registered.strategy)
                .unwrap_or_default();
            Route {
                queues: queues
                    .iter()
                    .map(|q| {
                        let weight = match strategy {
                            Strategy::Weighted => weights.of(q),
                            _ => 1,
                        };
                        (q.clone(), weight)
                    })
                    .collect(),
                strategy,
                guarantee: None,
                pool: None,
            }
        }
    };
    let member_of = route.pool_name().map(str::to_owned);
    route
        .queues
        .retain(|(q, _)| pools.serves(q, member_of.as_deref()));
    Ok(route)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    /// Configured pools, by name; `isolated` pools keep their queues to themselves.
    #[derive(Default)]
    struct Configured(HashMap<String, Arc<WorkerPool>>);

    impl Configured {
        fn with(mut self, name: &str, body: &serde_json::Value) -> Configured {
            let pool = WorkerPool::parse(name, body).expect("a valid pool");
            self.0.insert(name.to_owned(), Arc::new(pool));
            self
        }
    }

    impl Pools for Configured {
        fn pool(&self, name: &str) -> Option<&Arc<WorkerPool>> {
            self.0.get(name)
        }

        fn serves(&self, queue: &str, member_of: Option<&str>) -> bool {
            let owners: Vec<&str> = (self.0.values())
                .filter(|p| p.isolated && p.queues.iter().any(|q| q == queue))
                .map(|p| p.name.as_str())
                .collect();
            owners.is_empty() || member_of.is_some_and(|m| owners.contains(&m))
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|q| q.to_string()).collect()
    }

    fn weights(pairs: &[(&str, u32)]) -> Weights {
        Weights(pairs.iter().map(|(q, w)| (q.to_string(), *w)).collect())
    }

    #[test]
    fn strict_when_nobody_chooses() {
        let route = route(
            &names(&["a", "b"]),
            None,
            &Sources::default(),
            &Configured::default(),
        );
        let route = route.unwrap();
        assert_eq!(route.strategy, Strategy::Strict);
        assert_eq!(route.queues, vec![("a".into(), 1), ("b".into(), 1)]);
        assert!(route.pool.is_none() && route.guarantee.is_none());
    }

    #[test]
    fn the_server_wins_over_the_request_which_wins_over_the_registration() {
        let (server, request, registered) = (
            weights(&[("a", 5)]),
            weights(&[("a", 3), ("b", 2)]),
            weights(&[("a", 7)]),
        );
        let queues = names(&["a", "b"]);
        let pools = Configured::default();
        let mut sources = Sources {
            server: Preference {
                strategy: None,
                weights: None,
            },
            request: Preference {
                strategy: Some(Strategy::Weighted),
                weights: Some(&request),
            },
            registered: Preference {
                strategy: Some(Strategy::RoundRobin),
                weights: Some(&registered),
            },
        };
        let r = route(&queues, None, &sources, &pools).unwrap();
        assert_eq!(r.strategy, Strategy::Weighted);
        assert_eq!(r.queues, vec![("a".into(), 3), ("b".into(), 2)]);

        sources.server = Preference {
            strategy: Some(Strategy::Weighted),
            weights: Some(&server),
        };
        let r = route(&queues, None, &sources, &pools).unwrap();
        assert_eq!(r.queues, vec![("a".into(), 5), ("b".into(), 1)]);

        sources.server = Preference::default();
        sources.request = Preference::default();
        let r = route(&queues, None, &sources, &pools).unwrap();
        assert_eq!(r.strategy, Strategy::RoundRobin);
        // Weights only matter to `weighted`.
        assert_eq!(r.queues, vec![("a".into(), 1), ("b".into(), 1)]);
    }

    #[test]
    fn a_pool_replaces_queues_strategy_and_weights_of_its_members() {
        let pools = Configured::default().with(
            "billing",
            &json!({"queues": ["pay", "refund"], "strategy": "weighted", "weights": {"pay": 4},
                   "starvation_prevention": {"enabled": true, "rotation_interval": "PT2S",
                                             "min_dispatch_ratio": 0.1}}),
        );
        let request = weights(&[("x", 9)]);
        let sources = Sources {
            request: Preference {
                strategy: Some(Strategy::Strict),
                weights: Some(&request),
            },
            ..Sources::default()
        };
        let r = route(&names(&["x"]), Some("billing"), &sources, &pools).unwrap();
        assert_eq!(r.pool_name(), Some("billing"));
        assert_eq!(r.strategy, Strategy::Weighted);
        assert_eq!(r.queues, vec![("pay".into(), 4), ("refund".into(), 1)]);
        assert_eq!(
            r.guarantee,
            Some(Guarantee {
                window: Duration::from_secs(2),
                min_ratio: 0.1
            })
        );
        // A member may leave the queues to its pool.
        assert!(route(&[], Some("billing"), &sources, &pools).is_ok());
    }

    #[test]
    fn a_worker_without_a_pool_belongs_to_the_default_pool_when_there_is_one() {
        let sources = Sources::default();
        assert_eq!(
            route(&[], None, &sources, &Configured::default()).unwrap_err(),
            NoQueues
        );
        let pools = Configured::default().with(DEFAULT_POOL, &json!({"queues": ["d"]}));
        let r = route(&[], None, &sources, &pools).unwrap();
        assert_eq!(r.pool_name(), Some(DEFAULT_POOL));
        assert_eq!(r.queue_names(), names(&["d"]));
        // A pool the worker names that is not configured: the request decides.
        let r = route(&names(&["q"]), Some("gone"), &sources, &pools).unwrap();
        assert!(r.pool.is_none());
        assert_eq!(r.queue_names(), names(&["q"]));
    }

    #[test]
    fn isolated_queues_are_served_to_their_pool_only() {
        let pools = Configured::default()
            .with(
                "vip",
                &json!({"queues": ["vip", "shared"], "isolated": true}),
            )
            .with("rest", &json!({"queues": ["other"]}));
        let asked = names(&["vip", "other", "plain"]);
        let r = route(&asked, None, &Sources::default(), &pools).unwrap();
        assert_eq!(r.queue_names(), names(&["other", "plain"]));
        let r = route(&[], Some("vip"), &Sources::default(), &pools).unwrap();
        assert_eq!(r.queue_names(), names(&["vip", "shared"]));
        // Everything asked may be isolated away: an empty route, not an error.
        let r = route(
            &names(&["shared"]),
            Some("rest"),
            &Sources::default(),
            &pools,
        )
        .unwrap();
        assert_eq!(r.queue_names(), names(&["other"]));
        let r = route(&names(&["shared"]), None, &Sources::default(), &pools).unwrap();
        assert!(r.queues.is_empty());
    }

    #[test]
    fn strategies_have_one_spelling_each_way() {
        for s in [
            Strategy::Strict,
            Strategy::Weighted,
            Strategy::RoundRobin,
            Strategy::LeastLoaded,
        ] {
            assert_eq!(s.as_str().parse::<Strategy>(), Ok(s));
        }
        assert!("fifo".parse::<Strategy>().is_err());
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
