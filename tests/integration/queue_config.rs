//! Queue configuration ([OJS queue configuration fields]): the config API and its layering,
//! defaults applied to new jobs, access rules, capacity bounds under concurrency, and dispatch
//! limits across workers and replicas.
//!
//! [OJS queue configuration fields]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#6-queue-configuration-fields

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::processes::Replica;
use crate::support::{Client, TestApp, count, job, statuses};

impl TestApp {
    async fn put(&self, path: &str, body: Value) -> crate::support::Resp {
        self.send(
            Method::PUT,
            path,
            Some(body.to_string().into_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    }

    async fn post_with(
        &self,
        path: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> crate::support::Resp {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.send(
            Method::POST,
            path,
            Some(body.to_string().into_bytes()),
            &all,
        )
        .await
    }

    async fn capacity_counter(&self, queue: &str) -> i64 {
        sqlx::query_scalar("select jobs from ojs_queue_capacity where queue = $1")
            .bind(queue)
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    /// Enqueues, fetches and ACKs a job of `queue`; the status INFO then answers for it.
    async fn ack_then_info_status(&self, queue: &str) -> u16 {
        let id = self.push_id(job("a.b", queue)).await;
        self.fetch_one(queue, "w1").await;
        self.ack(json!({"job_id": id, "worker_id": "w1"}))
            .await
            .expect(200);
        self.get(&format!("/ojs/v1/jobs/{id}")).await.status
    }

    async fn unfinished(&self, queue: &str) -> i64 {
        sqlx::query_scalar(
            "select count(*) from ojs_job where queue = $1 and state not in ('completed', 'cancelled', 'discarded')",
        )
        .bind(queue)
        .fetch_one(self.pool())
        .await
        .unwrap()
    }
}

#[tokio::test]
async fn config_resolves_system_then_default_then_queue_and_put_merges() {
    let app = TestApp::spawn().await;
    // System defaults, every field present.
    let d = app
        .get("/ojs/v1/queues/_default/config")
        .await
        .expect(200)
        .json;
    assert_eq!(d["name"], "_default");
    let c = &d["config"];
    for field in [
        "max_size",
        "max_size_bytes",
        "overflow_policy",
        "warning_threshold",
        "concurrency",
        "rate_limit",
        "visibility_timeout",
        "default_timeout",
        "default_retry",
        "retention",
        "dead_letter_queue",
        "dead_letter_max_size",
        "dead_letter_ttl",
        "allowed_job_types",
        "producers",
    ] {
        assert!(c.get(field).is_some(), "missing {field}: {c}");
    }
    assert_eq!(c["max_size"], Value::Null);
    assert_eq!(
        c["retention"],
        json!({"completed": "P7D", "discarded": "P30D", "cancelled": "P7D"})
    );

    app.put(
        "/ojs/v1/queues/_default/config",
        json!({"concurrency": 10, "retention": {"completed": "P1D"}, "default_retry": {"max_attempts": 5}}),
    )
    .await
    .expect(200);
    // An unknown queue is created by its config PUT.
    app.get("/ojs/v1/queues/payments")
        .await
        .expect_error(404, "not_found");
    let q = app
        .put(
            "/ojs/v1/queues/payments/config",
            json!({"concurrency": 20, "retention": {"cancelled": "PT1H"}}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(q["name"], "payments");
    assert_eq!(q["config"]["concurrency"], 20);
    assert_eq!(
        q["config"]["retention"],
        json!({"completed": "P1D", "discarded": "P30D", "cancelled": "PT1H"})
    );
    assert_eq!(q["config"]["default_retry"]["max_attempts"], 5);

    // Merge: other fields stay; null resets to the inherited value; nested fields merge.
    let q = app
        .put(
            "/ojs/v1/admin/queues/payments/config",
            json!({"concurrency": null, "retention": {"completed": "PT2H"}}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(q["config"]["concurrency"], 10);
    assert_eq!(q["config"]["retention"]["completed"], "PT2H");
    assert_eq!(q["config"]["retention"]["cancelled"], "PT1H");
    let shown = app.get("/ojs/v1/queues/payments").await.expect(200).json;
    assert_eq!(shown["config"], q["config"]);
    let got = app
        .get("/ojs/v1/queues/payments/config")
        .await
        .expect(200)
        .json;
    assert_eq!(got["config"], q["config"]);

    // A queue without its own values shows _default's.
    app.push(job("a.b", "plain")).await;
    let plain = app.get("/ojs/v1/queues/plain").await.expect(200).json;
    assert_eq!(plain["config"]["concurrency"], 10);

    let stored: Value = sqlx::query_scalar("select config from ojs_queue where name = 'payments'")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(
        stored,
        json!({"retention": {"completed": "PT2H", "cancelled": "PT1H"}})
    );
    let changed: Vec<Value> = sqlx::query_scalar(
        "select data -> 'changed_fields' from ojs_event_log where type = 'queue.config_updated' and subject = 'payments' order by xid, seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(
        changed,
        [
            json!(["concurrency", "retention"]),
            json!(["concurrency", "retention"])
        ]
    );

    // Explicit creation with a config.
    let created = app
        .post(
            "/ojs/v1/queues",
            json!({"name": "reports", "config": {"max_size": 5}}),
        )
        .await
        .expect(201)
        .json;
    assert_eq!(created["config"]["max_size"], 5);
}

#[tokio::test]
async fn config_errors_are_structured_and_change_nothing() {
    let app = TestApp::spawn().await;
    app.put("/ojs/v1/queues/q/config", json!({"max_size": 3}))
        .await
        .expect(200);
    for (body, field) in [
        (json!({"max_size": 0}), "$.max_size"),
        (json!({"max_size": "big"}), "$.max_size"),
        (json!({"overflow_policy": "explode"}), "$.overflow_policy"),
        (json!({"concurrency": -1}), "$.concurrency"),
        (json!({"rate_limit": {"limit": 10}}), "$.rate_limit.period"),
        (
            json!({"retention": {"completed": "a week"}}),
            "$.retention.completed",
        ),
        (json!({"dead_letter_queue": "q"}), "$.dead_letter_queue"),
        (
            json!({"allowed_job_types": "payment.*"}),
            "$.allowed_job_types",
        ),
        (json!({"flavour": "vanilla"}), "$.flavour"),
    ] {
        let err = app
            .put("/ojs/v1/queues/q/config", body.clone())
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(err.json["error"]["details"]["field"], field, "{body}");
    }
    app.put(
        "/ojs/v1/queues/q/config",
        json!({"default_retry": {"max_attempts": -2}}),
    )
    .await
    .expect_error(422, "validation_error");
    app.put("/ojs/v1/queues/Bad Name/config", json!({}))
        .await
        .expect_error(400, "invalid_request");
    app.send(
        Method::PUT,
        "/ojs/v1/queues/q/config",
        Some(b"[1]".to_vec()),
        &[("content-type", "application/json")],
    )
    .await
    .expect_error(400, "invalid_payload");
    app.get("/ojs/v1/queues/nope/config")
        .await
        .expect_error(404, "not_found");
    // `_default` is only a configuration.
    app.post("/ojs/v1/queues/_default/pause", json!({}))
        .await
        .expect_error(400, "invalid_request");
    app.post("/ojs/v1/queues", json!({"name": "_default"}))
        .await
        .expect_error(400, "invalid_request");
    app.post("/ojs/v1/jobs", job("a.b", "_default"))
        .await
        .expect_error(400, "invalid_request");
    let q = app.get("/ojs/v1/queues/q/config").await.expect(200).json;
    assert_eq!(q["config"]["max_size"], 3);
    assert_eq!(q["config"]["overflow_policy"], "reject");
}

#[tokio::test]
async fn queue_defaults_apply_to_new_jobs_and_job_values_win() {
    let app = TestApp::spawn().await;
    let before = app.push(job("a.b", "slow")).await;
    app.put(
        "/ojs/v1/queues/slow/config",
        json!({"default_timeout": 60, "visibility_timeout": 90,
               "default_retry": {"max_attempts": 7, "jitter": false}}),
    )
    .await
    .expect(200);
    let after = app.push(job("a.b", "slow")).await;
    assert_eq!(after["timeout"], 60);
    assert_eq!(after["retry"]["max_attempts"], 7);
    assert_eq!(after["retry"]["jitter"], false);
    assert_eq!(after["max_attempts"], 7);
    // Existing jobs keep what they were given.
    let old = app.job(before["id"].as_str().unwrap()).await;
    assert_eq!(old["timeout"], 1800);
    assert_eq!(old["retry"]["max_attempts"], 3);

    let own = app
        .push(
            json!({"type": "a.b", "args": [], "queue": "slow", "timeout": 5,
                     "retry": {"max_attempts": 2}}),
        )
        .await;
    assert_eq!(own["timeout"], 5);
    assert_eq!(own["retry"]["max_attempts"], 2);
    assert_eq!(
        own["retry"]["jitter"], false,
        "unset retry fields come from the queue"
    );

    // The queue's visibility timeout reserves the job for 90 s.
    let id = after["id"].as_str().unwrap();
    sqlx::query(
        "update ojs_job set state = 'cancelled', cancelled_at = now() where id <> $1::uuid",
    )
    .bind(id)
    .execute(app.pool())
    .await
    .unwrap();
    app.fetch_one("slow", "w1").await;
    let secs: f64 = sqlx::query_scalar(
        "select extract(epoch from visible_until - started_at)::float8 from ojs_job_all where id = $1::uuid",
    )
    .bind(id)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert!((secs - 90.0).abs() < 1.0, "reserved for {secs} s");
}

#[tokio::test]
async fn allowed_job_types_and_producers_are_enforced() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/payments/config",
        json!({"allowed_job_types": ["payment.*", "refund.issue"], "producers": ["billing-*"]}),
    )
    .await
    .expect(200);
    let billing = [("ojs-producer", "billing-api")];
    app.post_with("/ojs/v1/jobs", job("payment.charge", "payments"), &billing)
        .await
        .expect(201);
    app.post_with("/ojs/v1/jobs", job("refund.issue", "payments"), &billing)
        .await
        .expect(201);
    let err = app
        .post_with("/ojs/v1/jobs", job("email.send", "payments"), &billing)
        .await
        .expect_error(400, "JOB_TYPE_NOT_ALLOWED");
    assert_eq!(err.json["error"]["details"]["job_type"], "email.send");
    let err = app
        .post_with(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("payment.charge", "payments"), job("payment.x", "other"), job("email.send", "payments")]}),
            &billing,
        )
        .await
        .expect_error(400, "JOB_TYPE_NOT_ALLOWED");
    assert_eq!(err.json["error"]["details"]["index"], 2);
    // Producers: a missing or unlisted identity is refused.
    let err = app
        .post("/ojs/v1/jobs", job("payment.charge", "payments"))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(
        err.json["error"]["details"]["reason"],
        "producer_not_allowed"
    );
    app.post_with(
        "/ojs/v1/jobs",
        job("payment.charge", "payments"),
        &[("ojs-producer", "web")],
    )
    .await
    .expect_error(400, "invalid_request");
    assert_eq!(app.unfinished("payments").await, 2);
}

#[tokio::test]
async fn twenty_concurrent_producers_never_take_a_queue_past_max_size() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    app.put("/ojs/v1/queues/bounded/config", json!({"max_size": 100}))
        .await
        .expect(200);
    // 20 producers, 12 single pushes and one batch of 3 each: 300 jobs offered for 100 places.
    let mut tasks = Vec::new();
    for p in 0..20 {
        for i in 0..12 {
            tasks.push(app.spawn_post(
                "/ojs/v1/jobs",
                &json!({"type": "a.b", "args": [p, i], "queue": "bounded"}),
            ));
        }
        tasks.push(app.spawn_post(
            "/ojs/v1/jobs/batch",
            &json!({"jobs": [job("a.b", "bounded"), job("a.b", "bounded"), job("a.b", "bounded")]}),
        ));
    }
    let statuses = statuses(tasks).await;
    assert_eq!(
        count(&statuses, 201) + count(&statuses, 429),
        statuses.len(),
        "{statuses:?}"
    );
    assert_eq!(app.unfinished("bounded").await, 100);
    assert_eq!(app.capacity_counter("bounded").await, 100);
    let full = app
        .post("/ojs/v1/jobs", job("a.b", "bounded"))
        .await
        .expect_error(429, "QUEUE_FULL");
    assert_eq!(full.header("x-ojs-queue-depth"), Some("100"));
    assert_eq!(full.header("x-ojs-queue-bound"), Some("100"));
    assert!(full.header("retry-after").is_some());
    assert_eq!(full.json["error"]["details"]["depth"], 100);

    // Finishing jobs makes room again; the counter follows every kind of exit.
    let jobs = app
        .fetch(json!({"queues": ["bounded"], "count": 3, "worker_id": "w"}))
        .await;
    app.ack(json!({"job_id": jobs[0]["id"], "worker_id": "w"}))
        .await
        .expect(200);
    app.delete(&format!("/ojs/v1/jobs/{}", jobs[1]["id"].as_str().unwrap()))
        .await
        .expect(200);
    assert_eq!(app.capacity_counter("bounded").await, 98);
    app.push(job("a.b", "bounded")).await;
    app.push(job("a.b", "bounded")).await;
    app.post("/ojs/v1/jobs", job("a.b", "bounded"))
        .await
        .expect_error(429, "QUEUE_FULL");
    let stats = app
        .get("/ojs/v1/queues/bounded/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(stats["stats"]["depth"], 100);
    assert_eq!(stats["stats"]["max_depth"], 100);
    let metrics = app.get("/metrics").await.expect(200).text;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(r#"ojs_queue_overflow_total{queue="bounded",policy="reject"}"#)),
        "{metrics}"
    );
    let events = app.event_types().await;
    assert!(events.iter().any(|t| t == "queue.full"));
    assert!(events.iter().any(|t| t == "backpressure.rejected"));
}

#[tokio::test]
async fn a_queue_bounded_later_counts_the_jobs_it_already_has() {
    let app = TestApp::spawn().await;
    for _ in 0..4 {
        app.push(job("a.b", "late")).await;
    }
    app.put(
        "/ojs/v1/queues/late/config",
        json!({"max_size": 5, "max_size_bytes": 1000}),
    )
    .await
    .expect(200);
    assert_eq!(app.capacity_counter("late").await, 4);
    app.push(job("a.b", "late")).await;
    app.post("/ojs/v1/jobs", job("a.b", "late"))
        .await
        .expect_error(429, "QUEUE_FULL");
    // Unbounding stops the refusals; bounding again recounts.
    app.put(
        "/ojs/v1/queues/late/config",
        json!({"max_size": null, "max_size_bytes": null}),
    )
    .await
    .expect(200);
    app.push(job("a.b", "late")).await;
    app.put("/ojs/v1/queues/late/config", json!({"max_size": 6}))
        .await
        .expect(200);
    assert_eq!(app.capacity_counter("late").await, 6);
    app.post("/ojs/v1/jobs", job("a.b", "late"))
        .await
        .expect_error(429, "QUEUE_FULL");
}

#[tokio::test]
async fn max_size_bytes_bounds_the_total_size() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/bytes/config",
        json!({"max_size_bytes": 100}),
    )
    .await
    .expect(200);
    let big = "x".repeat(40);
    // args ["xxx…"] = 44 bytes, meta {} = 2: 46 bytes a job.
    app.push(json!({"type": "a.b", "args": [big], "queue": "bytes"}))
        .await;
    app.push(json!({"type": "a.b", "args": [big], "queue": "bytes"}))
        .await;
    let err = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [big], "queue": "bytes"}),
        )
        .await
        .expect_error(429, "QUEUE_FULL");
    assert_eq!(err.json["error"]["details"]["max_size_bytes"], 100);
    app.push(json!({"type": "a.b", "args": [], "queue": "bytes"}))
        .await;
}

