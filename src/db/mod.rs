//! The database connection pool and its health: how ojsd behaves while Postgres is down.
//!
//! Goals: a request never hangs on an unreachable database, and once Postgres is back no request
//! fails on a connection that died with it.
//!
//! * **Detection.** Any statement that fails because the connection broke (I/O error, server
//!   shutdown, connection exceptions) or because the server no longer takes writes (SQLSTATE
//!   25006: a primary demoted to a standby by a failover) is reported with
//!   [`DbHealth::report`]; so is the notification listener losing its connection, usually the
//!   first to notice.
//! * **Fast failure.** While the database is marked down, the HTTP layer answers 503 with
//!   `Retry-After` at once instead of queueing for a connection ([`DbHealth::is_down`]), and
//!   requests already waiting on the database when it goes down are answered 503 at that moment
//!   ([`DbHealth::went_down`]) rather than when their connection attempts time out.
//! * **Recovery.** A prober opens a fresh connection every [`PROBE_INTERVAL`] while the
//!   database is down and clears the mark as soon as one works on a server that takes writes
//!   (`transaction_read_only` off, as libpq's `target_session_attrs=read-write` checks): a
//!   standby that answers is still an outage. With several hosts in `DATABASE_URL` it tries
//!   them all and follows the one that takes writes ([`target`]): a failover is an outage that
//!   ends on another host.
//! * **Keepalives.** Every connection gets TCP keepalives and a user timeout ([`sockets`]),
//!   so a server that vanishes without a reset is noticed in seconds; when the listener's ping
//!   goes unanswered (a server that froze), every socket to the database is cut, so no
//!   statement waits on it forever holding a connection.
//! * **No stale connections.** Every pooled connection opened before the last reported failure
//!   is discarded when it is next checked out (the pool's `before_acquire` hook), so the first
//!   requests after a restart get new connections rather than dead ones. This costs nothing in
//!   steady state: no ping before each checkout.
//! * **Readiness.** [`DbHealth::round_trip`] times one statement on the pool, for the health
//!   and readiness probes.
//! * **Hot statements keep their connections** ([`HotConnections`]): the enqueue, claim, ACK
//!   and NACK statements reuse a few connections, most recently used first, instead of
//!   returning each to the pool after every statement. A connection returned to the pool is
//!   pinged on its way back (one more round trip, and one more wake-up of its backend, per
//!   statement), and the pool hands idle connections out oldest first, so at a modest rate
//!   every statement lands on a backend that has gone cold since its last one. Measured at 200
//!   jobs/s (ojsd-bench w3-latency, alternated): Postgres CPU per job -22%, p99 12-15 ms ->
//!   4.1-4.3 ms.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[cfg(unix)]
pub mod embedded;
mod executor;
pub mod sockets;
pub mod target;

pub use executor::Db;
pub use target::DbTarget;

/// How often a down database is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// How long one probe (of one host) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Shared knowledge of whether the database is reachable.
#[derive(Debug, Clone, Default)]
pub struct DbHealth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Whether the database is believed down; its receivers are the prober and waiting requests.
    down: watch::Sender<bool>,
    /// When a broken connection was last reported.
    last_failure: Mutex<Option<Instant>>,
    /// The pool whose connections this watches (set by [`connect_pool`]).
    pool: OnceLock<PgPool>,
    /// Where its connections go (set by [`connect_pool`]).
    endpoints: OnceLock<sockets::Endpoints>,
    /// The sockets of its connections.
    sockets: sockets::Adopted,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            down: watch::Sender::new(false),
            last_failure: Mutex::new(None),
            pool: OnceLock::new(),
            endpoints: OnceLock::new(),
            sockets: sockets::Adopted::default(),
        }
    }
}

/// Whether `e` means the connection (or the server) is gone, as opposed to a failed statement.
pub fn is_connection_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().as_deref().is_some_and(is_connection_code),
        _ => false,
    }
}

/// SQLSTATEs after which a connection cannot be used for writes again: connection exceptions
/// (08), admin or crash shutdown and cannot-connect-now (57P01–57P03), and a read-only
/// transaction (25006): the server this connection reached no longer is the primary.
pub fn is_connection_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25006")
}

