//! The connections the hot statements keep between statements (`ojsd::db::HotConnections`), and
//! what a server that no longer takes writes does to them.

use std::time::Duration;

use ojsd::db::target::SessionAttrs;
use ojsd::db::{DbHealth, DbTarget, HotConnection, HotConnections, PoolSettings};
use sqlx::PgPool;

use crate::support::TestDb;

/// The backend behind `conn`, asked with a statement whose outcome is recorded.
async fn backend(conn: &mut HotConnection) -> Result<i32, sqlx::Error> {
    let pid = sqlx::query_scalar::<_, i32>("select pg_backend_pid()")
        .fetch_one(&mut **conn)
        .await;
    conn.settle(pid).await
}

/// The backend of the next connection `hot` hands out, asked with one statement; the
/// connection is put back (kept, if it answered) before this returns.
async fn next_backend(hot: &HotConnections) -> Result<i32, sqlx::Error> {
    let mut conn = hot.acquire().await.unwrap();
    backend(&mut conn).await
}

/// Two connections at once, each asked one statement, then both put back (the second last):
/// their backends.
async fn two_at_once(hot: &HotConnections) -> (i32, i32) {
    let mut first = hot.acquire().await.unwrap();
    let mut second = hot.acquire().await.unwrap();
    let pids = (
        backend(&mut first).await.unwrap(),
        backend(&mut second).await.unwrap(),
    );
    drop(first);
    drop(second);
    pids
}

/// A pool of `max_connections` watched by `health`.
async fn pool_of(db: &TestDb, health: &DbHealth, max_connections: u32) -> PgPool {
    ojsd::db::connect_pool(
        &DbTarget::new(vec![db.options.clone()], SessionAttrs::ReadWrite),
        &PoolSettings {
            max_connections,
            min_connections: 0,
            acquire_timeout: Duration::from_secs(5),
        },
        health,
    )
    .await
    .expect("pool")
}

/// Every connection of the pool has TCP keepalives: its socket's keepalive timer runs (the
/// kernel's table of TCP sockets shows timer 2, keepalive, for it) while it is idle.
#[tokio::test]
async fn pool_connections_have_tcp_keepalives() {
    let db = TestDb::new().await;
    let health = DbHealth::default();
    let pool = pool(&db, &health).await;
    let port: i32 = sqlx::query_scalar("select inet_client_port()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let local = format!(":{port:04X}");
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap()
        + &std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let socket = tcp
        .lines()
        .find(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 5 && fields[1].ends_with(&local) && fields[3] == "01"
        })
        .unwrap_or_else(|| panic!("no established socket from port {port}"));
    // Field 5 is `timer:expires`; 2 is the keepalive timer.
    let timer = socket.split_whitespace().nth(5).unwrap();
    assert!(timer.starts_with("02:"), "no keepalive timer: {socket}");
}

