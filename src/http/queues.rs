//! `/ojs/v1/queues/{name}/…`: per-queue views.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::error::ApiError;
use super::{AppState, ok};
use crate::error::Error;
use crate::job::is_valid_queue;
use crate::store;

pub fn router() -> Router<AppState> {
    Router::new().route("/ojs/v1/queues/{name}/priority-stats", get(priority_stats))
}

/// The queue name of a path, validated.
pub fn queue_path(name: &str) -> Result<(), ApiError> {
    if is_valid_queue(name) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            "path.name",
            format!(
                "queue name {name:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.'"
            ),
        ))
    }
}

/// `GET /ojs/v1/queues/{name}/priority-stats` (priority extension §10.3): available jobs per
/// stored priority, most urgent first, only the priorities that have jobs.
async fn priority_stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let pool = state.broker().pool();
    let counts = store::job::available_by_priority(pool, Some(&name))
        .await
        .map_err(Error::from)?;
    if counts.is_empty()
        && !store::job::queue_known(pool, &name)
            .await
            .map_err(Error::from)?
    {
        return Err(ApiError::not_found("queue", &name));
    }

    #[derive(Serialize)]
    struct PriorityStats {
        queue: String,
        counts_by_priority: ByPriority,
        total: i64,
    }
    Ok(ok(PriorityStats {
        total: counts.iter().map(|(_, _, n)| n).sum(),
        counts_by_priority: ByPriority(counts.into_iter().map(|(_, p, n)| (p, n)).collect()),
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
