//! How each [`crate::Error`] becomes an [`ApiError`]: its status, OJS code, message and
//! `details`, in one exhaustive `match`; and how database failures are told apart (unavailable,
//! timed out, or a bug).

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::ApiError;
use crate::error::Error;
use crate::job::JobState;
use crate::job::envelope::Rejection;
use crate::queue_config::ConfigError;
use crate::wire::Violation;

fn validation_details(violations: &[Violation], index: Option<usize>) -> Value {
    let mut details = json!({
        "field": violations.first().map(|v| v.path.as_str()).unwrap_or("$"),
        "validation_errors": violations
            .iter()
            .map(|v| json!({"path": v.path, "message": v.message}))
            .collect::<Vec<_>>(),
    });
    if let Some(index) = index {
        details["index"] = json!(index);
    }
    details
}

/// `"jobs[2]: message"` inside a batch, the message alone otherwise; notes further problems.
fn validation_message(violations: &[Violation], index: Option<usize>) -> String {
    let first = violations
        .first()
        .map(|v| v.message.as_str())
        .unwrap_or("invalid request");
    let mut message = match index {
        Some(i) => format!("jobs[{i}]: {first}"),
        None => first.to_owned(),
    };
    if violations.len() > 1 {
        message.push_str(&format!(
            " (and {} more problem{}; see details.validation_errors)",
            violations.len() - 1,
            if violations.len() == 2 { "" } else { "s" }
        ));
    }
    message
}

fn prefixed(index: Option<usize>, message: &str) -> String {
    match index {
        Some(i) => format!("jobs[{i}]: {message}"),
        None => message.to_owned(),
    }
}

fn with_index(mut details: Value, index: Option<usize>) -> Value {
    if let Some(i) = index {
        details["index"] = json!(i);
    }
    details
}

