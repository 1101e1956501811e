//! Cron entries at `/ojs/v1/cron`: registered (an upsert: 201 new, 200 updated), listed, read,
//! changed, deleted, and an entry's run ledger.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::cron::{CronEntry, CronRun};
use crate::cron;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::query::{DATA_PLANE, Page, Pagination, QueryParams};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, Ojs, ok};
use crate::job::JobId;
use crate::job::envelope::DEFAULT_QUEUE;
use crate::wire::json::{self, Object};
use crate::wire::timestamp;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, register))
        .routes(routes!(show, change, remove))
        .routes(routes!(runs))
}

/// A cron entry's name: lowercase letters, digits, `-` and `.`, starting with a letter or
/// digit, at most 255 characters.
pub struct CronName;

impl utoipa::PartialSchema for CronName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(cron::MAX_NAME_LEN))
            .pattern(Some("^[a-z0-9][a-z0-9.-]*$"))
            .description(Some(
                "Lowercase letters, digits, `-` and `.`, starting with a letter or digit; at \
                 most 255 characters.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for CronName {}

/// The entry name of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("name"), parameter_in = Path)]
struct CronNamePath(
    /// The entry's name (any other name is refused with 400).
    #[param(value_type = CronName)]
    String,
);

/// 400 unless `name` can name an entry.
pub(super) fn name_of(field: &str, name: &str) -> Result<(), ApiError> {
    if cron::is_valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            field,
            format!(
                "cron name {name:?} is invalid: use 1-255 lowercase letters, digits, '-' and '.', \
                 starting with a letter or digit"
            ),
        ))
    }
}

/// A cron entry, with the keys every client reads.
#[derive(Serialize, ToSchema)]
#[schema(as = CronEntry)]
pub(super) struct WireCron<'a> {
    /// The same as `name` (the admin UI's key).
    id: &'a str,
    name: &'a str,
    /// The schedule as registered.
    expression: &'a str,
    /// The same as `expression`.
    cron: &'a str,
    /// The same as `expression`.
    schedule: &'a str,
    /// IANA zone the schedule is read in.
    timezone: &'a str,
    /// `skip`, `allow`, `cancel_previous` or `enqueue`.
    overlap_policy: &'a str,
    enabled: bool,
    /// `active` or `disabled`.
    status: &'static str,
    #[schema(required = true)]
    description: Option<&'a str>,
    /// The enqueue body each run is made from.
    #[schema(value_type = Object)]
    job_template: Box<RawValue>,
    /// The template's job type.
    #[serde(rename = "type")]
    job_type: String,
    /// The queue runs go to.
    queue: String,
    /// The template's `args`.
    #[schema(value_type = Vec<serde_json::Value>)]
    args: Box<RawValue>,
    /// The template's `meta` (runs also get `cron_name` and `cron_triggered_at`).
    #[schema(value_type = Object)]
    meta: Box<RawValue>,
    /// The template's `options`.
    #[schema(value_type = Object)]
    options: Box<RawValue>,
    /// The occurrence of the latest run enqueued.
    #[schema(required = true)]
    last_run_at: Option<String>,
    /// The next occurrence that fires; `null` when disabled (or the schedule never fires
    /// again).
    #[schema(required = true)]
    next_run_at: Option<String>,
    /// Runs enqueued since the entry was registered.
    run_count: i64,
    created_at: String,
    updated_at: String,
}

impl<'a> WireCron<'a> {
    pub(super) fn of(entry: &'a CronEntry) -> WireCron<'a> {
        let row = &entry.row;
        let template = Object::parse(&row.job_template).unwrap_or_default();
        let options = template.get("options");
        let options_obj = options
            .and_then(|o| Object::from_raw(o).ok())
            .unwrap_or_default();
        let text = |raw: Option<&RawValue>| raw.and_then(|r| json::decode::<String>(r).ok());
        let raw_or = |raw: Option<&RawValue>, empty: &str| {
            json::raw(raw.map_or_else(|| empty.to_owned(), |r| r.get().to_owned()))
        };
        WireCron {
            id: &row.name,
            name: &row.name,
            expression: &row.expression,
            cron: &row.expression,
            schedule: &row.expression,
            timezone: &row.timezone,
            overlap_policy: &row.overlap_policy,
            enabled: row.enabled,
            status: if row.enabled { "active" } else { "disabled" },
            description: row.description.as_deref(),
            job_template: json::raw(row.job_template.clone()),
            job_type: text(template.get("type")).unwrap_or_default(),
            queue: text(template.get("queue"))
                .or_else(|| text(options_obj.get("queue")))
                .unwrap_or_else(|| DEFAULT_QUEUE.to_owned()),
            args: raw_or(template.get("args"), "[]"),
            meta: raw_or(
                template.get("meta").or_else(|| options_obj.get("meta")),
                "{}",
            ),
            options: raw_or(options, "{}"),
            last_run_at: row.last_run_at.map(timestamp::format),
            next_run_at: entry.next_run_at.map(timestamp::format),
            run_count: row.run_count,
            created_at: timestamp::format(row.created_at),
            updated_at: timestamp::format(row.updated_at),
        }
    }
}

/// An entry, as `cron` and again as `cron_job`.
#[derive(Serialize, ToSchema)]
#[schema(as = CronEntryBody)]
struct CronBody<'a> {
    cron: &'a WireCron<'a>,
    /// The same as `cron`.
    cron_job: &'a WireCron<'a>,
}

