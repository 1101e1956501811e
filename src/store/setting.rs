//! `ojs_setting`: the enqueue settings of the server process, written where SQL can read them.
//!
//! `ojs_enqueue()` (migration V21) validates and defaults jobs exactly as PUSH does, so the
//! settings that shape a PUSH and live in the process (environment variables) must reach it:
//! every server writes them as it starts. Replicas are expected to share one configuration; the
//! last to start wins.

use crate::job::envelope::Limits;

/// What a PUSH depends on besides the request and the queue configuration.
#[derive(Debug, Clone, Copy)]
pub struct EnqueueSettings {
    pub limits: Limits,
    pub strict_queues: bool,
    pub max_envelope_bytes: usize,
    pub max_batch_jobs: usize,
}

/// Writes the settings for `ojs_enqueue()`.
pub async fn publish(
    db: impl sqlx::PgExecutor<'_>,
    s: &EnqueueSettings,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        update ojs_setting
           set strict_queues = $1, hyphenated_types = $2, default_timeout_ms = $3,
               max_priority = $4, priority_aging_ms = $5, max_envelope_bytes = $6,
               max_batch_jobs = $7, updated_at = now()
        "#,
        s.strict_queues,
        s.limits.hyphenated_types,
        s.limits.default_timeout_ms,
        s.limits.max_priority,
        s.limits.priority_aging_ms,
        i32::try_from(s.max_envelope_bytes).unwrap_or(i32::MAX),
        i32::try_from(s.max_batch_jobs).unwrap_or(i32::MAX),
    )
    .execute(db)
    .await?;
    Ok(())
}
