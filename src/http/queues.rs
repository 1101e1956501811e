//! `/ojs/v1/queues`: queues as resources — listing, explicit creation, pause and resume,
//! live statistics and priority statistics (see the [OJS queue endpoints] and the queue
//! configuration extension's [queue management endpoints]).
//!
//! [OJS queue endpoints]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#11-queue-endpoints
//! [queue management endpoints]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#91-queue-management-endpoints

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::Utc;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::error::ApiError;
use super::extract::{JsonBody, OptionalJsonBody};
use super::query::{DATA_PLANE, Page, Pagination, QueryParams};
use super::{AppState, Ojs, ok};
use crate::broker::{DeleteStrategy, Queue, QueueConfigs, QueueStats};
use crate::broker::{QueueCounts, QueueState};
use crate::job::is_valid_queue;
use crate::queue_config::DEFAULT_QUEUE;
use crate::timestamp;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/queues", get(list).post(create))
        .route("/ojs/v1/queues/{name}", get(show).delete(delete_queue))
        .route("/ojs/v1/queues/{name}/stats", get(stats))
        .route("/ojs/v1/queues/{name}/pause", post(pause))
        .route("/ojs/v1/queues/{name}/resume", post(resume))
        .route("/ojs/v1/admin/queues/{name}/pause", post(pause))
        .route("/ojs/v1/admin/queues/{name}/resume", post(resume))
        .route("/ojs/v1/queues/{name}/priority-stats", get(priority_stats))
        .route(
            "/ojs/v1/queues/{name}/config",
            get(show_config).put(put_config),
        )
        .route(
            "/ojs/v1/admin/queues/{name}/config",
            get(show_config).put(put_config),
        )
}

/// The queue object ([OJS queue details]), with its resolved configuration.
///
/// [OJS queue details]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#93-get-queue-details
#[derive(Serialize)]
struct QueueBody<'a> {
    name: &'a str,
    state: QueueState,
    /// `state` again, for binding clients.
    status: QueueState,
    paused: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_at: Option<String>,
    config: serde_json::Value,
    created_at: String,
    updated_at: String,
}

