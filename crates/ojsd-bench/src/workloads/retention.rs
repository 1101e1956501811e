//! `retention`: drain throughput over a table full of retained finished jobs, and while the
//! pruner deletes them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use anyhow::bail;
use serde_json::json;

use crate::Bench;
use crate::measure::{Outcome, rate, ratio};
use sqlx::PgPool;

/// Inserts `n` completed jobs that finished 8 days ago (past the default 7-day retention), into
/// `ojs_job_done` (where the ACK puts them), with the partitions of their days made first.
pub(crate) async fn insert_finished(db: &PgPool, queue: &str, n: usize) -> anyhow::Result<()> {
    ojsd::store::job::ensure_done_partitions(db, chrono::Utc::now() - chrono::Duration::days(8), 1)
        .await?;
    let per = 100_000usize;
    for first in (0..n).step_by(per) {
        let count = per.min(n - first) as i64;
        sqlx::query(
            r#"
            insert into ojs_job_done (id, seq, type, queue, args, state, attempt, max_attempts,
                                      retry, timeout_ms, created_at, enqueued_at, started_at,
                                      completed_at, result)
            select gen_random_uuid(), g, 'bench.noop', $1, json_build_array(g), 'completed', 1, 3,
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
    sqlx::query("analyze ojs_job_done").execute(db).await?;
    Ok(())
}

impl Bench {
    /// W2 on an empty table, then with `--retained` finished jobs in it, then while those are
    /// pruned.
    pub(crate) async fn retention(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
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

        // What the server's pruner does, back to back: whole days past every cutoff dropped,
        // then the rest deleted in its default batch size.
        let pruned = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let pruner = {
            let (db, pruned, dropped, stop) =
                (db.clone(), pruned.clone(), dropped.clone(), stop.clone());
            tokio::spawn(async move {
                let cutoff = chrono::Utc::now() - chrono::Duration::days(1);
                let cutoffs = ojsd::store::job::PruneCutoffs {
                    state: ojsd::job::JobState::Completed,
                    cutoff,
                    dead_letter_cutoff: cutoff,
                    queues: Vec::new(),
                };
                let days = ojsd::store::job::drop_done_partitions(&db, cutoff, 64).await?;
                dropped.fetch_add(days.len() as u64, Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    let n = ojsd::store::job::prune_done(
                        &db,
                        &cutoffs,
                        ojsd::maintenance::PrunerConfig::default().batch_size,
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
        let dropped = dropped.load(Ordering::Relaxed);
        println!(
            "  retention: w2-batched while pruning: {during_rate:.0} jobs/s ({dropped} day partitions dropped, {pruned} rows deleted meanwhile)"
        );
        // Leave the table as we found it.
        sqlx::query("delete from ojs_job_done where queue = $1")
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
                "partitions_dropped_during_run": dropped,
            }),
        })
    }
}
