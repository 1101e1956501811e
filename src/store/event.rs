//! Statements on `ojs_event`: reading the lifecycle outbox, pruning it, and the events that are
//! not written by a job's own statement.
//!
//! Who writes events: a job's events are written by an `events` CTE inside the very statement
//! that changes the job (`store::job`, `store::queue`, `store::dead_letter`), so the change and
//! its events commit together; worker events by the `ojs_worker` trigger (migration V3); queue,
//! back-pressure and scheduling events by [`insert_queue_event`] and [`insert_subject_event`]
//! or by CTEs of the queue statements. `migrations/README.md` lists the SQL functions involved.
//!
//! Events are read in
//! `(xid, seq)` order, and only from transactions older than every transaction still running
//! (`xid < pg_snapshot_xmin(pg_current_snapshot())`). A transaction that is still running when a
//! reader looks can only commit events that sort after everything the reader has seen, so a
//! cursor never skips an event that commits late.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use sqlx::types::Json;
use uuid::Uuid;

use crate::job::{JobState, RawJson};

/// Where an event sits in delivery order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// The writing transaction (`xid8`, as a number).
    pub xid: i64,
    /// Position within all events.
    pub seq: i64,
}

/// One stored event.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub position: Position,
    pub r#type: String,
    pub source: String,
    pub time: DateTime<Utc>,
    pub subject: Option<String>,
    pub job_id: Option<Uuid>,
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub from_state: Option<JobState>,
    pub to_state: Option<JobState>,
    pub data: RawJson,
}

/// Which events to read.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Exact event types (empty with no prefixes: any type).
    pub types: Vec<String>,
    /// Type prefixes (`job.` for `job.*`).
    pub type_prefixes: Vec<String>,
    /// Queues (`None`: any).
    pub queues: Option<Vec<String>>,
    /// Job types (`None`: any).
    pub job_types: Option<Vec<String>>,
    /// One job (`None`: any).
    pub job_id: Option<Uuid>,
}

impl EventFilter {
    fn type_arrays(&self) -> (Option<Vec<String>>, Option<Vec<String>>) {
        if self.types.is_empty() && self.type_prefixes.is_empty() {
            return (None, None);
        }
        let patterns = self
            .type_prefixes
            .iter()
            .map(|p| {
                format!(
                    "{}%",
                    p.replace('\\', "\\\\")
                        .replace('%', "\\%")
                        .replace('_', "\\_")
                )
            })
            .collect();
        (Some(self.types.clone()), Some(patterns))
    }
}

/// The raw row shape shared by the queries below.
struct Raw {
    xid: i64,
    seq: i64,
    r#type: String,
    source: String,
    time: DateTime<Utc>,
    subject: Option<String>,
    job_id: Option<Uuid>,
    queue: Option<String>,
    job_type: Option<String>,
    from_state: Option<JobState>,
    to_state: Option<JobState>,
    data: Json<Box<serde_json::value::RawValue>>,
}

impl From<Raw> for EventRow {
    fn from(r: Raw) -> EventRow {
        EventRow {
            position: Position {
                xid: r.xid,
                seq: r.seq,
            },
            r#type: r.r#type,
            source: r.source,
            time: r.time,
            subject: r.subject,
            job_id: r.job_id,
            queue: r.queue,
            job_type: r.job_type,
            from_state: r.from_state,
            to_state: r.to_state,
            data: Json(crate::json::compact_raw(r.data.0)),
        }
    }
}

/// The delivery position and time of the event at `seq`, if it is still retained.
pub async fn locate(
    db: impl PgExecutor<'_>,
    seq: i64,
) -> Result<Option<(Position, DateTime<Utc>)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"select xid::text::int8 as "xid!", seq, time from ojs_event where seq = $1"#,
        seq
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| {
        (
            Position {
                xid: r.xid,
                seq: r.seq,
            },
            r.time,
        )
    }))
}

/// The position of the newest deliverable event (`None` when there is none): a reader that
/// starts after it sees exactly the events that become deliverable from now on.
pub async fn head(db: impl PgExecutor<'_>) -> Result<Option<Position>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select xid::text::int8 as "xid!", seq
          from ojs_event
         where xid < pg_snapshot_xmin(pg_current_snapshot())
         order by xid desc, seq desc
         limit 1
        "#
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| Position {
        xid: r.xid,
        seq: r.seq,
    }))
}

