//! The queue object every queue route answers: name, state, counts and configuration.

use crate::broker::{Queue, QueueConfigs};
use crate::broker::{QueueCounts, QueueState};
use crate::queue_config::WireConfig;
use crate::wire::timestamp;
use serde::Serialize;
use utoipa::ToSchema;

/// The queue object ([OJS queue details]), with its resolved configuration.
///
/// [OJS queue details]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#93-get-queue-details
#[derive(Serialize, ToSchema)]
#[schema(as = Queue)]
pub(super) struct QueueBody<'a> {
    name: &'a str,
    state: QueueState,
    /// `state` again, for binding clients.
    status: QueueState,
    paused: bool,
    /// While paused, when it was paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_at: Option<String>,
    config: WireConfig<'a>,
    created_at: String,
    updated_at: String,
}

/// Current counts by state (the `counts` of a listed queue).
#[derive(Serialize, ToSchema)]
#[schema(as = QueueJobCounts)]
pub(super) struct Counts {
    available: i64,
    active: i64,
    scheduled: i64,
    retryable: i64,
    pending: i64,
}

impl<'a> QueueBody<'a> {
    pub(super) fn of(q: &'a Queue, configs: &'a QueueConfigs) -> QueueBody<'a> {
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
            config: configs.of(&q.name).wire(),
            created_at: timestamp::format(q.created_at),
            updated_at: timestamp::format(q.updated_at),
        }
    }
}

impl Counts {
    pub(super) fn of(c: &QueueCounts) -> Counts {
        Counts {
            available: c.available,
            active: c.active,
            scheduled: c.scheduled,
            retryable: c.retryable,
            pending: c.pending,
        }
    }
}
