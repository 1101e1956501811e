//! ojsd: an Open Job Spec (OJS) job server on PostgreSQL.
//!
//! A code tour, in reading order: the schema (`migrations/`), then [`job`] (what a job is),
//! [`store`] (every SQL statement), [`broker`] (the OJS operations), [`http`] (the wire API)
//! and [`app`] (how it is all started).

/// The composition root: build and run the server.
pub mod app;
/// The OJS operations on top of the store.
pub mod broker;
/// Settings from the environment and flags.
pub mod config;
/// The connection pool and what happens while the database is down.
pub mod db;
/// OJS durations (ISO 8601 and the short form).
pub mod duration;
/// The error type of the broker and store.
pub mod error;
/// Lifecycle events: wire form and the tail feeding SSE streams.
pub mod events;
/// The HTTP binding.
pub mod http;
/// Jobs: ids, states, stored rows, envelopes and policies.
pub mod job;
/// Client JSON kept verbatim.
pub mod json;
/// Leader election among replicas.
pub mod leadership;
/// The leader's maintenance services.
pub mod maintenance;
/// LISTEN/NOTIFY fan-out for long-polling fetches.
pub mod notifier;
/// Worker pools (fair scheduling): definition and validation.
pub mod pool;
/// Queue configuration: validation, merging and resolution of its layers.
pub mod queue_config;
/// Fetch-order policy: routing, strategies, the stride dispatcher, starvation (pure).
pub mod scheduling;
/// All SQL, grouped by table.
pub mod store;
/// Logging setup.
pub mod telemetry;
/// OJS timestamps.
pub mod timestamp;
/// Workers: reported state, server directives, what a worker must do.
pub mod worker;

pub use error::{Error, Result};
