//! Several real `ojsd` processes on one database behave as one server, including when one of
//! them dies (SIGKILL), is stopped (SIGTERM), or the database restarts under them.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::support::pooler::PgBouncer;
use crate::support::processes::{PrivateCluster, Replica};
use crate::support::{Client, TestDb};

/// Lease used by [`Replica::start`] (OJS_LEADER_LEASE_MS) and the follower's elect interval.
const LEASE: Duration = Duration::from_millis(2_000);
const ELECT_INTERVAL: Duration = Duration::from_millis(1_000);

/// A contract-checked client of `replica`, with timeouts: a replica may be gone.
fn api(replica: &Replica) -> Client {
    ojsd::app::install_tls();
    Client::with_http(
        &replica.base,
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap(),
    )
}

/// Whether the replica says it leads (`None`: it does not answer).
async fn leads(replica: &Client) -> Option<bool> {
    let resp = replica
        .try_send(reqwest::Method::GET, "/ojs/v1/health", None, &[])
        .await
        .ok()?;
    resp.json["instance"]["leader"].as_bool()
}

/// Waits until exactly one of `replicas` leads and returns its index; fails if two ever do.
async fn one_leader(replicas: &[&Replica], within: Duration) -> usize {
    let apis: Vec<Client> = replicas.iter().map(|r| api(r)).collect();
    let deadline = Instant::now() + within;
    loop {
        let mut leaders = Vec::new();
        for (i, r) in apis.iter().enumerate() {
            if leads(r).await == Some(true) {
                leaders.push(i);
            }
        }
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if let [one] = leaders[..] {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn three_replicas_keep_one_leader_through_a_sigkill() {
    let db = TestDb::new().await;
    let url = db.url();
    let mut replicas: Vec<Replica> = ["r1", "r2", "r3"]
        .into_iter()
        .map(|id| Replica::start(&url, id, &[("OJS_SKIP_MIGRATIONS", "true")]))
        .collect();
    let refs: Vec<&Replica> = replicas.iter().collect();
    let leader = one_leader(&refs, Duration::from_secs(10)).await;
    // Exactly one, and it stays that way.
    for _ in 0..20 {
        assert_eq!(one_leader(&refs, Duration::ZERO).await, leader);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (leader_id, held): (String, bool) =
        sqlx::query_as("select leader_id, held from ojs_leadership")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(held);
    assert_eq!(leader_id, replicas[leader].instance_id);

    // A scheduled job, due after the leader is gone: only a new leader's promoter can move it,
    // since nobody fetches.
    let survivor = api(&replicas[(leader + 1) % 3]);
    let id = survivor
        .push_id(json!({"type": "a.b", "args": [], "queue": "later", "scheduled_at": "+PT1S"}))
        .await;

    let killed = Instant::now();
    replicas[leader].kill();
    let rest: Vec<&Replica> = replicas
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, r)| r)
        .collect();
    let next = one_leader(&rest, Duration::from_secs(10)).await;
    let failover = killed.elapsed();
    eprintln!("replicas: new leader {failover:?} after SIGKILL of the old one (lease {LEASE:?})");
    assert!(
        failover <= LEASE + ELECT_INTERVAL,
        "took {failover:?} to elect a new leader"
    );
    let (new_id, term): (String, i64) =
        sqlx::query_as("select leader_id, term from ojs_leadership where held")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(new_id, rest[next].instance_id);
    assert_eq!(term, 2);

    let deadline = Instant::now() + Duration::from_secs(10);
    let leader = api(rest[next]);
    loop {
        let job = leader.job(&id).await;
        if job["state"] == "available" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "scheduled job never promoted: {job}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn no_job_is_lost_when_a_replica_is_killed_under_load() {
    kill_a_replica_under_load(false, None).await;
}

/// The same, both replicas reaching Postgres through PgBouncer in transaction mode
/// (`OJS_DATABASE_POOLER=transaction`; LISTEN over a direct `OJS_LISTEN_DATABASE_URL`).
#[tokio::test]
async fn no_job_is_lost_when_a_replica_is_killed_under_load_through_pgbouncer() {
    let Some(pooler) = PgBouncer::start() else {
        return;
    };
    kill_a_replica_under_load(false, Some(&pooler)).await;
}

/// The same drain, the jobs being the members of one batch workflow: its callbacks fire once,
/// after every member, with every member's result, though ACKs went through both replicas and
/// one of them died midway.
#[tokio::test]
async fn a_batch_fires_its_callbacks_once_when_a_replica_is_killed_under_load() {
    kill_a_replica_under_load(true, None).await;
}

async fn kill_a_replica_under_load(as_batch: bool, pooler: Option<&PgBouncer>) {
    const JOBS: usize = 300;
    const WORKERS: usize = 8;
    let db = TestDb::new().await;
    let direct = db.url();
    let mut env = vec![("OJS_SKIP_MIGRATIONS", "true")];
    let url = match pooler {
        Some(pooler) => {
            env.extend([
                ("OJS_DATABASE_POOLER", "transaction"),
                ("OJS_LISTEN_DATABASE_URL", direct.as_str()),
            ]);
            pooler.url(&db.name)
        }
        None => direct.clone(),
    };
    let mut a = Replica::start(&url, "ra", &env);
    let b = Replica::start(&url, "rb", &env);
    let jobs: Vec<Value> = (0..JOBS)
        .map(|i| json!({"type": "a.b", "args": [i], "queue": "load"}))
        .collect();
    if as_batch {
        api(&a)
            .post(
                "/ojs/v1/workflows",
                json!({"type": "batch", "jobs": jobs,
                       "callbacks": {"on_complete": {"type": "cb.done", "args": [], "queue": "cb"},
                                     "on_success": {"type": "cb.ok", "args": [], "queue": "cb"}}}),
            )
            .await
            .expect(201);
    } else {
        api(&a)
            .post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
            .await
            .expect(201);
    }

    let apis = Arc::new([api(&a), api(&b)]);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let handled = Arc::new(AtomicUsize::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (apis, acked, handled, stop) =
            (apis.clone(), acked.clone(), handled.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            // Half the workers start on each replica and move to the other when theirs dies.
            // The first two are tied to the first replica: each takes ten jobs, works on them
            // (heartbeating) until the replica dies, and dies with it, abandoning them; they
            // come back when their reservation runs out.
            let mut replica = w % 2;
            let pinned = w < 2;
            let worker_id = format!("worker-{w}");
            if pinned {
                let held = apis[0]
                    .fetch(
                        json!({"queues": ["load"], "count": 10, "worker_id": worker_id,
                                  "visibility_timeout_ms": 2000}),
                    )
                    .await;
                let ids: Vec<Value> = held.iter().map(|j| j["id"].clone()).collect();
                assert_eq!(ids.len(), 10);
                loop {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let beat = apis[0]
                        .try_post(
                            "/ojs/v1/workers/heartbeat",
                            json!({"worker_id": worker_id, "active_jobs": ids}),
                        )
                        .await;
                    if beat.is_err() {
                        return;
                    }
                }
            }
            while !stop.is_cancelled() {
                let fetched = apis[replica]
                    .try_post(
                        "/ojs/v1/workers/fetch",
                        json!({"queues": ["load"], "count": 5, "worker_id": worker_id,
                               "visibility_timeout_ms": 2000, "wait_ms": 200}),
                    )
                    .await;
                let body: Value = match fetched {
                    Ok(resp) if resp.status == 200 => resp.json,
                    _ => {
                        replica = 1 - replica;
                        continue;
                    }
                };
                for job in body["jobs"].as_array().cloned().unwrap_or_default() {
                    let id = job["id"].as_str().unwrap().to_owned();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    // Report until some replica answers; a 409 means the reservation was lost
                    // and the job went back to the queue for another worker.
                    loop {
                        let ack = apis[replica]
                            .try_post(
                                "/ojs/v1/workers/ack",
                                json!({"job_id": id, "worker_id": worker_id}),
                            )
                            .await;
                        match ack.map(|r| r.status) {
                            Ok(200) => {
                                acked.lock().await.push(id.clone());
                                break;
                            }
                            Ok(409) => break,
                            _ => replica = 1 - replica,
                        }
                    }
                    handled.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    // Kill one replica while work is in flight.
    while handled.load(Ordering::SeqCst) < JOBS / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.kill();
    let killed_at = Instant::now();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let completed: i64 =
            sqlx::query_scalar("select count(*) from ojs_job_all where state = 'completed'")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        if completed as usize == JOBS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {completed} of {JOBS} jobs completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = killed_at.elapsed();
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    // An ACK whose answer died with the replica may have committed: the worker's retry then
    // gets 409. So count completions in the database, not 200s.
    let acked = acked.lock().await;
    let unique: HashSet<&String> = acked.iter().collect();
    assert_eq!(unique.len(), acked.len(), "no job acknowledged twice");
    let completions: Vec<(String, i64)> = sqlx::query_as(
        "select job_id::text, count(*) from ojs_event_log where type = 'job.completed' group by job_id having count(*) <> 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        completions.is_empty(),
        "each job completed exactly once: {completions:?}"
    );
    let states: Vec<(String, i64)> = sqlx::query_as(
        "select state::text, count(*) from ojs_job_all where queue = 'load' group by state",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(states, [("completed".to_owned(), JOBS as i64)]);
    if as_batch {
        // Both callbacks, once each, released with all 300 results.
        let callbacks: Vec<(String, String, i64)> = sqlx::query_as(
            "select type, state::text,
                    json_array_length(extra -> 'parent_results')::int8
               from ojs_job_all where queue = 'cb' order by type",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(
            callbacks,
            [
                ("cb.done".to_owned(), "available".to_owned(), JOBS as i64),
                ("cb.ok".to_owned(), "available".to_owned(), JOBS as i64)
            ]
        );
        let fired: i64 = sqlx::query_scalar(
            "select count(*) from ojs_event where type = 'workflow.callback_fired'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(fired, 2);
        let missing: i64 = sqlx::query_scalar(
            "select count(*) from ojs_workflow_node where kind = 'job' and state <> 'completed'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(missing, 0, "every member recorded as completed");
    }
    let reclaimed: i64 = sqlx::query_scalar(
        r#"select count(*) from ojs_job_all where errors @> '[{"code": "visibility_timeout"}]'"#,
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        reclaimed > 0,
        "the dead workers' jobs came back through reclaim"
    );
    eprintln!(
        "replicas: {JOBS} jobs, 0 lost; {reclaimed} reclaimed after their reservation ran out; \
         all done {drained:?} after the SIGKILL"
    );
    drop(b);
}

#[tokio::test]
async fn sigterm_finishes_in_flight_requests_resigns_and_exits_zero() {
    let db = TestDb::new().await;
    let url = db.url();
    // A long lease: only a resignation explains a quick takeover.
    let slow_lease = [
        ("OJS_SKIP_MIGRATIONS", "true"),
        ("OJS_LEADER_LEASE_MS", "20000"),
        ("OJS_LEADER_RENEW_INTERVAL_MS", "2000"),
        ("OJS_LEADER_ELECT_INTERVAL_MS", "10000"),
    ];
    let mut a = Replica::start(&url, "term-a", &slow_lease);
    assert_eq!(one_leader(&[&a], Duration::from_secs(10)).await, 0);
    let b = Replica::start(&url, "term-b", &slow_lease);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(leads(&api(&b)).await, Some(false));

    // A long poll in flight on the replica about to stop.
    let poll = {
        let api = api(&a);
        tokio::spawn(async move {
            let started = Instant::now();
            let resp = api
                .try_post(
                    "/ojs/v1/workers/fetch",
                    json!({"queues": ["idle"], "wait_ms": 20000, "worker_id": "in-flight"}),
                )
                .await
                .expect("the in-flight request is answered");
            (resp.status, started.elapsed())
        })
    };
    // In flight: a FETCH records its worker before it claims.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>("select count(*) from ojs_worker where id = 'in-flight'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the long poll reached the server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopped = Instant::now();
    a.terminate();
    let (status, waited) = poll.await.unwrap();
    assert_eq!(status, 200, "the long poll got its (empty) answer");
    assert!(waited < Duration::from_secs(10), "{waited:?}");

    let exit = tokio::task::spawn_blocking(move || {
        let status = a.wait_exit(Duration::from_secs(15));
        (status, a)
    })
    .await
    .unwrap();
    let (status, a) = exit;
    assert_eq!(status.code(), Some(0), "clean exit");
    assert!(a.logged("resigned maintenance leadership"));
    // It no longer accepts connections.
    assert!(
        api(&a)
            .try_send(reqwest::Method::GET, "/health", None, &[])
            .await
            .is_err()
    );
    // The other replica took over at once, not after the 20 s lease.
    assert_eq!(one_leader(&[&b], Duration::from_secs(3)).await, 0);
    let handover = stopped.elapsed();
    eprintln!("replicas: SIGTERM to exit 0 and new leader in {handover:?} (lease 20 s)");
    assert!(handover < Duration::from_secs(5), "{handover:?}");
}

#[tokio::test]
async fn a_postgres_restart_under_load_loses_nothing() {
    const JOBS: usize = 200;
    let cluster = Arc::new(
        tokio::task::spawn_blocking(PrivateCluster::start)
            .await
            .unwrap(),
    );
    let replica = Replica::start(
        &cluster.url("ojs"),
        "pg-restart",
        &[("OJS_DB_ACQUIRE_TIMEOUT_MS", "2000")],
    );
    let pg = api(&replica);
    let outcomes = Arc::new(Mutex::new(Vec::<(u16, bool, Duration)>::new()));

    // Producer: client-chosen ids, retried until acknowledged (201, or 409 duplicate when an
    // earlier try had committed but its answer was lost).
    let producer = {
        let (pg, outcomes) = (pg.clone(), outcomes.clone());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..JOBS {
                let id = uuid::Uuid::now_v7().to_string();
                loop {
                    let started = Instant::now();
                    let resp = pg
                        .try_post(
                            "/ojs/v1/jobs",
                            json!({"id": id, "type": "a.b", "args": [i], "queue": "pg"}),
                        )
                        .await
                        .expect("ojsd answers while the database is away");
                    let status = resp.status;
                    let retry_after = resp.headers.contains_key("retry-after");
                    outcomes
                        .lock()
                        .await
                        .push((status, retry_after, started.elapsed()));
                    if status == 201 || status == 409 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                ids.push(id);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ids
        })
    };
    // Consumer: fetch and acknowledge, retrying the same way.
    let consumer = {
        let (pg, outcomes) = (pg.clone(), outcomes.clone());
        tokio::spawn(async move {
            let mut done = HashSet::new();
            let deadline = Instant::now() + Duration::from_secs(90);
            while done.len() < JOBS && Instant::now() < deadline {
                let started = Instant::now();
                let resp = pg
                    .try_post(
                        "/ojs/v1/workers/fetch",
                        json!({"queues": ["pg"], "count": 10, "worker_id": "pg-worker",
                               "visibility_timeout_ms": 3000, "wait_ms": 100}),
                    )
                    .await
                    .expect("ojsd answers while the database is away");
                let status = resp.status;
                let retry_after = resp.headers.contains_key("retry-after");
                let body = resp.json;
                outcomes
                    .lock()
                    .await
                    .push((status, retry_after, started.elapsed()));
                if status != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                for job in body["jobs"].as_array().cloned().unwrap_or_default() {
                    let id = job["id"].as_str().unwrap().to_owned();
                    loop {
                        let started = Instant::now();
                        let resp = pg
                            .try_post(
                                "/ojs/v1/workers/ack",
                                json!({"job_id": id, "worker_id": "pg-worker"}),
                            )
                            .await
                            .expect("ojsd answers while the database is away");
                        let status = resp.status;
                        let retry_after = resp.headers.contains_key("retry-after");
                        outcomes
                            .lock()
                            .await
                            .push((status, retry_after, started.elapsed()));
                        match status {
                            200 => {
                                done.insert(id.clone());
                                break;
                            }
                            // Already completed by an earlier try whose answer was lost, or
                            // reclaimed meanwhile (it will be fetched again).
                            409 => break,
                            _ => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                }
            }
        })
    };

    // Restart Postgres while both run.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let outage = Instant::now();
    let handle = cluster.clone();
    tokio::task::spawn_blocking(move || handle.stop())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let handle = cluster.clone();
    tokio::task::spawn_blocking(move || handle.start_again())
        .await
        .unwrap();
    let downtime = outage.elapsed();

    let ids = producer.await.unwrap();
    consumer.await.unwrap();
    let pool = sqlx::PgPool::connect(&cluster.url("ojs")).await.unwrap();
    let completed: Vec<String> =
        sqlx::query_scalar("select id::text from ojs_job_all where state = 'completed'")
            .fetch_all(&pool)
            .await
            .unwrap();
    let completed: HashSet<String> = completed.into_iter().collect();
    let missing: Vec<&String> = ids.iter().filter(|id| !completed.contains(*id)).collect();
    assert!(missing.is_empty(), "jobs lost or not finished: {missing:?}");
    let total: i64 = sqlx::query_scalar("select count(*) from ojs_job_all")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(total as usize, JOBS, "no job was created twice");

    let outcomes = outcomes.lock().await;
    let errors: Vec<&(u16, bool, Duration)> =
        outcomes.iter().filter(|(s, _, _)| *s >= 500).collect();
    assert!(
        errors
            .iter()
            .all(|(status, retry_after, _)| *status == 503 && *retry_after),
        "database errors are 503 with Retry-After: {errors:?}"
    );
    let slowest = outcomes.iter().map(|(_, _, d)| *d).max().unwrap();
    assert!(
        slowest < Duration::from_secs(6),
        "a request hung for {slowest:?}"
    );
    eprintln!(
        "replicas: Postgres down {downtime:?}: {} requests, {} answered 503, slowest {slowest:?}, \
         {JOBS} jobs, 0 lost",
        outcomes.len(),
        errors.len()
    );
    pg.get("/ready").await.expect(200);
    drop(replica);
}

#[tokio::test]
async fn cron_fires_each_occurrence_once_through_a_leader_kill_and_a_postgres_restart() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(PrivateCluster::start)
            .await
            .unwrap(),
    );
    let url = cluster.url("ojs");
    let env = [("OJS_DB_ACQUIRE_TIMEOUT_MS", "2000")];
    let mut replicas = vec![
        Replica::start(&url, "cron-1", &env),
        Replica::start(&url, "cron-2", &[("OJS_SKIP_MIGRATIONS", "true"), env[0]]),
    ];
    let refs: Vec<&Replica> = replicas.iter().collect();
    let leader = one_leader(&refs, Duration::from_secs(10)).await;
    let other = api(&replicas[1 - leader]);
    other
        .post(
            "/ojs/v1/cron",
            json!({"name": "each-second", "expression": "* * * * * *", "overlap_policy": "allow",
                   "job_template": {"type": "cron.tick", "args": [], "options": {"queue": "secs"}}}),
        )
        .await
        .expect(201);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The leader dies mid-stream; the other replica takes over within the lease.
    replicas[leader].kill();
    let survivor = &replicas[1 - leader];
    one_leader(&[survivor], Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Postgres goes away for two seconds under the new leader.
    let handle = cluster.clone();
    tokio::task::spawn_blocking(move || handle.stop())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let handle = cluster.clone();
    tokio::task::spawn_blocking(move || handle.start_again())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    api(survivor)
        .send_json(
            reqwest::Method::PATCH,
            "/ojs/v1/cron/each-second",
            &json!({"enabled": false}),
        )
        .await
        .expect(200);

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    // One job per occurrence, and one ledger row per job.
    let per_slot: Vec<(String, i64)> = sqlx::query_as(
        "select meta->>'cron_triggered_at', count(*) from ojs_job_all where queue = 'secs' group by 1 order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(per_slot.len() >= 5, "{per_slot:?}");
    assert!(per_slot.iter().all(|(_, n)| *n == 1), "{per_slot:?}");
    let runs: Vec<(chrono::DateTime<chrono::Utc>, i64)> = sqlx::query_as(
        "select scheduled_at, missed from ojs_cron_run where cron_name = 'each-second' and outcome = 'enqueued' order by scheduled_at",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(runs.len(), per_slot.len());
    // No occurrence lost beyond the one-catch-up rule: every second from the first run to the
    // last is a run, or one of the `missed` that the next run stands for.
    for pair in runs.windows(2) {
        let gap = (pair[1].0 - pair[0].0).num_seconds();
        assert_eq!(
            gap - 1,
            pair[1].1,
            "the seconds between two runs are the later one's missed: {runs:?}"
        );
    }
    let caught_up: i64 = runs.iter().map(|(_, missed)| missed).sum();
    eprintln!(
        "replicas: cron every second through a SIGKILL and a Postgres restart: {} runs, {} \
         occurrences folded into catch-up runs, no duplicate",
        runs.len(),
        caught_up
    );
    drop(replicas);
}

/// 32 workers on two replicas fetch jobs of a concurrency-limited key and a rate-limited key
/// at once: neither limit is ever exceeded, and every job runs.
#[tokio::test]
async fn rate_limit_keys_hold_across_two_replicas_under_32_fetchers() {
    const EACH: usize = 60;
    const WORKERS: usize = 32;
    let db = TestDb::new().await;
    let url = db.url();
    let a = Replica::start(&url, "ra", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let b = Replica::start(&url, "rb", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let mut jobs: Vec<Value> = (0..EACH)
        .map(|i| {
            json!({"type": "rl.c", "args": [i], "queue": "rl",
                   "rate_limit": {"key": "conc", "concurrency": 3}})
        })
        .collect();
    jobs.extend((0..EACH).map(|i| {
        json!({"type": "rl.r", "args": [i], "queue": "rl",
               "rate_limit": {"key": "rate", "rate": {"limit": 15, "period": "PT0.5S"}}})
    }));
    api(&a)
        .post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);

    let apis = Arc::new([api(&a), api(&b)]);
    // Jobs of key "conc" held by workers; counted out before the ACK is sent.
    let holding = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let most = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let starts = Arc::new(Mutex::new(Vec::<chrono::DateTime<chrono::Utc>>::new()));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (apis, holding, most, done, starts) = (
            apis.clone(),
            holding.clone(),
            most.clone(),
            done.clone(),
            starts.clone(),
        );
        workers.push(tokio::spawn(async move {
            let client = &apis[w % 2];
            let worker_id = format!("worker-{w}");
            let deadline = Instant::now() + Duration::from_secs(60);
            while done.load(Ordering::SeqCst) < 2 * EACH && Instant::now() < deadline {
                let jobs = client
                    .fetch(json!({"queues": ["rl"], "count": 2, "worker_id": worker_id}))
                    .await;
                if jobs.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let conc = jobs.iter().filter(|j| j["type"] == "rl.c").count() as i64;
                let now = holding.fetch_add(conc, Ordering::SeqCst) + conc;
                most.fetch_max(now, Ordering::SeqCst);
                for job in jobs.iter().filter(|j| j["type"] == "rl.r") {
                    let at = job["started_at"].as_str().unwrap().parse().unwrap();
                    starts.lock().await.push(at);
                }
                tokio::time::sleep(Duration::from_millis(4)).await;
                for job in &jobs {
                    if job["type"] == "rl.c" {
                        holding.fetch_sub(1, Ordering::SeqCst);
                    }
                    client.ack_job(job, &worker_id).await;
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 2 * EACH, "every job ran");
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "{} jobs of key conc ran at once",
        most.load(Ordering::SeqCst)
    );
    let mut starts = starts.lock().await.clone();
    starts.sort();
    assert_eq!(starts.len(), EACH);
    for (i, at) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .filter(|s| **s < *at + chrono::Duration::milliseconds(500))
            .count();
        assert!(
            within <= 15,
            "{within} starts of key rate within 0.5 s of {at}"
        );
    }
}

/// A step recorded through a replica that then dies (SIGKILL) before the job's ACK: the job's
/// reservation runs out, the other replica hands it to its next attempt with the step, which
/// the worker skips; a record of the step from the dead attempt's worker is refused.
#[tokio::test]
async fn a_step_recorded_before_a_replica_died_is_skipped_by_the_retry() {
    let db = TestDb::new().await;
    let url = db.url();
    let mut a = Replica::start(&url, "step-a", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let b = Replica::start(&url, "step-b", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let (api_a, api_b) = (api(&a), api(&b));
    let id = api_a
        .push_id(json!({"type": "order.saga", "args": [1], "queue": "saga",
                        "retry": {"max_attempts": 3, "initial_interval": "PT0.1S", "jitter": false}}))
        .await;
    let held = api_a
        .fetch(json!({"queues": ["saga"], "worker_id": "w-1", "visibility_timeout_ms": 1000}))
        .await;
    assert_eq!(held.len(), 1);
    // The step runs (a payment, say) and is recorded; the replica dies before the ACK.
    api_a
        .post(
            &format!("/ojs/v1/jobs/{id}/steps/charge"),
            json!({"attempt": 1, "worker_id": "w-1", "result": {"charge_id": "ch_42"}}),
        )
        .await
        .expect(201);
    a.kill();

    // Reclaimed by the surviving replica (its reaper and promoter), the job comes back.
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let jobs = api_b
            .fetch(json!({"queues": ["saga"], "worker_id": "w-2"}))
            .await;
        if let Some(job) = jobs.into_iter().next() {
            break job;
        }
        assert!(Instant::now() < deadline, "the job never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(job["id"], id.as_str());
    assert_eq!(job["attempt"], 2);
    // The worker skips the step: its result is here.
    assert_eq!(job["steps"]["charge"]["result"]["charge_id"], "ch_42");
    assert_eq!(job["steps"]["charge"]["attempt"], 1);
    // The dead attempt's worker, if it still ran somewhere, cannot record for it any more.
    api_b
        .post(
            &format!("/ojs/v1/jobs/{id}/steps/ship"),
            json!({"attempt": 1, "worker_id": "w-1"}),
        )
        .await
        .expect_error(409, "conflict");
    api_b
        .post(
            &format!("/ojs/v1/jobs/{id}/steps/ship"),
            json!({"attempt": 2, "worker_id": "w-2", "result": "trk"}),
        )
        .await
        .expect(201);
    api_b
        .ack(json!({"job_id": id, "worker_id": "w-2"}))
        .await
        .expect(200);
    let charges: i64 =
        sqlx::query_scalar("select count(*) from ojs_job_step where name = 'charge'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(charges, 1);
}
