//! A page of jobs as the admin listings answer it (`GET /ojs/v1/admin/jobs`, and a tenant's jobs
//! under `/ojs/v1/admin/tenants/{id}/jobs`): the filter read from the query string, the order,
//! and each job's summary.

use crate::broker::{JobFilter, JobSort, JobSummary};
use crate::http::error::ApiError;
use crate::http::extract::check_queue_name;
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::{AppState, ok};
use crate::job::JobState;
use crate::job::id_schema::QueueName;
use crate::wire::timestamp;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

/// A `type` filter: exact (`email.send`) or a prefix (`email.*`, `email*`).
pub(crate) fn set_type(filter: &mut JobFilter, value: Option<String>) {
    match value {
        Some(t) if t.ends_with('*') => {
            filter.type_prefix = Some(t.trim_end_matches('*').to_owned());
        }
        other => filter.job_type = other,
    }
}

/// Job state names, each checked.
pub(crate) fn parse_states(names: &[String], field: &str) -> Result<Vec<JobState>, ApiError> {
    names
        .iter()
        .map(|name| {
            JobState::parse(name).ok_or_else(|| {
                ApiError::invalid_field(field, format!("{name:?} is not a job state"))
            })
        })
        .collect()
}

/// A comma-separated list of any job states.
pub(crate) fn every_state() -> utoipa::openapi::schema::Object {
    crate::http::openapi::values::job_states(&JobState::ALL, "Comma-separated job states.")
}

/// The filter of a listing, from the query string.
pub(crate) fn filter_from_query(q: &QueryParams) -> Result<JobFilter, ApiError> {
    let mut filter = JobFilter {
        queue: q.get("queue").map(str::to_owned),
        states: q
            .list("state")
            .map(|names| parse_states(&names, "query.state"))
            .transpose()?,
        error_type: q.get("error_type").map(str::to_owned),
        since: q.timestamp("since")?,
        until: q.timestamp("until")?,
        tenant: q.get("tenant").map(str::to_owned),
        ..JobFilter::default()
    };
    if let Some(queue) = &filter.queue {
        check_queue_name("query.queue", queue)?;
    }
    if let Some(tenant) = &filter.tenant
        && !crate::tenant::is_valid_id(tenant)
    {
        return Err(ApiError::invalid_field(
            "query.tenant",
            crate::tenant::invalid_id_message(tenant),
        ));
    }
    set_type(&mut filter, q.get("type").map(str::to_owned));
    Ok(filter)
}

/// One job of a listing.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminJobSummary)]
struct Item<'a> {
    id: String,
    r#type: &'a str,
    queue: &'a str,
    state: JobState,
    priority: i32,
    attempt: i32,
    max_attempts: i32,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    enqueued_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
}

impl<'a> Item<'a> {
    fn of(j: &'a JobSummary) -> Item<'a> {
        Item {
            id: j.id.to_string(),
            r#type: &j.r#type,
            queue: &j.queue,
            state: j.state,
            priority: j.priority,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            created_at: timestamp::format(j.created_at),
            enqueued_at: j.enqueued_at.map(timestamp::format),
            scheduled_at: j.scheduled_at.map(timestamp::format),
            started_at: j.started_at.map(timestamp::format),
            completed_at: j.completed_at.map(timestamp::format),
        }
    }
}

/// A page of jobs.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminJobList)]
pub(crate) struct ListBody<'a> {
    items: Vec<Item<'a>>,
    pagination: Pagination,
}

/// A page of jobs as [`listing`] answers it; only `tenant`'s when given (the tenant pages, and a
/// request acting as a tenant).
pub(crate) async fn listing(
    state: &AppState,
    query: &QueryParams,
    tenant: Option<&str>,
) -> Result<Response, ApiError> {
    let page = Page::from_query(query, ADMIN)?;
    let mut filter = filter_from_query(query)?;
    if let Some(tenant) = tenant {
        if filter
            .tenant
            .as_deref()
            .is_some_and(|named| named != tenant)
        {
            // `?tenant=` names another tenant: none of its jobs are this listing's.
            return Ok(ok(ListBody {
                items: Vec::new(),
                pagination: page.describe(0),
            })
            .into_response());
        }
        filter.tenant = Some(tenant.to_owned());
    }
    let sort = match query.get("sort") {
        None | Some("created_at") => JobSort::CreatedAt,
        Some("scheduled_at") => JobSort::ScheduledAt,
        Some("priority") => JobSort::Priority,
        Some(other) => {
            return Err(ApiError::invalid_field(
                "query.sort",
                format!("'sort' must be created_at, scheduled_at or priority, not {other:?}"),
            ));
        }
    };
    let ascending = match query.get("order") {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(other) => {
            return Err(ApiError::invalid_field(
                "query.order",
                format!("'order' must be asc or desc, not {other:?}"),
            ));
        }
    };
    let found = state
        .broker()
        .admin_jobs(&filter, sort, ascending, page.limit, page.offset)
        .await?;
    Ok(ok(ListBody {
        items: found.items.iter().map(Item::of).collect(),
        pagination: page.describe_counted(found.total, found.total_estimated, found.has_more),
    })
    .into_response())
}

/// The filter and order of a job listing.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `filter_from_query` and `list`
pub(crate) struct ListParams {
    /// Only this queue's jobs.
    #[param(value_type = Option<QueueName>)]
    queue: Option<String>,
    /// Comma-separated job states.
    #[param(schema_with = every_state)]
    state: Option<String>,
    /// A job type, exact (`email.send`) or a prefix (`email.*`, `email*`).
    r#type: Option<String>,
    /// Only jobs whose last error has this code.
    error_type: Option<String>,
    /// Only this tenant's jobs (`meta.tenant_id`).
    #[param(pattern = "^[a-zA-Z0-9][a-zA-Z0-9._:-]*$", max_length = 255)]
    tenant: Option<String>,
    /// RFC 3339 timestamp with a zone: created at or after.
    #[param(value_type = Option<crate::http::openapi::values::Timestamp>)]
    since: Option<String>,
    /// RFC 3339 timestamp with a zone: created at or before.
    #[param(value_type = Option<crate::http::openapi::values::Timestamp>)]
    until: Option<String>,
    /// Default `created_at`.
    #[param(pattern = "^(created_at|scheduled_at|priority)$")]
    sort: Option<String>,
    /// Default `desc`.
    #[param(pattern = "^(asc|desc)$")]
    order: Option<String>,
}
