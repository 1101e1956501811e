//! Statements on `ojs_job_step`, `ojs_job_wait` and `ojs_job_signal` (migration V33): the steps
//! a job recorded, its latest wait, and the signals sent to it.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use sqlx::types::Json;
use uuid::Uuid;

use crate::job::durable::Step;
use crate::job::{JobId, JobState, RawJson};

/// What [`record`] found and did: the job's state, attempt and holder (`None`: no such job),
/// and the step, `recorded` when this call recorded it.
#[derive(Debug, Clone)]
pub struct RecordRow {
    pub job_state: Option<JobState>,
    pub attempt: Option<i32>,
    pub holder: Option<String>,
    pub recorded: bool,
    pub step: Option<Step>,
}

/// Records step `name` of job `id` with `result`, if the job is active at `attempt` and, when
/// `worker` is given, held by that worker, and the step has no record yet. The job's row is
/// locked (shared) meanwhile, so no move of the job passes the check; the primary key keeps the
/// first record of a step whatever races it. Records a `job.step_recorded` event.
pub async fn record(
    db: impl PgExecutor<'_>,
    id: Uuid,
    name: &str,
    attempt: i32,
    worker: Option<&str>,
    result: Option<&serde_json::value::RawValue>,
) -> Result<RecordRow, sqlx::Error> {
    let size = result.map_or(0, |r| i32::try_from(r.get().len()).unwrap_or(i32::MAX));
    let row = sqlx::query!(
        r#"
        with j as (
            select id, state, attempt, worker_id, queue, type from ojs_job where id = $1 for share
        ),
        done as (select state from ojs_job_done where id = $1),
        held as (
            select * from j
             where j.state = 'active' and j.attempt = $3
               and ($4::text is null or j.worker_id is null or j.worker_id = $4)
        ),
        recorded as (
            insert into ojs_job_step (job_id, name, result, attempt, worker_id, size_bytes)
            select h.id, $2, $5, $3, coalesce($4, h.worker_id), $6 from held h
            on conflict on constraint ojs_job_step_pkey do nothing
            returning name, result, attempt, worker_id, recorded_at
        ),
        -- The job's next claims hand its steps (a HOT update, once per job).
        flagged as (
            update ojs_job j set durable = true
              from recorded r
             where j.id = $1 and j.durable is not true
        ),
        event as (
            insert into ojs_event (type, subject, job_id, queue, job_type, worker_id, data)
            select 'job.step_recorded', h.id::text, h.id, h.queue, h.type, r.worker_id,
                   jsonb_strip_nulls(jsonb_build_object(
                       'step', r.name, 'attempt', r.attempt, 'worker_id', r.worker_id,
                       'size_bytes', $6::int4))
              from held h, recorded r
        ),
        earlier as (
            select name, result, attempt, worker_id, recorded_at
              from ojs_job_step where job_id = $1 and name = $2
        ),
        step as (
            select *, true as now_recorded from recorded
            union all
            select *, false from earlier where not exists (select 1 from recorded)
        )
        select coalesce((select state from j), (select state from done)) as "job_state?: JobState",
               (select attempt from j) as "attempt?",
               (select worker_id from j) as "holder?",
               s.now_recorded as "recorded?",
               s.name as "name?", s.result as "result?: RawJson", s.attempt as "step_attempt?",
               s.worker_id as "step_worker?", s.recorded_at as "recorded_at?"
          from (select 1) one left join step s on true
        "#,
        id,
        name,
        attempt,
        worker,
        result.map(Json) as Option<Json<&serde_json::value::RawValue>>,
        size,
    )
    .fetch_one(db)
    .await?;
    let step = match (row.name, row.step_attempt, row.recorded_at) {
        (Some(name), Some(attempt), Some(recorded_at)) => Some(Step {
            job_id: JobId(id),
            name,
            result: row.result,
            attempt,
            worker_id: row.step_worker,
            recorded_at,
        }),
        _ => None,
    };
    Ok(RecordRow {
        job_state: row.job_state,
        attempt: row.attempt,
        holder: row.holder,
        recorded: row.recorded.unwrap_or(false),
        step,
    })
}