impl DbHealth {
    /// Whether the database is currently believed unreachable.
    pub fn is_down(&self) -> bool {
        *self.inner.down.borrow()
    }

    /// Resolves when the database is (or becomes) marked down.
    pub async fn went_down(&self) {
        let mut down = self.inner.down.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = down.wait_for(|down| *down).await;
    }

    /// Resolves when the database is (or becomes) marked reachable.
    pub async fn came_back(&self) {
        let mut down = self.inner.down.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = down.wait_for(|down| !*down).await;
    }

    /// Records `e` if it is a connection failure (see [`is_connection_error`]).
    pub fn report(&self, e: &sqlx::Error) {
        if is_connection_error(e) {
            self.report_lost();
        }
    }

    /// Records that a connection was lost: the database is down until a probe succeeds, and
    /// every connection opened before now is retired.
    pub fn report_lost(&self) {
        *self.inner.last_failure.lock().expect("health lock") = Some(Instant::now());
        if !self.inner.down.send_replace(true) {
            tracing::warn!("database connection lost; answering 503 until it is back");
        }
    }

    /// Records that the database stopped answering (a ping went unanswered): every socket to
    /// it is shut down, so that statements waiting on a server that froze fail now instead of
    /// never (see [`sockets::cut`]), and the connection is lost as in [`DbHealth::report_lost`].
    pub fn report_unresponsive(&self) {
        if let Some(endpoints) = self.inner.endpoints.get() {
            let cut = sockets::cut(endpoints, &self.inner.sockets);
            tracing::warn!(
                sockets = cut,
                "the database stopped answering; cut its connections"
            );
        }
        self.report_lost();
    }

    /// Whether a connection of age `age` was opened before the last reported failure.
    fn predates_failure(&self, age: Duration) -> bool {
        let Some(failure) = *self.inner.last_failure.lock().expect("health lock") else {
            return false;
        };
        Instant::now()
            .checked_sub(age)
            .is_none_or(|opened| opened <= failure)
    }

    /// Runs one trivial statement on the pool and returns how long it took, or why it failed
    /// (within `timeout`).
    pub async fn round_trip(&self, timeout: Duration) -> Result<Duration, String> {
        let Some(pool) = self.inner.pool.get() else {
            return Err("no database pool".to_owned());
        };
        let started = Instant::now();
        // A bare string: one simple-protocol message, which a transaction-mode pooler serves
        // as a whole.
        match tokio::time::timeout(timeout, sqlx::Executor::execute(pool, "select 1")).await {
            Ok(Ok(_)) => Ok(started.elapsed()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        }
    }

    /// Probes the database while it is marked down, until `shutdown`: every host of `target`
    /// at once, and the first that answers and takes writes (unless `target` accepts any)
    /// ends the outage. When that is another host than the pool's (a failover promoted it), the
    /// pool, and with it the notification listener, connects there from now on.
    pub async fn probe(self, target: Arc<DbTarget>, shutdown: CancellationToken) {
        loop {
            if !self.is_down() {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = self.went_down() => continue,
                }
            }
            match target.find(PROBE_TIMEOUT).await {
                Ok((options, moved)) => {
                    if moved {
                        if let Some(pool) = self.inner.pool.get() {
                            pool.set_connect_options(options.clone());
                        }
                        tracing::warn!(
                            host = %target::describe(&options),
                            "following the database to another host: it takes writes now"
                        );
                    }
                    self.inner.down.send_replace(false);
                    tracing::info!("database reachable again");
                    continue;
                }
                Err(why) => tracing::debug!(%why, "database probe found no host to use"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(PROBE_INTERVAL) => {}
            }
        }
    }
}

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub min_connections: u32,
    pub acquire_timeout: Duration,
}

