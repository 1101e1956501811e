//! The dead-letter queue at `/ojs/v1/dead-letter`, as the [OJS dead-letter HTTP binding] says:
//! listed, counted, read, retried one by one or in bulk, removed and purged.
//!
//! [OJS dead-letter HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-dead-letter.md#10-http-binding

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::broker::{DeadLetterFilter, RetryOverride};
use crate::http::bulk::{RetryRequest, body_timestamp, parse_override, require_confirm};
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JobIdPath, OptionalJsonBody};
use crate::http::openapi;
use crate::http::openapi::values::Confirm;
use crate::http::query::{DATA_PLANE, Page, Pagination, QueryParams};
use crate::http::shapes::{JobBody, WrappedJob};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok};
use crate::job::id_schema::QueueName;
use crate::job::wire::WireJob;
use crate::wire::duration;
use crate::wire::json::Object;
use crate::wire::timestamp;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, purge))
        .routes(routes!(stats))
        .routes(routes!(retry_all))
        .routes(routes!(show, remove))
        .routes(routes!(retry_one))
}

/// The filters of a dead-letter listing.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `filter_from_query`
pub(crate) struct DeadLetterFilterQuery {
    /// Only jobs of this queue.
    #[param(value_type = Option<QueueName>)]
    queue: Option<String>,
    /// Only jobs of this type; a trailing `*` matches a prefix (`email.*`).
    r#type: Option<String>,
    /// Only jobs whose last error has this type.
    error_type: Option<String>,
    /// RFC 3339: only jobs dead-lettered at or after this.
    #[param(value_type = Option<crate::http::openapi::values::Timestamp>)]
    since: Option<String>,
    /// RFC 3339: only jobs dead-lettered before this.
    #[param(value_type = Option<crate::http::openapi::values::Timestamp>)]
    until: Option<String>,
}

/// A page of dead-lettered jobs, newest first.
#[derive(Serialize, ToSchema)]
#[schema(as = DeadLetterList)]
struct ListBody<'a> {
    #[schema(value_type = Vec<openapi::Job>)]
    jobs: Vec<WireJob<'a>>,
    pagination: Pagination,
}

/// Counts of the dead-letter queue. (Members in name order, as `json!` wrote them.)
#[derive(Serialize, ToSchema)]
pub(crate) struct DeadLetterStats {
    /// Jobs by their last error's type.
    by_error_type: BTreeMap<String, i64>,
    /// Jobs by queue.
    by_queue: BTreeMap<String, i64>,
    /// When the newest job was dead-lettered; `null` when there is none.
    #[schema(required = true)]
    newest_at: Option<String>,
    /// When the oldest job was dead-lettered; `null` when there is none.
    #[schema(required = true)]
    oldest_at: Option<String>,
    retention: DeadLetterRetention,
    total: i64,
}

/// How long dead letters are kept.
#[derive(Serialize, ToSchema)]
struct DeadLetterRetention {
    /// ISO 8601 duration.
    max_age: String,
    /// Always `null`: no bound on the count.
    #[schema(required = true)]
    max_count: Option<i64>,
}

/// `POST /ojs/v1/dead-letter/retry`.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `retry_all`
pub(crate) struct DeadLetterBulkRetryRequest {
    #[schema(value_type = Confirm)]
    confirm: bool,
    /// Which jobs to retry (all when left out).
    #[schema(nullable = false)]
    filter: Option<DeadLetterBodyFilter>,
}

/// The filter of a bulk dead-letter retry.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `retry_all`
struct DeadLetterBodyFilter {
    #[schema(nullable = false, value_type = Option<QueueName>)]
    queue: Option<String>,
    /// A trailing `*` matches a prefix (`email.*`).
    #[schema(nullable = false)]
    r#type: Option<String>,
    #[schema(nullable = false)]
    error_type: Option<String>,
    /// RFC 3339.
    #[schema(nullable = false, value_type = Option<crate::http::openapi::values::Timestamp>)]
    since: Option<String>,
    /// RFC 3339.
    #[schema(nullable = false, value_type = Option<crate::http::openapi::values::Timestamp>)]
    until: Option<String>,
}

/// What a bulk retry did. (Members in name order, as `json!` wrote them.)
#[derive(Serialize, ToSchema)]
pub(crate) struct DeadLetterBulkRetry {
    /// Always `retry`.
    action: &'static str,
    /// Always empty.
    #[schema(value_type = Vec<Object>, max_items = 0)]
    errors: [serde_json::Value; 0],
    failed: usize,
    matched: usize,
    /// The same as `succeeded`.
    retried: usize,
    succeeded: usize,
}