#[tokio::test]
async fn drop_oldest_discards_the_oldest_waiting_jobs_to_make_room() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/ring/config",
        json!({"backpressure": {"max_depth": 3, "strategy": "drop_oldest"}}),
    )
    .await
    .expect(200);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            app.push_id(json!({"type": "a.b", "args": [i], "queue": "ring"}))
                .await,
        );
    }
    // The oldest is running: it is not dropped, the next oldest is.
    app.fetch_one("ring", "w1").await;
    ids.push(app.push_id(job("a.b", "ring")).await);
    let batch = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [job("a.b", "ring"), job("a.b", "ring")]}),
        )
        .await
        .expect(201);
    assert_eq!(batch.json["count"], 2);
    assert_eq!(app.job(&ids[0]).await["state"], "active");
    for dropped in &ids[1..3] {
        let j = app.job(dropped).await;
        assert_eq!(j["state"], "discarded");
        assert_eq!(j["error"]["code"], "overflow");
    }
    assert_eq!(app.job(&ids[3]).await["state"], "discarded");
    assert_eq!(app.unfinished("ring").await, 3);
    assert_eq!(app.capacity_counter("ring").await, 3);
    let reasons: Vec<String> = sqlx::query_scalar(
        "select data ->> 'reason' from ojs_event_log where type = 'job.discarded' order by xid, seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(reasons, ["overflow", "overflow", "overflow"]);
    let overflow = app
        .event_types()
        .await
        .iter()
        .filter(|t| *t == "queue.overflow")
        .count();
    assert_eq!(overflow, 3);
    // A request larger than the bound cannot be helped by dropping.
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [job("a.b", "ring"), job("a.b", "ring"), job("a.b", "ring"), job("a.b", "ring")]}),
    )
    .await
    .expect_error(429, "QUEUE_FULL");
}

