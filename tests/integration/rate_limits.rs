//! Job-level rate limits by key (migration V20): a key's concurrency, rate and throttle hold
//! however many workers fetch at once, a limited key holds back only its own jobs, `drop`
//! discards what its key will not start, and the key's state is readable.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::support::{Client, TestApp};

fn keyed(t: &str, queue: &str, rate_limit: &Value) -> Value {
    json!({"type": t, "args": [], "options": {"queue": queue, "rate_limit": rate_limit}})
}

/// FETCHes `queue` until `n` jobs came back or `within` passed.
async fn fetch_until(app: &Client, queue: &str, n: usize, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(
            app.fetch(json!({"queues": [queue], "worker_id": "w", "count": n - got.len()}))
                .await,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got
}

#[tokio::test]
async fn a_keys_concurrency_holds_however_many_workers_fetch_at_once() {
    let app = TestApp::spawn().await;
    const JOBS: usize = 40;
    let jobs: Vec<Value> = (0..JOBS)
        .map(|_| keyed("c.job", "c", &json!({"key": "tenant-1", "concurrency": 2})))
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    // Each worker counts what it holds; a job is counted out before its ACK is sent, so the
    // count never runs ahead of the server's.
    let holding = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicI64::new(0));
    let mut workers = Vec::new();
    for w in 0..8 {
        let client: Client = (*app).clone();
        let (holding, most, done) = (holding.clone(), most.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            while done.load(Ordering::SeqCst) < JOBS as i64 && Instant::now() < deadline {
                let jobs = client
                    .fetch(json!({"queues": ["c"], "worker_id": format!("w{w}"), "count": 3}))
                    .await;
                if jobs.is_empty() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let now =
                    holding.fetch_add(jobs.len() as i64, Ordering::SeqCst) + jobs.len() as i64;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                for job in &jobs {
                    holding.fetch_sub(1, Ordering::SeqCst);
                    client.ack_job(job, &format!("w{w}")).await;
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), JOBS as i64, "every job ran");
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} jobs of the key ran at once",
        most.load(Ordering::SeqCst)
    );
    let key = app.get("/ojs/v1/rate-limits/tenant-1").await.expect(200);
    assert_eq!(key.json["concurrency"]["limit"], 2);
    assert_eq!(key.json["waiting_count"], 0);
}

#[tokio::test]
async fn a_rate_counts_starts_in_a_sliding_window() {
    let app = TestApp::spawn().await;
    let jobs: Vec<Value> = (0..7)
        .map(|_| {
            keyed(
                "r.job",
                "r",
                &json!({"key": "api", "rate": {"limit": 3, "period": "PT1S"}}),
            )
        })
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    let first = app
        .fetch(json!({"queues": ["r"], "worker_id": "w", "count": 10}))
        .await;
    assert_eq!(first.len(), 3);
    let rest = fetch_until(&app, "r", 4, Duration::from_secs(5)).await;
    assert_eq!(rest.len(), 4);
    let mut starts: Vec<DateTime<Utc>> = first
        .iter()
        .chain(&rest)
        .map(|j| j["started_at"].as_str().unwrap().parse().unwrap())
        .collect();
    starts.sort();
    for (i, at) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .filter(|s| **s < *at + chrono::Duration::seconds(1))
            .count();
        assert!(
            within <= 3,
            "{within} starts within a second of {at}: {starts:?}"
        );
    }
}

#[tokio::test]
async fn a_limited_key_holds_back_only_its_own_jobs() {
    let app = TestApp::spawn().await;
    let mut jobs: Vec<Value> = (0..50)
        .map(|_| keyed("k.a", "m", &json!({"key": "busy", "concurrency": 1})))
        .collect();
    jobs.push(keyed(
        "k.b",
        "m",
        &json!({"key": "quiet", "concurrency": 1}),
    ));
    jobs.push(json!({"type": "k.plain", "args": [], "queue": "m"}));
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    let got = app
        .fetch(json!({"queues": ["m"], "worker_id": "w", "count": 10}))
        .await;
    let mut types: Vec<&str> = got.iter().map(|j| j["type"].as_str().unwrap()).collect();
    types.sort();
    assert_eq!(types, ["k.a", "k.b", "k.plain"]);
    // The held jobs are available, as a client reads them.
    let held = app
        .get("/ojs/v1/admin/jobs?queue=m&state=available")
        .await
        .expect(200);
    assert_eq!(held.json["pagination"]["total"], 49, "{}", held.json);
    // The next of the busy key runs once the first has finished.
    let busy = got.iter().find(|j| j["type"] == "k.a").unwrap();
    app.ack_job(busy, "w").await;
    let next = fetch_until(&app, "m", 1, Duration::from_secs(5)).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0]["type"], "k.a");
    assert_eq!(next[0]["rate_limit"]["key"], "busy");
}

