//! Test harness: a real PostgreSQL, a fresh database per test, and the real server on port 0.
//!
//! The server is chosen once per test process:
//! 1. `TEST_DATABASE_URL`, when set;
//! 2. else a testcontainers Postgres (16, named `ojsd-test-pg`, reused across runs) when a
//!    Docker engine answers;
//! 3. else the local server `postgres://postgres@127.0.0.1:5432/postgres`.
//!
//! Migrations run once into a template database named after the migrations' fingerprint; each
//! test clones it (`create database … template …`) and drops its clone when it ends, panics
//! included (`OJSD_KEEP_TEST_DB=1` keeps it for debugging). Set `TEST_LOG=1` to see server logs.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use crate::contract::{Contract, Exchange};
use ojsd::app::Application;
use ojsd::config::Config;
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;
use sqlx::postgres::{PgAdvisoryLock, PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgPool};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable";
const CONTAINER_NAME: &str = "ojsd-test-pg";
/// Same major version as docker-compose.yml.
const CONTAINER_TAG: &str = "16-alpine";
const DB_PREFIX: &str = "ojsd_t_";

static SERVER: OnceLock<String> = OnceLock::new();
static TEMPLATE: OnceLock<String> = OnceLock::new();

/// Runs `f` on a fresh thread with its own runtime (usable from sync and async contexts alike).
fn block_on_thread<T: Send + 'static>(
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>> + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("test runtime")
            .block_on(f())
    })
    .join()
    .expect("harness helper thread panicked")
}

/// Connection options of the chosen server (database `postgres`).
fn server_options() -> PgConnectOptions {
    let url = SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
            return url;
        }
        if docker_answers() {
            match block_on_thread(|| Box::pin(start_container())) {
                Ok(url) => return url,
                Err(e) => eprintln!("testcontainers failed ({e}); using the local server"),
            }
        }
        LOCAL_SERVER.to_owned()
    });
    PgConnectOptions::from_str(url).expect("test database URL is valid")
}

/// Whether a Docker engine answers `GET /_ping` within 1.5 s (testcontainers' own client would
/// wait two minutes on a socket that never answers).
fn docker_answers() -> bool {
    let deadline = Duration::from_millis(1500);
    let ping = |stream: &mut dyn ReadWrite| -> bool {
        if stream
            .write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut buf = [0u8; 256];
        matches!(stream.read(&mut buf), Ok(n) if n > 0 && String::from_utf8_lossy(&buf[..n]).contains(" 200 "))
    };
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        if let Some(addr) = host.strip_prefix("tcp://") {
            return addr
                .parse::<SocketAddr>()
                .ok()
                .and_then(|a| std::net::TcpStream::connect_timeout(&a, deadline).ok())
                .is_some_and(|mut s| {
                    let _ = s.set_read_timeout(Some(deadline));
                    ping(&mut s)
                });
        }
        if let Some(path) = host.strip_prefix("unix://") {
            return unix_ping(path, deadline, &ping);
        }
        return false;
    }
    let home = std::env::var("HOME").unwrap_or_default();
    [
        "/var/run/docker.sock".to_owned(),
        format!("{home}/.docker/run/docker.sock"),
        format!("{home}/.docker/desktop/docker.sock"),
    ]
    .iter()
    .any(|path| unix_ping(path, deadline, &ping))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[cfg(unix)]
fn unix_ping(path: &str, deadline: Duration, ping: &dyn Fn(&mut dyn ReadWrite) -> bool) -> bool {
    if !std::path::Path::new(path).exists() {
        return false;
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(mut stream) => {
            let _ = stream.set_read_timeout(Some(deadline));
            let _ = stream.set_write_timeout(Some(deadline));
            ping(&mut stream)
        }
        Err(_) => false,
    }
}

#[cfg(not(unix))]
fn unix_ping(_: &str, _: Duration, _: &dyn Fn(&mut dyn ReadWrite) -> bool) -> bool {
    false
}

