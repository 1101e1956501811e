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
            .map(|p| super::like_prefix(p))
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
    job_ids: Option<Vec<Uuid>>,
    trace_ids: Option<Vec<Option<String>>>,
    attempts: Option<Vec<Option<i32>>>,
    priorities: Option<Vec<Option<i32>>>,
    unique_keys: Option<Vec<Option<String>>>,
    scheduled_ats: Option<Vec<Option<DateTime<Utc>>>>,
    durations_ms: Option<Vec<Option<i64>>>,
    results: Option<Vec<Option<String>>>,
    worker_id: Option<String>,
}

/// Positions a row of `ojs_event` takes: its `seq` and the block after it (migration V10). A
/// batch row's events are at `seq`, `seq + 1`, ...
pub const POSITIONS_PER_ROW: i64 = 16_384;

impl Raw {
    /// The row's events: itself, or one per job of a batch row, in order.
    fn expand(self, out: &mut Vec<EventRow>) {
        let Some(job_ids) = self.job_ids.as_deref() else {
            out.push(EventRow {
                position: Position {
                    xid: self.xid,
                    seq: self.seq,
                },
                r#type: self.r#type,
                source: self.source,
                time: self.time,
                subject: self.subject,
                job_id: self.job_id,
                queue: self.queue,
                job_type: self.job_type,
                from_state: self.from_state,
                to_state: self.to_state,
                data: Json(crate::wire::json::compact_raw(self.data.0)),
            });
            return;
        };
        fn nth<T: Clone>(values: &Option<Vec<Option<T>>>, i: usize) -> Option<T> {
            values.as_ref()?.get(i)?.clone()
        }
        for (i, job_id) in job_ids.iter().enumerate() {
            let values = BatchValues {
                trace_id: nth(&self.trace_ids, i),
                priority: nth(&self.priorities, i),
                unique_key: nth(&self.unique_keys, i),
                worker_id: self.worker_id.clone(),
                attempt: nth(&self.attempts, i),
                duration_ms: nth(&self.durations_ms, i),
                result: nth(&self.results, i),
                scheduled_at: nth(&self.scheduled_ats, i),
            };
            let data = values.render(
                *job_id,
                self.job_type.as_deref(),
                self.queue.as_deref(),
                self.to_state,
            );
            out.push(EventRow {
                position: Position {
                    xid: self.xid,
                    seq: self.seq + i as i64,
                },
                r#type: self.r#type.clone(),
                source: self.source.clone(),
                time: self.time,
                subject: Some(job_id.to_string()),
                job_id: Some(*job_id),
                queue: self.queue.clone(),
                job_type: self.job_type.clone(),
                from_state: self.from_state,
                to_state: self.to_state,
                data,
            });
        }
    }
}

/// The per-job values of one event of a batch row.
struct BatchValues {
    trace_id: Option<String>,
    priority: Option<i32>,
    unique_key: Option<String>,
    worker_id: Option<String>,
    attempt: Option<i32>,
    duration_ms: Option<i64>,
    result: Option<String>,
    scheduled_at: Option<DateTime<Utc>>,
}

