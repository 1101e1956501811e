//! Workflows (`ojs_workflow`, `ojs_workflow_node`; migration V18): made with their jobs, read
//! with their jobs' live state, cancelled. Their progress is the database's own: the triggers
//! of V18 advance a workflow in the transaction that finishes each of its jobs.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::{JobState, RawJson};

/// A workflow's row.
#[derive(Debug, Clone)]
pub struct WorkflowRow {
    pub id: Uuid,
    pub r#type: String,
    pub name: Option<String>,
    pub state: String,
    pub total: i32,
    pub completed: i32,
    pub failed: i32,
    pub cancelled: i32,
    pub callbacks_fired: Option<Vec<String>>,
    pub failed_step_index: Option<i32>,
    pub errors: RawJson,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
}

/// One node with its job's live state (`None` once the job is gone: pruned, or never run).
#[derive(Debug, Clone)]
pub struct NodeRow {
    pub idx: i32,
    pub kind: String,
    pub job_id: Uuid,
    pub r#type: String,
    pub queue: String,
    pub state: String,
    pub result: Option<RawJson>,
    pub error: Option<RawJson>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Dag only: the step's id.
    pub name: Option<String>,
    /// Dag only: the indexes of the nodes it depends on.
    pub depends_on: Option<Vec<i32>>,
    pub job_state: Option<JobState>,
    pub started_at: Option<DateTime<Utc>>,
}

/// A node to write with its workflow.
#[derive(Debug, Clone)]
pub struct NewNode<'a> {
    pub kind: &'a str,
    pub job_id: Uuid,
    pub r#type: &'a str,
    pub queue: &'a str,
    /// Whether its job is held until the workflow releases it.
    pub waiting: bool,
    /// Dag only: the step's id.
    pub name: Option<&'a str>,
    /// Dag only: the indexes of the nodes it depends on (`None` outside dags).
    pub depends_on: Option<&'a [usize]>,
}

