//! A private PostgreSQL cluster for `ojsd serve --embedded`: ojsd on a machine that has
//! PostgreSQL's server binaries but no server running.
//!
//! The cluster lives in one directory (`OJS_DATA_DIR`, `./ojsd-data` by default): `pgdata/`
//! holds the database files, `socket/` the Unix socket it listens on (it opens no TCP port),
//! `postgres.log` its log. It is made with the machine's own `initdb` the first time, started
//! with `pg_ctl` every time, stopped when ojsd stops, and keeps its data across restarts.
//! Only the user the cluster runs as can reach the socket (the directory and the socket are
//! `0700`); connections over it are trusted.
//!
//! PostgreSQL refuses to run as root: when ojsd runs as root, the cluster runs as the
//! unprivileged `postgres` user, which owns the directory.
//!
//! This is never a fallback: only `--embedded` starts it. A production ojsd restarted during a
//! database outage must fail, not start an empty database and take jobs into it.
//!
//! Everything here blocks (it runs programs and waits for them); call it off the async runtime.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, bail};

/// The database role the cluster is made with.
pub const SUPERUSER: &str = "ojsd";
/// The port number, which names the socket file (`.s.PGSQL.5432`); no TCP port is opened
/// unless [`Access::Loopback`] asks for one.
const PORT: u16 = 5432;
/// The longest socket directory a Unix socket path can live in (`sun_path` holds 108 bytes,
/// less the file name `/.s.PGSQL.5432` and its terminating zero).
const MAX_SOCKET_DIR: usize = 92;

/// PostgreSQL's server programs in one directory, and their major version.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub bindir: PathBuf,
    pub major: u32,
}

/// The user the cluster's programs run as, when ojsd runs as root.
#[derive(Debug, Clone)]
struct RunAs {
    name: String,
    uid: u32,
    gid: u32,
}

/// Who may connect to a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Over its Unix socket only (`ojsd serve --embedded`); TCP connections are refused even if
    /// someone opens a TCP port later.
    SocketOnly,
    /// Over its socket and, trusted, over TCP on 127.0.0.1 at this port: for tests and the
    /// failover drill, whose servers replicate to each other and are reached by `host:port`.
    /// Files are not synced (`fsync = off`): a crash of the machine may lose its data.
    Loopback(u16),
}

/// A private cluster in a directory of its own.
#[derive(Debug)]
pub struct Cluster {
    binaries: Binaries,
    access: Access,
    dir: PathBuf,
    socket: PathBuf,
    run_as: Option<RunAs>,
    /// Held while this process uses the directory.
    _lock: File,
    /// Whether this process started the server (and so stops it).
    started: bool,
}

impl Binaries {
    /// Finds `initdb`, `pg_ctl` and `postgres`: in `OJS_PG_BINDIR` when set, else on `PATH`,
    /// then where Debian, Red Hat, Homebrew and Postgres.app install them. Of several, the one
    /// of `major` if given (the version of an existing cluster), else the newest.
    pub fn find(major: Option<u32>) -> anyhow::Result<Binaries> {
        if let Some(dir) = std::env::var_os("OJS_PG_BINDIR") {
            let dir = PathBuf::from(dir);
            return Binaries::at(&dir).with_context(|| {
                format!(
                    "OJS_PG_BINDIR={} does not hold initdb, pg_ctl and postgres",
                    dir.display()
                )
            });
        }
        Binaries::find_among(&candidate_dirs(), major)
    }

