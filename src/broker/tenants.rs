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

impl Broker {
    /// The tenant `resource` belongs to: `None` when it does not exist, `Some(None)` when it
    /// belongs to no tenant.
    pub async fn owner(&self, resource: &store::tenant::Owned) -> Result<Option<Option<String>>> {
        Ok(store::tenant::owner(&self.db, resource).await?)
    }

    /// The queue and tenant of each of `ids` that exists.
    pub async fn job_owners(
        &self,
        ids: &[crate::job::JobId],
    ) -> Result<Vec<store::tenant::JobOwner>> {
        let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
        Ok(store::tenant::job_owners(&self.db, &ids).await?)
    }
}