/// Writes a workflow and its nodes (index = position in `nodes`), and `workflow.created`.
pub async fn insert(
    db: impl PgExecutor<'_>,
    id: Uuid,
    r#type: &str,
    name: Option<&str>,
    priority: Option<i32>,
    total: i32,
    nodes: &[NewNode<'_>],
) -> Result<(), sqlx::Error> {
    let kinds: Vec<&str> = nodes.iter().map(|n| n.kind).collect();
    let jobs: Vec<Uuid> = nodes.iter().map(|n| n.job_id).collect();
    let types: Vec<&str> = nodes.iter().map(|n| n.r#type).collect();
    let queues: Vec<&str> = nodes.iter().map(|n| n.queue).collect();
    let states: Vec<&str> = nodes
        .iter()
        .map(|n| if n.waiting { "waiting" } else { "released" })
        .collect();
    let names: Vec<Option<&str>> = nodes.iter().map(|n| n.name).collect();
    // Postgres array literals: unnest would flatten an array of arrays.
    let depends_on: Vec<Option<String>> = nodes
        .iter()
        .map(|n| {
            n.depends_on.map(|d| {
                let items: Vec<String> = d.iter().map(usize::to_string).collect();
                format!("{{{}}}", items.join(","))
            })
        })
        .collect();
    sqlx::query!(
        r#"
        with w as (
            -- The workflow is its jobs' tenant's when they all have the same one (a request
            -- acting as a tenant makes them so; migration V26).
            insert into ojs_workflow (id, type, name, total, priority, tenant)
            select $1, $2, $3, $4, $5,
                   (select case when count(distinct j.tenant) = 1 and count(j.tenant) = count(*)
                                then nullif(min(j.tenant), '') end
                      from ojs_job j where j.id = any($7::uuid[]))
            returning *
        ),
        nodes as (
            insert into ojs_workflow_node (workflow_id, idx, kind, job_id, type, queue, state,
                                           name, depends_on, waiting_on)
            select $1, t.ord - 1, t.kind, t.job_id, t.type, t.queue, t.state, t.name,
                   t.depends_on::int[], coalesce(cardinality(t.depends_on::int[]), 0)
              from unnest($6::text[], $7::uuid[], $8::text[], $9::text[], $10::text[],
                          $11::text[], $12::text[])
                   with ordinality as t(kind, job_id, type, queue, state, name, depends_on, ord)
        )
        select ojs_workflow_event('workflow.created', w, null,
                                  jsonb_build_object('jobs', $4::int)) as "created"
          from w
        "#,
        id,
        r#type,
        name,
        total,
        priority,
        &kinds as &[&str],
        &jobs,
        &types as &[&str],
        &queues as &[&str],
        &states as &[&str],
        &names as &[Option<&str>],
        &depends_on as &[Option<String>],
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// The workflow's row.
pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<WorkflowRow>, sqlx::Error> {
    sqlx::query_as!(
        WorkflowRow,
        r#"
        select id, type, name, state, total, completed, failed, cancelled, callbacks_fired,
               failed_step_index, errors as "errors: RawJson", created_at, completed_at,
               cancelled_at
          from ojs_workflow where id = $1
        "#,
        id,
    )
    .fetch_optional(db)
    .await
}

/// The workflow's nodes in index order, each with its job's live state.
pub async fn nodes(db: impl PgExecutor<'_>, id: Uuid) -> Result<Vec<NodeRow>, sqlx::Error> {
    sqlx::query_as!(
        NodeRow,
        r#"
        select n.idx, n.kind, n.job_id, n.type, n.queue, n.state,
               n.result as "result: RawJson", n.error as "error: RawJson", n.finished_at,
               n.name, n.depends_on, j.state as "job_state: JobState", j.started_at
          from ojs_workflow_node n
          left join lateral (
              select a.state, a.started_at from ojs_job_all a where a.id = n.job_id limit 1
          ) j on true
         where n.workflow_id = $1
         order by n.idx
        "#,
        id,
    )
    .fetch_all(db)
    .await
}

/// Workflows, newest first, optionally of one state: a page of `limit` after `offset`, and
/// how many there are in all.
pub async fn list(
    db: impl PgExecutor<'_> + Copy,
    state: Option<&str>,
    tenant: Option<&str>,
    limit: i64,
    offset: i64,
) -> Result<(Vec<WorkflowRow>, i64), sqlx::Error> {
    let rows = sqlx::query_as!(
        WorkflowRow,
        r#"
        select id, type, name, state, total, completed, failed, cancelled, callbacks_fired,
               failed_step_index, errors as "errors: RawJson", created_at, completed_at,
               cancelled_at
          from ojs_workflow
         where ($1::text is null or state = $1) and ($4::text is null or tenant = $4)
         order by created_at desc, id desc
         limit $2 offset $3
        "#,
        state,
        limit,
        offset,
        tenant,
    )
    .fetch_all(db)
    .await?;
    let total = sqlx::query_scalar!(
        r#"select count(*) as "n!" from ojs_workflow
            where ($1::text is null or state = $1) and ($2::text is null or tenant = $2)"#,
        state,
        tenant,
    )
    .fetch_one(db)
    .await?;
    Ok((rows, total))
}

/// How many workflows are in each state (`running`, `completed`, `failed`, `cancelled`; a
/// state without any is 0).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, utoipa::ToSchema)]
pub struct WorkflowCounts {
    pub running: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// Workflows per state.
pub async fn counts(db: impl PgExecutor<'_>) -> Result<WorkflowCounts, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select count(*) filter (where state = 'running') as "running!",
               count(*) filter (where state = 'completed') as "completed!",
               count(*) filter (where state = 'failed') as "failed!",
               count(*) filter (where state = 'cancelled') as "cancelled!"
          from ojs_workflow
        "#
    )
    .fetch_one(db)
    .await?;
    Ok(WorkflowCounts {
        running: row.running,
        completed: row.completed,
        failed: row.failed,
        cancelled: row.cancelled,
    })
}

/// What a cancel did.
#[derive(Debug, Clone)]
pub enum Cancelled {
    /// No such workflow.
    NotFound,
    /// It had already ended, in this state.
    Ended(String),
    /// Cancelled: how many nodes were stopped (held ones dropped, waiting jobs cancelled), and
    /// how many had already completed.
    Done { stopped: i64, completed: i64 },
}

/// Cancels a running workflow: held nodes are dropped (their jobs never run), enqueued jobs
/// not yet claimed are cancelled; claimed ones finish, and no longer advance it.
pub async fn cancel(db: impl PgExecutor<'_>, id: Uuid) -> Result<Cancelled, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with w as (
            select id, state from ojs_workflow where id = $1 for update
        ),
        ended as (
            update ojs_workflow x set state = 'cancelled', cancelled_at = now()
              from w
             where x.id = w.id and w.state = 'running'
            returning x.*
        ),
        dropped as (
            select ojs_workflow_drop_waiting(e.id, array['step', 'job', 'on_complete', 'on_success', 'on_failure'], 'cancelled') as n
              from ended e
        ),
        targets as (
            select j.id, j.state as prev
              from ojs_job j
              join ojs_workflow_node n on n.job_id = j.id
              join ended e on n.workflow_id = e.id
             where n.state = 'released'
               and j.state in ('scheduled', 'available', 'retryable', 'pending')
               for update of j
        ),
        jobs as (
            update ojs_job j
               set state = 'cancelled', cancelled_at = now()
              from targets t
             where j.id = t.id
            returning j, t.prev
        ),
        job_events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.cancelled', (c.j).id::text, (c.j).id, (c.j).queue, (c.j).type, c.prev,
                   'cancelled', ojs_job_transition_data(c.prev, c.j)
              from jobs c
        ),
        event as (
            select ojs_workflow_event('workflow.cancelled', e, null, '{}') from ended e
        )
        select (select state from w) as "previous",
               (select count(*) from ended) as "ended!",
               (select coalesce(sum(n), 0) from dropped)::int8 + (select count(*) from jobs) as "stopped!",
               (select count(*) from ojs_workflow_node n where n.workflow_id = $1 and n.state = 'completed') as "completed!",
               (select count(*) from event) as "events!"
        "#,
        id,
    )
    .fetch_one(db)
    .await?;
    Ok(match (row.previous, row.ended) {
        (None, _) => Cancelled::NotFound,
        (Some(state), 0) => Cancelled::Ended(state),
        (Some(_), _) => Cancelled::Done {
            stopped: row.stopped,
            completed: row.completed,
        },
    })
}

/// Deletes, oldest first, at most `limit` workflows that ended before the cutoff of their
/// state (completed, failed, cancelled: the retention of jobs that end so), with their nodes.
/// Returns how many.
pub async fn prune(
    db: impl PgExecutor<'_>,
    completed_before: DateTime<Utc>,
    failed_before: DateTime<Utc>,
    cancelled_before: DateTime<Utc>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        delete from ojs_workflow w
         using (select id from ojs_workflow
                 where state <> 'running'
                   and coalesce(completed_at, cancelled_at) < greatest($1::timestamptz, $2::timestamptz, $3::timestamptz)
                   and case state when 'completed' then completed_at < $1
                                  when 'failed' then completed_at < $2
                                  else cancelled_at < $3 end
                 order by coalesce(completed_at, cancelled_at)
                 limit $4) old
         where w.id = old.id
        "#,
        completed_before,
        failed_before,
        cancelled_before,
        limit,
    )
    .execute(db)
    .await?;
    Ok(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX))
}