impl BatchValues {
    /// The event's `data`, as the single-event rows carry it (`ojs_job_transition_data`,
    /// migration V3) and the view `ojs_event_log` renders it: keys in jsonb's order (shorter
    /// first), absent values left out, nulls inside `result` objects removed.
    fn render(
        self,
        job_id: Uuid,
        job_type: Option<&str>,
        queue: Option<&str>,
        state: Option<JobState>,
    ) -> RawJson {
        fn text(v: impl serde::Serialize) -> String {
            serde_json::to_string(&v).unwrap_or_else(|_| "null".to_owned())
        }
        let mut fields: Vec<(&str, String)> = vec![
            ("job_id", text(job_id)),
            ("job_type", text(job_type)),
            ("queue", text(queue)),
            ("state", text(state.map(JobState::as_str))),
        ];
        let optional: [(&str, Option<String>); 8] = [
            ("trace_id", self.trace_id.map(text)),
            ("priority", self.priority.map(text)),
            ("unique_key", self.unique_key.map(text)),
            ("worker_id", self.worker_id.map(text)),
            ("attempt", self.attempt.map(text)),
            ("duration_ms", self.duration_ms.map(text)),
            ("result", self.result.and_then(|r| without_nulls(&r))),
            (
                "scheduled_at",
                self.scheduled_at
                    .map(|t| text(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())),
            ),
        ];
        fields.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
        fields.sort_by(|a, b| (a.0.len(), a.0).cmp(&(b.0.len(), b.0)));
        let mut text = String::with_capacity(160);
        text.push('{');
        for (i, (key, value)) in fields.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push('"');
            text.push_str(key);
            text.push_str("\":");
            text.push_str(value);
        }
        text.push('}');
        Json(serde_json::value::RawValue::from_string(text).expect("rendered event data is JSON"))
    }
}

/// `result` (JSON text) with the null members of its objects removed, as `jsonb_strip_nulls`
/// does, or `None` when it is JSON null. A result serde cannot read as a value (a number beyond
/// f64, say) is kept as stored.
fn without_nulls(result: &str) -> Option<String> {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(result) {
        Ok(serde_json::Value::Null) => None,
        Ok(mut value) => {
            strip(&mut value);
            Some(value.to_string())
        }
        Err(_) => Some(result.to_owned()),
    }
}

/// The delivery position and time of the event at `seq`, if it is still retained.
pub async fn locate(
    db: impl PgExecutor<'_>,
    seq: i64,
) -> Result<Option<(Position, DateTime<Utc>)>, sqlx::Error> {
    // The row whose block of positions holds `seq` (V10), if that event exists.
    let row = sqlx::query!(
        r#"
        select xid::text::int8 as "xid!", time
          from (select xid, seq, time, coalesce(cardinality(job_ids), 1) as events
                  from ojs_event
                 where seq <= $1 and seq > $1 - 16384
                 order by seq desc
                 limit 1) r
         where $1 < r.seq + r.events
        "#,
        seq
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (Position { xid: r.xid, seq }, r.time)))
}

/// The position of the newest deliverable event (`None` when there is none): a reader that
/// starts after it sees exactly the events that become deliverable from now on.
pub async fn head(db: impl PgExecutor<'_>) -> Result<Option<Position>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select xid::text::int8 as "xid!", seq + coalesce(cardinality(job_ids), 1) - 1 as "seq!"
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

/// From when batch rows may hold job `job_id`'s events: its creation (less a margin). Batch rows
/// hold a job's events only from its creation on: the statements that write them see the job,
/// and run in transactions far shorter than the margin. `None` for a job that is gone
/// (pruned): it is looked for in every batch row.
async fn batch_rows_since(
    db: impl crate::store::Pool<'_>,
    job_id: Uuid,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "select created_at - interval '10 minutes' from ojs_job_all where id = $1",
        job_id
    )
    .fetch_optional(db)
    .await?
    .flatten())
}

/// How many committed events job `job_id` has (each row, batch or not, holds at most one of a
/// job's events).
pub async fn count_for_job(
    db: impl crate::store::Pool<'_>,
    job_id: Uuid,
) -> Result<i64, sqlx::Error> {
    let since = batch_rows_since(db, job_id).await?;
    sqlx::query_scalar!(
        r#"
        select count(*) as "n!"
          from ojs_event
         where (job_id = $1
                or (job_ids is not null and time >= coalesce($2::timestamptz, '-infinity')
                    and job_ids @> array[$1::uuid]))
        "#,
        job_id,
        since,
    )
    .fetch_one(db)
    .await
}

