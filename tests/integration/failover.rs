//! Following a Postgres failover: a primary with a synchronous standby, both private clusters
//! on loopback; ojsd is given both hosts. The primary is killed (or frozen), the standby is
//! promoted, and ojsd must answer 503 meanwhile, follow the new primary within seconds, and
//! have lost nothing it acknowledged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojsd::config::Config;
use ojsd::db::embedded::{Access, Cluster};
use serde_json::json;
use sqlx::PgPool;

use crate::support::app::Served;
use crate::support::processes::{cluster_dir, free_port, test_settings};

/// How long ojsd may take to take writes on the promoted standby, counted from the promotion.
/// (A frozen primary costs the listener's ping and the probe's timeout on top of a crash.)
const FOLLOW_WITHIN: Duration = Duration::from_secs(20);

/// A primary and its synchronous standby.
struct Pair {
    primary: Cluster,
    standby: Cluster,
    dirs: [PathBuf; 2],
}

impl Pair {
    fn start() -> Pair {
        let dirs = [cluster_dir(), cluster_dir()];
        let mut primary = Cluster::open(&dirs[0], Access::Loopback(free_port()))
            .unwrap_or_else(|e| panic!("this test runs private PostgreSQL clusters: {e:#}"));
        let mut settings = test_settings();
        // Every commit waits for the standby: what a failover must not lose.
        settings.push(("synchronous_standby_names", "*".to_owned()));
        primary.start(&settings).expect("start the primary");
        let mut standby = Cluster::standby_of(&primary, &dirs[1], Access::Loopback(free_port()))
            .expect("make the standby");
        standby.start(&test_settings()).expect("start the standby");
        Pair {
            primary,
            standby,
            dirs,
        }
    }

    /// `postgres://…@primary,standby/ojs`: what ojsd is given.
    fn url(&self) -> String {
        format!(
            "postgres://{}@127.0.0.1:{},127.0.0.1:{}/ojs?sslmode=disable&target_session_attrs=read-write",
            ojsd::db::embedded::SUPERUSER,
            self.primary.port(),
            self.standby.port()
        )
    }