fn entry_body(entry: &CronEntry, status: StatusCode) -> Response {
    let wire = WireCron::of(entry);
    Ojs(
        status,
        CronBody {
            cron: &wire,
            cron_job: &wire,
        },
    )
    .into_response()
}

/// A registration: the entry's fields, and its job as `job_template` or as enqueue attributes
/// at the top level (`type`, `args`, `meta`, `options`, ...). The expression is `expression`,
/// `cron` or `schedule` (one is required, and any two must agree).
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: `cron::parse` reads the body
struct CronRequest {
    #[schema(value_type = CronName)]
    name: String,
    #[serde(flatten)]
    fields: CronPatch,
    /// The job type, when the job is given at the top level instead of as `job_template`.
    #[serde(rename = "type")]
    job_type: Option<String>,
}

/// The fields of an entry to change: any of a registration's, the name excepted (it may be
/// sent if unchanged). `job_template`, and enqueue attributes at the top level, are merged key
/// by key over the stored template.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: `cron::patched` reads the body
pub(super) struct CronPatch {
    #[schema(value_type = Option<CronName>)]
    name: Option<String>,
    /// 5 fields (`minute hour day-of-month month day-of-week`), 6 with a leading `second`, an
    /// alias (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`)
    /// or `@every <duration>` (whole seconds, at least 1 s). Fields take `*`, `,`, `-`, `/`,
    /// names (`JAN`, `MON`), `L`, `W` and `#`.
    #[schema(min_length = 1)]
    expression: Option<String>,
    /// The same as `expression`.
    #[schema(min_length = 1)]
    cron: Option<String>,
    /// The same as `expression`.
    #[schema(min_length = 1)]
    schedule: Option<String>,
    /// IANA `Area/Location` name or `UTC` (default); offsets and abbreviations are refused.
    #[schema(min_length = 1)]
    timezone: Option<String>,
    /// `skip` (default), `allow`, `cancel_previous` (or `cancel`), `enqueue`.
    #[schema(pattern = "^(skip|allow|cancel_previous|cancel|enqueue)$")]
    overlap_policy: Option<String>,
    /// Default `true`.
    enabled: Option<bool>,
    #[schema(max_length = 10000)]
    description: Option<String>,
    /// The job each run enqueues: an enqueue body (`type`, `args` (default `[]`), `meta`,
    /// `options`, ...) without `id`, `scheduled_at`, `delay_until` or `unique`.
    #[schema(value_type = Object, required = false)]
    job_template: Option<serde_json::Value>,
}

/// `POST /ojs/v1/cron`: registers an entry, or updates the one of that name.
#[utoipa::path(
    post,
    path = "/ojs/v1/cron",
    tag = "cron",
    operation_id = "register_cron",
    summary = "Register (or update) a cron entry",
    description = "Upsert by name (the cron extension's rule, which wins over the HTTP \
                   binding's 409): 201 for a new entry, 200 for an existing one, which keeps its \
                   next occurrence when its schedule did not change. The whole body is checked \
                   before anything is written.",
    request_body = CronRequest,
    responses(
        (status = 201, description = "Registered; `Location` names the entry.", body = CronBody<'_>),
        (status = 200, description = "Updated (or unchanged).", body = CronBody<'_>),
        (status = 400, description = "A field is invalid; `details` names it."),
        (status = 413, description = "The template is larger than the largest enqueue envelope."),
        (status = 422, description = "The template's retry policy is invalid."),
    )
)]
async fn register(
    State(state): State<AppState>,
    tenant: Tenant,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let def = cron::parse(
        fields.object(),
        &state.broker().settings().limits,
        state.settings().max_envelope_bytes,
        tenant.id(),
    )
    .map_err(crate::Error::from)?;
    let (entry, created) = state.broker().register_cron(&def).await?;
    if !created {
        return Ok(entry_body(&entry, StatusCode::OK));
    }
    let mut response = entry_body(&entry, StatusCode::CREATED);
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/cron/{}", entry.row.name)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The `enabled` filter of a list.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct EnabledParam {
    /// Only enabled (`true`) or disabled (`false`) entries.
    enabled: Option<bool>,
}

