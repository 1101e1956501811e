//! The resolved queue configurations, cached per process.
//!
//! Every configuration change bumps a generation counter in the database. A process keeps the
//! configurations of one generation and looks at the counter at most every
//! [`REFRESH_INTERVAL`] when it uses them, so a change made through another replica applies
//! here within that interval; a change made here applies at once. Enqueues are exact anyway:
//! the enqueue statement checks the generation its defaults came from and refuses a stale one
//! (the broker then reloads and tries again).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::Db;
use serde_json::Value;
use tokio::time::Instant;

use crate::job::schema::{SchemaSet, ValidationMode};
use crate::queue_config::{DEFAULT_LAYER, QueueConfig};
use crate::scheduling;
use crate::scheduling::pool::WorkerPool;
use crate::store;
use crate::tenant::Limits;

/// How stale another replica's configuration change may be here.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(250);

/// The configurations of one generation.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// `-1` before the first load.
    pub generation: i64,
    /// The `_default` layer as stored.
    pub default_layer: Value,
    /// What a queue without its own values resolves to.
    pub default: Arc<QueueConfig>,
    /// Queues with their own values.
    queues: HashMap<String, Arc<QueueConfig>>,
    /// Worker pools by name.
    pools: HashMap<String, Arc<WorkerPool>>,
    /// Queue → the isolated pools listing it.
    isolated: HashMap<String, Vec<String>>,
    /// Tenant-fair queues.
    fair: HashSet<String>,
    /// `retention.completed` of the `_default` layer, when it sets one (ms).
    default_completed_retention: Option<u64>,
    /// Queues whose own layer sets `retention.completed` (ms).
    completed_retention: Vec<(String, u64)>,
    /// The registered schemas, compiled (loaded with the configurations: registering one bumps
    /// the same generation, so the enqueue statement's check covers them too).
    pub schemas: SchemaSet,
    /// Tenants with limits (a change bumps the same generation too).
    tenants: HashMap<String, Limits>,
}

impl Snapshot {
    /// The resolved configuration of `queue`.
    pub fn of(&self, queue: &str) -> &Arc<QueueConfig> {
        self.queues.get(queue).unwrap_or(&self.default)
    }

    /// The pool named `name`, if configured.
    pub fn pool(&self, name: &str) -> Option<&Arc<WorkerPool>> {
        self.pools.get(name)
    }

    /// Whether `queue` may be served to a member of `pool` (`None`: no pool): a queue of
    /// isolated pools is served to their members only.
    pub fn serves(&self, queue: &str, pool: Option<&str>) -> bool {
        self.isolated
            .get(queue)
            .is_none_or(|owners| pool.is_some_and(|p| owners.iter().any(|o| o == p)))
    }

    /// Whether `queue` dispatches fairly across tenants.
    pub fn is_tenant_fair(&self, queue: &str) -> bool {
        self.fair.contains(queue)
    }

    /// The queues whose completed jobs are deleted on ACK: those whose `retention.completed`
    /// is zero — their own layer's value, else `_default`'s, else the server's
    /// (`server_keeps_completed` is false when `OJS_RETENTION_COMPLETED` is zero).
    pub fn delete_on_ack(&self, server_keeps_completed: bool) -> store::job::DeleteOnAck {
        let all = self
            .default_completed_retention
            .map_or(!server_keeps_completed, |ms| ms == 0);
        // With `all`, the queues that keep theirs are the exceptions; else those that don't
        // are the list.
        let listed = self
            .completed_retention
            .iter()
            .filter(|(_, ms)| (*ms == 0) != all)
            .map(|(q, _)| q.clone())
            .collect();
        let (queues, except) = if all {
            (Vec::new(), listed)
        } else {
            (listed, Vec::new())
        };
        store::job::DeleteOnAck {
            all,
            queues,
            except,
        }
    }

    /// The limits of `tenant`, if it has any.
    pub fn tenant_limits(&self, tenant: &str) -> Option<&Limits> {
        self.tenants.get(tenant)
    }

    /// Whether any tenant has limits.
    pub fn any_tenant_limits(&self) -> bool {
        !self.tenants.is_empty()
    }