/// Opens a pool on the host of `target` in use, whose connections are retired after an
/// outage (see the module docs), and which `health` probes from now on. Every new connection
/// gets TCP keepalives ([`sockets`]) and, unless `target` accepts any server, is checked to
/// take writes: one that reached a standby is closed and reported as an outage, so the prober
/// looks for the primary.
pub async fn connect_pool(
    target: &DbTarget,
    settings: &PoolSettings,
    health: &DbHealth,
) -> Result<PgPool, sqlx::Error> {
    let watched = health.clone();
    let released = health.clone();
    let connected = health.clone();
    let writes = target.requires_writes();
    let endpoints = Arc::new(sockets::Endpoints::of(target.hosts()));
    let _ = health.inner.endpoints.set((*endpoints).clone());
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .min_connections(settings.min_connections)
        .acquire_timeout(settings.acquire_timeout)
        .after_connect(move |conn, _meta| {
            let health = connected.clone();
            let endpoints = endpoints.clone();
            Box::pin(async move {
                // One simple-protocol message: no prepared statement is left on the
                // connection, and a transaction-mode pooler serves it as a whole.
                let row = sqlx::Executor::fetch_one(
                    &mut *conn,
                    "select current_setting('transaction_read_only') = 'on', inet_client_port()",
                )
                .await?;
                let read_only: bool = sqlx::Row::try_get(&row, 0)?;
                let client_port: Option<i32> = sqlx::Row::try_get(&row, 1)?;
                if let Some(port) = client_port.and_then(|p| u16::try_from(p).ok()) {
                    sockets::adopt(&endpoints, port, &health.inner.sockets);
                }
                if writes && read_only {
                    health.report_lost();
                    return Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "the database server takes no writes (a standby); looking for the primary",
                    )));
                }
                Ok(())
            })
        })
        // A ping before every checkout doubles the round trips of every statement; connections
        // that predate an outage are retired instead.
        .test_before_acquire(false)
        .before_acquire(move |_conn, meta| {
            let keep = !watched.predates_failure(meta.age);
            Box::pin(async move { Ok(keep) })
        })
        // A connection given back after an outage was reported is closed, not pinged: the
        // ping of one to a server that froze would wait for as long as TCP does.
        .after_release(move |_conn, meta| {
            let keep = !released.predates_failure(meta.age);
            Box::pin(async move { Ok(keep) })
        })
        .connect_with(target.current())
        .await?;
    // A second pool on the same health (none today) keeps probing the first.
    let _ = health.inner.pool.set(pool.clone());
    Ok(pool)
}

/// At most how many connections [`HotConnections`] keeps between statements; never more than a
/// quarter of the pool, so the rest of the server always finds connections there.
pub const HOT_CONNECTIONS: usize = 4;
/// How long [`HotConnections`] uses a connection before giving it back to the pool (which then
/// applies its lifetime and outage rules to it).
const HOT_HOLD: Duration = Duration::from_secs(60);

/// A few pool connections kept out of the pool for the hot single statements, and reused most
/// recently used first (see the module docs).
///
/// A connection goes back on the stack only after its statement ran to an answer (success or
/// a database error). One whose statement was abandoned midway (its future dropped) or failed
/// on the connection itself goes back to the pool instead, which tests it. Connections opened
/// before a reported outage are given back to the pool when next taken, as the pool's own
/// checkout does, and so is every connection once the pool closes.
#[derive(Debug, Clone)]
pub struct HotConnections {
    inner: Arc<HotInner>,
}

#[derive(Debug)]
struct HotInner {
    db: Db,
    health: DbHealth,
    /// Kept connections, the most recently used last, with when each was taken from the pool.
    idle: Mutex<Vec<(PoolConnection<Postgres>, Instant)>>,
    /// How many may be kept.
    cap: usize,
}

impl HotConnections {
    /// Keeps connections of `pool`, watched by `health`. Must be called within a Tokio
    /// runtime: a task gives the kept connections back when the pool closes.
    pub fn new(db: Db, health: DbHealth) -> HotConnections {
        let cap = HOT_CONNECTIONS.min(db.pool().options().get_max_connections() as usize / 4);
        let inner = Arc::new(HotInner {
            db,
            health,
            idle: Mutex::new(Vec::with_capacity(cap)),
            cap,
        });
        let weak = Arc::downgrade(&inner);
        let closed = inner.db.pool().close_event();
        tokio::spawn(async move {
            closed.await;
            if let Some(inner) = weak.upgrade() {
                inner.drain();
            }
        });
        HotConnections { inner }
    }

