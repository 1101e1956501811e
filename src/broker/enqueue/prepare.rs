//! A PUSH's jobs made ready to write: their queue's configuration applied (retry policy,
//! priority, retention), the schema registry consulted, tenants admitted, and a refusal by the
//! enqueue statement turned into the error a client reads.

use super::outcome::{PushContext, PushOutcome, Pushed};
use crate::broker::configs::Snapshot;
use crate::error::{Error, Result};
use crate::job::Job;
use crate::job::envelope::{Limits, NewJob, Rejection};
use crate::job::retry::RetryPolicy;
use crate::job::schema::{Check, SchemaSet};
use crate::store;
use crate::store::refusal::{Refusal, refusal};

/// Every row as newly created.
pub(in crate::broker) fn created(rows: Vec<Job>) -> Vec<Pushed> {
    rows.into_iter()
        .map(|job| Pushed {
            job,
            outcome: PushOutcome::Created,
        })
        .collect()
}

/// Whether a write failed because the jobs were prepared with an outdated configuration.
pub(super) fn is_stale_config(e: &Error) -> bool {
    matches!(e, Error::Database(db) if refusal(db) == Some(Refusal::StaleConfig))
}

/// The error of an enqueue the database refused because of a queue (see
/// [`store::refusal`]); `e` itself when the refusal is not the client's to hear about.
pub(super) fn refusal_error(
    refused: Refusal,
    jobs: &[NewJob],
    batch: bool,
    e: sqlx::Error,
) -> Error {
    match refused {
        Refusal::Draining { queue } => Error::QueueDraining {
            queue,
            operation: "enqueue into",
        },
        Refusal::UnknownQueue { queue } => Error::UnknownQueue(queue),
        Refusal::Full { queue, overflow: o } => Error::QueueFull {
            index: batch
                .then(|| jobs.iter().position(|j| j.queue == queue))
                .flatten(),
            depth: o.depth,
            bound: o.bound.unwrap_or(o.depth),
            bound_bytes: o
                .bound_bytes
                .filter(|max| o.bound.is_none_or(|b| o.depth < b) && o.bytes <= *max),
            policy: o.policy,
            queue,
        },
        Refusal::TenantLimit(limit) => Error::TenantLimitExceeded(limit),
        Refusal::StaleConfig | Refusal::DuplicateJobId => Error::Database(e),
    }
}

/// The tenants of `jobs` an enqueue must be admitted by (their limits on enqueues, as the
/// jobs were prepared), each once, with how many of the jobs are theirs.
pub(super) fn limited_tenants(jobs: &[NewJob]) -> (Vec<String>, Vec<i32>) {
    let mut tenants: Vec<String> = Vec::new();
    let mut counts: Vec<i32> = Vec::new();
    for job in jobs {
        if !job.tenant_limits.is_some_and(|l| l.limits_enqueue()) {
            continue;
        }
        let Some(tenant) = job.tenant_id() else {
            continue;
        };
        match tenants.iter().position(|t| *t == tenant) {
            Some(i) => counts[i] += 1,
            None => {
                tenants.push(tenant);
                counts.push(1);
            }
        }
    }
    (tenants, counts)
}

/// Admits `jobs`, just inserted in `tx`, by their tenants' enqueue rate and depth (nothing to
/// do, and no statement, when none of them has such limits).
pub(in crate::broker) async fn admit_tenants(
    tx: &mut sqlx::PgConnection,
    jobs: &[NewJob],
) -> Result<(), sqlx::Error> {
    let (tenants, counts) = limited_tenants(jobs);
    if tenants.is_empty() {
        return Ok(());
    }
    store::tenant::admit(tx, &tenants, &counts).await
}