/// Deletes every workflow (the test reset; their jobs are deleted with all the others).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_workflow").execute(db).await?;
    Ok(())
}

/// Where a job came from and what it leads to, as a job's lineage shows it.
#[derive(Debug, Clone)]
pub struct LineageRow {
    /// The job's own `parent_id` and `root_id` attributes, as sent.
    pub parent_attr: Option<String>,
    pub root_attr: Option<String>,
    /// Its workflow, that workflow's type and the job's place in it.
    pub workflow_id: Option<Uuid>,
    pub workflow_type: Option<String>,
    pub step: Option<i32>,
    /// The workflow jobs it waited for, and those that wait for it, in step order.
    pub parents: Vec<Uuid>,
    pub children: Vec<Uuid>,
    /// The first step of its chain.
    pub chain_root: Option<Uuid>,
    /// The cron entry whose run enqueued it, and the run's slot.
    pub cron_name: Option<String>,
    pub cron_scheduled_time: Option<String>,
    pub attempt: i32,
}

/// Job `id`'s lineage (`None`: no such job): its client-given `parent_id`/`root_id`, its
/// workflow and neighbours there (a chain's previous and next step, a dag's dependencies and
/// dependents, a batch's members and callbacks), and the cron run that enqueued it (from the
/// job's `cron.triggered` event).
pub async fn lineage(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<LineageRow>, sqlx::Error> {
    sqlx::query_as!(
        LineageRow,
        r#"
        with j as (select id, extra, attempt from ojs_job_all where id = $1),
             me as (select n.workflow_id, n.idx, n.kind, n.depends_on, w.type
                      from ojs_workflow_node n
                      join ojs_workflow w on w.id = n.workflow_id
                     where n.job_id = $1
                     limit 1),
             parents as (
                 select p.job_id, p.idx
                   from ojs_workflow_node p, me
                  where p.workflow_id = me.workflow_id
                    and ((me.type = 'chain' and p.idx = me.idx - 1)
                         or (me.depends_on is not null and p.idx = any(me.depends_on))
                         or (me.kind in ('on_complete', 'on_success', 'on_failure') and p.kind = 'job'))
             ),
             children as (
                 select c.job_id, c.idx
                   from ojs_workflow_node c, me
                  where c.workflow_id = me.workflow_id
                    and ((me.type = 'chain' and c.idx = me.idx + 1)
                         or (c.depends_on is not null and me.idx = any(c.depends_on))
                         or (me.kind = 'job' and c.kind in ('on_complete', 'on_success', 'on_failure')))
             ),
             cron as (
                 select e.data ->> 'cron_name' as name, e.data ->> 'scheduled_time' as slot
                   from ojs_event e
                  where e.job_id = $1 and e.type = 'cron.triggered'
                  limit 1
             )
        select j.extra ->> 'parent_id' as parent_attr, j.extra ->> 'root_id' as root_attr,
               me.workflow_id as "workflow_id?", me.type as "workflow_type?", me.idx as "step?",
               coalesce((select array_agg(job_id order by idx) from parents), '{}') as "parents!",
               coalesce((select array_agg(job_id order by idx) from children), '{}') as "children!",
               (select r.job_id from ojs_workflow_node r
                 where me.type = 'chain' and r.workflow_id = me.workflow_id and r.idx = 0) as chain_root,
               (select name from cron) as cron_name,
               (select slot from cron) as cron_scheduled_time,
               j.attempt as "attempt!"
          from j left join me on true
        "#,
        id,
    )
    .fetch_optional(db)
    .await
}
