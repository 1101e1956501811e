//! `ojsd serve --embedded`: a private cluster made, started, used, stopped, and kept.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ojsd::config::Config;
use ojsd::db::embedded::{Access, Cluster};
use serde_json::json;

use crate::support::app::Served;
use crate::support::processes::cluster_dir;

/// Serves on `url`.
async fn serve(url: String) -> Served {
    Served::start({
        let mut c = Config::default();
        c.database.url = url;
        c.server.listen_addr = "127.0.0.1:0".parse().unwrap();
        c.maintenance.enabled = false;
        c
    })
    .await
}

#[tokio::test]
async fn an_embedded_cluster_is_made_once_listens_on_its_socket_only_and_keeps_its_jobs() {
    let dir = cluster_dir();
    let open = {
        let dir = dir.clone();
        move || {
            let mut cluster = Cluster::open(&dir, Access::SocketOnly).expect("open the cluster");
            cluster.start(&[]).expect("start the cluster");
            cluster
        }
    };
    let mut cluster = tokio::task::spawn_blocking(open.clone()).await.unwrap();
    let url = cluster.database_url("ojs");
    let served = serve(url.clone()).await;
    let id = served
        .api
        .push_id(json!({"type": "a.b", "args": [1]}))
        .await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let listening: String = sqlx::query_scalar("show listen_addresses")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(listening, "", "the embedded cluster opens no TCP port");
    pool.close().await;
    served.stop().await;

    // Stopped with ojsd; the same directory is opened again (no second initdb) with its data.
    let made = std::fs::metadata(cluster.pgdata().join("PG_VERSION"))
        .unwrap()
        .modified()
        .unwrap();
    cluster = tokio::task::spawn_blocking(move || {
        cluster.stop().expect("stop the cluster");
        assert!(!cluster.running(), "still running after stop");
        drop(cluster);
        open()
    })
    .await
    .unwrap();
    assert_eq!(
        std::fs::metadata(cluster.pgdata().join("PG_VERSION"))
            .unwrap()
            .modified()
            .unwrap(),
        made
    );
    let served = serve(cluster.database_url("ojs")).await;
    assert_eq!(served.api.job(&id).await["args"], json!([1]));
    served.stop().await;
    tokio::task::spawn_blocking(move || cluster.stop().expect("stop"))
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_process_at_a_time_uses_an_embedded_cluster() {
    let dir = cluster_dir();
    let first = Cluster::open(&dir, Access::SocketOnly).expect("open the cluster");
    let second = Cluster::open(&dir, Access::SocketOnly).expect_err("opened twice");
    assert!(
        format!("{second:#}").contains("another ojsd uses"),
        "{second:#}"
    );
    drop(first);
    // The lock is an flock on a file the cluster holds open: another test of this process that
    // forks a child in the same instant holds a copy of the descriptor until the child execs
    // (close-on-exec), so the lock may outlive `first` by that long.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Cluster::open(&dir, Access::SocketOnly) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert!(format!("{e:#}").contains("another ojsd uses"), "{e:#}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("open once the first is gone: {e:#}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ojsd serve --embedded` as a process: killed without a chance to stop its cluster, the next
/// start takes the cluster over (restarts it with its settings) and stops it on shutdown.
#[test]
fn a_cluster_left_running_by_a_killed_ojsd_is_taken_over_by_the_next() {
    let dir = cluster_dir();
    let start = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args(["serve", "--embedded"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("OJS_DATA_DIR", &dir)
            .env("OJS_LISTEN_ADDR", "127.0.0.1:0")
            .env("OJS_MAINTENANCE", "false")
            .env("OJS_LOG_FORMAT", "json")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ojsd");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("ojsd did not start: {seen:#?}"));
            if line.contains("ojsd listening") {
                break;
            }
            seen.push(line);
        }
        (child, rx, seen)
    };
    let (mut first, _, _) = start();
    first.kill().unwrap();
    first.wait().unwrap();
    let pid_file = dir.join("pgdata").join("postmaster.pid");
    assert!(pid_file.exists(), "the cluster stopped with a killed ojsd");

    let (second, rx, seen) = start();
    assert!(
        seen.iter().any(|line| line.contains("left running")),
        "{seen:#?}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut second = second;
    let exit = second.wait().unwrap();
    // The reader thread may still hold the last lines when the process is reaped: read until it
    // sees the end of the pipe (bounded, in case a child process kept the pipe open).
    let mut rest = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        rest.push(line);
    }
    assert!(exit.success(), "{exit}: {rest:#?}");
    assert!(
        rest.iter()
            .any(|line| line.contains("embedded PostgreSQL stopped")),
        "{rest:#?}"
    );
    assert!(!pid_file.exists(), "the cluster still runs");
    let _ = std::fs::remove_dir_all(&dir);
}
