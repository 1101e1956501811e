//! The composition root: database, migrations, notifier, broker, leadership, maintenance, event
//! tail and HTTP server, started and stopped together.
//!
//! The background tasks are supervised: each has a name, and one that ends before shutdown
//! (returns or panics) is logged with its name and stops the whole server gracefully, which
//! then exits with an error. A replica whose elector or event tail died would otherwise keep
//! serving without leading or streaming, and nobody would notice.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use tokio::net::TcpListener;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::broker::cron::CronFirer;
use crate::broker::{Broker, Settings};
use crate::config::{self, Config};
use crate::db::{self, DbHealth, DbTarget, HotConnections, PoolSettings};
use crate::events::EventTail;
use crate::hold::SystemHold;
use crate::http::{self, AppState, HttpSettings, Services};
use crate::job::envelope::Limits;
use crate::leadership::{Elector, LeaderConfig};
use crate::maintenance::{
    self, ExpirerConfig, MaintenanceConfig, PromoterConfig, PrunerConfig, ReaperConfig,
    StaleWorkersConfig,
};
use crate::scheduling::starvation::COUNT_FLUSH_INTERVAL;
use crate::wakeup::{Announcer, Notifier};

/// A built server, bound to its port, not yet serving.
pub struct Application {
    listener: TcpListener,
    db: PgPool,
    target: Arc<DbTarget>,
    state: AppState,
    notifier: Notifier,
    announcer: Announcer,
    health: DbHealth,
    events: EventTail,
    elector: Option<(Elector, MaintenanceConfig, maintenance::Context)>,
    shutdown: CancellationToken,
    shutdown_timeout: Duration,
    limits: http::server::Limits,
}

/// Creates the database if needed and applies pending migrations (under an advisory lock, so
/// replicas starting together are safe).
pub async fn migrate(config: &Config) -> anyhow::Result<ojsd_migrate::Report> {
    let options = find_database(&config.database_target()?).await?;
    if ojsd_migrate::ensure_database(&options)
        .await
        .context("cannot reach PostgreSQL to create the database")?
    {
        tracing::info!(
            database = options.get_database().unwrap_or_default(),
            "created database"
        );
    }
    let report = ojsd_migrate::run_with(&options)
        .await
        .context("applying migrations failed")?;
    for name in &report.applied {
        tracing::info!(migration = %name, "applied migration");
    }
    Ok(report)
}

/// How long finding the database at start may take, per host.
const FIND_TIMEOUT: Duration = Duration::from_secs(5);

/// The options of the host of `target` to use (the one that takes writes, unless the URL
/// accepts any), or an error naming what every host answered.
pub async fn find_database(target: &DbTarget) -> anyhow::Result<PgConnectOptions> {
    match target.find(FIND_TIMEOUT).await {
        Ok((options, _)) => {
            if target.hosts().len() > 1 {
                let host = db::target::describe(&options);
                if target.requires_writes() {
                    tracing::info!(%host, "using the database host that takes writes");
                } else {
                    tracing::info!(%host, "using the first database host that answered (target_session_attrs=any)");
                }
            }
            Ok(options)
        }
        Err(why) if target.hosts().len() > 1 => {
            anyhow::bail!("no database host to use: {why}")
        }
        Err(why) => anyhow::bail!("cannot use the database at {why}"),
    }
}