/// Starts (or reuses) the named Postgres container and returns its URL.
async fn start_container() -> Result<String, String> {
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ImageExt, ReuseDirective};
    use testcontainers_modules::postgres::Postgres;

    let mut last_error = String::new();
    // Two test processes may race to create the named container; the loser retries.
    for _ in 0..3 {
        let request = Postgres::default()
            .with_host_auth()
            .with_tag(CONTAINER_TAG)
            .with_container_name(CONTAINER_NAME)
            .with_reuse(ReuseDirective::Always);
        match request.start().await {
            Ok(container) => {
                let host = container.get_host().await.map_err(|e| e.to_string())?;
                let port = container
                    .get_host_port_ipv4(5432)
                    .await
                    .map_err(|e| e.to_string())?;
                // A reused container outlives this process (remove it with
                // `docker rm -f ojsd-test-pg`); dropping the handle would stop it mid-run.
                std::mem::forget(container);
                return Ok(format!(
                    "postgres://postgres@{host}:{port}/postgres?sslmode=disable"
                ));
            }
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(last_error)
}

/// The migrated template database, built once per fingerprint across processes.
fn template_name() -> String {
    TEMPLATE
        .get_or_init(|| {
            block_on_thread(|| {
                Box::pin(async {
                    build_template().await.unwrap_or_else(|e| {
                        panic!(
                            "cannot prepare the test database on {}: {e}\n\
                             Start PostgreSQL (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), \
                             or set TEST_DATABASE_URL to a server where the user may create databases.",
                            redacted(&server_options())
                        )
                    })
                })
            })
        })
        .clone()
}

fn redacted(options: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}",
        options.get_username(),
        options.get_host(),
        options.get_port()
    )
}

async fn build_template() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let admin = server_options();
    let name = format!("ojsd_tmpl_{}", ojsd_migrate::fingerprint());
    let mut conn = admin.connect().await?;
    let lock = PgAdvisoryLock::new("ojsd:test-template");
    let mut guard = lock.acquire(&mut conn).await?;
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(&name)
            .fetch_one(guard.as_mut())
            .await?;
    if !exists {
        let building = format!("{name}_build");
        let quoted = ojsd_migrate::quote_identifier(&building);
        guard
            .as_mut()
            .execute(format!("drop database if exists {quoted} with (force)").as_str())
            .await?;
        guard
            .as_mut()
            .execute(format!("create database {quoted}").as_str())
            .await?;
        ojsd_migrate::run_with(&admin.clone().database(&building)).await?;
        // Publish atomically: other processes only ever see a complete template.
        guard
            .as_mut()
            .execute(
                format!(
                    "alter database {quoted} rename to {}",
                    ojsd_migrate::quote_identifier(&name)
                )
                .as_str(),
            )
            .await?;
    }
    // Templates of older migration sets, and databases of test processes that died.
    let stale: Vec<String> = sqlx::query_scalar(
        "select datname from pg_database where (datname like 'ojsd\\_tmpl\\_%' and datname not like $1 || '%') or datname like 'ojsd\\_t\\_%'",
    )
    .bind(&name)
    .fetch_all(guard.as_mut())
    .await?;
    for db in stale {
        let owner_alive = db
            .strip_prefix(DB_PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !owner_alive {
            let _ = guard
                .as_mut()
                .execute(
                    format!(
                        "drop database if exists {} with (force)",
                        ojsd_migrate::quote_identifier(&db)
                    )
                    .as_str(),
                )
                .await;
        }
    }
    guard.release_now().await?;
    conn.close().await?;
    Ok(name)
}