    /// [`Binaries::find`] in `candidates`.
    fn find_among(candidates: &[PathBuf], major: Option<u32>) -> anyhow::Result<Binaries> {
        let mut found: Vec<Binaries> = candidates
            .iter()
            .filter_map(|dir| Binaries::at(dir).ok())
            .collect();
        found.sort_by_key(|b| std::cmp::Reverse(b.major));
        if let Some(major) = major {
            if let Some(matching) = found.iter().find(|b| b.major == major) {
                return Ok(matching.clone());
            }
            if !found.is_empty() {
                bail!(
                    "the embedded cluster was made by PostgreSQL {major}, but only PostgreSQL {} \
                     is installed here; install PostgreSQL {major}'s server, or point \
                     OJS_PG_BINDIR at its programs",
                    found
                        .iter()
                        .map(|b| b.major.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        found.into_iter().next().ok_or_else(|| {
            anyhow::anyhow!(
                "--embedded needs PostgreSQL's server programs (initdb, pg_ctl, postgres), and \
                 none were found (looked in {}). Install them — Debian/Ubuntu: \
                 `apt install postgresql`; Fedora/RHEL: `dnf install postgresql-server`; macOS: \
                 `brew install postgresql@17` — or set OJS_PG_BINDIR to the directory that \
                 holds them, or run ojsd with its database in Docker: `docker compose up`",
                candidates
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// The binaries in `dir`, if it holds all three.
    fn at(dir: &Path) -> anyhow::Result<Binaries> {
        for program in ["initdb", "pg_ctl", "postgres"] {
            if !dir.join(program).is_file() {
                bail!("no {program} in {}", dir.display());
            }
        }
        // Links on PATH (as Homebrew and some images make) lead to the directory that holds
        // the other programs too (pg_basebackup, psql).
        let dir = &dir
            .join("pg_ctl")
            .canonicalize()?
            .parent()
            .map_or_else(|| dir.to_owned(), Path::to_owned);
        let output = Command::new(dir.join("pg_ctl")).arg("--version").output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        // "pg_ctl (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
        let major = text
            .split_once(')')
            .and_then(|(_, rest)| {
                rest.trim()
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .with_context(|| format!("cannot read the version of {}: {text}", dir.display()))?;
        Ok(Binaries {
            bindir: dir.to_owned(),
            major,
        })
    }

    fn program(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// Where to look for the server programs, in order.
fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    let versioned = |parent: &str, prefix: &str, suffix: &str| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(parent) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .map(|e| e.path().join(suffix))
            .collect()
    };
    dirs.extend(versioned("/usr/lib/postgresql", "", "bin"));
    dirs.extend(versioned("/usr", "pgsql-", "bin"));
    for prefix in ["/opt/homebrew/opt", "/usr/local/opt"] {
        dirs.extend(versioned(prefix, "postgresql", "bin"));
    }
    dirs.extend(versioned(
        "/Applications/Postgres.app/Contents/Versions",
        "",
        "bin",
    ));
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// The `postgres` user's ids, from `/etc/passwd`.
fn postgres_user() -> anyhow::Result<RunAs> {
    let passwd = std::fs::read_to_string("/etc/passwd").context("cannot read /etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 3 && fields[0] == "postgres").then(|| {
                Some(RunAs {
                    name: fields[0].to_owned(),
                    uid: fields[2].parse().ok()?,
                    gid: fields[3].parse().ok()?,
                })
            })?
        })
        .context(
            "ojsd runs as root and PostgreSQL refuses to: --embedded runs the cluster as the \
             user `postgres`, which does not exist here (create it, or run ojsd as a normal user)",
        )
}

impl Cluster {
    /// Prepares the cluster in `dir` (made on first use), without starting it: finds the
    /// binaries, takes the directory (one ojsd at a time) and runs `initdb` if there is no
    /// cluster yet. `access` says how it is reached.
    pub fn open(dir: &Path, access: Access) -> anyhow::Result<Cluster> {
        let run_as = if rustix::process::geteuid().is_root() {
            Some(postgres_user()?)
        } else {
            None
        };
        // Which PostgreSQL, before anything is written: a machine without one is told so
        // without a directory left behind.
        let existing = std::fs::read_to_string(dir.join("pgdata").join("PG_VERSION"))
            .ok()
            .and_then(|v| v.trim().parse().ok());
        let binaries = Binaries::find(existing)?;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let lock = File::create(dir.join("ojsd.lock"))
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        if lock.try_lock().is_err() {
            bail!(
                "another ojsd uses the embedded cluster in {} (one process at a time)",
                dir.display()
            );
        }
        let mut socket = dir.join("socket");
        if socket.as_os_str().len() > MAX_SOCKET_DIR {
            // Too long for a socket path: a short directory of the temporary one, named after
            // the data directory so that every start finds the same one.
            let digest = <sha2::Sha256 as sha2::Digest>::digest(dir.as_os_str().as_encoded_bytes());
            socket = std::env::temp_dir().join(format!("ojsd-{}", hex::encode(&digest[..6])));
        }
        let cluster = Cluster {
            binaries,
            access,
            dir,
            socket,
            run_as,
            _lock: lock,
            started: false,
        };
        for path in [cluster.dir.clone(), cluster.socket.clone()] {
            std::fs::create_dir_all(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            cluster.own(&path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        }
        if existing.is_none() {
            cluster.initdb()?;
        }
        Ok(cluster)
    }

    /// The data directory (`OJS_DATA_DIR`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster's files.
    pub fn pgdata(&self) -> PathBuf {
        self.dir.join("pgdata")
    }

    /// The directory of the Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket
    }

    /// The server's log.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// The server's port (which names its socket file).
    pub fn port(&self) -> u16 {
        match self.access {
            Access::SocketOnly => PORT,
            Access::Loopback(port) => port,
        }
    }

    /// The URL of `database` on this cluster, over its socket.
    pub fn database_url(&self, database: &str) -> String {
        let socket: String =
            form_urlencoded::byte_serialize(self.socket.as_os_str().as_encoded_bytes()).collect();
        format!(
            "postgres://{SUPERUSER}@localhost/{database}?host={socket}&port={}",
            self.port()
        )
    }

    /// How to reach `database` with psql.
    pub fn psql_command(&self, database: &str) -> String {
        format!(
            "psql -h '{}' -p {} -U {SUPERUSER} {database}",
            self.socket.display(),
            self.port()
        )
    }

    /// Makes `path` belong to the cluster's user, when that is not this process's.
    fn own(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(user) = &self.run_as {
            chown(path, Some(user.uid), Some(user.gid)).with_context(|| {
                format!("cannot give {} to the user {}", path.display(), user.name)
            })?;
        }
        Ok(())
    }

    /// A command running one of the cluster's programs, as its user, in its directory, in a
    /// process group of its own (so a Ctrl-C meant for ojsd does not reach the server, which
    /// ojsd stops itself once it has drained).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.binaries.program(program));
        command.current_dir(&self.dir).process_group(0);
        for var in ["PGDATA", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE"] {
            command.env_remove(var);
        }
        command.env("LC_ALL", "C");
        if let Some(user) = &self.run_as {
            command.uid(user.uid).gid(user.gid);
        }
        command
    }

    /// Runs `command` to completion; an error carries its output.
    fn run(&self, mut command: Command, what: &str) -> anyhow::Result<Output> {
        let output = command
            .output()
            .with_context(|| format!("cannot run {what}"))?;
        if !output.status.success() {
            let mut message = format!(
                "{what} failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim(),
                String::from_utf8_lossy(&output.stdout).trim()
            );
            if let Some(user) = &self.run_as {
                message.push_str(&format!(
                    " (it ran as the user {}, which must be able to reach {})",
                    user.name,
                    self.dir.display()
                ));
            }
            bail!(message);
        }
        Ok(output)
    }

    fn initdb(&self) -> anyhow::Result<()> {
        tracing::info!(
            dir = %self.pgdata().display(),
            version = self.binaries.major,
            "creating the embedded PostgreSQL cluster"
        );
        let mut initdb = self.command("initdb");
        initdb
            .arg("--pgdata")
            .arg(self.pgdata())
            .args([
                "--username",
                SUPERUSER,
                "--encoding",
                "UTF8",
                "--locale",
                "C",
            ])
            .args(["--auth-local", "trust"]);
        match self.access {
            Access::SocketOnly => initdb.args(["--auth-host", "reject"]),
            Access::Loopback(_) => initdb.args(["--auth-host", "trust", "--no-sync"]),
        };
        self.run(initdb, "initdb")?;
        // The settings ojsd owns live in their own file, rewritten at every start.
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(self.pgdata().join("postgresql.conf"))?;
        writeln!(
            conf,
            "\n# Written by ojsd --embedded at every start.\ninclude_if_exists = 'ojsd.conf'"
        )?;
        Ok(())
    }

    /// Starts the server (unless it already runs: left behind by an ojsd that did not stop
    /// it, it is taken over and stopped with this one) and waits until it takes connections.
    /// `settings` are added to the server's configuration (name, value), after the socket ones.
    pub fn start(&mut self, settings: &[(&str, String)]) -> anyhow::Result<()> {
        let mut conf = format!(
            "port = {}\nunix_socket_directories = {}\nunix_socket_permissions = 0700\n",
            self.port(),
            conf_string(&self.socket.to_string_lossy())
        );
        match self.access {
            Access::SocketOnly => conf.push_str("listen_addresses = ''\n"),
            Access::Loopback(_) => conf.push_str("listen_addresses = '127.0.0.1'\nfsync = off\n"),
        }
        for (name, value) in settings {
            conf.push_str(&format!("{name} = {}\n", conf_string(value)));
        }
        let path = self.pgdata().join("ojsd.conf");
        std::fs::write(&path, conf).with_context(|| format!("cannot write {}", path.display()))?;
        self.own(&path)?;
        self.started = true;
        if self.running() {
            tracing::warn!(
                dir = %self.pgdata().display(),
                "the embedded PostgreSQL was left running; restarting it with ojsd's settings"
            );
            let mut restart = self.command("pg_ctl");
            restart
                .arg("restart")
                .arg("--pgdata")
                .arg(self.pgdata())
                .args(["--mode", "fast", "--wait", "--timeout", "120", "--silent"])
                .arg("--log")
                .arg(self.log_file());
            return self
                .run(restart, "pg_ctl restart")
                .map(drop)
                .map_err(|e| self.with_log(e));
        }
        let mut start = self.command("pg_ctl");
        start
            .arg("start")
            .arg("--pgdata")
            .arg(self.pgdata())
            .args(["--wait", "--timeout", "120", "--silent"])
            .arg("--log")
            .arg(self.log_file());
        self.run(start, "pg_ctl start")
            .map(drop)
            .map_err(|e| self.with_log(e))
    }

    /// Whether a server runs on the cluster.
    pub fn running(&self) -> bool {
        let mut status = self.command("pg_ctl");
        status.arg("status").arg("--pgdata").arg(self.pgdata());
        status.output().is_ok_and(|o| o.status.success())
    }

    /// `e`, with the end of the server's log.
    fn with_log(&self, e: anyhow::Error) -> anyhow::Error {
        let log = std::fs::read_to_string(self.log_file()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        e.context(format!(
            "the embedded PostgreSQL did not start; the end of {}:\n{}",
            self.log_file().display(),
            tail.join("\n")
        ))
    }

    /// Stops the server if this process started it (fast shutdown: sessions end, then a
    /// checkpoint).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if !std::mem::take(&mut self.started) {
            return Ok(());
        }
        let mut stop = self.command("pg_ctl");
        stop.arg("stop").arg("--pgdata").arg(self.pgdata()).args([
            "--mode",
            "fast",
            "--wait",
            "--timeout",
            "120",
            "--silent",
        ]);
        self.run(stop, "pg_ctl stop").map(drop)
    }
}

/// Streaming replication between clusters, for the failover tests and drill: a standby
/// made from a primary, promoted, and a server that dies without a shutdown.
impl Cluster {
    /// Makes a standby of `primary` in `dir` (`pg_basebackup` over the primary's socket, with
    /// `standby.signal` and the connection to the primary written), ready to [`Cluster::start`].
    pub fn standby_of(primary: &Cluster, dir: &Path, access: Access) -> anyhow::Result<Cluster> {
        std::fs::create_dir_all(dir)?;
        primary.own(dir)?;
        let mut backup = primary.command("pg_basebackup");
        backup
            .arg("--pgdata")
            .arg(dir.canonicalize()?.join("pgdata"))
            .arg("--host")
            .arg(primary.socket_dir())
            .args([
                "--port",
                &primary.port().to_string(),
                "--username",
                SUPERUSER,
            ])
            .args([
                "--write-recovery-conf",
                "--wal-method",
                "stream",
                "--checkpoint",
                "fast",
            ]);
        primary.run(backup, "pg_basebackup")?;
        Cluster::open(dir, access)
    }

    /// Promotes a standby to primary and waits until it takes writes.
    pub fn promote(&self) -> anyhow::Result<()> {
        let mut promote = self.command("pg_ctl");
        promote
            .arg("promote")
            .arg("--pgdata")
            .arg(self.pgdata())
            .args(["--wait", "--timeout", "60", "--silent"]);
        self.run(promote, "pg_ctl promote").map(drop)
    }

    /// Stops the server the way a crash would (`immediate`: no checkpoint, sessions cut).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.started = false;
        let mut stop = self.command("pg_ctl");
        stop.arg("stop").arg("--pgdata").arg(self.pgdata()).args([
            "--mode",
            "immediate",
            "--wait",
            "--silent",
        ]);
        self.run(stop, "pg_ctl stop --mode immediate").map(drop)
    }

    /// The server's process id (`postmaster.pid`'s first line), while it runs.
    pub fn server_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pgdata().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Cluster {
    /// A cluster that was started and not stopped (an error or a panic on the way out) is
    /// stopped here.
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::error!(error = %e, "cannot stop the embedded PostgreSQL");
        }
    }
}

/// `value` as a quoted string of postgresql.conf.
fn conf_string(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_server_programs_the_error_says_what_to_install() {
        let empty = std::env::temp_dir().join(format!("ojsd-nobin-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let e = Binaries::find_among(std::slice::from_ref(&empty), None).unwrap_err();
        let message = e.to_string();
        for expected in [
            "initdb, pg_ctl, postgres",
            "apt install postgresql",
            "brew install",
            "OJS_PG_BINDIR",
            "docker compose up",
            empty.to_str().unwrap(),
        ] {
            assert!(message.contains(expected), "{expected:?} not in {message}");
        }
        let _ = std::fs::remove_dir(&empty);
    }

    #[test]
    fn configuration_strings_are_quoted() {
        assert_eq!(conf_string("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(conf_string("it's"), "'it''s'");
        assert_eq!(conf_string(r"C:\x"), r"'C:\\x'");
    }
}