/// Step `name` of job `id`, read afresh (after a record that lost a race to one its snapshot
/// could not see).
pub async fn get(
    db: impl PgExecutor<'_>,
    id: Uuid,
    name: &str,
) -> Result<Option<Step>, sqlx::Error> {
    sqlx::query_as!(
        Step,
        r#"
        select job_id as "job_id: JobId", name, result as "result?: RawJson", attempt, worker_id,
               recorded_at
          from ojs_job_step where job_id = $1 and name = $2
        "#,
        id,
        name,
    )
    .fetch_optional(db)
    .await
}

/// A job's latest wait.
#[derive(Debug, Clone)]
pub struct WaitRow {
    pub signal: Option<String>,
    pub until: Option<DateTime<Utc>>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub signal_id: Option<i64>,
}

/// A signal sent to a job.
#[derive(Debug, Clone)]
pub struct SignalRow {
    pub id: i64,
    pub name: String,
    pub payload: Option<RawJson>,
    pub key: Option<String>,
    pub sent_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// What a job did of durable execution: its steps (oldest first), its latest wait, its signals
/// (oldest first). `None`: no such job.
#[derive(Debug, Clone, Default)]
pub struct Durable {
    pub steps: Vec<Step>,
    pub wait: Option<WaitRow>,
    pub signals: Vec<SignalRow>,
}

/// Job `id`'s steps, latest wait and signals; `None`: no such job.
pub async fn durable(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Durable>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select exists (select 1 from ojs_job_all where id = $1) as "job!",
               (select coalesce(jsonb_agg(jsonb_build_object(
                           'name', s.name, 'result', s.result, 'attempt', s.attempt,
                           'worker_id', s.worker_id, 'recorded_at', s.recorded_at)
                           order by s.recorded_at, s.name), '[]')
                  from ojs_job_step s where s.job_id = $1) as "steps!: Json<Vec<StepJson>>",
               (select jsonb_build_object(
                           'signal', w.signal, 'until', w.until, 'started_at', w.started_at,
                           'ended_at', w.ended_at, 'signal_id', w.signal_id)
                  from ojs_job_wait w where w.job_id = $1) as "wait?: Json<WaitJson>",
               (select coalesce(jsonb_agg(jsonb_build_object(
                           'id', g.id, 'name', g.name, 'payload', g.payload, 'key', g.key,
                           'sent_at', g.sent_at, 'delivered_at', g.delivered_at)
                           order by g.id), '[]')
                  from ojs_job_signal g where g.job_id = $1) as "signals!: Json<Vec<SignalJson>>"
        "#,
        id,
    )
    .fetch_one(db)
    .await?;
    if !row.job {
        return Ok(None);
    }
    Ok(Some(Durable {
        steps: row
            .steps
            .0
            .into_iter()
            .map(|s| s.into_step(JobId(id)))
            .collect(),
        wait: row.wait.map(|w| w.0.into_row()),
        signals: row
            .signals
            .0
            .into_iter()
            .map(SignalJson::into_row)
            .collect(),
    }))
}

/// A step as [`durable`] reads it out of JSON.
#[derive(Debug, serde::Deserialize)]
struct StepJson {
    name: String,
    result: Option<Box<serde_json::value::RawValue>>,
    attempt: i32,
    worker_id: Option<String>,
    recorded_at: DateTime<Utc>,
}

impl StepJson {
    fn into_step(self, job_id: JobId) -> Step {
        Step {
            job_id,
            name: self.name,
            result: self.result.map(Json),
            attempt: self.attempt,
            worker_id: self.worker_id,
            recorded_at: self.recorded_at,
        }
    }
}

/// A wait as [`durable`] reads it out of JSON.
#[derive(Debug, serde::Deserialize)]
struct WaitJson {
    signal: Option<String>,
    until: Option<DateTime<Utc>>,
    started_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
    signal_id: Option<i64>,
}

impl WaitJson {
    fn into_row(self) -> WaitRow {
        WaitRow {
            signal: self.signal,
            until: self.until,
            started_at: self.started_at,
            ended_at: self.ended_at,
            signal_id: self.signal_id,
        }
    }
}