fn state_names(states: &[JobState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        match e {
            Error::InvalidRequest { field, message } => ApiError::invalid_field(&field, message),
            Error::Rejected { index, rejection } => match rejection {
                Rejection::TooLarge { field, size, max } => {
                    let mut err = ApiError::too_large(Some(field), Some(size), max);
                    err.message = prefixed(index, &err.message);
                    err.details = err.details.take().map(|d| with_index(d, index));
                    err
                }
                Rejection::Invalid(violations) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    validation_message(&violations, index),
                )
                .with_details(validation_details(&violations, index)),
                Rejection::PriorityOutOfRange {
                    violation,
                    value,
                    max,
                } => {
                    let mut details = validation_details(std::slice::from_ref(&violation), index);
                    details["value"] = json!(value);
                    details["min"] = json!(0);
                    details["max_priority"] = json!(max);
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        prefixed(index, &violation.message),
                    )
                    .with_details(details)
                }
                Rejection::InvalidRetry(violations) => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "validation_error",
                    validation_message(&violations, index),
                )
                .with_details(validation_details(&violations, index)),
                Rejection::Unsupported { path, message } => {
                    ApiError::unsupported(prefixed(index, &message))
                        .with_details(with_index(json!({"field": path}), index))
                }
                Rejection::SchemaMismatch { schema, violations } => {
                    // The first problem, with its path, names the schema; the rest are counted.
                    let named: Vec<Violation> = violations
                        .iter()
                        .enumerate()
                        .map(|(i, v)| match i {
                            0 => Violation::new(
                                &v.path,
                                format!("{}: {} (schema {schema})", v.path, v.message),
                            ),
                            _ => v.clone(),
                        })
                        .collect();
                    let mut details = validation_details(&violations, index);
                    details["schema"] = json!(schema);
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "schema_validation",
                        validation_message(&named, index),
                    )
                    .with_details(details)
                }
            },
            Error::JobNotFound(id) => ApiError::not_found("job", &id.to_string()),
            Error::CheckpointNotFound(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("Job '{id}' has no checkpoint."),
            )
            .with_details(json!({"resource_type": "checkpoint", "resource_id": id.to_string()})),
            Error::StepRecorded(step) => ApiError::new(
                StatusCode::CONFLICT,
                "step_already_recorded",
                format!(
                    "Step '{}' of job '{}' was recorded by attempt {}; its first record stands (in details.step).",
                    step.name, step.job_id, step.attempt
                ),
            )
            .with_details(json!({
                "job_id": step.job_id.to_string(),
                "step": crate::http::shapes::StepView::of(&step),
            })),
            Error::StaleAttempt {
                job_id,
                attempt,
                current,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Job '{job_id}' is at attempt {current}; attempt {attempt} is no longer its current one."
                ),
            )
            .with_details(json!({
                "job_id": job_id.to_string(),
                "attempt": attempt,
                "current_attempt": current,
            })),
            Error::NotInDeadLetter(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("Job '{id}' is not in the dead-letter queue."),
            )
            .with_details(json!({"resource_type": "dead_letter", "resource_id": id.to_string()})),
            Error::WorkerNotFound(id) => ApiError::not_found("worker", &id),
            // The server's configuration, not the request: 503, and retrying will not help
            // until an operator sets the key.
            Error::SecretKeyMissing => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "backend_error",
                    "This server has no OJS_SECRET_KEY: webhook secrets are kept only sealed under it, so subscriptions cannot be created or given a new secret. Ask the operator to set it (`ojsd secret-key` makes one).",
                )
                .with_details(json!({"reason": "secret_key_missing", "setting": "OJS_SECRET_KEY"}));
                e.retryable = false;
                e
            }
            Error::InvalidConfig(ConfigError::Invalid(v)) => ApiError::invalid_field(&v.path, v.message),
            Error::InvalidConfig(ConfigError::Retry(violations)) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_error",
                validation_message(&violations, None),
            )
            .with_details(validation_details(&violations, None)),
            Error::TenantNotConfigured(tenant) => ApiError::not_found("tenant", &tenant),
            Error::TenantLimitExceeded(limit) => {
                let mut err = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TENANT_LIMIT_EXCEEDED",
                    format!(
                        "Tenant '{}' has exceeded {} ({}): it has {} and asked for {} more.",
                        limit.tenant_id,
                        limit.limit,
                        limit.maximum,
                        limit.current,
                        limit.requested
                    ),
                )
                .with_details(json!({"tenant_id": limit.tenant_id, "limit": limit.limit,
                                     "current": limit.current, "maximum": limit.maximum,
                                     "requested": limit.requested}));
                err.retryable = true;
                err.retry_after = Some(
                    u32::try_from((limit.retry_after_ms.max(1) + 999) / 1000).unwrap_or(u32::MAX),
                );
                err
            }
            Error::QueueFull {
                queue,
                depth,
                bound,
                bound_bytes,
                policy,
                index,
            } => {
                let what = match bound_bytes {
                    Some(bytes) => format!("its size bound of {bytes} bytes"),
                    None => format!("its bound of {bound} jobs"),
                };
                let mut err = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "QUEUE_FULL",
                    prefixed(
                        index,
                        &format!(
                            "Queue '{queue}' is full: it holds {depth} unfinished jobs and the job would take it past {what}."
                        ),
                    ),
                )
                .with_details(with_index(
                    json!({"queue": queue, "depth": depth, "bound": bound,
                           "max_size_bytes": bound_bytes, "strategy": policy.as_str()}),
                    index,
                ));
                err.retryable = true;
                err.retry_after = Some(1);
                err.queue_depth = Some((depth, bound));
                err
            }
            Error::JobTypeNotAllowed {
                queue,
                job_type,
                index,
            } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "JOB_TYPE_NOT_ALLOWED",
                prefixed(
                    index,
                    &format!("Job type '{job_type}' is not allowed in queue '{queue}' (see the queue's allowed_job_types)."),
                ),
            )
            .with_details(with_index(
                json!({"field": "$.type", "queue": queue, "job_type": job_type}),
                index,
            )),
            Error::ProducerNotAllowed {
                queue,
                producer,
                index,
            } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                prefixed(
                    index,
                    &match &producer {
                        Some(p) => format!("Producer '{p}' (OJS-Producer header) may not enqueue to queue '{queue}'."),
                        None => format!("Queue '{queue}' only accepts jobs from listed producers: name yours in the OJS-Producer header."),
                    },
                ),
            )
            .with_details(with_index(
                json!({"queue": queue, "producer": producer, "reason": "producer_not_allowed"}),
                index,
            )),
            Error::QueueNotFound(name) => ApiError::not_found("queue", &name),
            Error::PoolNotFound(name) => ApiError::not_found("pool", &name),
            Error::CronNotFound(name) => ApiError::not_found("cron entry", &name),
            Error::CronNameTaken(name) => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("The cron entry name '{name}' is taken; choose another."),
            )
            .with_details(json!({"name": name})),
            Error::WebhookNotFound(id) => ApiError::not_found("webhook subscription", &id.to_string()),
            Error::SchemaNotFound { job_type, version } => {
                let id = match &version {
                    Some(v) => format!("{job_type}@{v}"),
                    None => job_type.clone(),
                };
                let mut e = ApiError::not_found("schema", &id);
                e.message = match version {
                    Some(v) => format!("Job type '{job_type}' has no schema of version {v}."),
                    None => format!("Job type '{job_type}' has no registered schema."),
                };
                e
            }
            Error::SchemaExists { job_type, version } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Job type '{job_type}' already has a schema of version {version}; a registered version never changes: register a new version, or delete this one first."
                ),
            )
            .with_details(json!({"job_type": job_type, "version": version})),
            Error::UnknownQueue(name) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!(
                    "Queue '{name}' does not exist, and this server only enqueues to existing queues: create it first (POST /ojs/v1/queues)."
                ),
            )
            .with_details(json!({"field": "$.queue", "queue": name, "reason": "unknown_queue"})),
            Error::QueueExists(name) => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Queue '{name}' already exists."),
            )
            .with_details(json!({"queue": name})),
            Error::QueueNotEmpty {
                queue,
                non_terminal,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Queue '{queue}' still has {non_terminal} unfinished jobs; delete it with strategy discard or move, or wait for them."
                ),
            )
            .with_details(json!({"queue": queue, "non_terminal_count": non_terminal})),
            Error::QueueDraining { queue, operation } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Queue '{queue}' is draining (being deleted); cannot {operation} it."),
            )
            .with_details(json!({"queue": queue, "current_state": "draining"})),
            Error::WorkerIdTaken(worker_id) => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Worker id '{worker_id}' is taken: a request acting as a tenant uses only the worker ids it introduced; choose another."
                ),
            )
            .with_details(json!({"worker_id": worker_id})),
            Error::WorkerNotStale { worker_id, state } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Worker '{worker_id}' is {state}; only stale workers can be deleted (a live worker deregisters with DELETE /ojs/v1/workers/{{id}})."
                ),
            )
            .with_details(json!({"worker_id": worker_id, "current_state": state})),
            Error::InvalidTransition {
                job_id,
                operation,
                current,
                allowed,
            } => {
                let expected = match allowed {
                    [one] => format!("expected '{one}'"),
                    many => format!("expected one of {}", state_names(many).join(", ")),
                };
                let mut details = json!({
                    "job_id": job_id.to_string(),
                    "current_state": current,
                    "allowed_states": state_names(allowed),
                });
                if let [one] = allowed {
                    details["expected_state"] = json!(one);
                }
                ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("Cannot {operation} job in state '{current}'; {expected}."),
                )
                .with_details(details)
            }
            Error::NotOwner { job_id, owner } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Job '{job_id}' is reserved by worker '{owner}', not by the caller."),
            )
            .with_details(json!({
                "job_id": job_id.to_string(),
                "current_state": JobState::Active,
                "worker_id": owner,
            })),
            Error::ReservationLost {
                job_id,
                current,
                owner,
            } => {
                let why = match (&owner, current) {
                    (Some(owner), JobState::Active) => {
                        format!("it is reserved by worker '{owner}'")
                    }
                    _ => format!("it is in state '{current}'"),
                };
                let mut details = json!({"job_id": job_id.to_string(), "current_state": current});
                if let Some(owner) = owner {
                    details["worker_id"] = json!(owner);
                }
                ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("The worker no longer holds job '{job_id}': {why}."),
                )
                .with_details(details)
            }
            Error::DuplicateId { job_id, index } => ApiError::new(
                StatusCode::CONFLICT,
                "duplicate",
                prefixed(index, &format!("A job with id '{job_id}' already exists.")),
            )
            .with_details(with_index(
                json!({"job_id": job_id.to_string(), "existing_job_id": job_id.to_string()}),
                index,
            )),
            Error::DuplicateUnique {
                existing,
                existing_state,
                unique_key,
                index,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "duplicate",
                prefixed(
                    index,
                    &format!(
                        "A duplicate job exists ('{existing}', state '{existing_state}') under the job's unique policy."
                    ),
                ),
            )
            .with_details(with_index(
                json!({
                    "existing_job_id": existing.to_string(),
                    "existing_job_state": existing_state,
                    "unique_key": unique_key,
                }),
                index,
            )),
            Error::Unsupported(message) => ApiError::unsupported(message),
            Error::InvalidWorkflow(violations) => {
                let mut details = validation_details(&violations, None);
                details["reason"] = json!("invalid_workflow");
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    validation_message(&violations, None),
                )
                .with_details(details)
            }
            Error::HeldByWorkflow { job_id, workflow } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Job '{job_id}' waits for its workflow '{workflow}', which releases it when its turn comes."),
            )
            .with_details(json!({"job_id": job_id.to_string(), "workflow_id": workflow.to_string()})),
            Error::WorkflowNotFound(id) => ApiError::not_found("workflow", &id.to_string()),
            Error::RateKeyNotFound(key) => ApiError::not_found("rate-limit key", &key),
            Error::WorkflowEnded { id, state } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Workflow '{id}' is already {state}."),
            )
            .with_details(json!({"workflow_id": id.to_string(), "current_state": state})),
            Error::Database(e) => database_error(&e),
        }
    }
}

