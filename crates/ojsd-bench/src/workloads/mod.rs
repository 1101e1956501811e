//! The workloads, one file each, and what they share: enqueueing from concurrent producers,
//! draining with concurrent workers, job and worker names.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::Bench;
use crate::measure::{Latencies, joined};

mod drain;
mod enqueue;
mod fair;
mod graphile;
mod latency;
mod pinned;
mod retention;
mod waits;

pub(crate) use fair::{FAIR_SAMPLE, FairOrder, Tenants};

/// `{prefix}-0` .. `{prefix}-{n-1}` (at least one).
pub(crate) fn worker_ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n.max(1)).map(|w| format!("{prefix}-{w}")).collect()
}

/// The `n`th no-op job, at priority `n mod priorities` (the default priority when 1).
pub(crate) fn noop_job(queue: &str, n: usize, priorities: usize) -> Value {
    let mut job = json!({"type": "bench.noop", "queue": queue, "args": [n]});
    if priorities > 1 {
        job["priority"] = json!(n % priorities);
    }
    job
}

impl Bench {
    /// Enqueues `total` jobs on `queue` from `concurrency` producers, `per` jobs per request
    /// (one: `POST /ojs/v1/jobs`; more: batch requests), each with its `meta.tenant_id` when
    /// `tenants` is given. Returns the request latencies.
    pub(crate) async fn enqueue(
        self: &Arc<Self>,
        queue: &str,
        total: usize,
        per: usize,
        concurrency: usize,
        tenants: Option<Tenants>,
    ) -> anyhow::Result<Latencies> {
        let per = per.max(1);
        let priorities = self.args.priorities.max(1);
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..concurrency.max(1) {
            let (bench, next, queue) = (self.clone(), next.clone(), queue.to_owned());
            tasks.push(tokio::spawn(async move {
                let url = bench.url(if per == 1 {
                    "/ojs/v1/jobs"
                } else {
                    "/ojs/v1/jobs/batch"
                });
                let mut latencies = Latencies::default();
                loop {
                    let first = next.fetch_add(per, Ordering::Relaxed);
                    if first >= total {
                        return anyhow::Ok(latencies);
                    }
                    let (keys, key_concurrency) =
                        (bench.args.rate_keys, bench.args.rate_key_concurrency);
                    let job = |n| {
                        let mut job = noop_job(&queue, n, priorities);
                        if let Some(tenants) = &tenants {
                            job["meta"] = json!({"tenant_id": tenants.of(n)});
                        }
                        if keys > 0 {
                            // Keys of their own per workload: a key spans queues.
                            job["rate_limit"] = json!({"key": format!("{queue}-{}", n % keys),
                                                       "concurrency": key_concurrency});
                        }
                        job
                    };
                    let body = if per == 1 {
                        job(first)
                    } else {
                        let jobs: Vec<Value> = (first..(first + per).min(total)).map(job).collect();
                        json!({ "jobs": jobs })
                    };
                    let (_, took) = bench.post(&url, &body).await?;
                    latencies.0.push(took);
                }
            }));
        }
        joined(tasks).await
    }

    /// Enqueues `total` jobs on `queue` with batch requests (the untimed set-up of a drain).
    pub(crate) async fn enqueue_batches(
        self: &Arc<Self>,
        queue: &str,
        total: usize,
    ) -> anyhow::Result<Latencies> {
        let a = &self.args;
        self.enqueue(queue, total, a.batch, a.batch_concurrency, None)
            .await
    }
}