/// A signal as [`durable`] reads it out of JSON.
#[derive(Debug, serde::Deserialize)]
struct SignalJson {
    id: i64,
    name: String,
    payload: Option<Box<serde_json::value::RawValue>>,
    key: Option<String>,
    sent_at: DateTime<Utc>,
    delivered_at: Option<DateTime<Utc>>,
}

impl SignalJson {
    fn into_row(self) -> SignalRow {
        SignalRow {
            id: self.id,
            name: self.name,
            payload: self.payload.map(Json),
            key: self.key,
            sent_at: self.sent_at,
            delivered_at: self.delivered_at,
        }
    }
}

/// What [`send_signal`] did: `outcome` is `delivered`, `kept`, `duplicate`, `finished` or
/// `not_found` (see `ojs_signal_send`).
#[derive(Debug, Clone)]
pub struct SentRow {
    pub outcome: String,
    pub job_state: Option<JobState>,
    pub signal_id: Option<i64>,
    pub sent_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// Sends signal `name` to job `id` (`ojs_signal_send`).
pub async fn send_signal(
    db: impl PgExecutor<'_>,
    id: Uuid,
    name: &str,
    payload: Option<&serde_json::value::RawValue>,
    key: Option<&str>,
) -> Result<SentRow, sqlx::Error> {
    sqlx::query_as!(
        SentRow,
        r#"
        select outcome as "outcome!", job_state as "job_state?: JobState", signal_id, sent_at,
               delivered_at
          from ojs_signal_send($1, $2, $3, $4)
        "#,
        id,
        name,
        payload.map(Json) as Option<Json<&serde_json::value::RawValue>>,
        key,
    )
    .fetch_one(db)
    .await
}

/// What [`wait`] did: `outcome` is `waiting`, `signalled`, `not_found`, `state`, `owner` or
/// `attempt` (see `ojs_job_wait_for`).
#[derive(Debug, Clone)]
pub struct WaitedRow {
    pub outcome: String,
    pub job_state: Option<JobState>,
    pub holder: Option<String>,
    pub attempt: Option<i32>,
    pub signal_id: Option<i64>,
}

/// Ends job `id`'s attempt with a wait for `signal` or until `until` (`ojs_job_wait_for`).
pub async fn wait(
    db: impl PgExecutor<'_>,
    id: Uuid,
    attempt: Option<i32>,
    worker: Option<&str>,
    signal: Option<&str>,
    until: Option<DateTime<Utc>>,
) -> Result<WaitedRow, sqlx::Error> {
    sqlx::query_as!(
        WaitedRow,
        r#"
        select outcome as "outcome!", job_state as "job_state?: JobState", holder, attempt,
               signal_id
          from ojs_job_wait_for($1, $2, $3, $4, $5)
        "#,
        id,
        attempt,
        worker,
        signal,
        until,
    )
    .fetch_one(db)
    .await
}

/// Pruner: deletes up to `limit` steps, waits and signals whose job no longer exists (each
/// table up to `limit`). Returns how many rows.
pub async fn prune(db: impl PgExecutor<'_>, limit: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with steps as (
            delete from ojs_job_step
             where (job_id, name) in (
                       select s.job_id, s.name from ojs_job_step s
                        where not exists (select 1 from ojs_job_all j where j.id = s.job_id)
                        limit $1)
            returning 1
        ),
        waits as (
            delete from ojs_job_wait
             where job_id in (select w.job_id from ojs_job_wait w
                               where not exists (select 1 from ojs_job_all j where j.id = w.job_id)
                               limit $1)
            returning 1
        ),
        signals as (
            delete from ojs_job_signal
             where id in (select g.id from ojs_job_signal g
                           where not exists (select 1 from ojs_job_all j where j.id = g.job_id)
                           limit $1)
            returning 1
        )
        select (select count(*) from steps) + (select count(*) from waits)
               + (select count(*) from signals) as "pruned!"
        "#,
        limit,
    )
    .fetch_one(db)
    .await
}
