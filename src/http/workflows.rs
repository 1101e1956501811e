//! `/ojs/v1/workflows`: create a chain, group, batch or dag (all its jobs at once, or nothing),
//! read one with every step's live state, list them, cancel one. The body of a single
//! workflow is `{"workflow": {...}}` with the same members also beside `workflow`, so clients
//! that read either shape (the suites and the Go SDK, the JS SDK and the admin UI) find them.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::JsonBody;
use super::extract::push_context;
use super::openapi;
use super::query::{ADMIN, Page, QueryParams};
use super::tenancy::Tenant;
use super::{AppState, Ojs, ok};
use crate::broker::{WorkflowCancelled, WorkflowNode as NodeRow, WorkflowRow, WorkflowView};
use crate::error::Error;
use crate::job::JobState;
use crate::wire::names;
use crate::wire::timestamp;
use crate::workflow::{self, NodeKind, WorkflowType};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(show, cancel))
        .routes(routes!(cancel_action))
        .routes(routes!(progress))
}

/// A workflow definition. Items are job bodies, validated as a PUSH is.
#[derive(ToSchema)]
#[allow(dead_code)]
struct WorkflowRequest {
    /// `chain`, `group` or `batch`. Absent (or `dag`) for the dependency form: `steps` whose
    /// items also carry `id` (unique) and `depends_on` (ids of the steps they run after).
    r#type: Option<String>,
    name: Option<String>,
    /// Chain: the steps, in order. Dependency form: the steps, each with `id` and `depends_on`.
    steps: Option<Vec<openapi::Enqueue>>,
    /// Group and batch: the member jobs.
    jobs: Option<Vec<openapi::Enqueue>>,
    /// Batch only: at least one of `on_complete`, `on_success`, `on_failure`.
    #[schema(value_type = Option<Object>)]
    callbacks: Option<Value>,
    /// Defaults for every item's `options` (an item's own win).
    #[schema(value_type = Option<Object>)]
    options: Option<Value>,
    /// Priority of every item that names none.
    priority: Option<i32>,
}

/// A workflow's state, as a filter.
#[derive(Clone, Copy)]
enum WorkflowStateName {
    Running,
    Completed,
    Failed,
    Cancelled,
}

names!(WorkflowStateName {
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
});

/// `{"workflow": {...}}`, its members also at the top level.
#[derive(serde::Serialize, ToSchema)]
struct WorkflowBody {
    /// The workflow's members, again beside `workflow`.
    #[serde(flatten)]
    #[schema(ignore)]
    members: Map<String, Value>,
    #[schema(value_type = Object)]
    workflow: Value,
}

/// The workflow of a path.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
struct WorkflowPath(
    /// The workflow's id.
    String,
);

fn workflow_id(segment: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(segment).map_err(|_| ApiError::not_found("workflow", segment))
}

