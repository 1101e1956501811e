//! `graphile-drain` and `graphile-latency`: graphile-worker's side of the comparison, measured
//! by this tool's own CPU, WAL and latency figures so that ojsd and graphile-worker are judged
//! by one sampler in one sitting. The Node side (`bench/graphile-worker/bench.mjs`) adds and
//! runs the jobs; this side prepares the table and marks the window.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::Bench;
use crate::measure::{Latencies, Outcome, TICKS_PER_S, cpu_ticks};

/// A running `bench.mjs` and its output lines.
struct Node {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Node {
    fn start(dir: &str, args: &[String]) -> anyhow::Result<Self> {
        let script = PathBuf::from(dir).join("bench.mjs");
        if !PathBuf::from(dir).join("node_modules").exists() {
            bail!("run `npm ci` in {dir} first (graphile-worker is installed from npm)");
        }
        let mut child = Command::new("node")
            .arg(&script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start node {}", script.display()))?;
        let stdout = child.stdout.take().context("node stdout")?;
        Ok(Self {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The next line that starts with `word`, split after it.
    async fn expect(&mut self, word: &str) -> anyhow::Result<Vec<String>> {
        loop {
            let Some(line) = self.lines.next_line().await? else {
                bail!("bench.mjs ended before printing `{word}`");
            };
            if let Some(rest) = line.strip_prefix(word) {
                return Ok(rest.split_whitespace().map(str::to_owned).collect());
            }
        }
    }

    async fn go(&mut self) -> anyhow::Result<()> {
        let stdin = self.child.stdin.as_mut().context("node stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
        Ok(())
    }

    fn cpu_ticks(&self) -> u64 {
        self.child.id().and_then(cpu_ticks).unwrap_or(0)
    }
}

impl Bench {
    /// graphile-worker's W2: `--jobs` jobs added in batches of `--batch` (timed: its W1), then,
    /// after `VACUUM ANALYZE` and `CHECKPOINT` of its job table, a pool of 24 concurrent jobs
    /// with a local queue of 500 and batched completion drains them. The window (CPU, WAL)
    /// covers the drain alone.
    pub(crate) async fn graphile_drain(self: &Arc<Self>) -> anyhow::Result<Outcome> {
        let db = self
            .db
            .as_ref()
            .context("graphile-drain needs --database-url")?;
        let args = [
            "drain".to_owned(),
            "--db".to_owned(),
            self.args.database_url.clone(),
            "--jobs".to_owned(),
            self.args.jobs.to_string(),
            "--batch".to_owned(),
            self.args.batch.to_string(),
        ];
        let mut node = Node::start(&self.args.graphile_dir, &args)?;
        let enqueued = node.expect("enqueued").await?;
        let enqueue_s: f64 = enqueued.get(1).context("enqueued line")?.parse()?;
        for statement in ["vacuum analyze graphile_worker._private_jobs", "checkpoint"] {
            sqlx::query(statement).execute(db).await?;
        }
        self.mark_wal().await?;
        self.mark_timed();
        let node_before = node.cpu_ticks();
        node.go().await?;
        let drained = node.expect("drained").await?;
        let node_ticks = node.cpu_ticks().saturating_sub(node_before);
        node.child.wait().await?;
        let jobs: usize = drained.first().context("drained line")?.parse()?;
        let seconds: f64 = drained.get(1).context("drained line")?.parse()?;
        Ok(Outcome {
            jobs,
            elapsed: Duration::from_secs_f64(seconds),
            latencies: Latencies::default(),
            extra: json!({
                "enqueue_jobs_per_s": (jobs as f64 / enqueue_s).round(),
                "node_cpu_us_per_job": (node_ticks as f64 / TICKS_PER_S * 1e6 / jobs.max(1) as f64).round(),
            }),
        })
    }

    /// graphile-worker's W3: `--rate` jobs per second for `--latency-secs`, one `add_job`
    /// each, run by a pool of `--pollers` concurrent jobs (its defaults otherwise: LISTEN for
    /// new jobs). Latency runs from just before the `add_job` to the start of the task.
    pub(crate) async fn graphile_latency(self: &Arc<Self>) -> anyhow::Result<Outcome> {
        let args = [
            "latency".to_owned(),
            "--db".to_owned(),
            self.args.database_url.clone(),
            "--rate".to_owned(),
            self.args.rate.to_string(),
            "--seconds".to_owned(),
            self.args.latency_secs.to_string(),
            "--concurrency".to_owned(),
            self.args.pollers.to_string(),
        ];
        let mut node = Node::start(&self.args.graphile_dir, &args)?;
        node.expect("ready").await?;
        self.mark_timed();
        node.go().await?;
        let started = std::time::Instant::now();
        let samples = node.expect("latency").await?;
        let elapsed = started.elapsed();
        node.child.wait().await?;
        let ms: Vec<f64> = serde_json::from_str(samples.first().context("latency line")?)?;
        Ok(Outcome {
            jobs: ms.len(),
            elapsed,
            latencies: Latencies(
                ms.iter()
                    .map(|m| Duration::from_secs_f64(m.max(0.0) / 1e3))
                    .collect(),
            ),
            extra: json!({}),
        })
    }
}
