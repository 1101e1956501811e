//! Tenants (multi-tenancy extension), as their jobs name them: see [`crate::store::tenant`].

use super::Broker;
use crate::error::Result;
use crate::store;
use crate::store::tenant::TenantRow;

impl Broker {
    /// Tenants by id, `limit` from `offset`, with how many there are.
    pub async fn tenants(&self, limit: i64, offset: i64) -> Result<(Vec<TenantRow>, i64)> {
        Ok(store::tenant::list(&self.db, limit, offset).await?)
    }

    /// One tenant's counts (zero when no retained job names it).
    pub async fn tenant(&self, tenant: &str) -> Result<TenantRow> {
        Ok(store::tenant::get(&self.db, tenant).await?)
    }
}