#[tokio::test]
async fn block_waits_for_room_up_to_the_client_timeout() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/gate/config",
        json!({"max_size": 1, "overflow_policy": "block"}),
    )
    .await
    .expect(200);
    let first = app.push_id(job("a.b", "gate")).await;
    // No timeout: refused at once.
    app.post("/ojs/v1/jobs", job("a.b", "gate"))
        .await
        .expect_error(429, "QUEUE_FULL");
    // Waits, and gets in when the first job is cancelled 300 ms later.
    let started = Instant::now();
    let waiter = {
        let client = app.client.clone();
        let url = format!("{}/ojs/v1/jobs", app.base);
        tokio::spawn(async move {
            client
                .post(url)
                .header("ojs-block-timeout", "5")
                .json(&job("a.b", "gate"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.delete(&format!("/ojs/v1/jobs/{first}"))
        .await
        .expect(200);
    assert_eq!(waiter.await.unwrap(), 201);
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Still full: refused once the timeout passes.
    let started = Instant::now();
    app.post_with(
        "/ojs/v1/jobs",
        job("a.b", "gate"),
        &[("ojs-block-timeout", "1")],
    )
    .await
    .expect_error(429, "QUEUE_FULL");
    assert!(started.elapsed() >= Duration::from_secs(1));
    app.post_with(
        "/ojs/v1/jobs",
        job("a.b", "gate"),
        &[("ojs-block-timeout", "31")],
    )
    .await
    .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn pressure_headers_appear_past_the_warning_threshold() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/admin/queues/warn/config",
        json!({"backpressure": {"max_depth": 10, "warning_threshold": 0.5}}),
    )
    .await
    .expect(200);
    for _ in 0..4 {
        let r = app
            .post("/ojs/v1/jobs", job("a.b", "warn"))
            .await
            .expect(201);
        assert!(r.header("x-ojs-queue-pressure").is_none());
    }
    let r = app
        .post("/ojs/v1/jobs", job("a.b", "warn"))
        .await
        .expect(201);
    assert_eq!(r.header("x-ojs-queue-pressure"), Some("0.50"));
    assert_eq!(r.header("x-ojs-queue-depth"), Some("5"));
    assert_eq!(r.header("x-ojs-queue-bound"), Some("10"));
    assert_eq!(
        app.event_types()
            .await
            .iter()
            .filter(|t| *t == "backpressure.warning")
            .count(),
        1
    );
}

/// Fetches one job at a time from `base` until `stop`, holding each for `hold` before acking.
fn worker(
    api: Client,
    queue: &'static str,
    id: String,
    hold: Duration,
    stop: Arc<AtomicBool>,
    fetched: Arc<AtomicI64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let jobs = api.fetch(json!({"queues": [queue], "worker_id": id})).await;
            let Some(job) = jobs.first() else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            fetched.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(hold).await;
            api.ack_job(job, &id).await;
        }
    })
}

