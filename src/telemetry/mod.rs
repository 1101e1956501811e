//! Logs, metrics and job traces.
//!
//! Logs: `RUST_LOG` filters (default `info`), `OJS_LOG_FORMAT` picks text or JSON lines.
//! Metrics: Prometheus text at `GET /metrics`, named after the [OJS metrics] plus HTTP request
//! counters. Labels never carry job ids, arguments or messages.
//! Job traces: OpenTelemetry spans over OTLP/HTTP ([`traces`]).
//!
//! [OJS metrics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-observability.md#8-metrics

pub mod traces;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::job::{Job, JobState};
use crate::queue_config::OverflowPolicy;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global log subscriber, writing to stderr. Call once per process.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // Already installed (tests start several servers in one process): keep the first one.
    let _ = result;
}

/// Execution-time buckets (seconds), the ones the [OJS histogram metrics] recommend.
///
/// [OJS histogram metrics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-observability.md#82-histogram-metrics
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// Waiting-time buckets (seconds), the ones the [OJS histogram metrics] recommend.
///
/// [OJS histogram metrics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-observability.md#82-histogram-metrics
const WAIT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// HTTP request latency buckets (seconds).
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// Result sizes in bytes, up to the 1 MiB limit.
const RESULT_SIZE_BUCKETS: &[f64] = &[
    64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
];

static METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process-wide Prometheus recorder, installed on first use.
pub fn metrics() -> &'static PrometheusHandle {
    METRICS.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("ojs_job_duration_seconds".into()),
                DURATION_BUCKETS,
            )
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("ojs_job_queue_time_seconds".into()),
                    WAIT_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("ojs_job_wait_duration_by_priority_seconds".into()),
                    WAIT_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("ojs_scheduling_queue_wait_duration_seconds".into()),
                    WAIT_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("ojs_http_request_duration_seconds".into()),
                    REQUEST_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("ojs_result_size_bytes".into()),
                    RESULT_SIZE_BUCKETS,
                )
            })
            .expect("bucket lists are non-empty");
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Fails only if another recorder was installed first; then ours just stays empty.
        let _ = metrics::set_global_recorder(recorder);
        // Published from the start, so that a reader can tell "none yet" from "not measured".
        counter!("ojs_fetch_claim_statements_total").increment(0);
        counter!("ojs_fetch_handoffs_total").increment(0);
        counter!("ojs_result_rejected_total").increment(0);
        handle
    })
}

fn seconds(from: chrono::DateTime<chrono::Utc>, to: chrono::DateTime<chrono::Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6
}

