//! Worker pools of the fair-scheduling extension ([OJS worker pools]): what a pool is, how its
//! input is checked, and its wire form.
//!
//! [OJS worker pools]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#6-worker-pools

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::error::Error;
use crate::scheduling::strategy::{MAX_WEIGHT, Strategy};
use crate::wire::{duration, json};

/// Most queues a pool may list.
pub const MAX_QUEUES: usize = 100;

/// Shortest accepted `rotation_interval`.
pub const MIN_ROTATION_MS: u64 = 100;

/// Starvation prevention settings ([OJS starvation prevention]).
///
/// [OJS starvation prevention]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#8-starvation-prevention
#[derive(Debug, Clone, PartialEq)]
pub struct Starvation {
    pub enabled: bool,
    /// The window over which each queue is owed its share, and after which a queue without
    /// dispatch is starved.
    pub rotation_interval_ms: u64,
    /// Smallest share of the pool's dispatches each queue with work gets per window.
    pub min_dispatch_ratio: f64,
}

impl Default for Starvation {
    fn default() -> Self {
        Starvation {
            enabled: false,
            rotation_interval_ms: 30_000,
            min_dispatch_ratio: 0.05,
        }
    }
}

/// Per-tenant fairness settings ([OJS per-tenant fairness]).
///
/// [OJS per-tenant fairness]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#9-per-tenant-fairness
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantFairness {
    pub enabled: bool,
    /// Tenant weights keyed `tenant:<id>`.
    pub weights: BTreeMap<String, u32>,
    /// Weight of tenants not in `weights` (≥ 1; stored as 1 when absent).
    pub default_weight: u32,
}

/// A pool's starvation prevention settings as the API shows them.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PoolStarvationPrevention)]
pub struct WireStarvation {
    pub enabled: bool,
    /// ISO 8601 duration.
    pub rotation_interval: String,
    pub min_dispatch_ratio: f64,
}

/// A pool's per-tenant fairness settings as the API shows them.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PoolTenantFairness)]
pub struct WireTenantFairness<'a> {
    pub enabled: bool,
    /// Always `fair-share`.
    pub strategy: &'static str,
    /// Tenant weights keyed `tenant:<id>`.
    pub weights: &'a BTreeMap<String, u32>,
    pub default_weight: u32,
}

/// A worker pool.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerPool {
    pub name: String,
    /// In order of preference; no duplicates.
    pub queues: Vec<String>,
    /// Most active jobs across all members; `None`: no limit.
    pub concurrency: Option<i32>,
    pub strategy: Strategy,
    /// Queue weights (keys are in `queues`); a queue not named weighs 1.
    pub weights: BTreeMap<String, u32>,
    pub isolated: bool,
    pub starvation: Starvation,
    pub tenant_fairness: TenantFairness,
}

