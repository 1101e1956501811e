//! Figures read from the database for `/metrics` and the priority statistics.

use std::time::{Duration, Instant};

use super::front::Broker;
use crate::error::{Error, Result};
use crate::store;
use crate::telemetry;

/// Database-backed gauges are read at most this often, however often `/metrics` is scraped.
const GAUGE_REFRESH: Duration = Duration::from_secs(5);
/// The window [`Broker::scaling`] counts enqueues and completions over.
pub const SCALING_WINDOW: Duration = Duration::from_secs(60);

impl Broker {
    /// Reads the gauges that come from the database (available jobs by queue and priority,
    /// queue depths and bounds, workflows by state, scheduling ratios and pool utilization), unless they were read
    /// less than 5 s ago. A failed read keeps the previous values: a scrape never
    /// fails because the database is slow or down.
    pub async fn refresh_gauges(&self) {
        let mut read_at = self.gauges.read_at.lock().await;
        if read_at.is_some_and(|at| at.elapsed() < GAUGE_REFRESH) {
            return;
        }
        if let Err(e) = self.read_depth_gauges().await {
            tracing::debug!(error = %e, "cannot read the queue depth gauges");
        }
        match self.scheduling_stats().await {
            Ok(stats) => {
                let ratios: Vec<(String, f64)> = stats
                    .queues
                    .iter()
                    .filter(|q| q.dispatched > 0)
                    .map(|q| (q.queue.clone(), q.ratio))
                    .collect();
                let utilization: Vec<(String, f64)> = stats
                    .pools
                    .iter()
                    .filter_map(|v| Some((v.stored.pool.name.clone(), v.utilization()?)))
                    .collect();
                telemetry::scheduling(&ratios, &utilization);
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the scheduling gauges"),
        }
        *read_at = Some(Instant::now());
    }

    /// The counts behind the available-by-priority and queue-depth gauges, in one transaction
    /// whose scans use no parallel workers (they count whole backlogs; see
    /// [`store::serial_reads`]).
    async fn read_depth_gauges(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.db.begin().await?;
        store::serial_reads(&mut tx).await?;
        let available = store::queue::available_by_priority(&mut *tx, None, None).await?;
        let depth = store::queue::depth_gauges(&mut tx).await?;
        let workflows = store::workflow::counts(&mut *tx).await?;
        let rate_keys = store::rate_limit::gauges(&mut *tx).await?;
        let tenants = store::tenant::gauges(&mut *tx).await?;
        let workers = store::queue::workers(&mut tx, None).await?;
        tx.commit().await?;
        telemetry::queue_workers(&workers);
        telemetry::tenants(&tenants);
        telemetry::available_by_priority(&available);
        telemetry::queue_depth(&depth.depth, &depth.bounds);
        telemetry::queue_latency(&depth.oldest_available);
        telemetry::workflows(&workflows);
        telemetry::rate_keys(rate_keys);
        Ok(())
    }

    /// What to scale workers on, per queue, for the whole cluster (see
    /// [`store::queue::scaling`]): every queue with jobs, throughput or workers, or `queue`
    /// alone (zeros for a queue that exists but has none; `QueueNotFound` for one that does
    /// not). Throughput is counted over the last [`SCALING_WINDOW`].
    pub async fn scaling(&self, queue: Option<&str>) -> Result<Vec<store::queue::ScalingRow>> {
        let mut tx = self.db.begin().await?;
        store::serial_reads(&mut tx).await?;
        let rows = store::queue::scaling(&mut tx, queue, SCALING_WINDOW.as_secs_f64()).await?;
        tx.commit().await?;
        match queue {
            Some(name) if rows.is_empty() => {
                if !self.queue_known(name).await? {
                    return Err(Error::QueueNotFound(name.to_owned()));
                }
                Ok(vec![store::queue::ScalingRow {
                    queue: name.to_owned(),
                    ..Default::default()
                }])
            }
            _ => Ok(rows),
        }
    }

    /// Available jobs of `queue` per stored priority, most urgent first, only the priorities
    /// that have jobs; `QueueNotFound` for a queue that does not exist.
    pub async fn priority_stats(
        &self,
        queue: &str,
        tenant: Option<&str>,
    ) -> Result<Vec<(i32, i64)>> {
        let counts = store::queue::available_by_priority(&self.db, Some(queue), tenant).await?;
        if counts.is_empty() && !self.queue_known(queue).await? {
            return Err(Error::QueueNotFound(queue.to_owned()));
        }
        Ok(counts.into_iter().map(|(_, p, n)| (p, n)).collect())
    }
}
