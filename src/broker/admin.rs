//! Operator operations of the [OJS admin API]: figures, job listings, manual retry of any
//! discarded job, bulk actions and queue purges.
//!
//! [OJS admin API]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Broker, QueueStats};
use crate::error::{Error, Result};
use crate::job::{Job, JobId, JobState};
use crate::store;
use crate::store::admin::{Overview, QueueActivity};
use crate::store::dead_letter::RetryOverride;
use crate::store::job_list::{JobFilter, JobPage, JobSort};
use crate::store::workflow::WorkflowCounts;

/// The window of the "recent" figures: throughput and latency.
pub const RECENT_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Most jobs one bulk or purge statement handles (they loop until done).
const BULK_BATCH: i64 = 1_000;

/// A queue as the admin API shows it.
#[derive(Debug, Clone)]
pub struct AdminQueue {
    pub stats: QueueStats,
    /// Its last [`RECENT_WINDOW`].
    pub activity: QueueActivity,
}

/// One queue in detail.
#[derive(Debug, Clone)]
pub struct AdminQueueDetail {
    pub queue: AdminQueue,
    /// The resolved configuration (system defaults, `_default`, the queue's own values).
    pub config: std::sync::Arc<crate::queue_config::QueueConfig>,
    /// When the job that has waited longest became available.
    pub oldest_available_at: Option<DateTime<Utc>>,
    /// The jobs counted against `max_size` (bounded queues only).
    pub depth: Option<i64>,
}

/// Queue and worker counts for the health report.
#[derive(Debug, Clone, Copy)]
pub struct HealthCounts {
    /// Queues (`_default` aside).
    pub queues: i64,
    pub paused_queues: i64,
    pub workers: i64,
    /// Workers stale as the worker listing counts them.
    pub stale_workers: i64,
}

/// A rate-limited queue's limit and use.
#[derive(Debug, Clone)]
pub struct RateLimitUsage {
    pub queue: String,
    pub limit: i64,
    pub period_ms: u64,
    /// Jobs started within the last period.
    pub started: i64,
    /// Available jobs.
    pub waiting: i64,
}

/// A bulk action on jobs ([OJS bulk operations]).
///
/// [OJS bulk operations]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#8-bulk-operations
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// Discarded jobs back to `available`, as a manual retry.
    Retry,
    /// Unfinished jobs to `cancelled`.
    Cancel,
    /// Finished jobs deleted for good.
    Delete,
}

impl BulkAction {
    pub fn parse(s: &str) -> Option<BulkAction> {
        match s {
            "retry" => Some(BulkAction::Retry),
            "cancel" => Some(BulkAction::Cancel),
            "delete" => Some(BulkAction::Delete),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Delete => "delete",
        }
    }

    /// The states the action applies to.
    pub fn states(self) -> &'static [JobState] {
        match self {
            BulkAction::Retry => &[JobState::Discarded],
            BulkAction::Cancel => &JobState::CANCELLABLE,
            BulkAction::Delete => &[
                JobState::Completed,
                JobState::Cancelled,
                JobState::Discarded,
            ],
        }
    }
}

/// What a bulk action did.
#[derive(Debug, Clone, Default)]
pub struct BulkOutcome {
    /// Jobs that matched the filter in a state the action applies to.
    pub matched: usize,
    /// Jobs the action was carried out on.
    pub succeeded: usize,
    /// Jobs it could not be carried out on (they changed meanwhile), and why.
    pub errors: Vec<(Uuid, String)>,
}

impl Broker {
    /// Jobs enqueued, completed and discarded per bucket ([`store::admin::history`]).
    pub async fn history(
        &self,
        since: DateTime<Utc>,
        bucket_ms: i64,
        queue: Option<&str>,
    ) -> Result<Vec<(i64, i64, i64, i64)>> {
        Ok(store::admin::history(&self.db, since, bucket_ms, queue).await?)
    }

