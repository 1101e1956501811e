//! The schemas of bodies that hand-written code reads or writes, so no derive can describe
//! them: a job as `job::wire::WireJob` writes it (client JSON kept verbatim, members in a fixed
//! order), and the job envelope with its retry and unique policies as `job::envelope` reads
//! them. The integration suite checks every exchange against them.

use serde_json::Value;
use utoipa::ToSchema;

use super::values;

/// A job in its OJS JSON form, as every endpoint returns it. Attributes the client sent that
/// the server does not interpret come back unchanged beside these.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Job {
    /// Always `1.0.0-rc.1`.
    specversion: String,
    /// UUIDv7.
    id: String,
    r#type: String,
    queue: String,
    #[schema(value_type = Vec<Value>)]
    args: Vec<Value>,
    #[schema(value_type = Object)]
    meta: Value,
    /// 0 is the most urgent.
    priority: i32,
    /// Seconds (rounded up from `timeout_ms`).
    timeout: i64,
    timeout_ms: i64,
    retry: RetryPolicy,
    unique: Option<UniquePolicy>,
    tags: Option<Vec<String>>,
    schema: Option<String>,
    /// RFC 3339, as the client sent it.
    scheduled_at: Option<String>,
    expires_at: Option<String>,
    visibility_timeout_ms: Option<i64>,
    enqueue_ttl: Option<i64>,
    total_timeout: Option<i64>,
    #[schema(value_type = crate::job::JobState)]
    state: String,
    /// The state before this request changed it (cancel, activate).
    #[schema(value_type = Option<crate::job::JobState>)]
    previous_state: Option<String>,
    attempt: i32,
    max_attempts: i32,
    created_at: String,
    enqueued_at: Option<String>,
    activated_at: Option<String>,
    re_enqueued_at: Option<String>,
    original_queue: Option<String>,
    started_at: Option<String>,
    worker_id: Option<String>,
    /// While active: when the claim lapses unless extended.
    visible_until: Option<String>,
    /// While retryable: when the next attempt becomes available.
    next_retry_at: Option<String>,
    next_attempt_at: Option<String>,
    retry_delay_ms: Option<i64>,
    completed_at: Option<String>,
    cancelled_at: Option<String>,
    discarded_at: Option<String>,
    dead_lettered_at: Option<String>,
    /// What the worker's ACK reported.
    result: Option<Value>,
    /// The last attempt's error.
    error: Option<JobError>,
    /// Every attempt's error, oldest first; `[]` before any failure.
    errors: Vec<JobError>,
    unique_key: Option<String>,
    /// True when a unique policy returned an existing job instead of creating one.
    deduplicated: Option<bool>,
    /// Admin job detail only: the `retry` policy again.
    retry_policy: Option<RetryPolicy>,
    /// Admin job detail only: the lifecycle timestamps the job has.
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// A failed attempt's error, as the worker reported it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct JobError {
    code: Option<String>,
    message: Option<String>,
    retryable: Option<bool>,
    #[schema(value_type = Option<Object>)]
    details: Option<Value>,
    attempt: Option<i32>,
    timestamp: Option<String>,
}

/// How a failed job is retried. Durations are ISO 8601 (`PT1S`); `*_ms` spellings are accepted
/// on enqueue.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RetryPolicy {
    max_attempts: Option<i32>,
    initial_interval: Option<String>,
    /// Accepted on enqueue for `initial_interval`.
    initial_interval_ms: Option<i64>,
    backoff_coefficient: Option<f64>,
    max_interval: Option<String>,
    /// Accepted on enqueue for `max_interval`.
    max_interval_ms: Option<i64>,
    jitter: Option<bool>,
    non_retryable_errors: Option<Vec<String>>,
    on_exhaustion: Option<String>,
}

/// At most one job per key: how the key is made and what a duplicate does.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct UniquePolicy {
    /// Which of `type`, `queue`, `args` and `meta` make the key.
    keys: Option<Vec<String>>,
    /// Args field names (or, when only dimension names, the same as `keys`).
    key: Option<Vec<String>>,
    period: Option<String>,
    /// Accepted on enqueue for `period`.
    period_ms: Option<i64>,
    states: Option<Vec<String>>,
    on_conflict: Option<String>,
}

/// A number of seconds, or an ISO 8601 duration (`PT30S`); `*_ms` spellings take milliseconds.
#[derive(ToSchema)]
#[schema(as = Duration)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum DurationSchema {
    Number(i64),
    Text(String),
}

/// A job to enqueue (the OJS job envelope). The options may also be given inside `options`;
/// attributes the server does not interpret are kept and returned with the job.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Enqueue {
    /// Dot-separated lowercase segments, e.g. `email.send`.
    r#type: String,
    /// The job's arguments.
    #[schema(value_type = Vec<Value>)]
    args: Vec<Value>,
    /// A client-chosen UUIDv7; generated when left out.
    id: Option<String>,
    /// `1.0.0-rc.1` or `1.0`.
    specversion: Option<String>,
    #[schema(value_type = Option<Object>)]
    meta: Option<Value>,
    /// The same options, nested.
    options: Option<EnqueueOptions>,
    /// `POST /ojs/v1/jobs` only: `{"chain": [<job>, ...]}` makes this job the first step of a
    /// chain workflow whose later steps are the listed jobs (each taking this job's queue and
    /// priority unless it names its own); the response then also has `workflow`.
    #[schema(value_type = Option<Object>)]
    workflow: Option<Value>,
    #[serde(flatten)]
    top: EnqueueOptions,
}

/// Options of an enqueued job.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct EnqueueOptions {
    /// Default `default`.
    queue: Option<String>,
    /// Default 2; negative values are refused.
    #[schema(value_type = Option<values::Priority>)]
    priority: Option<serde_json::Value>,
    timeout: Option<DurationSchema>,
    timeout_ms: Option<i64>,
    visibility_timeout: Option<DurationSchema>,
    visibility_timeout_ms: Option<i64>,
    /// RFC 3339: run no earlier than this.
    scheduled_at: Option<String>,
    delay_until: Option<String>,
    /// RFC 3339: discard instead of running after this.
    expires_at: Option<String>,
    enqueue_ttl: Option<DurationSchema>,
    total_timeout: Option<DurationSchema>,
    /// Stage the job until `POST /ojs/v1/jobs/{id}/activate`.
    pending: Option<bool>,
    tags: Option<Vec<String>>,
    schema: Option<String>,
    retry: Option<RetryPolicy>,
    retry_policy: Option<RetryPolicy>,
    unique: Option<UniquePolicy>,
    max_attempts: Option<i32>,
}