/// `DELETE /ojs/v1/dead-letter/{id}`. (Members in name order, as `json!` wrote them.)
#[derive(Serialize, ToSchema)]
#[schema(as = DeadLetterDeleted)]
struct Removed {
    /// Always `true`.
    deleted: bool,
    job_id: String,
}

/// The options of a purge, in the body or the query string (each of the body's members wins).
#[derive(IntoParams, ToSchema)]
#[into_params(parameter_in = Query)]
#[schema(as = DeadLetterPurgeRequest)]
pub(crate) struct DeadLetterPurge {
    /// `true`: here, or in the query string when the body does not give it.
    #[param(value_type = Option<Confirm>)]
    #[schema(value_type = Confirm)]
    confirm: bool,
    /// RFC 3339: only jobs dead-lettered before this.
    #[param(value_type = Option<crate::http::openapi::values::Timestamp>)]
    #[schema(nullable = false, value_type = Option<crate::http::openapi::values::Timestamp>)]
    older_than: Option<chrono::DateTime<chrono::Utc>>,
    /// Only jobs of this queue.
    #[param(value_type = Option<QueueName>)]
    #[schema(nullable = false, value_type = Option<QueueName>)]
    queue: Option<String>,
}

impl DeadLetterPurge {
    /// The options of `body` and `query`.
    fn read(body: Option<&Fields<'_>>, query: &QueryParams) -> Result<DeadLetterPurge, ApiError> {
        let confirm = match body {
            Some(f) if f.raw("confirm").is_some() => f.boolean("confirm")? == Some(true),
            _ => query.get("confirm") == Some("true"),
        };
        let older_than = match body
            .map(|f| body_timestamp(f, "older_than", "$"))
            .transpose()?
        {
            Some(Some(t)) => Some(t),
            _ => query.timestamp("older_than")?,
        };
        let queue = match body.map(|f| f.string("queue")).transpose()? {
            Some(Some(q)) => Some(q),
            _ => query.get("queue").map(str::to_owned),
        };
        Ok(DeadLetterPurge {
            confirm,
            older_than,
            queue,
        })
    }
}

/// What a purge did.
#[derive(Serialize, ToSchema)]
pub(crate) struct DeadLetterPurged {
    purged_count: i64,
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

pub(super) fn filter_from_query(
    q: &QueryParams,
    tenant: &Tenant,
) -> Result<DeadLetterFilter, ApiError> {
    let mut filter = DeadLetterFilter {
        tenant: tenant.owned(),
        queue: q.get("queue").map(str::to_owned),
        error_type: q.get("error_type").map(str::to_owned),
        since: q.timestamp("since")?,
        until: q.timestamp("until")?,
        ..DeadLetterFilter::default()
    };
    type_filter(q.get("type").map(str::to_owned), &mut filter);
    Ok(filter)
}

/// `GET /ojs/v1/dead-letter`: newest first, with `queue`, `type`, `error_type`, `since`, `until`.
#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter",
    tag = "dead-letter",
    summary = "List dead-lettered jobs",
    params(DeadLetterFilterQuery, Page),
    responses(
        (status = 200, description = "Newest first.", body = ListBody<'_>),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, DATA_PLANE)?;
    let filter = filter_from_query(&query, &tenant)?;
    let found = state
        .broker()
        .dead_letters(&filter, page.limit, page.offset)
        .await?;
    Ok(ok(ListBody {
        jobs: found.items.iter().map(|j| j.wire()).collect(),
        pagination: page.describe_counted(found.total, found.total_estimated, found.has_more),
    })
    .into_response())
}

/// `GET /ojs/v1/dead-letter/stats`.
#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter/stats",
    tag = "dead-letter",
    summary = "Dead-letter statistics",
    responses((status = 200, body = DeadLetterStats))
)]
pub(super) async fn stats(
    State(state): State<AppState>,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let stats = state.broker().dead_letter_stats(tenant.id()).await?;
    let retention = state.settings().dead_letter_retention;
    Ok(ok(DeadLetterStats {
        by_error_type: stats.by_error_type.into_iter().collect(),
        by_queue: stats.by_queue.into_iter().collect(),
        newest_at: stats.newest_at.map(timestamp::format),
        oldest_at: stats.oldest_at.map(timestamp::format),
        retention: DeadLetterRetention {
            max_age: duration::format_iso(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX)),
            max_count: None,
        },
        total: stats.total,
    })
    .into_response())
}