/// Applies each job's queue configuration: its access rules (`allowed_job_types`,
/// `producers`) and, where the job sets none of its own, the queue's `default_timeout`,
/// `visibility_timeout`, `result_ttl` and `default_retry` fields (the job's retry fields win
/// one by one).
pub(super) fn prepare(
    jobs: &[NewJob],
    configs: &Snapshot,
    ctx: &PushContext,
    limits: &Limits,
) -> Result<Vec<NewJob>> {
    let batch = jobs.len() > 1;
    jobs.iter()
        .enumerate()
        .map(|(index, job)| {
            let index = batch.then_some(index);
            let config = configs.of(&job.queue);
            if !config.allows_type(&job.r#type) {
                return Err(Error::JobTypeNotAllowed {
                    queue: job.queue.clone(),
                    job_type: job.r#type.clone(),
                    index,
                });
            }
            if !config.allows_producer(ctx.producer.as_deref()) {
                return Err(Error::ProducerNotAllowed {
                    queue: job.queue.clone(),
                    producer: ctx.producer.clone(),
                    index,
                });
            }
            let mut job = job.clone();
            job.config_generation = configs.generation;
            if configs.any_tenant_limits() {
                job.tenant_limits = job
                    .tenant_id()
                    .and_then(|tenant| configs.tenant_limits(&tenant).copied());
            }
            if !configs.schemas.is_empty() {
                check_schema(&mut job, &configs.schemas, index)?;
            }
            if !job.timeout_explicit {
                job.timeout_ms = config
                    .default_timeout
                    .map_or(limits.default_timeout_ms, |s| s * 1_000);
            }
            if job.visibility_timeout_ms.is_none() {
                job.visibility_timeout_ms = config.visibility_timeout.map(|s| s * 1_000);
            }
            if let Some(ttl) = config.result_ttl {
                default_result_ttl(&mut job.extra, ttl);
            }
            if let Some(merged) = crate::queue_config::layered_retry(
                &config.default_retry,
                job.retry_input.as_deref(),
            ) {
                let raw = crate::wire::json::raw(merged);
                job.retry = RetryPolicy::parse(&raw, "$.retry").map_err(|v| Error::Rejected {
                    index,
                    rejection: Rejection::InvalidRetry(v),
                })?;
            }
            Ok(job)
        })
        .collect()
}

/// Adds a queue's `result_ttl` to a job's attributes (`extra`, a compact JSON object) unless
/// the job named its own (even as `null`): the ACK and the result reads find it there, as if the job had sent
/// it, and INFO shows it.
fn default_result_ttl(extra: &mut String, ttl: i64) {
    if extra.contains("\"result_ttl\"")
        && crate::wire::json::Object::parse(extra).is_ok_and(|o| o.contains("result_ttl"))
    {
        return;
    }
    extra.pop(); // the closing brace
    if extra.len() > 1 {
        extra.push(',');
    }
    extra.push_str(&format!("\"result_ttl\":{ttl}}}"));
}

/// The schema warnings of `jobs`, each prefixed with `jobs[i]: ` in a batch.
pub(super) fn schema_warnings(jobs: &[NewJob]) -> Vec<String> {
    let batch = jobs.len() > 1;
    jobs.iter()
        .enumerate()
        .flat_map(|(i, job)| {
            job.schema_warnings.iter().map(move |w| match batch {
                true => format!("jobs[{i}]: {w}"),
                false => w.clone(),
            })
        })
        .collect()
}

/// Checks `job` against its type's registered schema: a failure in `strict` mode refuses it,
/// one in `warn` mode is noted on the job (the PUSH answers with it).
pub(super) fn check_schema(
    job: &mut NewJob,
    schemas: &SchemaSet,
    index: Option<usize>,
) -> Result<()> {
    let version = match job.version.as_deref() {
        Some(raw) => Some(serde_json::from_str::<serde_json::Value>(raw).map_err(|_| {
            Error::InvalidRequest {
                field: "$.version".to_owned(),
                message: "version is not valid JSON".to_owned(),
            }
        })?),
        None => None,
    };
    match schemas.check(&job.r#type, version.as_ref(), &job.args) {
        Check::Passed => Ok(()),
        Check::Warned(warnings) => {
            for w in &warnings {
                tracing::info!(job_type = %job.r#type, warning = %w, "job accepted with a schema warning");
            }
            job.schema_warnings = warnings;
            Ok(())
        }
        Check::Failed { schema, violations } => Err(Error::Rejected {
            index,
            rejection: Rejection::SchemaMismatch { schema, violations },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::default_result_ttl;

    #[test]
    fn a_queues_result_ttl_joins_the_attributes_unless_the_job_named_one() {
        let cases = [
            ("{}", r#"{"result_ttl":60}"#),
            (r#"{"x":1}"#, r#"{"x":1,"result_ttl":60}"#),
            (r#"{"result_ttl":0}"#, r#"{"result_ttl":0}"#),
            (
                r#"{"x":"result_ttl"}"#,
                r#"{"x":"result_ttl","result_ttl":60}"#,
            ),
            (
                r#"{"x":{"result_ttl":1}}"#,
                r#"{"x":{"result_ttl":1},"result_ttl":60}"#,
            ),
        ];
        for (extra, expected) in cases {
            let mut extra = extra.to_owned();
            default_result_ttl(&mut extra, 60);
            assert_eq!(extra, expected);
        }
    }
}