/// A pool as stored, with its timestamps.
#[derive(Debug, Clone)]
pub struct StoredPool {
    pub pool: WorkerPool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl WorkerPool {
    /// The weight of `queue` for the `weighted` strategy.
    pub fn weight(&self, queue: &str) -> u32 {
        self.weights.get(queue).copied().unwrap_or(1)
    }

    /// Checks a PUT body for the pool `name` (see [OJS pool management] and the
    /// [pool definition]).
    ///
    /// [OJS pool management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#101-pool-management
    /// [pool definition]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#61-pool-definition
    pub fn parse(name: &str, body: &Value) -> Result<WorkerPool, Error> {
        let Some(body) = body.as_object() else {
            return Err(Error::invalid("$", "the pool must be a JSON object"));
        };
        const FIELDS: &[&str] = &[
            "id",
            "name",
            "queues",
            "concurrency",
            "strategy",
            "weights",
            "isolated",
            "starvation_prevention",
            "tenant_fairness",
            // Read-only fields of the answer, accepted back unchanged (a GET body PUT again).
            "active_workers",
            "workers",
            "active_jobs",
            "created_at",
            "updated_at",
        ];
        unknown_fields(body, FIELDS, "$")?;
        for field in ["name", "id"] {
            match body.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(given)) if given == name => {}
                Some(other) => {
                    return Err(Error::invalid(
                        format!("$.{field}"),
                        format!("{field} {other} does not match the pool in the path ({name:?})"),
                    ));
                }
            }
        }
        let (queues, mut weights) = parse_queues(body.get("queues"))?;
        let concurrency = match body.get("concurrency") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                json::whole(v)
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| {
                        Error::invalid(
                            "$.concurrency",
                            "concurrency must be an integer ≥ 0 or null",
                        )
                    })?,
            ),
        };
        let strategy = match body.get("strategy") {
            None | Some(Value::Null) => Strategy::RoundRobin,
            Some(Value::String(s)) => s.parse().map_err(|e| Error::invalid("$.strategy", e))?,
            Some(_) => return Err(Error::invalid("$.strategy", "strategy must be a string")),
        };
        match body.get("weights") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (queue, weight) in map {
                    let path = format!("$.weights.{queue}");
                    if !queues.contains(queue) {
                        return Err(Error::invalid(
                            path,
                            format!("weight for {queue:?}, which is not one of the pool's queues"),
                        ));
                    }
                    weights.insert(queue.clone(), positive_weight(weight, &path)?);
                }
            }
            Some(_) => return Err(Error::invalid("$.weights", "weights must be an object")),
        }
        let isolated = flag(body, "isolated", "$")?.unwrap_or(false);
        let starvation = parse_starvation(body.get("starvation_prevention"), queues.len())?;
        let tenant_fairness = parse_tenant_fairness(body.get("tenant_fairness"))?;
        Ok(WorkerPool {
            name: name.to_owned(),
            queues,
            concurrency,
            strategy,
            weights,
            isolated,
            starvation,
            tenant_fairness,
        })
    }

    /// The `starvation_prevention` object as stored and shown.
    pub fn starvation_wire(&self) -> WireStarvation {
        WireStarvation {
            enabled: self.starvation.enabled,
            rotation_interval: duration::format_iso(self.starvation.rotation_interval_ms),
            min_dispatch_ratio: self.starvation.min_dispatch_ratio,
        }
    }

    /// The `tenant_fairness` object as stored and shown.
    pub fn tenant_fairness_wire(&self) -> WireTenantFairness<'_> {
        WireTenantFairness {
            enabled: self.tenant_fairness.enabled,
            strategy: "fair-share",
            weights: &self.tenant_fairness.weights,
            default_weight: self.tenant_fairness.default_weight,
        }
    }

    /// The `starvation_prevention` object as stored.
    pub fn starvation_json(&self) -> Value {
        json!(self.starvation_wire())
    }

    /// The `tenant_fairness` object as stored.
    pub fn tenant_fairness_json(&self) -> Value {
        json!(self.tenant_fairness_wire())
    }

    /// The queue weights as stored.
    pub fn weights_json(&self) -> Value {
        json!(self.weights)
    }

    /// Rebuilds a stored pool from its row as a JSON object (the PUT body form); `None` if it
    /// no longer parses (edited by hand).
    pub fn from_stored(name: &str, row: &Value) -> Option<WorkerPool> {
        WorkerPool::parse(name, row)
            .inspect_err(
                |e| tracing::warn!(pool = %name, error = %e, "stored pool does not parse; ignored"),
            )
            .ok()
    }
}

fn unknown_fields(body: &Map<String, Value>, known: &[&str], path: &str) -> Result<(), Error> {
    match body.keys().find(|k| !known.contains(&k.as_str())) {
        Some(field) => Err(Error::invalid(
            format!("{path}.{field}"),
            format!("unknown field {field:?}"),
        )),
        None => Ok(()),
    }
}

/// An optional boolean field `key` of the object at `path`.
fn flag(body: &Map<String, Value>, key: &str, path: &str) -> Result<Option<bool>, Error> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(Error::invalid(
            format!("{path}.{key}"),
            format!("{key} must be a boolean"),
        )),
    }
}

/// An optional settings object of the pool (`None` when absent or null).
fn settings<'a>(
    value: Option<&'a Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, Error> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(body)) => Ok(Some(body)),
        Some(_) => Err(Error::invalid(
            format!("$.{key}"),
            format!("{key} must be an object"),
        )),
    }
}

fn positive_weight(value: &Value, path: &str) -> Result<u32, Error> {
    json::whole(value)
        .and_then(|w| u64::try_from(w).ok())
        .filter(|w| (1..=u64::from(MAX_WEIGHT)).contains(w))
        .map(|w| w as u32)
        .ok_or_else(|| {
            Error::invalid(
                path,
                format!("a weight must be an integer from 1 to {MAX_WEIGHT}"),
            )
        })
}