/// `GET /ojs/v1/dead-letter/{id}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/dead-letter/{id}",
    tag = "dead-letter",
    summary = "Read a dead-lettered job",
    params(JobIdPath),
    responses(
        (status = 200, body = JobBody<'_>),
        (status = 400, description = "The id is not a job id."),
        (status = 404, description = "No such job in the dead-letter queue."),
    )
)]
async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    let job = state.broker().dead_letter(id).await?;
    Ok(ok(JobBody { job: job.wire() }).into_response())
}

/// `POST /ojs/v1/dead-letter/{id}/retry`: back to `available` with a fresh history; an optional
/// `{"override": {...}}` replaces queue, meta, retry, priority or args. The job comes back
/// wrapped and bare, as for `GET /ojs/v1/jobs/{id}`.
#[utoipa::path(
    post,
    path = "/ojs/v1/dead-letter/{id}/retry",
    tag = "dead-letter",
    summary = "Retry a dead-lettered job",
    params(JobIdPath),
    request_body(
        content = Option<RetryRequest>,
        description = "An optional override; the body may be omitted."
    ),
    responses(
        (status = 200, description = "The job, `available` again.", body = WrappedJob),
        (status = 400, description = "The override is invalid."),
        (status = 404, description = "No such job in the dead-letter queue."),
    )
)]
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

/// `POST /ojs/v1/dead-letter/retry`: retries every dead-lettered job matching `filter`
/// (`confirm: true` required).
#[utoipa::path(
    post,
    path = "/ojs/v1/dead-letter/retry",
    tag = "dead-letter",
    summary = "Retry dead-lettered jobs in bulk",
    request_body = DeadLetterBulkRetryRequest,
    responses(
        (status = 200, body = DeadLetterBulkRetry),
        (status = 400, description = "`confirm: true` is missing or the filter is invalid."),
    )
)]
pub(super) async fn retry_all(
    State(state): State<AppState>,
    tenant: Tenant,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let body = body.ok_or_else(|| {
        ApiError::invalid_field("$.confirm", "send {\"confirm\": true, \"filter\": {...}}")
    })?;
    let fields = body.object()?;
    require_confirm(&fields)?;
    let mut filter = DeadLetterFilter {
        tenant: tenant.owned(),
        ..DeadLetterFilter::default()
    };
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
    Ok(ok(DeadLetterBulkRetry {
        action: "retry",
        errors: [],
        failed: result.matched - result.retried,
        matched: result.matched,
        retried: result.retried,
        succeeded: result.retried,
    })
    .into_response())
}

/// `DELETE /ojs/v1/dead-letter/{id}`: deletes the job for good.
#[utoipa::path(
    delete,
    path = "/ojs/v1/dead-letter/{id}",
    tag = "dead-letter",
    summary = "Delete a dead-lettered job",
    params(JobIdPath),
    responses(
        (status = 200, description = "Deleted for good.", body = Removed),
        (status = 400, description = "The id is not a job id."),
        (status = 404, description = "No such job in the dead-letter queue."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    state.broker().delete_dead_letter(id).await?;
    Ok(ok(Removed {
        deleted: true,
        job_id: id.to_string(),
    })
    .into_response())
}

/// `DELETE /ojs/v1/dead-letter`: purges dead-lettered jobs (`confirm: true` required; options in
/// the body or the query string, the body winning).
#[utoipa::path(
    delete,
    path = "/ojs/v1/dead-letter",
    tag = "dead-letter",
    summary = "Purge dead-lettered jobs",
    params(DeadLetterPurge),
    request_body(
        content = Option<DeadLetterPurge>,
        description = "The options; may be omitted when the query string gives them."
    ),
    responses(
        (status = 200, body = DeadLetterPurged),
        (status = 400, description = "`confirm: true` is missing or an option is invalid."),
    )
)]
pub(super) async fn purge(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let DeadLetterPurge {
        confirm,
        older_than,
        queue,
    } = DeadLetterPurge::read(fields.as_ref(), &query)?;
    if !confirm {
        return Err(ApiError::invalid_field(
            "$.confirm",
            "purging deletes jobs for good: send \"confirm\": true",
        ));
    }
    let purged = state
        .broker()
        .purge_dead_letters(older_than, queue.as_deref(), tenant.id())
        .await?;
    Ok(ok(DeadLetterPurged {
        purged_count: purged,
    })
    .into_response())
}
