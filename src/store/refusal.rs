//! How the database refuses a write, decoded in one place: the custom SQLSTATEs the enqueue
//! statement raises (`OJ001`–`OJ004`, from the SQL functions `ojs_queue_refused` and
//! `ojs_queue_full`; `OJ005` from `ojs_tenant_admit`; `migrations/README.md` lists them) and the named constraints whose
//! violation is the client's doing. The broker turns each [`Refusal`] into its error.

use crate::queue_config::OverflowPolicy;

/// Why the database refused a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The queue is draining (SQLSTATE OJ001).
    Draining { queue: String },
    /// The queue does not exist and strict queues are on (SQLSTATE OJ002).
    UnknownQueue { queue: String },
    /// The enqueue would pass the queue's bound (SQLSTATE OJ003).
    Full { queue: String, overflow: Overflow },
    /// The jobs were prepared with an outdated queue configuration (SQLSTATE OJ004).
    StaleConfig,
    /// A job id is taken (`ojs_job_pkey`).
    DuplicateJobId,
    /// A tenant's enqueue rate or depth would be passed (SQLSTATE OJ005, from
    /// `ojs_tenant_admit`).
    TenantLimit(TenantLimit),
}

/// A tenant limit an enqueue would pass (the JSON `detail` of OJ005).
pub use crate::tenant::LimitExceeded as TenantLimit;

/// A bound an enqueue would pass, as the database saw it (the JSON `detail` of OJ003).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Overflow {
    /// Unfinished jobs before the enqueue.
    pub depth: i64,
    pub bound: Option<i64>,
    /// Their total size before the enqueue.
    pub bytes: i64,
    pub bound_bytes: Option<i64>,
    #[serde(deserialize_with = "overflow_policy")]
    pub policy: OverflowPolicy,
}

fn overflow_policy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<OverflowPolicy, D::Error> {
    let name = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
    OverflowPolicy::parse(&name)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown overflow policy {name:?}")))
}

/// The refusal `e` stands for, if it is one.
pub fn refusal(e: &sqlx::Error) -> Option<Refusal> {
    let db = e.as_database_error()?;
    if db.constraint() == Some("ojs_job_pkey") {
        return Some(Refusal::DuplicateJobId);
    }
    let queue = || db.message().to_owned();
    Some(match db.code().as_deref()? {
        "OJ001" => Refusal::Draining { queue: queue() },
        "OJ002" => Refusal::UnknownQueue { queue: queue() },
        "OJ003" => {
            let overflow = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.detail())
                .and_then(|d| serde_json::from_str::<Overflow>(d).ok())?;
            Refusal::Full {
                queue: queue(),
                overflow,
            }
        }
        "OJ004" => Refusal::StaleConfig,
        "OJ005" => Refusal::TenantLimit(
            db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.detail())
                .and_then(|d| serde_json::from_str::<TenantLimit>(d).ok())?,
        ),
        _ => return None,
    })
}