    /// The rate-limited queues by name, a page at a time (with how many there are): each
    /// queue's limit, the jobs it started within the limit's period, and its available jobs.
    pub async fn rate_limits(&self, limit: i64, offset: i64) -> Result<(Vec<RateLimitUsage>, i64)> {
        let (queues, _) = store::queue::list(&self.db, None, i64::MAX, 0).await?;
        let configs = self.configs.current(&self.db).await?;
        let limited: Vec<(String, crate::queue_config::RateLimit)> = queues
            .into_iter()
            .filter_map(|q| configs.of(&q.name).rate_limit.map(|r| (q.name, r)))
            .collect();
        let total = limited.len() as i64;
        let mut page = Vec::new();
        for (queue, rate) in limited
            .into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
        {
            let period_ms = i64::try_from(rate.period_ms).unwrap_or(i64::MAX);
            let (started, waiting) = store::queue::rate_usage(
                &self.db,
                &queue,
                &store::queue::rate_key(&queue),
                period_ms,
            )
            .await?;
            page.push(RateLimitUsage {
                queue,
                limit: rate.limit,
                period_ms: rate.period_ms,
                started,
                waiting,
            });
        }
        Ok((page, total))
    }

    /// Jobs holding unique keys, a page at a time, and how many there are.
    pub async fn unique_holders(
        &self,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<store::admin::UniqueHolder>, i64)> {
        Ok(store::admin::unique_holders(&self.db, limit, offset).await?)
    }

    /// Queue and worker counts for the health report.
    pub async fn health_counts(&self) -> Result<HealthCounts> {
        let (queues, paused_queues) = store::admin::queue_counts(&self.db).await?;
        let (workers, .., stale_workers) =
            store::worker::summary(&self.db, None, self.settings.heartbeat_timeout).await?;
        Ok(HealthCounts {
            queues,
            paused_queues,
            workers,
            stale_workers,
        })
    }

    /// Queue, worker and job counts, and the throughput of the last [`RECENT_WINDOW`].
    pub async fn overview(&self) -> Result<Overview> {
        Ok(
            store::admin::overview(&self.db, self.settings.heartbeat_timeout, RECENT_WINDOW)
                .await?,
        )
    }

    /// Workflows per state.
    pub async fn workflow_counts(&self) -> Result<WorkflowCounts> {
        Ok(store::workflow::counts(&self.db).await?)
    }

    /// Queues by name, a page at a time, with their counts and recent activity; and how many
    /// there are.
    pub async fn admin_queues(&self, limit: i64, offset: i64) -> Result<(Vec<AdminQueue>, i64)> {
        let (queues, total) = self.queues(None, None, limit, offset).await?;
        Ok((self.with_activity(queues).await?, total))
    }

