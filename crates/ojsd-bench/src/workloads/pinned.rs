//! `pinned-horizon`: the completion rate before, while and after a transaction pins the MVCC
//! horizon.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use super::{noop_job, worker_ids};
use crate::Bench;
use crate::measure::{Latencies, Outcome, joined, ratio};

impl Bench {
    /// Jobs flow at `--pinned-rate` through enqueue → long-poll FETCH → ACK; after
    /// `--unpinned-secs` a transaction that holds an xid opens on another connection and stays
    /// open for `--pin-secs`, then the flow runs `--unpinned-secs` more. Reports the completion
    /// rate per phase and how long the backlog took to return to its level before the pin.
    pub(crate) async fn pinned_horizon(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let Some(db) = self.db.clone() else {
            bail!("the pinned-horizon scenario needs --database-url");
        };
        let a = &self.args;
        let enqueued = Arc::new(AtomicU64::new(0));
        let completed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for worker_id in worker_ids("bench-pinned", 8) {
            let (bench, queue, completed, stop) = (
                self.clone(),
                queue.to_owned(),
                completed.clone(),
                stop.clone(),
            );
            workers.push(tokio::spawn(async move {
                let fetch_url = bench.url("/ojs/v1/workers/fetch");
                let ack_url = bench.url("/ojs/v1/workers/ack");
                while !stop.load(Ordering::Relaxed) {
                    let (body, _) = bench
                        .post(
                            &fetch_url,
                            &json!({"queues": [queue], "count": 10, "wait_ms": 1000,
                                    "worker_id": worker_id}),
                        )
                        .await?;
                    for job in body["jobs"].as_array().into_iter().flatten() {
                        let id = job["id"].as_str().unwrap_or_default();
                        bench
                            .post(&ack_url, &json!({"job_id": id, "worker_id": worker_id}))
                            .await?;
                        completed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                anyhow::Ok(Latencies::default())
            }));
        }
        let producer = {
            let (bench, queue, enqueued, stop) = (
                self.clone(),
                queue.to_owned(),
                enqueued.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let url = bench.url("/ojs/v1/jobs");
                let period =
                    Duration::from_secs_f64(1.0 / f64::from(bench.args.pinned_rate.max(1)));
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut sends = tokio::task::JoinSet::new();
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let (bench, url, queue, enqueued) =
                        (bench.clone(), url.clone(), queue.clone(), enqueued.clone());
                    sends.spawn(async move {
                        bench.post(&url, &noop_job(&queue, n, 1)).await?;
                        enqueued.fetch_add(1, Ordering::Relaxed);
                        anyhow::Ok(())
                    });
                    n += 1;
                    while let Some(done) = sends.try_join_next() {
                        done??;
                    }
                }
                while let Some(done) = sends.join_next().await {
                    done??;
                }
                anyhow::Ok(())
            })
        };
        // One sample per second: (completed, backlog).
        let mut samples: Vec<(u64, u64)> = Vec::new();
        let sample = |samples: &mut Vec<(u64, u64)>| {
            let done = completed.load(Ordering::Relaxed);
            samples.push((done, enqueued.load(Ordering::Relaxed).saturating_sub(done)));
        };
        let started = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        sample(&mut samples);
        for _ in 0..a.unpinned_secs {
            tick.tick().await;
            sample(&mut samples);
        }
        let mut pin = db.begin().await?;
        sqlx::query("select pg_current_xact_id()")
            .execute(&mut *pin)
            .await?;
        println!(
            "  pinned-horizon: transaction open, horizon pinned for {} s",
            a.pin_secs
        );
        for _ in 0..a.pin_secs {
            tick.tick().await;
            sample(&mut samples);
        }
        pin.commit().await?;
        println!("  pinned-horizon: transaction ended");
        for _ in 0..a.unpinned_secs {
            tick.tick().await;
            sample(&mut samples);
        }
        stop.store(true, Ordering::Relaxed);
        producer.await??;
        joined(workers).await?;
        let elapsed = started.elapsed();

        let per_second: Vec<f64> = samples
            .windows(2)
            .map(|w| (w[1].0 - w[0].0) as f64)
            .collect();
        let (before, rest) = per_second.split_at((a.unpinned_secs as usize).min(per_second.len()));
        let (during, after) = rest.split_at((a.pin_secs as usize).min(rest.len()));
        // The first seconds of the run warm up the connections.
        let warm = before.get(2..).filter(|s| !s.is_empty()).unwrap_or(before);
        let baseline = warm.iter().sum::<f64>() / warm.len().max(1) as f64;
        let window = |s: &[f64]| -> f64 {
            s.windows(5.min(s.len().max(1)))
                .map(|w| w.iter().sum::<f64>() / w.len() as f64)
                .fold(f64::INFINITY, f64::min)
        };
        let worst_during = window(during);
        let mean_during = during.iter().sum::<f64>() / during.len().max(1) as f64;
        let backlog_before = samples[..=before.len()]
            .iter()
            .map(|s| s.1)
            .max()
            .unwrap_or(0);
        let peak_backlog = samples.iter().map(|s| s.1).max().unwrap_or(0);
        let released = before.len() + during.len();
        let settled = |b: u64| b <= backlog_before * 2 + u64::from(a.pinned_rate) / 10;
        let recovery_secs = samples[released..]
            .iter()
            .position(|s| settled(s.1))
            .map(|i| i as u64);
        println!(
            "  pinned-horizon: completions {baseline:.0}/s before, {mean_during:.0}/s during (worst 5 s {worst_during:.0}/s, ratio {:.3}), {:.0}/s after; backlog before ≤ {backlog_before}, peak {peak_backlog}; recovered {} after the pin ended",
            ratio(worst_during, baseline),
            after.iter().sum::<f64>() / after.len().max(1) as f64,
            recovery_secs.map_or("never".to_owned(), |s| format!("{s} s")),
        );
        Ok(Outcome {
            jobs: completed.load(Ordering::Relaxed) as usize,
            elapsed,
            latencies: Latencies::default(),
            extra: json!({
                "rate": a.pinned_rate,
                "pin_secs": a.pin_secs,
                "before_jobs_per_s": baseline.round(),
                "during_jobs_per_s": mean_during.round(),
                "during_worst_5s_jobs_per_s": worst_during.round(),
                "during_ratio": ratio(worst_during, baseline),
                "backlog_before": backlog_before,
                "peak_backlog": peak_backlog,
                "recovery_secs": recovery_secs,
                "completions_per_second": per_second,
            }),
        })
    }
}