/// `POST /ojs/v1/workflows`.
#[utoipa::path(
    post,
    path = "/ojs/v1/workflows",
    tag = "workflows",
    summary = "Create a workflow: a chain, group, batch or dag of jobs",
    request_body = WorkflowRequest,
    responses(
        (status = 201, description = "Created; `Location` names it.", body = WorkflowBody),
        (status = 400, description = "The definition is invalid (`details.reason`: `invalid_workflow`); nothing was written."),
        (status = 409, description = "A unique policy found a duplicate of an item, or a queue is draining."),
        (status = 422, description = "An item's retry policy is invalid, or it is a nested workflow."),
        (status = 429, description = "A queue is full."),
    )
)]
async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    tenant: Tenant,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let ctx = push_context(&headers)?;
    let fields = body.object()?;
    let definition = workflow::parse(
        fields.object(),
        &state.broker().settings().limits,
        tenant.id(),
    )
    .map_err(Error::from)?;
    for node in &definition.nodes {
        caller.check_queue(&node.job.queue)?;
    }
    let view = state.broker().create_workflow(&definition, &ctx).await?;
    let mut response = Ojs(StatusCode::CREATED, body_of(&view, None)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/workflows/{}", definition.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /ojs/v1/workflows`: newest first, optionally `state`.
#[utoipa::path(
    get,
    path = "/ojs/v1/workflows",
    tag = "workflows",
    summary = "List workflows",
    params(Page, ("state" = inline(Option<WorkflowStateName>), Query, description = "Only workflows in this state")),
    responses(
        (status = 200, description = "`{items, workflows, pagination}`", body = Object),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let filter = match query.get("state") {
        None => None,
        Some(text) => Some(WorkflowStateName::from_name(text).ok_or_else(|| {
            ApiError::invalid_field(
                "state",
                "'state' is one of running, completed, failed, cancelled",
            )
        })?),
    };
    let (rows, total) = state
        .broker()
        .workflows(
            filter.map(WorkflowStateName::as_str),
            tenant.id(),
            page.limit,
            page.offset,
        )
        .await?;
    let items: Vec<Value> = rows.iter().map(summary).collect();
    Ok(ok(json!({
        "items": items,
        "workflows": items,
        "pagination": page.describe(total),
    }))
    .into_response())
}

/// `GET /ojs/v1/workflows/{id}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/workflows/{id}",
    tag = "workflows",
    summary = "Read a workflow with every step's state",
    params(WorkflowPath),
    responses(
        (status = 200, body = WorkflowBody),
        (status = 404, description = "No such workflow."),
    )
)]
async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(WorkflowPath(id)): Path<WorkflowPath>,
) -> Result<Response, ApiError> {
    let view = state.broker().workflow(workflow_id(&id)?).await?;
    check_queues(&caller, &view)?;
    Ok(ok(body_of(&view, None)).into_response())
}

/// `DELETE /ojs/v1/workflows/{id}`: cancel.
#[utoipa::path(
    delete,
    path = "/ojs/v1/workflows/{id}",
    tag = "workflows",
    summary = "Cancel a workflow",
    description = "Steps not started never run: held ones are dropped, enqueued ones are \
                   cancelled. Jobs already running finish, but no longer advance the workflow; \
                   no callback fires.",
    params(WorkflowPath),
    responses(
        (status = 200, body = WorkflowBody),
        (status = 404, description = "No such workflow."),
        (status = 409, description = "The workflow has already ended."),
    )
)]
async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(WorkflowPath(id)): Path<WorkflowPath>,
) -> Result<Response, ApiError> {
    cancelled(&state, &caller, &id).await
}

/// `POST /ojs/v1/workflows/{id}/cancel` (the admin UI's form): as `DELETE`.
#[utoipa::path(
    post,
    path = "/ojs/v1/workflows/{id}/cancel",
    tag = "workflows",
    summary = "Cancel a workflow (as DELETE)",
    params(WorkflowPath),
    responses(
        (status = 200, body = WorkflowBody),
        (status = 404, description = "No such workflow."),
        (status = 409, description = "The workflow has already ended."),
    )
)]
async fn cancel_action(
    State(state): State<AppState>,
    caller: Caller,
    Path(WorkflowPath(id)): Path<WorkflowPath>,
) -> Result<Response, ApiError> {
    cancelled(&state, &caller, &id).await
}

async fn cancelled(state: &AppState, caller: &Caller, id: &str) -> Result<Response, ApiError> {
    let id = workflow_id(id)?;
    if caller.limited() {
        check_queues(caller, &state.broker().workflow(id).await?)?;
    }
    let WorkflowCancelled {
        view,
        stopped,
        completed,
    } = state.broker().cancel_workflow(id).await?;
    let extra = json!({"steps_cancelled": stopped, "steps_already_completed": completed});
    Ok(ok(body_of(&view, Some(extra))).into_response())
}

