//! A job pushed to a queue on which a FETCH waits goes to that FETCH without a claim of its
//! own; it is never delivered twice, nor to a FETCH that has gone, on one replica or two.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::support::{TestApp, job};

/// Lets long polls started in the background reach the server and park.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// A long poll with `body`, started in the background and parked when this returns (the
/// server's line of long polls on its first queue has grown by one).
async fn parked(app: &TestApp, body: Value) -> tokio::task::JoinHandle<Value> {
    let queue = body["queues"][0].as_str().expect("a queue").to_owned();
    let before = app.parked_on(&queue);
    let fetch = app.spawn_fetch(&body);
    app.until_parked(&queue, before + 1).await;
    fetch
}

/// A worker registered on `relay` and told to quiet, long-polling it for `wait_ms` (parked
/// when this returns).
async fn quiet_worker_waiting(app: &TestApp, wait_ms: u64) -> tokio::task::JoinHandle<Value> {
    app.register(json!({"worker_id": "quiet-one", "queues": ["relay"]}))
        .await;
    app.sql("update ojs_worker set directive = 'quiet' where id = 'quiet-one'")
        .await;
    parked(
        app,
        json!({"queues": ["relay"], "wait_ms": wait_ms, "worker_id": "quiet-one"}),
    )
    .await
}

#[tokio::test]
async fn a_job_pushed_while_a_fetch_waits_is_handed_to_it_as_a_claim_would_start_it() {
    let app = TestApp::spawn().await;
    let waiting = parked(
        &app,
        json!({"queues": ["relay"], "count": 5, "wait_ms": 10000, "worker_id": "w1",
                "visibility_timeout_ms": 45000}),
    )
    .await;
    let pushed = app
        .push(json!({"type": "relay.ping", "args": [1], "queue": "relay",
                     "meta": {"trace_id": "t-1"}}))
        .await;
    let id = pushed["id"].as_str().unwrap().to_owned();
    // The enqueue's answer tells the truth: the job already started.
    assert_eq!(pushed["state"], "active");
    let fetched = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the hand-off reached the waiting FETCH")
        .unwrap();
    let jobs = fetched["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], id.as_str());
    assert_eq!(jobs[0]["state"], "active");
    assert_eq!(jobs[0]["attempt"], 1);

    let info = app.job(&id).await;
    assert_eq!(info["state"], "active");
    assert_eq!(info["attempt"], 1);
    assert_eq!(info["worker_id"], "w1");
    let reserved: (i64, bool, bool) = sqlx::query_as(
        "select reservation_ms, visible_until > started_at + interval '44 seconds',
                timeout_at > started_at
           from ojs_job_all where id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(
        reserved,
        (45_000, true, true),
        "the FETCH's reservation applies"
    );
    assert_eq!(
        app.job_event_types(&id).await,
        ["job.enqueued", "job.started"]
    );
    // The job.started event is the one a claim writes: worker and attempt.
    let started: (String, i32) = sqlx::query_as(
        "select data ->> 'worker_id', (data ->> 'attempt')::int4 from ojs_event_log
          where job_id = $1::uuid and type = 'job.started'",
    )
    .bind(&id)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(started, ("w1".to_owned(), 1));

    app.ack(json!({"job_id": id, "worker_id": "w1", "result": {"ok": true}}))
        .await
        .expect(200);
    assert_eq!(app.job(&id).await["state"], "completed");
}

#[tokio::test]
async fn no_job_is_handed_to_a_worker_told_to_stop_or_on_a_paused_queue() {
    let app = TestApp::spawn().await;
    let quiet = quiet_worker_waiting(&app, 1000).await;
    let id = app.push_id(job("relay.ping", "relay")).await;
    assert_eq!(app.job(&id).await["state"], "available");
    let answer = quiet.await.unwrap();
    assert_eq!(answer["jobs"].as_array().map(Vec::len), Some(0));

    app.post("/ojs/v1/queues/relay/pause", json!({}))
        .await
        .expect(200);
    let waiting = parked(
        &app,
        json!({"queues": ["relay"], "wait_ms": 1000, "worker_id": "w2"}),
    )
    .await;
    let paused = app.push_id(job("relay.ping", "relay")).await;
    assert_eq!(app.job(&paused).await["state"], "available");
    assert_eq!(
        waiting.await.unwrap()["jobs"].as_array().map(Vec::len),
        Some(0)
    );
}

/// A long poll arriving behind a parked one goes straight into line; a job made available
/// while the one ahead cannot take it (its worker was told to quiet) is still claimed, on the
/// poll timer at the latest.
#[tokio::test]
async fn a_fetch_that_parks_without_claiming_still_gets_a_job_the_fetch_ahead_cannot_take() {
    let app = TestApp::spawn_with(|c| {
        c.dispatch.fetch_poll_interval = std::time::Duration::from_millis(200)
    })
    .await;
    let quiet = quiet_worker_waiting(&app, 3000).await;
    let id = app.push_id(job("relay.ping", "relay")).await;
    assert_eq!(app.job(&id).await["state"], "available");
    let started = std::time::Instant::now();
    let fetched = app
        .fetch(json!({"queues": ["relay"], "wait_ms": 3000, "worker_id": "w2"}))
        .await;
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0]["id"], id.as_str());
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_eq!(
        quiet.await.unwrap()["jobs"].as_array().map(Vec::len),
        Some(0)
    );
}

