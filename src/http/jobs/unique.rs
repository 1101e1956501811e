//! `/ojs/v1/unique-jobs`: the jobs holding unique keys, as the OJS admin UI lists them.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::http::error::ApiError;
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::{AppState, ok};
use crate::job::JobState;
use crate::job::unique::UniquePolicy;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(unique_jobs))
}

/// A job holding a unique key.
#[derive(Serialize, ToSchema)]
#[schema(as = UniqueKeyHolder)]
struct Holder<'a> {
    key: &'a str,
    job_id: String,
    r#type: &'a str,
    queue: &'a str,
    state: JobState,
    created_at: String,
    /// When the policy's `period` ends; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    locked_until: Option<String>,
}

/// A page of unique-key holders.
#[derive(Serialize, ToSchema)]
#[schema(as = UniqueKeyHolderList)]
struct HolderList<'a> {
    items: Vec<Holder<'a>>,
    pagination: Pagination,
}

/// `GET /ojs/v1/unique-jobs`: the jobs holding unique keys (a key, in a state their policy
/// counts), by key, a page at a time, as the OJS admin UI lists them. `locked_until` is when
/// the policy's `period` ends (absent without one); past it, the key no longer blocks.
#[utoipa::path(
    get,
    path = "/ojs/v1/unique-jobs",
    tag = "admin",
    operation_id = "admin_list_unique_jobs",
    summary = "List the holders of unique keys",
    description = "The jobs holding unique keys (a key, in a state their policy counts), by key. \
                   `locked_until` is when the policy's `period` ends (absent without one); past \
                   it, the key no longer blocks.",
    params(Page),
    responses(
        (status = 200, body = HolderList<'_>),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn unique_jobs(
    State(state): State<AppState>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (holders, total) = state
        .broker()
        .unique_holders(page.limit, page.offset)
        .await?;
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
    Ok(ok(HolderList {
        items,
        pagination: page.describe(total),
    })
    .into_response())
}
