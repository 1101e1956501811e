//! `dispatch`: how FETCH spreads its slots over queues, how often a long poll looks without a
//! notification, and the heartbeat cadence and timeout of workers.

use std::time::Duration;

use anyhow::bail;

use super::values::{millis, millis_default, seconds, seconds_default};

pub const DEFAULT_FETCH_POLL_INTERVAL_MS: &str = "500";
pub const DEFAULT_HEARTBEAT_INTERVAL_SECS: &str = "15";

/// Most jobs one FETCH may claim.
pub const MAX_FETCH_COUNT: usize = 1_000;
/// Longest long-poll a FETCH may ask for.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, clap::Args)]
pub struct Dispatch {
    /// Queue consumption strategy imposed on every FETCH (`strict`, `weighted`,
    /// `round-robin`); unset: each FETCH chooses (default `strict`). Server configuration wins
    /// over what a worker asks for.
    #[arg(long, env = "OJS_FETCH_STRATEGY", value_enum)]
    pub fetch_strategy: Option<crate::scheduling::Strategy>,

    /// Queue weights for the `weighted` strategy, e.g. `critical=5,default=2,low=1`. When set
    /// they replace the weights a FETCH sends; queues not named weigh 1, weight 0 = never.
    #[arg(long, env = "OJS_QUEUE_WEIGHTS", value_parser = crate::scheduling::parse_weights_setting)]
    pub queue_weights: Option<crate::scheduling::Weights>,

    /// How often a long-polling FETCH (wait_ms) checks for work without a notification (ms).
    #[arg(
        long = "fetch-poll-interval-ms",
        id = "fetch_poll_interval_ms",
        env = "OJS_FETCH_POLL_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_FETCH_POLL_INTERVAL_MS,
    )]
    pub fetch_poll_interval: Duration,

    /// Heartbeat cadence announced to workers (seconds).
    #[arg(
        long = "heartbeat-interval-secs",
        id = "heartbeat_interval_secs",
        env = "OJS_HEARTBEAT_INTERVAL_SECS",
        value_parser = seconds,
        default_value = DEFAULT_HEARTBEAT_INTERVAL_SECS,
    )]
    pub heartbeat_interval: Duration,

    /// A worker without a heartbeat for this long is stale and loses its jobs (seconds).
    /// Default: three heartbeat intervals.
    #[arg(
        long = "heartbeat-timeout-secs",
        id = "heartbeat_timeout_secs",
        env = "OJS_HEARTBEAT_TIMEOUT_SECS",
        value_parser = seconds,
    )]
    pub heartbeat_timeout: Option<Duration>,
}

impl Default for Dispatch {
    fn default() -> Self {
        Dispatch {
            fetch_strategy: None,
            queue_weights: None,
            fetch_poll_interval: millis_default(DEFAULT_FETCH_POLL_INTERVAL_MS),
            heartbeat_interval: seconds_default(DEFAULT_HEARTBEAT_INTERVAL_SECS),
            heartbeat_timeout: None,
        }
    }
}

impl Dispatch {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.fetch_poll_interval.is_zero() || self.heartbeat_interval.is_zero() {
            bail!("OJS_FETCH_POLL_INTERVAL_MS and OJS_HEARTBEAT_INTERVAL_SECS must be positive");
        }
        if self.heartbeat_timeout() <= self.heartbeat_interval {
            bail!("OJS_HEARTBEAT_TIMEOUT_SECS must exceed OJS_HEARTBEAT_INTERVAL_SECS");
        }
        Ok(())
    }

    /// How long a worker may stay silent before it is declared stale: the setting, else three
    /// heartbeat intervals.
    pub fn heartbeat_timeout(&self) -> Duration {
        self.heartbeat_timeout
            .unwrap_or(self.heartbeat_interval.saturating_mul(3))
    }
}