#[tokio::test]
async fn a_job_leaving_flight_makes_room_and_a_retry_waits_for_its_key_again() {
    let app = TestApp::spawn().await;
    let policy = json!({"key": "one", "concurrency": 1});
    let mut first = keyed("o.a", "o", &policy);
    first["options"]["retry"] =
        json!({"max_attempts": 3, "initial_interval": "PT0.2S", "jitter": false});
    app.post("/ojs/v1/jobs", first).await.expect(201);
    app.post("/ojs/v1/jobs", keyed("o.b", "o", &policy))
        .await
        .expect(201);
    let a = app.fetch_one("o", "w").await;
    assert_eq!(a["type"], "o.a");
    assert!(
        app.fetch(json!({"queues": ["o"], "worker_id": "w"}))
            .await
            .is_empty()
    );
    // A failure with retries left frees the key: the other job runs; the retry waits for it.
    app.nack(json!({"job_id": a["id"], "error": {"message": "again"}}))
        .await
        .expect(200);
    let b = fetch_until(&app, "o", 1, Duration::from_secs(5)).await;
    assert_eq!(b[0]["type"], "o.b");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        app.fetch(json!({"queues": ["o"], "worker_id": "w"}))
            .await
            .is_empty(),
        "the retry waits while the key is full"
    );
    app.ack_job(&b[0], "w").await;
    let again = fetch_until(&app, "o", 1, Duration::from_secs(5)).await;
    assert_eq!(again[0]["id"], a["id"]);
    assert_eq!(again[0]["attempt"], 2);
}

#[tokio::test]
async fn on_limit_drop_discards_what_the_key_does_not_start() {
    let app = TestApp::spawn().await;
    let policy = json!({"key": "dropper", "concurrency": 1, "on_limit": "drop"});
    let kept = app
        .post("/ojs/v1/jobs", keyed("d.a", "d", &policy))
        .await
        .expect(201);
    assert_eq!(kept.json["job"]["state"], "available");
    let dropped = app
        .post("/ojs/v1/jobs", keyed("d.b", "d", &policy))
        .await
        .expect(201);
    assert_eq!(
        dropped.json["job"]["state"], "discarded",
        "{}",
        dropped.json
    );
    assert_eq!(dropped.json["job"]["error"]["code"], "rate_limit_dropped");
    let id = dropped.json["job"]["id"].as_str().unwrap();
    let reasons: Vec<Value> = sqlx::query_scalar(
        "select data -> 'reason' from ojs_event_log where type = 'job.discarded' and job_id = $1::uuid",
    )
    .bind(id)
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(reasons, [json!("rate_limit_dropped")]);
    let events: i64 = sqlx::query_scalar(
        "select count(*) from ojs_event_log where type = 'rate_limit.dropped' and job_id = $1::uuid",
    )
    .bind(id)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(events, 1);
    // Not dead-lettered.
    let dead = app.get("/ojs/v1/dead-letter").await.expect(200);
    assert_eq!(dead.json["pagination"]["total"], 0, "{}", dead.json);
}

