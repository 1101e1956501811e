//! ojsd: an Open Job Spec (OJS) job server on PostgreSQL.
//!
//! A code tour, in reading order: the schema (`migrations/`, with its `README.md`), then the
//! domain — [`job`] (what a job is and where it goes next), [`worker`], [`pool`],
//! [`queue_config`] and [`scheduling`] (fetch-order policy, pure) — then [`store`] (every SQL
//! statement), [`broker`] (the OJS operations), [`http`] (the wire API), [`maintenance`] (the
//! leader's services) and [`app`] (how it is all started and supervised).
//!
//! Dependencies point one way: `http` → `broker` → `store` → the domain; `maintenance` uses
//! `store` and the domain, never the broker.

pub mod app;
pub mod auth;
pub mod broker;
pub mod claim_floor;
pub mod config;
pub mod db;
pub mod duration;
pub mod error;
pub mod events;
pub mod http;
pub mod job;
pub mod json;
pub mod leadership;
pub mod maintenance;
pub mod notifier;
pub mod pool;
pub mod queue_config;
pub mod scheduling;
pub mod store;
pub mod telemetry;
pub mod timestamp;
pub mod waiters;
pub mod worker;

pub use error::{Error, Result};
