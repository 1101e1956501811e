//! Statements on `ojs_job_checkpoint`: the latest state each job saved (OJS durable execution,
//! migration V31).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use sqlx::types::Json;
use uuid::Uuid;

use crate::job::{JobState, RawJson};

/// A job's state and holder, and what a save did (`sequence` and `created_at` set when it
/// saved).
#[derive(Debug, Clone)]
pub struct SavedRow {
    pub state: JobState,
    pub worker_id: Option<String>,
    pub sequence: Option<i32>,
    pub created_at: Option<DateTime<Utc>>,
}

/// Saves `checkpoint` as job `id`'s latest, replacing the previous one (and counting one more
/// save), if the job is not finished and, when `worker` is given, is active and held by that
/// worker. Records a `job.checkpointed` event with the save. `None`: no such job.
pub async fn save(
    db: impl PgExecutor<'_>,
    id: Uuid,
    worker: Option<&str>,
    checkpoint: &serde_json::value::RawValue,
) -> Result<Option<SavedRow>, sqlx::Error> {
    let size = i32::try_from(checkpoint.get().len()).unwrap_or(i32::MAX);
    sqlx::query_as!(
        SavedRow,
        r#"
        with j as (select id, state, attempt, worker_id, queue, type from ojs_job_all where id = $1),
             saved as (
                 insert into ojs_job_checkpoint
                        (job_id, state, sequence, size_bytes, attempt, worker_id, created_at)
                 select j.id, $3, 1, $4, j.attempt, coalesce($2, j.worker_id), now()
                   from j
                  where j.state not in ('completed', 'cancelled', 'discarded')
                    and ($2::text is null or (j.state = 'active' and j.worker_id = $2))
                 on conflict (job_id) do update
                    set state = excluded.state, sequence = ojs_job_checkpoint.sequence + 1,
                        size_bytes = excluded.size_bytes, attempt = excluded.attempt,
                        worker_id = excluded.worker_id, created_at = excluded.created_at
                 returning sequence, created_at, size_bytes
             ),
             -- The job's next claims hand its checkpoint (a HOT update, once per job).
             flagged as (
                 update ojs_job f set durable = true
                   from saved s
                  where f.id = $1 and f.durable is not true
             ),
             event as (
                 insert into ojs_event (type, subject, job_id, queue, job_type, worker_id, data)
                 select 'job.checkpointed', j.id::text, j.id, j.queue, j.type, $2,
                        jsonb_strip_nulls(jsonb_build_object(
                            'sequence', s.sequence, 'size_bytes', s.size_bytes,
                            'attempt', j.attempt, 'worker_id', $2::text))
                   from j, saved s
             )
        select j.state as "state!: JobState", j.worker_id,
               s.sequence as "sequence?", s.created_at as "created_at?"
          from j left join saved s on true
        "#,
        id,
        worker,
        Json(checkpoint) as Json<&serde_json::value::RawValue>,
        size,
    )
    .fetch_optional(db)
    .await
}

/// A job's state, and its latest checkpoint if it has one.
#[derive(Debug, Clone)]
pub struct CheckpointRow {
    pub job_state: JobState,
    pub state: Option<RawJson>,
    pub sequence: Option<i32>,
    pub created_at: Option<DateTime<Utc>>,
}

/// Job `id`'s state and latest checkpoint; `None`: no such job.
pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<CheckpointRow>, sqlx::Error> {
    sqlx::query_as!(
        CheckpointRow,
        r#"
        select j.state as "job_state!: JobState", c.state as "state?: RawJson",
               c.sequence as "sequence?", c.created_at as "created_at?"
          from ojs_job_all j
          left join ojs_job_checkpoint c on c.job_id = j.id
         where j.id = $1
        "#,
        id,
    )
    .fetch_optional(db)
    .await
}

/// Deletes job `id`'s checkpoint. `None`: no such job; else whether there was one.
pub async fn delete(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<bool>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with j as (select id from ojs_job_all where id = $1),
             gone as (delete from ojs_job_checkpoint c using j where c.job_id = j.id returning 1)
        select exists (select 1 from j) as "job!", exists (select 1 from gone) as "deleted!"
        "#,
        id,
    )
    .fetch_one(db)
    .await?;
    Ok(row.job.then_some(row.deleted))
}

/// Pruner: deletes up to `limit` checkpoints whose job no longer exists. Returns how many.
pub async fn prune(db: impl PgExecutor<'_>, limit: i64) -> Result<i64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        delete from ojs_job_checkpoint
         where job_id in (select c.job_id from ojs_job_checkpoint c
                           where not exists (select 1 from ojs_job_all j where j.id = c.job_id)
                           limit $1)
        "#,
        limit,
    )
    .execute(db)
    .await?;
    Ok(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
}
