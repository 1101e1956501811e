//! `webhooks`: how deliveries are made (which addresses they may reach, how long a receiver
//! has, how many subscriptions at once).

use std::sync::Arc;
use std::time::Duration;

use super::values::millis_default;
use crate::broker::WebhookSettings;
use crate::webhook::secret::Keyring;

pub const DEFAULT_WEBHOOK_TIMEOUT_MS: &str = "10000";

#[derive(Debug, Clone, clap::Args)]
pub struct Webhooks {
    /// Let webhook deliveries reach private, loopback and link-local addresses (by default
    /// they are refused, checked on every resolved address, so a webhook cannot reach into the
    /// network ojsd runs in).
    #[arg(
        long = "webhook-allow-private",
        id = "webhook_allow_private",
        env = "OJS_WEBHOOK_ALLOW_PRIVATE",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub allow_private: bool,

    /// How long a webhook receiver has to answer one delivery, in milliseconds.
    #[arg(
        long = "webhook-timeout-ms",
        id = "webhook_timeout_ms",
        env = "OJS_WEBHOOK_TIMEOUT_MS",
        value_parser = webhook_timeout,
        default_value = DEFAULT_WEBHOOK_TIMEOUT_MS,
    )]
    pub timeout: Duration,

    /// Webhook subscriptions delivered to at once (by the leader).
    #[arg(
        long = "webhook-concurrency",
        id = "webhook_concurrency",
        env = "OJS_WEBHOOK_CONCURRENCY",
        value_parser = clap::value_parser!(u64).range(1..=256),
        default_value_t = 8,
    )]
    pub concurrency: u64,
}

impl Default for Webhooks {
    fn default() -> Self {
        Webhooks {
            allow_private: false,
            timeout: millis_default(DEFAULT_WEBHOOK_TIMEOUT_MS),
            concurrency: 8,
        }
    }
}

impl Webhooks {
    /// The delivery settings, with the keys subscription secrets are sealed with.
    pub fn delivery(&self, keys: Option<Arc<Keyring>>) -> WebhookSettings {
        WebhookSettings {
            allow_private: self.allow_private,
            timeout: self.timeout,
            concurrency: usize::try_from(self.concurrency).unwrap_or(8),
            keys,
        }
    }
}

/// A delivery timeout: 100 to 120,000 milliseconds.
fn webhook_timeout(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(ms) if (100..=120_000).contains(&ms) => Ok(Duration::from_millis(ms)),
        Ok(ms) => Err(format!("{ms} is not in 100..=120000")),
        Err(e) => Err(e.to_string()),
    }
}
