//! The vocabulary of fetch order: a [`Strategy`], queue [`Weights`] (and the
//! `OJS_QUEUE_WEIGHTS` setting that spells them), a FETCH's [`QueueList`] and the starvation
//! [`Guarantee`] the dispatcher applies.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use crate::wire::names;

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
    /// Only while the worker has capacity; the deepest backlog first.
    LeastLoaded,
}

names!(Strategy {
    Strict => "strict",
    Weighted => "weighted",
    RoundRobin => "round-robin",
    LeastLoaded => "least-loaded",
});

impl FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::from_name(s).ok_or_else(|| {
            format!("strategy must be strict, weighted, round-robin or least-loaded, not {s:?}")
        })
    }
}

/// Largest accepted queue weight.
pub const MAX_WEIGHT: u32 = 1_000_000;

/// Queue weights by name; a queue not named weighs 1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Weights(pub HashMap<String, u32>);

impl utoipa::PartialSchema for Weights {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use crate::job::id_schema::{QUEUE_NAME_MAX, QUEUE_NAME_PATTERN};
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let name = ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(QUEUE_NAME_PATTERN))
            .max_length(Some(QUEUE_NAME_MAX));
        let weight = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .maximum(Some(MAX_WEIGHT));
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property_names(Some(name))
            .additional_properties(Some(weight))
            .description(Some(format!(
                "Queue name to weight, 0 to {MAX_WEIGHT}; a queue not named weighs 1."
            )))
            .into()
    }
}

impl utoipa::ToSchema for Weights {}

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

/// A FETCH's queues with their weights, in the order it names them.
pub type QueueList = Vec<(String, u32)>;

/// Starvation prevention as the dispatcher applies it: a pool's `starvation_prevention`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Guarantee {
    /// The sliding window, and how long a queue with work may go without a dispatch.
    pub window: Duration,
    /// Smallest share of the window's dispatches each queue with work gets.
    pub min_ratio: f64,
}
