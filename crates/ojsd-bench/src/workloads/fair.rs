//! `fair`: FETCH with per-tenant fairness off against on, over many tenants' jobs.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use super::worker_ids;
use crate::Bench;
use crate::measure::{Outcome, rate, ratio};
use clap::ValueEnum;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairOrder {
    Blocks,
    RoundRobin,
}

/// Which tenant each enqueued job belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tenants {
    pub(crate) count: usize,
    pub(crate) jobs: usize,
    pub(crate) order: FairOrder,
}

impl Tenants {
    /// The tenant id of job `n` (of `jobs`).
    pub(crate) fn of(&self, n: usize) -> String {
        let count = self.count.max(1);
        let t = match self.order {
            FairOrder::RoundRobin => n % count,
            FairOrder::Blocks => (n * count / self.jobs.max(1)).min(count - 1),
        };
        format!("t{t}")
    }
}

/// Jobs whose tenant the `fair` workload records, in dispatch order.
pub(crate) const FAIR_SAMPLE: usize = 2_000;

/// One phase of the `fair` workload.
pub(crate) struct FairPhase {
    pub(crate) enqueue_jobs_per_s: f64,
    pub(crate) drain: Outcome,
    /// Distinct tenants among the first 1,000 and the first 2,000 dispatched jobs.
    pub(crate) distinct_first_1000: usize,
    pub(crate) distinct_first_2000: usize,
}