#[tokio::test]
async fn concurrency_three_with_ten_workers_never_has_more_than_three_active() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    app.put("/ojs/v1/queues/narrow/config", json!({"concurrency": 3}))
        .await
        .expect(200);
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": vec![job("a.b", "narrow"); 60]}),
    )
    .await
    .expect(201);
    let stop = Arc::new(AtomicBool::new(false));
    let fetched = Arc::new(AtomicI64::new(0));
    let workers: Vec<_> = (0..10)
        .map(|i| {
            worker(
                app.api.clone(),
                "narrow",
                format!("w{i}"),
                Duration::from_millis(20),
                stop.clone(),
                fetched.clone(),
            )
        })
        .collect();
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.unfinished("narrow").await > 0 && Instant::now() < deadline {
        let active: i64 = sqlx::query_scalar(
            "select count(*) from ojs_job where queue = 'narrow' and state = 'active'",
        )
        .fetch_one(app.pool())
        .await
        .unwrap();
        most = most.max(active);
        assert!(active <= 3, "{active} active jobs");
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(app.unfinished("narrow").await, 0, "all jobs ran");
    assert_eq!(most, 3, "the limit was reached");
    assert_eq!(fetched.load(Ordering::Relaxed), 60);
    // Concurrency 0 stops dispatch altogether.
    app.put("/ojs/v1/queues/narrow/config", json!({"concurrency": 0}))
        .await
        .expect(200);
    app.push(job("a.b", "narrow")).await;
    assert!(app.fetch(json!({"queues": ["narrow"]})).await.is_empty());
}