    /// One queue with its counts, recent activity, resolved configuration and oldest waiting
    /// job.
    pub async fn admin_queue(&self, name: &str) -> Result<AdminQueueDetail> {
        let stats = self.queue_stats(name, None).await?;
        let queue = self
            .with_activity(vec![stats])
            .await?
            .pop()
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))?;
        let config = self.configs.current(&self.db).await?.of(name).clone();
        let oldest_available_at = store::admin::oldest_available_at(&self.db, name).await?;
        let depth = match config.max_size {
            Some(_) => store::queue::capacity(&self.db, name)
                .await?
                .map(|(jobs, _)| jobs)
                .or(Some(0)),
            None => None,
        };
        Ok(AdminQueueDetail {
            queue,
            config,
            oldest_available_at,
            depth,
        })
    }

    async fn with_activity(&self, queues: Vec<QueueStats>) -> Result<Vec<AdminQueue>> {
        let names: Vec<String> = queues.iter().map(|q| q.queue.name.clone()).collect();
        let mut activity = store::admin::queue_activity(&self.db, &names, RECENT_WINDOW).await?;
        Ok(queues
            .into_iter()
            .map(|stats| AdminQueue {
                activity: activity.remove(&stats.queue.name).unwrap_or_default(),
                stats,
            })
            .collect())
    }

    /// Deletes the jobs of an existing queue in `states` (never `active`) created before
    /// `older_than`. Returns how many.
    pub async fn purge_queue(
        &self,
        name: &str,
        states: &[JobState],
        older_than: Option<DateTime<Utc>>,
    ) -> Result<i64> {
        self.queue(name).await?;
        let mut purged = 0;
        loop {
            let mut tx = self.db.begin().await?;
            let n =
                store::admin::purge_queue(&mut tx, name, states, older_than, BULK_BATCH).await?;
            tx.commit().await?;
            purged += n;
            if n < BULK_BATCH {
                return Ok(purged);
            }
        }
    }

    /// Jobs matching `filter` in `sort` order, a page at a time; and how many match.
    pub async fn admin_jobs(
        &self,
        filter: &JobFilter,
        sort: JobSort,
        ascending: bool,
        limit: i64,
        offset: i64,
    ) -> Result<JobPage> {
        Ok(store::job_list::list_jobs(&self.db, filter, sort, ascending, limit, offset).await?)
    }

    /// Manual retry of a discarded job, in the dead-letter queue or not, with optional new
    /// values: as a dead-letter retry. Any other state is a conflict.
    pub async fn retry_discarded(&self, id: JobId, with: &RetryOverride) -> Result<Job> {
        let mut tx = self.db.begin().await?;
        if let Some(queue) = &with.queue {
            crate::telemetry::queues_created(i64::from(
                store::queue::ensure(&mut *tx, queue, true).await?,
            ));
        }
        let retried = store::dead_letter::retry_discarded(&mut *tx, &[id.0], with, false)
            .await?
            .pop();
        let Some(job) = retried else {
            drop(tx);
            let job = self.info(id).await?;
            return Err(Error::InvalidTransition {
                job_id: id,
                operation: "retry",
                current: job.state,
                allowed: &[JobState::Discarded],
            });
        };
        tx.commit().await?;
        Ok(job)
    }

    /// Carries out `action` on every job that matches `filter` in a state the action applies
    /// to, a batch at a time. A filter naming only states the action does not apply to is
    /// refused.
    pub async fn bulk(&self, action: BulkAction, filter: &JobFilter) -> Result<BulkOutcome> {
        let states: Vec<JobState> = match &filter.states {
            None => action.states().to_vec(),
            Some(wanted) => wanted
                .iter()
                .copied()
                .filter(|s| action.states().contains(s))
                .collect(),
        };
        if states.is_empty() {
            let applies: Vec<&str> = action.states().iter().map(|s| s.as_str()).collect();
            return Err(Error::invalid(
                "$.filter.state",
                format!(
                    "bulk {} applies to jobs in state {}; the filter selects none of them",
                    action.as_str(),
                    applies.join(", ")
                ),
            ));
        }
        let filter = JobFilter {
            states: Some(states),
            ..filter.clone()
        };
        let mut outcome = BulkOutcome::default();
        loop {
            let ids = store::job_list::matching_ids(&self.db, &filter, BULK_BATCH).await?;
            if ids.is_empty() {
                return Ok(outcome);
            }
            let done: Vec<Uuid> = match action {
                BulkAction::Retry => store::dead_letter::retry_discarded(
                    &self.db,
                    &ids,
                    &RetryOverride::default(),
                    false,
                )
                .await?
                .into_iter()
                .map(|job| job.id.0)
                .collect(),
                BulkAction::Delete => store::admin::delete_finished(&self.db, &ids).await?,
                // One job at a time, exactly as a single CANCEL.
                BulkAction::Cancel => {
                    let mut cancelled = Vec::with_capacity(ids.len());
                    for id in &ids {
                        match self.cancel(JobId(*id)).await {
                            Ok(c) if c.previous_state != JobState::Cancelled => {
                                cancelled.push(*id);
                            }
                            Ok(_)
                            | Err(Error::InvalidTransition { .. } | Error::JobNotFound(_)) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    cancelled
                }
            };
            outcome.matched += ids.len();
            outcome.succeeded += done.len();
            let done_set: HashSet<Uuid> = done.iter().copied().collect();
            let missed: Vec<Uuid> = ids
                .iter()
                .copied()
                .filter(|id| !done_set.contains(id))
                .collect();
            if !missed.is_empty() {
                self.explain_misses(action, &missed, &mut outcome.errors)
                    .await?;
            }
            if (ids.len() as i64) < BULK_BATCH || done.is_empty() {
                return Ok(outcome);
            }
        }
    }

    /// Why `action` skipped each of `ids`: they left the state it applies to after they were
    /// selected.
    async fn explain_misses(
        &self,
        action: BulkAction,
        ids: &[Uuid],
        errors: &mut Vec<(Uuid, String)>,
    ) -> Result<()> {
        let jobs = store::job::get_many(&self.db, ids).await?;
        for id in ids {
            let message = match jobs.iter().find(|j| j.id.0 == *id) {
                Some(job) => format!(
                    "Job is currently {} and cannot be {}",
                    job.state,
                    match action {
                        BulkAction::Retry => "retried",
                        BulkAction::Cancel => "cancelled",
                        BulkAction::Delete => "deleted",
                    }
                ),
                None => "Job no longer exists".to_owned(),
            };
            errors.push((*id, message));
        }
        Ok(())
    }
}
