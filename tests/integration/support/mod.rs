//! What the tests stand on, none of it a test:
//! - [`db`]: a real PostgreSQL and a fresh database per test, cloned from a migrated template;
//! - [`app`]: the real server in this process ([`TestApp`]), its replicas, SQL on its database,
//!   its maintenance services;
//! - [`client`]: the one HTTP client, which checks every exchange against the server's OpenAPI
//!   document ([`contract`]) and has helpers for the worker protocol;
//! - [`factory`]: jobs in each state, put there through the API's own transitions;
//! - [`processes`]: real `ojsd` processes and a private PostgreSQL cluster;
//! - [`pooler`]: a PgBouncer in transaction mode in front of the tests' server;
//! - the small checks several test files share (below).
//!
//! Set `TEST_LOG=1` to see the servers' logs.

pub mod app;
pub mod client;
pub mod contract;
pub mod db;
pub mod factory;
pub mod pooler;
pub mod processes;

use std::collections::HashMap;

use serde_json::Value;

pub use app::{TestApp, count, job, statuses};
pub use client::{Client, Resp, ids, spawn_fetch};
pub use db::TestDb;

/// The `data` of each event of a server-sent event stream's `text`, parsed as JSON; with
/// `event`, only the events of that name.
pub fn sse_data(text: &str, event: Option<&str>) -> Vec<Value> {
    text.split("\n\n")
        .filter(|block| event.is_none_or(|e| block.lines().any(|l| l == format!("event: {e}"))))
        .flat_map(|block| block.lines().filter_map(|l| l.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect()
}

/// Asserts that `key` got `expected` (a fraction) of the `total` counted in `counts`, within
/// `tolerance` (a fraction too).
#[track_caller]
pub fn assert_share(
    counts: &HashMap<String, usize>,
    key: &str,
    total: usize,
    expected: f64,
    tolerance: f64,
) {
    let got = counts.get(key).copied().unwrap_or(0) as f64 / total as f64;
    assert!(
        (got - expected).abs() <= tolerance,
        "{key}: share {got:.3} of {total}, expected {expected:.3} ± {tolerance}: {counts:?}"
    );
}
