//! ojsd: an Open Job Spec (OJS) job server on PostgreSQL.
//!
//! A code tour, in reading order: the schema (`migrations/`, with its `README.md`), then the
//! domain — [`job`] (what a job is and where it goes next), [`worker`], [`queue_config`],
//! [`scheduling`] (fetch-order policy and worker pools, pure), [`cron`], [`workflow`],
//! [`rate_limit`], [`tenant`] and [`webhook`] — then [`store`] (every SQL statement),
//! [`wakeup`] (how a waiting FETCH learns of new jobs), [`broker`] (the OJS operations),
//! [`http`] (the wire API), [`maintenance`] (the leader's services) and [`app`] (how it is all
//! started and supervised).
//!
//! # Layers
//!
//! A module may import modules of its own layer and of the layers above it in this table,
//! never of a layer below, and no two files may depend on each other, directly or through
//! others. `tests/integration/architecture.rs` reads every `crate::` path of `src/` and fails
//! on an import against this table or on any circle.
//!
//! | layer | modules | what it holds |
//! |---|---|---|
//! | wire | `wire` | how values are spelled in client JSON: verbatim JSON, durations, timestamps, field violations |
//! | domain | `job` `webhook` `worker` `queue_config` `rate_limit` `scheduling` `cron` `workflow` `tenant` `error` | what a job, worker, queue, rate-limit policy, pool and cron entry are and may do, and what a job type's registered schemas accept; no I/O |
//! | store | `store` | every SQL statement, given a connection |
//! | infrastructure | `db` `telemetry` | connection pools, database health and failover, logs and metrics, the private cluster of `--embedded` |
//! | runtime | `wakeup` `events` `leadership` `auth` `hold` | per-process machinery: long-poll wake-ups, the event tail, the maintenance lease, the key ring, maintenance mode (the system hold) |
//! | services | `broker` `maintenance` | the OJS operations; the leader's timed services |
//! | http | `http` | the wire API |
//! | root | `config` `app` | settings, start-up and supervision |
//!
//! Besides:
//! - `maintenance` never imports `broker`: the leader's services use the store and the domain
//!   directly;
//! - `http` never imports `store` (handlers reach it through the broker) or `maintenance`;
//! - inside `http`, a resource (the routes of one kind of thing: `jobs`, `queues`, `cron`…) never
//!   imports another resource; what several of them share lives in the shared modules `auth`
//!   `bulk` `error` `extract` `job_listing` `middleware` `openapi` `query` `rate_key` `respond` `server` `shapes` `sse`
//!   `state` `tenancy` `unread`.
//!
//! The circle check counts a folder's `mod.rs` and its children too: a `mod.rs` that re-exports
//! or wires a child defines nothing that child uses.

pub mod app;
pub mod auth;
pub mod broker;
pub mod config;
pub mod cron;
pub mod db;
pub mod error;
pub mod events;
pub mod hold;
pub mod http;
pub mod job;
pub mod leadership;
pub mod maintenance;
pub mod queue_config;
pub mod rate_limit;
pub mod scheduling;
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod wakeup;
pub mod webhook;
pub mod wire;
pub mod worker;
pub mod workflow;

pub use error::{Error, Result};
