//! `/ojs/v1/dead-letter`: the dead-letter queue ([OJS dead-letter HTTP binding]).
//!
//! [OJS dead-letter HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-dead-letter.md#10-http-binding

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::json;

use super::error::ApiError;
use super::extract::{Fields, JobIdPath, OptionalJsonBody};
use super::query::{DATA_PLANE, Page, Pagination, QueryParams};
use super::{AppState, ok};
use crate::broker::{DeadLetterFilter, RetryOverride};
use crate::duration;
use crate::error::Error;
use crate::job::envelope::{self, Rejection, Violation};
use crate::job::wire::WireJob;
use crate::json::{self, Object};
use crate::timestamp;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/dead-letter", get(list).delete(purge))
        .route("/ojs/v1/dead-letter/stats", get(stats))
        .route("/ojs/v1/dead-letter/retry", post(retry_all))
        .route("/ojs/v1/dead-letter/{id}", get(show).delete(remove))
        .route("/ojs/v1/dead-letter/{id}/retry", post(retry_one))
}

/// Splits a `type` filter into exact (`email.send`) or prefix (`email.*`, `email*`).
fn type_filter(value: Option<String>, filter: &mut DeadLetterFilter) {
    match value {
        Some(t) if t.ends_with('*') => {
            filter.type_prefix = Some(t.trim_end_matches('*').to_owned())
        }
        other => filter.job_type = other,
    }
}

pub(super) fn filter_from_query(q: &QueryParams) -> Result<DeadLetterFilter, ApiError> {
    let mut filter = DeadLetterFilter {
        queue: q.get("queue").map(str::to_owned),
        error_type: q.get("error_type").map(str::to_owned),
        since: q.timestamp("since")?,
        until: q.timestamp("until")?,
        ..DeadLetterFilter::default()
    };
    type_filter(q.get("type").map(str::to_owned), &mut filter);
    Ok(filter)
}

/// A timestamp field of a request body.
pub(super) fn body_timestamp(
    fields: &Fields<'_>,
    key: &str,
    path: &str,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    match fields.string(key)? {
        None => Ok(None),
        Some(text) => timestamp::parse_client(&text)
            .ok()
            .and_then(|t| t.absolute())
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid_field(
                    &format!("{path}.{key}"),
                    format!("'{key}' must be an RFC 3339 timestamp with a zone"),
                )
            }),
    }
}

/// `GET /ojs/v1/dead-letter`: newest first, with `queue`, `type`, `error_type`, `since`, `until`.
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, DATA_PLANE)?;
    let filter = filter_from_query(&query)?;
    let (jobs, total) = state
        .broker()
        .dead_letters(&filter, page.limit, page.offset)
        .await?;

    #[derive(Serialize)]
    struct ListBody<'a> {
        jobs: Vec<WireJob<'a>>,
        pagination: Pagination,
    }
    Ok(ok(ListBody {
        jobs: jobs.iter().map(|j| j.wire()).collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `GET /ojs/v1/dead-letter/stats`.
pub(super) async fn stats(State(state): State<AppState>) -> Result<Response, ApiError> {
    let stats = state.broker().dead_letter_stats().await?;
    let by_queue: serde_json::Map<String, serde_json::Value> = stats
        .by_queue
        .into_iter()
        .map(|(q, n)| (q, json!(n)))
        .collect();
    let by_error_type: serde_json::Map<String, serde_json::Value> = stats
        .by_error_type
        .into_iter()
        .map(|(t, n)| (t, json!(n)))
        .collect();
    let retention = state.settings().dead_letter_retention;
    Ok(ok(json!({
        "total": stats.total,
        "by_queue": by_queue,
        "by_error_type": by_error_type,
        "oldest_at": stats.oldest_at.map(timestamp::format),
        "newest_at": stats.newest_at.map(timestamp::format),
        "retention": {
            "max_age": duration::format_iso(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX)),
            "max_count": null,
        },
    }))
    .into_response())
}

#[derive(Serialize)]
struct JobBody<'a> {
    job: WireJob<'a>,
}

/// `GET /ojs/v1/dead-letter/{id}`.
async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    let job = state.broker().dead_letter(id).await?;
    Ok(ok(JobBody { job: job.wire() }).into_response())
}

/// Validates `override` like an enqueue envelope and keeps the fields it sets.
pub(super) fn parse_override(
    state: &AppState,
    raw: &serde_json::value::RawValue,
) -> Result<RetryOverride, ApiError> {
    let obj = Object::from_raw(raw)
        .map_err(|_| ApiError::invalid_field("$.override", "'override' must be an object"))?;
    const FIELDS: [&str; 5] = ["queue", "meta", "retry", "priority", "args"];
    if let Some((key, _)) = obj.iter().find(|(k, _)| !FIELDS.contains(k)) {
        return Err(ApiError::invalid_field(
            &format!("$.override.{key}"),
            format!("'override' may set queue, meta, retry, priority and args, not {key:?}"),
        ));
    }
    // A placeholder type keeps the envelope valid; only the override's own fields are used.
    let mut members: Vec<(&str, &serde_json::value::RawValue)> = obj.iter().collect();
    let placeholder_type = json::raw("\"dead_letter.retry\"".to_owned());
    let empty_args = json::raw("[]".to_owned());
    members.push(("type", &placeholder_type));
    if obj.get("args").is_none() {
        members.push(("args", &empty_args));
    }
    let text = json::object_text(members);
    let envelope_obj = Object::parse(&text).map_err(|e| ApiError::internal(e.to_string()))?;
    let job =
        envelope::parse(&envelope_obj, &state.broker().settings().limits).map_err(|rejection| {
            ApiError::from(Error::Rejected {
                index: None,
                rejection: under_override(rejection),
            })
        })?;
    let has = |key: &str| obj.get(key).is_some();
    Ok(RetryOverride {
        queue: has("queue").then(|| job.queue.clone()),
        meta: has("meta").then(|| job.meta.clone()),
        retry: has("retry").then(|| (job.retry.to_json(), job.retry.max_attempts)),
        priority: has("priority").then_some(job.priority),
        args: has("args").then(|| job.args.clone()),
    })
}

