//! `ojs_queue`: queues as rows — their lifecycle state, their configuration layer, and the
//! capacity counters of bounded queues:
//!
//! | file | statements |
//! |---|---|
//! | `row.rs` | a queue's row ([`ensure`], [`get`], [`list`], [`set_paused`]) and its live counts |
//! | `deletion.rs` | DELETE of a queue: discard or move its waiting jobs, drain, remove |
//! | `config.rs` | configuration layers, the generation counter, the bounds the database enforces |
//! | `capacity.rs` | capacity counters, `drop_oldest`, dispatch limits (concurrency, rate windows), depth gauges |
//! | `scaling.rs` | what to scale workers on: [`scaling`] (depths, latency, throughput, workers), [`depths`], [`workers`] |
//!
//! A queue gets its row on its first enqueue (inside the enqueue statement, see
//! [`crate::store::job::insert_many`]), when it is paused or resumed, or when it is created
//! explicitly. Jobs name their queue by text, so a queue without a row behaves as `active`.

mod capacity;
mod config;
mod deletion;
mod row;
mod scaling;

pub use capacity::{
    DepthGauges, capacity, depth_gauges, dispatch_usage, drop_oldest, rate_key, rate_usage,
    record_starts,
};
pub use config::{
    Bounds, all_layers, bump_generation, config_generation, config_layers, default_layer,
    lock_config, set_bounds, write_config,
};
pub use deletion::{
    DeletionTarget, complete_draining, discard_waiting, finish_delete, lock_for_delete,
    move_waiting,
};
pub use row::{
    QueueCounts, QueueRow, QueueState, available_by_priority, counts, delete_all, ensure, get,
    list, queue_known, set_paused,
};
pub use scaling::{ScalingRow, depths, scaling, workers};
