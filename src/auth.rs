//! API keys and what they allow.
//!
//! A key is `ojs_` followed by 43 characters (256 random bits, base64url). The database keeps
//! only its SHA-256 ([`hash`]); every replica holds the active keys in a [`KeyRing`] that it
//! reloads every [`RELOAD_INTERVAL`], so a key created or revoked anywhere takes effect on every
//! replica within about a second, and a request never waits on the database to be authenticated.
//!
//! Roles: a `producer` enqueues, reads, reprioritises and cancels jobs; a `worker` speaks the
//! worker protocol (fetch, ACK, NACK, heartbeats, registration, progress); an `admin` may do
//! everything. A key may be limited to a set of queues.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::db::Db;
use base64::Engine;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store;
use crate::wire::names;

/// How often a replica reloads the active keys.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// What every key starts with.
pub const KEY_PREFIX: &str = "ojs_";
/// How many characters of a key are kept to recognise it.
const SHOWN_CHARS: usize = 12;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Producer,
    Worker,
    Admin,
}

names!(Role {
    Producer => "producer",
    Worker => "worker",
    Admin => "admin",
});

impl Role {
    /// Whether this role may use an endpoint that needs `needed`.
    pub fn covers(self, needed: Role) -> bool {
        self == Role::Admin || self == needed
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match Role::from_name(s) {
            Some(role) => Ok(role),
            None => Err(format!("role must be producer, worker or admin, not {s:?}")),
        }
    }
}

/// The key a request was made with.
#[derive(Debug, Clone)]
pub struct Principal {
    pub key_id: Uuid,
    pub role: Role,
    /// The queues the key may use; `None`: every queue.
    pub queues: Option<Arc<[String]>>,
    /// The tenant the key acts as; `None`: any (or none).
    pub tenant: Option<Arc<str>>,
}

impl Principal {
    /// Whether the key may use `queue`.
    pub fn may_use(&self, queue: &str) -> bool {
        self.queues
            .as_ref()
            .is_none_or(|queues| queues.iter().any(|q| q == queue))
    }
}

/// What a new key is to be: checked, ready to store.
#[derive(Debug, Clone)]
pub struct KeyRequest {
    pub name: String,
    pub role: Role,
    /// Limits a producer or worker key; `None`: every queue.
    pub queues: Option<Vec<String>>,
    /// Binds the key to a tenant: it acts as that tenant.
    pub tenant: Option<String>,
}

impl KeyRequest {
    /// Checks a request; the error names the field (`$.queues`) and what is wrong.
    pub fn new(
        role: &str,
        queues: Option<Vec<String>>,
        tenant: Option<String>,
        name: Option<String>,
    ) -> Result<KeyRequest, (&'static str, String)> {
        let role: Role = role.parse().map_err(|e| ("$.role", e))?;
        if let Some(queues) = &queues {
            if role == Role::Admin {
                return Err((
                    "$.queues",
                    "an admin key cannot be limited to queues (admin endpoints span every queue)"
                        .to_owned(),
                ));
            }
            if queues.is_empty() || queues.len() > 100 {
                return Err((
                    "$.queues",
                    "'queues' must name 1 to 100 queues (leave it out for every queue)".to_owned(),
                ));
            }
            if let Some(bad) = queues.iter().find(|q| !crate::job::is_valid_queue(q)) {
                return Err(("$.queues", format!("queue name {bad:?} is invalid")));
            }
        }
        // Any key may be bound to a tenant: an admin key so bound administers that tenant
        // alone (its admin routes see only the tenant's part; those acting on what every
        // tenant shares are refused, see `http::tenancy`).
        if let Some(tenant) = &tenant
            && !crate::tenant::is_valid_id(tenant)
        {
            return Err(("$.tenant", crate::tenant::invalid_id_message(tenant)));
        }
        let name = name.unwrap_or_default();
        if name.chars().count() > 200 {
            return Err(("$.name", "'name' must be at most 200 characters".to_owned()));
        }
        Ok(KeyRequest {
            name,
            role,
            queues,
            tenant,
        })
    }
}

/// A new key: the secret (shown once) and what is stored of it.
pub struct NewKey {
    pub key: String,
    pub hash: [u8; 32],
    pub prefix: String,
}

/// Makes a new random key.
pub fn generate() -> NewKey {
    let bytes: [u8; 32] = rand::random();
    let key = format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    NewKey {
        hash: hash(&key),
        prefix: key.chars().take(SHOWN_CHARS).collect(),
        key,
    }
}

/// The stored form of a key.
pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The active keys of this replica, by hash.
#[derive(Clone, Default)]
pub struct KeyRing {
    inner: Arc<RwLock<Ring>>,
}

#[derive(Default)]
struct Ring {
    keys: HashMap<[u8; 32], Principal>,
    /// Whether any key was ever created (revoking the last key must not open the server).
    configured: bool,
}

impl KeyRing {
    /// The key `key` names, if it is active.
    pub fn lookup(&self, key: &str) -> Option<Principal> {
        self.inner
            .read()
            .expect("key ring lock")
            .keys
            .get(&hash(key))
            .cloned()
    }

    /// Whether some key is active.
    pub fn has_active(&self) -> bool {
        !self.inner.read().expect("key ring lock").keys.is_empty()
    }

    /// Whether no key was ever created.
    pub fn is_empty(&self) -> bool {
        !self.inner.read().expect("key ring lock").configured
    }

    /// Replaces the ring with the active keys of the database.
    pub async fn reload(&self, db: &Db) -> Result<(), sqlx::Error> {
        let rows = store::api_key::for_ring(db).await?;
        let configured = !rows.is_empty();
        let keys = rows
            .into_iter()
            .filter(|row| !row.revoked)
            .filter_map(|row| {
                let hash: [u8; 32] = row.key_hash.as_slice().try_into().ok()?;
                let role = row.role.parse().ok()?;
                Some((
                    hash,
                    Principal {
                        key_id: row.id,
                        role,
                        queues: row.queues.map(Into::into),
                        tenant: row.tenant.map(Into::into),
                    },
                ))
            })
            .collect();
        *self.inner.write().expect("key ring lock") = Ring { keys, configured };
        Ok(())
    }

    /// Reloads every [`RELOAD_INTERVAL`] until `shutdown`. A failed reload keeps the keys it
    /// had (the database being away is no reason to let anyone in or to lock everyone out).
    pub async fn run(self, db: Db, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(RELOAD_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    if let Err(e) = self.reload(&db).await {
                        tracing::debug!(error = %e, "reloading the API keys failed; keeping the last ones");
                    }
                }
            }
        }
    }
}

/// Whether requests must carry a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AuthMode {
    /// Keys are required once any key was created (revoking them all does not reopen the
    /// server), and always on a non-loopback address, where the server refuses to start
    /// without one.
    #[default]
    Keys,
    /// No key is ever checked (a warning is logged when listening beyond loopback).
    Disabled,
}

/// Decides per request whether a key is required.
#[derive(Clone)]
pub struct Gate {
    pub ring: KeyRing,
    pub mode: AuthMode,
    /// Listening on a non-loopback address.
    pub public: bool,
    /// `/metrics` needs an admin key too.
    pub protect_metrics: bool,
}

impl Gate {
    /// Whether a request must carry a key now.
    pub fn enforced(&self) -> bool {
        self.mode == AuthMode::Keys && (self.public || !self.ring.is_empty())
    }
}