impl Application {
    /// Connects, migrates (unless disabled) and binds the listener.
    pub async fn build(config: &Config) -> anyhow::Result<Application> {
        install_tls();
        config.validate()?;
        let instance_id = config.resolved_instance_id();
        let trace_settings = crate::telemetry::traces::TraceSettings::from_variables(
            &config.otel,
            &config.service_name,
            &instance_id,
        )?;
        if !config.skip_migrations {
            migrate(config).await?;
        }
        let traces = crate::telemetry::traces::JobTracer::new(&trace_settings)?;
        let health = DbHealth::default();
        // Events written by API requests name this replica as their source. The statements are
        // short and their plans cheap: a JIT compile (tens of ms) would only ever cost time.
        // Every statement is prepared once per connection and planned once, generically: the
        // hot statements' custom plans cost more to make than to run, and their SQL is written
        // so that the generic plan is the right one (literal state predicates that match the
        // partial indexes, parameters only where any value takes the same path).
        let target = config.database_target()?.map(|options| {
            options.options([
                (
                    "ojs.source",
                    format!("ojs://{}/api/{instance_id}", config.service_name),
                ),
                ("jit", "off".to_owned()),
                ("plan_cache_mode", "force_generic_plan".to_owned()),
                // No statement or forgotten transaction may hold locks, or pin the MVCC horizon
                // that vacuum needs, for long. (Migrations connect without these.)
                (
                    "statement_timeout",
                    format!("{}s", config.db_statement_timeout_secs),
                ),
                (
                    "idle_in_transaction_session_timeout",
                    format!("{}s", config.db_idle_in_transaction_timeout_secs),
                ),
            ])
        });
        find_database(&target).await?;
        let target = Arc::new(target);
        let db = db::connect_pool(
            &target,
            &PoolSettings {
                max_connections: config.db_max_connections,
                min_connections: config.db_min_connections,
                acquire_timeout: Duration::from_millis(config.db_acquire_timeout_ms),
            },
            &health,
        )
        .await
        .context("cannot connect to PostgreSQL")?;
        // Completed jobs go to the day's partition of ojs_job_done: every replica makes sure
        // the next days have one, so ACKs find one even before a leader's pruner runs.
        crate::store::job::ensure_done_partitions(
            &db,
            chrono::Utc::now(),
            crate::maintenance::DONE_DAYS_AHEAD,
        )
        .await
        .context("cannot prepare the partitions of ojs_job_done")?;
        // ojs_enqueue() (SQL) enqueues with this process's settings.
        crate::store::setting::publish(
            &db,
            &crate::store::setting::EnqueueSettings {
                limits: broker_settings(config).limits,
                strict_queues: config.strict_queues,
                max_envelope_bytes: config.max_envelope_bytes,
                max_batch_jobs: config.max_batch_size,
            },
        )
        .await
        .context("cannot write the enqueue settings to ojs_setting")?;

        // Install the metrics recorder before anything records.
        crate::telemetry::metrics();
        crate::telemetry::leader_changed(false);
        let notifier = Notifier::new(&instance_id);
        let announcer = Announcer::new(notifier.clone());
        let shutdown = CancellationToken::new();
        let heartbeat_timeout = config.heartbeat_timeout();
        // Maintenance mode as stored: a replica restarted during it starts held.
        let hold = SystemHold::new(notifier.waiters().clone());
        hold.learned(
            crate::store::hold::read(&db)
                .await
                .context("cannot read maintenance mode (ojs_system_hold)")?,
        );
        let broker = Broker::new(
            db.clone(),
            HotConnections::new(db.clone(), health.clone()),
            broker_settings(config),
            announcer.clone(),
            hold.clone(),
        );
        if let Some(keys) = config.secret_keyring()? {
            tracing::info!(
                key = keys.current_id(),
                previous = ?keys.previous_ids().collect::<Vec<_>>(),
                "secrets are sealed under OJS_SECRET_KEY"
            );
        }
        let resealed = broker
            .reseal_webhook_secrets()
            .await
            .context("cannot seal the webhook secrets under OJS_SECRET_KEY")?;
        if resealed > 0 {
            tracing::info!(
                subscriptions = resealed,
                "webhook secrets sealed under the current OJS_SECRET_KEY"
            );
        }
        let elector = Elector::new(
            db.clone(),
            instance_id.clone(),
            LeaderConfig {
                lease: Duration::from_millis(config.leader_lease_ms),
                renew_interval: Duration::from_millis(config.leader_renew_interval_ms),
                elect_interval: Duration::from_millis(config.leader_elect_interval_ms),
            },
            notifier.clone(),
            health.clone(),
        );
        let role = elector.subscribe();
        let batch = i64::from(config.maintenance_batch_size);
        let maintenance_config = MaintenanceConfig {
            promoter: PromoterConfig {
                interval: Duration::from_millis(config.promote_interval_ms),
                batch_size: batch,
            },
            reaper: ReaperConfig {
                interval: Duration::from_millis(config.reap_interval_ms),
                batch_size: batch,
            },
            expirer: ExpirerConfig {
                interval: Duration::from_millis(config.expire_interval_ms),
                batch_size: batch,
            },
            stale_workers: StaleWorkersConfig {
                interval: Duration::from_millis(config.stale_check_interval_ms),
                heartbeat_timeout,
                batch_size: batch,
            },
            pruner: PrunerConfig {
                interval: Duration::from_millis(config.prune_interval_ms),
                completed: config.retention_completed.0,
                cancelled: config.retention_cancelled.0,
                discarded: config.retention_discarded.0,
                events: config.event_retention.0,
                max_events: i64::try_from(config.event_max_count).unwrap_or(i64::MAX),
                stale_workers: config.stale_worker_retention.0,
                cron_runs: config.cron_history_retention.0,
                batch_size: batch,
            },
            starvation: maintenance::StarvationConfig::default(),
            planner_stats: maintenance::PlannerStatsConfig::default(),
        };
        let context = maintenance::Context::new(db.clone(), &config.service_name, &instance_id)
            .with_hold(hold);
        let events = EventTail::new(
            db.clone(),
            health.clone(),
            Duration::from_millis(config.event_poll_interval_ms),
        );
        let gate = auth_gate(config, &db).await?;
        let state = AppState::new(
            broker,
            HttpSettings {
                max_envelope_bytes: config.max_envelope_bytes,
                // Room for whitespace around a maximal envelope.
                max_request_bytes: config.max_envelope_bytes * 2,
                max_batch_bytes: config.max_batch_bytes,
                max_batch_jobs: config.max_batch_size,
                max_fetch_count: config::MAX_FETCH_COUNT,
                max_wait: config::MAX_FETCH_WAIT,
                heartbeat_interval_secs: config.heartbeat_interval_secs,
                request_timeout: Duration::from_secs(config.request_timeout_secs),
                body_idle_timeout: Duration::from_secs(config.http_idle_timeout_secs),
                test_hooks: config.test_hooks,
                shutdown_timeout: Duration::from_secs(config.shutdown_timeout_secs),
                dead_letter_retention: config.retention_discarded.0,
                instance_id: instance_id.clone(),
                plain_json: config.response_content_type
                    == crate::config::ResponseContentType::Json,
                admin_ui_dir: config.admin_ui_dir.clone(),
            },
            Services {
                events: events.clone(),
                health: health.clone(),
                role,
                gate: gate.clone(),
                traces,
            },
            shutdown.clone(),
        );
        let listener = TcpListener::bind(config.listen_addr)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen_addr))?;
        Ok(Application {
            listener,
            db,
            target,
            state,
            notifier,
            announcer,
            health,
            events,
            elector: config
                .maintenance
                .then_some((elector, maintenance_config, context)),
            shutdown,
            shutdown_timeout: Duration::from_secs(config.shutdown_timeout_secs),
            limits: http::server::Limits {
                idle_timeout: Duration::from_secs(config.http_idle_timeout_secs),
                max_connections: config.max_connections,
            },
        })
    }

    /// The address the server listens on (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// This replica's parked long polls (tests wait for a FETCH to park instead of sleeping).
    pub fn waiters(&self) -> Arc<crate::wakeup::waiters::Waiters> {
        self.notifier.waiters().clone()
    }

    /// Serves until `stop` resolves, then shuts down gracefully: readiness turns 503, long
    /// polls and event streams end, the leader resigns, in-flight requests get
    /// `shutdown_timeout` to finish, and the pool closes.
    pub async fn run_until_stopped(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Application {
            listener,
            db,
            target,
            state,
            notifier,
            announcer,
            health,
            events,
            elector,
            shutdown,
            shutdown_timeout,
            limits,
        } = self;
        tracing::info!(
            addr = %listener.local_addr()?,
            instance_id = %state.settings().instance_id,
            worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
            "ojsd listening"
        );
        let mut background = Background::default();
        // Subscribed before the listener starts, so nothing it hears is missed.
        let releaser = crate::broker::rate_limits::run_releaser(
            db.clone(),
            notifier.subscribe(),
            shutdown.clone(),
        );
        background.spawn(
            "notification listener",
            notifier.listen(db.clone(), health.clone(), shutdown.clone()),
        );
        background.spawn("announcer", announcer.run(db.clone(), shutdown.clone()));
        background.spawn(
            "database prober",
            health.clone().probe(target, shutdown.clone()),
        );
        background.spawn("event tail", events.run(shutdown.clone()));
        background.spawn(
            "key ring",
            state.gate().ring.clone().run(db.clone(), shutdown.clone()),
        );
        background.spawn("metrics upkeep", metrics_upkeep(shutdown.clone()));
        background.spawn(
            "maintenance mode",
            state
                .broker()
                .hold()
                .clone()
                .run(db.clone(), shutdown.clone()),
        );
        background.spawn(
            "rate-limit releaser",
            releaser,
        );
        background.spawn(
            "dispatch count flusher",
            flush_dispatch_counts(state.broker().clone(), shutdown.clone()),
        );
        if let Some((elector, config, context)) = elector {
            let role = elector.subscribe();
            let cron = {
                let broker = state.broker().clone();
                let context = context.clone();
                maintenance::extra(move || CronFirer::new(broker.clone(), context.clone()))
            };
            let webhooks = {
                let broker = state.broker().clone();
                maintenance::extra(move || crate::broker::webhooks::WebhookDeliverer::new(&broker))
            };
            background.spawn(
                "maintenance supervisor",
                maintenance::supervise(
                    context,
                    config,
                    vec![cron, webhooks],
                    health.clone(),
                    role,
                    shutdown.clone(),
                ),
            );
            background.spawn("leader elector", elector.run(shutdown.clone()));
        }

        let router = http::router(state.clone());
        let draining = shutdown.clone();
        let on_stop = {
            let state = state.clone();
            async move {
                // A stop signal, or a failure that cancelled the token (see below).
                tokio::select! {
                    () = stop => tracing::info!("shutting down: finishing in-flight requests"),
                    () = draining.cancelled() => {}
                }
                state.stop_accepting();
                draining.cancel();
            }
        };
        let serve = tokio::spawn(async move {
            http::server::serve(listener, router, limits, on_stop).await;
            anyhow::Ok(())
        });
        let mut serve = std::pin::pin!(serve);
        let mut failure = None;
        let served = tokio::select! {
            r = &mut serve => Some(r),
            () = shutdown.cancelled() => None,
            Some((name, ended)) = background.next_exit() => {
                if !shutdown.is_cancelled() {
                    let why = match ended {
                        Ok(()) => "ended".to_owned(),
                        Err(e) => format!("failed: {e}"),
                    };
                    tracing::error!(task = name, "background task {why}; shutting down");
                    failure = Some(format!("background task {name:?} {why}"));
                    shutdown.cancel();
                }
                None
            }
        };
        let served = match served {
            Some(r) => r,
            None => match tokio::time::timeout(shutdown_timeout, &mut serve).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(
                        timeout_secs = shutdown_timeout.as_secs(),
                        "in-flight requests did not finish in time; closing them"
                    );
                    serve.abort();
                    Ok(Ok(()))
                }
            },
        };
        shutdown.cancel();
        // Background tasks end on the token (the leader resigns on its way out).
        while let Some((name, ended)) = background.next_exit().await {
            if let Err(e) = ended {
                tracing::warn!(task = name, error = %e, "background task failed while stopping");
            }
        }
        db.close().await;
        // The last job spans go out (the exporter's own thread; bounded wait).
        let traces = state.traces().clone();
        let _ = tokio::task::spawn_blocking(move || traces.shutdown(Duration::from_secs(5))).await;
        served
            .context("server task failed")?
            .context("server failed")?;
        if let Some(failure) = failure {
            anyhow::bail!("stopped because {failure}");
        }
        tracing::info!("ojsd stopped");
        Ok(())
    }
}