#[tokio::test]
async fn a_rate_limit_of_ten_per_second_holds_across_two_replicas() {
    let db = crate::support::TestDb::new().await;
    let url = db.url();
    let a = Replica::start(&url, "rate-a", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let b = Replica::start(&url, "rate-b", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let api_a = Client::new(&a.base);
    let api_b = api_a.of(&b.base);
    api_a
        .put(
            "/ojs/v1/queues/metered/config",
            json!({"rate_limit": {"limit": 10, "period": "PT1S"}}),
        )
        .await
        .expect(200);
    api_b
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": vec![job("a.b", "metered"); 200]}),
        )
        .await
        .expect(201);
    // Let replica b see the new configuration (it checks at least every 250 ms).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let fetched = Arc::new(AtomicI64::new(0));
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let api = if i % 2 == 0 { &api_a } else { &api_b };
            worker(
                api.clone(),
                "metered",
                format!("w{i}"),
                Duration::ZERO,
                stop.clone(),
                fetched.clone(),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let total = fetched.load(Ordering::Relaxed);
    let starts: Vec<f64> = sqlx::query_scalar(
        "select extract(epoch from started_at)::float8 from ojs_job_all where queue = 'metered' and started_at is not null order by started_at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(starts.len() as i64, total);
    // 10/s over the first 5 s: 50, within 10%.
    let first_five = starts.iter().take_while(|s| **s < starts[0] + 5.0).count();
    assert!(
        (45..=55).contains(&first_five),
        "{first_five} jobs started in 5 s"
    );
    // No window of one second saw more than 10 starts.
    for (i, t) in starts.iter().enumerate() {
        let in_window = starts[i..].iter().take_while(|s| **s < t + 1.0).count();
        assert!(in_window <= 10, "{in_window} starts within 1 s of {t}");
    }
    drop(a);
    drop(b);
}

#[tokio::test]
async fn a_unique_push_that_creates_nothing_succeeds_and_reset_clears_configuration() {
    let app = TestApp::spawn().await;
    let unique = json!({"type": "a.b", "args": [1], "queue": "u",
                        "unique": {"keys": ["type", "args"], "on_conflict": "ignore"}});
    let first = app.push(unique.clone()).await;
    let again = app.post("/ojs/v1/jobs", unique).await.expect(200);
    assert_eq!(again.json["job"]["id"], first["id"]);

    app.put(
        "/ojs/v1/queues/u/config",
        json!({"max_size": 1, "concurrency": 0}),
    )
    .await
    .expect(200);
    app.post("/ojs/v1/admin/reset", json!({})).await.expect(200);
    // Nothing of the old configuration is left: no bound, no limit.
    app.push(job("a.b", "u")).await;
    app.push(job("a.b", "u")).await;
    assert_eq!(
        app.fetch(json!({"queues": ["u"], "count": 2})).await.len(),
        2
    );
    let capacity: i64 = sqlx::query_scalar("select count(*) from ojs_queue_capacity")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(capacity, 0);
}

#[tokio::test]
async fn a_zero_completed_retention_deletes_jobs_on_ack_and_keeps_their_events() {
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/gone/config",
        json!({"max_size": 2, "retention": {"completed": "PT0S"}}),
    )
    .await
    .expect(200);

    // A single ACK asked for the job answers the completed job, and the row is gone.
    let id = app.push_id(job("a.b", "gone")).await;
    app.fetch_one("gone", "w1").await;
    let body = json!({"job_id": id, "worker_id": "w1", "result": {"sent": [1, 2]}});
    let acked = app
        .send(
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(body.to_string().into_bytes()),
            &[
                ("content-type", "application/json"),
                ("prefer", "return=representation"),
            ],
        )
        .await
        .expect(200);
    assert_eq!(acked.json["state"], "completed");
    assert_eq!(acked.json["job"]["state"], "completed");
    assert_eq!(acked.json["job"]["result"], json!({"sent": [1, 2]}));
    assert!(acked.json["completed_at"].is_string());
    assert!(acked.json["job"]["completed_at"].is_string());
    app.get(&format!("/ojs/v1/jobs/{id}"))
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        app.job_event_types(&id).await,
        ["job.enqueued", "job.started", "job.completed"]
    );
    let result: Option<Value> = sqlx::query_scalar(
        "select (data -> 'result')::jsonb from ojs_event_log where job_id = $1::uuid and type = 'job.completed'",
    )
    .bind(&id)
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(result, Some(json!({"sent": [1, 2]})));
    // A second ACK finds nothing to complete.
    app.ack(json!({"job_id": id, "worker_id": "w1"}))
        .await
        .expect_error(404, "not_found");
    // The queue's bound counts the job out.
    assert_eq!(app.capacity_counter("gone").await, 0);

    // The batch ACK deletes too, and answers every job.
    let ids = [
        app.push_id(job("a.b", "gone")).await,
        app.push_id(job("a.b", "gone")).await,
    ];
    app.post("/ojs/v1/jobs", job("a.b", "gone"))
        .await
        .expect_error(429, "QUEUE_FULL");
    let fetched = app
        .fetch(json!({"queues": ["gone"], "worker_id": "w2", "count": 2}))
        .await;
    assert_eq!(fetched.len(), 2);
    let batch = app
        .post(
            "/ojs/v1/workers/ack/batch",
            json!({"worker_id": "w2", "acks": [{"job_id": ids[0]}, {"job_id": ids[1], "result": 7}]}),
        )
        .await
        .expect(200);
    for item in batch.json["results"].as_array().unwrap() {
        assert_eq!(item["state"], "completed", "{item}");
    }
    assert_eq!(app.job_count().await, 0);
    assert_eq!(app.capacity_counter("gone").await, 0);

    // Other queues keep theirs; a NACK keeps the job whatever the retention.
    let kept = app.push_id(job("a.b", "kept")).await;
    app.fetch_one("kept", "w1").await;
    app.ack(json!({"job_id": kept, "worker_id": "w1"}))
        .await
        .expect(200);
    assert_eq!(app.job(&kept).await["state"], "completed");
    let failed = app
        .push_id(json!({"type": "a.b", "args": [], "options": {"queue": "gone", "retry": {"max_attempts": 1}}}))
        .await;
    app.fetch_one("gone", "w1").await;
    app.nack(json!({"job_id": failed, "worker_id": "w1", "error": {"message": "no"}}))
        .await
        .expect(200);
    assert_eq!(app.job(&failed).await["state"], "discarded");
}

#[tokio::test]
async fn the_default_layer_and_the_server_setting_choose_which_queues_keep_completed_jobs() {
    // `_default` forgets; a queue's own retention wins over it.
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/_default/config",
        json!({"retention": {"completed": "PT0S"}}),
    )
    .await
    .expect(200);
    app.put(
        "/ojs/v1/queues/kept/config",
        json!({"retention": {"completed": "P1D"}}),
    )
    .await
    .expect(200);
    assert_eq!(app.ack_then_info_status("other").await, 404);
    assert_eq!(app.ack_then_info_status("kept").await, 200);

    // A server keeping no completed job: queues opt back in.
    let app = TestApp::spawn_with(|c| c.retention.completed = Duration::ZERO).await;
    app.put(
        "/ojs/v1/queues/kept/config",
        json!({"retention": {"completed": "PT1H"}}),
    )
    .await
    .expect(200);
    assert_eq!(app.ack_then_info_status("default").await, 404);
    assert_eq!(app.ack_then_info_status("kept").await, 200);
}

