//! Real `ojsd` processes and a private PostgreSQL cluster, for the replica and fault tests.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojsd::db::embedded::{Access, Cluster};
use serde_json::Value;

/// One `ojsd` process (the binary this test run built).
pub struct Replica {
    pub instance_id: String,
    pub base: String,
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Starts `ojsd` on `database_url` with fast leadership and maintenance settings plus
    /// `env`, and waits until it listens.
    pub fn start(database_url: &str, instance_id: &str, env: &[(&str, &str)]) -> Replica {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ojsd"));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", database_url)
            .env("OJS_LISTEN_ADDR", "127.0.0.1:0")
            .env("OJS_INSTANCE_ID", instance_id)
            .env("OJS_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env("OJS_DB_MAX_CONNECTIONS", "6")
            .env("OJS_DB_MIN_CONNECTIONS", "1")
            .env("OJS_LEADER_LEASE_MS", "2000")
            .env("OJS_LEADER_RENEW_INTERVAL_MS", "500")
            .env("OJS_LEADER_ELECT_INTERVAL_MS", "1000")
            .env("OJS_PROMOTE_INTERVAL_MS", "100")
            .env("OJS_REAP_INTERVAL_MS", "100")
            .env("OJS_SHUTDOWN_TIMEOUT_SECS", "10")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start ojsd");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<String>();
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && event["message"] == "ojsd listening"
                    && let Some(addr) = event["addr"].as_str()
                {
                    let _ = addr_tx.send(addr.to_owned());
                }
                if std::env::var_os("TEST_LOG").is_some() {
                    eprintln!("[ojsd] {line}");
                }
                sink.lock().unwrap().push(line);
            }
        });
        let Ok(addr) = addr_rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!(
                "ojsd {instance_id} did not start:\n{}",
                logs.lock().unwrap().join("\n")
            );
        };
        Replica {
            instance_id: instance_id.to_owned(),
            base: format!("http://{addr}"),
            child,
            logs,
        }
    }

    /// SIGKILL: the process dies at once, without any cleanup.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// SIGTERM: asks for a graceful shutdown.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for ojsd") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "ojsd {} did not exit within {within:?}",
                self.instance_id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether a log line contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.logs.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A PostgreSQL cluster of its own (a data directory under /tmp, its own port), which a test may
/// stop and start without disturbing any other test: ojsd's own embedded cluster
/// ([`ojsd::db::embedded::Cluster`]), reachable over TCP on loopback.
pub struct PrivateCluster {
    cluster: Mutex<Cluster>,
    dir: PathBuf,
    pub port: u16,
}

/// A fresh directory for a cluster under the temporary directory (which the cluster's user,
/// when the tests run as root, can reach).
pub fn cluster_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "ojsd-pg-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ))
}

/// A free TCP port on loopback, never one this process handed out before: a test that stops
/// its private cluster leaves the port free, and another test's cluster taking it would be
/// found by the first test's server as its database coming back.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The settings every test cluster runs with.
pub const TEST_SETTINGS: [(&str, &str); 1] = [("max_connections", "50")];

impl PrivateCluster {
    /// Creates and starts a cluster; panics with instructions when the server binaries are not
    /// installed.
    pub fn start() -> PrivateCluster {
        let dir = cluster_dir();
        let port = free_port();
        let mut cluster = Cluster::open(&dir, Access::Loopback(port))
            .unwrap_or_else(|e| panic!("this test runs a private PostgreSQL cluster: {e:#}"));
        cluster.start(&test_settings()).expect("start the cluster");
        PrivateCluster {
            cluster: Mutex::new(cluster),
            dir,
            port,
        }
    }

    /// Stops the server (fast shutdown: sessions are terminated).
    pub fn stop(&self) {
        self.cluster
            .lock()
            .unwrap()
            .stop()
            .expect("stop the cluster");
    }

    /// Starts it again after [`PrivateCluster::stop`].
    pub fn start_again(&self) {
        self.cluster
            .lock()
            .unwrap()
            .start(&test_settings())
            .expect("start the cluster again");
    }

    /// URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{name}?sslmode=disable",
            ojsd::db::embedded::SUPERUSER,
            self.port
        )
    }
}

/// [`TEST_SETTINGS`] as [`Cluster::start`] takes them.
pub fn test_settings() -> Vec<(&'static str, String)> {
    TEST_SETTINGS
        .iter()
        .map(|(name, value)| (*name, (*value).to_owned()))
        .collect()
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if let Ok(cluster) = self.cluster.get_mut() {
            let _ = cluster.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