/// Makes ring (the TLS provider sqlx uses) the process's provider for outbound HTTPS (webhook
/// deliveries, trace export); one installed earlier (by an embedding program) is kept. Every
/// process that builds an HTTP client with this build's reqwest must call it first (the load
/// tool and the tests do).
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The broker's settings from the server's.
pub fn broker_settings(config: &Config) -> Settings {
    Settings {
        limits: Limits {
            max_priority: config.max_priority,
            default_timeout_ms: (config.default_timeout_secs * 1_000) as i64,
            hyphenated_types: config.hyphenated_types(),
            priority_aging_ms: config
                .priority_aging_interval
                .map(|span| i64::try_from(span.0.as_millis()).unwrap_or(i64::MAX)),
        },
        default_visibility_timeout_ms: (config.default_visibility_timeout_secs * 1_000) as i64,
        fetch_poll_interval: Duration::from_millis(config.fetch_poll_interval_ms),
        heartbeat_timeout: config.heartbeat_timeout(),
        test_hooks: config.test_hooks,
        fetch_strategy: config.fetch_strategy,
        queue_weights: config.queue_weights.clone(),
        strict_queues: config.strict_queues,
        keep_completed: !config.retention_completed.0.is_zero(),
        schema_validation: config.schema_validation,
        webhooks: crate::broker::WebhookSettings {
            allow_private: config.webhook_allow_private,
            timeout: Duration::from_millis(config.webhook_timeout_ms),
            concurrency: usize::try_from(config.webhook_concurrency).unwrap_or(8),
            // Checked by `Config::validate` at start.
            keys: config.secret_keyring().ok().flatten().map(Arc::new),
        },
    }
}