/// 503 when the database cannot be reached (or the pool is exhausted), 500 otherwise.
fn database_error(e: &sqlx::Error) -> ApiError {
    let mut err = database_error_kind(e);
    err.connection_lost = crate::db::is_connection_error(e);
    err
}

fn database_error_kind(e: &sqlx::Error) -> ApiError {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => ApiError::unavailable(
            "The database is unavailable; retry shortly.",
            Some(e.to_string()),
        ),
        sqlx::Error::Database(db) if db.code().as_deref().is_some_and(is_unavailable_code) => {
            ApiError::unavailable(
                "The database is unavailable; retry shortly.",
                Some(e.to_string()),
            )
        }
        _ => {
            let mut err = ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "backend_error",
                "The database failed to handle the request.",
            );
            err.retryable = true;
            err.cause = Some(e.to_string());
            err
        }
    }
}

/// SQLSTATEs meaning "the database cannot serve us right now" rather than "this statement is
/// wrong": those of a lost or demoted server ([`crate::db::is_connection_code`]: 08, 57P01–57P03,
/// 25006), authorization (28), missing database (3D000), insufficient resources (53), a
/// database closed to connections (55000, raised by `allow_connections = false`), and a
/// statement or idle transaction cut short by the session's timeouts (57014, 25P03).
fn is_unavailable_code(code: &str) -> bool {
    crate::db::is_connection_code(code)
        || code.starts_with("28")
        || code.starts_with("53")
        || matches!(code, "3D000" | "55000" | "57014" | "25P03")
}