/// Distinct non-empty tenants among the first `n` of `seen`.
pub(crate) fn distinct_tenants(seen: &[String], n: usize) -> usize {
    seen.iter()
        .take(n)
        .filter(|t| !t.is_empty())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

impl Bench {
    /// Enqueues `--fair-jobs` tenant jobs on `queue` (timed) and drains them with `workers`
    /// like `w2-batched`, recording the tenants of the first dispatched jobs.
    pub(crate) async fn fair_phase(
        self: &Arc<Self>,
        queue: &str,
        tenants: Tenants,
        workers: &[String],
    ) -> anyhow::Result<FairPhase> {
        let a = &self.args;
        let started = Instant::now();
        self.enqueue(
            queue,
            a.fair_jobs,
            a.batch,
            a.batch_concurrency,
            Some(tenants),
        )
        .await?;
        let enqueue_jobs_per_s = rate(a.fair_jobs, started.elapsed());
        let seen = Arc::new(Mutex::new(Vec::with_capacity(FAIR_SAMPLE + a.batch_fetch)));
        let drain = self
            .drain(
                queue,
                a.fair_jobs,
                workers,
                a.batch_fetch,
                true,
                Some(seen.clone()),
            )
            .await?;
        let seen = seen.lock().expect("tenants lock");
        Ok(FairPhase {
            enqueue_jobs_per_s,
            drain,
            distinct_first_1000: distinct_tenants(&seen, 1_000),
            distinct_first_2000: distinct_tenants(&seen, 2_000),
        })
    }

    /// The same tenant jobs enqueued and drained on a plain queue ("off"), then on the queue
    /// of a pool with tenant fairness enabled, drained by the pool's registered members ("on").
    pub(crate) async fn fair(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let a = &self.args;
        let tenants = Tenants {
            count: a.fair_tenants.max(1),
            jobs: a.fair_jobs,
            order: a.fair_order,
        };
        let report = |phase: &str, p: &FairPhase| {
            println!(
                "  fair {phase}: enqueue {:.0} jobs/s, drain {:.0} jobs/s, {} / {} distinct tenants in the first 1000 / 2000 dispatched jobs",
                p.enqueue_jobs_per_s,
                rate(p.drain.jobs, p.drain.elapsed),
                p.distinct_first_1000,
                p.distinct_first_2000,
            );
        };

        let off = self
            .fair_phase(
                &format!("{queue}-off"),
                tenants,
                &worker_ids("bench", a.batch_workers),
            )
            .await
            .context("phase off")?;
        report("off", &off);

        // The pool exists before the jobs do, so the enqueue pays for tenant fairness too.
        let pool = queue;
        let on_queue = format!("{queue}-on");
        let pool_url = self.url(&format!("/ojs/v1/admin/pools/{pool}"));
        let (answer, _) = self
            .request(
                reqwest::Method::PUT,
                &pool_url,
                Some(&json!({"queues": [on_queue], "tenant_fairness": {"enabled": true}})),
            )
            .await
            .context(
                "cannot create a pool with tenant_fairness (PUT /ojs/v1/admin/pools/{name}); \
                 does this server implement pools and tenant fairness?",
            )?;
        if answer["pool"]["tenant_fairness"]["enabled"] != json!(true) {
            bail!("the server did not enable tenant_fairness on pool {pool}: {answer}");
        }
        let members = worker_ids(&format!("{pool}-worker"), a.batch_workers);
        let register_url = self.url("/ojs/v1/workers/register");
        for worker_id in &members {
            self.post(
                &register_url,
                &json!({"worker_id": worker_id, "pool": pool}),
            )
            .await
            .context("registering a pool member")?;
        }
        let on = self
            .fair_phase(&on_queue, tenants, &members)
            .await
            .context("phase on")?;
        report("on", &on);
        // Leave no members or pool behind.
        for worker_id in &members {
            self.request(
                reqwest::Method::DELETE,
                &self.url(&format!("/ojs/v1/workers/{worker_id}")),
                None,
            )
            .await?;
        }
        self.request(reqwest::Method::DELETE, &pool_url, None)
            .await?;

        let off_drain = rate(off.drain.jobs, off.drain.elapsed);
        let on_drain = rate(on.drain.jobs, on.drain.elapsed);
        // With fairness every tenant is served once before any is served twice. The check reads
        // the first 2,000 jobs as the workers received them: concurrent FETCHes of
        // `--batch-fetch` jobs each claim consecutive stretches of the fair order, but their
        // answers arrive in any order, so the first 1,000 received can skip a stretch.
        let expected = tenants.count.min(1_000).min(a.fair_jobs);
        let fair_observed = on.distinct_first_2000 * 10 >= expected * 9;
        println!(
            "  fair: on/off drain {:.3}, enqueue {:.3}; distinct tenants in the first 1000 dispatched jobs: off {}, on {} (fair: {expected})",
            ratio(on_drain, off_drain),
            ratio(on.enqueue_jobs_per_s, off.enqueue_jobs_per_s),
            off.distinct_first_1000,
            on.distinct_first_1000,
        );
        if !fair_observed {
            println!(
                "  fair: WARNING: with tenant fairness on, the first 2000 dispatched jobs had only {} distinct tenants (expected about {expected})",
                on.distinct_first_2000
            );
        }
        let mut drain = on.drain;
        drain.extra = json!({
            "workers": members.len(),
            "fetch_count": a.batch_fetch,
            "batch_ack": true,
            "tenants": tenants.count,
            "tenant_order": tenants
                .order
                .to_possible_value()
                .map(|v| v.get_name().to_owned()),
            "enqueue_off_jobs_per_s": off.enqueue_jobs_per_s.round(),
            "enqueue_on_jobs_per_s": on.enqueue_jobs_per_s.round(),
            "enqueue_ratio": ratio(on.enqueue_jobs_per_s, off.enqueue_jobs_per_s),
            "drain_off_jobs_per_s": off_drain.round(),
            "drain_on_jobs_per_s": on_drain.round(),
            "drain_ratio": ratio(on_drain, off_drain),
            "distinct_tenants_first_1000": {"off": off.distinct_first_1000, "on": on.distinct_first_1000},
            "distinct_tenants_first_2000": {"off": off.distinct_first_2000, "on": on.distinct_first_2000},
            "fairness_observed": fair_observed,
        });
        Ok(drain)
    }
}