/// A rejection of the synthetic envelope, with its paths pointing into `override`.
fn under_override(rejection: Rejection) -> Rejection {
    let rename = |v: Violation| Violation::new(v.path.replacen("$.", "$.override.", 1), v.message);
    match rejection {
        Rejection::Invalid(v) => Rejection::Invalid(v.into_iter().map(rename).collect()),
        Rejection::InvalidRetry(v) => Rejection::InvalidRetry(v.into_iter().map(rename).collect()),
        Rejection::PriorityOutOfRange {
            violation,
            value,
            max,
        } => Rejection::PriorityOutOfRange {
            violation: rename(violation),
            value,
            max,
        },
        other => other,
    }
}

/// `POST /ojs/v1/dead-letter/{id}/retry`: back to `available` with a fresh history; an optional
/// `{"override": {...}}` replaces queue, meta, retry, priority or args. The job comes back
/// wrapped and bare, as for `GET /ojs/v1/jobs/{id}`.
pub(super) async fn retry_one(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let with = match &body {
        None => RetryOverride::default(),
        Some(body) => match body.object()?.raw("override") {
            None => RetryOverride::default(),
            Some(raw) => parse_override(&state, raw)?,
        },
    };
    let job = state.broker().retry_dead_letter(id, &with).await?;
    Ok(ok(job.wire().wrapped_and_bare()).into_response())
}

pub(super) fn require_confirm(fields: &Fields<'_>) -> Result<(), ApiError> {
    if fields.boolean("confirm")? != Some(true) {
        return Err(ApiError::invalid_field(
            "$.confirm",
            "this acts on many jobs at once: send \"confirm\": true",
        ));
    }
    Ok(())
}

/// `POST /ojs/v1/dead-letter/retry`: retries every dead-lettered job matching `filter`
/// (`confirm: true` required).
pub(super) async fn retry_all(
    State(state): State<AppState>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let body = body.ok_or_else(|| {
        ApiError::invalid_field("$.confirm", "send {\"confirm\": true, \"filter\": {...}}")
    })?;
    let fields = body.object()?;
    require_confirm(&fields)?;
    let mut filter = DeadLetterFilter::default();
    if let Some(raw) = fields.raw("filter") {
        let f = Fields::from_object(
            Object::from_raw(raw)
                .map_err(|_| ApiError::invalid_field("$.filter", "'filter' must be an object"))?,
        );
        filter.queue = f.string("queue")?;
        filter.error_type = f.string("error_type")?;
        filter.since = body_timestamp(&f, "since", "$.filter")?;
        filter.until = body_timestamp(&f, "until", "$.filter")?;
        type_filter(f.string("type")?, &mut filter);
    }
    let result = state.broker().retry_dead_letters(&filter).await?;
    Ok(ok(json!({
        "action": "retry",
        "matched": result.matched,
        "succeeded": result.retried,
        "failed": result.matched - result.retried,
        "retried": result.retried,
        "errors": [],
    }))
    .into_response())
}

/// `DELETE /ojs/v1/dead-letter/{id}`: deletes the job for good.
async fn remove(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    state.broker().delete_dead_letter(id).await?;
    Ok(ok(json!({"deleted": true, "job_id": id.to_string()})).into_response())
}

/// `DELETE /ojs/v1/dead-letter`: purges dead-lettered jobs (`confirm: true` required; options in
/// the body or the query string, the body winning).
pub(super) async fn purge(
    State(state): State<AppState>,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let confirmed = match &fields {
        Some(f) if f.raw("confirm").is_some() => f.boolean("confirm")? == Some(true),
        _ => query.get("confirm") == Some("true"),
    };
    if !confirmed {
        return Err(ApiError::invalid_field(
            "$.confirm",
            "purging deletes jobs for good: send \"confirm\": true",
        ));
    }
    let older_than = match fields
        .as_ref()
        .map(|f| body_timestamp(f, "older_than", "$"))
        .transpose()?
    {
        Some(Some(t)) => Some(t),
        _ => query.timestamp("older_than")?,
    };
    let queue = match fields.as_ref().map(|f| f.string("queue")).transpose()? {
        Some(Some(q)) => Some(q),
        _ => query.get("queue").map(str::to_owned),
    };
    let purged = state
        .broker()
        .purge_dead_letters(older_than, queue.as_deref())
        .await?;
    Ok(ok(json!({"purged_count": purged})).into_response())
}
