//! The pruner: retention of finished jobs, events, stale workers and the cron run ledger, and
//! the progress reports of jobs that are gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use serde_json::Value;
use uuid::Uuid;

use super::service::{Context, Pass, Service};
use crate::job::JobState;
use crate::queue_config::DEFAULT_LAYER;
use crate::store;
use crate::store::job::PruneCutoffs;
use crate::wire::duration;

/// Pruner settings.
#[derive(Debug, Clone)]
pub struct PrunerConfig {
    /// Pause between passes (short enough to prune at least every 5 minutes, as the OJS
    /// dead-letter spec's [pruning strategy] recommends).
    ///
    /// [pruning strategy]: https://github.com/openjobspec/spec/blob/main/spec/ojs-dead-letter.md#81-pruning-strategy
    pub interval: Duration,
    /// Completed jobs are kept this long after `completed_at` (default 7 days).
    pub completed: Duration,
    /// Cancelled jobs are kept this long after `cancelled_at` (default 7 days).
    pub cancelled: Duration,
    /// Discarded jobs, dead-lettered or not, are kept this long after `discarded_at`
    /// (default 30 days).
    pub discarded: Duration,
    /// Events are kept this long (default 7 days)…
    pub events: Duration,
    /// …and at most this many (default 1,000,000).
    pub max_events: i64,
    /// Stale workers are listed this long before they are deleted (default 24 hours).
    pub stale_workers: Duration,
    /// Cron run-ledger rows are kept this long after their occurrence was handled (default
    /// 7 days; rows of runs that may still be running are kept).
    pub cron_runs: Duration,
    /// Rows per statement.
    pub batch_size: i64,
}

/// ojsd's defaults (the settings' defaults, see [`crate::config`]).
impl Default for PrunerConfig {
    fn default() -> Self {
        const DAY: Duration = Duration::from_secs(24 * 3600);
        PrunerConfig {
            interval: Duration::from_secs(60),
            completed: DAY * 7,
            cancelled: DAY * 7,
            discarded: DAY * 30,
            events: DAY * 7,
            max_events: 1_000_000,
            stale_workers: DAY,
            cron_runs: DAY * 7,
            batch_size: 1_000,
        }
    }
}

/// Deletes, oldest first and in short batches, finished jobs past their retention (reporting
/// dead-lettered ones as `dead_letter.pruned`), events past theirs, workers stale for a day,
/// workflows that ended longer ago than the retention of jobs that end as they did, and
/// rate-limit keys idle and unchanged for the retention of completed jobs.
/// Deleting finished rows touches neither the FETCH index nor any row a worker can hold.
pub struct Pruner {
    context: Context,
    config: PrunerConfig,
    /// Passes run, for [`FULL_SWEEP_EVERY`].
    passes: AtomicU64,
}

/// Every this many passes (the first included), the walk of finished jobs covers every id
/// rather than stopping at the UUIDv7 of the latest cutoff: it finds the jobs whose ids do
/// not tell their creation time (a client's id stamped in the future, an id of another
/// format left by an earlier release). With the default interval, once an hour.
pub const FULL_SWEEP_EVERY: u64 = 60;

impl Pruner {
    pub fn new(context: Context, config: PrunerConfig) -> Pruner {
        Pruner {
            context,
            config,
            passes: AtomicU64::new(0),
        }
    }

    /// Finished jobs of `ojs_job` past `cutoffs`, along the primary key in batches (each its
    /// own transaction, at most [`super::service::MAX_BATCHES_PER_PASS`] a pass), up to the id bound
    /// of the cutoffs or, on a full sweep, to the end.
    async fn prune_jobs(&self, cutoffs: &PruneCutoffs, sweep: bool) -> Result<Pass, sqlx::Error> {
        let size = self.config.batch_size;
        let before = if sweep {
            Uuid::max()
        } else {
            cutoffs.id_bound()
        };
        let mut after = None;
        let mut pass = Pass::default();
        for _ in 0..super::service::MAX_BATCHES_PER_PASS {
            let mut tx = self.context.begin("scheduler").await?;
            let (deleted, last) =
                store::job::prune_finished(&mut *tx, cutoffs, after, before, size).await?;
            tx.commit().await?;
            pass.processed += deleted as u64;
            pass.more = deleted >= size;
            if !pass.more {
                break;
            }
            after = last;
        }
        Ok(pass)
    }

