//! What a PUSH does after its commit: wakes long polls here and tells other replicas, counts
//! the jobs, reports back-pressure, releases rate-limit keys, and records refusals of full
//! queues and tenants over their limits.

use super::enqueuer::Enqueuer;
use super::outcome::{Pressure, PushOutcome, PushResult, Pushed};
use crate::broker::configs::Snapshot;
use crate::job::dispatch::DispatchPlace;
use crate::job::envelope::NewJob;
use crate::job::{Job, JobState};
use crate::queue_config::OverflowPolicy;
use crate::store;
use crate::telemetry;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

impl Enqueuer {
    /// After a successful PUSH: metrics, wakeups for the queues that gained available jobs,
    /// and the pressure of bounded queues (their depth against `warning_threshold`).
    pub(super) async fn after_push(&self, pushed: &mut PushResult, configs: &Snapshot) {
        // Jobs written held (by a key or a tenant) are announced by their release.
        let held: HashSet<crate::job::JobId> = pushed
            .jobs
            .iter()
            .filter(|p| p.job.rate_key.is_some() || p.job.rate_held.is_some())
            .map(|p| p.job.id)
            .collect();
        self.release_keyed(&mut pushed.jobs).await;
        let new_jobs = || {
            pushed
                .jobs
                .iter()
                .filter(|p| p.outcome == PushOutcome::Created)
                .map(|p| &p.job)
        };
        telemetry::jobs_enqueued(new_jobs());
        if new_jobs().any(|job| job.state == JobState::Scheduled) {
            // It comes due: FETCHes promote again until they learn when.
            self.announcer.notifier().waiters().forget_next_due();
        }
        // Per queue: new jobs, new available jobs, and where the first of those is in the
        // dispatch order.
        let mut added: Vec<(&str, usize, usize, Option<DispatchPlace>)> = Vec::new();
        for job in new_jobs() {
            let (available, place) = if job.state == JobState::Available && !held.contains(&job.id)
            {
                (1, DispatchPlace::of(job).or(Some(DispatchPlace::START)))
            } else {
                (0, None)
            };
            match added.iter_mut().find(|(q, ..)| *q == job.queue) {
                Some((_, n, a, first)) => {
                    *n += 1;
                    *a += available;
                    if let Some(place) = place {
                        *first = Some(first.map_or(place, |f| f.min(place)));
                    }
                }
                None => added.push((&job.queue, 1, available, place)),
            }
        }
        let mut pressure = None;
        for (queue, jobs, available, first) in added {
            if available > 0 {
                self.announcer
                    .announce(queue, available, first.unwrap_or(DispatchPlace::START));
            }
            let config = configs.of(queue);
            let Some(bound) = config.max_size else {
                continue;
            };
            // The counter as of now (other enqueues may have added to it meanwhile).
            let Ok(Some((depth, _))) = store::queue::capacity(&self.db, queue).await else {
                continue;
            };
            let ratio = depth as f64 / bound as f64;
            telemetry::queue_pressure(queue, depth, bound);
            let before = (depth - jobs as i64) as f64 / bound as f64;
            if ratio >= config.warning_threshold && before < config.warning_threshold {
                let data = serde_json::json!({"queue": queue, "depth": depth, "bound": bound});
                if let Err(e) =
                    store::event::insert_queue_event(&self.db, "backpressure.warning", queue, &data)
                        .await
                {
                    tracing::warn!(error = %e, queue, "could not record backpressure.warning");
                }
            }
            if ratio >= config.warning_threshold
                && pressure
                    .as_ref()
                    .is_none_or(|p: &Pressure| ratio > p.ratio())
            {
                pressure = Some(Pressure {
                    queue: queue.to_owned(),
                    depth,
                    bound,
                });
            }
        }
        pushed.pressure = pressure;
    }

