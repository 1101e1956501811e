//! `/ojs/v1/admin/jobs` ([OJS job inspection], [bulk operations]): job listings with filters
//! and order, a job in full, cancel, retry of discarded jobs, and bulk actions.
//!
//! [OJS job inspection]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#7-job-inspection-and-search
//! [bulk operations]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#8-bulk-operations

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::BulkAction;
use crate::broker::{JobFilter, RetryOverride};
use crate::http::auth::Caller;
use crate::http::bulk::{RetryRequest, body_timestamp, parse_override, require_confirm};
use crate::http::error::ApiError;
use crate::http::extract::check_queue_name;
use crate::http::extract::{Fields, JobIdPath, JsonBody, OptionalJsonBody};
use crate::http::job_listing::{ListBody, ListParams, listing, parse_states, set_type};
use crate::http::jobs::lifecycle::{self, PriorityChanged};
use crate::http::openapi::values::Confirm;
use crate::http::query::{Page, QueryParams};
use crate::http::shapes::{JobBody, WrappedJob};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok, openapi};
use crate::job::JobState;
use crate::job::id_schema::QueueName;
use crate::wire::json::Object;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        // PATCH is the data plane's priority change, where the OJS admin UI sends it.
        .routes(routes!(show, change_priority))
        .routes(routes!(cancel))
        .routes(routes!(retry))
        .routes(routes!(bulk))
}

/// `GET /ojs/v1/admin/jobs`: jobs filtered by `queue`, `state` (comma-separated), `type`,
/// `error_type`, `since`/`until` (creation time), ordered by `sort` (`created_at`,
/// `scheduled_at`, `priority`) and `order` (`desc` by default), a page at a time.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/jobs",
    tag = "admin",
    operation_id = "admin_list_jobs",
    summary = "List jobs",
    params(Page, ListParams),
    responses(
        (status = 200, description = "Matching jobs, a page at a time.", body = ListBody<'_>),
        (status = 400, description = "A parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    listing(&state, &query, tenant.id()).await
}

/// `GET /ojs/v1/admin/jobs/{id}`: the job object itself, not wrapped in `{"job": ...}` as on
/// the data plane ([OJS admin job detail]), plus the `metadata` and `retry_policy` the OJS
/// admin UI reads.
///
/// [OJS admin job detail]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#72-get-job-detail
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/jobs/{id}",
    tag = "admin",
    operation_id = "admin_get_job",
    summary = "Read a job in full",
    description = "The job object itself (not wrapped in `{\"job\": ...}`), with `metadata` and \
                   `retry_policy`.",
    params(JobIdPath),
    responses(
        (status = 200, body = openapi::Job),
        (status = 404, description = "No such job."),
    )
)]
async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    let job = state.broker().info(id).await?;
    Ok(ok(job.wire().with_admin_detail()).into_response())
}

/// `POST /ojs/v1/admin/jobs/{id}/retry`: a discarded job (dead-lettered or not) back to
/// `available` with a fresh history, as a dead-letter retry, optional `override` included.
/// Any other state is a conflict. A cancelled job stays cancelled: ojsd keeps `cancelled` final,
/// as in the [OJS job lifecycle], although the [OJS admin retry] also takes cancelled jobs.
///
/// [OJS job lifecycle]: https://github.com/openjobspec/spec/blob/main/spec/ojs-core.md#6-job-lifecycle-state-machine
/// [OJS admin retry]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#74-retry-job
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/{id}/retry",
    tag = "admin",
    operation_id = "admin_retry_job",
    summary = "Retry a discarded job",
    description = "A discarded job (dead-lettered or not) back to `available` with a fresh \
                   history, with the values of `override`, if any.",
    params(JobIdPath),
    request_body(content = Option<RetryRequest>, description = "May be omitted."),
    responses(
        (status = 200, body = JobBody<'_>),
        (status = 400, description = "The override is invalid."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not discarded."),
    )
)]
async fn retry(
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
    let job = state.broker().retry_discarded(id, &with).await?;
    Ok(ok(JobBody { job: job.wire() }).into_response())
}