/// When the server stops answering, the pool's own connections are cut — a statement waiting
/// on one fails at once — and no other pool's in the same process.
#[tokio::test]
async fn an_unresponsive_server_cuts_this_pools_connections_only() {
    let db = TestDb::new().await;
    let (health, other_health) = (DbHealth::default(), DbHealth::default());
    let (pool, other) = (pool(&db, &health).await, pool(&db, &other_health).await);
    let mut conn = pool.acquire().await.unwrap();
    let mut bystander = other.acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let outcome = sqlx::query("select pg_sleep(30)").execute(&mut *conn).await;
        (outcome.map(drop), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    health.report_unresponsive();
    let (outcome, waited) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the statement still waits")
        .unwrap();
    assert!(
        outcome.as_ref().is_err_and(ojsd::db::is_connection_error),
        "{outcome:?}"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(health.is_down());
    let answered: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&mut *bystander)
        .await
        .expect("another pool's connection was cut");
    assert_eq!(answered, 1);
}

/// A pool of 8: two connections may be kept.
async fn pool(db: &TestDb, health: &DbHealth) -> PgPool {
    pool_of(db, health, 8).await
}

#[tokio::test]
async fn the_most_recently_used_connection_is_reused() {
    let db = TestDb::new().await;
    let health = DbHealth::default();
    let hot = HotConnections::new(pool(&db, &health).await.into(), health);
    let (first_pid, second_pid) = two_at_once(&hot).await;
    assert_ne!(first_pid, second_pid);
    assert_eq!(hot.kept(), 2);
    for _ in 0..3 {
        assert_eq!(next_backend(&hot).await.unwrap(), second_pid);
    }
    assert_eq!(hot.kept(), 2);
}

#[tokio::test]
async fn a_connection_is_kept_only_after_its_statement_was_answered() {
    let db = TestDb::new().await;
    let health = DbHealth::default();
    let hot = HotConnections::new(pool(&db, &health).await.into(), health);

    // Never asked anything: given back to the pool.
    drop(hot.acquire().await.unwrap());
    assert_eq!(hot.kept(), 0);

    // Abandoned midway (its future dropped): given back to the pool, which waits it out.
    let mut conn = hot.acquire().await.unwrap();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        sqlx::query("select pg_sleep(2)").execute(&mut *conn),
    )
    .await;
    assert!(abandoned.is_err(), "the statement should still be running");
    drop(conn);
    assert_eq!(hot.kept(), 0);

    // A database error leaves the connection usable: kept.
    let mut conn = hot.acquire().await.unwrap();
    let failed = sqlx::query("select 1/0").execute(&mut *conn).await;
    assert!(failed.is_err());
    let _ = conn.settle(failed).await;
    let pid = {
        let pid = backend(&mut conn).await.unwrap();
        drop(conn);
        pid
    };
    assert_eq!(hot.kept(), 1);

    // A connection that broke under its statement is not kept.
    sqlx::query("select pg_terminate_backend($1)")
        .bind(pid)
        .execute(&db.pool)
        .await
        .unwrap();
    assert!(next_backend(&hot).await.is_err());
    assert_eq!(hot.kept(), 0);
    assert_ne!(next_backend(&hot).await.unwrap(), pid);
}

#[tokio::test]
async fn connections_kept_from_before_an_outage_are_not_reused() {
    let db = TestDb::new().await;
    let health = DbHealth::default();
    let hot = HotConnections::new(pool(&db, &health).await.into(), health.clone());
    let before = next_backend(&hot).await.unwrap();
    assert_eq!(hot.kept(), 1);
    health.report_lost();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_ne!(next_backend(&hot).await.unwrap(), before);
}

#[tokio::test]
async fn closing_the_pool_gives_the_kept_connections_back() {
    let db = TestDb::new().await;
    let health = DbHealth::default();
    let pool = pool(&db, &health).await;
    let hot = HotConnections::new(pool.clone().into(), health);
    two_at_once(&hot).await;
    assert_eq!(hot.kept(), 2);
    tokio::time::timeout(Duration::from_secs(5), pool.close())
        .await
        .expect("the pool closes although connections were kept");
    assert_eq!(hot.kept(), 0);
    assert!(hot.acquire().await.is_err());
}

#[tokio::test]
async fn a_pool_with_every_connection_out_gets_the_hot_one_back() {
    let db = TestDb::new().await;
    let health = DbHealth::default();
    // A pool of 4 keeps at most one connection aside.
    let pool = pool_of(&db, &health, 4).await;
    let hot = HotConnections::new(pool.clone().into(), health);
    two_at_once(&hot).await;
    assert_eq!(hot.kept(), 1);

    // Every other connection of the pool is out: the kept one is all that is left, and a
    // connection that comes back from a hot statement now goes to the pool.
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(pool.acquire().await.unwrap());
    }
    let mut conn = hot.acquire().await.unwrap();
    backend(&mut conn).await.unwrap();
    assert_eq!(hot.kept(), 0);
    drop(conn);
    assert_eq!(hot.kept(), 0);
    tokio::time::timeout(Duration::from_secs(2), pool.acquire())
        .await
        .expect("the pool has a connection for others")
        .unwrap();
}

