//! `w3-latency`: enqueue → FETCH-returned latency at a steady rate, with long-polling workers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use super::noop_job;
use crate::Bench;
use crate::measure::{Latencies, Outcome, joined};

impl Bench {
    /// One producer enqueues at a fixed rate; long-polling workers fetch one job at a time.
    /// Latency runs from just before the enqueue request is sent to the FETCH response that
    /// carries the job.
    pub(crate) async fn w3_latency(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let total = (u64::from(self.args.rate) * self.args.latency_secs) as usize;
        let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
        let received = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut pollers = Vec::new();
        for worker in 0..self.args.pollers.max(1) {
            let (bench, queue, sent, received, stop) = (
                self.clone(),
                queue.to_owned(),
                sent.clone(),
                received.clone(),
                stop.clone(),
            );
            pollers.push(tokio::spawn(async move {
                let fetch_url = bench.url("/ojs/v1/workers/fetch");
                let ack_url = bench.url("/ojs/v1/workers/ack");
                let worker_id = format!("bench-poller-{worker}");
                let mut latencies = Latencies::default();
                while !stop.load(Ordering::Relaxed) {
                    let (body, _) = bench
                        .post(
                            &fetch_url,
                            &json!({"queues": [queue], "count": 1, "wait_ms": 1000,
                                    "worker_id": worker_id}),
                        )
                        .await?;
                    let arrived = Instant::now();
                    for job in body["jobs"].as_array().into_iter().flatten() {
                        let n = job["args"][0].as_u64().unwrap_or(u64::MAX);
                        if let Some(at) = sent.lock().expect("sent lock").remove(&n) {
                            latencies.0.push(arrived - at);
                        }
                        received.fetch_add(1, Ordering::Relaxed);
                        let id = job["id"].as_str().unwrap_or_default();
                        bench
                            .post(&ack_url, &json!({"job_id": id, "worker_id": worker_id}))
                            .await?;
                    }
                }
                anyhow::Ok(latencies)
            }));
        }
        // A monitoring system scraping the server meanwhile (`--scrape-ms`).
        let scraper = (self.args.scrape_ms > 0).then(|| {
            let (bench, stop) = (self.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(bench.args.scrape_ms));
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    bench.fetch_counters().await;
                }
            })
        });
        // Let the pollers start waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let url = self.url("/ojs/v1/jobs");
        let period = Duration::from_secs_f64(1.0 / f64::from(self.args.rate.max(1)));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let started = Instant::now();
        let mut producers = Vec::new();
        for n in 0..total as u64 {
            tick.tick().await;
            let (bench, url, queue, sent) =
                (self.clone(), url.clone(), queue.to_owned(), sent.clone());
            // Each enqueue on its own task, so a slow one does not delay the next.
            producers.push(tokio::spawn(async move {
                sent.lock().expect("sent lock").insert(n, Instant::now());
                bench
                    .post(&url, &noop_job(&queue, n as usize, bench.args.priorities))
                    .await
            }));
        }
        for p in producers {
            p.await??;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while received.load(Ordering::Relaxed) < total && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let elapsed = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        if let Some(scraper) = scraper {
            scraper.abort();
        }
        let latencies = joined(pollers).await?;
        if latencies.0.len() < total {
            bail!("only {} of {total} jobs were fetched", latencies.0.len());
        }
        Ok(Outcome {
            jobs: total,
            elapsed,
            latencies,
            extra: json!({"rate": self.args.rate, "pollers": self.args.pollers,
                          "scrape_ms": self.args.scrape_ms}),
        })
    }
}