/// `PATCH /ojs/v1/admin/jobs/{id}`: the data plane's priority change
/// (`PATCH /ojs/v1/jobs/{id}`), where the OJS admin UI sends it.
#[utoipa::path(
    patch,
    path = "/ojs/v1/admin/jobs/{id}",
    tag = "admin",
    operation_id = "admin_change_job_priority",
    summary = "Change a waiting job's priority",
    description = "As `PATCH /ojs/v1/jobs/{id}`.",
    params(JobIdPath),
    request_body = lifecycle::PriorityRequest,
    responses(
        (status = 200, body = PriorityChanged<'_>),
        (status = 400, description = "The priority is missing or out of range."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is no longer waiting."),
    )
)]
async fn change_priority(
    state: State<AppState>,
    id: JobIdPath,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    lifecycle::change_priority(state, id, caller, body).await
}

/// `POST /ojs/v1/admin/jobs/{id}/cancel`: the data plane's cancel (`DELETE /ojs/v1/jobs/{id}`).
/// The body, if any, is ignored.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/{id}/cancel",
    tag = "admin",
    operation_id = "admin_cancel_job",
    summary = "Cancel a job",
    description = "As `DELETE /ojs/v1/jobs/{id}`. A body, if any, is ignored.",
    params(JobIdPath),
    responses(
        (status = 200, description = "Cancelled (or already cancelled); `previous_state` says from what.", body = WrappedJob),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job already finished."),
    )
)]
async fn cancel(
    state: State<AppState>,
    id: JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    lifecycle::cancel(state, id, caller).await
}

/// The members a bulk filter may have; any other is refused rather than ignored, since a
/// misspelt member would widen what the action applies to.
const FILTER_FIELDS: [&str; 6] = ["queue", "state", "type", "since", "until", "error_type"];

/// The `filter` of a bulk action.
fn bulk_filter(fields: &Fields<'_>) -> Result<JobFilter, ApiError> {
    let mut filter = JobFilter::default();
    let Some(raw) = fields.raw("filter") else {
        return Ok(filter);
    };
    let obj = Object::from_raw(raw)
        .map_err(|_| ApiError::invalid_field("$.filter", "'filter' must be an object"))?;
    if let Some((key, _)) = obj.iter().find(|(k, _)| !FILTER_FIELDS.contains(k)) {
        return Err(ApiError::invalid_field(
            &format!("$.filter.{key}"),
            format!(
                "'filter' may have {}, not {key:?}",
                FILTER_FIELDS.join(", ")
            ),
        ));
    }
    let f = Fields::from_object(obj);
    filter.queue = f.string("queue")?;
    if let Some(queue) = &filter.queue {
        check_queue_name("$.filter.queue", queue)?;
    }
    // One state or a list of them.
    filter.states = match f.raw("state") {
        None => None,
        Some(raw) => {
            let names = crate::wire::json::decode::<Vec<String>>(raw)
                .or_else(|_| crate::wire::json::decode::<String>(raw).map(|s| vec![s]))
                .map_err(|_| {
                    ApiError::invalid_field(
                        "$.filter.state",
                        "'state' must be a job state or an array of job states",
                    )
                })?;
            Some(parse_states(&names, "$.filter.state")?)
        }
    };
    filter.error_type = f.string("error_type")?;
    filter.since = body_timestamp(&f, "since", "$.filter")?;
    filter.until = body_timestamp(&f, "until", "$.filter")?;
    set_type(&mut filter, f.string("type")?);
    Ok(filter)
}

