//! `/ojs/v1/admin/jobs` ([OJS job inspection], [bulk operations]): job listings with filters
//! and order, a job in full, cancel, retry of discarded jobs, and bulk actions; and the
//! holders of unique keys (`/ojs/v1/unique-jobs`).
//!
//! [OJS job inspection]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#7-job-inspection-and-search
//! [bulk operations]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#8-bulk-operations

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::json;

use super::super::dead_letter::{body_timestamp, parse_override, require_confirm};
use super::super::error::ApiError;
use super::super::extract::{Fields, JobIdPath, OptionalJsonBody};
use super::super::query::{ADMIN, Page, Pagination, QueryParams};
use super::super::queues::check_queue_name;
use super::super::{AppState, jobs, ok};
use crate::broker::BulkAction;
use crate::broker::{JobFilter, JobSort, JobSummary, RetryOverride};
use crate::job::JobState;
use crate::job::unique::UniquePolicy;
use crate::job::wire::WireJob;
use crate::json::Object;
use crate::timestamp;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/jobs", get(list))
        // PATCH is the data plane's priority change, where the OJS admin UI sends it.
        .route(
            "/ojs/v1/admin/jobs/{id}",
            get(show).patch(jobs::change_priority),
        )
        .route("/ojs/v1/admin/jobs/{id}/cancel", post(jobs::cancel))
        .route("/ojs/v1/admin/jobs/{id}/retry", post(retry))
        .route("/ojs/v1/admin/jobs/bulk/{action}", post(bulk))
        .route("/ojs/v1/unique-jobs", get(unique_jobs))
}

/// `GET /ojs/v1/unique-jobs`: the jobs holding unique keys (a key, in a state their policy
/// counts), by key, a page at a time, as the OJS admin UI lists them. `locked_until` is when
/// the policy's `period` ends (absent without one); past it, the key no longer blocks.
async fn unique_jobs(
    State(state): State<AppState>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (holders, total) = state
        .broker()
        .unique_holders(page.limit, page.offset)
        .await?;

    #[derive(Serialize)]
    struct Holder<'a> {
        key: &'a str,
        job_id: String,
        r#type: &'a str,
        queue: &'a str,
        state: JobState,
        created_at: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        locked_until: Option<String>,
    }
    #[derive(Serialize)]
    struct ListBody<'a> {
        items: Vec<Holder<'a>>,
        pagination: Pagination,
    }
    let items = holders
        .iter()
        .map(|h| Holder {
            key: &h.unique_key,
            job_id: h.id.to_string(),
            r#type: &h.r#type,
            queue: &h.queue,
            state: h.state,
            created_at: timestamp::format(h.created_at),
            locked_until: UniquePolicy::parse(&h.unique_policy.0, "$.unique")
                .ok()
                .and_then(|p| p.period_ms)
                .and_then(|ms| i64::try_from(ms).ok())
                .map(|ms| timestamp::format(h.created_at + chrono::Duration::milliseconds(ms))),
        })
        .collect();
    Ok(ok(ListBody {
        items,
        pagination: page.describe(total),
    })
    .into_response())
}

/// A `type` filter: exact (`email.send`) or a prefix (`email.*`, `email*`).
fn set_type(filter: &mut JobFilter, value: Option<String>) {
    match value {
        Some(t) if t.ends_with('*') => {
            filter.type_prefix = Some(t.trim_end_matches('*').to_owned());
        }
        other => filter.job_type = other,
    }
}

/// Job state names, each checked.
fn parse_states(names: &[String], field: &str) -> Result<Vec<JobState>, ApiError> {
    names
        .iter()
        .map(|name| {
            JobState::parse(name).ok_or_else(|| {
                ApiError::invalid_field(field, format!("{name:?} is not a job state"))
            })
        })
        .collect()
}

/// The filter of a listing, from the query string.
fn filter_from_query(q: &QueryParams) -> Result<JobFilter, ApiError> {
    let mut filter = JobFilter {
        queue: q.get("queue").map(str::to_owned),
        states: q
            .list("state")
            .map(|names| parse_states(&names, "query.state"))
            .transpose()?,
        error_type: q.get("error_type").map(str::to_owned),
        since: q.timestamp("since")?,
        until: q.timestamp("until")?,
        ..JobFilter::default()
    };
    if let Some(queue) = &filter.queue {
        check_queue_name("query.queue", queue)?;
    }
    set_type(&mut filter, q.get("type").map(str::to_owned));
    Ok(filter)
}

/// One job of a listing.
#[derive(Serialize)]
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

/// `GET /ojs/v1/admin/jobs`: jobs filtered by `queue`, `state` (comma-separated), `type`,
/// `error_type`, `since`/`until` (creation time), ordered by `sort` (`created_at`,
/// `scheduled_at`, `priority`) and `order` (`desc` by default), a page at a time.
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let filter = filter_from_query(&query)?;
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
    let (jobs, total) = state
        .broker()
        .admin_jobs(&filter, sort, ascending, page.limit, page.offset)
        .await?;

    #[derive(Serialize)]
    struct ListBody<'a> {
        items: Vec<Item<'a>>,
        pagination: Pagination,
    }
    Ok(ok(ListBody {
        items: jobs.iter().map(Item::of).collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `GET /ojs/v1/admin/jobs/{id}`: the job object itself, not wrapped in `{"job": ...}` as on
/// the data plane ([OJS admin job detail]), plus the `metadata` and `retry_policy` the OJS
/// admin UI reads.
///
/// [OJS admin job detail]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#72-get-job-detail
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

    #[derive(Serialize)]
    struct JobBody<'a> {
        job: WireJob<'a>,
    }
    Ok(ok(JobBody { job: job.wire() }).into_response())
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
            let names = crate::json::decode::<Vec<String>>(raw)
                .or_else(|_| crate::json::decode::<String>(raw).map(|s| vec![s]))
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
async fn bulk(
    State(state): State<AppState>,
    Path(action): Path<String>,
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
    let filter = bulk_filter(&fields)?;
    let outcome = state.broker().bulk(action, &filter).await?;
    let counter = match action {
        BulkAction::Retry => "retried",
        BulkAction::Cancel => "cancelled",
        BulkAction::Delete => "deleted",
    };
    let errors: Vec<serde_json::Value> = outcome
        .errors
        .iter()
        .map(|(id, error)| json!({"job_id": id.to_string(), "error": error}))
        .collect();
    let mut response = json!({
        "action": action.as_str(),
        "matched": outcome.matched,
        "succeeded": outcome.succeeded,
        "failed": outcome.errors.len(),
        "errors": errors,
    });
    response[counter] = json!(outcome.succeeded);
    Ok(ok(response).into_response())
}