/// A server that stops taking writes — a primary demoted to a standby by a failover, played
/// here by `default_transaction_read_only` on the database and every session cut — is an
/// outage: requests are answered 503 with `Retry-After` (not 500), and the prober does not
/// take a server that answers but takes no writes for the primary. Once one takes writes again,
/// so does ojsd.
#[tokio::test]
async fn a_server_that_takes_no_writes_is_an_outage_until_a_primary_answers() {
    let app = crate::support::TestApp::spawn().await;
    app.push_id(crate::support::job("a.b", "ha")).await;
    let name = app.db.name.clone();
    app.admin_sql(&format!(
        "alter database \"{name}\" set default_transaction_read_only = on;
         select pg_terminate_backend(pid) from pg_stat_activity where datname = '{name}'"
    ))
    .await;
    // A connection the pool was opening at that moment may have read the database's settings
    // before the change and not yet be listed under the database: a second sweep, once such a
    // start-up is over, ends it too (connections started since are read-only anyway).
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.admin_sql(&format!(
        "select pg_terminate_backend(pid) from pg_stat_activity where datname = '{name}'"
    ))
    .await;

    // Every answer from now on is a 503 with Retry-After: the first statement fails on a cut
    // connection, and no read-only server is taken for the database coming back.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut answers = Vec::new();
    while std::time::Instant::now() < deadline {
        let resp = app
            .post("/ojs/v1/jobs", crate::support::job("a.b", "ha"))
            .await;
        answers.push((resp.status, resp.header("retry-after").is_some()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        answers
            .iter()
            .all(|&(status, retry)| status == 503 && retry),
        "{answers:?}"
    );

    app.admin_sql(&format!(
        "alter database \"{name}\" reset default_transaction_read_only"
    ))
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let resp = app
            .post("/ojs/v1/jobs", crate::support::job("a.b", "ha"))
            .await;
        if resp.status == 201 {
            break;
        }
        assert_eq!(resp.status, 503, "{}", resp.text);
        assert!(
            std::time::Instant::now() < deadline,
            "never took writes again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends SIGCONT to a stopped backend when dropped, whatever the test's outcome.
struct Stopped(i32);

impl Stopped {
    fn stop(pid: i32) -> Stopped {
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "could not stop backend {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// The listening connection is pinged: when its server freezes (here its backend is stopped
/// with SIGSTOP; a primary that vanished without a reset looks the same), the server notices
/// within seconds, listens again on a new connection, and a job enqueued from elsewhere (from
/// SQL, whose wake-up only a listener hears) wakes a long poll at once.
#[tokio::test]
async fn a_listener_whose_server_froze_is_replaced_within_seconds() {
    let app = crate::support::TestApp::spawn_with(|c| {
        c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(60_000)
    })
    .await;
    app.wait_for_listeners(1).await;
    let listener_pid = || async {
        sqlx::query_scalar::<_, i32>(
            "select pid from pg_stat_activity
              where datname = current_database() and application_name = 'ojsd-listener'
                and state <> 'idle in transaction' order by backend_start desc limit 1",
        )
        .fetch_optional(app.pool())
        .await
        .unwrap()
    };
    let frozen = listener_pid().await.expect("a listener");
    let stopped = Stopped::stop(frozen);
    let deadline = std::time::Instant::now()
        + ojsd::wakeup::LISTENER_PING_INTERVAL
        + ojsd::wakeup::LISTENER_PING_TIMEOUT
        + Duration::from_secs(5);
    loop {
        if listener_pid().await.is_some_and(|pid| pid != frozen) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no new listener");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(stopped);

    crate::support::app::assert_sql_enqueue_wakes_a_long_poll(
        &app.api,
        app.pool(),
        "thawed",
        Duration::from_secs(2),
    )
    .await;
}