/// Up to `limit` deliverable events after `after` (from the oldest retained one when `None`)
/// that match `filter`, in delivery order.
pub async fn list(
    db: impl crate::store::Pool<'_>,
    filter: &EventFilter,
    after: Option<Position>,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    read(db, filter, after, limit, true).await
}

/// Up to `limit` of job `job_id`'s events after `after`, in log order: every committed one,
/// deliverable or not yet (a history is read at once, not followed: an event written by a
/// transaction that committed while an older one still runs is shown too).
pub async fn job_history(
    db: impl crate::store::Pool<'_>,
    job_id: Uuid,
    after: Option<Position>,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    let filter = EventFilter {
        job_id: Some(job_id),
        ..EventFilter::default()
    };
    read(db, &filter, after, limit, false).await
}

/// [`list`], and with `deliverable` false also the committed events not yet deliverable (only
/// for one job's events).
async fn read(
    db: impl crate::store::Pool<'_>,
    filter: &EventFilter,
    after: Option<Position>,
    limit: i64,
    deliverable: bool,
) -> Result<Vec<EventRow>, sqlx::Error> {
    let (types, prefixes) = filter.type_arrays();
    let after_xid = after.map(|p| p.xid.to_string());
    let after_seq = after.map_or(0, |p| p.seq);
    // One statement per access path, so each is planned as an index range scan in delivery
    // order: by job, by queue, or over everything.
    let rows = if let Some(job_id) = filter.job_id {
        let since = batch_rows_since(db, job_id).await?;
        sqlx::query_as!(
            Raw,
            r#"
            select xid::text::int8 as "xid!", seq, type, source, time, subject, job_id, queue,
                   job_type, from_state as "from_state: JobState", to_state as "to_state: JobState",
                   data as "data!: Json<Box<serde_json::value::RawValue>>",
                   job_ids, trace_ids as "trace_ids: Vec<Option<String>>",
                   attempts as "attempts: Vec<Option<i32>>",
                   priorities as "priorities: Vec<Option<i32>>",
                   unique_keys as "unique_keys: Vec<Option<String>>",
                   scheduled_ats as "scheduled_ats: Vec<Option<DateTime<Utc>>>",
                   durations_ms as "durations_ms: Vec<Option<i64>>",
                   results::text[] as "results: Vec<Option<String>>", worker_id
              from ojs_event
             where (job_id = $1
                    or (job_ids is not null and time >= coalesce($9::timestamptz, '-infinity')
                        and job_ids @> array[$1::uuid]))
               and (not $10::bool or xid < pg_snapshot_xmin(pg_current_snapshot()))
               -- Rows with an event after the cursor: the index bound, then the exact test.
               and ($2::text is null or ((xid, seq) > ($2::text::xid8, $3::int8 - 16384)
                                          and (xid, seq + coalesce(cardinality(job_ids), 1) - 1)
                                              > ($2::text::xid8, $3::int8)))
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
            since,
            deliverable,
        )
        .fetch_all(db)
        .await?
    } else if let Some(queues) = &filter.queues {
        sqlx::query_as!(
            Raw,
            r#"
            select xid::text::int8 as "xid!", seq, type, source, time, subject, job_id, queue,
                   job_type, from_state as "from_state: JobState", to_state as "to_state: JobState",
                   data as "data!: Json<Box<serde_json::value::RawValue>>",
                   job_ids, trace_ids as "trace_ids: Vec<Option<String>>",
                   attempts as "attempts: Vec<Option<i32>>",
                   priorities as "priorities: Vec<Option<i32>>",
                   unique_keys as "unique_keys: Vec<Option<String>>",
                   scheduled_ats as "scheduled_ats: Vec<Option<DateTime<Utc>>>",
                   durations_ms as "durations_ms: Vec<Option<i64>>",
                   results::text[] as "results: Vec<Option<String>>", worker_id
              from ojs_event
             where queue = any($1::text[])
               and xid < pg_snapshot_xmin(pg_current_snapshot())
               -- Rows with an event after the cursor: the index bound, then the exact test.
               and ($2::text is null or ((xid, seq) > ($2::text::xid8, $3::int8 - 16384)
                                          and (xid, seq + coalesce(cardinality(job_ids), 1) - 1)
                                              > ($2::text::xid8, $3::int8)))
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
                   data as "data!: Json<Box<serde_json::value::RawValue>>",
                   job_ids, trace_ids as "trace_ids: Vec<Option<String>>",
                   attempts as "attempts: Vec<Option<i32>>",
                   priorities as "priorities: Vec<Option<i32>>",
                   unique_keys as "unique_keys: Vec<Option<String>>",
                   scheduled_ats as "scheduled_ats: Vec<Option<DateTime<Utc>>>",
                   durations_ms as "durations_ms: Vec<Option<i64>>",
                   results::text[] as "results: Vec<Option<String>>", worker_id
              from ojs_event
             where xid < pg_snapshot_xmin(pg_current_snapshot())
               -- Rows with an event after the cursor: the index bound, then the exact test.
               and ($1::text is null or ((xid, seq) > ($1::text::xid8, $2::int8 - 16384)
                                          and (xid, seq + coalesce(cardinality(job_ids), 1) - 1)
                                              > ($1::text::xid8, $2::int8)))
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
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        row.expand(&mut events);
    }
    // The events of a batch row up to a cursor inside it, and other jobs' events.
    events.retain(|e| {
        after.is_none_or(|a| e.position > a) && filter.job_id.is_none_or(|id| e.job_id == Some(id))
    });
    events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(events)
}

/// A page of deliverable events matching `filter` (its `job_id` is not used), newest first:
/// the `limit` events after the newest `offset`, and how many match in all. For the admin
/// UI's event list; it counts every retained match, so it is not for hot paths.
pub async fn page_newest_first(
    db: impl crate::store::Pool<'_>,
    filter: &EventFilter,
    offset: i64,
    limit: i64,
) -> Result<(Vec<EventRow>, i64), sqlx::Error> {
    let (types, prefixes) = filter.type_arrays();
    // One snapshot for both statements, so the rows found first are the rows read second.
    let mut tx = db.begin().await?;
    sqlx::query!("set transaction isolation level repeatable read, read only")
        .execute(&mut *tx)
        .await?;
    // The page's rows are a run in (xid desc, seq desc) order: counting each row's events
    // (a batch row holds several, V10) finds its first and last row, and how many newer events
    // precede the first.
    let bounds = sqlx::query!(
        r#"
        with counted as (
            select xid, seq, n,
                   (sum(n) over (order by xid desc, seq desc))::int8 - n as newer,
                   (sum(n) over ())::int8 as total
              from (select xid, seq, coalesce(cardinality(job_ids), 1)::int8 as n
                      from ojs_event
                     where xid < pg_snapshot_xmin(pg_current_snapshot())
                       and ($1::text[] is null or type = any($1::text[]) or type like any($2::text[]))
                       and ($3::text[] is null or queue = any($3::text[]))
                       and ($4::text[] is null or job_type = any($4::text[]))) e
        )
        select coalesce((select max(total) from counted), 0)::int8 as "total!",
               first.xid::text as first_xid, first.seq as "first_seq?", first.newer as "first_newer?",
               last.xid::text as last_xid, last.seq as "last_seq?"
          from (select 1) one
          left join lateral (select xid, seq, newer from counted
                              where newer + n > $5::int8 and newer < $5::int8 + $6::int8
                              order by xid desc, seq desc limit 1) first on true
          left join lateral (select xid, seq from counted
                              where newer + n > $5::int8 and newer < $5::int8 + $6::int8
                              order by xid, seq limit 1) last on true
        "#,
        types.as_deref(),
        prefixes.as_deref(),
        filter.queues.as_deref(),
        filter.job_types.as_deref(),
        offset,
        limit,
    )
    .fetch_one(&mut *tx)
    .await?;
    let total = bounds.total;
    let (Some(first_xid), Some(first_seq), Some(first_newer), Some(last_xid), Some(last_seq)) = (
        bounds.first_xid,
        bounds.first_seq,
        bounds.first_newer,
        bounds.last_xid,
        bounds.last_seq,
    ) else {
        return Ok((Vec::new(), total));
    };
    let rows = sqlx::query_as!(
        Raw,
        r#"
        select xid::text::int8 as "xid!", seq, type, source, time, subject, job_id, queue,
               job_type, from_state as "from_state: JobState", to_state as "to_state: JobState",
               data as "data!: Json<Box<serde_json::value::RawValue>>",
               job_ids, trace_ids as "trace_ids: Vec<Option<String>>",
               attempts as "attempts: Vec<Option<i32>>",
               priorities as "priorities: Vec<Option<i32>>",
               unique_keys as "unique_keys: Vec<Option<String>>",
               scheduled_ats as "scheduled_ats: Vec<Option<DateTime<Utc>>>",
               durations_ms as "durations_ms: Vec<Option<i64>>",
               results::text[] as "results: Vec<Option<String>>", worker_id
          from ojs_event
         where (xid, seq) >= ($1::text::xid8, $2::int8)
           and (xid, seq) <= ($3::text::xid8, $4::int8)
           and ($5::text[] is null or type = any($5::text[]) or type like any($6::text[]))
           and ($7::text[] is null or queue = any($7::text[]))
           and ($8::text[] is null or job_type = any($8::text[]))
         order by xid desc, seq desc
        "#,
        last_xid,
        last_seq,
        first_xid,
        first_seq,
        types.as_deref(),
        prefixes.as_deref(),
        filter.queues.as_deref(),
        filter.job_types.as_deref(),
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut events = Vec::new();
    for row in rows {
        let start = events.len();
        row.expand(&mut events);
        events[start..].reverse();
    }
    let skip = usize::try_from(offset - first_newer).unwrap_or(0);
    let events = events
        .into_iter()
        .skip(skip)
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect();
    Ok((events, total))
}

/// Pruner: deletes up to `limit` of the oldest rows, those written before `cutoff` or whose
/// events are all beyond the newest `max_count` events. Returns how many rows were deleted.
pub async fn prune(
    db: impl PgExecutor<'_>,
    cutoff: DateTime<Utc>,
    max_count: i64,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with boundary as (
            -- The newest row with no event among the newest $2.
            select xid, seq
              from (select xid, seq, coalesce(cardinality(job_ids), 1) as events,
                           sum(coalesce(cardinality(job_ids), 1))
                               over (order by xid desc, seq desc) as newer
                      from ojs_event) r
             where newer - events >= $2
             limit 1
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
            returning e.xid::text::int8 as xid, e.seq + coalesce(cardinality(e.job_ids), 1) - 1 as last,
                      e.type, coalesce(cardinality(e.job_ids), 1) as events
        ),
        -- Webhook subscriptions (migration V25) that had not reached deleted events matching
        -- their filter: the gap is recorded, and reported as an event.
        missed as (
            select w.id, sum(d.events) as events
              from ojs_webhook w
              join deleted d on (d.xid, d.last) > (w.cursor_xid, w.cursor_seq)
             where '*' = any(w.events) or d.type = any(w.events)
                or exists (select 1 from unnest(w.events) f
                            where f like '%*' and d.type like replace(f, '*', '%'))
             group by w.id
        ),
        gapped as (
            update ojs_webhook w
               set gap_at = now(), gap_events = w.gap_events + m.events
              from missed m
             where w.id = m.id
            returning w.id, m.events
        ),
        reported as (
            insert into ojs_event (type, subject, data)
            select 'webhook.events_pruned', g.id::text,
                   jsonb_build_object('subscription_id', g.id, 'events', g.events)
              from gapped g
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