/// A fresh database cloned from the template; dropped when the value is.
pub struct TestDb {
    pub name: String,
    pub options: PgConnectOptions,
    pub pool: PgPool,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let template = template_name();
        let admin = server_options();
        let name = format!(
            "{DB_PREFIX}{}_{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        );
        let mut conn = admin.connect().await.expect("connect to the test server");
        conn.execute(
            format!(
                "create database {} template {}",
                ojsd_migrate::quote_identifier(&name),
                ojsd_migrate::quote_identifier(&template)
            )
            .as_str(),
        )
        .await
        .expect("clone the template database");
        let _ = conn.close().await;
        let options = admin.database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(5)
            .connect_with(options.clone())
            .await
            .expect("connect to the test database");
        TestDb {
            name,
            options,
            pool,
        }
    }

    /// A postgres:// URL of this database (for the server's configuration).
    pub fn url(&self) -> String {
        let o = &self.options;
        format!(
            "postgres://{}@{}:{}/{}?sslmode=disable",
            o.get_username(),
            o.get_host(),
            o.get_port(),
            self.name
        )
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if std::env::var_os("OJSD_KEEP_TEST_DB").is_some() {
            eprintln!("keeping test database {}", self.name);
            return;
        }
        // The pool belongs to the test's runtime, which is blocked while this runs: do not touch
        // it here. Dropping the database with (force) ends its connections.
        let name = self.name.clone();
        block_on_thread(move || {
            Box::pin(async move {
                if let Ok(mut conn) = server_options().connect().await {
                    let _ = conn
                        .execute(
                            format!(
                                "drop database if exists {} with (force)",
                                ojsd_migrate::quote_identifier(&name)
                            )
                            .as_str(),
                        )
                        .await;
                    let _ = conn.close().await;
                }
            })
        });
    }
}

/// One HTTP response, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status, printing the body when it differs.
    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }

    /// Asserts an OJS error with this status and code, and the error body's invariants.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Resp {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        let e = &self.json["error"];
        assert_eq!(e["code"], code, "body: {}", self.text);
        assert_eq!(e["type"], code, "body: {}", self.text);
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.text
        );
        assert!(e["retryable"].is_boolean(), "{}", self.text);
        assert!(
            e["hint"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.text
        );
        assert_eq!(
            e["docs_url"],
            format!("https://openjobspec.org/errors/{code}"),
            "{}",
            self.text
        );
        assert_eq!(
            e["request_id"].as_str(),
            self.header("x-request-id"),
            "request_id echoes X-Request-Id"
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/openjobspec+json")
        );
        self
    }
}

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

/// The real server, on its own database and port.
pub struct TestApp {
    pub db: TestDb,
    pub base: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<anyhow::Result<()>>>,
    /// The server's OpenAPI document, read on the first request ([`TestApp::send`]).
    contract: tokio::sync::OnceCell<Contract>,
}

impl TestApp {
    /// A server with test hooks on and default settings, except that it never runs the
    /// maintenance services (tests drive them with `run_once`; see [`TestApp::spawn_with`]).
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    /// A server whose configuration `configure` adjusts.
    pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> TestApp {
        init_test_logging();
        let db = TestDb::new().await;
        let mut config = Config {
            database_url: db.url(),
            listen_addr: "127.0.0.1:0".parse().unwrap(),
            skip_migrations: true,
            test_hooks: true,
            db_max_connections: 10,
            db_min_connections: 1,
            maintenance: false,
            ..Config::default()
        };
        configure(&mut config);
        let app = Application::build(&config).await.expect("build the server");
        let addr = app.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        TestApp {
            db,
            base: format!("http://{addr}"),
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(32)
                .build()
                .expect("http client"),
            stop: Some(stop),
            server: Some(server),
            contract: tokio::sync::OnceCell::new(),
        }
    }

