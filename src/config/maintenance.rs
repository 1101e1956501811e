//! `maintenance`: whether this replica may lead, the leader's lease, and how often each of
//! the leader's services runs.

use std::time::Duration;

use anyhow::bail;

use super::retention::Retention;
use super::values::{millis, millis_default};
use crate::leadership::LeaderConfig;
use crate::maintenance::{
    ExpirerConfig, MaintenanceConfig, PlannerStatsConfig, PromoterConfig, PrunerConfig,
    ReaperConfig, StaleWorkersConfig, StarvationConfig,
};

pub const DEFAULT_LEADER_LEASE_MS: &str = "10000";
pub const DEFAULT_LEADER_RENEW_INTERVAL_MS: &str = "3000";
pub const DEFAULT_LEADER_ELECT_INTERVAL_MS: &str = "2000";
pub const DEFAULT_PROMOTE_INTERVAL_MS: &str = "250";
pub const DEFAULT_REAP_INTERVAL_MS: &str = "500";
pub const DEFAULT_EXPIRE_INTERVAL_MS: &str = "500";
pub const DEFAULT_STALE_CHECK_INTERVAL_MS: &str = "2000";
pub const DEFAULT_PRUNE_INTERVAL_MS: &str = "60000";
pub const DEFAULT_MAINTENANCE_BATCH_SIZE: u32 = 1_000;

#[derive(Debug, Clone, clap::Args)]
pub struct Maintenance {
    /// Whether this process may lead, i.e. run the maintenance services (promotion, reclaiming,
    /// expiry, retention, stale workers) when elected. Keep it on for at least one replica.
    #[arg(
        long = "maintenance",
        id = "maintenance",
        env = "OJS_MAINTENANCE",
        value_parser = clap::builder::BoolishValueParser::new(),
        default_value_t = true,
        action = clap::ArgAction::Set,
    )]
    pub enabled: bool,

    /// Leadership lease length (ms). A leader renews it well before it runs out; if the leader
    /// dies, another replica takes over at most this long after the last renewal.
    #[arg(
        long = "leader-lease-ms",
        id = "leader_lease_ms",
        env = "OJS_LEADER_LEASE_MS",
        value_parser = millis,
        default_value = DEFAULT_LEADER_LEASE_MS,
    )]
    pub leader_lease: Duration,

    /// How often the leader renews its lease (ms); at most a third of the lease.
    #[arg(
        long = "leader-renew-interval-ms",
        id = "leader_renew_interval_ms",
        env = "OJS_LEADER_RENEW_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_LEADER_RENEW_INTERVAL_MS,
    )]
    pub leader_renew_interval: Duration,

    /// How often a follower tries to become leader (ms). It also tries the moment the current
    /// lease runs out or its holder resigns.
    #[arg(
        long = "leader-elect-interval-ms",
        id = "leader_elect_interval_ms",
        env = "OJS_LEADER_ELECT_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_LEADER_ELECT_INTERVAL_MS,
    )]
    pub leader_elect_interval: Duration,

    /// Promoter: how often due scheduled and retryable jobs are made available (ms).
    #[arg(
        long = "promote-interval-ms",
        id = "promote_interval_ms",
        env = "OJS_PROMOTE_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_PROMOTE_INTERVAL_MS,
    )]
    pub promote_interval: Duration,

    /// Reaper: how often active jobs past their reservation, execution timeout or total timeout
    /// are reclaimed (ms).
    #[arg(
        long = "reap-interval-ms",
        id = "reap_interval_ms",
        env = "OJS_REAP_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_REAP_INTERVAL_MS,
    )]
    pub reap_interval: Duration,

    /// Expirer: how often waiting jobs past expires_at, enqueue_ttl or total_timeout are
    /// discarded (ms).
    #[arg(
        long = "expire-interval-ms",
        id = "expire_interval_ms",
        env = "OJS_EXPIRE_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_EXPIRE_INTERVAL_MS,
    )]
    pub expire_interval: Duration,

    /// Stale-worker detector: how often workers silent for the heartbeat timeout are declared
    /// stale and their jobs released (ms).
    #[arg(
        long = "stale-check-interval-ms",
        id = "stale_check_interval_ms",
        env = "OJS_STALE_CHECK_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_STALE_CHECK_INTERVAL_MS,
    )]
    pub stale_check_interval: Duration,

    /// Pruner: how often finished jobs, old events and long-stale workers are deleted (ms).
    #[arg(
        long = "prune-interval-ms",
        id = "prune_interval_ms",
        env = "OJS_PRUNE_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_PRUNE_INTERVAL_MS,
    )]
    pub prune_interval: Duration,

    /// Rows a maintenance service handles per statement (each runs several per pass when
    /// there is a backlog, yielding in between).
    #[arg(
        long = "maintenance-batch-size",
        id = "maintenance_batch_size",
        env = "OJS_MAINTENANCE_BATCH_SIZE",
        default_value_t = DEFAULT_MAINTENANCE_BATCH_SIZE,
    )]
    pub batch_size: u32,
}

