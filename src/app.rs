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

use crate::db::Db;
use anyhow::Context;
use sqlx::postgres::PgConnectOptions;
use tokio::net::TcpListener;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::broker::cron::CronFirer;
use crate::broker::{Broker, Settings};
use crate::config::{self, Config};
use crate::db::{self, DbHealth, DbTarget, HotConnections};
use crate::events::EventTail;
use crate::hold::SystemHold;
use crate::http::{self, AppState, HttpSettings, Services};
use crate::leadership::Elector;
use crate::maintenance::{self, MaintenanceConfig};
use crate::scheduling::starvation::COUNT_FLUSH_INTERVAL;
use crate::wakeup::{Announcer, Notifier};

/// A built server, bound to its port, not yet serving.
pub struct Application {
    listener: TcpListener,
    db: Db,
    target: Arc<DbTarget>,
    /// Where the notification listener connects (a session of its own); `None` behind a
    /// transaction-mode pooler without `OJS_LISTEN_DATABASE_URL`: the server polls instead.
    listen_pool: Option<sqlx::PgPool>,
    /// How often a server without a listener looks for what a notification would have said.
    poll_interval: Duration,
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
/// Through a transaction-mode pooler they go over `OJS_LISTEN_DATABASE_URL` (their lock needs
/// a session of its own).
pub async fn migrate(config: &Config) -> anyhow::Result<ojsd_migrate::Report> {
    let Some(target) = config.database.session_target()? else {
        anyhow::bail!(
            "cannot migrate through a transaction-mode pooler: set OJS_LISTEN_DATABASE_URL, or run \
             `ojsd migrate` with a direct DATABASE_URL"
        );
    };
    let options = find_database(&target).await?;
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
        let instance_id = config.server.resolved_instance_id();
        let trace_settings = crate::telemetry::traces::TraceSettings::from_variables(
            &config.telemetry.otel,
            &config.server.service_name,
            &instance_id,
        )?;
        if !config.database.skip_migrations {
            migrate(config).await?;
        }
        let traces = crate::telemetry::traces::JobTracer::new(&trace_settings)?;
        let health = DbHealth::default();
        let (db, target) = connect(config, &instance_id, &health).await?;
        prepare_database(config, &db).await?;
        // Install the metrics recorder before anything records.
        crate::telemetry::metrics();
        crate::telemetry::leader_changed(false);
        let notifier = Notifier::new(&instance_id);
        let announcer = Announcer::new(notifier.clone());
        let shutdown = CancellationToken::new();
        let hold = stored_hold(&notifier, &db).await?;
        let broker = Broker::new(
            db.clone(),
            HotConnections::new(db.clone(), health.clone()),
            broker_settings(config),
            announcer.clone(),
            hold.clone(),
        );
        seal_secrets(config, &broker).await?;
        let elector = Elector::new(
            db.clone(),
            instance_id.clone(),
            config.maintenance.leader(),
            notifier.clone(),
            health.clone(),
        );
        let services = config
            .maintenance
            .services(&config.retention, config.dispatch.heartbeat_timeout());
        let context =
            maintenance::Context::new(db.clone(), &config.server.service_name, &instance_id)
                .with_hold(hold);
        let events = EventTail::new(
            db.clone(),
            health.clone(),
            config.server.event_poll_interval,
        );
        let state = AppState::new(
            broker,
            http_settings(config, &instance_id),
            Services {
                events: events.clone(),
                health: health.clone(),
                role: elector.subscribe(),
                gate: auth_gate(config, &db).await?,
                traces,
            },
            shutdown.clone(),
        );
        let listener = TcpListener::bind(config.server.listen_addr)
            .await
            .with_context(|| format!("cannot listen on {}", config.server.listen_addr))?;
        let listen_pool = listen_pool(config, &db).await?;
        Ok(Application {
            listener,
            db,
            target,
            listen_pool,
            poll_interval: config.dispatch.fetch_poll_interval,
            state,
            notifier,
            announcer,
            health,
            events,
            elector: config
                .maintenance
                .enabled
                .then_some((elector, services, context)),
            shutdown,
            shutdown_timeout: config.server.shutdown_timeout,
            limits: http::server::Limits {
                idle_timeout: config.server.http_idle_timeout,
                max_connections: config.server.max_connections,
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
        mut self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(
            addr = %self.listener.local_addr()?,
            instance_id = %self.state.settings().instance_id,
            worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
            "ojsd listening"
        );
        let mut background = self.spawn_background();
        let Application {
            listener,
            db,
            state,
            shutdown,
            shutdown_timeout,
            limits,
            ..
        } = self;
        let serve = tokio::spawn(serve(
            listener,
            state.clone(),
            limits,
            shutdown.clone(),
            stop,
        ));
        let mut serve = std::pin::pin!(serve);
        // Until the server ends, or a background task does (which stops the server).
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
            None => finish_in_flight(&mut serve, shutdown_timeout).await,
        };
        stop_background(&shutdown, background, &db, &state).await;
        served
            .context("server task failed")?
            .context("server failed")?;
        if let Some(failure) = failure {
            anyhow::bail!("stopped because {failure}");
        }
        tracing::info!("ojsd stopped");
        Ok(())
    }

    /// Starts the process's background tasks, and the leader's when this replica may lead.
    fn spawn_background(&mut self) -> Background {
        let (db, shutdown, broker) = (&self.db, &self.shutdown, self.state.broker());
        let mut background = Background::default();
        // Subscribed before the listener starts, so nothing it hears is missed.
        let releaser = crate::broker::rate_limits::run_releaser(
            db.clone(),
            self.notifier.subscribe(),
            shutdown.clone(),
        );
        match self.listen_pool.clone() {
            Some(pool) => background.spawn(
                "notification listener",
                (self.notifier.clone()).listen(pool, self.health.clone(), shutdown.clone()),
            ),
            None => background.spawn(
                "notification poller",
                (self.notifier.clone()).poll(self.poll_interval, shutdown.clone()),
            ),
        }
        background.spawn(
            "announcer",
            self.announcer.clone().run(db.clone(), shutdown.clone()),
        );
        background.spawn(
            "database prober",
            (self.health.clone()).probe(self.target.clone(), shutdown.clone()),
        );
        background.spawn("event tail", self.events.clone().run(shutdown.clone()));
        background.spawn(
            "key ring",
            (self.state.gate().ring.clone()).run(db.clone(), shutdown.clone()),
        );
        background.spawn("metrics upkeep", metrics_upkeep(shutdown.clone()));
        background.spawn(
            "maintenance mode",
            broker.hold().clone().run(db.clone(), shutdown.clone()),
        );
        background.spawn("rate-limit releaser", releaser);
        background.spawn(
            "dispatch count flusher",
            flush_dispatch_counts(broker.clone(), shutdown.clone()),
        );
        if let Some((elector, services, context)) = self.elector.take() {
            let cron = {
                let (broker, context) = (broker.clone(), context.clone());
                maintenance::extra(move || CronFirer::new(broker.clone(), context.clone()))
            };
            let webhooks = {
                let broker = broker.clone();
                maintenance::extra(move || crate::broker::webhooks::WebhookDeliverer::new(&broker))
            };
            background.spawn(
                "maintenance supervisor",
                maintenance::supervise(
                    context,
                    services,
                    vec![cron, webhooks],
                    self.health.clone(),
                    elector.subscribe(),
                    shutdown.clone(),
                ),
            );
            background.spawn("leader elector", elector.run(shutdown.clone()));
        }
        background
    }
}

/// Serves `listener` until `stop` resolves or `shutdown` is cancelled (a background task
/// failed); then readiness turns 503 and no new request is taken.
async fn serve(
    listener: TcpListener,
    state: AppState,
    limits: http::server::Limits,
    shutdown: CancellationToken,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let router = http::router(state.clone());
    let on_stop = async move {
        tokio::select! {
            () = stop => tracing::info!("shutting down: finishing in-flight requests"),
            () = shutdown.cancelled() => {}
        }
        state.stop_accepting();
        shutdown.cancel();
    };
    http::server::serve(listener, router, limits, on_stop).await;
    Ok(())
}

/// Waits up to `timeout` for the requests in flight, then closes them.
async fn finish_in_flight(
    serve: &mut std::pin::Pin<&mut tokio::task::JoinHandle<anyhow::Result<()>>>,
    timeout: Duration,
) -> Result<anyhow::Result<()>, JoinError> {
    match tokio::time::timeout(timeout, &mut *serve).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(
                timeout_secs = timeout.as_secs(),
                "in-flight requests did not finish in time; closing them"
            );
            serve.abort();
            Ok(Ok(()))
        }
    }
}

