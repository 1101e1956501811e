//! The OJS operations — PUSH, INFO, CANCEL, ACTIVATE, FETCH, ACK, FAIL (NACK), BEAT, the
//! worker protocol, queues, pools, the dead-letter queue and the event log — on top of the
//! store. HTTP handlers parse and validate requests, call one operation of [`Broker`] and
//! render its result; they never reach the store themselves.
//!
//! An operation runs its statements (in one transaction when it needs several to be atomic)
//! and turns "nothing matched" into the precise reason: not found, wrong state, wrong owner.
//! [`Broker`] is the front; the hot paths each have a component with their own state:
//!
//! | file | what |
//! |---|---|
//! | `front.rs`, `settings.rs` | the [`Broker`] itself and the operations on one job; its [`Settings`] |
//! | `enqueue.rs`, `unique.rs` | PUSH: queue configuration applied, group commit, overflow policies, the unique-job planner |
//! | `fetch.rs`, `claim.rs`, `claim_group.rs` | FETCH: long polls, routing (policy in [`crate::scheduling`]), claims under dispatch limits, shared claim statements |
//! | `complete.rs` | ACK (group commit) and NACK, fenced on the claim |
//! | `cron.rs` | cron entries, and the leader's firer that enqueues their runs exactly once per occurrence |
//! | `webhooks.rs`, `webhook_sender.rs` | webhook subscriptions and the leader's deliverer; the HTTP client that sends deliveries |
//! | `admin.rs`, `dead_letter.rs`, `events.rs`, `gauges.rs`, `pools.rs`, `queues.rs`, `workers.rs` | the rest of the API, one concern each |

mod admin;
mod checkpoint;
mod claim;
mod claim_group;
mod complete;
pub mod configs;
pub mod cron;
mod dead_letter;
mod dispatch_stats;
mod durable;
mod enqueue;
mod events;
mod fetch;
mod front;
mod gauges;
mod group;
pub mod keys;
pub mod pools;
mod progress;
mod queues;
pub mod rate_limits;
mod results;
pub mod schemas;
mod settings;
mod tenants;
mod unique;
mod webhook_sender;
pub mod webhooks;
mod workers;
mod workflows;

pub use crate::store::queue::ScalingRow;
pub use crate::store::schema::SchemaRow;
pub use crate::store::tenant::{JobOwner, LimitUsage, Owned, TenantConfig, TenantRow};
pub use crate::store::webhook::{WebhookChange, WebhookRow};
pub use admin::{
    AdminQueue, AdminQueueDetail, BulkAction, BulkOutcome, RECENT_WINDOW, RateLimitUsage,
};
pub use checkpoint::Checkpoint;
pub use complete::{NackRequest, Nacked};
pub use configs::Snapshot as QueueConfigs;
pub use durable::{SignalOutcome, Signalled, WaitRequest, Waited};
pub use enqueue::{Pressure, PushContext, PushOutcome, PushResult, Pushed};
pub use fetch::FetchRequest;
pub use front::{Broker, Cancelled};
pub use gauges::SCALING_WINDOW;
pub use progress::{Progress, ProgressReport};
pub use queues::{DeleteStrategy, Deleted, Queue, QueueStats};
pub use results::{JobResult, MAX_BULK_RESULTS, Outcome as ResultOutcome, Retrieval};
pub use schemas::SchemaRegistration;
pub use settings::Settings;
pub use unique::{UniquePlan, plan_unique};
pub use webhook_sender::WebhookSettings;
pub use workers::{Registered, WorkerSummary};
pub use workflows::{WorkflowCancelled, WorkflowView};
// The store's row and filter types that are also the broker's API.
pub use crate::scheduling::{MAX_WEIGHT, Strategy, Weights, parse_weights_setting};
pub use crate::store::admin::StateCounts;
pub use crate::store::dead_letter::{DeadLetterFilter, DeadLetterStats, RetryOverride};
pub use crate::store::event::{EventFilter, EventRow, Position};
pub use crate::store::hold::HoldRow;
pub use crate::store::job::Completed;
pub use crate::store::job_list::{JobFilter, JobPage, JobSort, JobSummary};
pub use crate::store::queue::{QueueCounts, QueueState};
pub use crate::store::rate_limit::{KeyUsage as RateKeyUsage, Override as RateOverride};
pub use crate::store::step::{Durable, SignalRow, WaitRow};
pub use crate::store::worker::{HeartbeatOutcome, HeartbeatParams, WorkerRecord, WorkerReport};
pub use crate::store::workflow::{
    LineageRow, NodeRow as WorkflowNode, WorkflowCounts, WorkflowRow,
};
