//! The error type of the broker operations (the store returns `sqlx::Error`, which the broker
//! turns into one of these).

use crate::job::envelope::Rejection;
use crate::job::{JobId, JobState};

/// Why a broker operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is invalid (not an enqueue envelope; see [`Error::Rejected`]).
    #[error("{message}")]
    InvalidRequest {
        /// JSON path of the offending field.
        field: String,
        message: String,
    },
    /// An enqueue envelope was refused; `index` is its position in a batch.
    #[error("job envelope rejected")]
    Rejected {
        index: Option<usize>,
        rejection: Rejection,
    },
    /// The job does not exist (or no longer exists).
    #[error("job {0} not found")]
    JobNotFound(JobId),
    /// The job has no checkpoint.
    #[error("job {0} has no checkpoint")]
    CheckpointNotFound(JobId),
    /// The step has been recorded before: the first record stands (it is here).
    #[error("step {} of job {} is already recorded", .0.name, .0.job_id)]
    StepRecorded(Box<crate::job::durable::Step>),
    /// The caller holds an attempt of the job that is no longer its current one.
    #[error("job {job_id} is at attempt {current}, not {attempt}")]
    StaleAttempt {
        job_id: JobId,
        attempt: i32,
        current: i32,
    },
    /// The job is not in the dead-letter queue (or does not exist).
    #[error("job {0} is not in the dead-letter queue")]
    NotInDeadLetter(JobId),
    /// The queue is unknown.
    #[error("queue {0} not found")]
    QueueNotFound(String),
    /// The cron entry is unknown.
    #[error("cron entry {0} not found")]
    CronNotFound(String),
    /// A request acting as a tenant registers an entry under a name another tenant's entry
    /// (or one of no tenant) has.
    #[error("cron entry name {0} is taken")]
    CronNameTaken(String),
    /// No schema is registered for the job type (at that version, when one is named).
    #[error("no schema {job_type}@{version:?}")]
    SchemaNotFound {
        job_type: String,
        version: Option<String>,
    },
    /// The job type already has a schema of that version.
    #[error("schema {job_type}@{version} already registered")]
    SchemaExists { job_type: String, version: String },
    /// The webhook subscription is unknown.
    #[error("webhook subscription {0} not found")]
    WebhookNotFound(uuid::Uuid),
    /// The worker pool is unknown.
    #[error("pool {0} not found")]
    PoolNotFound(String),
    /// An enqueue names a queue that does not exist while strict queues are on.
    #[error("queue {0} does not exist")]
    UnknownQueue(String),
    /// The queue already exists (explicit creation).
    #[error("queue {0} already exists")]
    QueueExists(String),
    /// Deletion with `reject` of a queue that still has unfinished jobs.
    #[error("queue {queue} has {non_terminal} unfinished jobs")]
    QueueNotEmpty { queue: String, non_terminal: i64 },
    /// The queue is being deleted and refuses the operation.
    #[error("queue {queue} is draining")]
    QueueDraining {
        queue: String,
        operation: &'static str,
    },
    /// The tenant has no configuration (limits) to change or delete.
    #[error("tenant {0} is not configured")]
    TenantNotConfigured(String),
    /// An enqueue would take a tenant past its enqueue rate or depth (429).
    #[error("tenant {} is at its {}", .0.tenant_id, .0.limit)]
    TenantLimitExceeded(crate::tenant::LimitExceeded),
    /// A secret must be sealed and the server has no key (`OJS_SECRET_KEY`).
    #[error("no OJS_SECRET_KEY to seal secrets with")]
    SecretKeyMissing,
    /// The worker is unknown.
    #[error("worker {0} not found")]
    WorkerNotFound(String),
    /// A request acting as a tenant names a worker id that is not its own (another tenant's,
    /// or one no tenant owns): it may neither use nor take it.
    #[error("worker id {0} is taken")]
    WorkerIdTaken(String),
    /// An operation for stale workers only, on a worker that is not stale.
    #[error("worker {worker_id} is {state}, not stale")]
    WorkerNotStale {
        worker_id: String,
        state: crate::worker::EffectiveState,
    },
    /// The job's state does not allow the operation.
    #[error("cannot {operation} job {job_id} in state '{current}'")]
    InvalidTransition {
        job_id: JobId,
        /// The operation, as a verb ("acknowledge", "fail", "cancel", ...).
        operation: &'static str,
        current: JobState,
        allowed: &'static [JobState],
    },
    /// The job's reservation belongs to another worker.
    #[error("job {job_id} is reserved by another worker")]
    NotOwner { job_id: JobId, owner: String },
    /// A heartbeat for one job whose reservation this worker no longer holds.
    #[error("worker no longer holds job {job_id}")]
    ReservationLost {
        job_id: JobId,
        current: JobState,
        owner: Option<String>,
    },
    /// A client-supplied job id is already taken (or repeated within a batch).
    #[error("job id {job_id} already exists")]
    DuplicateId { job_id: JobId, index: Option<usize> },
    /// A unique policy found a duplicate and its `on_conflict` refuses the new job.
    #[error("a duplicate of this job exists: {existing}")]
    DuplicateUnique {
        existing: JobId,
        existing_state: JobState,
        unique_key: String,
        index: Option<usize>,
    },
    /// A queue configuration body is invalid.
    #[error("invalid queue configuration")]
    InvalidConfig(crate::queue_config::ConfigError),
    /// The queue is at its bound and its overflow policy refuses the enqueue.
    #[error("queue {queue} is full")]
    QueueFull {
        queue: String,
        /// Unfinished jobs in the queue.
        depth: i64,
        /// Its `max_size` (or, when the byte bound was hit, the jobs it holds).
        bound: i64,
        /// The byte bound when that is the one hit.
        bound_bytes: Option<i64>,
        policy: crate::queue_config::OverflowPolicy,
        index: Option<usize>,
    },
    /// The queue's `allowed_job_types` do not match the job's type.
    #[error("job type {job_type} is not allowed in queue {queue}")]
    JobTypeNotAllowed {
        queue: String,
        job_type: String,
        index: Option<usize>,
    },
    /// The queue's `producers` do not include the request's producer.
    #[error("producer is not allowed to enqueue to queue {queue}")]
    ProducerNotAllowed {
        queue: String,
        producer: Option<String>,
        index: Option<usize>,
    },
    /// A workflow definition is invalid: every problem, with its path.
    #[error("invalid workflow definition")]
    InvalidWorkflow(Vec<crate::wire::violation::Violation>),
    /// No workflow has this id.
    #[error("workflow {0} not found")]
    WorkflowNotFound(uuid::Uuid),
    /// No job or override has named this rate-limit key.
    #[error("no rate-limit key {0}")]
    RateKeyNotFound(String),
    /// The workflow has ended and cannot be cancelled.
    #[error("workflow {id} is already {state}")]
    WorkflowEnded { id: uuid::Uuid, state: String },
    /// The job waits for its workflow, which releases it; it cannot be activated by hand.
    #[error("job {job_id} is held by workflow {workflow}")]
    HeldByWorkflow { job_id: JobId, workflow: uuid::Uuid },
    /// The request asks for something this server does not offer.
    #[error("{0}")]
    Unsupported(String),
    /// The database failed or could not be reached.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Result alias of the broker.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// A single request's refused body (no batch index).
impl From<Rejection> for Error {
    fn from(rejection: Rejection) -> Error {
        Error::Rejected {
            index: None,
            rejection,
        }
    }
}

impl From<crate::workflow::Invalid> for Error {
    fn from(invalid: crate::workflow::Invalid) -> Error {
        match invalid {
            crate::workflow::Invalid::Definition(violations) => Error::InvalidWorkflow(violations),
            crate::workflow::Invalid::Item(rejection) => Error::from(rejection),
        }
    }
}

impl Error {
    /// A field-level request error.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }
}