/// The API keys and the rule for them. Beyond loopback, `OJS_AUTH=keys` needs at least one
/// active key to start: a server reachable from the network must not answer anyone.
async fn auth_gate(config: &Config, db: &sqlx::PgPool) -> anyhow::Result<crate::auth::Gate> {
    use crate::auth::{AuthMode, Gate, KeyRing};
    let ring = KeyRing::default();
    ring.reload(db).await.context("cannot read the API keys")?;
    let public = !config.listen_addr.ip().is_loopback();
    match config.auth {
        AuthMode::Keys if public && !ring.has_active() => anyhow::bail!(
            "refusing to listen on {} without an API key: create one with `ojsd keys create --role admin`, listen on a loopback address, or set OJS_AUTH=disabled",
            config.listen_addr
        ),
        AuthMode::Disabled if public => tracing::warn!(
            addr = %config.listen_addr,
            "OJS_AUTH=disabled: every endpoint answers anyone who can reach this address"
        ),
        _ => {}
    }
    Ok(Gate {
        ring,
        mode: config.auth,
        public,
        protect_metrics: config.metrics_auth,
    })
}

/// The named background tasks of the server.
#[derive(Default)]
struct Background {
    tasks: JoinSet<()>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Background {
    fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// Waits for the next task to end: its name, and whether it returned or failed (panicked
    /// or was aborted). `None` when no task is left.
    async fn next_exit(&mut self) -> Option<(&'static str, Result<(), JoinError>)> {
        let (id, ended) = match self.tasks.join_next_with_id().await? {
            Ok((id, ())) => (id, Ok(())),
            Err(e) => (e.id(), Err(e)),
        };
        Some((self.names.remove(&id).unwrap_or("unnamed"), ended))
    }
}

/// Periodically folds recorded histogram samples into the exported buckets (the Prometheus
/// recorder needs this when it is rendered by our own route rather than its own listener).
async fn metrics_upkeep(shutdown: CancellationToken) {
    let handle = crate::telemetry::metrics();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => handle.run_upkeep(),
        }
    }
}

