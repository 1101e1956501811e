//! Statements on `ojs_job_progress`: a running job's progress reports (migration V12).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use sqlx::types::Json;
use uuid::Uuid;

use crate::job::{JobState, RawJson};

/// A job's state and holder, and its current attempt's latest report if any.
#[derive(Debug, Clone)]
pub struct ProgressRow {
    pub state: JobState,
    pub worker_id: Option<String>,
    pub progress: Option<f64>,
    pub message: Option<String>,
    pub data: Option<RawJson>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Records a report for job `id` if it is `active` (and, when `worker` is given, held by that
/// worker), replacing the previous one. `None`: no such job. The row says whether the report
/// was recorded (`updated_at` set) or why not (state, holder).
pub async fn report(
    db: impl PgExecutor<'_>,
    id: Uuid,
    worker: Option<&str>,
    progress: f64,
    message: Option<&str>,
    data: Option<&serde_json::value::RawValue>,
) -> Result<Option<ProgressRow>, sqlx::Error> {
    sqlx::query_as!(
        ProgressRow,
        r#"
        with j as (select id, state, attempt, worker_id from ojs_job_all where id = $1),
             saved as (
                 insert into ojs_job_progress
                        (job_id, attempt, worker_id, progress, message, data, updated_at)
                 select j.id, j.attempt, coalesce($2, j.worker_id), $3, $4, $5, now()
                   from j
                  where j.state = 'active' and ($2::text is null or j.worker_id = $2)
                 on conflict (job_id) do update
                    set attempt = excluded.attempt, worker_id = excluded.worker_id,
                        progress = excluded.progress, message = excluded.message,
                        data = excluded.data, updated_at = excluded.updated_at
                 returning progress, message, data, updated_at
             )
        select j.state as "state!: JobState", j.worker_id,
               s.progress as "progress?", s.message as "message?",
               s.data as "data?: RawJson", s.updated_at as "updated_at?"
          from j left join saved s on true
        "#,
        id,
        worker,
        progress,
        message,
        data.map(|d| Json(d.to_owned())) as Option<RawJson>,
    )
    .fetch_optional(db)
    .await
}

/// Job `id`'s state and its current attempt's latest report; `None`: no such job.
pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<ProgressRow>, sqlx::Error> {
    sqlx::query_as!(
        ProgressRow,
        r#"
        select j.state as "state!: JobState", j.worker_id,
               p.progress as "progress?", p.message as "message?",
               p.data as "data?: RawJson", p.updated_at as "updated_at?"
          from ojs_job_all j
          left join ojs_job_progress p on p.job_id = j.id and p.attempt = j.attempt
         where j.id = $1
        "#,
        id,
    )
    .fetch_optional(db)
    .await
}

/// Pruner: deletes up to `limit` reports whose job no longer exists. Returns how many.
pub async fn prune(db: impl PgExecutor<'_>, limit: i64) -> Result<i64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        delete from ojs_job_progress
         where job_id in (select p.job_id from ojs_job_progress p
                           where not exists (select 1 from ojs_job_all j where j.id = p.job_id)
                           limit $1)
        "#,
        limit,
    )
    .execute(db)
    .await?;
    Ok(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
}
