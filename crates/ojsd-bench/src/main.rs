//! Load tool for ojsd, measured end to end through the HTTP API.
//!
//! Against a running server (`--url`), on a queue of its own:
//! 1. bulk enqueue: `--jobs` no-op jobs in batches of `--batch` (`POST /ojs/v1/jobs/batch`);
//! 2. one-job-per-call enqueue: `--single` jobs with `--single-concurrency` requests in flight;
//! 3. drain: `--workers` concurrent workers, each fetching `--fetch-count` jobs and
//!    acknowledging every job with its own request, until the queue is empty.
//!
//! Prints jobs/s per phase and request latency percentiles, then one JSON line with the same
//! numbers for scripts.
//!
//! Run with: `cargo run --release --bin ojsd-bench -- --url http://127.0.0.1:8080`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ojsd-bench",
    about = "Enqueue and drain jobs through ojsd's HTTP API and report throughput"
)]
struct Args {
    /// Base URL of the server.
    #[arg(long, env = "OJS_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Jobs enqueued in bulk (phase 1).
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Jobs per batch request in phase 1.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Batch requests in flight at once in phase 1.
    #[arg(long, default_value_t = 2)]
    batch_concurrency: usize,
    /// Jobs enqueued one request each (phase 2); 0 skips the phase.
    #[arg(long, default_value_t = 5_000)]
    single: usize,
    /// Single-job requests in flight at once in phase 2.
    #[arg(long, default_value_t = 16)]
    single_concurrency: usize,
    /// Concurrent workers draining the queue (phase 3).
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Jobs each fetch asks for.
    #[arg(long, default_value_t = 100)]
    fetch_count: usize,
    /// ACK requests each worker keeps in flight.
    #[arg(long, default_value_t = 4)]
    ack_concurrency: usize,
    /// Queue to use (default: a new one per run).
    #[arg(long)]
    queue: Option<String>,
}

/// Latency samples of one request kind.
#[derive(Default)]
struct Latencies(Vec<Duration>);

impl Latencies {
    fn percentile(&mut self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.sort_unstable();
        let rank = ((p / 100.0) * (self.0.len() - 1) as f64).round() as usize;
        self.0[rank]
    }

    fn summary(&mut self) -> String {
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} requests)",
            ms(self.percentile(50.0)),
            ms(self.percentile(99.0)),
            ms(self.percentile(100.0)),
            self.0.len()
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> anyhow::Result<(Value, Duration)> {
    let started = Instant::now();
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let text = response.text().await?;
    let elapsed = started.elapsed();
    if !status.is_success() {
        bail!("POST {url} answered {status}: {text}");
    }
    Ok((serde_json::from_str(&text)?, elapsed))
}

fn noop_job(queue: &str, n: usize) -> Value {
    json!({"type": "bench.noop", "queue": queue, "args": [n]})
}

/// Sends `total` items' worth of requests from `concurrency` tasks; each request carries up to
/// `per_request` items, built by `body(first, last)` and posted to `url`.
async fn load(
    client: &reqwest::Client,
    url: String,
    total: usize,
    per_request: usize,
    concurrency: usize,
    body: impl Fn(usize, usize) -> Value + Send + Sync + 'static,
) -> anyhow::Result<(Duration, Latencies)> {
    let next = Arc::new(AtomicUsize::new(0));
    let body = Arc::new(body);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (client, url, next, body) = (client.clone(), url.clone(), next.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Latencies::default();
            loop {
                let first = next.fetch_add(per_request, Ordering::Relaxed);
                if first >= total {
                    return anyhow::Ok(latencies);
                }
                let last = (first + per_request).min(total);
                let (_, took) = post(&client, &url, &body(first, last)).await?;
                latencies.0.push(took);
            }
        }));
    }
    let mut all = Latencies::default();
    for task in tasks {
        all.0.extend(task.await??.0);
    }
    Ok((started.elapsed(), all))
}

/// Phase 1: bulk enqueue.
async fn bulk_enqueue(
    args: &Args,
    client: &reqwest::Client,
    queue: &str,
) -> anyhow::Result<(Duration, Latencies)> {
    let queue = queue.to_owned();
    load(
        client,
        format!("{}/ojs/v1/jobs/batch", args.url),
        args.jobs,
        args.batch.max(1),
        args.batch_concurrency,
        move |first, last| json!({"jobs": (first..last).map(|n| noop_job(&queue, n)).collect::<Vec<_>>()}),
    )
    .await
}

/// Phase 2: one job per request.
async fn single_enqueue(
    args: &Args,
    client: &reqwest::Client,
    queue: &str,
) -> anyhow::Result<(Duration, Latencies)> {
    let queue = queue.to_owned();
    load(
        client,
        format!("{}/ojs/v1/jobs", args.url),
        args.single,
        1,
        args.single_concurrency,
        move |n, _| noop_job(&queue, n),
    )
    .await
}

