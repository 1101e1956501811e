//! Tenants (multi-tenancy extension): who owns what (for `http::tenancy`), the tenants their
//! jobs name (see [`crate::store::tenant`]), and the limits an operator sets on them
//! (migration V28).

use super::Broker;
use crate::error::{Error, Result};
use crate::store;
use crate::store::tenant::{LimitUsage, TenantConfig, TenantRow};
use crate::telemetry;
use crate::tenant::LimitsChange;

impl Broker {
    /// Tenants by id — those retained jobs name and those configured — `limit` from `offset`,
    /// with how many there are.
    pub async fn tenants(&self, limit: i64, offset: i64) -> Result<(Vec<TenantRow>, i64)> {
        Ok(store::tenant::list(&self.db, limit, offset).await?)
    }

    /// One tenant's counts (zero when no retained job names it).
    pub async fn tenant(&self, tenant: &str) -> Result<TenantRow> {
        Ok(store::tenant::get(&self.db, tenant).await?)
    }

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

    /// `tenant`'s configuration, if an operator made one.
    pub async fn tenant_config(&self, tenant: &str) -> Result<Option<TenantConfig>> {
        Ok(store::tenant::config(&self.db, tenant).await?)
    }

    /// Every configured tenant, by id.
    pub async fn tenant_configs(&self) -> Result<Vec<TenantConfig>> {
        Ok(store::tenant::configured(&self.db).await?)
    }

    /// Applies `change` to `tenant`'s limits (configuring it when it was not), in force on
    /// every replica from their next enqueue (the configuration generation moves on), and lets
    /// go at once what a raised or removed concurrency limit allows. Returns the configuration
    /// and whether it is new.
    pub async fn set_tenant_limits(
        &self,
        tenant: &str,
        change: &LimitsChange,
        reason: Option<&str>,
    ) -> Result<(TenantConfig, bool)> {
        let mut tx = self.db.begin().await?;
        let current = store::tenant::config_locked(&mut *tx, tenant).await?;
        let limits = current.map(|c| c.limits).unwrap_or_default().with(change);
        let saved = store::tenant::set(&mut *tx, tenant, &limits, reason).await?;
        tx.commit().await?;
        self.after_tenant_change(tenant).await?;
        Ok(saved)
    }

    /// Removes `tenant`'s configuration and limits (404 when it has none); its held jobs go.
    pub async fn delete_tenant(&self, tenant: &str) -> Result<TenantConfig> {
        let removed = store::tenant::remove(&self.db, tenant)
            .await?
            .ok_or_else(|| Error::TenantNotConfigured(tenant.to_owned()))?;
        self.after_tenant_change(tenant).await?;
        Ok(removed)
    }

    /// After a change of limits: this replica's configuration now, and the tenant's held jobs
    /// as far as its limits allow now.
    async fn after_tenant_change(&self, tenant: &str) -> Result<()> {
        self.configs.reload(&self.db).await?;
        let released = store::tenant::release(&self.db, tenant, true).await?;
        telemetry::rate_released(released.iter().map(|(_, n)| n).sum());
        Ok(())
    }

    /// What `tenant` uses of `config`'s limits now.
    pub async fn tenant_usage(&self, config: &TenantConfig) -> Result<LimitUsage> {
        Ok(store::tenant::usage(&self.db, &config.id, &config.limits).await?)
    }
}
