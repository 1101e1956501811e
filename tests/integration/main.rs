//! Integration tests: the real server over HTTP, on a real PostgreSQL, one database per test.

mod concurrency;
mod harness;
mod jobs_api;
mod schema;
mod system;
mod unique;
mod validation;
mod workers_api;