/// Ends the background tasks (the leader resigns on its way out), closes the pool and sends
/// the last job spans.
async fn stop_background(
    shutdown: &CancellationToken,
    mut background: Background,
    db: &Db,
    state: &AppState,
) {
    shutdown.cancel();
    while let Some((name, ended)) = background.next_exit().await {
        if let Err(e) = ended {
            tracing::warn!(task = name, error = %e, "background task failed while stopping");
        }
    }
    db.close().await;
    // The exporter's own thread; a bounded wait.
    let traces = state.traces().clone();
    let _ = tokio::task::spawn_blocking(move || traces.shutdown(Duration::from_secs(5))).await;
}

/// A pool on the database `config` names, its connections set up for the server: events
/// written by API requests name this replica as their source; no JIT (the statements are
/// short and their plans cheap: a compile of tens of ms would only ever cost time); every
/// statement planned once, generically (the hot statements' custom plans cost more to make
/// than to run, and their SQL is written so that the generic plan is the right one); and no
/// statement or forgotten transaction may hold locks, or pin the MVCC horizon that vacuum
/// needs, for long (migrations connect without these).
async fn connect(
    config: &Config,
    instance_id: &str,
    health: &DbHealth,
) -> anyhow::Result<(Db, Arc<DbTarget>)> {
    let database = &config.database;
    let settings = [
        (
            "ojs.source",
            format!("ojs://{}/api/{instance_id}", config.server.service_name),
        ),
        ("jit", "off".to_owned()),
        ("plan_cache_mode", "force_generic_plan".to_owned()),
        (
            "statement_timeout",
            format!("{}s", database.statement_timeout.as_secs()),
        ),
        (
            "idle_in_transaction_session_timeout",
            format!("{}s", database.idle_in_transaction_timeout.as_secs()),
        ),
    ];
    // Directly, the settings are the session's (startup parameters). A transaction-mode
    // pooler keeps no session (and PgBouncer refuses those parameters): each transaction sets
    // them for itself, and no statement is kept prepared on a connection.
    let pooled = database.pooled();
    let target = database.target()?.map(|options| {
        if pooled {
            options.statement_cache_capacity(0)
        } else {
            options.options(settings.clone())
        }
    });
    find_database(&target).await?;
    let target = Arc::new(target);
    let pool = db::connect_pool(&target, &database.pool(), health)
        .await
        .context("cannot connect to PostgreSQL")?;
    let db = if pooled {
        let settings: Vec<(&str, String)> = settings.into_iter().collect();
        Db::pooled(pool, &settings)
    } else {
        Db::direct(pool)
    };
    Ok((db, target))
}

