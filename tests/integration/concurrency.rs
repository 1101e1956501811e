//! Exclusive claims under real concurrency, and fencing of stale claims.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::pooler::PgBouncer;
use crate::support::{Client, TestApp, TestDb, count, job, spawn_fetch, statuses};

/// Pushes `n` `load.item` jobs numbered 0.. to `queue`, in batches of 500; their ids.
async fn push_numbered(api: &Client, queue: &str, n: usize) -> HashSet<String> {
    let mut pushed = HashSet::new();
    let numbers: Vec<usize> = (0..n).collect();
    for chunk in numbers.chunks(500) {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"type": "load.item", "args": [i], "queue": queue}))
            .collect();
        let resp = api
            .post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
            .await
            .expect(201);
        for j in resp.json["jobs"].as_array().unwrap() {
            pushed.insert(j["id"].as_str().unwrap().to_owned());
        }
    }
    pushed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_fetchers_claim_each_of_2000_jobs_exactly_once() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 16).await;
    let pushed = push_numbered(&app.api, "contended", 4 * 500).await;
    assert_eq!(pushed.len(), 2000);

    let mut fetchers = Vec::new();
    for worker in 0..8 {
        let client = app.client.clone();
        let url = format!("{}/ojs/v1/workers/fetch", app.base);
        fetchers.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            let mut round = 0usize;
            loop {
                // Vary the batch size so claims interleave in different shapes.
                let count = 1 + (worker * 7 + round * 3) % 25;
                round += 1;
                let body: Value = client
                    .post(&url)
                    .json(&json!({"queues": ["contended"], "count": count, "worker_id": format!("w{worker}")}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let jobs = body["jobs"].as_array().unwrap();
                if jobs.is_empty() {
                    return claimed;
                }
                for j in jobs {
                    assert_eq!(j["state"], "active");
                    assert_eq!(j["attempt"], 1);
                    assert_eq!(j["worker_id"], format!("w{worker}"));
                    claimed.push(j["id"].as_str().unwrap().to_owned());
                }
            }
        }));
    }
    let mut all = Vec::new();
    for fetcher in fetchers {
        all.extend(fetcher.await.unwrap());
    }
    let unique: HashSet<String> = all.iter().cloned().collect();
    assert_eq!(all.len(), 2000, "every job handed out once, none twice");
    assert_eq!(unique, pushed);
    let active: i64 =
        sqlx::query_scalar("select count(*) from ojs_job where state = 'active' and attempt = 1")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(active, 2000);
}

/// Two replicas reaching Postgres through PgBouncer in transaction mode, eight workers
/// fetching from one and ACKing through the other: each of 1,000 jobs is claimed once and
/// completed once (every statement in a transaction of its own; no prepared statement left
/// behind for another client to collide with).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_through_pgbouncer_claim_and_complete_each_job_once() {
    let Some(pooler) = PgBouncer::start() else {
        return;
    };
    let db = TestDb::new().await;
    let (through, direct) = (pooler.url(&db.name), db.url());
    let pooled = |c: &mut ojsd::config::Config| {
        c.database.url = through.clone();
        c.database.pooler = ojsd::config::Pooler::Transaction;
        c.database.listen_url = Some(direct.clone());
        c.database.max_connections = 8;
    };
    let a = TestApp::spawn_on(db, pooled).await;
    let b = a.spawn_replica(pooled).await;
    let pushed = push_numbered(&a.api, "pooled", 4 * 250).await;
    let mut workers = Vec::new();
    for worker in 0..8 {
        let (client, bases) = (a.client.clone(), [a.base.clone(), b.base.clone()]);
        workers.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            for round in 0usize.. {
                let (fetch_at, ack_at) = (&bases[(worker + round) % 2], &bases[(worker + round + 1) % 2]);
                let count = 1 + (worker * 7 + round * 3) % 20;
                let body: Value = client
                    .post(format!("{fetch_at}/ojs/v1/workers/fetch"))
                    .json(&json!({"queues": ["pooled"], "count": count, "worker_id": format!("w{worker}")}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let jobs = body["jobs"].as_array().unwrap();
                if jobs.is_empty() {
                    break;
                }
                for j in jobs {
                    let id = j["id"].as_str().unwrap().to_owned();
                    let ack = client
                        .post(format!("{ack_at}/ojs/v1/workers/ack"))
                        .json(&json!({"job_id": id, "worker_id": format!("w{worker}")}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(ack.status(), 200, "ACK of {id} through the pooler");
                    claimed.push(id);
                }
            }
            claimed
        }));
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.unwrap());
    }
    let unique: HashSet<String> = all.iter().cloned().collect();
    assert_eq!(all.len(), 1000, "every job handed out once, none twice");
    assert_eq!(unique, pushed);
    let completed: Vec<(String, i64)> = sqlx::query_as(
        "select state::text, count(*) from ojs_job_all where queue = 'pooled' group by state",
    )
    .fetch_all(a.pool())
    .await
    .unwrap();
    assert_eq!(completed, [("completed".to_owned(), 1000)]);
    b.stop().await;
}

