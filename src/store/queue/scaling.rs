//! The figures to scale workers on, per queue, for the whole cluster at once (not one replica's
//! view): jobs by waiting state and running, the age of the oldest available job, enqueue and
//! completion throughput over a recent window, and the registered workers serving the queue
//! with how busy they are. Three reads, each over a small or indexed part of the schema.

use std::collections::BTreeMap;

use sqlx::PgConnection;

/// One queue's scaling figures (see [`scaling`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScalingRow {
    pub queue: String,
    pub available: i64,
    pub scheduled: i64,
    pub pending: i64,
    pub retryable: i64,
    pub active: i64,
    /// Seconds the oldest available job has waited since it was enqueued (0 when none waits).
    pub oldest_available_secs: f64,
    /// Jobs producers enqueued into the queue within the window.
    pub enqueued: i64,
    /// Jobs of the queue ACKed within the window.
    pub completed: i64,
    /// Running, non-stale registered workers that name the queue.
    pub workers: i64,
    /// The sum of those workers' declared concurrency (`None`: none declared one).
    pub capacity: Option<i64>,
    /// Jobs (of any queue) those workers hold now.
    pub busy: i64,
}

/// Unfinished jobs by queue and state, and each queue's oldest available job's age in
/// seconds: `(queue, state, jobs, oldest_secs)`. One scan of `ojs_job` (which holds only
/// unfinished jobs), of one queue when `queue` is given.
pub async fn depths(
    db: &mut PgConnection,
    queue: Option<&str>,
) -> Result<Vec<(String, String, i64, Option<f64>)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select queue as "queue!", state::text as "state!", count(*) as "jobs!",
               greatest(extract(epoch from now() - min(enqueued_at)), 0)::float8 as "oldest_secs"
          from ojs_job
         where state in ('scheduled', 'available', 'pending', 'retryable', 'active')
           and ($1::text is null or queue = $1)
         group by queue, state
        "#,
        queue,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.queue, r.state, r.jobs, r.oldest_secs))
        .collect())
}

/// Every queue's figures (or `queue`'s alone), throughput counted over the last
/// `window_secs` seconds. A queue appears when it has unfinished jobs, throughput in the window
/// or a worker naming it; queues with none of these are left out.
pub async fn scaling(
    db: &mut PgConnection,
    queue: Option<&str>,
    window_secs: f64,
) -> Result<Vec<ScalingRow>, sqlx::Error> {
    let mut rows: BTreeMap<String, ScalingRow> = BTreeMap::new();
    for (q, state, jobs, oldest) in depths(db, queue).await? {
        let r = entry(&mut rows, q);
        match state.as_str() {
            "available" => {
                r.available = jobs;
                r.oldest_available_secs = oldest.unwrap_or(0.0);
            }
            "scheduled" => r.scheduled = jobs,
            "pending" => r.pending = jobs,
            "retryable" => r.retryable = jobs,
            _ => r.active = jobs,
        }
    }
    // Batch event rows only (`job_ids` set): every enqueue statement and every ACK writes
    // those, and they are what `ojs_event_batch_time_idx` covers.
    let throughput = sqlx::query!(
        r#"
        select queue as "queue!",
               coalesce(sum(cardinality(job_ids)) filter (where type = 'job.enqueued'), 0)::int8 as "enqueued!",
               coalesce(sum(cardinality(job_ids)) filter (where type = 'job.completed'), 0)::int8 as "completed!"
          from ojs_event
         where job_ids is not null
           and time >= now() - make_interval(secs => $2)
           and type in ('job.enqueued', 'job.completed')
           and queue is not null
           and ($1::text is null or queue = $1)
         group by queue
        "#,
        queue,
        window_secs,
    )
    .fetch_all(&mut *db)
    .await?;
    for t in throughput {
        let r = entry(&mut rows, t.queue);
        r.enqueued = t.enqueued;
        r.completed = t.completed;
    }
    for (q, workers, capacity, busy) in workers(db, queue).await? {
        let r = entry(&mut rows, q);
        (r.workers, r.capacity, r.busy) = (workers, capacity, busy);
    }
    Ok(rows.into_values().collect())
}

fn entry(rows: &mut BTreeMap<String, ScalingRow>, queue: String) -> &mut ScalingRow {
    rows.entry(queue.clone()).or_insert_with(|| ScalingRow {
        queue,
        ..ScalingRow::default()
    })
}

/// The running, non-stale registered workers of each queue they name (or of `queue` alone):
/// `(queue, workers, declared capacity, jobs they hold)`. A worker naming several queues counts
/// in each; the jobs it holds are read through its leases.
pub async fn workers(
    db: &mut PgConnection,
    queue: Option<&str>,
) -> Result<Vec<(String, i64, Option<i64>, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select q.queue as "queue!", count(*) as "workers!",
               sum(w.concurrency)::int8 as capacity,
               coalesce(sum(b.held), 0)::int8 as "busy!"
          from ojs_worker w
         cross join lateral unnest(w.queues) as q(queue)
          left join lateral (
              select sum(l.open)::int8 as held from ojs_lease l where l.worker_id = w.id
          ) b on true
         where w.state = 'running' and w.stale_at is null
           and ($1::text is null or q.queue = $1)
         group by q.queue
        "#,
        queue,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.queue, r.workers, r.capacity, r.busy))
        .collect())
}