/// Writes this process's dispatch counts (fair-scheduling statistics) to the database every
/// [`COUNT_FLUSH_INTERVAL`], and once more at shutdown.
async fn flush_dispatch_counts(broker: crate::broker::Broker, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(COUNT_FLUSH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stop = tokio::select! {
            () = shutdown.cancelled() => true,
            _ = tick.tick() => false,
        };
        if let Err(e) = broker.flush_dispatch_counts().await {
            tracing::debug!(error = %e, "cannot write dispatch counts; kept for the next try");
        }
        if stop {
            return;
        }
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled: a signal that arrives while the server is still starting (for
/// `--embedded`, after its cluster started) is kept, and ends the server as soon as it runs,
/// rather than killing the process. Must be called within the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(error = %e, "cannot listen for SIGINT and SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_background_task_that_ends_is_reported_by_name() {
        let mut background = Background::default();
        background.spawn("sleeper", tokio::time::sleep(Duration::from_secs(3600)));
        background.spawn("crasher", async { panic!("boom") });
        background.spawn("quitter", async {
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        let (name, ended) = background.next_exit().await.expect("a task ended");
        assert_eq!(name, "crasher");
        assert!(ended.expect_err("it panicked").is_panic());
        let (name, ended) = background.next_exit().await.expect("a task ended");
        assert_eq!(name, "quitter");
        assert!(ended.is_ok());
    }
}
