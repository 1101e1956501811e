//! Load tool for ojsd, measured end to end through the HTTP API of a running server.
//!
//! Workloads (each on a queue of its own, each printing a human line and one JSON line):
//! - `w1-bulk`: enqueue `--jobs` no-op jobs in batches of `--batch` (`POST /ojs/v1/jobs/batch`);
//! - `w1-single`: enqueue `--single` jobs, one per request, from `--producers` concurrent
//!   producers;
//! - `w2-batched`: drain `--jobs` enqueued jobs with `--batch-workers` workers, each fetching
//!   `--batch-fetch` jobs and acknowledging them with one batch ACK (`POST
//!   /ojs/v1/workers/ack/batch`, ojsd's `batch-ack` extension);
//! - `w2-sdk`: drain `--sdk-jobs` jobs the way the OJS SDKs do: `--sdk-workers` workers, each
//!   fetching `--sdk-fetch` jobs (10, as the SDKs do; at most 1,000) and sending one ACK
//!   request per job;
//! - `w3-latency`: enqueue one job at a time at `--rate` jobs/s for `--latency-secs` while
//!   `--pollers` workers long-poll FETCH; reports enqueue → FETCH-returned latency;
//! - `retention`: inserts `--retained` finished jobs, reruns `w2-batched`, then reruns it while
//!   a pruner deletes them (the server's own prune statement, in its batch size), and reports
//!   both against the empty-table figure;
//! - `fair` (not run by default): FETCH with per-tenant fairness off against on. `--fair-jobs`
//!   jobs of `--fair-tenants` tenants (`meta.tenant_id`) are enqueued in batches and drained
//!   like `w2-batched`, first on a plain queue, then on a queue of a pool with
//!   `tenant_fairness` enabled (created before the enqueue, drained by registered members);
//!   reports both phases' enqueue and drain rates, the on/off ratios, and how many distinct
//!   tenants the first 1,000 and 2,000 dispatched jobs had. Its main line is the "on" drain.
//!
//! - `pinned-horizon` (not run by default): `--pinned-rate` jobs/s flow through enqueue →
//!   long-poll FETCH → ACK while a transaction holding an xid stays open on another connection
//!   for `--pin-secs` (the MVCC horizon is pinned: no dead row can be cleaned up). Reports the
//!   completion rate before, during (worst 5 s window) and after the pin, and how long after the
//!   pin ends the backlog is back to its level before.
//!
//! - `result-waits` (not run by default): `--waiters` clients each await one job's result
//!   (`GET /ojs/v1/jobs/{id}/result?wait=true`), spread over `--url` and `--second-url`;
//!   reports the Postgres CPU and commits per second over `--idle-secs` with no waiter and
//!   with all of them waiting, then each waiter's latency from its job's ACK to its answer.
//!
//! With `--database-url` every line also reports the ojsd process's peak resident memory, the
//! dead tuples of `ojs_job` and `ojs_event` after the workload, and WAL bytes written per job.
//! When the server and Postgres run on this host, it also reports the CPU time the postgres
//! processes and the ojsd process spent per job during the timed part of the workload (the drain
//! of the w2 workloads), read from `/proc`.
//!
//! Run with: `cargo run --release --bin ojsd-bench -- --url http://127.0.0.1:8080`

mod client;
mod measure;
mod workloads;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};
use sqlx::PgPool;