/// `queues`: an array of names, or a map `{queue: {"weight": n}}` which also gives weights.
/// The map is ojsd's addition (the conformance suite sends it); it becomes the list of names
/// plus `weights`.
fn parse_queues(value: Option<&Value>) -> Result<(Vec<String>, BTreeMap<String, u32>), Error> {
    let mut weights = BTreeMap::new();
    let names: Vec<String> = match value {
        None | Some(Value::Null) => {
            return Err(Error::invalid("$.queues", "queues is required"));
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, q)| {
                q.as_str().map(str::to_owned).ok_or_else(|| {
                    Error::invalid(format!("$.queues[{i}]"), "a queue name must be a string")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Object(map)) => {
            let mut names = Vec::with_capacity(map.len());
            for (queue, spec) in map {
                let path = format!("$.queues.{queue}");
                match spec {
                    Value::Null => {}
                    Value::Object(spec) => {
                        unknown_fields(spec, &["weight"], &path)?;
                        if let Some(w) = spec.get("weight").filter(|w| !w.is_null()) {
                            weights.insert(
                                queue.clone(),
                                positive_weight(w, &format!("{path}.weight"))?,
                            );
                        }
                    }
                    _ => {
                        return Err(Error::invalid(
                            path,
                            "each queue maps to an object such as {\"weight\": 3}",
                        ));
                    }
                }
                names.push(queue.clone());
            }
            names
        }
        Some(_) => {
            return Err(Error::invalid(
                "$.queues",
                "queues must be an array of queue names or an object of queue -> {weight}",
            ));
        }
    };
    if names.is_empty() || names.len() > MAX_QUEUES {
        return Err(Error::invalid(
            "$.queues",
            format!("a pool has 1 to {MAX_QUEUES} queues"),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if !crate::job::is_valid_queue(name) || name == crate::queue_config::DEFAULT_LAYER {
            return Err(Error::invalid(
                format!("$.queues[{i}]"),
                format!("{name:?} is not a valid queue name"),
            ));
        }
        if names[..i].contains(name) {
            return Err(Error::invalid(
                format!("$.queues[{i}]"),
                format!("queue {name:?} is listed twice"),
            ));
        }
    }
    Ok((names, weights))
}

fn parse_starvation(value: Option<&Value>, queues: usize) -> Result<Starvation, Error> {
    let mut out = Starvation::default();
    let Some(body) = settings(value, "starvation_prevention")? else {
        return Ok(out);
    };
    unknown_fields(
        body,
        &["enabled", "rotation_interval", "min_dispatch_ratio"],
        "$.starvation_prevention",
    )?;
    if let Some(enabled) = flag(body, "enabled", "$.starvation_prevention")? {
        out.enabled = enabled;
    }
    match body.get("rotation_interval") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            out.rotation_interval_ms = duration::parse_ms(s)
                .ok()
                .filter(|ms| *ms >= MIN_ROTATION_MS)
                .ok_or_else(|| {
                    Error::invalid(
                        "$.starvation_prevention.rotation_interval",
                        format!(
                            "rotation_interval must be an ISO 8601 duration of at least {MIN_ROTATION_MS} ms, such as \"PT30S\""
                        ),
                    )
                })?;
        }
        Some(_) => {
            return Err(Error::invalid(
                "$.starvation_prevention.rotation_interval",
                "rotation_interval must be an ISO 8601 duration string",
            ));
        }
    }
    match body.get("min_dispatch_ratio") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let path = "$.starvation_prevention.min_dispatch_ratio";
            let ratio = v
                .as_f64()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    Error::invalid(path, "min_dispatch_ratio must be a number from 0 to 1")
                })?;
            if ratio * queues as f64 > 1.0 + 1e-9 {
                return Err(Error::invalid(
                    path,
                    format!(
                        "min_dispatch_ratio {ratio} for each of {queues} queues adds up to more than all dispatches"
                    ),
                ));
            }
            out.min_dispatch_ratio = ratio;
        }
    }
    Ok(out)
}

