//! Shapes several resources share: the path parameters of a job, a queue and a worker, the
//! wrapped job body, a job's progress and recorded steps, and the figures the admin overviews show (job counts by state, recent
//! throughput). A resource module never imports another; what two of them answer alike is
//! defined here.

use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::openapi;
use crate::broker::RECENT_WINDOW;
use crate::job::JobState;
use crate::job::wire::WireJob;
use crate::wire::timestamp;

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

/// A job's progress: the current attempt's latest report.
#[derive(Serialize, ToSchema)]
#[schema(as = JobProgress)]
pub(crate) struct ProgressBody<'a> {
    job_id: String,
    state: JobState,
    /// 0 to 1: 0 before any report, 1 once the job completed.
    progress: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    data: Option<&'a RawValue>,
    /// RFC 3339: when the report was made; absent before any.
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_at: Option<String>,
}

impl ProgressBody<'_> {
    /// The progress as an SSE event's data.
    pub(crate) fn render(p: &crate::broker::Progress) -> String {
        serde_json::to_string(&ProgressBody::of(p)).unwrap_or_default()
    }
}

impl<'a> ProgressBody<'a> {
    pub(crate) fn of(p: &'a crate::broker::Progress) -> ProgressBody<'a> {
        ProgressBody {
            job_id: p.job_id.to_string(),
            state: p.state,
            progress: p.progress,
            message: p.message.as_deref(),
            data: p.data.as_ref().map(|d| &*d.0),
            updated_at: p.updated_at.map(timestamp::format),
        }
    }
}

/// A recorded step (durable execution): the answer to its record, a member of a job's steps,
/// and the `step` of the error that refuses a second record.
#[derive(Serialize, ToSchema)]
#[schema(as = JobStep)]
pub(crate) struct StepView<'a> {
    #[schema(value_type = crate::job::JobId)]
    job_id: String,
    name: &'a str,
    /// What the step returned (null: nothing).
    #[schema(value_type = Option<serde_json::Value>)]
    result: Option<&'a RawValue>,
    /// The job's attempt that recorded it.
    attempt: i32,
    /// The worker that recorded it, when it said (or the job's holder then).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::job::id_schema::WorkerId>)]
    worker_id: Option<&'a str>,
    #[schema(value_type = openapi::values::Timestamp)]
    recorded_at: String,
}

impl<'a> StepView<'a> {
    pub(crate) fn of(step: &'a crate::job::durable::Step) -> StepView<'a> {
        StepView {
            job_id: step.job_id.to_string(),
            name: &step.name,
            result: step.result.as_ref().map(|r| &*r.0),
            attempt: step.attempt,
            worker_id: step.worker_id.as_deref(),
            recorded_at: timestamp::format(step.recorded_at),
        }
    }
}
