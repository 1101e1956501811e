//! `jobs`: what an enqueue may carry (priorities, sizes, batch limits, job types) and the
//! timeouts a job gets when it names none.

use std::time::Duration;

use anyhow::bail;

use super::values::{seconds, seconds_default, span};
use crate::job::envelope::Limits;
use crate::job::schema::ValidationMode;
use crate::wire::duration::millis;

pub const DEFAULT_MAX_PRIORITY: i32 = 255;
pub const DEFAULT_TIMEOUT_SECS: &str = "1800";
pub const DEFAULT_VISIBILITY_TIMEOUT_SECS: &str = "1800";
pub const DEFAULT_MAX_ENVELOPE_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_BATCH_SIZE: usize = 10_000;
pub const DEFAULT_MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone, clap::Args)]
pub struct Jobs {
    /// Largest accepted job priority (lowest urgency; 0 is the most urgent). At least 255.
    #[arg(long, env = "OJS_MAX_PRIORITY", default_value_t = DEFAULT_MAX_PRIORITY)]
    pub max_priority: i32,

    /// Priority aging (off when unset): a waiting job gains one step of urgency per interval,
    /// for ordering only (the stored priority never changes). Applies to jobs enqueued while
    /// it is set. ISO 8601 (`PT60S`) or short form (`60s`, `500ms`).
    #[arg(long, env = "OJS_PRIORITY_AGING_INTERVAL", value_parser = span)]
    pub priority_aging_interval: Option<Duration>,

    /// Refuse enqueues to queues that do not exist (400 `unknown_queue`) instead of creating
    /// them; queues are then created with `POST /ojs/v1/queues` (or pause/resume).
    #[arg(long, env = "OJS_STRICT_QUEUES", value_parser = clap::builder::BoolishValueParser::new())]
    pub strict_queues: bool,

    /// What a PUSH whose `args` fail its type's registered schema gets, for schemas registered
    /// without a `validation` of their own: `strict` (400 `schema_validation`), `warn`
    /// (accepted, with `warnings` in the answer) or `off` (not checked). Job types without a
    /// registered schema are never checked.
    #[arg(
        long,
        env = "OJS_SCHEMA_VALIDATION",
        value_parser = parse_validation_mode,
        default_value = "strict",
    )]
    pub schema_validation: crate::job::schema::ValidationMode,

    /// Execution timeout of jobs that do not set one (seconds).
    #[arg(
        long = "default-timeout-secs",
        id = "default_timeout_secs",
        env = "OJS_DEFAULT_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_TIMEOUT_SECS,
    )]
    pub default_timeout: Duration,

    /// Reservation length of a claimed job when neither the fetch nor the job sets one
    /// (seconds). A worker extends it by heartbeating.
    #[arg(
        long = "default-visibility-timeout-secs",
        id = "default_visibility_timeout_secs",
        env = "OJS_DEFAULT_VISIBILITY_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_VISIBILITY_TIMEOUT_SECS,
    )]
    pub default_visibility_timeout: Duration,

    /// Largest job envelope accepted, compact JSON (bytes). At least 1 MiB.
    #[arg(long, env = "OJS_MAX_ENVELOPE_BYTES", default_value_t = DEFAULT_MAX_ENVELOPE_BYTES)]
    pub max_envelope_bytes: usize,

    /// Most jobs in one batch enqueue. At least 1000.
    #[arg(long, env = "OJS_MAX_BATCH_SIZE", default_value_t = DEFAULT_MAX_BATCH_SIZE)]
    pub max_batch_size: usize,

    /// Largest batch enqueue body (bytes).
    #[arg(long, env = "OJS_MAX_BATCH_BYTES", default_value_t = DEFAULT_MAX_BATCH_BYTES)]
    pub max_batch_bytes: usize,

    /// Accept job types whose segments contain hyphens after the first letter
    /// (`retry.exponential-backoff`). The OJS core specification allows only
    /// `[a-z][a-z0-9_]*` per segment; the conformance suite's own jobs use hyphens. Defaults to
    /// on when OJS_TEST_HOOKS is on, off otherwise.
    #[arg(
        long,
        env = "OJS_ALLOW_HYPHENATED_TYPES",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub allow_hyphenated_types: Option<bool>,
}

impl Default for Jobs {
    fn default() -> Self {
        Jobs {
            max_priority: DEFAULT_MAX_PRIORITY,
            priority_aging_interval: None,
            strict_queues: false,
            schema_validation: crate::job::schema::ValidationMode::Strict,
            default_timeout: seconds_default(DEFAULT_TIMEOUT_SECS),
            default_visibility_timeout: seconds_default(DEFAULT_VISIBILITY_TIMEOUT_SECS),
            max_envelope_bytes: DEFAULT_MAX_ENVELOPE_BYTES,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            allow_hyphenated_types: None,
        }
    }
}

impl Jobs {
    /// Checks the settings against ojsd's floors: a maximum priority of at least 255 (as the
    /// [OJS priority levels] require), envelopes of at least 1 MiB and batches of at least
    /// 1,000 jobs.
    ///
    /// [OJS priority levels]: https://github.com/openjobspec/spec/blob/main/spec/ojs-priority.md#51-priority-levels
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.max_priority < DEFAULT_MAX_PRIORITY {
            bail!("OJS_MAX_PRIORITY must be at least {DEFAULT_MAX_PRIORITY}");
        }
        if self
            .priority_aging_interval
            .is_some_and(|d| d < Duration::from_millis(1))
        {
            bail!("OJS_PRIORITY_AGING_INTERVAL must be at least 1ms");
        }
        if self.max_envelope_bytes < DEFAULT_MAX_ENVELOPE_BYTES {
            bail!("OJS_MAX_ENVELOPE_BYTES must be at least {DEFAULT_MAX_ENVELOPE_BYTES} (1 MiB)");
        }
        if self.max_batch_size < 1_000 {
            bail!("OJS_MAX_BATCH_SIZE must be at least 1000");
        }
        if self.max_batch_bytes < self.max_envelope_bytes {
            bail!("OJS_MAX_BATCH_BYTES must be at least OJS_MAX_ENVELOPE_BYTES");
        }
        if self.default_timeout.is_zero() || self.default_visibility_timeout.is_zero() {
            bail!("default timeouts must be positive");
        }
        Ok(())
    }

    /// Envelope validation limits and defaults; hyphenated job types when `hyphenated_types`.
    pub fn limits(&self, hyphenated_types: bool) -> Limits {
        Limits {
            max_priority: self.max_priority,
            default_timeout_ms: millis(self.default_timeout),
            hyphenated_types,
            priority_aging_ms: self.priority_aging_interval.map(millis),
        }
    }
}

fn parse_validation_mode(s: &str) -> Result<ValidationMode, String> {
    ValidationMode::from_name(s)
        .ok_or_else(|| format!("'{s}' is not a validation mode: strict, warn or off"))
}
