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
mod stale_workers;
mod starvation;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use expirer::{Expirer, ExpirerConfig};
pub use planner_stats::{PlannerStats, PlannerStatsConfig};
pub use promoter::{Promoter, PromoterConfig};
pub use pruner::{DONE_DAYS_AHEAD, FULL_SWEEP_EVERY, Pruner, PrunerConfig};
pub use reaper::{Reaper, ReaperConfig};
pub use stale_workers::{StaleWorkers, StaleWorkersConfig};
pub use starvation::{StarvationConfig, StarvationWatch};

use crate::db::DbHealth;
use crate::hold::SystemHold;
use crate::leadership::{Role, jittered};
use crate::store;

/// A boxed future borrowing a connection (one batch of a pass).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most batches one pass of a service runs before it yields.
pub const MAX_BATCHES_PER_PASS: usize = 10;

/// Longest a pass may take. A pass is a few short batches, normally milliseconds; one that
/// hangs (a statement waiting on a lock, say) is abandoned so the service goes on, and its
/// open batch is rolled back.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Rows moved or deleted.
    pub processed: u64,
    /// The pass stopped at its batch limit with work left: run again right away.
    pub more: bool,
}

/// A maintenance service.
pub trait Service: Send + Sync + 'static {
    /// Name in logs and metrics.
    fn name(&self) -> &'static str;
    /// Pause between passes (before jitter).
    fn interval(&self) -> Duration;
    /// One pass; `now` overrides the database clock.
    fn run_once(
        &self,
        now: Option<DateTime<Utc>>,
    ) -> impl Future<Output = Result<Pass, sqlx::Error>> + Send;
    /// How long to wait after a pass that left no work: the interval with ±10 % jitter, unless
    /// the service keeps a timetable of its own.
    fn pause(&self) -> Duration {
        jittered(self.interval())
    }
}

/// A service defined outside this module (the broker's cron firer), started and stopped with
/// the others: makes the service and spawns its loop.
pub type Extra =
    std::sync::Arc<dyn Fn(&mut JoinSet<()>, &DbHealth, &CancellationToken) + Send + Sync>;

/// An [`Extra`] that runs the service `make` builds, anew at every election.
pub fn extra<S: Service>(make: impl Fn() -> S + Send + Sync + 'static) -> Extra {
    std::sync::Arc::new(move |tasks, health, stop| spawn(tasks, make(), health, stop))
}

/// What every service needs: the database and who it is (for the `source` of the events it
/// causes).
#[derive(Debug, Clone)]
pub struct Context {
    pub db: PgPool,
    /// `ojs://<service>` (the OJS service name, not the maintenance service).
    pub service_uri: String,
    pub instance_id: String,
    /// Maintenance mode (the system hold): the promoter and the cron firer pause while it is
    /// in force.
    pub hold: SystemHold,
}

impl Context {
    /// A context whose services never see maintenance mode on (see [`Context::with_hold`]).
    pub fn new(db: PgPool, service_name: &str, instance_id: &str) -> Context {
        Context {
            db,
            service_uri: format!("ojs://{service_name}"),
            instance_id: instance_id.to_owned(),
            hold: SystemHold::default(),
        }
    }

    /// The services pause what maintenance mode pauses while `hold` is in force.
    pub fn with_hold(mut self, hold: SystemHold) -> Context {
        self.hold = hold;
        self
    }

    /// One pass of bounded batches: runs `batch` in its own transaction (events naming
    /// `component` as their source) until it reports a batch that was not full, at most
    /// [`MAX_BATCHES_PER_PASS`] times. `batch` returns the rows it handled and whether the batch
    /// was full.
    pub async fn batches<F>(&self, component: &str, mut batch: F) -> Result<Pass, sqlx::Error>
    where
        F: for<'c> FnMut(&'c mut PgConnection) -> BoxFuture<'c, Result<(u64, bool), sqlx::Error>>,
    {
        let mut pass = Pass::default();
        for _ in 0..MAX_BATCHES_PER_PASS {
            let mut tx = self.begin(component).await?;
            let (handled, full) = batch(&mut tx).await?;
            tx.commit().await?;
            pass.processed += handled;
            pass.more = full;
            if !full {
                break;
            }
        }
        Ok(pass)
    }

    /// A transaction whose events name `component` as their source.
    pub async fn begin(
        &self,
        component: &str,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let mut tx = self.db.begin().await?;
        let source = format!("{}/{component}/{}", self.service_uri, self.instance_id);
        store::event::set_source(&mut *tx, &source).await?;
        Ok(tx)
    }
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