/// `GET /ojs/v1/workflows/{id}/progress` (the admin UI's): the share of steps (or members) that
/// have finished, and each node's.
#[utoipa::path(
    get,
    path = "/ojs/v1/workflows/{id}/progress",
    tag = "workflows",
    summary = "A workflow's progress, in percent",
    params(WorkflowPath),
    responses(
        (status = 200, description = "`{workflow_id, state, progress, steps: [{id, progress, state}], updated_at}`", body = Object),
        (status = 404, description = "No such workflow."),
    )
)]
async fn progress(
    State(state): State<AppState>,
    caller: Caller,
    Path(WorkflowPath(id)): Path<WorkflowPath>,
) -> Result<Response, ApiError> {
    let view = state.broker().workflow(workflow_id(&id)?).await?;
    check_queues(&caller, &view)?;
    let w = &view.workflow;
    let done = w.completed + w.failed + w.cancelled;
    let percent = |part: i32, whole: i32| f64::from(part) * 100.0 / f64::from(whole.max(1));
    let steps: Vec<Value> = view
        .nodes
        .iter()
        .map(|n| {
            let state = entry_state(n);
            let finished = matches!(state, "completed" | "failed" | "cancelled" | "not_fired");
            json!({"id": entry_id(n), "state": state, "progress": if finished { 100 } else { 0 }})
        })
        .collect();
    let updated_at = view
        .nodes
        .iter()
        .filter_map(|n| n.finished_at.or(n.started_at))
        .chain([w.created_at])
        .chain(w.completed_at)
        .chain(w.cancelled_at)
        .max()
        .unwrap_or(w.created_at);
    Ok(ok(json!({
        "workflow_id": w.id.to_string(),
        "state": w.state,
        "progress": percent(done, w.total),
        "steps": steps,
        "updated_at": timestamp::format(updated_at),
    }))
    .into_response())
}

/// A queue-limited key reads and cancels only workflows all of whose jobs it may use.
fn check_queues(caller: &Caller, view: &WorkflowView) -> Result<(), ApiError> {
    for node in &view.nodes {
        caller.check_queue(&node.queue)?;
    }
    Ok(())
}

/// `{"workflow": w, ...w}` with `extra` members added to `w`.
fn body_of(view: &WorkflowView, extra: Option<Value>) -> WorkflowBody {
    let mut workflow = render(view);
    if let (Some(Value::Object(extra)), Value::Object(map)) = (extra, &mut workflow) {
        map.extend(extra);
    }
    let members = match &workflow {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    WorkflowBody { members, workflow }
}

fn ts(at: Option<chrono::DateTime<chrono::Utc>>) -> Value {
    at.map_or(Value::Null, |at| Value::String(timestamp::format(at)))
}

/// A node's state as a client sees it: its own once decided, else its job's.
fn entry_state(node: &NodeRow) -> &'static str {
    match node.state.as_str() {
        "waiting" => "waiting",
        "completed" => "completed",
        "failed" => "failed",
        "cancelled" => "cancelled",
        "not_fired" => "not_fired",
        _ => match node.job_state {
            Some(JobState::Active) => "active",
            Some(JobState::Completed) => "completed",
            Some(JobState::Discarded) => "failed",
            Some(JobState::Cancelled) => "cancelled",
            _ => "pending",
        },
    }
}

/// A node's `id` as its entry shows it: a dag step's own, else its index.
fn entry_id(node: &NodeRow) -> String {
    node.name.clone().unwrap_or_else(|| node.idx.to_string())
}

/// One node as a step or member entry. `depends_on` names the entries it waits for (the step
/// before it in a chain; its dependencies in a dag; every member, for a batch callback), by
/// their `id`.
fn entry(node: &NodeRow, depends_on: &[String]) -> Value {
    let state = entry_state(node);
    let waiting = matches!(state, "waiting" | "not_fired")
        || node.state == "cancelled" && node.job_state.is_none();
    let job_id = if waiting {
        Value::Null
    } else {
        Value::String(node.job_id.to_string())
    };
    json!({
        "index": node.idx,
        "id": entry_id(node),
        "kind": node.kind,
        "depends_on": depends_on,
        "job_ids": if job_id.is_null() { json!([]) } else { json!([job_id]) },
        "type": node.r#type,
        "queue": node.queue,
        "state": state,
        "job_id": job_id,
        "result": node.result.as_ref().map_or(Value::Null, |r| serde_json::from_str(r.0.get()).unwrap_or(Value::Null)),
        "started_at": ts(node.started_at),
        "completed_at": ts(node.finished_at.filter(|_| matches!(state, "completed" | "failed" | "cancelled"))),
    })
}

