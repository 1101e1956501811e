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
//!   fetching `--sdk-fetch` (≤ 10) jobs and sending one ACK request per job;
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
//! With `--database-url` every line also reports the ojsd process's peak resident memory, the
//! dead tuples of `ojs_job` and `ojs_event` after the workload, and WAL bytes written per job.
//! When the server and Postgres run on this host, it also reports the CPU time the postgres
//! processes and the ojsd process spent per job during the timed part of the workload (the drain
//! of the w2 workloads), read from `/proc`.
//!
//! Run with: `cargo run --release --bin ojsd-bench -- --url http://127.0.0.1:8080`

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};
use sqlx::PgPool;

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
    /// Jobs per FETCH in w2-sdk.
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
    /// Spread enqueued jobs over this many priorities (job n gets priority n mod N); 1 leaves
    /// every job at the default priority. With priority aging on in the server, this measures
    /// FETCH over a backlog whose order depends on aging.
    #[arg(long, default_value_t = 1)]
    priorities: usize,
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
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum FairOrder {
    Blocks,
    RoundRobin,
}

/// Which tenant each enqueued job belongs to.
#[derive(Debug, Clone, Copy)]
struct Tenants {
    count: usize,
    jobs: usize,
    order: FairOrder,
}

impl Tenants {
    /// The tenant id of job `n` (of `jobs`).
    fn of(&self, n: usize) -> String {
        let count = self.count.max(1);
        let t = match self.order {
            FairOrder::RoundRobin => n % count,
            FairOrder::Blocks => (n * count / self.jobs.max(1)).min(count - 1),
        };
        format!("t{t}")
    }
}

/// Jobs whose tenant the `fair` workload records, in dispatch order.
const FAIR_SAMPLE: usize = 2_000;

/// One phase of the `fair` workload.
struct FairPhase {
    enqueue_jobs_per_s: f64,
    drain: Outcome,
    /// Distinct tenants among the first 1,000 and the first 2,000 dispatched jobs.
    distinct_first_1000: usize,
    distinct_first_2000: usize,
}

/// Latency samples.
#[derive(Default)]
struct Latencies(Vec<Duration>);

impl Latencies {
    fn percentile(&mut self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.sort_unstable();
        let rank = ((p / 100.0) * (self.0.len() - 1) as f64).round() as usize;
        ms(self.0[rank])
    }

    fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// What one workload measured.
struct Outcome {
    jobs: usize,
    elapsed: Duration,
    /// Latencies of the workload's characteristic request (or enqueue → fetch for w3).
    latencies: Latencies,
    extra: Value,
}

/// The load tool's connections and helpers.
struct Bench {
    args: Args,
    client: reqwest::Client,
    db: Option<PgPool>,
    ojsd_pid: Option<u32>,
    /// CPU counters at the start of the timed part of the running workload.
    timed_from: Mutex<Option<Cpu>>,
}

/// CPU time spent so far, in clock ticks.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    postgres: u64,
    ojsd: u64,
}

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux port).
const TICKS_PER_S: f64 = 100.0;

/// User + system CPU ticks of one process, with those of its reaped children.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime, stime, cutime, cstime are fields 14-17 of the line, 12-15 after the name.
    (11..15).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

/// The PIDs of the running processes named `name`.
fn pids_named(name: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm.trim() == name).then_some(pid)
        })
        .collect()
}

impl Bench {
    /// CPU spent by every local postgres process and by the ojsd process.
    fn cpu(&self) -> Cpu {
        Cpu {
            postgres: pids_named("postgres")
                .into_iter()
                .filter_map(cpu_ticks)
                .sum(),
            ojsd: self.ojsd_pid.and_then(cpu_ticks).unwrap_or(0),
        }
    }

    /// Marks the start of the timed part of the running workload (CPU per job counts from
    /// here).
    fn mark_timed(&self) {
        *self.timed_from.lock().expect("cpu mark") = Some(self.cpu());
    }