    /// A second server in this process on the same database (another replica), with the
    /// settings `configure` adjusts (no migrations, no maintenance, 6 connections by default).
    pub async fn spawn_replica(&self, configure: impl FnOnce(&mut Config)) -> InProcessReplica {
        let mut config = Config {
            database_url: self.db.url(),
            listen_addr: "127.0.0.1:0".parse().unwrap(),
            skip_migrations: true,
            db_max_connections: 6,
            db_min_connections: 1,
            maintenance: false,
            ..Config::default()
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

    /// The server's OpenAPI document as a [`Contract`].
    async fn contract(&self) -> &Contract {
        self.contract
            .get_or_init(|| async {
                let doc: Value = self
                    .client
                    .get(format!("{}/ojs/openapi.json", self.base))
                    .send()
                    .await
                    .expect("the OpenAPI document is served")
                    .json()
                    .await
                    .expect("the OpenAPI document is JSON");
                Contract::new(doc)
            })
            .await
    }

    /// Sends a request with an optional raw body and content type, and checks the exchange
    /// against the server's OpenAPI document ([`Contract`]).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = &body {
            request = request.body(body.clone());
        }
        let response = request.send().await.expect("request reaches the server");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("response body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        self.contract().await.check(&Exchange {
            method: method.as_str(),
            path,
            request_body: body.as_deref(),
            status,
            content_type: headers
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            body: &text,
        });
        Resp {
            status,
            headers,
            text,
            json,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send(
            Method::POST,
            path,
            Some(body.to_string().into_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    }

    pub async fn post_text(&self, path: &str, body: &str) -> Resp {
        self.send(
            Method::POST,
            path,
            Some(body.as_bytes().to_vec()),
            &[("content-type", "application/json")],
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, path, None, &[]).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(Method::DELETE, path, None, &[]).await
    }

    /// Enqueues a job and returns it (asserts 201).
    pub async fn push(&self, job: Value) -> Value {
        let resp = self.post("/ojs/v1/jobs", job).await.expect(201);
        resp.json["job"].clone()
    }

    /// Enqueues a job and returns its id.
    pub async fn push_id(&self, job: Value) -> String {
        self.push(job).await["id"].as_str().unwrap().to_owned()
    }

    /// Fetches with `body` and returns the jobs (asserts 200).
    pub async fn fetch(&self, body: Value) -> Vec<Value> {
        let resp = self.post("/ojs/v1/workers/fetch", body).await.expect(200);
        resp.json["jobs"].as_array().cloned().unwrap_or_default()
    }

    /// Fetches one job of `queue` for `worker` and returns it (asserts one was claimed).
    pub async fn fetch_one(&self, queue: &str, worker: &str) -> Value {
        let jobs = self
            .fetch(serde_json::json!({"queues": [queue], "worker_id": worker}))
            .await;
        assert_eq!(jobs.len(), 1, "expected one job from {queue}");
        jobs[0].clone()
    }

    /// The job as INFO returns it (asserts 200).
    pub async fn job(&self, id: &str) -> Value {
        self.get(&format!("/ojs/v1/jobs/{id}"))
            .await
            .expect(200)
            .json["job"]
            .clone()
    }

    /// Number of rows in `ojs_job`.
    pub async fn job_count(&self) -> i64 {
        sqlx::query_scalar("select count(*) from ojs_job")
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

fn init_test_logging() {
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

impl TestApp {
    /// Starts a POST in the background; resolves to its status.
    pub fn spawn_post(&self, path: &str, body: &serde_json::Value) -> JoinHandle<u16> {
        let request = self.client.post(format!("{}{path}", self.base)).json(body);
        tokio::spawn(async move {
            request
                .send()
                .await
                .expect("request reaches the server")
                .status()
                .as_u16()
        })
    }
}

/// Starts a (long-polling) FETCH against the server at `base` in the background; resolves to
/// the response body.
pub fn spawn_fetch(client: &reqwest::Client, base: &str, body: &Value) -> JoinHandle<Value> {
    let request = client
        .post(format!("{base}/ojs/v1/workers/fetch"))
        .json(body);
    tokio::spawn(async move {
        request
            .send()
            .await
            .expect("request reaches the server")
            .json::<Value>()
            .await
            .expect("a JSON body")
    })
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
        ojsd::maintenance::Context::new(self.pool().clone(), "ojs-server", "test-instance")
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
