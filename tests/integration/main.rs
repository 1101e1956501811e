//! Integration tests: the real server over HTTP, on a real PostgreSQL, one database per test.

mod admin_api;
mod batching;
mod claim_floor;
mod concurrency;
mod db_connections;
mod dead_letter;
mod enqueue_statements;
mod event_batches;
mod events_api;
mod fair_scheduling;
mod handoff;
mod harness;
mod jobs_api;
mod leadership;
mod maintenance;
mod priority;
mod processes;
mod queue_config;
mod queues;
mod replicas;
mod schema;
mod system;
mod unique;
mod validation;
mod worker_protocol;
mod workers_api;
