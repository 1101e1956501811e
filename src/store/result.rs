//! Statements behind a job's result (the OJS results extension, migration V32): what a client
//! reads, and the flag that has the end of an awaited job announced on [`JOB_ENDED_CHANNEL`].

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::{JobState, RawJson};

/// The channel on which the end of an awaited job is announced (its id), by the triggers of
/// migration V32.
pub const JOB_ENDED_CHANNEL: &str = "ojs_job_ended";

/// A job's outcome as the result routes show it.
#[derive(Debug, Clone)]
pub struct ResultRow {
    pub id: Uuid,
    pub state: JobState,
    /// The ACK's result (a completed job's).
    pub result: Option<RawJson>,
    /// The last error (a discarded job's).
    pub error: Option<RawJson>,
    /// When the job ended (`None`: it has not).
    pub ended_at: Option<DateTime<Utc>>,
    /// The job's `result_ttl` attribute, as sent (validated at enqueue; `None` when absent or
    /// not an integer).
    pub result_ttl: Option<i64>,
    /// The result's size as stored, in bytes (`None`: no result).
    pub size_bytes: Option<i32>,
}

/// Marks job `id` as awaited, unless it has ended or is marked already (a second waiter writes
/// nothing). Run before reading the job (in its own statement, so that the read sees the flag
/// committed): an end committed after that read finds the flag and is announced. Returns
/// whether the job existed unfinished.
pub async fn mark_awaited(db: impl PgExecutor<'_>, id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with job as (
            select id, result_awaited from ojs_job
             where id = $1 and state not in ('completed', 'cancelled', 'discarded')
        ),
        flagged as (
            update ojs_job j
               set result_awaited = true
              from job
             where j.id = job.id and job.result_awaited is not true
        )
        select exists (select 1 from job) as "unfinished!"
        "#,
        id,
    )
    .fetch_one(db)
    .await
}

/// The outcome of each of `ids` that exists (in no particular order).
pub async fn read(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<ResultRow>, sqlx::Error> {
    sqlx::query_as!(
        ResultRow,
        r#"
        select j.id as "id!", j.state as "state!: JobState", j.result as "result?: RawJson",
               j.error as "error?: RawJson",
               coalesce(j.completed_at, j.cancelled_at, j.discarded_at) as "ended_at?",
               case when json_typeof(j.extra -> 'result_ttl') = 'number'
                         and (j.extra ->> 'result_ttl') ~ '^-?[0-9]{1,10}$'
                    then (j.extra ->> 'result_ttl')::int8 end as "result_ttl?",
               octet_length(j.result::text) as "size_bytes?"
          from ojs_job_all j
         where j.id = any($1::uuid[])
        "#,
        ids,
    )
    .fetch_all(db)
    .await
}
