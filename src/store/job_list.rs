//! The admin listing of jobs: a page of the jobs a filter matches, in the order asked, and how
//! many match in all, quick beside millions of completed jobs; and the ids a bulk action takes.
//!
//! Completed jobs are most of a long-running database (`ojs_job_done`, migration V15), and the
//! one order an index of theirs keeps is `completed_at`. The default listing (newest created
//! first) reads them through that index, exactly: no job completes before it is created, so
//! once N completed jobs created at or after some time `t` are known, none of the N newest can
//! have completed before `t`. [`list_jobs`] reads the latest completions (twice the jobs up to
//! the page's end, and 100 more, so that a few long-running jobs among them do not widen the
//! range), takes `t` as the creation time of the N-th newest of those, and sorts only the jobs
//! completed since `t`, with the live ones (`ojs_job`). Other orders sort every match.
//!
//! The total is counted as [`counting`](super::counting) says: exactly up to 10,000 matches.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::job::{JobId, JobState};
use crate::store::counting::{Listed, count_up_to};

/// Up to this many jobs before a page's end, the default order reads completed jobs from the
/// latest completions back (see the module's documentation); deeper pages sort every match.
const RECENT_FIRST_UP_TO: i64 = 10_000;

/// Which jobs a listing or a bulk action applies to (`None`: any).
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub states: Option<Vec<JobState>>,
    /// Exact job type.
    pub job_type: Option<String>,
    /// Job type prefix (from `type=prefix*`).
    pub type_prefix: Option<String>,
    /// Matches the last error's `type` or `code`.
    pub error_type: Option<String>,
    /// `created_at` at or after.
    pub since: Option<DateTime<Utc>>,
    /// `created_at` before.
    pub until: Option<DateTime<Utc>>,
    /// Only this tenant's jobs (`ojs_job.tenant`, migration V24).
    pub tenant: Option<String>,
}

impl JobFilter {
    /// The type prefix as a LIKE pattern.
    fn prefix_pattern(&self) -> Option<String> {
        self.type_prefix.as_deref().map(super::like_prefix)
    }

    /// The state filter as text (Postgres casts it to the enum).
    fn state_names(&self) -> Option<Vec<String>> {
        self.states
            .as_ref()
            .map(|s| s.iter().map(|s| s.as_str().to_owned()).collect())
    }
}

/// What a job listing is ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobSort {
    #[default]
    CreatedAt,
    /// Jobs without `scheduled_at` come last either way.
    ScheduledAt,
    Priority,
}

impl JobSort {
    pub fn as_str(self) -> &'static str {
        match self {
            JobSort::CreatedAt => "created_at",
            JobSort::ScheduledAt => "scheduled_at",
            JobSort::Priority => "priority",
        }
    }
}

/// One line of a job listing.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobSummary {
    pub id: JobId,
    #[sqlx(rename = "type")]
    pub r#type: String,
    pub queue: String,
    pub state: JobState,
    pub priority: i32,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub enqueued_at: Option<DateTime<Utc>>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// A page of the job listing.
pub type JobPage = Listed<JobSummary>;

/// The columns a listing reads, the same from `ojs_job` and `ojs_job_done`.
const COLUMNS: &str = "j.id, j.seq, j.type, j.queue, j.state, j.priority, j.attempt, \
                       j.max_attempts, j.created_at, j.enqueued_at, j.scheduled_at, \
                       j.started_at, j.completed_at";

/// Which completed jobs (`ojs_job_done`) a statement reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completed {
    /// Every one the filter matches.
    All,
    /// Those completed at or after this time.
    Since(DateTime<Utc>),
    /// None: none matches.
    None,
}

/// The two tables of jobs: `ojs_job` (live jobs, and those ended otherwise than completed)
/// and `ojs_job_done` (completed jobs, all of them `completed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Live,
    Done,
}

impl JobFilter {
    /// Whether `ojs_job_done` can hold a match: the state filter, if any, takes `completed`.
    fn reads_done(&self) -> bool {
        self.states
            .as_ref()
            .is_none_or(|s| s.contains(&JobState::Completed))
    }

    /// Appends ` from <table> j where ...` with this filter's conditions, each value bound.
    fn push_from(&self, q: &mut QueryBuilder<'_, Postgres>, table: Table) {
        q.push(match table {
            Table::Live => " from ojs_job j where true",
            Table::Done => " from ojs_job_done j where true",
        });
        if let Some(queue) = &self.queue {
            q.push(" and j.queue = ").push_bind(queue.clone());
        }
        // Every job of ojs_job_done is completed, and reads_done said the filter takes those.
        if let (Some(states), Table::Live) = (self.state_names(), table) {
            q.push(" and j.state = any(")
                .push_bind(states)
                .push("::text[]::ojs_job_state[])");
        }
        if let Some(job_type) = &self.job_type {
            q.push(" and j.type = ").push_bind(job_type.clone());
        }
        if let Some(pattern) = self.prefix_pattern() {
            q.push(" and j.type like ").push_bind(pattern);
        }
        if let Some(error) = &self.error_type {
            q.push(" and (j.error ->> 'type' = ")
                .push_bind(error.clone())
                .push(" or j.error ->> 'code' = ")
                .push_bind(error.clone())
                .push(")");
        }
        if let Some(since) = self.since {
            q.push(" and j.created_at >= ").push_bind(since);
        }
        if let Some(until) = self.until {
            q.push(" and j.created_at < ").push_bind(until);
        }
        if let Some(tenant) = &self.tenant {
            q.push(" and j.tenant = ").push_bind(tenant.clone());
        }
    }