    /// New jobs with a rate-limit key were written held (migration V20): their keys let go
    /// what they allow now, and the jobs are reported as their keys left them (released, still
    /// held, or dropped). A key that cannot be released here is released by the releasers, which
    /// the enqueue notified.
    ///
    /// Jobs of a tenant with a concurrency limit were written held by their tenant (migration
    /// V28): the same, tenant by tenant (a released job with a key then waits for its key).
    pub(super) async fn release_keyed(&self, jobs: &mut [Pushed]) {
        let tenant_held = |job: &Job| job.rate_held == Some(false);
        let keyed: Vec<usize> = (0..jobs.len())
            .filter(|&i| {
                jobs[i].outcome == PushOutcome::Created
                    && (jobs[i].job.rate_key.is_some() || tenant_held(&jobs[i].job))
            })
            .collect();
        if keyed.is_empty() {
            return;
        }
        let tenants: std::collections::BTreeSet<&str> = keyed
            .iter()
            .filter(|&&i| tenant_held(&jobs[i].job))
            .filter_map(|&i| jobs[i].job.tenant.as_deref())
            .collect();
        let keys: std::collections::BTreeSet<&str> = keyed
            .iter()
            .filter(|&&i| !tenant_held(&jobs[i].job))
            .filter_map(|&i| jobs[i].job.rate_key.as_deref())
            .collect();
        let releases = tenants
            .into_iter()
            .map(|t| (t, true))
            .chain(keys.into_iter().map(|k| (k, false)));
        for (name, tenant) in releases {
            let released = if tenant {
                store::tenant::release(&self.db, name, false).await
            } else {
                store::rate_limit::release(&self.db, name, false).await
            };
            match released {
                Ok(queues) => {
                    telemetry::rate_released(queues.iter().map(|(_, n)| n).sum());
                    // Jobs of this key (or tenant) enqueued earlier may be among those released.
                    for (queue, jobs) in queues {
                        self.announcer.announce(
                            &queue,
                            usize::try_from(jobs).unwrap_or(0),
                            DispatchPlace::START,
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, name, tenant, "could not release held jobs after an enqueue")
                }
            }
        }
        let ids: Vec<uuid::Uuid> = keyed.iter().map(|&i| jobs[i].job.id.0).collect();
        match store::job::get_many(&self.db, &ids).await {
            Ok(rows) => {
                for row in rows {
                    if let Some(&i) = keyed.iter().find(|&&i| jobs[i].job.id == row.id) {
                        jobs[i].job = row;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read back rate-limited jobs"),
        }
    }

    /// Whether a refusal event keyed `key` may be recorded now: at most one a second per key
    /// from this process (and then it is counted as recorded).
    pub(super) fn event_due(&self, key: String) -> bool {
        let now = Instant::now();
        let mut last = self.full_events.lock().expect("full-events lock");
        if last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(1))
        {
            return false;
        }
        if last.len() > 10_000 {
            last.clear();
        }
        last.insert(key, now);
        true
    }

    /// After an enqueue refused for a tenant's limit: the metric, and `tenant.limit_exceeded`
    /// (at most one per tenant per second from this process).
    pub(super) async fn tenant_limited(&self, limit: &store::refusal::TenantLimit) {
        telemetry::tenant_limit_exceeded(&limit.tenant_id, &limit.limit);
        // Queue names have no ':', so a tenant's key never meets a queue's.
        if !self.event_due(format!("tenant:{}", limit.tenant_id)) {
            return;
        }
        let data = serde_json::json!({"tenant_id": limit.tenant_id, "limit": limit.limit,
                                      "current": limit.current, "maximum": limit.maximum});
        if let Err(e) = store::event::insert_subject_event(
            &self.db,
            "tenant.limit_exceeded",
            &limit.tenant_id,
            &data,
        )
        .await
        {
            tracing::warn!(error = %e, tenant = limit.tenant_id, "could not record tenant.limit_exceeded");
        }
    }

    /// After a PUSH refused for a full queue: `queue.full` and `backpressure.rejected`
    /// (at most one pair per queue per second from this process) and the metrics.
    pub(super) async fn queue_full(
        &self,
        queue: &str,
        depth: i64,
        bound: i64,
        policy: OverflowPolicy,
        jobs: &[NewJob],
    ) {
        telemetry::queue_overflow(queue, policy);
        if !self.event_due(queue.to_owned()) {
            return;
        }
        let job_type = jobs
            .iter()
            .find(|j| j.queue == queue)
            .map(|j| j.r#type.as_str());
        let full = serde_json::json!({"queue": queue, "depth": depth, "bound": bound});
        let rejected = serde_json::json!({"queue": queue, "depth": depth, "bound": bound, "job_type": job_type});
        for (kind, data) in [("queue.full", &full), ("backpressure.rejected", &rejected)] {
            if let Err(e) = store::event::insert_queue_event(&self.db, kind, queue, data).await {
                tracing::warn!(error = %e, queue, "could not record {kind}");
            }
        }
    }
}