    /// A pool on `database` of `cluster`.
    async fn pool(cluster: &Cluster, database: &str) -> PgPool {
        let url = format!(
            "postgres://{}@127.0.0.1:{}/{database}?sslmode=disable",
            ojsd::db::embedded::SUPERUSER,
            cluster.port()
        );
        PgPool::connect(&url).await.expect("connect to a cluster")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = self.primary.kill();
        let _ = self.standby.kill();
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The processes of a server: its postmaster and every child of it.
fn server_processes(postmaster: u32) -> Vec<u32> {
    let mut pids = vec![postmaster];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces, so read after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

fn signal(pids: &[u32], signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pids:?}");
}

/// What producers saw: the ids of jobs acknowledged (201) with when their request was sent
/// and answered, and every other status.
#[derive(Default)]
struct Seen {
    accepted: Vec<(String, Instant, Instant)>,
    refused: Vec<u16>,
}

impl Seen {
    /// When the first enqueue sent after `at` was acknowledged.
    fn first_accepted_after(&self, at: Instant) -> Option<Instant> {
        self.accepted
            .iter()
            .filter(|(_, sent, _)| *sent >= at)
            .map(|(_, _, answered)| *answered)
            .min()
    }
}

/// How the primary goes away.
#[derive(Clone, Copy, Debug)]
enum Loss {
    Crash,
    Freeze,
}

async fn follow_the_primary(loss: Loss) {
    crate::support::app::init_test_logging();
    let mut pair = tokio::task::spawn_blocking(Pair::start).await.unwrap();
    let primary_pool = Pair::pool(&pair.primary, "postgres").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    // Only a synchronous standby promises to hold every acknowledged commit.
    loop {
        let sync: Option<String> =
            sqlx::query_scalar("select sync_state from pg_stat_replication limit 1")
                .fetch_optional(&primary_pool)
                .await
                .unwrap();
        if sync.as_deref() == Some("sync") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never became synchronous"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    primary_pool.close().await;

    let served = Served::start({
        let mut c = Config::default();
        c.database.url = pair.url();
        c.server.listen_addr = "127.0.0.1:0".parse().unwrap();
        c.database.acquire_timeout = std::time::Duration::from_millis(1000);
        c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(60_000);
        c
    })
    .await;
    let api = served.api.clone();

    // A job claimed before the failover and not acknowledged must come through it.
    api.push(json!({"type": "a.b", "args": [], "queue": "claimed"}))
        .await;
    let claimed = api.fetch_one("claimed", "w1").await;

    // Producers enqueue without pause throughout.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let producing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producers: Vec<_> = (0..4)
        .map(|_| {
            let (api, seen, producing) = (api.clone(), seen.clone(), producing.clone());
            tokio::spawn(async move {
                while producing.load(std::sync::atomic::Ordering::Relaxed) {
                    let sent_at = Instant::now();
                    let sent = api
                        .try_post(
                            "/ojs/v1/jobs",
                            json!({"type": "a.b", "args": [], "queue": "load"}),
                        )
                        .await;
                    {
                        let mut seen = seen.lock().unwrap();
                        match sent {
                            Ok(resp) if resp.status == 201 => {
                                let id = resp.json["job"]["id"].as_str().unwrap().to_owned();
                                seen.accepted.push((id, sent_at, Instant::now()));
                            }
                            Ok(resp) => seen.refused.push(resp.status),
                            // The connection itself failing is not an answer the server gave.
                            Err(_) => seen.refused.push(0),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    // Load first: more than 10 enqueues accepted before the primary goes (however slow the
    // machine, within a minute).
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().accepted.len() <= 10 {
        assert!(
            Instant::now() < deadline,
            "few enqueues before the failover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The primary goes; the standby is promoted.
    let frozen = match loss {
        Loss::Crash => {
            tokio::task::block_in_place(|| pair.primary.kill()).expect("kill the primary");
            None
        }
        Loss::Freeze => {
            let pids = server_processes(pair.primary.server_pid().expect("the primary runs"));
            signal(&pids, "STOP");
            Some(pids)
        }
    };
    tokio::task::block_in_place(|| pair.standby.promote()).expect("promote the standby");
    let promoted = Instant::now();
    loop {
        if let Some(at) = seen.lock().unwrap().first_accepted_after(promoted) {
            eprintln!(
                "{loss:?}: writes taken again {:?} after the promotion",
                at - promoted
            );
            break;
        }
        assert!(
            promoted.elapsed() < FOLLOW_WITHIN,
            "ojsd did not follow the promoted standby within {FOLLOW_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    producing.store(false, std::sync::atomic::Ordering::Relaxed);
    for producer in producers {
        producer.await.unwrap();
    }

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    // Meanwhile the answer was 503 (with Retry-After, checked elsewhere), never a 500.
    assert!(
        seen.refused.iter().all(|&status| status == 503),
        "{:?}",
        seen.refused
    );
    // Every enqueue that got a 201 is on the new primary.
    let new_primary = Pair::pool(&pair.standby, "ojs").await;
    let ids: Vec<uuid::Uuid> = seen
        .accepted
        .iter()
        .map(|(id, _, _)| id.parse().unwrap())
        .collect();
    let found: i64 = sqlx::query_scalar("select count(*) from ojs_job where id = any($1)")
        .bind(&ids)
        .fetch_one(&new_primary)
        .await
        .unwrap();
    assert_eq!(found, ids.len() as i64, "acknowledged enqueues lost");
    // The claimed job is still claimed by its worker, and its ACK lands on the new primary.
    let job = api.job(claimed["id"].as_str().unwrap()).await;
    assert_eq!(job["state"], "active", "{job}");
    api.ack_job(&claimed, "w1").await.expect(200);
    // The notification listener listens on the new primary (it reconnects with a backoff; on a
    // loaded 2-core machine running the rest of the suite it has needed more than 10 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listening: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where application_name = 'ojsd-listener'",
        )
        .fetch_one(&new_primary)
        .await
        .unwrap();
        if listening > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no listener on the new primary");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Wake-ups reach a parked long poll through the new primary's notifications.
    crate::support::app::assert_sql_enqueue_wakes_a_long_poll(
        &api,
        &new_primary,
        "after",
        Duration::from_secs(3),
    )
    .await;

    // The frozen server is put down before ojsd stops: a background statement still waiting
    // on it would otherwise hold the shutdown for the TCP user timeout.
    if let Some(pids) = frozen {
        signal(&pids, "KILL");
    }
    served.stop().await;
    new_primary.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_primary_is_followed_to_the_promoted_standby_and_nothing_acknowledged_is_lost() {
    follow_the_primary(Loss::Crash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_primary_is_followed_to_the_promoted_standby_and_nothing_acknowledged_is_lost() {
    follow_the_primary(Loss::Freeze).await;
}