/// The workflow object (contract §5.4).
fn render(view: &WorkflowView) -> Value {
    let w = &view.workflow;
    let members: Vec<&NodeRow> = view
        .nodes
        .iter()
        .filter(|n| NodeKind::parse(&n.kind).is_some_and(|k| !k.is_callback()))
        .collect();
    let started_at = view.nodes.iter().filter_map(|n| n.started_at).min();
    let finished_at = w.completed_at.or(w.cancelled_at);
    let mut out = summary(w);
    let map = out.as_object_mut().expect("an object");
    map.insert("started_at".to_owned(), ts(started_at));
    let r#type = WorkflowType::parse(&w.r#type);
    let member_ids: Vec<String> = members.iter().map(|n| entry_id(n)).collect();
    let entries: Vec<Value> = members
        .iter()
        .map(|n| {
            let before: Vec<String> = match r#type {
                Some(WorkflowType::Chain) if n.idx > 0 => vec![(n.idx - 1).to_string()],
                Some(WorkflowType::Dag) => n
                    .depends_on
                    .iter()
                    .flatten()
                    .filter_map(|&i| member_ids.get(usize::try_from(i).ok()?).cloned())
                    .collect(),
                _ => Vec::new(),
            };
            entry(n, &before)
        })
        .collect();
    let callback_entries: Vec<Value> = view
        .nodes
        .iter()
        .filter(|n| NodeKind::parse(&n.kind).is_some_and(NodeKind::is_callback))
        .map(|n| entry(n, &member_ids))
        .collect();
    let (noun, total) = match r#type {
        Some(WorkflowType::Chain | WorkflowType::Dag) => ("steps", "steps_total"),
        _ => ("jobs", "jobs_total"),
    };
    map.insert(total.to_owned(), json!(w.total));
    map.insert(format!("{noun}_completed"), json!(w.completed));
    map.insert(format!("{noun}_failed"), json!(w.failed));
    if noun == "jobs" {
        // The admin UI draws `steps` of every workflow: the members, then the callbacks.
        let mut steps = entries.clone();
        steps.extend(callback_entries.iter().cloned());
        map.insert("steps".to_owned(), Value::Array(steps));
    }
    map.insert(noun.to_owned(), Value::Array(entries));
    if w.r#type == "batch" {
        let mut callbacks = Map::new();
        for e in &callback_entries {
            let kind = e["kind"].as_str().unwrap_or_default().to_owned();
            callbacks.insert(
                kind,
                json!({"type": e["type"], "state": e["state"], "job_id": e["job_id"], "queue": e["queue"]}),
            );
        }
        map.insert("callbacks".to_owned(), Value::Object(callbacks));
    }
    map.insert(
        "metadata".to_owned(),
        json!({
            "created_at": timestamp::format(w.created_at),
            "started_at": ts(started_at),
            "completed_at": ts(finished_at),
            "job_count": w.total,
            "completed_count": w.completed,
            "failed_count": w.failed,
        }),
    );
    if w.failed > 0 || w.failed_step_index.is_some() {
        map.insert("failed_step_index".to_owned(), json!(w.failed_step_index));
        let failed: Vec<String> = members
            .iter()
            .filter(|n| n.state == "failed" || n.state == "cancelled" && n.job_state.is_some())
            .map(|n| n.job_id.to_string())
            .collect();
        map.insert("failed_job_ids".to_owned(), json!(failed));
        map.insert(
            "errors".to_owned(),
            serde_json::from_str(w.errors.0.get()).unwrap_or(Value::Null),
        );
    }
    out
}

/// What the list shows of a workflow.
fn summary(w: &WorkflowRow) -> Value {
    json!({
        "id": w.id.to_string(),
        "type": w.r#type,
        "name": w.name,
        "state": w.state,
        "steps_total": w.total,
        "steps_completed": w.completed,
        "created_at": timestamp::format(w.created_at),
        "completed_at": ts(w.completed_at),
        "cancelled_at": ts(w.cancelled_at),
    })
}