impl<'a> QueueBody<'a> {
    fn of(q: &'a Queue, configs: &QueueConfigs) -> QueueBody<'a> {
        let paused = q.state == QueueState::Paused;
        QueueBody {
            name: &q.name,
            state: q.state,
            status: q.state,
            paused,
            paused_at: paused
                .then_some(q.paused_at)
                .flatten()
                .map(timestamp::format),
            config: configs.of(&q.name).to_json(),
            created_at: timestamp::format(q.created_at),
            updated_at: timestamp::format(q.updated_at),
        }
    }
}

/// Current counts by state (the `counts` of a listed queue).
#[derive(Serialize)]
struct Counts {
    available: i64,
    active: i64,
    scheduled: i64,
    retryable: i64,
    pending: i64,
}

impl Counts {
    fn of(c: &QueueCounts) -> Counts {
        Counts {
            available: c.available,
            active: c.active,
            scheduled: c.scheduled,
            retryable: c.retryable,
            pending: c.pending,
        }
    }
}

/// `GET /ojs/v1/queues?state=&limit=&offset=`: queues by name, with their current counts.
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, DATA_PLANE)?;
    let filter = match query.get("state") {
        None => None,
        Some("active") => Some(QueueState::Active),
        Some("paused") => Some(QueueState::Paused),
        Some("draining") => Some(QueueState::Draining),
        Some(other) => {
            return Err(ApiError::invalid_field(
                "query.state",
                format!("'state' must be active, paused or draining, not {other:?}"),
            ));
        }
    };
    let (queues, total) = state
        .broker()
        .queues(filter, page.limit, page.offset)
        .await?;
    let configs = state.broker().queue_configs().await?;

    #[derive(Serialize)]
    struct Listed<'a> {
        #[serde(flatten)]
        queue: QueueBody<'a>,
        counts: Counts,
    }
    #[derive(Serialize)]
    struct ListBody<'a> {
        queues: Vec<Listed<'a>>,
        pagination: Pagination,
    }
    Ok(ok(ListBody {
        queues: queues
            .iter()
            .map(|q| Listed {
                queue: QueueBody::of(&q.queue, &configs),
                counts: Counts::of(&q.counts),
            })
            .collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `POST /ojs/v1/queues` with `{"name", "config"?}`: 201 with the queue, 409 if it exists.
async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let name = fields.required_string("name")?;
    check_queue_name("$.name", &name)?;
    let config = match fields.raw("config") {
        None => None,
        Some(raw) => Some(
            serde_json::from_str::<serde_json::Value>(raw.get())
                .map_err(|_| ApiError::invalid_field("$.config", "'config' must be an object"))?,
        ),
    };
    let broker = state.broker();
    let queue = broker.create_queue(&name, config.as_ref()).await?;
    let configs = broker.queue_configs().await?;
    let mut response = Ojs(StatusCode::CREATED, QueueBody::of(&queue, &configs)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/queues/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /ojs/v1/queues/{name}`: the queue with its `stats`.
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let QueueStats { queue, counts } = state.broker().queue_stats(&name).await?;
    let configs = state.broker().queue_configs().await?;

    #[derive(Serialize)]
    struct Stats {
        depth: i64,
        available: i64,
        active: i64,
        retryable: i64,
        scheduled: i64,
        pending: i64,
        completed_today: i64,
        failed_today: i64,
    }
    #[derive(Serialize)]
    struct Shown<'a> {
        #[serde(flatten)]
        queue: QueueBody<'a>,
        stats: Stats,
    }
    Ok(ok(Shown {
        queue: QueueBody::of(&queue, &configs),
        stats: Stats {
            depth: counts.depth(),
            available: counts.available,
            active: counts.active,
            retryable: counts.retryable,
            scheduled: counts.scheduled,
            pending: counts.pending,
            completed_today: counts.completed_today,
            failed_today: counts.failed_today,
        },
    })
    .into_response())
}

/// `GET /ojs/v1/queues/{name}/stats` ([OJS queue statistics]): exact current counts of the
/// queue's retained jobs, and its last hour.
///
/// [OJS queue statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#112-queue-statistics
async fn stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let QueueStats { queue, counts: c } = state.broker().queue_stats(&name).await?;
    let max_size = state.broker().queue_configs().await?.of(&name).max_size;
    let paused = queue.state == QueueState::Paused;
    let round = |ms: Option<f64>| ms.map(|v| v.round() as i64);
    Ok(ok(serde_json::json!({
        "queue": {
            "name": queue.name, "state": queue.state, "paused": paused, "depth": c.depth(),
            "available": c.available, "active": c.active, "scheduled": c.scheduled,
            "retryable": c.retryable, "pending": c.pending, "completed": c.completed,
            "discarded": c.discarded, "cancelled": c.cancelled, "dead_letter": c.dead_letter,
            "max_size": max_size,
        },
        "stats": {
            "queue": queue.name, "depth": c.depth(), "available": c.available,
            "active": c.active, "scheduled": c.scheduled, "retryable": c.retryable,
            "pending": c.pending, "completed": c.completed, "discarded": c.discarded,
            "cancelled": c.cancelled, "dead_letter": c.dead_letter, "max_depth": max_size,
            "completed_last_hour": c.completed_last_hour,
            "failed_last_hour": c.failed_last_hour,
            "avg_duration_ms": round(c.avg_duration_ms),
            "avg_wait_ms": round(c.avg_wait_ms),
            "throughput_per_second": c.completed_last_hour as f64 / 3600.0,
        },
        "status": queue.state,
        "computed_at": timestamp::format(Utc::now()),
    }))
    .into_response())
}

/// `DELETE /ojs/v1/queues/{name}` with `strategy` (`reject`, `discard`, `move`) and, for
/// `move`, `target_queue`, in the body or the query ([OJS delete queue]): 202.
///
/// [OJS delete queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#94-delete-queue
async fn delete_queue(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let option = |key: &str| -> Result<Option<String>, ApiError> {
        match fields.as_ref().map(|f| f.string(key)).transpose()? {
            Some(Some(v)) => Ok(Some(v)),
            _ => Ok(query.get(key).map(str::to_owned)),
        }
    };
    let strategy = match option("strategy")?.as_deref() {
        Some("reject") => DeleteStrategy::Reject,
        Some("discard") => DeleteStrategy::Discard,
        Some("move") => {
            let target = option("target_queue")?.ok_or_else(|| {
                ApiError::invalid_field(
                    "$.target_queue",
                    "'target_queue' is required with strategy move",
                )
            })?;
            if !is_valid_queue(&target) || target == name {
                return Err(ApiError::invalid_field(
                    "$.target_queue",
                    format!("'target_queue' must be a valid queue name other than {name:?}"),
                ));
            }
            DeleteStrategy::Move(target)
        }
        other => {
            return Err(ApiError::invalid_field(
                "$.strategy",
                format!(
                    "'strategy' is required: reject, discard or move{}",
                    other.map(|o| format!(", not {o:?}")).unwrap_or_default()
                ),
            ));
        }
    };
    let deleted = state.broker().delete_queue(&name, &strategy).await?;
    let mut body = serde_json::json!({
        "queue": name,
        "strategy": strategy.name(),
        "jobs_affected": deleted.jobs_affected,
        "state": if deleted.draining { "draining" } else { "deleted" },
    });
    if let DeleteStrategy::Move(target) = &strategy {
        body["target_queue"] = serde_json::json!(target);
    }
    Ok(Ojs(StatusCode::ACCEPTED, body).into_response())
}

/// `POST /ojs/v1/queues/{name}/pause`.
async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&state, &name, true).await
}

/// `POST /ojs/v1/queues/{name}/resume`.
async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&state, &name, false).await
}

/// Pause or resume ([OJS pause queue], [resume queue]): creates an unknown queue, idempotent.
///
/// [OJS pause queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#113-pause-queue
/// [resume queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#114-resume-queue
async fn set_paused(state: &AppState, name: &str, paused: bool) -> Result<Response, ApiError> {
    queue_path(name)?;
    let queue = state.broker().set_queue_paused(name, paused).await?;
    let (key, at) = if paused {
        ("paused_at", queue.paused_at)
    } else {
        ("resumed_at", queue.resumed_at)
    };
    let summary = serde_json::json!({
        "name": queue.name, "paused": paused, "state": queue.state,
    });
    let mut body = serde_json::json!({
        "queue": summary, "name": queue.name, "paused": paused, "state": queue.state,
    });
    body[key] = serde_json::json!(at.map(timestamp::format));
    Ok(ok(body).into_response())
}

/// A queue name of a configuration path: a queue, or `_default`.
fn config_path(name: &str) -> Result<(), ApiError> {
    if name == DEFAULT_QUEUE {
        Ok(())
    } else {
        queue_path(name)
    }
}

/// `GET /ojs/v1/queues/{name}/config` (and `_default`, and the admin alias): the resolved
/// configuration.
async fn show_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    config_path(&name)?;
    let config = state.broker().queue_config(&name).await?;
    Ok(ok(serde_json::json!({"name": name, "config": config.to_json()})).into_response())
}

/// `PUT /ojs/v1/queues/{name}/config` (and `_default`, and the admin alias): merges the body
/// into the queue's own configuration (creating an unknown queue); 200 with the queue object.
async fn put_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    config_path(&name)?;
    body.object()?;
    let value: serde_json::Value = serde_json::from_str(body.text())
        .map_err(|_| ApiError::invalid_field("$", "the body must be a JSON object"))?;
    let broker = state.broker();
    let config = broker.set_queue_config(&name, &value).await?;
    if name == DEFAULT_QUEUE {
        return Ok(
            ok(serde_json::json!({"name": name, "config": config.to_json()})).into_response(),
        );
    }
    let queue = broker.queue(&name).await?;
    let configs = broker.queue_configs().await?;
    Ok(ok(QueueBody::of(&queue, &configs)).into_response())
}

/// A queue name found at `field` of a request, validated.
pub fn check_queue_name(field: &str, name: &str) -> Result<(), ApiError> {
    if is_valid_queue(name) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            field,
            format!(
                "queue name {name:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.'"
            ),
        ))
    }
}

/// The queue name of a path, validated.
pub fn queue_path(name: &str) -> Result<(), ApiError> {
    check_queue_name("path.name", name)
}

/// `GET /ojs/v1/queues/{name}/priority-stats` ([OJS priority statistics]): available jobs per
/// stored priority, most urgent first, only the priorities that have jobs: as the
/// `counts_by_priority` object of the priority extension and as the `distribution` list
/// (`{priority, count}`) the OJS admin UI reads.
///
/// [OJS priority statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-priority.md#103-priority-statistics
async fn priority_stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let counts = state.broker().priority_stats(&name).await?;

    #[derive(Serialize)]
    struct Bucket {
        priority: i32,
        count: i64,
    }
    #[derive(Serialize)]
    struct PriorityStats {
        queue: String,
        counts_by_priority: ByPriority,
        distribution: Vec<Bucket>,
        total: i64,
    }
    Ok(ok(PriorityStats {
        total: counts.iter().map(|(_, n)| n).sum(),
        distribution: counts
            .iter()
            .map(|&(priority, count)| Bucket { priority, count })
            .collect(),
        counts_by_priority: ByPriority(counts),
        queue: name,
    })
    .into_response())
}

/// Counts keyed by priority, written as a JSON object in the order given (numeric order; a
/// sorted map of strings would put "10" before "2").
struct ByPriority(Vec<(i32, i64)>);

impl Serialize for ByPriority {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (priority, jobs) in &self.0 {
            map.serialize_entry(&priority.to_string(), jobs)?;
        }
        map.end()
    }
}