    async fn post(&self, url: &str, body: &Value) -> anyhow::Result<(Value, Duration)> {
        self.request(reqwest::Method::POST, url, Some(body)).await
    }

    /// Sends a request, fails on a non-2xx answer, and returns the answer's JSON body.
    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(Value, Duration)> {
        let started = Instant::now();
        let mut request = self.client.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let took = started.elapsed();
        if !status.is_success() {
            bail!(
                "{method} {url} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        Ok((serde_json::from_slice(&bytes)?, took))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.args.url)
    }

    /// Enqueues `total` jobs on `queue` from `concurrency` producers, `per` jobs per request
    /// (one: `POST /ojs/v1/jobs`; more: batch requests), each with its `meta.tenant_id` when
    /// `tenants` is given. Returns the request latencies.
    async fn enqueue(
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
                    let job = |n| {
                        let mut job = noop_job(&queue, n, priorities);
                        if let Some(tenants) = &tenants {
                            job["meta"] = json!({"tenant_id": tenants.of(n)});
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
    async fn enqueue_batches(
        self: &Arc<Self>,
        queue: &str,
        total: usize,
    ) -> anyhow::Result<Latencies> {
        let a = &self.args;
        self.enqueue(queue, total, a.batch, a.batch_concurrency, None)
            .await
    }

    async fn w1_bulk(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let started = Instant::now();
        let latencies = self.enqueue_batches(queue, self.args.jobs).await?;
        Ok(Outcome {
            jobs: self.args.jobs,
            elapsed: started.elapsed(),
            latencies,
            extra: json!({"batch": self.args.batch, "in_flight": self.args.batch_concurrency}),
        })
    }

    async fn w1_single(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let started = Instant::now();
        let latencies = self
            .enqueue(queue, self.args.single, 1, self.args.producers, None)
            .await?;
        Ok(Outcome {
            jobs: self.args.single,
            elapsed: started.elapsed(),
            latencies,
            extra: json!({"producers": self.args.producers}),
        })
    }

    /// Drains `total` jobs from `queue` with one worker per id in `workers`, each fetching
    /// `fetch` jobs; `batch_ack` acknowledges each fetch with one batch ACK, otherwise each job
    /// with its own ACK request. With `tenants_seen`, records the `meta.tenant_id` of the
    /// first `FAIR_SAMPLE` (or a few more) fetched jobs in the order the FETCHes returned.
    /// Returns the outcome with ACK request latencies.
    async fn drain(
        self: &Arc<Self>,
        queue: &str,
        total: usize,
        workers: &[String],
        fetch: usize,
        batch_ack: bool,
        tenants_seen: Option<Arc<Mutex<Vec<String>>>>,
    ) -> anyhow::Result<Outcome> {
        let done = Arc::new(AtomicUsize::new(0));
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

    async fn w2_batched(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        self.enqueue_batches(queue, self.args.jobs).await?;
        let a = &self.args;
        let workers = worker_ids("bench", a.batch_workers);
        self.drain(queue, a.jobs, &workers, a.batch_fetch, true, None)
            .await
    }

    async fn w2_sdk(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        self.enqueue_batches(queue, self.args.sdk_jobs).await?;
        let a = &self.args;
        let workers = worker_ids("bench", a.sdk_workers);
        self.drain(
            queue,
            a.sdk_jobs,
            &workers,
            a.sdk_fetch.min(10),
            false,
            None,
        )
        .await
    }

    /// One producer enqueues at a fixed rate; long-polling workers fetch one job at a time.
    /// Latency runs from just before the enqueue request is sent to the FETCH response that
    /// carries the job.
    async fn w3_latency(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
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
        let latencies = joined(pollers).await?;
        if latencies.0.len() < total {
            bail!("only {} of {total} jobs were fetched", latencies.0.len());
        }
        Ok(Outcome {
            jobs: total,
            elapsed,
            latencies,
            extra: json!({"rate": self.args.rate, "pollers": self.args.pollers}),
        })
    }

    /// W2 on an empty table, then with `--retained` finished jobs in it, then while those are
    /// pruned.
    async fn retention(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let Some(db) = self.db.clone() else {
            bail!("the retention scenario needs --database-url");
        };
        let empty = self.w2_batched(&format!("{queue}-empty")).await?;
        let empty_rate = rate(empty.jobs, empty.elapsed);
        println!("  retention: w2-batched on an empty table: {empty_rate:.0} jobs/s");

        let finished_queue = format!("{queue}-finished");
        let inserted = Instant::now();
        insert_finished(&db, &finished_queue, self.args.retained).await?;
        println!(
            "  retention: {} finished jobs inserted in {:.1} s",
            self.args.retained,
            inserted.elapsed().as_secs_f64()
        );
        let retained = self.w2_batched(&format!("{queue}-retained")).await?;
        let retained_rate = rate(retained.jobs, retained.elapsed);
        println!("  retention: w2-batched beside them: {retained_rate:.0} jobs/s");

        // The pruner's statement, in the server's default batch size, back to back.
        let pruned = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let pruner = {
            let (db, pruned, stop) = (db.clone(), pruned.clone(), stop.clone());
            tokio::spawn(async move {
                let cutoff = chrono::Utc::now() - chrono::Duration::days(1);
                let cutoffs = ojsd::store::job::PruneCutoffs {
                    state: ojsd::job::JobState::Completed,
                    cutoff,
                    dead_letter_cutoff: cutoff,
                    queues: Vec::new(),
                };
                while !stop.load(Ordering::Relaxed) {
                    let n = ojsd::store::job::prune_finished(
                        &db,
                        &cutoffs,
                        i64::from(ojsd::config::DEFAULT_MAINTENANCE_BATCH_SIZE),
                    )
                    .await?;
                    pruned.fetch_add(n as u64, Ordering::Relaxed);
                    if n == 0 {
                        break;
                    }
                }
                anyhow::Ok(())
            })
        };
        let during = self.w2_batched(&format!("{queue}-pruning")).await?;
        stop.store(true, Ordering::Relaxed);
        pruner.await??;
        let during_rate = rate(during.jobs, during.elapsed);
        let pruned = pruned.load(Ordering::Relaxed);
        println!(
            "  retention: w2-batched while pruning: {during_rate:.0} jobs/s ({pruned} rows pruned meanwhile)"
        );
        // Leave the table as we found it.
        sqlx::query("delete from ojs_job where queue = $1")
            .bind(&finished_queue)
            .execute(&db)
            .await?;
        Ok(Outcome {
            jobs: during.jobs,
            elapsed: during.elapsed,
            latencies: during.latencies,
            extra: json!({
                "retained": self.args.retained,
                "empty_jobs_per_s": empty_rate.round(),
                "retained_jobs_per_s": retained_rate.round(),
                "retained_ratio": ratio(retained_rate, empty_rate),
                "pruning_jobs_per_s": during_rate.round(),
                "pruning_ratio": ratio(during_rate, empty_rate),
                "pruned_during_run": pruned,
            }),
        })
    }

    /// Jobs flow at `--pinned-rate` through enqueue → long-poll FETCH → ACK; after
    /// `--unpinned-secs` a transaction that holds an xid opens on another connection and stays
    /// open for `--pin-secs`, then the flow runs `--unpinned-secs` more. Reports the completion
    /// rate per phase and how long the backlog took to return to its level before the pin.
    async fn pinned_horizon(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
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

    /// Enqueues `--fair-jobs` tenant jobs on `queue` (timed) and drains them with `workers`
    /// like `w2-batched`, recording the tenants of the first dispatched jobs.
    async fn fair_phase(
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
    async fn fair(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
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
            line["wal_bytes_per_job"] = json!(
                ((after.wal_lsn - before.wal_lsn) as f64 / outcome.jobs.max(1) as f64).round()
            );
            line["dead_tuples_job"] = json!(after.dead_job);
            line["dead_tuples_event"] = json!(after.dead_event);
        }
        if let (Value::Object(line), Value::Object(extra)) = (&mut line, outcome.extra.take()) {
            line.extend(extra);
        }
        println!("{line}");
        Ok(())
    }

    /// The server's FETCH counters from `/metrics`: claim statements, hand-offs and FETCH-side
    /// promotions run (`None` when the server does not publish them).
    async fn fetch_counters(&self) -> Option<[f64; 3]> {
        let text = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let sum = |name: &str, labels: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && l.contains(labels))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        text.contains("ojs_fetch_claim_statements_total").then(|| {
            [
                sum("ojs_fetch_claim_statements_total", ""),
                sum("ojs_fetch_handoffs_total", ""),
                sum("ojs_fetch_promotions_total", "outcome=\"ran\""),
            ]
        })
    }

    /// WAL position and dead tuples (after the statistics of finished transactions are in).
    async fn db_snapshot(&self) -> anyhow::Result<Option<DbSnapshot>> {
        let Some(db) = &self.db else { return Ok(None) };
        // Backends publish table statistics at most once a second.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let (wal_lsn, dead_job, dead_event): (i64, i64, i64) = sqlx::query_as(
            r#"
            select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8,
                   coalesce((select n_dead_tup from pg_stat_user_tables where relname = 'ojs_job'), 0),
                   coalesce((select n_dead_tup from pg_stat_user_tables where relname = 'ojs_event'), 0)
            "#,
        )
        .fetch_one(db)
        .await?;
        Ok(Some(DbSnapshot {
            wal_lsn,
            dead_job,
            dead_event,
        }))
    }
}

struct DbSnapshot {
    wal_lsn: i64,
    dead_job: i64,
    dead_event: i64,
}

/// Waits for every task and merges their latencies.
async fn joined(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Latencies>>>,
) -> anyhow::Result<Latencies> {
    let mut all = Latencies::default();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

fn ratio(a: f64, b: f64) -> f64 {
    ((a / b) * 1000.0).round() / 1000.0
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

/// `{prefix}-0` .. `{prefix}-{n-1}` (at least one).
fn worker_ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n.max(1)).map(|w| format!("{prefix}-{w}")).collect()
}

/// Distinct non-empty tenants among the first `n` of `seen`.
fn distinct_tenants(seen: &[String], n: usize) -> usize {
    seen.iter()
        .take(n)
        .filter(|t| !t.is_empty())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// The `n`th no-op job, at priority `n mod priorities` (the default priority when 1).
fn noop_job(queue: &str, n: usize, priorities: usize) -> Value {
    let mut job = json!({"type": "bench.noop", "queue": queue, "args": [n]});
    if priorities > 1 {
        job["priority"] = json!(n % priorities);
    }
    job
}

/// Inserts `n` completed jobs that finished 8 days ago (past the default 7-day retention).
async fn insert_finished(db: &PgPool, queue: &str, n: usize) -> anyhow::Result<()> {
    let per = 100_000usize;
    for first in (0..n).step_by(per) {
        let count = per.min(n - first) as i64;
        sqlx::query(
            r#"
            insert into ojs_job (id, type, queue, args, state, attempt, max_attempts, retry,
                                 timeout_ms, created_at, enqueued_at, started_at, completed_at,
                                 result)
            select gen_random_uuid(), 'bench.noop', $1, json_build_array(g), 'completed', 1, 3,
                   '{"max_attempts": 3}', 1800000, t, t, t, t, 'null'
              from generate_series(1, $2::int8) g,
                   lateral (select now() - interval '8 days' + g * interval '1 millisecond' as t) x
            "#,
        )
        .bind(queue)
        .bind(count)
        .execute(db)
        .await?;
    }
    sqlx::query("analyze ojs_job").execute(db).await?;
    Ok(())
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The one running process named `ojsd`, if exactly one runs on this host.
fn find_ojsd() -> Option<u32> {
    match pids_named("ojsd")[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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
    });
    for workload in workloads {
        bench.run(workload).await?;
    }
    Ok(())
}