impl EnabledParam {
    fn from_query(query: &QueryParams) -> Result<EnabledParam, ApiError> {
        let enabled = match query.get("enabled") {
            None | Some("") => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => {
                return Err(ApiError::invalid_field(
                    "query.enabled",
                    format!("'enabled' must be true or false, not {other:?}"),
                ));
            }
        };
        Ok(EnabledParam { enabled })
    }
}

/// The page of entries a list asks for (`enabled`, pages), and its `pagination`.
pub(super) async fn page_of(
    state: &AppState,
    tenant: &Tenant,
    query: &QueryParams,
) -> Result<(Vec<CronEntry>, Pagination), ApiError> {
    let EnabledParam { enabled } = EnabledParam::from_query(query)?;
    let page = Page::from_query(query, DATA_PLANE)?;
    let (entries, total) = state
        .broker()
        .cron_entries(enabled, tenant.id(), page.offset, page.limit)
        .await?;
    Ok((entries, page.describe(total)))
}

/// A page of entries.
#[derive(Serialize, ToSchema)]
#[schema(as = CronList)]
struct CronList<'a> {
    /// Entries by name.
    crons: &'a [WireCron<'a>],
    /// The same as `crons`.
    cron_jobs: &'a [WireCron<'a>],
    /// Entries in all (matching the filter).
    count: i64,
    pagination: Pagination,
}