    /// Queues with their own configuration.
    pub fn configured(&self) -> impl Iterator<Item = (&str, &Arc<QueueConfig>)> {
        self.queues.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn build(
        generation: i64,
        layers: Vec<(String, Value)>,
        pools: Vec<WorkerPool>,
        fair: HashSet<String>,
        schemas: SchemaSet,
        tenants: HashMap<String, Limits>,
    ) -> Snapshot {
        let empty = Value::Object(Default::default());
        let default_layer = layers
            .iter()
            .find(|(name, _)| name == DEFAULT_LAYER)
            .map_or_else(|| empty.clone(), |(_, layer)| layer.clone());
        // Stored layers were validated when written; one that no longer resolves (edited by
        // hand) falls back to what is beneath it rather than stopping the server.
        let default = QueueConfig::resolve(&default_layer, &empty).unwrap_or_else(|e| {
            tracing::warn!(error = ?e, "the _default queue configuration does not resolve; using the system defaults");
            QueueConfig::default()
        });
        let completed_retention_of = |layer: &Value| {
            layer
                .pointer("/retention/completed")
                .and_then(Value::as_str)
                .and_then(|d| crate::wire::duration::parse_ms(d).ok())
        };
        let default_completed_retention = completed_retention_of(&default_layer);
        let completed_retention = layers
            .iter()
            .filter(|(name, _)| name != DEFAULT_LAYER)
            .filter_map(|(name, own)| completed_retention_of(own).map(|ms| (name.clone(), ms)))
            .collect();
        let queues = layers
            .into_iter()
            .filter(|(name, _)| name != DEFAULT_LAYER)
            .map(|(name, own)| {
                let config = QueueConfig::resolve(&default_layer, &own).unwrap_or_else(|e| {
                    tracing::warn!(queue = %name, error = ?e, "queue configuration does not resolve; using _default");
                    default.clone()
                });
                (name, Arc::new(config))
            })
            .collect();
        let mut isolated: HashMap<String, Vec<String>> = HashMap::new();
        for pool in pools.iter().filter(|p| p.isolated) {
            for queue in &pool.queues {
                isolated
                    .entry(queue.clone())
                    .or_default()
                    .push(pool.name.clone());
            }
        }
        Snapshot {
            generation,
            default_layer,
            default: Arc::new(default),
            queues,
            pools: pools
                .into_iter()
                .map(|p| (p.name.clone(), Arc::new(p)))
                .collect(),
            isolated,
            fair,
            default_completed_retention,
            completed_retention,
            schemas,
            tenants,
        }
    }
}

impl scheduling::Pools for Snapshot {
    fn pool(&self, name: &str) -> Option<&Arc<WorkerPool>> {
        Snapshot::pool(self, name)
    }

    fn serves(&self, queue: &str, member_of: Option<&str>) -> bool {
        Snapshot::serves(self, queue, member_of)
    }
}

/// The cache.
#[derive(Debug)]
pub struct Configs {
    state: Mutex<(Arc<Snapshot>, Option<Instant>)>,
    /// The validation mode of schemas registered without one.
    schema_default: ValidationMode,
}

impl Configs {
    /// An empty cache (loaded at first use); `schema_default` is the mode of schemas registered
    /// without one (`OJS_SCHEMA_VALIDATION`).
    pub fn new(schema_default: ValidationMode) -> Configs {
        let empty = Snapshot {
            generation: -1,
            ..Snapshot::default()
        };
        Configs {
            state: Mutex::new((Arc::new(empty), None)),
            schema_default,
        }
    }

    /// The current configurations: cached, or reloaded when the generation moved on (checked at
    /// most every [`REFRESH_INTERVAL`]).
    pub async fn current(&self, db: &Db) -> Result<Arc<Snapshot>, sqlx::Error> {
        let (snapshot, checked) = self.state.lock().expect("configs lock").clone();
        let now = Instant::now();
        if checked.is_some_and(|at| now.duration_since(at) < REFRESH_INTERVAL) {
            return Ok(snapshot);
        }
        let generation = store::queue::config_generation(db).await?;
        if generation == snapshot.generation {
            self.state.lock().expect("configs lock").1 = Some(now);
            return Ok(snapshot);
        }
        self.reload(db).await
    }

    /// The current configurations, the generation checked now whatever the interval.
    pub async fn verified(&self, db: &Db) -> Result<Arc<Snapshot>, sqlx::Error> {
        let snapshot = self.state.lock().expect("configs lock").0.clone();
        if store::queue::config_generation(db).await? == snapshot.generation {
            self.state.lock().expect("configs lock").1 = Some(Instant::now());
            return Ok(snapshot);
        }
        self.reload(db).await
    }

    /// Loads the configurations now.
    pub async fn reload(&self, db: &Db) -> Result<Arc<Snapshot>, sqlx::Error> {
        let now = Instant::now();
        let (generation, layers) = store::queue::config_layers(db).await?;
        // Read after the generation: if a change lands in between, the next check sees a newer
        // generation and loads again.
        let pools = store::pool::all(db).await?;
        let fair = store::pool::fair_queues(db).await?;
        let schemas = store::schema::all(db).await?;
        let tenants = store::tenant::configured(db)
            .await?
            .into_iter()
            .filter(|t| t.limits.any())
            .map(|t| (t.id, t.limits))
            .collect();
        let snapshot = Arc::new(Snapshot::build(
            generation,
            layers,
            pools.into_iter().map(|p| p.pool).collect(),
            fair.into_iter().map(|f| f.queue).collect(),
            SchemaSet::build(
                schemas
                    .into_iter()
                    .map(store::schema::SchemaRow::stored)
                    .collect(),
                self.schema_default,
            ),
            tenants,
        ));
        let mut state = self.state.lock().expect("configs lock");
        // A concurrent reload may have stored a newer generation already.
        if state.0.generation <= generation {
            *state = (snapshot.clone(), Some(now));
        }
        Ok(snapshot)
    }
}