use measure::{Cpu, TICKS_PER_S, find_ojsd, rate, rss_kib, unix_millis};
use workloads::FairOrder;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ojsd-bench",
    about = "Measure ojsd's throughput and latency through its HTTP API"
)]
struct Args {
    /// Base URL of the server.
    #[arg(long, env = "OJS_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The server's database, for dead tuples, WAL volume and the retention scenario (the
    /// server's default). Pass an empty string to skip those figures.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/ojs"
    )]
    database_url: String,
    /// PID of the ojsd process whose memory is reported (default: the one process named ojsd).
    #[arg(long)]
    ojsd_pid: Option<u32>,
    /// Workloads to run, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "w1-bulk,w1-single,w2-batched,w2-sdk,w3-latency"
    )]
    workloads: Vec<Workload>,
    /// Jobs of w1-bulk and w2-batched (and each retention run).
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Jobs per batch request (w1-bulk, and the untimed enqueue before each drain).
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Batch requests in flight at once.
    #[arg(long, default_value_t = 2)]
    batch_concurrency: usize,
    /// Jobs of w1-single.
    #[arg(long, default_value_t = 20_000)]
    single: usize,
    /// Concurrent producers of w1-single.
    #[arg(long, default_value_t = 32)]
    producers: usize,
    /// Workers of w2-batched.
    #[arg(long, default_value_t = 4)]
    batch_workers: usize,
    /// Jobs per FETCH in w2-batched.
    #[arg(long, default_value_t = 500)]
    batch_fetch: usize,
    /// Jobs of w2-sdk.
    #[arg(long, default_value_t = 50_000)]
    sdk_jobs: usize,
    /// Workers of w2-sdk.
    #[arg(long, default_value_t = 32)]
    sdk_workers: usize,
    /// Jobs per FETCH in w2-sdk (the SDKs fetch 10; at most 1,000).
    #[arg(long, default_value_t = 10)]
    sdk_fetch: usize,
    /// Enqueue rate of w3-latency, jobs/s.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Duration of w3-latency, seconds.
    #[arg(long, default_value_t = 10)]
    latency_secs: u64,
    /// Long-polling workers of w3-latency.
    #[arg(long, default_value_t = 4)]
    pollers: usize,
    /// Scrape `/metrics` every this many milliseconds during w3-latency, as a monitoring system
    /// would (0: never). The server reads its database-backed gauges at most every 5 s.
    #[arg(long, default_value_t = 0)]
    scrape_ms: u64,
    /// Spread enqueued jobs over this many priorities (job n gets priority n mod N); 1 leaves
    /// every job at the default priority. With priority aging on in the server, this measures
    /// FETCH over a backlog whose order depends on aging.
    #[arg(long, default_value_t = 1)]
    priorities: usize,
    /// Give every enqueued job a `rate_limit` whose key is one of this many of its workload's
    /// (job n of queue q gets key `q-{n mod N}`), with `--rate-key-concurrency`; 0 enqueues
    /// plain jobs. Measures what keyed jobs cost (held at enqueue, released by their key,
    /// starts recorded).
    #[arg(long, default_value_t = 0)]
    rate_keys: usize,
    /// The concurrency of each key of `--rate-keys` (high: the keys rarely hold jobs back).
    #[arg(long, default_value_t = 100_000)]
    rate_key_concurrency: u32,
    /// Finished jobs the retention scenario keeps in the table.
    #[arg(long, default_value_t = 1_000_000)]
    retained: usize,
    /// Jobs of each phase of `fair` (enqueued in batches of `--batch`, drained with
    /// `--batch-workers` workers fetching `--batch-fetch`).
    #[arg(long, default_value_t = 100_000)]
    fair_jobs: usize,
    /// Tenants the jobs of `fair` belong to (`meta.tenant_id` = `t0`, `t1`, ...).
    #[arg(long, default_value_t = 1_000)]
    fair_tenants: usize,
    /// How `fair` assigns jobs to tenants in enqueue order: `blocks` gives each tenant a
    /// contiguous run of jobs (FIFO then serves few tenants at first, fairness all of them);
    /// `round-robin` cycles through the tenants (FIFO is then already interleaved).
    #[arg(long, value_enum, default_value = "blocks")]
    fair_order: FairOrder,
    /// Jobs per second flowing through `pinned-horizon`.
    #[arg(long, default_value_t = 800)]
    pinned_rate: u32,
    /// How long `pinned-horizon` keeps the transaction open, seconds.
    #[arg(long, default_value_t = 60)]
    pin_secs: u64,
    /// Seconds of `pinned-horizon` before and after the pin.
    #[arg(long, default_value_t = 20)]
    unpinned_secs: u64,
    /// Where `bench/graphile-worker` is (its `npm ci` done), for `graphile-drain` and
    /// `graphile-latency`; `--database-url` then names graphile-worker's database.
    #[arg(long, default_value = "bench/graphile-worker")]
    graphile_dir: String,
    /// Waiting clients of `result-waits` (one per job).
    #[arg(long, default_value_t = 1_000)]
    waiters: usize,
    /// A second replica's base URL: `result-waits` spreads its waiters over both servers.
    #[arg(long)]
    second_url: Option<String>,
    /// Seconds over which `result-waits` measures Postgres with no waiter, then with all
    /// waiting.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    W1Bulk,
    W1Single,
    W2Batched,
    W2Sdk,
    W3Latency,
    Retention,
    Fair,
    PinnedHorizon,
    GraphileDrain,
    GraphileLatency,
    ResultWaits,
}