    /// Deletes `target` rows in batches; returns rows deleted and whether work is left.
    async fn prune(&self, target: Target) -> Result<Pass, sqlx::Error> {
        let size = self.config.batch_size;
        self.context
            .batches("scheduler", |conn| {
                let target = target.clone();
                Box::pin(async move {
                    let deleted = match target {
                        Target::Done(ref cutoffs) => {
                            store::job::prune_done(conn, cutoffs, size).await?
                        }
                        Target::DeadLetterExcess(ref queue, keep) => {
                            store::dead_letter::prune_excess(conn, queue, keep, size).await?
                        }
                        Target::Events(cutoff, max) => {
                            store::event::prune(conn, cutoff, max, size).await?
                        }
                        Target::Workers(cutoff) => store::worker::prune(conn, cutoff, size).await?,
                        Target::Progress => store::progress::prune(conn, size).await?,
                        Target::Checkpoints => store::checkpoint::prune(conn, size).await?,
                        Target::Durable => store::step::prune(conn, size).await?,
                        Target::CronRuns(cutoff) => {
                            store::cron::prune_runs(conn, cutoff, size).await?
                        }
                        Target::Workflows {
                            completed,
                            failed,
                            cancelled,
                        } => {
                            store::workflow::prune(conn, completed, failed, cancelled, size).await?
                        }
                        Target::RateKeys(cutoff) => {
                            store::rate_limit::prune(conn, cutoff, size).await?
                        }
                        Target::RateStarts => store::rate_limit::prune_starts(conn, size).await?,
                    };
                    Ok((deleted as u64, deleted >= size))
                })
            })
            .await
    }
}

impl Pruner {
    /// Days of `ojs_job_done`: makes the partitions of today and the next
    /// [`DONE_DAYS_AHEAD`] days, and drops those whose every job is past every queue's
    /// completed retention. A dropped day's jobs are not counted (that would read them all):
    /// the pass reports its partitions.
    async fn drop_done_days(
        &self,
        now: DateTime<Utc>,
        completed: &PruneCutoffs,
    ) -> Result<Pass, sqlx::Error> {
        let db = &self.context.db;
        for day in store::job::ensure_done_partitions(db, now, DONE_DAYS_AHEAD).await? {
            tracing::warn!(%day, "completed jobs of this day sit in ojs_job_done_default: the day gets no partition, and its jobs are deleted one by one");
        }
        let before = completed
            .queues
            .iter()
            .map(|(_, cutoff, _)| *cutoff)
            .chain([completed.cutoff])
            .min()
            .unwrap_or(completed.cutoff);
        let dropped = store::job::drop_done_partitions(db, before, 4).await?;
        for p in &dropped {
            tracing::info!(partition = %p.name, bytes = p.bytes, "dropped a day of completed jobs past their retention");
        }
        Ok(Pass {
            processed: dropped.len() as u64,
            more: false,
        })
    }
}

/// Days ahead whose `ojs_job_done` partitions the pruner keeps made (so ACKs find one even
/// when no leader runs for a while).
pub const DONE_DAYS_AHEAD: i32 = 3;

/// What a batch deletes.
#[derive(Debug, Clone)]
enum Target {
    /// Completed jobs of `ojs_job_done` completed before their cutoff.
    Done(PruneCutoffs),
    /// Dead-lettered jobs of a queue beyond its newest `n` (`dead_letter_max_size`).
    DeadLetterExcess(String, i64),
    /// Events before the cutoff or beyond the count.
    Events(DateTime<Utc>, i64),
    /// Workers stale (or only seen fetching) since before the cutoff.
    Workers(DateTime<Utc>),
    /// Progress reports of jobs that no longer exist.
    Progress,
    /// Checkpoints of jobs that no longer exist.
    Checkpoints,
    /// Steps, waits and signals of jobs that no longer exist.
    Durable,
    /// Cron run-ledger rows handled before the cutoff.
    CronRuns(DateTime<Utc>),
    /// Workflows that ended completed, failed or cancelled before the cutoff of jobs that end
    /// so.
    Workflows {
        completed: DateTime<Utc>,
        failed: DateTime<Utc>,
        cancelled: DateTime<Utc>,
    },
    /// Rate-limit keys idle (no job held or in flight, no override or block in force) and
    /// unchanged since the cutoff.
    RateKeys(DateTime<Utc>),
    /// Recorded starts of rate-limit keys that no limit counts any more.
    RateStarts,
}

/// The retention fields of the queue configuration layers ([OJS retention] and [dead-letter]
/// settings): `retention.*`, `dead_letter_ttl` and `dead_letter_max_size` of `_default` and of
/// each queue that sets them. What no layer sets comes from the server's settings.
///
/// [OJS retention]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#63-retention-configuration
/// [dead-letter]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#64-dead-letter-configuration
struct Retention<'a> {
    layers: &'a [(String, Value)],
}

impl<'a> Retention<'a> {
    fn of(layers: &'a [(String, Value)]) -> Retention<'a> {
        Retention { layers }
    }

    fn layer(&self, queue: &str) -> Option<&'a Value> {
        self.layers.iter().find(|(q, _)| q == queue).map(|(_, l)| l)
    }