fn parse_tenant_fairness(value: Option<&Value>) -> Result<TenantFairness, Error> {
    let mut out = TenantFairness {
        default_weight: 1,
        ..TenantFairness::default()
    };
    let Some(body) = settings(value, "tenant_fairness")? else {
        return Ok(out);
    };
    unknown_fields(
        body,
        &["enabled", "strategy", "weights", "default_weight"],
        "$.tenant_fairness",
    )?;
    if let Some(enabled) = flag(body, "enabled", "$.tenant_fairness")? {
        out.enabled = enabled;
    }
    match body.get("strategy") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "fair-share" => {}
        Some(_) => {
            return Err(Error::invalid(
                "$.tenant_fairness.strategy",
                "the only tenant fairness strategy is \"fair-share\"",
            ));
        }
    }
    match body.get("weights") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, weight) in map {
                let path = format!("$.tenant_fairness.weights.{key}");
                let tenant = key.strip_prefix("tenant:").unwrap_or(key);
                if tenant.is_empty() || tenant.len() > 255 {
                    return Err(Error::invalid(
                        path,
                        "a tenant key is \"tenant:<id>\" with a non-empty id of at most 255 bytes",
                    ));
                }
                out.weights
                    .insert(format!("tenant:{tenant}"), positive_weight(weight, &path)?);
            }
        }
        Some(_) => {
            return Err(Error::invalid(
                "$.tenant_fairness.weights",
                "weights must be an object",
            ));
        }
    }
    match body.get("default_weight") {
        None | Some(Value::Null) => {}
        Some(v) => out.default_weight = positive_weight(v, "$.tenant_fairness.default_weight")?,
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_the_map_form() {
        let pool = WorkerPool::parse("p", &json!({"queues": ["a", "b"]})).unwrap();
        assert_eq!(pool.strategy, Strategy::RoundRobin);
        assert_eq!(pool.concurrency, None);
        assert!(!pool.isolated && !pool.starvation.enabled && !pool.tenant_fairness.enabled);
        assert_eq!(pool.starvation.rotation_interval_ms, 30_000);
        assert_eq!(pool.tenant_fairness.default_weight, 1);
        let pool = WorkerPool::parse(
            "p",
            &json!({"name": "p", "strategy": "weighted",
                    "queues": {"high": {"weight": 70}, "low": {"weight": 30}}}),
        )
        .unwrap();
        assert_eq!(pool.queues, ["high", "low"]);
        assert_eq!(pool.weight("high"), 70);
        assert_eq!(pool.weight("low"), 30);
        let pool = WorkerPool::parse(
            "p",
            &json!({"queues": ["a"], "tenant_fairness": {"enabled": true, "weights": {"x": 5, "tenant:y": 2}}}),
        )
        .unwrap();
        assert_eq!(pool.tenant_fairness.weights["tenant:x"], 5);
        assert_eq!(pool.tenant_fairness.weights["tenant:y"], 2);
    }

    #[test]
    fn invalid_pools_name_the_field() {
        let cases = [
            (json!([]), "$"),
            (json!({}), "$.queues"),
            (json!({"queues": []}), "$.queues"),
            (json!({"queues": ["Bad Name"]}), "$.queues[0]"),
            (json!({"queues": ["a", "a"]}), "$.queues[1]"),
            (json!({"queues": ["a"], "name": "other"}), "$.name"),
            (json!({"queues": ["a"], "strategy": "random"}), "$.strategy"),
            (json!({"queues": ["a"], "weights": {"b": 1}}), "$.weights.b"),
            (json!({"queues": ["a"], "weights": {"a": 0}}), "$.weights.a"),
            (json!({"queues": ["a"], "concurrency": -1}), "$.concurrency"),
            (json!({"queues": ["a"], "extra": 1}), "$.extra"),
            (
                json!({"queues": ["a"], "starvation_prevention": {"min_dispatch_ratio": 1.5}}),
                "$.starvation_prevention.min_dispatch_ratio",
            ),
            (
                json!({"queues": ["a", "b", "c"], "starvation_prevention": {"min_dispatch_ratio": 0.4}}),
                "$.starvation_prevention.min_dispatch_ratio",
            ),
            (
                json!({"queues": ["a"], "starvation_prevention": {"rotation_interval": "soon"}}),
                "$.starvation_prevention.rotation_interval",
            ),
            (
                json!({"queues": ["a"], "tenant_fairness": {"strategy": "lottery"}}),
                "$.tenant_fairness.strategy",
            ),
            (
                json!({"queues": ["a"], "tenant_fairness": {"default_weight": 0}}),
                "$.tenant_fairness.default_weight",
            ),
        ];
        for (body, field) in cases {
            match WorkerPool::parse("p", &body) {
                Err(Error::InvalidRequest { field: got, .. }) => assert_eq!(got, field, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
