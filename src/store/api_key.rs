//! Statements on `ojs_api_key` (migration V13).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// A stored key, without its hash.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub id: Uuid,
    pub name: String,
    pub role: String,
    pub queues: Option<Vec<String>>,
    /// The tenant the key acts as (migration V24).
    pub tenant: Option<String>,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A key as the key ring reads it.
#[derive(Debug, Clone)]
pub struct RingKey {
    pub id: Uuid,
    pub role: String,
    pub queues: Option<Vec<String>>,
    pub tenant: Option<String>,
    pub key_hash: Vec<u8>,
    pub revoked: bool,
}

/// A key to store.
#[derive(Debug, Clone, Copy)]
pub struct NewKeyRow<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub role: &'a str,
    pub queues: Option<&'a [String]>,
    pub tenant: Option<&'a str>,
    pub key_hash: &'a [u8],
    pub key_prefix: &'a str,
}

/// Stores a new key.
pub async fn create(db: impl PgExecutor<'_>, k: NewKeyRow<'_>) -> Result<KeyRow, sqlx::Error> {
    sqlx::query_as!(
        KeyRow,
        r#"
        insert into ojs_api_key (id, name, role, queues, tenant, key_hash, key_prefix)
        values ($1, $2, $3, $4, $5, $6, $7)
        returning id, name, role, queues, tenant, key_prefix, created_at, revoked_at
        "#,
        k.id,
        k.name,
        k.role,
        k.queues,
        k.tenant,
        k.key_hash,
        k.key_prefix,
    )
    .fetch_one(db)
    .await
}

/// Every key, active ones first, newest first.
pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<KeyRow>, sqlx::Error> {
    sqlx::query_as!(
        KeyRow,
        r#"
        select id, name, role, queues, tenant, key_prefix, created_at, revoked_at
          from ojs_api_key
         order by revoked_at is not null, created_at desc, id
        "#
    )
    .fetch_all(db)
    .await
}

/// Revokes key `id`; `None` when there is no such key. Revoking a revoked key keeps its time.
pub async fn revoke(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<KeyRow>, sqlx::Error> {
    sqlx::query_as!(
        KeyRow,
        r#"
        update ojs_api_key set revoked_at = coalesce(revoked_at, now())
         where id = $1
        returning id, name, role, queues, tenant, key_prefix, created_at, revoked_at
        "#,
        id
    )
    .fetch_optional(db)
    .await
}

/// Every key, revoked ones included (whether any key was ever made matters too).
pub async fn for_ring(db: impl PgExecutor<'_>) -> Result<Vec<RingKey>, sqlx::Error> {
    sqlx::query_as!(
        RingKey,
        r#"
        select id, role, queues, tenant, key_hash, revoked_at is not null as "revoked!"
          from ojs_api_key
        "#
    )
    .fetch_all(db)
    .await
}
