//! Maintenance services: everything in OJS that is driven by time or by workers disappearing.
//!
//! | service | does | default interval |
//! |---|---|---|
//! | [`Promoter`] | due `scheduled` and `retryable` jobs → `available` (wakes long polls) | 250 ms |
//! | [`Reaper`] | active jobs past their reservation, execution timeout or total timeout → reclaimed | 500 ms |
//! | [`Expirer`] | waiting jobs past `expires_at`, `enqueue_ttl` or `total_timeout` → discarded | 500 ms |
//! | [`StaleWorkers`] | workers silent for the heartbeat timeout → stale, their jobs released | 2 s |
//! | [`Pruner`] | finished jobs, old events and long-stale workers → deleted | 60 s |
//! | [`StarvationWatch`] | `scheduling.queue_starved` for starved pool queues; old dispatch counts → deleted | 1 s |
//! | [`PlannerStats`] | `ANALYZE ojs_job` when its size doubled or halved (plans follow the table's size) | 2 s |
//!
//! Only the elected leader runs them ([`crate::leadership`]); [`supervise`] starts them when
//! this replica is elected and stops them when it is not. Each service is a struct with its own
//! config and a `run_once(now)` that does one pass in bounded batches (at most
//! [`MAX_BATCHES_PER_PASS`] statements of `batch_size` rows, each its own short transaction, so
//! no pass holds locks for long or starves FETCH). Its loop runs a pass, then sleeps its
//! interval with ±10 % jitter — or only yields when the pass stopped at the batch limit with work
//! left. Tests call `run_once(Some(now))` directly to move time without sleeping.
//!
//! Correctness never depends on a service running on time: FETCH promotes due jobs of the
//! queues it reads, never hands out an expired job, and ACK/NACK are fenced on the claim.

mod expirer;
mod planner_stats;
mod promoter;
mod pruner;
mod reaper;
mod service;
mod stale_workers;
mod starvation;

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use expirer::{Expirer, ExpirerConfig};
pub use planner_stats::{PlannerStats, PlannerStatsConfig};
pub use promoter::{Promoter, PromoterConfig};
pub use pruner::{DONE_DAYS_AHEAD, FULL_SWEEP_EVERY, Pruner, PrunerConfig};
pub use reaper::{Reaper, ReaperConfig};
pub use service::{BoxFuture, Context, MAX_BATCHES_PER_PASS, PASS_TIMEOUT, Pass, Service};
pub use stale_workers::{StaleWorkers, StaleWorkersConfig};
pub use starvation::{StarvationConfig, StarvationWatch};

use crate::db::DbHealth;
use crate::leadership::{Role, jittered};

/// A service defined outside this module (the broker's cron firer), started and stopped with
/// the others: makes the service and spawns its loop.
pub type Extra =
    std::sync::Arc<dyn Fn(&mut JoinSet<()>, &DbHealth, &CancellationToken) + Send + Sync>;

/// An [`Extra`] that runs the service `make` builds, anew at every election.
pub fn extra<S: Service>(make: impl Fn() -> S + Send + Sync + 'static) -> Extra {
    std::sync::Arc::new(move |tasks, health, stop| spawn(tasks, make(), health, stop))
}

/// Settings of all services.
#[derive(Debug, Clone)]
pub struct MaintenanceConfig {
    pub promoter: PromoterConfig,
    pub reaper: ReaperConfig,
    pub expirer: ExpirerConfig,
    pub stale_workers: StaleWorkersConfig,
    pub pruner: PrunerConfig,
    pub starvation: StarvationConfig,
    pub planner_stats: PlannerStatsConfig,
}