/// Where the notification listener connects: the server's own pool when it reaches Postgres
/// directly; a pool of its own on `OJS_LISTEN_DATABASE_URL` when that is set (a session behind
/// a transaction-mode pooler, or any direct route to the primary); none behind a
/// transaction-mode pooler without it (LISTEN needs a session: the server polls).
async fn listen_pool(config: &Config, db: &Db) -> anyhow::Result<Option<sqlx::PgPool>> {
    let database = &config.database;
    if database.listen_url.is_none() {
        return Ok((!database.pooled()).then(|| db.pool().clone()));
    }
    let Some(target) = database.session_target()? else {
        return Ok(None);
    };
    let options = find_database(&target).await?;
    Ok(Some(
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .min_connections(0)
            .connect_lazy_with(options),
    ))
}

/// What the database needs before this replica serves: the next days' partitions of
/// `ojs_job_done` (ACKs find one even before a leader's pruner runs), and this process's
/// enqueue settings for `ojs_enqueue()` (SQL).
async fn prepare_database(config: &Config, db: &Db) -> anyhow::Result<()> {
    crate::store::job::ensure_done_partitions(
        db,
        chrono::Utc::now(),
        crate::maintenance::DONE_DAYS_AHEAD,
    )
    .await
    .context("cannot prepare the partitions of ojs_job_done")?;
    crate::store::setting::publish(
        db,
        &crate::store::setting::EnqueueSettings {
            limits: broker_settings(config).limits,
            strict_queues: config.jobs.strict_queues,
            max_envelope_bytes: config.jobs.max_envelope_bytes,
            max_batch_jobs: config.jobs.max_batch_size,
        },
    )
    .await
    .context("cannot write the enqueue settings to ojs_setting")
}