    /// A duration field of a layer (`retention.<field>` or a top-level one).
    fn duration(layer: &Value, pointer: &str) -> Option<Duration> {
        layer
            .pointer(pointer)
            .and_then(Value::as_str)
            .and_then(|d| duration::parse_ms(d).ok())
            .map(Duration::from_millis)
    }

    /// The cutoffs of `state`: the server's `retention` (and, for dead letters,
    /// `dead_letter_ttl`) unless `_default` sets them, and each queue's own values.
    fn cutoffs(
        &self,
        now: DateTime<Utc>,
        state: JobState,
        retention: Duration,
        dead_letter_ttl: Duration,
    ) -> PruneCutoffs {
        let field = format!("/retention/{}", state.as_str());
        let defaults = self.layer(DEFAULT_LAYER);
        let default_retention = defaults
            .and_then(|l| Self::duration(l, &field))
            .unwrap_or(retention);
        let default_ttl = defaults
            .and_then(|l| Self::duration(l, "/dead_letter_ttl"))
            .unwrap_or(dead_letter_ttl);
        let queues = self
            .layers
            .iter()
            .filter(|(q, _)| q != DEFAULT_LAYER)
            .filter_map(|(queue, layer)| {
                let own = Self::duration(layer, &field);
                let own_ttl = Self::duration(layer, "/dead_letter_ttl");
                (own.is_some() || own_ttl.is_some()).then(|| {
                    (
                        queue.clone(),
                        since(now, own.unwrap_or(default_retention)),
                        since(now, own_ttl.unwrap_or(default_ttl)),
                    )
                })
            })
            .collect();
        PruneCutoffs {
            state,
            cutoff: since(now, default_retention),
            dead_letter_cutoff: since(now, default_ttl),
            queues,
        }
    }

    fn dead_letter_max_size(&self, queue: &str) -> Option<i64> {
        self.layer(queue)
            .and_then(|l| l.get("dead_letter_max_size"))
            .and_then(Value::as_i64)
    }

    fn own_dead_letter_max_sizes(&self) -> Vec<(String, i64)> {
        self.layers
            .iter()
            .filter(|(q, _)| q != DEFAULT_LAYER)
            .filter_map(|(q, _)| self.dead_letter_max_size(q).map(|n| (q.clone(), n)))
            .collect()
    }
}

/// The cutoff `retention` before `now` (the beginning of time for absurdly long retentions).
fn since(now: DateTime<Utc>, retention: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(retention)
        .ok()
        .and_then(|r| now.checked_sub_signed(r))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

impl Service for Pruner {
    fn name(&self) -> &'static str {
        "pruner"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let now = match now {
            Some(now) => now,
            None => store::now(&self.context.db).await?,
        };
        let c = &self.config;
        let (_, layers) = store::queue::config_layers(&self.context.db).await?;
        let retention = Retention::of(&layers);
        let completed = retention.cutoffs(now, JobState::Completed, c.completed, c.discarded);
        let mut pass = self.drop_done_days(now, &completed).await?;
        let sweep = self
            .passes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(FULL_SWEEP_EVERY);
        for cutoffs in [
            // Completed jobs a replica of an earlier version left in ojs_job.
            completed.clone(),
            retention.cutoffs(now, JobState::Cancelled, c.cancelled, c.discarded),
            retention.cutoffs(now, JobState::Discarded, c.discarded, c.discarded),
        ] {
            let done = self.prune_jobs(&cutoffs, sweep).await?;
            pass.processed += done.processed;
            pass.more |= done.more;
        }
        let mut targets = vec![Target::Done(completed)];
        if let Some(keep) = retention.dead_letter_max_size(DEFAULT_LAYER) {
            // `_default` bounds every queue's dead letters, except those with their own bound.
            for queue in store::dead_letter::queues(&self.context.db).await? {
                let keep = retention.dead_letter_max_size(&queue).unwrap_or(keep);
                targets.push(Target::DeadLetterExcess(queue, keep));
            }
        } else {
            for (queue, keep) in retention.own_dead_letter_max_sizes() {
                targets.push(Target::DeadLetterExcess(queue, keep));
            }
        }
        targets.push(Target::Events(since(now, c.events), c.max_events));
        targets.push(Target::Workers(since(now, c.stale_workers)));
        targets.push(Target::Progress);
        targets.push(Target::Checkpoints);
        targets.push(Target::Durable);
        targets.push(Target::CronRuns(since(now, c.cron_runs)));
        targets.push(Target::Workflows {
            completed: since(now, c.completed),
            failed: since(now, c.discarded),
            cancelled: since(now, c.cancelled),
        });
        targets.push(Target::RateKeys(since(now, c.completed)));
        targets.push(Target::RateStarts);
        for target in targets {
            let done = self.prune(target).await?;
            pass.processed += done.processed;
            pass.more |= done.more;
        }
        Ok(pass)
    }
}