    /// Appends `select <what> from ojs_job ... union all select <what> from ojs_job_done ...`,
    /// the second as `completed` says.
    fn push_union(&self, q: &mut QueryBuilder<'_, Postgres>, what: &str, completed: Completed) {
        q.push("select ").push(what);
        self.push_from(q, Table::Live);
        if completed == Completed::None || !self.reads_done() {
            return;
        }
        q.push(" union all select ").push(what);
        self.push_from(q, Table::Done);
        if let Completed::Since(since) = completed {
            q.push(" and j.completed_at >= ").push_bind(since);
        }
    }
}

/// Jobs matching `filter`, ordered by `sort` (arrival order breaks ties, in the same direction),
/// `limit` of them from `offset` on; and how many match in all.
pub async fn list_jobs(
    db: impl crate::store::Pool<'_>,
    filter: &JobFilter,
    sort: JobSort,
    ascending: bool,
    limit: i64,
    offset: i64,
) -> Result<JobPage, sqlx::Error> {
    let limit = limit.max(1);
    let offset = offset.max(0);
    // How many jobs completed since a time, and which filters are set, decide the plan.
    let mut tx = super::planned_for_their_values(db).await?;
    // The jobs up to the page's end, and one more to tell whether more follow.
    let through = offset.saturating_add(limit).saturating_add(1);
    let mut completed = Completed::All;
    if sort == JobSort::CreatedAt
        && !ascending
        && filter.reads_done()
        && through <= RECENT_FIRST_UP_TO
    {
        completed = match newest_created_among_recent_completions(&mut tx, filter, through).await? {
            Some(t) => Completed::Since(t),
            None => Completed::None,
        };
    }

    let mut q = QueryBuilder::new(
        "select j.id, j.type, j.queue, j.state, j.priority, j.attempt, j.max_attempts, \
                j.created_at, j.enqueued_at, j.scheduled_at, j.started_at, j.completed_at \
           from (",
    );
    filter.push_union(&mut q, COLUMNS, completed);
    let dir = if ascending { "asc" } else { "desc" };
    q.push(") j order by ");
    q.push(match sort {
        JobSort::CreatedAt => format!("j.created_at {dir}"),
        JobSort::ScheduledAt => format!("j.scheduled_at {dir} nulls last"),
        JobSort::Priority => format!("j.priority {dir}"),
    });
    q.push(format_args!(", j.seq {dir} limit "))
        .push_bind(limit + 1)
        .push(" offset ")
        .push_bind(offset);
    let jobs = q.build_query_as().fetch_all(&mut *tx).await?;
    // Counted without the floor on completed_at, which only bounds the page.
    let completed = match completed {
        Completed::Since(_) => Completed::All,
        other => other,
    };
    let page = Listed::of(jobs, limit, offset, async || {
        count_up_to(&mut tx, |q| filter.push_union(q, "1", completed)).await
    })
    .await?;
    tx.commit().await?;
    Ok(page)
}

/// The floor on `completed_at` of the completed jobs that can be among the `n` newest created
/// ones matching `filter` (see the module's documentation): the creation time of the `n`-th
/// newest created among the latest `2n + 100` completed; `None` when no completed job matches.
async fn newest_created_among_recent_completions(
    db: &mut PgConnection,
    filter: &JobFilter,
    n: i64,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let mut q = QueryBuilder::new(
        "select min(created_at) from (select created_at from (select j.created_at",
    );
    filter.push_from(&mut q, Table::Done);
    q.push(" order by j.completed_at desc limit ")
        .push_bind(n.saturating_mul(2).saturating_add(100))
        .push(") recent order by created_at desc limit ")
        .push_bind(n)
        .push(") newest");
    q.build_query_scalar().fetch_one(&mut *db).await
}

/// Ids of up to `limit` jobs matching `filter` (its `states` are the caller's to narrow to the
/// states an action accepts), oldest first.
pub async fn matching_ids(
    db: impl PgExecutor<'_>,
    filter: &JobFilter,
    limit: i64,
) -> Result<Vec<Uuid>, sqlx::Error> {
    let pattern = filter.prefix_pattern();
    let states = filter.state_names();
    sqlx::query_scalar!(
        r#"
        select j.id as "id!"
          from ojs_job_all j
         where ($1::text is null or j.queue = $1)
           and ($2::text[] is null or j.state = any($2::text[]::ojs_job_state[]))
           and ($3::text is null or j.type = $3)
           and ($4::text is null or j.type like $4)
           and ($5::text is null or j.error ->> 'type' = $5 or j.error ->> 'code' = $5)
           and ($6::timestamptz is null or j.created_at >= $6)
           and ($7::timestamptz is null or j.created_at < $7)
           and ($9::text is null or j.tenant = $9)
         order by j.seq
         limit $8
        "#,
        filter.queue,
        states.as_deref(),
        filter.job_type,
        pattern,
        filter.error_type,
        filter.since,
        filter.until,
        limit,
        filter.tenant,
    )
    .fetch_all(db)
    .await
}