/// Maintenance mode as stored: a replica restarted during it starts held.
async fn stored_hold(notifier: &Notifier, db: &Db) -> anyhow::Result<SystemHold> {
    let hold = SystemHold::new(notifier.waiters().clone());
    hold.learned(
        crate::store::hold::read(db)
            .await
            .context("cannot read maintenance mode (ojs_system_hold)")?,
    );
    Ok(hold)
}

/// Seals the webhook secrets under the current `OJS_SECRET_KEY` (those sealed under a previous
/// key, after a rotation).
async fn seal_secrets(config: &Config, broker: &Broker) -> anyhow::Result<()> {
    if let Some(keys) = config.auth.secret_keyring()? {
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
    Ok(())
}

/// The HTTP layer's settings from the server's.
fn http_settings(config: &Config, instance_id: &str) -> HttpSettings {
    let jobs = &config.jobs;
    HttpSettings {
        max_envelope_bytes: jobs.max_envelope_bytes,
        // Room for whitespace around a maximal envelope.
        max_request_bytes: jobs.max_envelope_bytes * 2,
        max_batch_bytes: jobs.max_batch_bytes,
        max_batch_jobs: jobs.max_batch_size,
        max_fetch_count: config::MAX_FETCH_COUNT,
        max_wait: config::MAX_FETCH_WAIT,
        heartbeat_interval_secs: u32::try_from(config.dispatch.heartbeat_interval.as_secs())
            .unwrap_or(u32::MAX),
        request_timeout: config.server.request_timeout,
        body_idle_timeout: config.server.http_idle_timeout,
        test_hooks: config.server.test_hooks,
        shutdown_timeout: config.server.shutdown_timeout,
        dead_letter_retention: config.retention.discarded,
        instance_id: instance_id.to_owned(),
        plain_json: config.server.response_content_type == config::ResponseContentType::Json,
        admin_ui_dir: config.server.admin_ui_dir.clone(),
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
    let (jobs, dispatch) = (&config.jobs, &config.dispatch);
    Settings {
        limits: jobs.limits(config.hyphenated_types()),
        default_visibility_timeout_ms: crate::wire::duration::millis(
            jobs.default_visibility_timeout,
        ),
        fetch_poll_interval: dispatch.fetch_poll_interval,
        heartbeat_timeout: dispatch.heartbeat_timeout(),
        test_hooks: config.server.test_hooks,
        fetch_strategy: dispatch.fetch_strategy,
        queue_weights: dispatch.queue_weights.clone(),
        strict_queues: jobs.strict_queues,
        keep_completed: config.retention.keeps_completed(),
        schema_validation: jobs.schema_validation,
        // The keyring was checked by `Config::validate` at start.
        webhooks: (config.webhooks)
            .delivery(config.auth.secret_keyring().ok().flatten().map(Arc::new)),
    }
}

/// The API keys and the rule for them. Beyond loopback, `OJS_AUTH=keys` needs at least one
/// active key to start: a server reachable from the network must not answer anyone.
async fn auth_gate(config: &Config, db: &crate::db::Db) -> anyhow::Result<crate::auth::Gate> {
    use crate::auth::{AuthMode, Gate, KeyRing};
    let ring = KeyRing::default();
    ring.reload(db).await.context("cannot read the API keys")?;
    let addr = config.server.listen_addr;
    let public = !addr.ip().is_loopback();
    match config.auth.mode {
        AuthMode::Keys if public && !ring.has_active() => anyhow::bail!(
            "refusing to listen on {addr} without an API key: create one with `ojsd keys create --role admin`, listen on a loopback address, or set OJS_AUTH=disabled"
        ),
        AuthMode::Disabled if public => tracing::warn!(
            addr = %addr,
            "OJS_AUTH=disabled: every endpoint answers anyone who can reach this address"
        ),
        _ => {}
    }
    Ok(Gate {
        ring,
        mode: config.auth.mode,
        public,
        protect_metrics: config.auth.metrics_auth,
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
