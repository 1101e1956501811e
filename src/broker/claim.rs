//! The claims of one FETCH attempt: slots dealt over the route's queues by its strategy, each
//! queue claimed from under the dispatch limits of its pool and its own configuration.

use super::claim_group::SharedClaim;
use super::configs::Snapshot;
use super::fetch::{FetchRequest, Fetcher};
use crate::error::Result;
use crate::job::Job;
use crate::job::dispatch::DispatchPlace;
use crate::scheduling::pool::WorkerPool;
use crate::scheduling::{Plan, Route, Strategy};
use crate::store;
use crate::store::job::ClaimParams;
use crate::telemetry;

impl Fetcher {
    /// Adds to `jobs` what the FETCH still wants (up to `wanted`) from the route's queues.
    /// Within a queue every strategy takes jobs in dispatch order (priority, then time
    /// available, or the tenant-fair order). Workflow steps, when workflows exist, are created
    /// through PUSH with the root's priority unless they set their own, and so need nothing
    /// here.
    pub(super) async fn claim_routed(
        &self,
        req: &FetchRequest,
        configs: &Snapshot,
        route: &Route,
        wanted: usize,
        mut jobs: Vec<Job>,
    ) -> Result<Vec<Job>> {
        let preference: Option<Vec<usize>> = if route.strategy == Strategy::LeastLoaded {
            // The deepest backlog first.
            let names = route.queue_names();
            let depths = self.stats.depths(&self.db, &names).await?;
            let mut order: Vec<usize> = (0..names.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(depths[i]));
            Some(order)
        } else {
            None
        };
        let pool = route.pool.as_deref();
        if route.guarantee.is_none()
            && matches!(route.strategy, Strategy::Strict | Strategy::LeastLoaded)
        {
            let order: Vec<usize> = preference
                .clone()
                .unwrap_or_else(|| (0..route.queues.len()).collect());
            for i in order {
                let left = wanted - jobs.len();
                if left == 0 {
                    break;
                }
                let mut claimed = self
                    .claim(
                        configs,
                        self.claim_params(req, &route.queues[i].0, left, pool),
                        pool,
                    )
                    .await?;
                jobs.append(&mut claimed);
            }
            return Ok(jobs);
        }
        let plan = Plan {
            scope: route.pool_name().unwrap_or(""),
            queues: &route.queues,
            strategy: route.strategy,
            guarantee: route.guarantee,
            preference: preference.as_deref(),
        };
        let mut open = vec![true; route.queues.len()];
        while jobs.len() < wanted {
            let given = self.dispatcher.reserve(&plan, &open, wanted - jobs.len());
            if given.iter().all(|n| *n == 0) {
                break;
            }
            for (index, slots) in given.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                let claimed = self
                    .claim(
                        configs,
                        self.claim_params(req, &route.queues[index].0, slots, pool),
                        pool,
                    )
                    .await;
                let mut claimed = match claimed {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.dispatcher.release(&plan, &open, index, slots);
                        return Err(e.into());
                    }
                };
                if claimed.len() < slots {
                    open[index] = false;
                    self.dispatcher
                        .release(&plan, &open, index, slots - claimed.len());
                }
                jobs.append(&mut claimed);
            }
        }
        Ok(jobs)
    }

    /// Claims from one queue for a member of `pool` (if any). A pool with a `concurrency`
    /// and a queue with dispatch limits (`concurrency`, `rate_limit`) are claimed from under
    /// their dispatch locks, shared by every replica (the pool's first, always in that order),
    /// and never beyond what their limits leave: jobs that cannot start now stay available.
    /// `configs` are the queue configurations the FETCH read once for all its claims.
    async fn claim(
        &self,
        configs: &Snapshot,
        params: ClaimParams<'_>,
        pool: Option<&WorkerPool>,
    ) -> Result<Vec<Job>, sqlx::Error> {
        let config = configs.of(params.queue);
        let fair = configs.is_tenant_fair(params.queue);
        let pool_limit = pool.and_then(|p| p.concurrency.map(|c| (p, i64::from(c))));
        if !config.limits_dispatch() && pool_limit.is_none() {
            if !fair && params.started_at.is_none() && params.tenant.is_none() {
                let claim = SharedClaim {
                    queue: params.queue.to_owned(),
                    limit: i32::try_from(params.limit).unwrap_or(i32::MAX),
                    worker_id: params.worker_id.map(str::to_owned),
                    visibility_timeout_ms: params.visibility_timeout_ms,
                    pool: params.pool.map(str::to_owned),
                };
                return match self.claims.submit(claim).await {
                    Some(outcome) => outcome,
                    None => Err(sqlx::Error::PoolClosed),
                };
            }
            if self.db.is_pooled() {
                let mut tx = self.db.begin().await?;
                let claimed = claim_rows(&mut tx, params, fair).await?;
                tx.commit().await?;
                return Ok(claimed);
            }
            let mut conn = self.db.pool().acquire().await?;
            return claim_rows(&mut conn, params, fair).await;
        }
        let mut tx = self.db.begin().await?;
        let mut allowed = params.limit;
        if let Some((pool, limit)) = pool_limit {
            store::locks::lock_pool_dispatch(&mut tx, &pool.name).await?;
            let active = store::pool::active_jobs(&mut *tx, &pool.name).await?;
            allowed = allowed.min(limit - active);
            if allowed <= 0 {
                drop(tx);
                self.pool_overloaded(pool, active).await;
                return Ok(Vec::new());
            }
        }
        let mut started_at = None;
        let mut rate = None;
        if config.limits_dispatch() {
            let queue = params.queue;
            let rate_key = store::queue::rate_key(queue);
            let period_ms = config
                .rate_limit
                .map_or(0, |r| i64::try_from(r.period_ms).unwrap_or(i64::MAX));
            store::locks::lock_queue_dispatch(&mut tx, queue).await?;
            let (active, started, now) =
                store::queue::dispatch_usage(&mut tx, queue, &rate_key, period_ms).await?;
            if let Some(concurrency) = config.concurrency {
                allowed = allowed.min(concurrency - active);
            }
            if let Some(limit) = config.rate_limit {
                allowed = allowed.min(limit.limit - started);
                rate = Some((rate_key, period_ms));
            }
            started_at = Some(now);
        }
        if allowed <= 0 {
            return Ok(Vec::new());
        }
        // The plain claim starts at the queue's floor; an error or an early return drops
        // `floor`, which resets it.
        // A tenant's claim walks from the head: the floor is the whole queue's.
        let floor =
            (!fair && params.tenant.is_none()).then(|| self.notifier.floors().begin(params.queue));
        let jobs = claim_rows(
            &mut tx,
            ClaimParams {
                limit: allowed,
                started_at: started_at.or(params.started_at),
                from: floor.as_ref().map_or(DispatchPlace::START, |f| f.from),
                ..params
            },
            fair,
        )
        .await?;
        if let (Some((rate_key, period_ms)), Some(now)) = (rate, started_at)
            && !jobs.is_empty()
        {
            let n = i32::try_from(jobs.len()).unwrap_or(i32::MAX);
            store::queue::record_starts(&mut tx, &rate_key, n, now, period_ms).await?;
        }
        tx.commit().await?;
        if let Some(floor) = floor {
            floor.took(&jobs);
        }
        Ok(jobs)
    }

    /// A member's FETCH found its pool at its concurrency: `scheduling.pool_overloaded` (at
    /// most every few seconds per pool and process) when the pool's queues have work waiting.
    async fn pool_overloaded(&self, pool: &WorkerPool, active: i64) {
        if !self.stats.overload_event_due(&pool.name) {
            return;
        }
        let waiting = match store::pool::available(&self.db, &pool.queues, 10_000).await {
            Ok(rows) => rows.iter().map(|r| r.1).sum::<i64>(),
            Err(e) => {
                tracing::warn!(error = %e, pool = %pool.name, "could not count a pool's waiting jobs");
                return;
            }
        };
        if waiting == 0 {
            return;
        }
        let data = serde_json::json!({
            "pool": pool.name, "active_jobs": active, "waiting_jobs": waiting,
            "concurrency": pool.concurrency,
        });
        if let Err(e) = store::event::insert_subject_event(
            &self.db,
            "scheduling.pool_overloaded",
            &pool.name,
            &data,
        )
        .await
        {
            tracing::warn!(error = %e, pool = %pool.name, "could not record scheduling.pool_overloaded");
        }
    }

    /// The claim of `limit` jobs of `queue` for `req`.
    fn claim_params<'a>(
        &'a self,
        req: &'a FetchRequest,
        queue: &'a str,
        limit: usize,
        pool: Option<&'a WorkerPool>,
    ) -> ClaimParams<'a> {
        ClaimParams {
            queue,
            limit: limit as i64,
            worker_id: req.worker_id.as_deref(),
            visibility_timeout_ms: req.visibility_timeout_ms,
            default_visibility_timeout_ms: self.settings.default_visibility_timeout_ms,
            started_at: None,
            pool: pool.map(|p| p.name.as_str()),
            from: DispatchPlace::START,
            tenant: req.tenant.as_deref(),
        }
    }
}

/// Claims from one queue, in the tenant-fair order when the queue is tenant-fair (then in plain
/// order for whatever the fair claim could not fill: jobs not tagged yet).
async fn claim_rows(
    conn: &mut sqlx::PgConnection,
    params: ClaimParams<'_>,
    fair: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    telemetry::claim_statements(1);
    if params.tenant.is_some() {
        return store::job::claim_tenant(&mut *conn, params).await;
    }
    if !fair {
        return store::job::claim(&mut *conn, params).await;
    }
    let mut jobs = store::job::claim_fair(&mut *conn, params).await?;
    let short = params.limit - jobs.len() as i64;
    if short > 0 {
        telemetry::claim_statements(1);
        let mut more = store::job::claim(
            &mut *conn,
            ClaimParams {
                limit: short,
                ..params
            },
        )
        .await?;
        jobs.append(&mut more);
    }
    Ok(jobs)
}
