//! API keys: created, listed and revoked by operators (the admin API and `ojsd keys`).

use uuid::Uuid;

use super::Broker;
use crate::auth::{self, KeyRequest, KeyRing};
use crate::error::Result;
use crate::store;
pub use crate::store::api_key::KeyRow;

/// A created key: its row, and the key itself (shown once).
pub struct CreatedKey {
    pub row: KeyRow,
    pub key: String,
}

impl Broker {
    /// Creates a key.
    pub async fn create_key(&self, request: &KeyRequest) -> Result<CreatedKey> {
        create_key(&self.db, request).await
    }

    /// Every key, active ones first.
    pub async fn keys(&self) -> Result<Vec<KeyRow>> {
        Ok(store::api_key::list(&self.db).await?)
    }

    /// Revokes key `id`; `None`: no such key.
    pub async fn revoke_key(&self, id: Uuid) -> Result<Option<KeyRow>> {
        Ok(store::api_key::revoke(&self.db, id).await?)
    }

    /// Reloads `ring` now (this replica; the others reload within a second).
    pub async fn reload_keys(&self, ring: &KeyRing) -> Result<()> {
        Ok(ring.reload(&self.db).await?)
    }
}

/// Creates a key on `db` (also used by `ojsd keys create`, without a broker).
pub async fn create_key(db: &crate::db::Db, request: &KeyRequest) -> Result<CreatedKey> {
    let new = auth::generate();
    let row = store::api_key::create(
        db,
        store::api_key::NewKeyRow {
            id: Uuid::now_v7(),
            name: &request.name,
            role: request.role.as_str(),
            queues: request.queues.as_deref(),
            tenant: request.tenant.as_deref(),
            key_hash: &new.hash,
            key_prefix: &new.prefix,
        },
    )
    .await?;
    Ok(CreatedKey { row, key: new.key })
}