#[tokio::test]
async fn the_bytes_a_job_counts_for_are_the_same_when_it_is_written_and_when_it_leaves() {
    // The enqueue statement adds `octet_length(args) + octet_length(meta)` in Rust's text, the
    // triggers subtract `ojs_job_size(args, meta)` in SQL: if they disagreed, a bounded queue's
    // byte counter would drift with every job (the twins of docs/src/architecture/twins.md).
    let app = TestApp::spawn().await;
    app.put(
        "/ojs/v1/queues/sized/config",
        json!({"max_size_bytes": 1_000_000}),
    )
    .await
    .expect(200);
    let bodies = [
        r#"{ "type" : "a.b" , "queue" : "sized", "args" : [ "é", 1 , { "k" : [ ] } ] }"#,
        r#"{"type":"a.b","queue":"sized","args":["\u00e9\n\t"],"meta":{ "trace" : "ü" }}"#,
        r#"{"type":"a.b","queue":"sized","args":[],"options":{"meta":{"a":1},"metadata":{"b":"ß"}}}"#,
    ];
    let mut ids = Vec::new();
    for body in bodies {
        let answer = app
            .send(
                Method::POST,
                "/ojs/v1/jobs",
                Some(body.as_bytes().to_vec()),
                &[("content-type", "application/json")],
            )
            .await
            .expect(201);
        ids.push(answer.json["job"]["id"].as_str().unwrap().to_owned());
    }
    let batch = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "a.b", "queue": "sized", "args": ["∑", {"x": null}], "meta": {"n": "ö"}},
                {"type": "a.b", "queue": "sized", "args": [1.50, "tab\there"]},
            ]}),
        )
        .await
        .expect(201);
    for job in batch.json["jobs"].as_array().unwrap() {
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    let (counted, summed): (i64, i64) = sqlx::query_as(
        "select c.bytes, (select sum(ojs_job_size(args, meta))::bigint from ojs_job where queue = 'sized')
           from ojs_queue_capacity c where c.queue = 'sized'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert!(counted > 0);
    assert_eq!(
        counted, summed,
        "written as counted, summed as the triggers count"
    );
    for id in &ids {
        app.delete(&format!("/ojs/v1/jobs/{id}")).await.expect(200);
    }
    let (jobs, bytes): (i64, i64) =
        sqlx::query_as("select jobs, bytes from ojs_queue_capacity where queue = 'sized'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!((jobs, bytes), (0, 0), "every job left as it came in");
}
