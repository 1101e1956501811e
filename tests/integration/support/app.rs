//! The real server in this process, on its own database and port, and what tests need around
//! it: replicas on the same database, SQL against its database, its maintenance services.

use std::sync::OnceLock;
use std::time::Duration;

use ojsd::app::Application;
use ojsd::config::Config;
use serde_json::Value;
use sqlx::{ConnectOptions, Connection, PgPool};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::client::Client;
use super::db::{TestDb, server_options};

/// Another server on a [`TestApp`]'s database, in the same process (see
/// [`TestApp::spawn_replica`]).
pub struct InProcessReplica {
    pub base: String,
    stop: oneshot::Sender<()>,
    server: JoinHandle<anyhow::Result<()>>,
}

impl InProcessReplica {
    /// Stops the replica gracefully and asserts it ended cleanly.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.unwrap().unwrap();
    }
}

/// Parks a long poll on `queue` at `api`, enqueues a job there from SQL on `pool` (whose
/// wake-up only the notification listener hears), and asserts the poll answers with it
/// within `within`.
pub async fn assert_sql_enqueue_wakes_a_long_poll(
    api: &Client,
    pool: &sqlx::PgPool,
    queue: &str,
    within: Duration,
) {
    let waiting =
        api.spawn_fetch(&serde_json::json!({"queues": [queue], "count": 1, "wait_ms": 20000}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id: String = sqlx::query_scalar(
        "select ojs_enqueue(json_build_object('type', 'a.b', 'args', '[]'::json, 'queue', $1::text)) -> 'job' ->> 'id'",
    )
    .bind(queue)
    .fetch_one(pool)
    .await
    .unwrap();
    let fetched = tokio::time::timeout(within, waiting)
        .await
        .expect("the long poll was not woken")
        .unwrap();
    assert_eq!(fetched["jobs"][0]["id"], id.as_str());
}

/// A server built from `config` and running (for tests that bring their own database, such as
/// a private cluster), with a client of it.
pub struct Served {
    pub api: Client,
    stop: oneshot::Sender<()>,
    server: JoinHandle<anyhow::Result<()>>,
}

impl Served {
    /// Builds the server from `config` (whose `listen_addr` should be port 0) and runs it.
    pub async fn start(config: Config) -> Served {
        let server = Application::build(&config).await.expect("build the server");
        let api = Client::new(format!("http://{}", server.local_addr().unwrap()));
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(server.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        Served { api, stop, server }
    }

    /// Stops the server gracefully and asserts it ended cleanly.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.unwrap().unwrap();
    }
}

/// The real server, on its own database and port. It derefs to its [`Client`], so tests
/// call the API on it directly (`app.post(...)`, `app.ack(...)`).
pub struct TestApp {
    pub db: TestDb,
    pub api: Client,
    /// The server's parked long polls.
    waiters: std::sync::Arc<ojsd::wakeup::waiters::Waiters>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<anyhow::Result<()>>>,
}

impl std::ops::Deref for TestApp {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.api
    }
}

/// The secret key of test servers (`OJS_SECRET_KEY`).
pub const TEST_SECRET_KEY: &str =
    "6f6a73642074657374206b65793a206e6f7420666f722070726f64756374696f";

pub fn test_secret_key() -> ojsd::config::Redacted {
    ojsd::config::Redacted(TEST_SECRET_KEY.to_owned())
}

impl TestApp {
    /// A server with test hooks on and default settings, except that it never runs the
    /// maintenance services (tests drive them with `run_once`; see [`TestApp::spawn_with`]).
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    /// A server whose configuration `configure` adjusts.
    pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> TestApp {
        Self::spawn_on(TestDb::new().await, configure).await
    }

    /// A server on `db`, already migrated (a test that prepared the database itself, e.g. one
    /// migrated from an earlier release), with the settings `configure` adjusts.
    pub async fn spawn_on(db: TestDb, configure: impl FnOnce(&mut Config)) -> TestApp {
        init_test_logging();
        let mut config = {
            let mut c = Config::default();
            c.database.url = db.url();
            c.server.listen_addr = "127.0.0.1:0".parse().unwrap();
            c.database.skip_migrations = true;
            c.server.test_hooks = true;
            c.database.max_connections = 10;
            c.database.min_connections = 1;
            c.maintenance.enabled = false;
            c.auth.secret_key = Some(test_secret_key());
            c
        };
        configure(&mut config);
        let app = Application::build(&config).await.expect("build the server");
        let addr = app.local_addr().expect("bound address");
        let waiters = app.waiters();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        TestApp {
            db,
            api: Client::new(format!("http://{addr}")),
            waiters,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// A second server in this process on the same database (another replica), with the
    /// settings `configure` adjusts (no migrations, no maintenance, 6 connections by default).
    pub async fn spawn_replica(&self, configure: impl FnOnce(&mut Config)) -> InProcessReplica {
        let mut config = {
            let mut c = Config::default();
            c.database.url = self.db.url();
            c.server.listen_addr = "127.0.0.1:0".parse().unwrap();
            c.database.skip_migrations = true;
            c.database.max_connections = 6;
            c.database.min_connections = 1;
            c.maintenance.enabled = false;
            c.auth.secret_key = Some(test_secret_key());
            c
        };
        configure(&mut config);
        let app = Application::build(&config)
            .await
            .expect("build the replica");
        let base = format!("http://{}", app.local_addr().expect("bound address"));
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        InProcessReplica { base, stop, server }
    }

    /// How many FETCHes are parked on `queue` now.
    pub fn parked_on(&self, queue: &str) -> usize {
        self.waiters.parked_on(queue)
    }

    /// Waits (up to 10 s) until at least `n` FETCHes are parked on `queue`.
    pub async fn until_parked(&self, queue: &str, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.parked_on(queue) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{n} FETCH(es) parked on {queue} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.server.take() {
            Some(server) => server.await?,
            None => Ok(()),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// Number of rows in `ojs_job_all`.
    pub async fn job_count(&self) -> i64 {
        sqlx::query_scalar("select count(*) from ojs_job_all")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    /// Runs SQL on the server's `postgres` database (for statements about the test database
    /// itself, which cannot run while connected to it).
    pub async fn admin_sql(&self, statement: &str) {
        let mut conn = server_options()
            .connect()
            .await
            .expect("connect to the test server");
        sqlx::raw_sql(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        let _ = conn.close().await;
    }

    /// Waits (up to 2 s) until `n` servers listen for notifications on this database (their
    /// listeners registered in `ojs_listener`, where announcers look for them).
    pub async fn wait_for_listeners(&self, n: i64) {
        for _ in 0..100 {
            let listening: i64 = sqlx::query_scalar(
                "select count(*) from ojs_listener where seen_at > now() - interval '10 seconds'",
            )
            .fetch_one(self.pool())
            .await
            .unwrap();
            if listening >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs SQL against the test database (to arrange a situation, e.g. move time).
    pub async fn sql(&self, statement: &str) {
        sqlx::raw_sql(statement)
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn init_test_logging() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            ojsd::telemetry::init(ojsd::telemetry::LogFormat::Text);
        }
    });
}

/// A minimal valid job of `job_type` on `queue`.
pub fn job(job_type: &str, queue: &str) -> Value {
    serde_json::json!({"type": job_type, "args": [], "queue": queue})
}

/// Waits for concurrently started requests and returns their statuses.
pub async fn statuses(tasks: Vec<JoinHandle<u16>>) -> Vec<u16> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("request task"));
    }
    out
}

/// How many of `statuses` equal `status`.
pub fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

impl TestApp {
    /// What the maintenance services need, on this test's database.
    pub fn maintenance(&self) -> ojsd::maintenance::Context {
        ojsd::maintenance::Context::new(self.pool().clone().into(), "ojs-server", "test-instance")
    }

    /// Runs the reaper once as if `offset` had passed: every claim whose reservation (or
    /// timeout) ended by then is taken back, exactly as the leader's reaper takes it back.
    pub async fn reap_after(&self, offset: Duration) -> ojsd::maintenance::Pass {
        use ojsd::maintenance::{Reaper, ReaperConfig, Service};
        let reaper = Reaper::new(
            self.maintenance(),
            ReaperConfig {
                interval: Duration::from_secs(1),
                batch_size: 100,
            },
        );
        let now = self.db_now_plus(offset).await;
        reaper.run_once(Some(now)).await.expect("a reaper pass")
    }

    /// A cron firer on this test's database, as the leader runs it: tests call its
    /// `run_once(Some(now))` to fire what is due at `now`. Each call makes another firer (as
    /// another replica would be).
    pub fn cron_firer(&self) -> ojsd::broker::cron::CronFirer {
        self.cron_firer_with(ojsd::hold::SystemHold::default())
    }

    /// [`TestApp::cron_firer`] seeing maintenance mode as `hold` says.
    pub fn cron_firer_with(&self, hold: ojsd::hold::SystemHold) -> ojsd::broker::cron::CronFirer {
        let config = Config::default();
        let health = ojsd::db::DbHealth::default();
        let broker = ojsd::broker::Broker::new(
            self.pool().clone().into(),
            ojsd::db::HotConnections::new(self.pool().clone().into(), health),
            ojsd::app::broker_settings(&config),
            ojsd::wakeup::Announcer::new(ojsd::wakeup::Notifier::new("test-cron")),
            hold.clone(),
        );
        ojsd::broker::cron::CronFirer::new(broker, self.maintenance().with_hold(hold))
    }

    /// A webhook deliverer on this test's database, as the leader runs it (tests call its
    /// `run_once(None)`), reaching private addresses when `allow_private`.
    pub fn webhook_deliverer(
        &self,
        allow_private: bool,
    ) -> ojsd::broker::webhooks::WebhookDeliverer {
        self.webhook_deliverer_with(|c| c.webhooks.allow_private = allow_private)
    }

    /// [`TestApp::webhook_deliverer`] with the settings `configure` adjusts (its secret keys).
    pub fn webhook_deliverer_with(
        &self,
        configure: impl FnOnce(&mut Config),
    ) -> ojsd::broker::webhooks::WebhookDeliverer {
        let mut config = {
            let mut c = Config::default();
            c.webhooks.timeout = std::time::Duration::from_millis(2_000);
            c.auth.secret_key = Some(test_secret_key());
            c
        };
        configure(&mut config);
        let health = ojsd::db::DbHealth::default();
        let broker = ojsd::broker::Broker::new(
            self.pool().clone().into(),
            ojsd::db::HotConnections::new(self.pool().clone().into(), health),
            ojsd::app::broker_settings(&config),
            ojsd::wakeup::Announcer::new(ojsd::wakeup::Notifier::new("test-webhooks")),
            ojsd::hold::SystemHold::default(),
        );
        ojsd::broker::webhooks::WebhookDeliverer::new(&broker)
    }

    /// The database clock plus `offset` (to run a service "later" without sleeping).
    pub async fn db_now_plus(&self, offset: Duration) -> chrono::DateTime<chrono::Utc> {
        let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select now()")
            .fetch_one(self.pool())
            .await
            .unwrap();
        now + chrono::Duration::from_std(offset).unwrap()
    }

    /// Event types written so far, in delivery order (all transactions have committed).
    pub async fn event_types(&self) -> Vec<String> {
        sqlx::query_scalar("select type from ojs_event_log order by xid, seq")
            .fetch_all(self.pool())
            .await
            .unwrap()
    }

    /// Event types written about one job, in delivery order.
    pub async fn job_event_types(&self, id: &str) -> Vec<String> {
        sqlx::query_scalar(
            "select type from ojs_event_log where job_id = $1::uuid order by xid, seq",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await
        .unwrap()
    }
}
