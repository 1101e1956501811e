//! `w2-batched` and `w2-sdk`: drain throughput, with batch ACKs and with one ACK per job.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use super::{FAIR_SAMPLE, worker_ids};
use crate::Bench;
use crate::measure::{Latencies, Outcome, joined};

impl Bench {
    /// Drains `total` jobs from `queue` with one worker per id in `workers`, each fetching
    /// `fetch` jobs; `batch_ack` acknowledges each fetch with one batch ACK, otherwise each job
    /// with its own ACK request. With `tenants_seen`, records the `meta.tenant_id` of the
    /// first `FAIR_SAMPLE` (or a few more) fetched jobs in the order the FETCHes returned.
    /// Returns the outcome with ACK request latencies.
    pub(crate) async fn drain(
        self: &Arc<Self>,
        queue: &str,
        total: usize,
        workers: &[String],
        fetch: usize,
        batch_ack: bool,
        tenants_seen: Option<Arc<Mutex<Vec<String>>>>,
    ) -> anyhow::Result<Outcome> {
        let done = Arc::new(AtomicUsize::new(0));
        self.mark_wal().await?;
        self.mark_timed();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker_id in workers {
            let (bench, done, queue, worker_id, tenants_seen) = (
                self.clone(),
                done.clone(),
                queue.to_owned(),
                worker_id.clone(),
                tenants_seen.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let fetch_url = bench.url("/ojs/v1/workers/fetch");
                let ack_url = bench.url("/ojs/v1/workers/ack");
                let batch_url = bench.url("/ojs/v1/workers/ack/batch");
                let mut latencies = Latencies::default();
                while done.load(Ordering::Relaxed) < total {
                    let (body, _) = bench
                        .post(
                            &fetch_url,
                            &json!({"queues": [queue], "count": fetch, "worker_id": worker_id}),
                        )
                        .await?;
                    let ids: Vec<&str> = body["jobs"]
                        .as_array()
                        .map(|jobs| jobs.iter().filter_map(|j| j["id"].as_str()).collect())
                        .unwrap_or_default();
                    if let Some(seen) = &tenants_seen {
                        let mut seen = seen.lock().expect("tenants lock");
                        if seen.len() < FAIR_SAMPLE {
                            seen.extend(body["jobs"].as_array().into_iter().flatten().map(|j| {
                                j["meta"]["tenant_id"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_owned()
                            }));
                        }
                    }
                    if ids.is_empty() {
                        // Others are finishing the last jobs.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    if batch_ack {
                        let acks: Vec<Value> = ids.iter().map(|id| json!({"job_id": id})).collect();
                        let (answer, took) = bench
                            .post(&batch_url, &json!({"worker_id": worker_id, "acks": acks}))
                            .await?;
                        if answer["failed"].as_u64() != Some(0) {
                            bail!("batch ACK failed for some jobs: {answer}");
                        }
                        latencies.0.push(took);
                    } else {
                        for id in &ids {
                            let (_, took) = bench
                                .post(&ack_url, &json!({"job_id": id, "worker_id": worker_id}))
                                .await?;
                            latencies.0.push(took);
                        }
                    }
                    done.fetch_add(ids.len(), Ordering::Relaxed);
                }
                anyhow::Ok(latencies)
            }));
        }
        let latencies = joined(tasks).await?;
        Ok(Outcome {
            jobs: total,
            elapsed: started.elapsed(),
            latencies,
            extra: json!({"workers": workers.len(), "fetch_count": fetch, "batch_ack": batch_ack}),
        })
    }

    pub(crate) async fn w2_batched(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        self.enqueue_batches(queue, self.args.jobs).await?;
        let a = &self.args;
        let workers = worker_ids("bench", a.batch_workers);
        self.drain(queue, a.jobs, &workers, a.batch_fetch, true, None)
            .await
    }

    pub(crate) async fn w2_sdk(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        self.enqueue_batches(queue, self.args.sdk_jobs).await?;
        let a = &self.args;
        let workers = worker_ids("bench", a.sdk_workers);
        self.drain(
            queue,
            a.sdk_jobs,
            &workers,
            a.sdk_fetch.clamp(1, 1_000),
            false,
            None,
        )
        .await
    }
}
