//! A real PostgreSQL and a fresh database per test.
//!
//! The server is chosen once per test process:
//! 1. `TEST_DATABASE_URL`, when set;
//! 2. else a testcontainers Postgres (16, named `ojsd-test-pg`, reused across runs) when a
//!    Docker engine answers;
//! 3. else the local server `postgres://postgres@127.0.0.1:5432/postgres`.
//!
//! Migrations run once into a template database named after the migrations' fingerprint; each
//! test clones it (`create database … template …`) and drops its clone when it ends, panics
//! included (`OJSD_KEEP_TEST_DB=1` keeps it for debugging).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::postgres::{PgAdvisoryLock, PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgPool};

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
pub(super) fn server_options() -> PgConnectOptions {
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
        TestDb::from_template(&template_name()).await
    }

    /// A database without any schema (for tests that migrate it themselves).
    pub async fn empty() -> TestDb {
        TestDb::from_template("template0").await
    }

    async fn from_template(template: &str) -> TestDb {
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
                ojsd_migrate::quote_identifier(template)
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
