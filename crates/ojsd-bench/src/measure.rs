//! What the load tool measures besides throughput: latency percentiles, CPU time of the
//! postgres and ojsd processes (from `/proc`), peak resident memory, WAL and dead tuples.

use std::time::Duration;

use serde_json::Value;

use crate::Bench;

/// Latency samples.
#[derive(Default)]
pub(crate) struct Latencies(pub(crate) Vec<Duration>);

impl Latencies {
    pub(crate) fn percentile(&mut self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.sort_unstable();
        let rank = ((p / 100.0) * (self.0.len() - 1) as f64).round() as usize;
        ms(self.0[rank])
    }

    pub(crate) fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// What one workload measured.
pub(crate) struct Outcome {
    pub(crate) jobs: usize,
    pub(crate) elapsed: Duration,
    /// Latencies of the workload's characteristic request (or enqueue → fetch for w3).
    pub(crate) latencies: Latencies,
    pub(crate) extra: Value,
}

/// CPU time spent so far, in clock ticks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cpu {
    pub(crate) postgres: u64,
    pub(crate) ojsd: u64,
}

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux port).
pub(crate) const TICKS_PER_S: f64 = 100.0;

/// User + system CPU ticks of one process, with those of its reaped children.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime, stime, cutime, cstime are fields 14-17 of the line, 12-15 after the name.
    (11..15).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

/// The PIDs of the running processes named `name`.
pub(crate) fn pids_named(name: &str) -> Vec<u32> {
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

pub(crate) struct DbSnapshot {
    pub(crate) wal_lsn: i64,
    pub(crate) dead_job: i64,
    pub(crate) dead_event: i64,
}

/// Waits for every task and merges their latencies.
pub(crate) async fn joined(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Latencies>>>,
) -> anyhow::Result<Latencies> {
    let mut all = Latencies::default();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

pub(crate) fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    ((a / b) * 1000.0).round() / 1000.0
}

/// Resident memory of `pid`, in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The one running process named `ojsd`, if exactly one runs on this host.
pub(crate) fn find_ojsd() -> Option<u32> {
    match pids_named("ojsd")[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

impl Bench {
    /// CPU spent by every local postgres process and by the ojsd process.
    pub(crate) fn cpu(&self) -> Cpu {
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
    pub(crate) fn mark_timed(&self) {
        *self.timed_from.lock().expect("cpu mark") = Some(self.cpu());
    }

    /// Marks the start of the drain (or other part) whose WAL the running workload reports:
    /// WAL per job then counts from here instead of from the workload's start (the enqueue
    /// before a drain, a vacuum before graphile-worker's).
    pub(crate) async fn mark_wal(&self) -> anyhow::Result<()> {
        let Some(db) = &self.db else { return Ok(()) };
        let lsn: i64 =
            sqlx::query_scalar("select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8")
                .fetch_one(db)
                .await?;
        *self.wal_from.lock().expect("wal mark") = Some(lsn);
        Ok(())
    }

    /// WAL position and dead tuples (after the statistics of finished transactions are in).
    pub(crate) async fn db_snapshot(&self) -> anyhow::Result<Option<DbSnapshot>> {
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

pub(crate) fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}