#[tokio::test]
async fn a_job_for_a_fetch_whose_client_went_away_is_fetched_once_by_another() {
    let app = TestApp::spawn().await;
    // A client that gives up long before the FETCH's wait runs out.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = impatient
        .post(format!("{}/ojs/v1/workers/fetch", app.base))
        .json(&json!({"queues": ["relay"], "wait_ms": 20000, "worker_id": "gone"}))
        .send()
        .await;
    assert!(gone.is_err(), "the client timed out");
    settle().await;
    let id = app.push_id(job("relay.ping", "relay")).await;
    // Whether or not the server noticed the client leave before the push, the job ends up
    // available again, and the next FETCH gets it.
    let mut fetched = Vec::new();
    for _ in 0..50 {
        fetched = app
            .fetch(json!({"queues": ["relay"], "worker_id": "here"}))
            .await;
        if !fetched.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(fetched.len(), 1, "the job reaches a worker that is there");
    assert_eq!(fetched[0]["id"], id.as_str());
    assert_eq!(
        fetched[0]["attempt"], 1,
        "the undelivered hand-off is not an attempt"
    );
    assert_eq!(app.job(&id).await["worker_id"], "here");
    // Handed to nobody (the server saw the client leave), or handed and given back.
    let events = app.job_event_types(&id).await;
    assert!(
        events == ["job.enqueued", "job.started"]
            || events == ["job.enqueued", "job.started", "job.enqueued", "job.started"],
        "{events:?}"
    );
    assert!(
        app.fetch(json!({"queues": ["relay"], "worker_id": "here"}))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_job_given_back_is_available_in_its_old_place_with_no_attempt_counted() {
    let app = TestApp::spawn().await;
    let waiting = parked(
        &app,
        json!({"queues": ["relay"], "wait_ms": 10000, "worker_id": "w1"}),
    )
    .await;
    let handed = app.push_id(job("relay.ping", "relay")).await;
    assert_eq!(waiting.await.unwrap()["jobs"][0]["id"], handed.as_str());
    let later = app.push_id(job("relay.ping", "relay")).await;

    // What the server does when the FETCH it was written for has gone.
    let id = ojsd::job::JobId(handed.parse().unwrap());
    let job = ojsd::store::job::get(app.pool(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ojsd::store::job::give_back(app.pool(), std::slice::from_ref(&job))
            .await
            .unwrap(),
        1
    );
    // Only once: the attempt it was handed in is over.
    assert_eq!(
        ojsd::store::job::give_back(app.pool(), &[job])
            .await
            .unwrap(),
        0
    );

    let info = app.job(&handed).await;
    assert_eq!(info["state"], "available");
    assert_eq!(info["attempt"], 0);
    assert!(info.get("worker_id").is_none_or(Value::is_null), "{info}");
    assert_eq!(
        app.job_event_types(&handed).await,
        ["job.enqueued", "job.started", "job.enqueued"]
    );
    // It kept its place ahead of the job pushed after it, and its next attempt is the first.
    let next = app.fetch_one("relay", "w2").await;
    assert_eq!(next["id"], handed.as_str());
    assert_eq!(next["attempt"], 1);
    assert_eq!(app.fetch_one("relay", "w2").await["id"], later.as_str());
}

/// Two replicas on one database, long-polling workers on each, and jobs pushed to both:
/// every job is delivered exactly once, and completes on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn across_two_replicas_every_job_is_delivered_exactly_once() {
    let a = TestApp::spawn().await;
    let b = a.spawn_replica(|c| c.database.max_connections = 10).await;
    let b_url = b.base.clone();

    const JOBS: usize = 120;
    let delivered: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let mut workers = Vec::new();
    for (w, base) in [&a.base, &b_url, &a.base, &b_url, &a.base, &b_url]
        .into_iter()
        .enumerate()
    {
        let (client, base, delivered) = (a.client.clone(), base.clone(), delivered.clone());
        let worker = format!("w{w}");
        workers.push(tokio::spawn(async move {
            loop {
                let body: Value = client
                    .post(format!("{base}/ojs/v1/workers/fetch"))
                    .json(&json!({"queues": ["relay"], "count": 2, "wait_ms": 500,
                                  "worker_id": worker}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                for job in body["jobs"].as_array().into_iter().flatten() {
                    let id = job["id"].as_str().unwrap().to_owned();
                    delivered
                        .lock()
                        .await
                        .entry(id.clone())
                        .or_default()
                        .push(worker.clone());
                    let status = client
                        .post(format!("{base}/ojs/v1/workers/ack"))
                        .json(&json!({"job_id": id, "worker_id": worker}))
                        .send()
                        .await
                        .unwrap()
                        .status();
                    assert_eq!(status, 200, "{worker} holds {id}");
                }
                if delivered.lock().await.len() >= JOBS {
                    return;
                }
            }
        }));
    }
    settle().await;
    for n in 0..JOBS {
        let base = if n % 2 == 0 { &a.base } else { &b_url };
        let status = a
            .client
            .post(format!("{base}/ojs/v1/jobs"))
            .json(&json!({"type": "relay.ping", "args": [n], "queue": "relay"}))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 201);
        if n % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for w in workers {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("every job was delivered")
            .unwrap();
    }
    let delivered = delivered.lock().await;
    assert_eq!(delivered.len(), JOBS);
    for (id, to) in delivered.iter() {
        assert_eq!(to.len(), 1, "{id} was delivered to {to:?}");
    }
    let (completed, first_attempt): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where state = 'completed'),
                count(*) filter (where attempt = 1)
           from ojs_job_all",
    )
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!((completed, first_attempt), (JOBS as i64, JOBS as i64));
    let handed: i64 = sqlx::query_scalar(
        "select count(*) from ojs_event_log e
          where e.type = 'job.started'
            and exists (select 1 from ojs_event_log n
                         where n.job_id = e.job_id and n.type = 'job.enqueued' and n.xid = e.xid)",
    )
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert!(handed > 0, "some jobs were handed off");

    b.stop().await;
}
