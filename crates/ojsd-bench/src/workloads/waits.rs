//! `result-waits`: clients awaiting job results (`GET /ojs/v1/jobs/{id}/result?wait=true`),
//! what they cost Postgres while they wait, and how soon after its job's end each is answered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::Bench;
use crate::measure::{Latencies, Outcome, TICKS_PER_S};

/// ACKs per batch request when the jobs end.
const ACK_BATCH: usize = 100;

impl Bench {
    /// Enqueues `--waiters` jobs and parks one waiting client on each, spread over `--url` and
    /// `--second-url`. Measures the Postgres CPU and the transactions committed over
    /// `--idle-secs` before the waiters start (the servers' own background work) and while
    /// they all wait; then a worker takes the jobs and ACKs them in batches of 100, and each
    /// waiter's latency runs from just before its job's ACK request was sent to its answer.
    pub(crate) async fn result_waits(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let n = self.args.waiters.max(1);
        let Some(db) = self.db.clone() else {
            bail!("result-waits needs --database-url (it reads the waiting flags)");
        };
        self.enqueue_batches(queue, n).await?;
        let ids: Vec<String> =
            sqlx::query_scalar("select id::text from ojs_job where queue = $1 order by id")
                .bind(queue)
                .fetch_all(&db)
                .await?;
        let idle = Duration::from_secs(self.args.idle_secs.max(1));
        let quiet = self.idle_cost(idle).await?;

        let bases: Vec<String> = std::iter::once(self.args.url.clone())
            .chain(self.args.second_url.clone())
            .collect();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(120))
            .build()?;
        let waiters: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let url = format!(
                    "{}/ojs/v1/jobs/{id}/result?wait=true&timeout=30",
                    bases[i % bases.len()]
                );
                let http = http.clone();
                tokio::spawn(async move {
                    let resp = http.get(url).send().await?;
                    let answered = Instant::now();
                    let status = resp.status().as_u16();
                    let body: Value = resp.json().await?;
                    anyhow::Ok((status, body, answered))
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let flagged: i64 = sqlx::query_scalar(
                "select count(*) from ojs_job where queue = $1 and result_awaited",
            )
            .bind(queue)
            .fetch_one(&db)
            .await?;
            if flagged as usize >= n {
                break;
            }
            if Instant::now() > deadline {
                bail!("only {flagged} of {n} waiters started within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Backends publish their transaction counts when they go idle, up to 10 s later
        // (PGSTAT_IDLE_INTERVAL): the waiters' own reads and flags must land before the window.
        tokio::time::sleep(Duration::from_secs(11)).await;
        let waiting = self.idle_cost(idle).await?;

        // The jobs end: fetched, then ACKed in batches.
        let started = Instant::now();
        self.mark_timed();
        let mut sent_at: std::collections::HashMap<String, Instant> = Default::default();
        let fetch = self.url("/ojs/v1/workers/fetch");
        let ack = self.url("/ojs/v1/workers/ack/batch");
        while sent_at.len() < n {
            let (body, _) = self
                .post(
                    &fetch,
                    &json!({"queues": [queue], "count": ACK_BATCH, "worker_id": "bench-waits"}),
                )
                .await?;
            let jobs = body["jobs"].as_array().cloned().unwrap_or_default();
            if jobs.is_empty() {
                bail!("{} of {n} jobs fetched, then none", sent_at.len());
            }
            let acks: Vec<Value> = jobs
                .iter()
                .map(|j| json!({"job_id": j["id"], "result": {"n": j["args"][0]}}))
                .collect();
            let now = Instant::now();
            for j in &jobs {
                sent_at.insert(j["id"].as_str().unwrap_or_default().to_owned(), now);
            }
            self.post(&ack, &json!({"acks": acks})).await?;
        }
        let mut latencies = Latencies::default();
        for (i, waiter) in waiters.into_iter().enumerate() {
            let (status, body, answered) = waiter.await?.context("a waiter's request")?;
            if status != 200 {
                bail!("waiter {i} answered {status}: {body}");
            }
            let at = sent_at
                .get(body["job_id"].as_str().unwrap_or_default())
                .context("a waiter answered for a job not ACKed")?;
            latencies.0.push(answered.saturating_duration_since(*at));
        }
        let within_100ms = latencies
            .0
            .iter()
            .filter(|l| **l <= Duration::from_millis(100))
            .count();
        println!(
            "result-waits: {n} waiters on {} server(s); over {} s: postgres CPU {:.1} ms/s and {:.1} commits/s with no waiter, {:.1} ms/s and {:.1} commits/s with all waiting; {within_100ms} of {n} answered within 100 ms of their ACK",
            bases.len(),
            idle.as_secs(),
            quiet.0,
            quiet.1,
            waiting.0,
            waiting.1
        );
        Ok(Outcome {
            jobs: n,
            elapsed: started.elapsed(),
            latencies,
            extra: json!({
                "servers": bases.len(),
                "idle_secs": idle.as_secs(),
                "postgres_cpu_ms_per_s_no_waiter": quiet.0,
                "commits_per_s_no_waiter": quiet.1,
                "postgres_cpu_ms_per_s_waiting": waiting.0,
                "commits_per_s_waiting": waiting.1,
                "answered_within_100ms": within_100ms,
            }),
        })
    }

    /// Postgres CPU (ms per second, every local postgres process) and commits per second in
    /// the database over `span`.
    async fn idle_cost(&self, span: Duration) -> anyhow::Result<(f64, f64)> {
        let Some(db) = &self.db else {
            return Ok((0.0, 0.0));
        };
        let commits = || async {
            sqlx::query_scalar::<_, i64>(
                "select xact_commit from pg_stat_database where datname = current_database()",
            )
            .fetch_one(db)
            .await
        };
        // Statistics reach pg_stat_database about once a second.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let (cpu_before, commits_before) = (self.cpu().postgres, commits().await?);
        tokio::time::sleep(span).await;
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let (cpu_after, commits_after) = (self.cpu().postgres, commits().await?);
        let secs = span.as_secs_f64() + 1.1;
        // Less the bench's own two reads of pg_stat_database.
        let own = 2.0;
        Ok((
            (cpu_after.saturating_sub(cpu_before) as f64 / TICKS_PER_S * 1000.0 / secs * 10.0)
                .round()
                / 10.0,
            (((commits_after - commits_before) as f64 - own).max(0.0) / secs * 10.0).round() / 10.0,
        ))
    }
}
