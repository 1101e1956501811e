//! Claims without dispatch limits, grouped: the FETCHes of a queue that claim at once share one
//! statement ([`store::job::claim_shared`]), each getting its own jobs. The [`SharedClaim`]s
//! wait in a [`GroupCommit`](super::group::GroupCommit) whose flusher is [`flush_claims`].

use std::sync::Arc;
use std::time::Duration;

use crate::db::HotConnections;
use crate::job::Job;
use crate::job::dispatch::DispatchPlace;
use crate::store;
use crate::telemetry;
use crate::wakeup::ClaimFloors;

/// One FETCH's claim from one queue, waiting to share a statement (see
/// [`store::job::claim_shared`]).
#[derive(Debug)]
pub(super) struct SharedClaim {
    pub(super) queue: String,
    pub(super) limit: i32,
    pub(super) worker_id: Option<String>,
    pub(super) visibility_timeout_ms: Option<i64>,
    pub(super) pool: Option<String>,
}

/// Most FETCHes whose claims share one statement.
pub(super) const CLAIM_GROUP_MAX: usize = 64;

/// How long a claim flusher waits for the claim statement in flight before running beside it.
pub(super) const CLAIM_PATIENCE: Duration = Duration::from_millis(20);

/// Claims `claims` with one statement per queue; each claim gets its own jobs. When a shared
/// statement fails, each of its claims is tried alone, so each gets the outcome it would have
/// had by itself.
pub(super) async fn flush_claims(
    hot: HotConnections,
    floors: Arc<ClaimFloors>,
    default_visibility_timeout_ms: i64,
    claims: Vec<SharedClaim>,
) -> Vec<Result<Vec<Job>, sqlx::Error>> {
    fn share(c: &SharedClaim) -> store::job::ClaimShare<'_> {
        store::job::ClaimShare {
            limit: c.limit,
            worker_id: c.worker_id.as_deref(),
            visibility_timeout_ms: c.visibility_timeout_ms,
            pool: c.pool.as_deref(),
        }
    }
    let mut out: Vec<Result<Vec<Job>, sqlx::Error>> =
        claims.iter().map(|_| Ok(Vec::new())).collect();
    let mut queues: Vec<&str> = claims.iter().map(|c| c.queue.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    for queue in queues {
        let members: Vec<usize> = (0..claims.len())
            .filter(|&i| claims[i].queue == queue)
            .collect();
        let shares: Vec<store::job::ClaimShare<'_>> =
            members.iter().map(|&i| share(&claims[i])).collect();
        let floor = floors.begin(queue);
        let from = floor.from;
        telemetry::claim_statements(1);
        let claimed = match hot.acquire().await {
            Ok(mut conn) => {
                let claimed = store::job::claim_shared(
                    &mut *conn,
                    queue,
                    &shares,
                    default_visibility_timeout_ms,
                    from,
                )
                .await;
                conn.settle(claimed).await
            }
            Err(e) => Err(e),
        };
        match &claimed {
            Ok(jobs) => floor.took(jobs.iter().map(|(_, job)| job)),
            Err(_) => floor.failed(),
        }
        match claimed {
            Ok(jobs) => {
                for (share, job) in jobs {
                    if let Some(Ok(mine)) = members.get(share).map(|&i| &mut out[i]) {
                        mine.push(job);
                    }
                }
            }
            Err(e) if members.len() == 1 => out[members[0]] = Err(e),
            Err(_) => {
                // Alone, from the start: the failed statement reset the floor.
                for &i in &members {
                    telemetry::claim_statements(1);
                    let mut conn = match hot.acquire().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            out[i] = Err(e);
                            continue;
                        }
                    };
                    let alone = store::job::claim_shared(
                        &mut *conn,
                        queue,
                        &[share(&claims[i])],
                        default_visibility_timeout_ms,
                        DispatchPlace::START,
                    )
                    .await;
                    let alone = conn.settle(alone).await;
                    out[i] = alone.map(|jobs| jobs.into_iter().map(|(_, job)| job).collect());
                }
            }
        }
    }
    out
}