/// Counts newly created jobs per queue and type.
pub fn jobs_enqueued<'a>(jobs: impl IntoIterator<Item = &'a Job>) {
    let mut per_label: HashMap<(&str, &str), u64> = HashMap::new();
    for job in jobs {
        *per_label
            .entry((job.queue.as_str(), job.r#type.as_str()))
            .or_default() += 1;
    }
    for ((queue, job_type), n) in per_label {
        counter!("ojs_job_enqueued_total", "queue" => queue.to_owned(), "type" => job_type.to_owned())
            .increment(n);
    }
}

/// Counts claim statements run for FETCHes (several FETCHes may share one), so that claims
/// per delivered job can be read off the metrics.
pub fn claim_statements(n: u64) {
    counter!("ojs_fetch_claim_statements_total").increment(n);
}

/// Counts jobs an enqueue handed straight to a waiting FETCH (no claim statement).
pub fn jobs_handed_off(n: usize) {
    counter!("ojs_fetch_handoffs_total").increment(n as u64);
}

/// Counts the promotions a FETCH ran (`ran`) or skipped because nothing could be due.
pub fn fetch_promotion(ran: bool) {
    counter!("ojs_fetch_promotions_total", "outcome" => if ran { "ran" } else { "skipped" })
        .increment(1);
}

/// Records how long claimed jobs waited in `available`, by type and by priority.
pub fn jobs_started(jobs: &[Job]) {
    for job in jobs {
        if let (Some(enqueued), Some(started)) = (job.enqueued_at, job.started_at) {
            let waited = seconds(enqueued, started);
            histogram!("ojs_job_queue_time_seconds", "queue" => job.queue.clone(), "type" => job.r#type.clone())
                .record(waited);
            histogram!(
                "ojs_job_wait_duration_by_priority_seconds",
                "queue" => job.queue.clone(),
                "priority" => job.priority.to_string()
            )
            .record(waited);
        }
    }
}

/// Sets the `ojs_queue_available_by_priority` gauge from `(queue, priority, jobs)` rows; series
/// of earlier calls missing from `rows` drop to 0.
pub fn available_by_priority(rows: &[(String, i32, i64)]) {
    static SEEN: std::sync::Mutex<Vec<(String, i32)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().expect("gauge series lock");
    let set = |queue: &str, priority: i32, jobs: f64| {
        gauge!(
            "ojs_queue_available_by_priority",
            "queue" => queue.to_owned(),
            "priority" => priority.to_string()
        )
        .set(jobs);
    };
    for (queue, priority) in seen.iter() {
        if !rows.iter().any(|(q, p, _)| q == queue && p == priority) {
            set(queue, *priority, 0.0);
        }
    }
    for (queue, priority, jobs) in rows {
        set(queue, *priority, *jobs as f64);
    }
    *seen = rows.iter().map(|(q, p, _)| (q.clone(), *p)).collect();
}

/// [`attempt_finished`] for each of `jobs`.
pub fn attempts_finished(jobs: &[Job]) {
    jobs.iter().for_each(attempt_finished);
}

/// Records the end of an attempt (ACK or NACK): outcome counters and execution time.
pub fn attempt_finished(job: &Job) {
    if job.state == JobState::Completed {
        let ended = job.completed_at.unwrap_or_else(chrono::Utc::now);
        return job_completed(&job.queue, &job.r#type, job.started_at, ended);
    }
    let labels = [("queue", job.queue.clone()), ("type", job.r#type.clone())];
    match job.state {
        JobState::Retryable => counter!("ojs_job_retried_total", &labels).increment(1),
        JobState::Discarded => counter!("ojs_job_failed_total", &labels).increment(1),
        _ => {}
    }
    let ended = job.discarded_at.unwrap_or_else(chrono::Utc::now);
    if let Some(started) = job.started_at {
        histogram!(
            "ojs_job_duration_seconds",
            "queue" => job.queue.clone(),
            "type" => job.r#type.clone(),
            "state" => job.state.as_str()
        )
        .record(seconds(started, ended));
    }
}

/// Counts a completed job and the duration of its last attempt.
pub fn job_completed(
    queue: &str,
    job_type: &str,
    started_at: Option<chrono::DateTime<chrono::Utc>>,
    completed_at: chrono::DateTime<chrono::Utc>,
) {
    let (count, duration) = completion_handles(queue, job_type);
    count.increment(1);
    if let Some(started) = started_at {
        duration.record(seconds(started, completed_at));
    }
}

/// Completion metric handles by queue, then job type: every ACKed job adds to them.
static COMPLETION_HANDLES: HandleCache<String> = HandleCache::new();

fn completion_handles(queue: &str, job_type: &str) -> (metrics::Counter, metrics::Histogram) {
    COMPLETION_HANDLES.get(
        queue,
        |t| t == job_type,
        || {
            let handles = (
                counter!(
                    "ojs_job_completed_total",
                    "queue" => queue.to_owned(),
                    "type" => job_type.to_owned()
                ),
                histogram!(
                    "ojs_job_duration_seconds",
                    "queue" => queue.to_owned(),
                    "type" => job_type.to_owned(),
                    "state" => JobState::Completed.as_str()
                ),
            );
            (job_type.to_owned(), handles)
        },
    )
}

/// Metric handles per label set (a counter and a histogram unless `H` says otherwise), made once and kept by one label (a route, a queue)
/// and then the rest of theirs (`K`): finding them again costs a lookup, not building, hashing
/// and dropping their label sets. Each list is short (the methods and statuses a route answers,
/// the job types of a queue).
struct HandleCache<K, H = Handles>(OnceLock<Mutex<HandleLists<K, H>>>);

type HandleLists<K, H> = HashMap<String, Vec<(K, H)>>;

type Handles = (metrics::Counter, metrics::Histogram);

impl<K, H: Clone> HandleCache<K, H> {
    const fn new() -> HandleCache<K, H> {
        HandleCache(OnceLock::new())
    }

    /// The handles of `first` and the rest of the labels that `rest` accepts, made by `make`
    /// (returning that rest too) the first time.
    fn get(&self, first: &str, rest: impl Fn(&K) -> bool, make: impl FnOnce() -> (K, H)) -> H {
        metrics();
        let mut lists = self
            .0
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = match lists.get_mut(first) {
            Some(list) => list,
            None => lists.entry(first.to_owned()).or_default(),
        };
        if let Some((_, handles)) = list.iter().find(|(k, _)| rest(k)) {
            return handles.clone();
        }
        let (key, handles) = make();
        list.push((key, handles.clone()));
        handles
    }
}

/// The size of the result an ACK sent (`ojs_result_size_bytes`, by queue and job type; the
/// results extension's `ojs.result.size_bytes`). ACKs without a result record nothing.
pub fn result_size(queue: &str, job_type: &str, bytes: usize) {
    RESULT_SIZE_HANDLES
        .get(
            queue,
            |t| t == job_type,
            || {
                let handle = histogram!(
                    "ojs_result_size_bytes",
                    "queue" => queue.to_owned(),
                    "type" => job_type.to_owned()
                );
                (job_type.to_owned(), handle)
            },
        )
        .record(bytes as f64);
}

static RESULT_SIZE_HANDLES: HandleCache<String, metrics::Histogram> = HandleCache::new();

/// An ACK refused because its result was over the size limit (`ojs_result_rejected_total`;
/// the results extension's `ojs.result.rejected.count`): the job stays active.
pub fn result_rejected() {
    counter!("ojs_result_rejected_total").increment(1);
}

/// Counts jobs discarded because they expired before they ran: `(queue, type, count)`.
pub fn jobs_expired(expired: &[(String, String, i64)]) {
    for (queue, job_type, n) in expired {
        let labels = [("queue", queue.clone()), ("type", job_type.clone())];
        counter!("ojs_job_expired_total", &labels).increment(*n as u64);
        counter!("ojs_job_failed_total", &labels).increment(*n as u64);
    }
}

/// Counts a change of a job's priority after enqueue.
pub fn priority_changed(job: &Job) {
    counter!("ojs_job_priority_changes_total", "queue" => job.queue.clone()).increment(1);
}

/// Counts a cancelled job.
pub fn job_cancelled(job: &Job) {
    counter!("ojs_job_cancelled_total", "queue" => job.queue.clone(), "type" => job.r#type.clone())
        .increment(1);
}

/// Counts an HTTP request and its latency, by route template (never the concrete path).
/// A method outside HTTP's own set is counted as `OTHER`, so clients cannot grow the label set.
pub fn http_request(method: &str, route: &str, status: u16, elapsed: std::time::Duration) {
    const KNOWN: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT",
    ];
    let method = if KNOWN.contains(&method) {
        method
    } else {
        "OTHER"
    };
    let (count, duration) = request_handles(method, route, status);
    count.increment(1);
    duration.record(elapsed.as_secs_f64());
}

/// Request metric handles by route, then method and status.
static REQUEST_HANDLES: HandleCache<(String, u16)> = HandleCache::new();

fn request_handles(method: &str, route: &str, status: u16) -> Handles {
    REQUEST_HANDLES.get(
        route,
        |(m, s)| *s == status && m == method,
        || {
            let handles = (
                counter!(
                    "ojs_http_requests_total",
                    "method" => method.to_owned(),
                    "route" => route.to_owned(),
                    "status" => status.to_string()
                ),
                histogram!(
                    "ojs_http_request_duration_seconds",
                    "method" => method.to_owned(),
                    "route" => route.to_owned()
                ),
            );
            ((method.to_owned(), status), handles)
        },
    )
}

/// Whether this replica leads maintenance (`ojs_leader` gauge: 1 or 0).
pub fn leader_changed(leader: bool) {
    gauge!("ojs_leader").set(if leader { 1.0 } else { 0.0 });
}

/// Whether this replica reaches its database (`ojs_database_up`: 1, or 0 while it answers 503
/// because the database is believed down).
pub fn database_up(up: bool) {
    gauge!("ojs_database_up").set(if up { 1.0 } else { 0.0 });
}

/// Reports whether maintenance mode is in force (`ojs_maintenance_mode`, 0 or 1).
pub fn maintenance_mode(on: bool) {
    gauge!("ojs_maintenance_mode").set(if on { 1.0 } else { 0.0 });
}

/// Jobs enqueued from SQL (`ojs_enqueue()`), counted in `ojs_job_enqueued_total` like PUSHed
/// ones. Every replica hears of them; only the leader reports them here, so that the sum over
/// replicas counts each once (a handover may miss a few).
pub fn jobs_enqueued_by_sql(queue: &str, job_type: &str, jobs: u64) {
    counter!("ojs_job_enqueued_total", "queue" => queue.to_owned(), "type" => job_type.to_owned())
        .increment(jobs);
}

/// A read of a job's result (`ojs_result_retrievals_total`, by `method`: `poll`, `wait`,
/// `bulk`, `stream`; and `outcome`: `ready`, `pending`, `pruned`).
pub fn result_retrieved(method: &'static str, outcome: &'static str) {
    counter!("ojs_result_retrievals_total", "method" => method, "outcome" => outcome).increment(1);
}

/// Workflows by state (`ojs_workflows`).
pub fn workflows(counts: &crate::store::workflow::WorkflowCounts) {
    for (state, n) in [
        ("running", counts.running),
        ("completed", counts.completed),
        ("failed", counts.failed),
        ("cancelled", counts.cancelled),
    ] {
        gauge!("ojs_workflows", "state" => state).set(n as f64);
    }
}

/// Rate-limit keys of jobs (`ojs_rate_limit_keys`), those holding jobs back
/// (`ojs_rate_limit_keys_limited`), and the jobs they hold (`ojs_rate_limit_held_jobs`).
pub fn rate_keys((keys, limited, held): (i64, i64, i64)) {
    gauge!("ojs_rate_limit_keys").set(keys as f64);
    gauge!("ojs_rate_limit_keys_limited").set(limited as f64);
    gauge!("ojs_rate_limit_held_jobs").set(held as f64);
}

/// Sets the per-tenant gauges of the configured tenants (at most
/// [`crate::store::tenant::MAX_LABELLED_TENANTS`] labels, the rest as `_other`):
/// `ojs_tenant_jobs{tenant_id,state}` (`in_flight`, `held`, `waiting`) and
/// `ojs_tenant_limit{tenant_id,limit}`. Series of tenants no longer configured drop to 0.
pub fn tenants(rows: &[crate::store::tenant::TenantGauge]) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().expect("gauge series lock");
    let set = |tenant: &str, jobs: [i64; 3], limits: [Option<f64>; 3]| {
        for (state, n) in ["in_flight", "held", "waiting"].into_iter().zip(jobs) {
            gauge!("ojs_tenant_jobs", "tenant_id" => tenant.to_owned(), "state" => state)
                .set(n as f64);
        }
        for (limit, value) in ["max_concurrency", "max_enqueue_rate", "max_queue_depth"]
            .into_iter()
            .zip(limits)
        {
            // An unset limit is NaN (no limit), not 0 (a limit that holds everything).
            gauge!("ojs_tenant_limit", "tenant_id" => tenant.to_owned(), "limit" => limit)
                .set(value.unwrap_or(f64::NAN));
        }
    };
    for tenant in seen.iter() {
        if !rows.iter().any(|r| r.tenant == *tenant) {
            set(tenant, [0; 3], [None; 3]);
        }
    }
    for r in rows {
        let l = &r.limits;
        set(
            &r.tenant,
            [r.in_flight, r.held, r.waiting],
            [
                l.max_concurrency.map(f64::from),
                l.max_enqueue_rate.map(|w| f64::from(w.limit)),
                l.max_queue_depth.map(f64::from),
            ],
        );
    }
    *seen = rows.iter().map(|r| r.tenant.clone()).collect();
}

/// An enqueue refused for a tenant's limit (`ojs_tenant_limit_exceeded_total{tenant_id,limit}`;
/// only configured tenants have limits, so the labels stay as few as the operator's
/// configurations).
pub fn tenant_limit_exceeded(tenant: &str, limit: &str) {
    counter!("ojs_tenant_limit_exceeded_total", "tenant_id" => tenant.to_owned(), "limit" => limit.to_owned())
        .increment(1);
}

/// Jobs a rate-limit key let go (`ojs_rate_limit_released_total`).
pub fn rate_released(jobs: i32) {
    if jobs > 0 {
        counter!("ojs_rate_limit_released_total").increment(u64::try_from(jobs).unwrap_or(0));
    }
}

/// An occurrence of cron entry `cron` handled: `enqueued`, `overlap_skip`, `enqueue_failed`
/// or `dst_skip` (`ojs_cron_runs_total`).
pub fn cron_run(cron: &str, outcome: &'static str) {
    counter!("ojs_cron_runs_total", "cron" => cron.to_owned(), "outcome" => outcome).increment(1);
}

/// One pass of a maintenance service: its duration, and rows handled (`None`: it failed).
pub fn maintenance_pass(
    service: &'static str,
    elapsed: std::time::Duration,
    processed: Option<u64>,
) {
    histogram!("ojs_maintenance_pass_duration_seconds", "service" => service)
        .record(elapsed.as_secs_f64());
    // Both series exist from a service's first pass, so that a rate over them (an alert on
    // errors) has a series to read before the first error.
    let (rows, errors) = match processed {
        Some(rows) => (rows, 0),
        None => (0, 1),
    };
    counter!("ojs_maintenance_processed_total", "service" => service).increment(rows);
    counter!("ojs_maintenance_errors_total", "service" => service).increment(errors);
}

/// A bounded queue's depth against its bound (`ojs_queue_max_size`, `ojs_queue_utilization`,
/// `ojs_backpressure_pressure`), as seen by an enqueue.
pub fn queue_pressure(queue: &str, depth: i64, bound: i64) {
    let ratio = depth as f64 / bound.max(1) as f64;
    gauge!("ojs_queue_max_size", "queue" => queue.to_owned()).set(bound as f64);
    gauge!("ojs_queue_utilization", "queue" => queue.to_owned()).set(ratio);
    gauge!("ojs_backpressure_pressure", "queue" => queue.to_owned()).set(ratio);
}

/// An enqueue refused (`reject`, `block`) or a job dropped (`drop_oldest`) at a queue's bound.
pub fn queue_overflow(queue: &str, policy: OverflowPolicy) {
    counter!("ojs_queue_overflow_total", "queue" => queue.to_owned(), "policy" => policy.as_str())
        .increment(1);
    if policy == OverflowPolicy::DropOldest {
        counter!("ojs_backpressure_dropped_total", "queue" => queue.to_owned()).increment(1);
    } else {
        counter!("ojs_backpressure_rejected_total", "queue" => queue.to_owned()).increment(1);
    }
}

/// Sets `ojs_queue_depth{queue,state}` from `(queue, state, jobs)` rows of unfinished jobs (series
/// that drained drop to 0), and `ojs_queue_max_size` / `ojs_queue_utilization` of the bounded
/// queues.
pub fn queue_depth(rows: &[(String, String, i64)], bounds: &[(String, i64)]) {
    static SEEN: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().expect("gauge series lock");
    let set = |queue: &str, state: &str, jobs: f64| {
        gauge!("ojs_queue_depth", "queue" => queue.to_owned(), "state" => state.to_owned())
            .set(jobs);
    };
    for (queue, state) in seen.iter() {
        if !rows.iter().any(|(q, s, _)| q == queue && s == state) {
            set(queue, state, 0.0);
        }
    }
    for (queue, state, jobs) in rows {
        set(queue, state, *jobs as f64);
    }
    *seen = rows
        .iter()
        .map(|(q, s, _)| (q.clone(), s.clone()))
        .collect();
    for (queue, bound) in bounds {
        let depth: i64 = rows
            .iter()
            .filter(|(q, _, _)| q == queue)
            .map(|(_, _, n)| n)
            .sum();
        queue_pressure(queue, depth, *bound);
    }
}

/// Sets `ojs_queue_oldest_available_age_seconds{queue}` from `(queue, seconds)` rows: how long
/// each queue's oldest available job has waited (a queue that has none drops to 0). Unlike the
/// number of jobs waiting, which reads near 0 when workers keep up and when they are all
/// stuck alike, this is the figure to scale workers on.
pub fn queue_latency(rows: &[(String, f64)]) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().expect("gauge series lock");
    let set = |queue: &str, secs: f64| {
        gauge!("ojs_queue_oldest_available_age_seconds", "queue" => queue.to_owned()).set(secs);
    };
    for queue in seen.iter() {
        if !rows.iter().any(|(q, _)| q == queue) {
            set(queue, 0.0);
        }
    }
    for (queue, secs) in rows {
        set(queue, *secs);
    }
    *seen = rows.iter().map(|(q, _)| q.clone()).collect();
}

/// Sets `ojs_queue_workers{queue}` (running registered workers naming the queue) and
/// `ojs_queue_worker_utilization{queue}` (the jobs they hold over their declared concurrency,
/// for queues whose workers declared one) from `(queue, workers, capacity, busy)` rows; a queue
/// no longer listed drops to 0.
pub fn queue_workers(rows: &[(String, i64, Option<i64>, i64)]) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().expect("gauge series lock");
    let set = |queue: &str, workers: i64, utilization: f64| {
        gauge!("ojs_queue_workers", "queue" => queue.to_owned()).set(workers as f64);
        gauge!("ojs_queue_worker_utilization", "queue" => queue.to_owned()).set(utilization);
    };
    for queue in seen.iter() {
        if !rows.iter().any(|(q, ..)| q == queue) {
            set(queue, 0, 0.0);
        }
    }
    for (queue, workers, capacity, busy) in rows {
        set(
            queue,
            *workers,
            utilization(*busy, *capacity).unwrap_or(0.0),
        );
    }
    *seen = rows.iter().map(|(q, ..)| q.clone()).collect();
}

/// Jobs held over declared capacity (`None` when no capacity was declared).
pub fn utilization(busy: i64, capacity: Option<i64>) -> Option<f64> {
    capacity.filter(|c| *c > 0).map(|c| busy as f64 / c as f64)
}

/// Queues that came into existence (`ojs_queue_created_total`).
pub fn queues_created(n: i64) {
    if n > 0 {
        counter!("ojs_queue_created_total").increment(n.unsigned_abs());
    }
}

/// Queues removed (`ojs_queue_deleted_total`).
pub fn queues_deleted(n: usize) {
    if n > 0 {
        counter!("ojs_queue_deleted_total").increment(n as u64);
    }
}

/// Jobs a FETCH dispatched for a member of `pool` (`default` for none): the fair-scheduling
/// dispatch counter and wait histogram ([OJS fair-scheduling metrics]).
///
/// [OJS fair-scheduling metrics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#112-metrics
pub fn jobs_dispatched(jobs: &[Job], pool: &str) {
    let mut per_queue: HashMap<&str, u64> = HashMap::new();
    for job in jobs {
        *per_queue.entry(job.queue.as_str()).or_default() += 1;
        if let (Some(enqueued), Some(started)) = (job.enqueued_at, job.started_at) {
            histogram!("ojs_scheduling_queue_wait_duration_seconds", "queue" => job.queue.clone())
                .record(seconds(enqueued, started));
        }
    }
    for (queue, n) in per_queue {
        counter!("ojs_scheduling_dispatch_total", "queue" => queue.to_owned(), "pool" => pool.to_owned())
            .increment(n);
    }
}

/// A queue found starved (`ojs_scheduling_starvation_events_total`).
pub fn queue_starved(queue: &str) {
    counter!("ojs_scheduling_starvation_events_total", "queue" => queue.to_owned()).increment(1);
}

/// Sets `ojs_scheduling_dispatch_ratio{queue}` (share of the last minute's dispatches, over
/// all replicas) and `ojs_scheduling_pool_utilization{pool}` (active jobs / concurrency).
pub fn scheduling(ratios: &[(String, f64)], utilization: &[(String, f64)]) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().expect("gauge series lock");
    for queue in seen.iter() {
        if !ratios.iter().any(|(q, _)| q == queue) {
            gauge!("ojs_scheduling_dispatch_ratio", "queue" => queue.clone()).set(0.0);
        }
    }
    for (queue, ratio) in ratios {
        gauge!("ojs_scheduling_dispatch_ratio", "queue" => queue.clone()).set(*ratio);
    }
    *seen = ratios.iter().map(|(q, _)| q.clone()).collect();
    for (pool, u) in utilization {
        gauge!("ojs_scheduling_pool_utilization", "pool" => pool.clone()).set(*u);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `ojs_http_requests_total` sample of `route` with `method` and `status`, if any.
    fn requests(route: &str, method: &str, status: &str) -> Option<u64> {
        sample(
            "ojs_http_requests_total",
            &[("method", method), ("route", route), ("status", status)],
        )
    }

    /// The value of `metric` with exactly `labels`, if any.
    fn sample(metric: &str, labels: &[(&str, &str)]) -> Option<u64> {
        let mut wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        wanted.sort_unstable();
        let prefix = format!("{metric}{{");
        metrics().render().lines().find_map(|line| {
            let rest = line.strip_prefix(prefix.as_str())?;
            let (labels, value) = rest.split_once("} ")?;
            let mut labels: Vec<&str> = labels.split(',').collect();
            labels.sort_unstable();
            (labels == wanted).then(|| value.trim().parse().ok())?
        })
    }

    #[test]
    fn completions_are_counted_by_queue_and_type() {
        let at = chrono::Utc::now();
        job_completed("telemetry-test-q", "a.b", Some(at), at);
        job_completed("telemetry-test-q", "a.b", None, at);
        job_completed("telemetry-test-q", "c", Some(at), at);
        let count = |t| {
            sample(
                "ojs_job_completed_total",
                &[("queue", "telemetry-test-q"), ("type", t)],
            )
        };
        assert_eq!(count("a.b"), Some(2));
        assert_eq!(count("c"), Some(1));
        let durations = sample(
            "ojs_job_duration_seconds_count",
            &[
                ("queue", "telemetry-test-q"),
                ("type", "a.b"),
                ("state", "completed"),
            ],
        );
        assert_eq!(durations, Some(1));
    }

    #[test]
    fn requests_are_counted_by_method_route_and_status_with_unknown_methods_as_other() {
        let route = "/telemetry-test/{id}";
        let ms = std::time::Duration::from_millis(1);
        http_request("GET", route, 200, ms);
        http_request("GET", route, 200, ms);
        http_request("GET", route, 404, ms);
        http_request("BREW", route, 405, ms);
        http_request("PROPFIND", route, 405, ms);
        assert_eq!(requests(route, "GET", "200"), Some(2));
        assert_eq!(requests(route, "GET", "404"), Some(1));
        assert_eq!(requests(route, "OTHER", "405"), Some(2));
        assert_eq!(requests(route, "BREW", "405"), None);
    }
}
