//! A PgBouncer in transaction mode on loopback, in front of the tests' PostgreSQL server, for
//! the tests of `OJS_DATABASE_POOLER=transaction`.
//!
//! It needs Debian's `pgbouncer` (1.18: no protocol-level prepared statements, the hard case).
//! `.ci/test` installs it and sets `OJS_REQUIRE_PGBOUNCER=1`, which makes a missing pgbouncer a
//! failure; without that setting (a bare `cargo test` on a machine without it) the pooler tests
//! say they did not run, and pass.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::db::server_options;
use super::processes::free_port;

/// A running pgbouncer; stopped when dropped.
pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

/// Where Debian installs pgbouncer, or the one on the PATH.
fn binary() -> Option<PathBuf> {
    let installed = PathBuf::from("/usr/sbin/pgbouncer");
    if installed.exists() {
        return Some(installed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("pgbouncer"))
            .find(|p| p.exists())
    })
}

impl PgBouncer {
    /// Starts pgbouncer in transaction mode before the tests' server; `None` (after saying so)
    /// when it is not installed and not required.
    pub fn start() -> Option<PgBouncer> {
        let Some(binary) = binary() else {
            assert!(
                std::env::var_os("OJS_REQUIRE_PGBOUNCER").is_none(),
                "pgbouncer is not installed (apt-get install pgbouncer; .ci/test does it)"
            );
            eprintln!(
                "pgbouncer is not installed: this pooler test did not run (.ci/test runs it)"
            );
            return None;
        };
        let server = server_options();
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "ojsd-pgbouncer-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // Every database of the server, as the test's user; any client is let in (loopback).
        let config = format!(
            "[databases]\n* = host={host} port={server_port} user={user}\n\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = any\npool_mode = transaction\nmax_client_conn = 500\n\
             default_pool_size = 20\nignore_startup_parameters = extra_float_digits\n",
            host = server.get_host(),
            server_port = server.get_port(),
            user = server.get_username(),
        );
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(&ini, config).unwrap();
        let mut command = Command::new(binary);
        // pgbouncer refuses to run as root: as the server's user then.
        if rustix::process::geteuid().is_root() {
            command.args(["-u", "postgres"]);
            set_readable(&dir);
        }
        let child = command
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let bouncer = PgBouncer { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer listening within 10 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(bouncer)
    }

    /// The URL of database `name` through this pooler.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{name}?sslmode=disable",
            server_options().get_username(),
            self.port
        )
    }
}

/// Lets another user read `dir` and what is in it.
fn set_readable(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