/// Runs the services (and `extras`) while this replica leads, until `shutdown`.
pub async fn supervise(
    context: Context,
    config: MaintenanceConfig,
    extras: Vec<Extra>,
    health: DbHealth,
    mut role: watch::Receiver<Role>,
    shutdown: CancellationToken,
) {
    loop {
        // Wait to be elected.
        let term = loop {
            if let Role::Leader { term } = *role.borrow_and_update() {
                break term;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = role.changed() => if changed.is_err() { return },
            }
        };
        tracing::info!(term, "starting maintenance services");
        let services = shutdown.child_token();
        let mut tasks = JoinSet::new();
        spawn(
            &mut tasks,
            Promoter::new(context.clone(), config.promoter.clone()),
            &health,
            &services,
        );
        spawn(
            &mut tasks,
            Reaper::new(context.clone(), config.reaper.clone()),
            &health,
            &services,
        );
        spawn(
            &mut tasks,
            Expirer::new(context.clone(), config.expirer.clone()),
            &health,
            &services,
        );
        spawn(
            &mut tasks,
            StaleWorkers::new(context.clone(), config.stale_workers.clone()),
            &health,
            &services,
        );
        spawn(
            &mut tasks,
            Pruner::new(context.clone(), config.pruner.clone()),
            &health,
            &services,
        );
        spawn(
            &mut tasks,
            StarvationWatch::new(context.clone(), config.starvation.clone()),
            &health,
            &services,
        );
        spawn(
            &mut tasks,
            PlannerStats::new(context.clone(), config.planner_stats.clone()),
            &health,
            &services,
        );
        for start in &extras {
            start(&mut tasks, &health, &services);
        }
        // Lead until the role changes (or we shut down).
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = role.changed() => {
                    if changed.is_err() || !role.borrow_and_update().is_leader() {
                        break;
                    }
                }
            }
        }
        services.cancel();
        while tasks.join_next().await.is_some() {}
        tracing::info!(term, "maintenance services stopped");
    }
}

fn spawn<S: Service>(
    tasks: &mut JoinSet<()>,
    service: S,
    health: &DbHealth,
    stop: &CancellationToken,
) {
    tasks.spawn(run_loop(service, health.clone(), stop.clone()));
}

/// A service's loop: pass, pause, until `stop`. Each pass runs in a `maintenance` span naming
/// the service and is abandoned (its open transaction rolled back) after [`PASS_TIMEOUT`].
async fn run_loop<S: Service>(service: S, health: DbHealth, stop: CancellationToken) {
    let name = service.name();
    loop {
        let pause = if health.is_down() {
            service.interval()
        } else {
            let started = std::time::Instant::now();
            let pass = tokio::time::timeout(PASS_TIMEOUT, service.run_once(None))
                .instrument(tracing::info_span!("maintenance", service = name));
            // A pass whose database went away is abandoned at once: on a server that froze
            // (its kernel still acknowledging), its statement would hold a pool connection
            // until PASS_TIMEOUT, and a few such passes starve the requests of connections
            // once the database is back or another host took over.
            let result = tokio::select! {
                () = stop.cancelled() => return,
                r = pass => r.map_err(|_elapsed| "timed out"),
                () = health.went_down() => Err("database went away"),
            };
            // `Err(Err(why))`: the pass was abandoned.
            let result = match result {
                Ok(pass) => pass.map_err(Ok),
                Err(why) => Err(Err(why)),
            };
            crate::telemetry::maintenance_pass(
                name,
                started.elapsed(),
                result.as_ref().ok().map(|pass| pass.processed),
            );
            match result {
                Ok(pass) if pass.more => Duration::ZERO,
                Ok(_) => service.pause(),
                Err(Ok(e)) => {
                    health.report(&e);
                    tracing::warn!(service = name, error = %e, "maintenance pass failed");
                    jittered(service.interval())
                }
                Err(Err(why)) => {
                    tracing::warn!(
                        service = name,
                        timeout_secs = PASS_TIMEOUT.as_secs(),
                        "maintenance pass abandoned: {why}"
                    );
                    jittered(service.interval())
                }
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        if pause.is_zero() {
            tokio::task::yield_now().await;
        }
    }
}
