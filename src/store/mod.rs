//! Every SQL statement of the server, grouped by table.
//!
//! Each function is one statement and takes any executor, so the caller decides whether it runs
//! alone or inside a transaction. Time-dependent statements use the database clock (`now()`):
//! replicas never compare their own clocks. Maintenance statements take an optional `now` that
//! overrides it, so tests can move time without sleeping.

pub mod dead_letter;
pub mod event;
pub mod job;
pub mod leader;
pub mod worker;

/// NOTIFY channel carrying the name of a queue that has new `available` jobs.
///
/// Statements notify once per queue per statement (Postgres also folds identical notifications
/// within a transaction), never once per job.
pub const JOB_AVAILABLE_CHANNEL: &str = "ojs_job_available";
