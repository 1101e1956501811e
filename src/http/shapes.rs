//! Shapes several resources share: the path parameters of a job, a queue and a worker, the
//! wrapped job body, and the figures the admin overviews show (job counts by state, recent
//! throughput). A resource module never imports another; what two of them answer alike is
//! defined here.

use serde::Serialize;
use utoipa::ToSchema;

use super::openapi;
use crate::broker::RECENT_WINDOW;
use crate::job::wire::WireJob;

/// `{"job": {...}}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct JobBody<'a> {
    #[schema(value_type = openapi::Job)]
    pub(crate) job: WireJob<'a>,
}

/// A job wrapped as `{"job": ...}` with the same attributes also beside `job`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct WrappedJob {
    job: openapi::Job,
    #[serde(flatten)]
    bare: openapi::Job,
}

/// Jobs finished per minute over the recent window.
#[derive(Serialize, ToSchema)]
#[schema(as = RecentThroughput)]
pub(crate) struct Throughput {
    /// Completed.
    processed_per_minute: f64,
    /// Discarded.
    failed_per_minute: f64,
}

impl Throughput {
    /// From the jobs completed and discarded within [`RECENT_WINDOW`].
    pub(crate) fn of(completed: i64, discarded: i64) -> Throughput {
        let minutes = RECENT_WINDOW.as_secs_f64() / 60.0;
        Throughput {
            processed_per_minute: completed as f64 / minutes,
            failed_per_minute: discarded as f64 / minutes,
        }
    }
}