/// The load tool's connections and helpers.
struct Bench {
    args: Args,
    client: reqwest::Client,
    db: Option<PgPool>,
    ojsd_pid: Option<u32>,
    /// CPU counters at the start of the timed part of the running workload.
    timed_from: Mutex<Option<Cpu>>,
    /// WAL position at the start of the part of the running workload whose WAL it reports.
    wal_from: Mutex<Option<i64>>,
}

impl Bench {
    /// Runs one workload and reports it.
    async fn run(self: &Arc<Self>, workload: Workload) -> anyhow::Result<()> {
        let name = workload
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        let queue = format!("bench-{name}-{}", unix_millis());
        let before = self.db_snapshot().await?;
        let counters_before = self.fetch_counters().await;
        self.mark_timed();
        let peak = Arc::new(AtomicU64::new(0));
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = self.ojsd_pid.map(|pid| {
            let (peak, sampling) = (peak.clone(), sampling.clone());
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) {
                    if let Some(kib) = rss_kib(pid) {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        });
        let outcome = match workload {
            Workload::W1Bulk => self.w1_bulk(&queue).await,
            Workload::W1Single => self.w1_single(&queue).await,
            Workload::W2Batched => self.w2_batched(&queue).await,
            Workload::W2Sdk => self.w2_sdk(&queue).await,
            Workload::W3Latency => self.w3_latency(&queue).await,
            Workload::Retention => self.retention(&queue).await,
            Workload::Fair => self.fair(&queue).await,
            Workload::PinnedHorizon => self.pinned_horizon(&queue).await,
            Workload::GraphileDrain => self.graphile_drain().await,
            Workload::GraphileLatency => self.graphile_latency().await,
            Workload::ResultWaits => self.result_waits(&queue).await,
        };
        let cpu_after = self.cpu();
        let cpu_before = self.timed_from.lock().expect("cpu mark").take();
        sampling.store(false, Ordering::Relaxed);
        if let Some(sampler) = sampler {
            sampler.await?;
        }
        let mut outcome = outcome.with_context(|| format!("workload {name}"))?;
        let counters_after = self.fetch_counters().await;
        let after = self.db_snapshot().await?;
        let jobs_per_s = rate(outcome.jobs, outcome.elapsed);
        let (p50, p99, max) = (
            outcome.latencies.percentile(50.0),
            outcome.latencies.percentile(99.0),
            outcome.latencies.percentile(100.0),
        );
        let rss_mb = (peak.load(Ordering::Relaxed) > 0)
            .then(|| (peak.load(Ordering::Relaxed) as f64 / 1024.0).round());
        println!(
            "{name}: {} jobs in {:.2} s = {jobs_per_s:.0} jobs/s; p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; ojsd peak RSS {}",
            outcome.jobs,
            outcome.elapsed.as_secs_f64(),
            rss_mb.map_or("unknown".to_owned(), |mb| format!("{mb} MB")),
        );
        let mut line = json!({
            "workload": name,
            "jobs": outcome.jobs,
            "seconds": outcome.elapsed.as_secs_f64(),
            "jobs_per_s": jobs_per_s.round(),
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": max,
            "ojsd_peak_rss_mb": rss_mb,
        });
        if let Some(cpu_before) = cpu_before.filter(|c| c.postgres > 0) {
            let per_job = |ticks: u64| {
                (ticks as f64 / TICKS_PER_S * 1e6 / outcome.jobs.max(1) as f64).round()
            };
            let (pg, ojsd) = (
                per_job(cpu_after.postgres.saturating_sub(cpu_before.postgres)),
                per_job(cpu_after.ojsd.saturating_sub(cpu_before.ojsd)),
            );
            println!("{name}: CPU per job: postgres {pg} µs, ojsd {ojsd} µs");
            line["postgres_cpu_us_per_job"] = json!(pg);
            line["ojsd_cpu_us_per_job"] = json!(ojsd);
        }
        if let (Some(before), Some(after)) = (counters_before, counters_after) {
            let per_job = |i: usize| {
                let n = after[i] - before[i];
                (n / outcome.jobs.max(1) as f64 * 1000.0).round() / 1000.0
            };
            let (claims, handoffs, promotions) = (per_job(0), per_job(1), per_job(2));
            println!(
                "{name}: per job: {claims} claim statements, {handoffs} hand-offs, {promotions} FETCH promotions"
            );
            line["claim_statements_per_job"] = json!(claims);
            line["handoffs_per_job"] = json!(handoffs);
            line["fetch_promotions_per_job"] = json!(promotions);
        }
        if let (Some(before), Some(after)) = (before, after) {
            let from = self
                .wal_from
                .lock()
                .expect("wal mark")
                .take()
                .unwrap_or(before.wal_lsn);
            line["wal_bytes_per_job"] =
                json!(((after.wal_lsn - from) as f64 / outcome.jobs.max(1) as f64).round());
            line["dead_tuples_job"] = json!(after.dead_job);
            line["dead_tuples_event"] = json!(after.dead_event);
        }
        if let (Value::Object(line), Value::Object(extra)) = (&mut line, outcome.extra.take()) {
            line.extend(extra);
        }
        println!("{line}");
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ojsd::app::install_tls();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(120))
        .build()?;
    // graphile-worker's workloads need no ojsd.
    let graphile_only = args
        .workloads
        .iter()
        .all(|w| matches!(w, Workload::GraphileDrain | Workload::GraphileLatency));
    let manifest: Value = if graphile_only {
        json!({"implementation": {"name": "none (graphile-worker only)", "version": ""}})
    } else {
        client
            .get(format!("{}/ojs/manifest", args.url))
            .send()
            .await
            .with_context(|| format!("is ojsd running at {}?", args.url))?
            .json()
            .await?
    };
    let db = if args.database_url.is_empty() {
        None
    } else {
        Some(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .connect(&args.database_url)
                .await
                .with_context(|| format!("cannot connect to {}", args.database_url))?,
        )
    };
    let ojsd_pid = args.ojsd_pid.or_else(find_ojsd);
    println!(
        "ojsd-bench against {} ({} {}), ojsd pid {}",
        args.url,
        manifest["implementation"]["name"],
        manifest["implementation"]["version"],
        ojsd_pid.map_or("unknown".to_owned(), |p| p.to_string())
    );
    let workloads = args.workloads.clone();
    let bench = Arc::new(Bench {
        args,
        client,
        db,
        ojsd_pid,
        timed_from: Mutex::new(None),
        wal_from: Mutex::new(None),
    });
    for workload in workloads {
        bench.run(workload).await?;
    }
    Ok(())
}