/// Phase 3: fetch + ack until `expected` jobs are done.
async fn drain(
    args: &Args,
    client: &reqwest::Client,
    queue: &str,
    expected: usize,
) -> anyhow::Result<(Duration, Latencies, Latencies)> {
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..args.workers.max(1) {
        let (client, base, queue, done, args) = (
            client.clone(),
            args.url.clone(),
            queue.to_owned(),
            done.clone(),
            args.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let fetch_url = format!("{base}/ojs/v1/workers/fetch");
            let ack_url = Arc::new(format!("{base}/ojs/v1/workers/ack"));
            let worker_id = format!("bench-{worker}");
            let (mut fetches, mut acks) = (Latencies::default(), Latencies::default());
            while done.load(Ordering::Relaxed) < expected {
                let (body, took) = post(
                    &client,
                    &fetch_url,
                    &json!({"queues": [queue], "count": args.fetch_count, "worker_id": worker_id}),
                )
                .await?;
                fetches.0.push(took);
                let ids: Vec<String> = body["jobs"]
                    .as_array()
                    .map(|jobs| {
                        jobs.iter()
                            .filter_map(|j| j["id"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                if ids.is_empty() {
                    // Others are finishing the last jobs.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                for chunk in ids.chunks(args.ack_concurrency.max(1)) {
                    let mut in_flight = Vec::new();
                    for id in chunk {
                        let (client, url, worker_id) =
                            (client.clone(), ack_url.clone(), worker_id.clone());
                        let id = id.clone();
                        in_flight.push(tokio::spawn(async move {
                            post(
                                &client,
                                &url,
                                &json!({"job_id": id, "worker_id": worker_id}),
                            )
                            .await
                        }));
                    }
                    for ack in in_flight {
                        let (_, took) = ack.await??;
                        acks.0.push(took);
                    }
                }
                done.fetch_add(ids.len(), Ordering::Relaxed);
            }
            anyhow::Ok((fetches, acks))
        }));
    }
    let (mut fetches, mut acks) = (Latencies::default(), Latencies::default());
    for task in tasks {
        let (f, a) = task.await??;
        fetches.0.extend(f.0);
        acks.0.extend(a.0);
    }
    Ok((started.elapsed(), fetches, acks))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let queue = args.queue.clone().unwrap_or_else(|| {
        format!(
            "bench-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default()
        )
    });
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(120))
        .build()?;
    let manifest: Value = client
        .get(format!("{}/ojs/manifest", args.url))
        .send()
        .await
        .with_context(|| format!("is ojsd running at {}?", args.url))?
        .json()
        .await?;
    println!(
        "ojsd-bench against {} ({} {}), queue {queue}",
        args.url, manifest["implementation"]["name"], manifest["implementation"]["version"]
    );

    let (bulk_time, mut bulk_lat) = bulk_enqueue(&args, &client, &queue).await?;
    let bulk_rate = rate(args.jobs, bulk_time);
    println!(
        "enqueue (batch of {}, {} in flight): {} jobs in {:.2} s = {:.0} jobs/s; batch request {}",
        args.batch,
        args.batch_concurrency,
        args.jobs,
        bulk_time.as_secs_f64(),
        bulk_rate,
        bulk_lat.summary()
    );

    let mut single_rate = 0.0;
    if args.single > 0 {
        let (single_time, mut single_lat) = single_enqueue(&args, &client, &queue).await?;
        single_rate = rate(args.single, single_time);
        println!(
            "enqueue (one job per request, {} in flight): {} jobs in {:.2} s = {:.0} jobs/s; request {}",
            args.single_concurrency,
            args.single,
            single_time.as_secs_f64(),
            single_rate,
            single_lat.summary()
        );
    }

    let total = args.jobs + args.single;
    let (drain_time, mut fetch_lat, mut ack_lat) = drain(&args, &client, &queue, total).await?;
    let drain_rate = rate(total, drain_time);
    println!(
        "drain ({} workers, fetch {} + one ack per job, {} acks in flight each): {} jobs in {:.2} s = {:.0} jobs/s",
        args.workers,
        args.fetch_count,
        args.ack_concurrency,
        total,
        drain_time.as_secs_f64(),
        drain_rate
    );
    println!("  fetch {}", fetch_lat.summary());
    println!("  ack   {}", ack_lat.summary());
    println!(
        "{}",
        json!({
            "enqueue_batch_jobs_per_s": bulk_rate.round(),
            "enqueue_single_jobs_per_s": single_rate.round(),
            "drain_jobs_per_s": drain_rate.round(),
            "jobs": total,
            "workers": args.workers,
            "fetch_count": args.fetch_count,
            "fetch_p50_ms": ms(fetch_lat.percentile(50.0)),
            "fetch_p99_ms": ms(fetch_lat.percentile(99.0)),
            "ack_p50_ms": ms(ack_lat.percentile(50.0)),
            "ack_p99_ms": ms(ack_lat.percentile(99.0)),
        })
    );
    Ok(())
}