/// Behind a transaction-mode pooler without a session of its own (no
/// `OJS_LISTEN_DATABASE_URL`), a server has no listener: it polls every
/// `OJS_FETCH_POLL_INTERVAL_MS`. A long poll on one replica still gets a job pushed through the
/// other, and a client waiting for a result still gets it, within about that interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_listener_a_pooled_server_polls_for_jobs_and_results() {
    let Some(pooler) = PgBouncer::start() else {
        return;
    };
    let db = TestDb::new().await;
    let through = pooler.url(&db.name);
    let poll = Duration::from_millis(300);
    let pooled = |c: &mut ojsd::config::Config| {
        c.database.url = through.clone();
        c.database.pooler = ojsd::config::Pooler::Transaction;
        c.dispatch.fetch_poll_interval = poll;
    };
    let a = TestApp::spawn_on(db, pooled).await;
    let b = a.spawn_replica(pooled).await;
    let listeners: i64 = sqlx::query_scalar("select count(*) from ojs_listener")
        .fetch_one(a.pool())
        .await
        .unwrap();
    assert_eq!(listeners, 0, "no replica listens");

    let waiting = spawn_fetch(
        &a.client,
        &b.base,
        &json!({"queues": ["polled"], "count": 1, "wait_ms": 10000, "worker_id": "w"}),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pushed_at = std::time::Instant::now();
    let id = a.push_id(job("poll.me", "polled")).await;
    let fetched = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the long poll on the other replica found the job")
        .unwrap();
    assert_eq!(fetched["jobs"][0]["id"], id.as_str());
    let found_after = pushed_at.elapsed();

    let result = {
        let (client, url) = (
            a.client.clone(),
            format!("{}/ojs/v1/jobs/{id}/result?wait=true&timeout=10", a.base),
        );
        tokio::spawn(async move { client.get(url).send().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let acked_at = std::time::Instant::now();
    let ack = a
        .client
        .post(format!("{}/ojs/v1/workers/ack", b.base))
        .json(&json!({"job_id": id, "worker_id": "w", "result": {"ok": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(ack.status(), 200);
    let answer = tokio::time::timeout(Duration::from_secs(5), result)
        .await
        .expect("the result wait was answered")
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answered_after = acked_at.elapsed();
    // Within a poll interval or two (and the machine's load), not the 10 s of the wait.
    for (what, took) in [("job", found_after), ("result", answered_after)] {
        assert!(
            took < Duration::from_secs(3),
            "the {what} came after {took:?}"
        );
    }
    b.stop().await;
}

/// `worker` claims the job of `queue` for a second, and the reaper takes it back once that
/// second is over (as the leader's reaper would), so the job is available again.
async fn claim_and_lose(app: &TestApp, queue: &str, worker: &str) {
    let claimed = app
        .fetch(json!({"queues": [queue], "worker_id": worker, "visibility_timeout_ms": 1000}))
        .await;
    assert_eq!(claimed.len(), 1);
    let pass = app.reap_after(Duration::from_secs(5)).await;
    assert_eq!(pass.processed, 1, "the reaper took the claim back");
}

#[tokio::test]
async fn a_worker_whose_claim_was_reclaimed_cannot_ack_nack_or_heartbeat_it() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    claim_and_lose(&app, "q", "old").await;
    let reclaimed = app.job(&id).await;
    let again = app.fetch_one("q", "new").await;
    assert_eq!(again["attempt"], 2);

    let resp = app
        .ack(json!({"job_id": id, "worker_id": "old", "result": "late"}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(resp.json["error"]["details"]["worker_id"], "new");
    app.nack(json!({"job_id": id, "worker_id": "old", "error": {"message": "late"}}))
        .await
        .expect_error(409, "conflict");
    let resp = app
        .heartbeat(json!({"worker_id": "old", "job_id": id}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(resp.json["error"]["details"]["current_state"], "active");

    // Nothing changed: still the new worker's claim, no result, only the reclaim's error.
    let j = app.job(&id).await;
    assert_eq!(j["state"], "active");
    assert_eq!(j["worker_id"], "new");
    assert_eq!(j["visible_until"], again["visible_until"]);
    assert!(j.get("result").is_none());
    assert_eq!(j["errors"], reclaimed["errors"]);
    // The current holder is unaffected.
    app.ack(json!({"job_id": id, "worker_id": "new"}))
        .await
        .expect(200);
}

#[tokio::test]
async fn a_worker_whose_job_was_reclaimed_but_not_refetched_cannot_finish_it() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    claim_and_lose(&app, "q", "old").await;
    app.ack(json!({"job_id": id, "worker_id": "old"}))
        .await
        .expect_error(409, "conflict");
    app.ack(json!({"job_id": id}))
        .await
        .expect_error(409, "conflict");
    app.heartbeat(json!({"worker_id": "old", "job_id": id}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(app.job(&id).await["state"], "available");
}

#[tokio::test]
async fn a_worker_cannot_ack_nack_or_heartbeat_a_cancelled_job() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w").await;
    app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    let before = app.job(&id).await;
    app.ack(json!({"job_id": id, "worker_id": "w", "result": 1}))
        .await
        .expect_error(409, "conflict");
    app.nack(json!({"job_id": id, "worker_id": "w", "error": {"message": "m"}}))
        .await
        .expect_error(409, "conflict");
    let resp = app
        .heartbeat(json!({"worker_id": "w", "job_id": id}))
        .await
        .expect_error(409, "conflict");
    assert_eq!(resp.json["error"]["details"]["current_state"], "cancelled");
    assert_eq!(app.job(&id).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acks_of_one_job_succeed_exactly_once() {
    let app = TestApp::spawn().await;
    for _ in 0..10 {
        let id = app.push_id(job("a.b", "q")).await;
        app.fetch_one("q", "w").await;
        // Half acknowledge, half fail: exactly one of them may win.
        let tasks: Vec<_> = (0..6)
            .map(|i| {
                if i % 2 == 0 {
                    app.spawn_post("/ojs/v1/workers/ack", &json!({"job_id": id, "result": i}))
                } else {
                    app.spawn_post(
                        "/ojs/v1/workers/nack",
                        &json!({"job_id": id, "error": {"message": format!("n{i}")}}),
                    )
                }
            })
            .collect();
        let statuses = statuses(tasks).await;
        assert_eq!(count(&statuses, 200), 1, "{statuses:?}");
        assert!(
            statuses.iter().all(|s| *s == 200 || *s == 409),
            "{statuses:?}"
        );
        let j = app.job(&id).await;
        let errors = j
            .get("errors")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        assert!(errors <= 1, "at most the winning failure is recorded: {j}");
        // Leave nothing claimable behind for the next round.
        app.sql("update ojs_job set state = 'cancelled', cancelled_at = now(), visible_until = null where state <> 'completed' and state <> 'discarded'").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_racing_ack_leaves_one_consistent_outcome() {
    let app = TestApp::spawn().await;
    for _ in 0..10 {
        let id = app.push_id(job("a.b", "q")).await;
        app.fetch_one("q", "w").await;
        let cancel = {
            let request = app.client.delete(format!("{}/ojs/v1/jobs/{id}", app.base));
            tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
        };
        let ack = app.spawn_post(
            "/ojs/v1/workers/ack",
            &json!({"job_id": id, "worker_id": "w"}),
        );
        let (cancel, ack) = (cancel.await.unwrap(), ack.await.unwrap());
        let state = app.job(&id).await["state"].as_str().unwrap().to_owned();
        match state.as_str() {
            "completed" => assert_eq!((ack, cancel), (200, 409)),
            "cancelled" => assert_eq!((ack, cancel), (409, 200)),
            other => panic!("unexpected final state {other}"),
        }
    }
}

/// A job pushed to one replica wakes a worker long-polling another at once: the pushing replica
/// sees the other's listening connection and sends the NOTIFY. The waiting replica's own poll
/// timer is far longer than the fetch's wait, so only the notification can deliver the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_to_one_replica_wakes_a_long_poll_on_another() {
    let a = TestApp::spawn().await;
    let b = a
        .spawn_replica(|c| {
            c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(60_000)
        })
        .await;
    let b_url = b.base.clone();
    // Both replicas listening.
    a.wait_for_listeners(2).await;

    let waiting = spawn_fetch(
        &a.client,
        &b_url,
        &json!({"queues": ["relay"], "count": 1, "wait_ms": 20000}),
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let id = a.push_id(job("relay.ping", "relay")).await;
    let fetched = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("the long poll on the other replica was not woken")
        .unwrap();
    assert_eq!(fetched["jobs"][0]["id"], id.as_str());

    // Each replica's listener is registered in ojs_listener (not found in pg_stat_activity,
    // which a pooler hides); a replica that stops takes its registration with it.
    let registered = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from ojs_listener where seen_at > now() - interval '10 seconds'",
        )
        .fetch_one(a.pool())
        .await
        .unwrap()
    };
    assert_eq!(registered().await, 2);
    b.stop().await;
    assert_eq!(registered().await, 1, "the stopped replica's listener left");
}

/// A FETCH issued after a retry is due gets it even while another transaction (the promoter)
/// is promoting it: the FETCH's own promotion skips the locked row, so it waits for that
/// promotion to commit and claims again, instead of answering empty while the job turns
/// available a moment later.
#[tokio::test]
async fn a_fetch_waits_for_a_promotion_in_flight_instead_of_missing_its_job() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "inflight",
                        "retry": {"max_attempts": 3, "initial_interval": "PT1S", "jitter": false}}))
        .await;
    app.fetch_one("inflight", "w").await;
    app.nack(json!({"job_id": id, "error": {"message": "boom"}}))
        .await
        .expect(200);
    app.sql(&format!(
        "update ojs_job set next_retry_at = now() - interval '1 second' where id = '{id}'"
    ))
    .await;
    // The promoter's statement, not yet committed.
    let mut promoter = app.pool().begin().await.unwrap();
    sqlx::query(&format!(
        "update ojs_job set state = 'available', enqueued_at = next_retry_at, next_retry_at = null
          where id = '{id}'"
    ))
    .execute(&mut *promoter)
    .await
    .unwrap();
    let fetch = app.spawn_fetch(&json!({"queues": ["inflight"], "count": 1, "worker_id": "w"}));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    promoter.commit().await.unwrap();
    let got = fetch.await.unwrap();
    assert_eq!(got["jobs"][0]["id"], id.as_str(), "{got}");
    assert_eq!(got["jobs"][0]["attempt"], 2, "{got}");
}
