//! [`Settings`] of the broker operations, as the configuration hands them over.

use std::time::Duration;

use crate::job::envelope::Limits;
use crate::scheduling::{Strategy, Weights};

/// Settings of the broker operations.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Envelope validation limits and defaults.
    pub limits: Limits,
    /// Reservation length when neither the fetch nor the job names one, in milliseconds.
    pub default_visibility_timeout_ms: i64,
    /// How often a long-polling fetch polls even without a notification.
    pub fetch_poll_interval: Duration,
    /// A worker without a heartbeat for this long is stale.
    pub heartbeat_timeout: Duration,
    /// Whether the test-only hooks are on (heartbeat directives from `meta.test_directive`).
    pub test_hooks: bool,
    /// Queue consumption strategy imposed on every FETCH (`None`: the FETCH chooses).
    pub fetch_strategy: Option<Strategy>,
    /// Queue weights imposed on every weighted FETCH (`None`: the FETCH's own).
    pub queue_weights: Option<Weights>,
    /// Enqueues to a queue that does not exist are refused instead of creating it.
    pub strict_queues: bool,
    /// Whether completed jobs are kept unless their queue's configuration says otherwise
    /// (false when `OJS_RETENTION_COMPLETED` is zero: they are deleted on ACK).
    pub keep_completed: bool,
    /// What a job failing a schema registered without a mode of its own gets.
    pub schema_validation: crate::job::schema::ValidationMode,
    /// Webhook deliveries.
    pub webhooks: super::webhook_sender::WebhookSettings,
}
