//! What a PUSH is given and answers: the [`PushContext`] of its request, each job's
//! [`PushOutcome`], and the back-pressure ([`Pressure`]) of the bounded queues it wrote to.

use crate::job::Job;
use std::time::Duration;

/// How a pushed job came to be in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// A new job was created.
    Created,
    /// A unique `ignore` policy returned the existing job; nothing was created.
    Deduplicated,
    /// A unique `replace_except_schedule` policy updated the existing scheduled job in place.
    ReplacedInPlace,
}

/// One job of a PUSH response.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub job: Job,
    pub outcome: PushOutcome,
}

/// Who is pushing, and how long they may wait for room.
#[derive(Debug, Clone, Default)]
pub struct PushContext {
    /// The producer identity (`OJS-Producer` header), checked against a queue's `producers`.
    pub producer: Option<String>,
    /// How long an enqueue into a full `block` queue may wait (`OJS-Block-Timeout`).
    pub block_timeout: Duration,
}

/// What a PUSH wrote, and the pressure on the fullest bounded queue it wrote to when that is
/// at or past the queue's `warning_threshold`.
#[derive(Debug, Clone)]
pub struct PushResult {
    pub jobs: Vec<Pushed>,
    pub pressure: Option<Pressure>,
    /// What the schema check found in jobs of `warn`-mode schemas (`jobs[i]: ` first in a
    /// batch).
    pub warnings: Vec<String>,
}

/// A bounded queue's depth against its bound.
#[derive(Debug, Clone)]
pub struct Pressure {
    pub queue: String,
    pub depth: i64,
    pub bound: i64,
}

impl Pressure {
    /// Depth / bound.
    pub fn ratio(&self) -> f64 {
        self.depth as f64 / self.bound.max(1) as f64
    }
}
