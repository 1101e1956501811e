//! `w1-bulk` and `w1-single`: enqueue throughput, in batches and one job per request.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use crate::Bench;
use crate::measure::Outcome;

impl Bench {
    pub(crate) async fn w1_bulk(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
        let started = Instant::now();
        let latencies = self.enqueue_batches(queue, self.args.jobs).await?;
        Ok(Outcome {
            jobs: self.args.jobs,
            elapsed: started.elapsed(),
            latencies,
            extra: json!({"batch": self.args.batch, "in_flight": self.args.batch_concurrency}),
        })
    }

    pub(crate) async fn w1_single(self: &Arc<Self>, queue: &str) -> anyhow::Result<Outcome> {
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
}