    /// A connection: the most recently used kept one, else one from the pool. Through a
    /// transaction-mode pooler, a transaction is open on it ([`Db::begin_on`]), which
    /// [`HotConnection::settle`] ends.
    pub async fn acquire(&self) -> Result<HotConnection, sqlx::Error> {
        let mut hot = self.take().await?;
        self.inner.db.begin_on(&mut hot).await?;
        Ok(hot)
    }

    async fn take(&self) -> Result<HotConnection, sqlx::Error> {
        loop {
            let popped = self.inner.idle.lock().expect("hot connections lock").pop();
            let Some((conn, taken)) = popped else { break };
            let age = taken.elapsed();
            if age < HOT_HOLD && !self.inner.health.predates_failure(age) {
                return Ok(HotConnection {
                    conn: Some(conn),
                    taken,
                    answered: false,
                    home: self.inner.clone(),
                });
            }
            // Dropped: back to the pool, which tests it.
            drop(conn);
        }
        let conn = self.inner.db.pool().acquire().await?;
        Ok(HotConnection {
            conn: Some(conn),
            taken: Instant::now(),
            answered: false,
            home: self.inner.clone(),
        })
    }

    /// How many connections are kept now.
    pub fn kept(&self) -> usize {
        self.inner.idle.lock().expect("hot connections lock").len()
    }
}

impl HotInner {
    /// Gives every kept connection back to the pool.
    fn drain(&self) {
        let kept = std::mem::take(&mut *self.idle.lock().expect("hot connections lock"));
        drop(kept);
    }
}

/// A connection from [`HotConnections`]; it derefs to the connection. Pass the statement's
/// outcome through [`HotConnection::settle`]: only then is it final (committed, behind a
/// transaction-mode pooler) and the connection kept for the next statement.
#[derive(Debug)]
pub struct HotConnection {
    conn: Option<PoolConnection<Postgres>>,
    taken: Instant,
    answered: bool,
    home: Arc<HotInner>,
}

impl HotConnection {
    /// Takes the outcome of the statement just run and returns it once it is final: through a
    /// transaction-mode pooler, the statement's transaction is committed first (a failed
    /// commit is the outcome then) or, after a failure, rolled back. Unless the connection
    /// itself failed, it is kept for the next statement when this is dropped.
    pub async fn settle<T>(&mut self, outcome: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        let db = self.home.db.clone();
        let outcome = match outcome {
            Ok(value) => db.end_on(self, true).await.map(|()| value),
            Err(e) => {
                let _ = db.end_on(self, false).await;
                Err(e)
            }
        };
        self.answered = outcome
            .as_ref()
            .err()
            .is_none_or(|e| !is_connection_error(e));
        outcome
    }
}

impl std::ops::Deref for HotConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl std::ops::DerefMut for HotConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for HotConnection {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let pool = self.home.db.pool();
        // A pool with every connection out may have others waiting: this one goes to them.
        let exhausted = pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections();
        if !self.answered || pool.is_closed() || exhausted {
            // Through a pooler, a statement abandoned before `settle` left its transaction
            // open: the connection is closed rather than handed to the next user in it.
            if !self.answered && self.home.db.is_pooled() {
                conn.close_on_drop();
            }
            return;
        }
        let mut idle = self.home.idle.lock().expect("hot connections lock");
        if idle.len() < self.home.cap {
            idle.push((conn, self.taken));
            return;
        }
        drop(idle);
        drop(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connection_failures_count() {
        assert!(is_connection_error(&sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))));
        assert!(!is_connection_error(&sqlx::Error::PoolTimedOut));
        assert!(
            is_connection_code("25006"),
            "read-only: the server was demoted"
        );
        assert!(is_connection_code("08006") && is_connection_code("57P01"));
        assert!(!is_connection_code("23505") && !is_connection_code("25P03"));
        assert!(!is_connection_error(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn connections_opened_before_a_failure_are_retired() {
        let health = DbHealth::default();
        assert!(!health.predates_failure(Duration::from_secs(3600)));
        health.report_lost();
        assert!(health.is_down());
        assert!(health.predates_failure(Duration::from_millis(50)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!health.predates_failure(Duration::from_millis(5)));
    }
}