#[tokio::test]
async fn a_bad_rate_limit_is_a_400_naming_the_field_and_writes_nothing() {
    let app = TestApp::spawn().await;
    for (policy, path) in [
        (
            json!({"key": "-x", "concurrency": 1}),
            "$.options.rate_limit.key",
        ),
        (
            json!({"concurrency": -1}),
            "$.options.rate_limit.concurrency",
        ),
        (
            json!({"rate": {"limit": 5, "period": "soon"}}),
            "$.options.rate_limit.rate.period",
        ),
        (
            json!({"on_limit": "later", "concurrency": 1}),
            "$.options.rate_limit.on_limit",
        ),
        (json!({}), "$.options.rate_limit"),
        (json!("fast"), "$.options.rate_limit"),
    ] {
        let resp = app
            .post("/ojs/v1/jobs", keyed("v.a", "v", &policy))
            .await
            .expect_error(400, "invalid_request");
        let paths: Vec<&str> = resp.json["error"]["details"]["validation_errors"]
            .as_array()
            .map(|v| v.iter().filter_map(|e| e["path"].as_str()).collect())
            .unwrap_or_default();
        assert!(paths.contains(&path), "{policy}: {}", resp.json);
    }
    assert_eq!(app.job_count().await, 0);
    app.get("/ojs/v1/rate-limits/never-named")
        .await
        .expect_error(404, "not_found");
    // A segment that cannot be a key (here a NUL byte) names none.
    app.get("/ojs/v1/rate-limits/%00")
        .await
        .expect_error(404, "not_found");
    app.delete("/ojs/v1/rate-limits/%00/override")
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn the_key_and_the_push_tell_how_it_stands() {
    let app = TestApp::spawn().await;
    let policy =
        json!({"key": "stripe", "concurrency": 2, "rate": {"limit": 10, "period": "PT1M"}});
    let first = app
        .post("/ojs/v1/jobs", keyed("s.a", "s", &policy))
        .await
        .expect(201);
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    for _ in 0..3 {
        app.post("/ojs/v1/jobs", keyed("s.a", "s", &policy))
            .await
            .expect(201);
    }
    let fetched = app
        .fetch(json!({"queues": ["s"], "worker_id": "w", "count": 10}))
        .await;
    assert_eq!(fetched.len(), 2);
    let key = app.get("/ojs/v1/rate-limits/stripe").await.expect(200).json;
    assert_eq!(key["key"], "stripe");
    assert_eq!(
        key["concurrency"],
        json!({"limit": 2, "active": 2, "available": 0})
    );
    assert_eq!(key["rate"]["limit"], 10);
    assert_eq!(key["rate"]["period"], "PT1M");
    assert_eq!(key["rate"]["current_count"], 2);
    assert!(key["rate"]["window_resets_at"].is_string());
    assert_eq!(key["waiting_count"], 2);
    assert_eq!(key["limited_by"], "concurrency");
    let exceeded: i64 = sqlx::query_scalar(
        "select count(*) from ojs_event_log where type = 'rate_limit.exceeded' and subject = 'stripe'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(exceeded, 1, "once, when the key became limited");
    let listed = app.get("/ojs/v1/rate-limits").await.expect(200).json;
    let kinds: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["key"]);
    // The recorder is the process's: under `cargo test` other tests' servers share it, so the
    // gauges' values are whichever server was scraped last and the counter sums them all.
    let metrics = app.get("/metrics").await.expect(200).text;
    for name in [
        "ojs_rate_limit_keys ",
        "ojs_rate_limit_keys_limited ",
        "ojs_rate_limit_held_jobs ",
    ] {
        assert!(metrics.contains(name), "{name} in {metrics}");
    }
    let released: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ojs_rate_limit_released_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("ojs_rate_limit_released_total");
    assert!(released >= 2.0, "{released}");
    // The test reset forgets keys.
    app.post("/ojs/v1/admin/reset", json!({})).await.expect(200);
    app.get("/ojs/v1/rate-limits/stripe")
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn an_override_applies_besides_the_keys_limits_until_removed() {
    let app = TestApp::spawn().await;
    let policy = json!({"key": "partner", "concurrency": 5});
    for _ in 0..6 {
        app.post("/ojs/v1/jobs", keyed("p.a", "p", &policy))
            .await
            .expect(201);
    }
    // Five released, none claimed yet; the override takes back what it does not allow.
    let key = app
        .put("/ojs/v1/rate-limits/partner", json!({"concurrency": 1}))
        .await
        .expect(200)
        .json;
    assert_eq!(key["concurrency"]["limit"], 1);
    assert_eq!(key["override"]["concurrency"], 1);
    assert_eq!(key["waiting_count"], 5);
    let got = app
        .fetch(json!({"queues": ["p"], "worker_id": "w", "count": 10}))
        .await;
    assert_eq!(got.len(), 1);
    // The admin UI's form: a rate of `limit` per `period`, with an end.
    let key = app
        .put(
            "/ojs/v1/rate-limits/partner",
            json!({"limit": 100, "period": "PT1M", "expires_at": "2099-01-01T00:00:00Z"}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(key["override"]["limit"], 100);
    assert_eq!(key["override"]["period"], "PT1M");
    assert_eq!(
        key["concurrency"]["limit"], 5,
        "the concurrency override is gone"
    );
    app.put(
        "/ojs/v1/rate-limits/partner",
        json!({"limit": 0, "period": "PT1M"}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.put(
        "/ojs/v1/rate-limits/partner",
        json!({"rate": {"limit": 1}, "expires_at": ""}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.put("/ojs/v1/rate-limits/-bad", json!({"concurrency": 1}))
        .await
        .expect_error(400, "invalid_request");
    app.delete("/ojs/v1/rate-limits/partner/override")
        .await
        .expect(204);
    let key = app
        .get("/ojs/v1/rate-limits/partner")
        .await
        .expect(200)
        .json;
    assert_eq!(key["override"], Value::Null);
    let rest = fetch_until(&app, "p", 4, Duration::from_secs(5)).await;
    assert_eq!(rest.len(), 4, "the key's own limit again: 5 in flight");
    app.delete("/ojs/v1/rate-limits/nobody/override")
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn a_nacks_rate_limit_until_blocks_the_key_until_then() {
    let app = TestApp::spawn().await;
    let policy = json!({"key": "upstream", "concurrency": 10});
    for _ in 0..3 {
        app.post("/ojs/v1/jobs", keyed("u.a", "u", &policy))
            .await
            .expect(201);
    }
    let first = app.fetch_one("u", "w").await;
    let until = Utc::now() + chrono::Duration::milliseconds(1500);
    app.nack(json!({"job_id": first["id"], "error": {
            "message": "429 from upstream", "rate_limit_until": until.to_rfc3339()}}))
        .await
        .expect(200);
    let key = app
        .get("/ojs/v1/rate-limits/upstream")
        .await
        .expect(200)
        .json;
    assert!(key["blocked_until"].is_string(), "{key}");
    assert!(
        app.fetch(json!({"queues": ["u"], "worker_id": "w", "count": 10}))
            .await
            .is_empty(),
        "blocked: the released jobs were taken back"
    );
    let after = fetch_until(&app, "u", 2, Duration::from_secs(5)).await;
    assert_eq!(after.len(), 2);
    for job in &after {
        let started: DateTime<Utc> = job["started_at"].as_str().unwrap().parse().unwrap();
        assert!(
            started >= until - chrono::Duration::milliseconds(20),
            "{started} < {until}"
        );
    }
    let adjusted: i64 = sqlx::query_scalar(
        "select count(*) from ojs_event_log where type = 'rate_limit.dynamic_adjusted' and subject = 'upstream'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(adjusted, 1);
    app.nack(
        json!({"job_id": after[0]["id"], "error": {"message": "x", "rate_limit_until": "soon"}}),
    )
    .await
    .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn idle_keys_are_pruned_and_come_back_with_the_next_job() {
    let app = TestApp::spawn().await;
    let policy = json!({"key": "old", "concurrency": 1});
    let done = app
        .post("/ojs/v1/jobs", keyed("i.a", "i", &policy))
        .await
        .expect(201);
    let job = app.fetch_one("i", "w").await;
    assert_eq!(job["id"], done.json["job"]["id"]);
    app.ack_job(&job, "w").await;
    // A job of the same key waits, scheduled, while the key is pruned.
    let mut later = keyed("i.b", "i", &policy);
    later["scheduled_at"] = json!((Utc::now() + chrono::Duration::milliseconds(700)).to_rfc3339());
    app.post("/ojs/v1/jobs", later).await.expect(201);
    app.post(
        "/ojs/v1/jobs",
        keyed("i.c", "i", &json!({"key": "busy", "concurrency": 1})),
    )
    .await
    .expect(201);
    sqlx::query("update ojs_rate_key set updated_at = now() - interval '8 days'")
        .execute(app.pool())
        .await
        .unwrap();
    // Starts no limit counts any more: past the key's periods, or of a key that is gone.
    sqlx::raw_sql(
        "insert into ojs_rate_window (key, started_at, jobs)
         values ('key:busy', now() - interval '2 days', 1), ('key:gone', now(), 1),
                ('queue:i', now() - interval '2 days', 1)",
    )
    .execute(app.pool())
    .await
    .unwrap();
    crate::job_history::prune_once(&app).await;
    let starts: Vec<String> = sqlx::query_scalar(
        "select key from ojs_rate_window where key in ('key:busy', 'key:gone', 'queue:i') order by key",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(
        starts,
        ["queue:i"],
        "a queue's own starts are its limiter's to trim"
    );
    let keys: Vec<String> = sqlx::query_scalar("select key from ojs_rate_key order by key")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert_eq!(keys, ["busy"], "a key with a job in flight stays");
    // The scheduled job becomes available: its key comes back, and lets it run.
    let got = fetch_until(&app, "i", 2, Duration::from_secs(5)).await;
    let mut types: Vec<&str> = got.iter().map(|j| j["type"].as_str().unwrap()).collect();
    types.sort();
    assert_eq!(types, ["i.b", "i.c"]);
    let key = app.get("/ojs/v1/rate-limits/old").await.expect(200).json;
    assert_eq!(key["concurrency"]["limit"], 1);
}

#[tokio::test]
async fn a_keyless_policy_and_its_queues_own_limit_both_hold() {
    let app = TestApp::spawn().await;
    app.post(
        "/ojs/v1/queues",
        json!({"name": "mix", "config": {"rate_limit": {"limit": 2, "period": "PT1M"}}}),
    )
    .await
    .expect(201);
    for _ in 0..4 {
        // Key queue:mix, as the job names none: its own throttle, besides the queue's limit.
        app.post(
            "/ojs/v1/jobs",
            keyed("x.a", "mix", &json!({"max_per_second": 5})),
        )
        .await
        .expect(201);
    }
    let got = fetch_until(&app, "mix", 4, Duration::from_millis(1500)).await;
    assert_eq!(got.len(), 2, "the queue's 2 a minute");
    let key = app
        .get("/ojs/v1/rate-limits/queue:mix")
        .await
        .expect(200)
        .json;
    assert_eq!(key["throttle"]["limit"], 5);
}

#[tokio::test]
async fn a_held_job_no_enqueue_released_is_found_by_the_sweep() {
    let app = TestApp::spawn().await;
    let policy = json!({"key": "swept", "concurrency": 1});
    let first = app
        .post("/ojs/v1/jobs", keyed("w.a", "sw", &policy))
        .await
        .expect(201);
    let job = app.fetch_one("sw", "w").await;
    assert_eq!(job["id"], first.json["job"]["id"]);
    app.ack_job(&job, "w").await;
    // As an enqueue whose process died between its commit and its release leaves it: held,
    // its key unchanged and with no check to come.
    let canonical = first.json["job"]["rate_limit"].to_string();
    sqlx::query(
        "insert into ojs_job (id, type, queue, args, meta, priority, state, max_attempts, retry,
                              timeout_ms, extra, enqueued_at, rate_key)
         values (gen_random_uuid(), 'w.b', 'sw', '[]', '{}', 2, 'available', 3, '{}', 1000,
                 json_build_object('rate_limit', $1::json), now(), 'swept')",
    )
    .bind(&canonical)
    .execute(app.pool())
    .await
    .unwrap();
    let next_check: Option<DateTime<Utc>> =
        sqlx::query_scalar("select next_check_at from ojs_rate_key where key = 'swept'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(next_check, None);
    let got = fetch_until(&app, "sw", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["type"], "w.b");
}