/// `POST /ojs/v1/admin/jobs/bulk/{retry|cancel|delete}` with `{"filter": {...}, "confirm":
/// true}`: retries discarded jobs, cancels unfinished ones or deletes finished ones, among
/// those the filter matches.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/jobs/bulk/{action}",
    tag = "admin",
    operation_id = "admin_bulk_jobs",
    summary = "Retry, cancel or delete jobs in bulk",
    description = "`retry` retries discarded jobs, `cancel` cancels unfinished ones, `delete` \
                   deletes finished ones, among those `filter` matches. The answer has the count \
                   of the action's own name (`retried`, `cancelled` or `deleted`).",
    params(BulkPath),
    request_body = BulkRequest,
    responses(
        (status = 200, body = BulkResult<'_>),
        (status = 400, description = "Not confirmed, or the filter is invalid or selects no state the action applies to."),
        (status = 404, description = "An action other than `retry`, `cancel` or `delete`."),
    )
)]
async fn bulk(
    State(state): State<AppState>,
    tenant: Tenant,
    Path(BulkPath(action)): Path<BulkPath>,
    uri: axum::http::Uri,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let Some(action) = BulkAction::parse(&action) else {
        return Err(ApiError::route_not_found(uri.path()));
    };
    let body = body.ok_or_else(|| {
        ApiError::invalid_field("$.confirm", "send {\"confirm\": true, \"filter\": {...}}")
    })?;
    let fields = body.object()?;
    require_confirm(&fields)?;
    let mut filter = bulk_filter(&fields)?;
    filter.tenant = tenant.owned();
    let outcome = state.broker().bulk(action, &filter).await?;
    let counter = match action {
        BulkAction::Retry => "retried",
        BulkAction::Cancel => "cancelled",
        BulkAction::Delete => "deleted",
    };
    let count = |name: &str| (counter == name).then_some(outcome.succeeded);
    Ok(ok(BulkResult {
        action: action.as_str(),
        cancelled: count("cancelled"),
        deleted: count("deleted"),
        errors: outcome
            .errors
            .iter()
            .map(|(id, error)| BulkError {
                error,
                job_id: id.to_string(),
            })
            .collect(),
        failed: outcome.errors.len(),
        matched: outcome.matched,
        retried: count("retried"),
        succeeded: outcome.succeeded,
    })
    .into_response())
}

/// The action of a bulk request.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("action"), parameter_in = Path)]
struct BulkPath(
    /// `retry`, `cancel` or `delete` (any other is not a route: 404).
    #[param(pattern = "^(retry|cancel|delete)$")]
    String,
);

/// `{"confirm": true, "filter": {...}}`.
#[derive(ToSchema)]
#[schema(as = BulkRequest)]
#[allow(dead_code)] // a schema: read by `bulk`
struct BulkRequest {
    #[schema(value_type = Confirm)]
    confirm: bool,
    /// Which jobs (default: every job in a state the action applies to).
    filter: Option<BulkFilterSchema>,
}

/// The jobs a bulk action applies to (among those in a state it applies to). No other
/// member is accepted.
#[derive(ToSchema)]
#[schema(as = BulkFilter)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema: read by `bulk_filter`
struct BulkFilterSchema {
    #[schema(value_type = Option<QueueName>)]
    queue: Option<String>,
    /// A job state or an array of job states.
    state: Option<BulkStatesSchema>,
    /// A job type, exact (`email.send`) or a prefix (`email.*`, `email*`).
    r#type: Option<String>,
    /// RFC 3339 timestamp with a zone: created at or after.
    #[schema(value_type = Option<crate::http::openapi::values::Timestamp>)]
    since: Option<String>,
    /// RFC 3339 timestamp with a zone: created at or before.
    #[schema(value_type = Option<crate::http::openapi::values::Timestamp>)]
    until: Option<String>,
    /// Only jobs whose last error has this code.
    error_type: Option<String>,
}

/// One job state or several.
#[derive(ToSchema)]
#[schema(as = BulkFilterStates)]
#[serde(untagged)]
#[allow(dead_code)] // a schema
enum BulkStatesSchema {
    One(JobState),
    Many(Vec<JobState>),
}

/// What a bulk action did. Exactly one of `retried`, `cancelled` and `deleted` is present,
/// for the action, equal to `succeeded`.
#[derive(Serialize, ToSchema)]
#[schema(as = BulkResult)]
struct BulkResult<'a> {
    /// `retry`, `cancel` or `delete`.
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deleted: Option<usize>,
    /// Why each of the `failed` jobs was skipped (it changed meanwhile).
    errors: Vec<BulkError<'a>>,
    failed: usize,
    /// Jobs that matched the filter in a state the action applies to.
    matched: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    retried: Option<usize>,
    succeeded: usize,
}

/// A job a bulk action skipped.
#[derive(Serialize, ToSchema)]
#[schema(as = BulkError)]
struct BulkError<'a> {
    error: &'a str,
    job_id: String,
}
