//! Real `ojsd` processes and a private PostgreSQL cluster, for the replica and fault tests.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
/// stop and start without disturbing any other test.
pub struct PrivateCluster {
    bin: PathBuf,
    dir: PathBuf,
    pub port: u16,
    /// Run the server binaries as this user (they refuse to run as root).
    run_as: Option<&'static str>,
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl PrivateCluster {
    /// Creates and starts a cluster; panics with instructions when the server binaries are not
    /// installed.
    pub fn start() -> PrivateCluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                let mut found: Vec<PathBuf> = versions
                    .filter_map(Result::ok)
                    .map(|v| v.path().join("bin"))
                    .filter(|b| b.join("initdb").exists())
                    .collect();
                found.sort();
                found.pop()
            })
            .or_else(|| {
                Command::new("pg_config")
                    .arg("--bindir")
                    .output()
                    .ok()
                    .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
                    .filter(|b| b.join("initdb").exists())
            })
            .expect(
                "this test runs a private PostgreSQL cluster and needs the server binaries \
                 (initdb, pg_ctl): install the postgresql package",
            );
        let run_as = running_as_root().then_some("postgres");
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let dir = std::env::temp_dir().join(format!(
            "ojsd-pg-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(user) = run_as {
            let status = Command::new("chown")
                .args([user, dir.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success(), "chown the cluster directory");
        }
        let cluster = PrivateCluster {
            bin,
            dir,
            port,
            run_as,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        cluster.pg_ctl_start();
        cluster
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let output = match self.run_as {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&program)
                .args(args)
                .output(),
            None => Command::new(&program).args(args).output(),
        }
        .unwrap_or_else(|e| panic!("run {tool}: {e}"));
        assert!(
            output.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").to_string_lossy().into_owned();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "-t",
                "30",
                "start",
            ],
        );
    }

    /// Stops the server (fast shutdown: sessions are terminated).
    pub fn stop(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// Starts it again after [`PrivateCluster::stop`].
    pub fn start_again(&self) {
        self.pg_ctl_start();
    }

    /// URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let program = self.bin.join("pg_ctl");
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "stop"];
        let _ = match self.run_as {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&program)
                .args(args)
                .output(),
            None => Command::new(&program).args(args).output(),
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
