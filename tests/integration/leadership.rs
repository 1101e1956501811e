//! Leader election: the lease statements, and electors competing on one database.

use std::time::{Duration, Instant};

use ojsd::db::DbHealth;
use ojsd::leadership::{Elector, LeaderConfig, Role};
use ojsd::store::leader::{self, Election};
use ojsd::wakeup::Notifier;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::support::TestDb;

const LEASE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn lease_statements_are_scoped_to_the_term() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    assert_eq!(
        leader::elect(pool, "a", LEASE).await.unwrap(),
        Election::Elected { term: 1 }
    );
    match leader::elect(pool, "b", LEASE).await.unwrap() {
        Election::Held {
            leader_id,
            remaining,
        } => {
            assert_eq!(leader_id, "a");
            assert!(
                remaining > Duration::from_secs(9) && remaining <= LEASE,
                "{remaining:?}"
            );
        }
        other => panic!("b must not be elected: {other:?}"),
    }
    // Only the holder of the current term may renew or resign.
    assert!(!leader::reelect(pool, "b", 1, LEASE).await.unwrap());
    assert!(!leader::resign(pool, "b", 1).await.unwrap());
    assert!(!leader::reelect(pool, "a", 2, LEASE).await.unwrap());
    assert!(leader::reelect(pool, "a", 1, LEASE).await.unwrap());
    assert!(leader::resign(pool, "a", 1).await.unwrap());
    assert_eq!(leader::current(pool).await.unwrap(), None);
    // A resigned (or lapsed) lease is up for election at once, in a new term.
    assert_eq!(
        leader::elect(pool, "b", LEASE).await.unwrap(),
        Election::Elected { term: 2 }
    );
    assert!(!leader::reelect(pool, "a", 1, LEASE).await.unwrap());
    let (id, term, _) = leader::current(pool).await.unwrap().unwrap();
    assert_eq!((id.as_str(), term), ("b", 2));
}

#[tokio::test]
async fn a_lapsed_lease_can_be_taken_over() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    leader::elect(pool, "a", Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !leader::reelect(pool, "a", 1, LEASE).await.unwrap(),
        "a lapsed lease is not renewed"
    );
    assert_eq!(
        leader::elect(pool, "b", LEASE).await.unwrap(),
        Election::Elected { term: 2 }
    );
}

/// One elector with its own notifier, as a replica would run it.
struct Candidate {
    role: watch::Receiver<Role>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn candidate(db: &TestDb, id: &str, config: LeaderConfig) -> Candidate {
    let notifier = Notifier::default();
    let health = DbHealth::default();
    let stop = CancellationToken::new();
    tokio::spawn(
        notifier
            .clone()
            .listen(db.pool.clone(), health.clone(), stop.clone()),
    );
    let elector = Elector::new(
        db.pool.clone().into(),
        id.to_owned(),
        config,
        notifier,
        health,
    );
    let role = elector.subscribe();
    let task = tokio::spawn(elector.run(stop.clone()));
    Candidate { role, stop, task }
}

async fn wait_for_leader(candidates: &[&Candidate], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let leaders: Vec<usize> = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.role.borrow().is_leader())
            .map(|(i, _)| i)
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if let [one] = leaders[..] {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn config(lease_ms: u64) -> LeaderConfig {
    LeaderConfig {
        lease: Duration::from_millis(lease_ms),
        renew_interval: Duration::from_millis(lease_ms / 4),
        elect_interval: Duration::from_millis(lease_ms / 2),
    }
}

#[tokio::test]
async fn resigning_hands_over_at_once() {
    let db = TestDb::new().await;
    // A long lease: only the resignation can explain a quick takeover.
    let a = candidate(&db, "a", config(20_000));
    wait_for_leader(&[&a], Duration::from_secs(5)).await;
    let b = candidate(&db, "b", config(20_000));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!b.role.borrow().is_leader());

    let started = Instant::now();
    a.stop.cancel();
    a.task.await.unwrap();
    assert_eq!(wait_for_leader(&[&b], Duration::from_secs(5)).await, 0);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    b.stop.cancel();
}

#[tokio::test]
async fn a_crashed_leader_is_replaced_when_its_lease_runs_out() {
    let db = TestDb::new().await;
    let a = candidate(&db, "a", config(1_000));
    wait_for_leader(&[&a], Duration::from_secs(5)).await;
    let b = candidate(&db, "b", config(1_000));
    let c = candidate(&db, "c", config(1_000));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        wait_for_leader(&[&a, &b, &c], Duration::from_secs(1)).await,
        0
    );

    // Crash: the task dies without resigning.
    let started = Instant::now();
    a.task.abort();
    let next = wait_for_leader(&[&b, &c], Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1_000 + 500 + 500),
        "took {took:?}"
    );
    let (id, term, _) = leader::current(&db.pool).await.unwrap().unwrap();
    assert_eq!(id, ["b", "c"][next]);
    assert_eq!(term, 2);
    b.stop.cancel();
    c.stop.cancel();
}

#[tokio::test]
async fn a_leader_that_loses_its_lease_steps_down() {
    let db = TestDb::new().await;
    let a = candidate(&db, "a", config(2_000));
    wait_for_leader(&[&a], Duration::from_secs(5)).await;
    // Someone else holds the lease now (as after a partition the leader did not notice).
    sqlx::query("update ojs_leader set leader_id = 'usurper', term = term + 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while a.role.borrow().is_leader() {
        assert!(
            Instant::now() < deadline,
            "still leading after losing the lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.stop.cancel();
}