/// Up to `limit` deliverable events after `after` (from the oldest retained one when `None`)
/// that match `filter`, in delivery order.
pub async fn list(
    db: impl PgExecutor<'_>,
    filter: &EventFilter,
    after: Option<Position>,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    let (types, prefixes) = filter.type_arrays();
    let after_xid = after.map(|p| p.xid.to_string());
    let after_seq = after.map_or(0, |p| p.seq);
    // One statement per access path, so each is planned as an index range scan in delivery
    // order: by job, by queue, or over everything.
    let rows = if let Some(job_id) = filter.job_id {
        sqlx::query_as!(
            Raw,
            r#"
            select xid::text::int8 as "xid!", seq, type, source, time, subject, job_id, queue,
                   job_type, from_state as "from_state: JobState", to_state as "to_state: JobState",
                   data as "data!: Json<Box<serde_json::value::RawValue>>"
              from ojs_event
             where job_id = $1
               and xid < pg_snapshot_xmin(pg_current_snapshot())
               and ($2::text is null or (xid, seq) > ($2::text::xid8, $3::int8))
               and ($4::text[] is null or type = any($4::text[]) or type like any($5::text[]))
               and ($6::text[] is null or queue = any($6::text[]))
               and ($7::text[] is null or job_type = any($7::text[]))
             order by xid, seq
             limit $8
            "#,
            job_id,
            after_xid,
            after_seq,
            types.as_deref(),
            prefixes.as_deref(),
            filter.queues.as_deref(),
            filter.job_types.as_deref(),
            limit,
        )
        .fetch_all(db)
        .await?
    } else if let Some(queues) = &filter.queues {
        sqlx::query_as!(
            Raw,
            r#"
            select xid::text::int8 as "xid!", seq, type, source, time, subject, job_id, queue,
                   job_type, from_state as "from_state: JobState", to_state as "to_state: JobState",
                   data as "data!: Json<Box<serde_json::value::RawValue>>"
              from ojs_event
             where queue = any($1::text[])
               and xid < pg_snapshot_xmin(pg_current_snapshot())
               and ($2::text is null or (xid, seq) > ($2::text::xid8, $3::int8))
               and ($4::text[] is null or type = any($4::text[]) or type like any($5::text[]))
               and ($6::text[] is null or job_type = any($6::text[]))
             order by xid, seq
             limit $7
            "#,
            queues,
            after_xid,
            after_seq,
            types.as_deref(),
            prefixes.as_deref(),
            filter.job_types.as_deref(),
            limit,
        )
        .fetch_all(db)
        .await?
    } else {
        sqlx::query_as!(
            Raw,
            r#"
            select xid::text::int8 as "xid!", seq, type, source, time, subject, job_id, queue,
                   job_type, from_state as "from_state: JobState", to_state as "to_state: JobState",
                   data as "data!: Json<Box<serde_json::value::RawValue>>"
              from ojs_event
             where xid < pg_snapshot_xmin(pg_current_snapshot())
               and ($1::text is null or (xid, seq) > ($1::text::xid8, $2::int8))
               and ($3::text[] is null or type = any($3::text[]) or type like any($4::text[]))
               and ($5::text[] is null or job_type = any($5::text[]))
             order by xid, seq
             limit $6
            "#,
            after_xid,
            after_seq,
            types.as_deref(),
            prefixes.as_deref(),
            filter.job_types.as_deref(),
            limit,
        )
        .fetch_all(db)
        .await?
    };
    Ok(rows.into_iter().map(EventRow::from).collect())
}

/// Pruner: deletes up to `limit` of the oldest events, those written before `cutoff` or beyond
/// the newest `max_count`. Returns how many were deleted.
pub async fn prune(
    db: impl PgExecutor<'_>,
    cutoff: DateTime<Utc>,
    max_count: i64,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with boundary as (
            -- The oldest event that is still within the count limit.
            select xid, seq from ojs_event order by xid desc, seq desc offset $2 limit 1
        ),
        oldest as (
            select xid, seq, time from ojs_event order by xid, seq limit $3
        ),
        deleted as (
            delete from ojs_event e
             using oldest o
             where e.seq = o.seq
               and (o.time < $1
                    or (o.xid, o.seq) <= (select xid, seq from boundary))
            returning 1
        )
        select count(*) as "deleted!" from deleted
        "#,
        cutoff,
        max_count,
        limit,
    )
    .fetch_one(db)
    .await
}

/// Deletes every event (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("truncate ojs_event").execute(db).await?;
    Ok(())
}

/// Names `source` as the source of the events the current transaction writes (the session
/// setting `ojs.source`, which `ojs_event.source` defaults to; API connections set it for the
/// whole session when they connect).
pub async fn set_source(db: impl PgExecutor<'_>, source: &str) -> Result<(), sqlx::Error> {
    sqlx::query_scalar!("select set_config('ojs.source', $1, true)", source)
        .fetch_one(db)
        .await?;
    Ok(())
}

/// Records a queue-level event (`queue.full`, `backpressure.*`, ...) on its own.
pub async fn insert_queue_event(
    db: impl PgExecutor<'_>,
    kind: &str,
    queue: &str,
    data: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into ojs_event (type, subject, queue, data) values ($1, $2, $2, $3)",
        kind,
        queue,
        data,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Records an event about something other than a job or queue (a pool, say): `subject` names
/// it; the event has no queue.
pub async fn insert_subject_event(
    db: impl PgExecutor<'_>,
    kind: &str,
    subject: &str,
    data: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into ojs_event (type, subject, data) values ($1, $2, $3)",
        kind,
        subject,
        data,
    )
    .execute(db)
    .await?;
    Ok(())
}