impl Default for Maintenance {
    fn default() -> Self {
        Maintenance {
            enabled: true,
            leader_lease: millis_default(DEFAULT_LEADER_LEASE_MS),
            leader_renew_interval: millis_default(DEFAULT_LEADER_RENEW_INTERVAL_MS),
            leader_elect_interval: millis_default(DEFAULT_LEADER_ELECT_INTERVAL_MS),
            promote_interval: millis_default(DEFAULT_PROMOTE_INTERVAL_MS),
            reap_interval: millis_default(DEFAULT_REAP_INTERVAL_MS),
            expire_interval: millis_default(DEFAULT_EXPIRE_INTERVAL_MS),
            stale_check_interval: millis_default(DEFAULT_STALE_CHECK_INTERVAL_MS),
            prune_interval: millis_default(DEFAULT_PRUNE_INTERVAL_MS),
            batch_size: DEFAULT_MAINTENANCE_BATCH_SIZE,
        }
    }
}

impl Maintenance {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.leader_renew_interval.is_zero()
            || self.leader_elect_interval.is_zero()
            || self.leader_renew_interval * 3 > self.leader_lease
        {
            bail!(
                "need 0 < OJS_LEADER_RENEW_INTERVAL_MS <= OJS_LEADER_LEASE_MS / 3 and a positive OJS_LEADER_ELECT_INTERVAL_MS"
            );
        }
        if [
            self.promote_interval,
            self.reap_interval,
            self.expire_interval,
            self.stale_check_interval,
            self.prune_interval,
        ]
        .contains(&Duration::ZERO)
            || self.batch_size == 0
        {
            bail!("maintenance intervals and OJS_MAINTENANCE_BATCH_SIZE must be positive");
        }
        Ok(())
    }

    /// The elector's lease, renewal and election intervals.
    pub fn leader(&self) -> LeaderConfig {
        LeaderConfig {
            lease: self.leader_lease,
            renew_interval: self.leader_renew_interval,
            elect_interval: self.leader_elect_interval,
        }
    }

    /// The settings of every service the leader runs; a worker silent for `heartbeat_timeout`
    /// is stale.
    pub fn services(
        &self,
        retention: &Retention,
        heartbeat_timeout: Duration,
    ) -> MaintenanceConfig {
        let batch_size = i64::from(self.batch_size);
        MaintenanceConfig {
            promoter: PromoterConfig {
                interval: self.promote_interval,
                batch_size,
            },
            reaper: ReaperConfig {
                interval: self.reap_interval,
                batch_size,
            },
            expirer: ExpirerConfig {
                interval: self.expire_interval,
                batch_size,
            },
            stale_workers: StaleWorkersConfig {
                interval: self.stale_check_interval,
                heartbeat_timeout,
                batch_size,
            },
            pruner: PrunerConfig {
                interval: self.prune_interval,
                batch_size,
                ..retention.pruner()
            },
            starvation: StarvationConfig::default(),
            planner_stats: PlannerStatsConfig::default(),
        }
    }
}