/// `GET /ojs/v1/cron`: entries by name.
#[utoipa::path(
    get,
    path = "/ojs/v1/cron",
    tag = "cron",
    operation_id = "list_cron",
    summary = "List cron entries",
    params(EnabledParam, Page),
    responses(
        (status = 200, body = CronList<'_>),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let (entries, pagination) = page_of(&state, &tenant, &query).await?;
    let wire: Vec<WireCron<'_>> = entries.iter().map(WireCron::of).collect();
    Ok(ok(CronList {
        crons: &wire,
        cron_jobs: &wire,
        count: pagination.total,
        pagination,
    })
    .into_response())
}

/// `GET /ojs/v1/cron/{name}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    operation_id = "get_cron",
    summary = "Read a cron entry",
    params(CronNamePath),
    responses(
        (status = 200, body = CronBody<'_>),
        (status = 400, description = "The name is invalid."),
        (status = 404, description = "No such entry."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(CronNamePath(name)): Path<CronNamePath>,
) -> Result<Response, ApiError> {
    name_of("path.name", &name)?;
    let entry = state.broker().cron_entry(&name).await?;
    Ok(entry_body(&entry, StatusCode::OK))
}

/// `PATCH /ojs/v1/cron/{name}`: changes some fields (`{"enabled": false}` disables it).
#[utoipa::path(
    patch,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    operation_id = "change_cron",
    summary = "Change, enable or disable a cron entry",
    description = "Any field of a registration but the name; `job_template` (and template \
                   attributes sent at the top level) are merged key by key over the stored \
                   template. The result is checked as a whole registration. Disabling sets \
                   `next_run_at` to null; enabling, or changing the schedule, counts the next \
                   occurrence from now.",
    params(CronNamePath),
    request_body = CronPatch,
    responses(
        (status = 200, body = CronBody<'_>),
        (status = 400, description = "A field is invalid; `details` names it."),
        (status = 404, description = "No such entry."),
        (status = 413, description = "The template is larger than the largest enqueue envelope."),
        (status = 422, description = "The template's retry policy is invalid."),
    )
)]
async fn change(
    State(state): State<AppState>,
    Path(CronNamePath(name)): Path<CronNamePath>,
    tenant: Tenant,
    body: JsonBody,
) -> Result<Response, ApiError> {
    name_of("path.name", &name)?;
    let fields = body.object()?;
    let max = state.settings().max_envelope_bytes;
    let entry = state
        .broker()
        .patch_cron(&name, fields.object(), max, tenant.id())
        .await?;
    Ok(entry_body(&entry, StatusCode::OK))
}

/// A deleted entry.
#[derive(Serialize, ToSchema)]
#[schema(as = CronDeleted)]
struct Deleted<'a> {
    /// The entry as it was.
    cron: &'a WireCron<'a>,
    /// The same as `cron`.
    cron_job: &'a WireCron<'a>,
    /// Always `true`.
    deleted: bool,
    name: &'a str,
}

/// `DELETE /ojs/v1/cron/{name}`: jobs it enqueued are untouched.
#[utoipa::path(
    delete,
    path = "/ojs/v1/cron/{name}",
    tag = "cron",
    operation_id = "delete_cron",
    summary = "Delete a cron entry",
    description = "Jobs the entry enqueued are untouched; its run ledger stays until retention \
                   removes it (so an entry registered again under the name never repeats an \
                   occurrence).",
    params(CronNamePath),
    responses(
        (status = 200, body = Deleted<'_>),
        (status = 400, description = "The name is invalid."),
        (status = 404, description = "No such entry."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Path(CronNamePath(name)): Path<CronNamePath>,
) -> Result<Response, ApiError> {
    name_of("path.name", &name)?;
    let entry = state.broker().delete_cron(&name).await?;
    let wire = WireCron::of(&entry);
    Ok(ok(Deleted {
        cron: &wire,
        cron_job: &wire,
        deleted: true,
        name: &entry.row.name,
    })
    .into_response())
}

/// One occurrence in the run ledger.
#[derive(Serialize, ToSchema)]
#[schema(as = CronRun)]
struct WireRun {
    /// The occurrence (the instant the schedule names).
    scheduled_at: String,
    /// `enqueued` or `skipped`.
    outcome: String,
    /// Why a skipped occurrence made no job: `overlap_skip` or `enqueue_failed`.
    #[schema(required = true)]
    reason: Option<String>,
    #[schema(required = true, value_type = Option<JobId>)]
    job_id: Option<uuid::Uuid>,
    /// Earlier occurrences this run stands for (after downtime).
    missed: i64,
    /// For `enqueue_failed`: why the queue refused the job.
    #[schema(required = true, value_type = Option<Object>)]
    error: Option<serde_json::Value>,
    /// When the occurrence was handled.
    fired_at: String,
}

impl WireRun {
    fn of(run: &CronRun) -> WireRun {
        WireRun {
            scheduled_at: timestamp::format(run.scheduled_at),
            outcome: run.outcome.clone(),
            reason: run.reason.clone(),
            job_id: run.job_id,
            missed: run.missed,
            error: run.error.clone(),
            fired_at: timestamp::format(run.fired_at),
        }
    }
}

/// An entry's latest runs.
#[derive(Serialize, ToSchema)]
#[schema(as = CronRuns)]
struct Runs {
    /// Newest first.
    runs: Vec<WireRun>,
}

/// `GET /ojs/v1/cron/{name}/runs`: the entry's latest occurrences from the run ledger.
#[utoipa::path(
    get,
    path = "/ojs/v1/cron/{name}/runs",
    tag = "cron",
    operation_id = "list_cron_runs",
    summary = "An entry's latest runs",
    description = "One row per occurrence that came due: the job enqueued, or why none was. \
                   Occurrences skipped by a daylight-saving change have no row (they are \
                   `cron.skipped` events).",
    params(
        CronNamePath,
        ("limit" = Option<i64>, Query, minimum = 0,
         description = "At most this many (default 50, at most 200; larger values are lowered to 200)."),
    ),
    responses(
        (status = 200, body = Runs),
        (status = 400, description = "The name or limit is invalid."),
        (status = 404, description = "No such entry."),
    )
)]
async fn runs(
    State(state): State<AppState>,
    Path(CronNamePath(name)): Path<CronNamePath>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    name_of("path.name", &name)?;
    let limit = query
        .count("limit")?
        .unwrap_or(DATA_PLANE.default)
        .clamp(1, DATA_PLANE.max);
    let runs = state.broker().cron_runs(&name, limit).await?;
    Ok(ok(Runs {
        runs: runs.iter().map(WireRun::of).collect(),
    })
    .into_response())
}
