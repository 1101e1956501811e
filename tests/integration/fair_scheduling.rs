//! Fair scheduling ([OJS fair-scheduling extension]): the pools API and its validation, how the
//! dispatches of a pool's members split between queues (weighted, round-robin, strict with
//! starvation prevention, least-loaded) and between tenants, pool concurrency and isolation
//! (across replica processes too), and the scheduling statistics, events and metrics.
//!
//! Shares are measured on real dispatches: several workers fetch and acknowledge concurrently
//! over HTTP, and the test counts what they were given.
//!
//! [OJS fair-scheduling extension]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::support::processes::Replica;
use crate::support::{self, Client, TestApp, TestDb, job};

const POOLS: &str = "/ojs/v1/admin/pools";

/// PUTs pool `name`, asserts `status` (201 created, 200 replaced) and returns the pool.
async fn put_pool(api: &Client, name: &str, body: Value, status: u16) -> Value {
    api.put(&format!("{POOLS}/{name}"), body.clone())
        .await
        .expect(status)
        .json["pool"]
        .clone()
}

/// Registers `worker_id`, a member of `pool` when given (asserts 201).
async fn register(api: &Client, worker_id: &str, pool: Option<&str>, concurrency: Option<i64>) {
    let mut body = json!({"worker_id": worker_id});
    if let Some(pool) = pool {
        body["pool"] = json!(pool);
    }
    if let Some(concurrency) = concurrency {
        body["concurrency"] = json!(concurrency);
    }
    api.post("/ojs/v1/workers/register", body.clone())
        .await
        .expect(201);
}

/// `n` jobs on `queue`.
fn jobs_on(queue: &str, n: usize) -> Vec<Value> {
    vec![job("fs.work", queue); n]
}

/// `n` jobs of `tenant` on `queue`, at `priority` when given.
fn tenant_jobs(queue: &str, tenant: &str, n: usize, priority: Option<i64>) -> Vec<Value> {
    let mut one = json!({"type": "fs.work", "args": [], "queue": queue,
                         "meta": {"tenant_id": tenant}});
    if let Some(priority) = priority {
        one["priority"] = json!(priority);
    }
    vec![one; n]
}

/// Enqueues `jobs` in batches of 500 and returns their ids in order.
async fn enqueue(api: &Client, jobs: Vec<Value>) -> Vec<String> {
    let mut ids = Vec::with_capacity(jobs.len());
    for batch in jobs.chunks(500) {
        let resp = api
            .post("/ojs/v1/jobs/batch", json!({ "jobs": batch }))
            .await
            .expect(201);
        assert_eq!(resp.json["count"], batch.len());
        ids.extend(
            resp.json["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_owned()),
        );
    }
    ids
}

/// One job handed to one of the test's workers.
#[derive(Clone, Debug)]
struct Dispatch {
    id: String,
    queue: String,
    tenant: Option<String>,
}

/// What a set of workers dispatched; they stop at `target` dispatches, at `deadline`, or when
/// told to.
struct Run {
    target: usize,
    deadline: Instant,
    stop: AtomicBool,
    count: AtomicUsize,
    dispatched: Mutex<Vec<Dispatch>>,
}

impl Run {
    /// A run of at most `target` dispatches and at most `within` (a safeguard: a run that does
    /// not reach its target fails the test's own assertions, it does not hang).
    fn new(target: usize, within: Duration) -> Arc<Run> {
        Arc::new(Run {
            target,
            deadline: Instant::now() + within,
            stop: AtomicBool::new(false),
            count: AtomicUsize::new(0),
            dispatched: Mutex::new(Vec::new()),
        })
    }

    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self.count.load(Ordering::Relaxed) >= self.target
            || Instant::now() >= self.deadline
    }

    fn finish(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    fn record(&self, jobs: &[Value]) {
        let mut dispatched = self.dispatched.lock().unwrap();
        for j in jobs {
            dispatched.push(Dispatch {
                id: j["id"].as_str().unwrap().to_owned(),
                queue: j["queue"].as_str().unwrap().to_owned(),
                tenant: j["meta"]["tenant_id"].as_str().map(str::to_owned),
            });
        }
        self.count.fetch_add(jobs.len(), Ordering::Relaxed);
    }

    fn dispatched(&self) -> Vec<Dispatch> {
        self.dispatched.lock().unwrap().clone()
    }
}

/// A worker: FETCHes with `fetch` (plus its `worker_id`) until the run is done, records what it
/// was given, holds it for `hold` and ACKs it.
fn spawn_worker(
    api: Client,
    worker_id: String,
    fetch: &Value,
    hold: Duration,
    run: Arc<Run>,
) -> JoinHandle<()> {
    let mut body = fetch.clone();
    body["worker_id"] = json!(worker_id);
    tokio::spawn(async move {
        while !run.done() {
            let jobs = api.fetch(body.clone()).await;
            if jobs.is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            run.record(&jobs);
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            for j in &jobs {
                api.ack_job(j, &worker_id).await;
            }
        }
    })
}

/// Registers `workers` members of `pool` (the i-th on `apis[i % apis.len()]`), starts them with
/// `fetch`, and waits until they dispatched `target` jobs; returns the dispatches.
async fn measure(
    apis: &[Client],
    pool: &str,
    workers: usize,
    fetch: &Value,
    target: usize,
) -> Vec<Dispatch> {
    // The bound only keeps a broken run from hanging: alone the runs take seconds, but beside
    // the rest of the suite on a 2-core machine one has needed more than 30.
    let run = Run::new(target, Duration::from_secs(90));
    let mut tasks = Vec::new();
    for i in 0..workers {
        let api = &apis[i % apis.len()];
        let id = format!("{pool}-w{i}");
        register(api, &id, Some(pool), Some(10)).await;
        tasks.push(spawn_worker(
            api.clone(),
            id,
            fetch,
            Duration::ZERO,
            run.clone(),
        ));
    }
    join(tasks).await;
    let dispatched = run.dispatched();
    assert!(
        dispatched.len() >= target,
        "only {} of {target} dispatches",
        dispatched.len()
    );
    dispatched
}

async fn join(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        task.await.expect("worker task");
    }
}

/// Asserts that `queue` got `expected` of `dispatched`, within `points` percentage points.
#[track_caller]
fn assert_share(dispatched: &[Dispatch], queue: &str, expected: f64, points: f64) {
    let mut by_queue: HashMap<String, usize> = HashMap::new();
    for d in dispatched {
        *by_queue.entry(d.queue.clone()).or_default() += 1;
    }
    support::assert_share(&by_queue, queue, dispatched.len(), expected, points / 100.0);
}

/// Polls `GET /ojs/v1/events?types={event_type}` until at least `n` events are listed or
/// `within` passes; returns them.
async fn events_of_type(api: &Client, event_type: &str, n: usize, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let events = api
            .get(&format!("/ojs/v1/events?types={event_type}&limit=1000"))
            .await
            .expect(200)
            .json["events"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if events.len() >= n || Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn pools_are_created_replaced_listed_and_deleted_and_rebalancing_is_an_event() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();

    // Created: 201 + Location, every default shown.
    let created = api
        .put(&format!("{POOLS}/zeta"), json!({"queues": ["z"]}))
        .await
        .expect(201);
    assert_eq!(created.header("location"), Some("/ojs/v1/admin/pools/zeta"));
    let zeta = created.json["pool"].clone();
    let mut shown = zeta.clone();
    let fields = shown.as_object_mut().unwrap();
    assert!(
        fields
            .remove("created_at")
            .is_some_and(|t| t.as_str().is_some_and(|t| !t.is_empty())),
        "{zeta}"
    );
    assert!(
        fields
            .remove("updated_at")
            .is_some_and(|t| t.as_str().is_some_and(|t| !t.is_empty())),
        "{zeta}"
    );
    assert_eq!(
        shown,
        json!({"id": "zeta", "name": "zeta", "queues": ["z"], "concurrency": null, "strategy": "round-robin",
               "weights": {}, "isolated": false,
               "starvation_prevention": {"enabled": false, "rotation_interval": "PT30S",
                                         "min_dispatch_ratio": 0.05},
               "tenant_fairness": {"enabled": false, "strategy": "fair-share", "weights": {},
                                   "default_weight": 1},
               "active_workers": 0, "workers": 0, "active_jobs": 0})
    );
    assert_eq!(
        api.get(&format!("{POOLS}/zeta")).await.expect(200).json["pool"],
        zeta
    );
    // What GET answers may be sent back unchanged; an `id` naming another pool may not.
    let again = api
        .put(&format!("{POOLS}/zeta"), zeta.clone())
        .await
        .expect(200);
    assert_eq!(again.json["pool"]["queues"], json!(["z"]));
    let mut other = zeta.clone();
    other["id"] = json!("alpha");
    let refused = api
        .put(&format!("{POOLS}/zeta"), other.clone())
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(refused.json["error"]["details"]["field"], "$.id");

    // Given values are kept (queue order = preference), nested objects take defaults for
    // what they leave out, bare tenant ids are stored as "tenant:<id>".
    let mid = put_pool(
        &api,
        "mid",
        json!({"queues": ["b-q", "a-q"], "strategy": "weighted", "weights": {"a-q": 3},
               "starvation_prevention": {"enabled": true, "rotation_interval": "PT2S"},
               "tenant_fairness": {"enabled": true, "weights": {"A": 5, "tenant:B": 2},
                                   "default_weight": 2}}),
        201,
    )
    .await;
    assert_eq!(mid["queues"], json!(["b-q", "a-q"]));
    assert_eq!(mid["strategy"], "weighted");
    assert_eq!(mid["weights"], json!({"a-q": 3}));
    assert_eq!(
        mid["starvation_prevention"],
        json!({"enabled": true, "rotation_interval": "PT2S", "min_dispatch_ratio": 0.05})
    );
    assert_eq!(
        mid["tenant_fairness"],
        json!({"enabled": true, "strategy": "fair-share",
               "weights": {"tenant:A": 5, "tenant:B": 2}, "default_weight": 2})
    );

    // Replaced (200), not merged: what the new body leaves out is back to its default.
    let replaced = api
        .put(
            &format!("{POOLS}/mid"),
            json!({"name": "mid", "queues": ["a-q"], "strategy": "strict", "concurrency": 5}),
        )
        .await
        .expect(200)
        .json["pool"]
        .clone();
    assert_eq!(replaced["name"], "mid");
    assert_eq!(replaced["queues"], json!(["a-q"]));
    assert_eq!(replaced["strategy"], "strict");
    assert_eq!(replaced["concurrency"], 5);
    assert_eq!(replaced["weights"], json!({}));
    assert_eq!(
        replaced["starvation_prevention"],
        zeta["starvation_prevention"]
    );
    assert_eq!(replaced["tenant_fairness"], zeta["tenant_fairness"]);
    assert_eq!(replaced["created_at"], mid["created_at"]);
    assert!(replaced["updated_at"].is_string());
    assert_eq!(
        api.get(&format!("{POOLS}/mid")).await.expect(200).json["pool"],
        replaced
    );

    // The map form gives queues (sorted) and weights.
    let alpha = put_pool(
        &api,
        "alpha",
        json!({"queues": {"low-priority": {"weight": 30}, "high-priority": {"weight": 70}},
               "strategy": "weighted"}),
        201,
    )
    .await;
    assert_eq!(alpha["queues"], json!(["high-priority", "low-priority"]));
    assert_eq!(
        alpha["weights"],
        json!({"high-priority": 70, "low-priority": 30})
    );
    assert_eq!(alpha["strategy"], "weighted");

    // Listed by name, with the live counts.
    let list = api.get(POOLS).await.expect(200).json;
    let items = list["items"].as_array().unwrap();
    let names: Vec<&str> = items.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "mid", "zeta"]);
    for item in items {
        assert_eq!(item["active_workers"], 0, "{item}");
        assert_eq!(item["active_jobs"], 0, "{item}");
        // The OJS admin UI's fields.
        assert_eq!(item["id"], item["name"], "{item}");
        assert_eq!(item["workers"], 0, "{item}");
    }
    assert_eq!(list["pools"], list["items"], "{list}");
    assert_eq!(list["pagination"]["total"], 3, "{list}");

    // A member and the job it holds are counted.
    register(&api, "alpha-1", Some("alpha"), None).await;
    app.push(job("fs.work", "high-priority")).await;
    let held = api.fetch(json!({"worker_id": "alpha-1"})).await;
    assert_eq!(held.len(), 1);
    let alpha = api.get(&format!("{POOLS}/alpha")).await.expect(200).json["pool"].clone();
    assert_eq!(alpha["active_workers"], 1, "{alpha}");
    assert_eq!(alpha["active_jobs"], 1, "{alpha}");
    let listed = api.get(POOLS).await.expect(200).json["items"][0].clone();
    assert_eq!(listed["name"], "alpha");
    assert_eq!(listed["active_workers"], 1, "{listed}");
    assert_eq!(listed["workers"], 1, "{listed}");
    assert_eq!(listed["active_jobs"], 1, "{listed}");

    // A body naming another pool is refused and changes nothing.
    api.put(
        &format!("{POOLS}/alpha"),
        json!({"name": "beta", "queues": ["x"]}),
    )
    .await
    .expect_error(400, "invalid_request");
    assert_eq!(
        api.get(&format!("{POOLS}/alpha")).await.expect(200).json["pool"]["queues"],
        json!(["high-priority", "low-priority"])
    );
    api.get(&format!("{POOLS}/beta"))
        .await
        .expect_error(404, "not_found");

    // Deleted once; unknown pools are 404.
    let deleted = api.delete(&format!("{POOLS}/zeta")).await.expect(200).json;
    assert_eq!(deleted, json!({"deleted": true, "name": "zeta"}));
    api.get(&format!("{POOLS}/zeta"))
        .await
        .expect_error(404, "not_found");
    api.delete(&format!("{POOLS}/zeta"))
        .await
        .expect_error(404, "not_found");
    api.get(&format!("{POOLS}/nope"))
        .await
        .expect_error(404, "not_found");
    let names: Vec<String> = api.get(POOLS).await.expect(200).json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["alpha", "mid"]);

    // Rebalancing: only a change of an existing pool's strategy or weights is an event. So far:
    // mid weighted {a-q: 3} → strict {}. Now alpha: concurrency only (no event), then its
    // strategy (event).
    put_pool(
        &api,
        "alpha",
        json!({"queues": {"low-priority": {"weight": 30}, "high-priority": {"weight": 70}},
               "strategy": "weighted", "concurrency": 8}),
        200,
    )
    .await;
    put_pool(
        &api,
        "alpha",
        json!({"queues": ["high-priority", "low-priority"], "strategy": "round-robin",
               "weights": {"high-priority": 70, "low-priority": 30}}),
        200,
    )
    .await;
    let events = events_of_type(&api, "scheduling.rebalanced", 2, Duration::from_secs(5)).await;
    let data: Vec<&Value> = events.iter().map(|e| &e["data"]).collect();
    assert_eq!(data.len(), 2, "{events:?}");
    assert_eq!(data[0]["pool"], "mid");
    assert_eq!(data[0]["previous_strategy"], "weighted");
    assert_eq!(data[0]["new_strategy"], "strict");
    assert_eq!(data[0]["previous_weights"], json!({"a-q": 3}));
    assert_eq!(data[0]["new_weights"], json!({}));
    assert_eq!(data[1]["pool"], "alpha");
    assert_eq!(data[1]["previous_strategy"], "weighted");
    assert_eq!(data[1]["new_strategy"], "round-robin");
    assert_eq!(
        data[1]["previous_weights"],
        json!({"high-priority": 70, "low-priority": 30})
    );
    assert_eq!(data[1]["new_weights"], data[1]["previous_weights"]);
}

#[tokio::test]
async fn invalid_pool_definitions_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    let original = put_pool(
        &api,
        "v",
        json!({"queues": ["a", "b", "c"], "strategy": "weighted", "weights": {"a": 2}}),
        201,
    )
    .await;
    let starvation =
        |fields: Value| json!({"queues": ["a", "b", "c"], "starvation_prevention": fields});
    let tenants = |fields: Value| json!({"queues": ["a"], "tenant_fairness": fields});
    let cases = [
        json!({}),
        json!({"queues": []}),
        json!({"queues": {}}),
        json!({"queues": "a"}),
        json!({"queues": ["a", "Bad Name"]}),
        json!({"queues": ["a", "a"]}),
        json!({"queues": {"a": {"weight": 0}}}),
        json!({"queues": ["a"], "strategy": "fastest"}),
        json!({"queues": ["a"], "weights": {"b": 1}}),
        json!({"queues": ["a"], "weights": {"a": 0}}),
        json!({"queues": ["a"], "weights": {"a": -1}}),
        json!({"queues": ["a"], "weights": {"a": 1.5}}),
        json!({"queues": ["a"], "weights": {"a": 1_000_001}}),
        json!({"queues": ["a"], "concurrency": -1}),
        json!({"queues": ["a"], "concurrency": "many"}),
        json!({"queues": ["a"], "isolated": "yes"}),
        starvation(json!({"enabled": true, "min_dispatch_ratio": 1.5})),
        starvation(json!({"enabled": true, "min_dispatch_ratio": -0.1})),
        // 0.4 × 3 queues > 1.
        starvation(json!({"enabled": true, "min_dispatch_ratio": 0.4})),
        starvation(json!({"enabled": true, "rotation_interval": "soon"})),
        starvation(json!({"enabled": true, "rotation_interval": "PT0.05S"})),
        starvation(json!({"enabled": "yes"})),
        tenants(json!({"enabled": true, "strategy": "round-robin"})),
        tenants(json!({"enabled": true, "weights": {"tenant:a": 0}})),
        tenants(json!({"enabled": true, "default_weight": 0})),
        json!({"name": "other", "queues": ["a"]}),
    ];
    for body in cases {
        api.put(&format!("{POOLS}/v"), body.clone())
            .await
            .expect_error(400, "invalid_request");
        api.put(&format!("{POOLS}/fresh"), body.clone())
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(
            api.get(&format!("{POOLS}/v")).await.expect(200).json["pool"],
            original,
            "{body} changed the pool"
        );
        api.get(&format!("{POOLS}/fresh"))
            .await
            .expect_error(404, "not_found");
    }

    // Unknown fields name themselves, nested ones too.
    for (body, field) in [
        (json!({"queues": ["a"], "priority": 1}), "priority"),
        (
            json!({"queues": ["a"], "starvation_prevention": {"enabled": true, "burst": 3}}),
            "burst",
        ),
    ] {
        let err = api
            .put(&format!("{POOLS}/fresh"), body.clone())
            .await
            .expect_error(400, "invalid_request");
        let named = err.json["error"]["details"]["field"].as_str().unwrap_or("");
        assert!(named.contains(field), "{}", err.text);
    }
    api.get(&format!("{POOLS}/fresh"))
        .await
        .expect_error(404, "not_found");

    // A body that is not a JSON object is a payload error (`invalid_payload`, ojsd's code for a
    // body it cannot take as an object, as the conformance suite expects); a bad pool name in
    // the path is a request error.
    api.put(&format!("{POOLS}/v"), json!([1]))
        .await
        .expect_error(400, "invalid_payload");
    api.put(&format!("{POOLS}/UPPER"), json!({"queues": ["a"]}))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(
        api.get(&format!("{POOLS}/v")).await.expect(200).json["pool"],
        original
    );

    // The edges that are allowed: concurrency 0, a 100 ms rotation, ratio × queues ≤ 1.
    let edges = put_pool(
        &api,
        "edges",
        json!({"queues": ["a", "b", "c", "d"], "concurrency": 0,
               "weights": {"a": 1, "d": 1_000_000},
               "starvation_prevention": {"enabled": true, "rotation_interval": "PT0.1S",
                                         "min_dispatch_ratio": 0.25}}),
        201,
    )
    .await;
    assert_eq!(edges["concurrency"], 0);
    assert_eq!(edges["starvation_prevention"]["min_dispatch_ratio"], 0.25);
    assert_eq!(
        api.get(POOLS).await.expect(200).json["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn weighted_five_three_one_splits_saturated_dispatch_five_three_one() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    let api = app.api.clone();
    put_pool(
        &api,
        "mix",
        json!({"queues": ["w-a", "w-b", "w-c"], "strategy": "weighted",
               "weights": {"w-a": 5, "w-b": 3, "w-c": 1}}),
        201,
    )
    .await;
    let mut jobs = jobs_on("w-a", 600);
    jobs.extend(jobs_on("w-b", 600));
    jobs.extend(jobs_on("w-c", 600));
    enqueue(&api, jobs).await;

    // The workers name the queues and no strategy: the pool decides.
    let fetch = json!({"queues": ["w-a", "w-b", "w-c"], "count": 1});
    let dispatched = measure(&[api], "mix", 6, &fetch, 900).await;
    assert_share(&dispatched, "w-a", 5.0 / 9.0, 3.0);
    assert_share(&dispatched, "w-b", 3.0 / 9.0, 3.0);
    assert_share(&dispatched, "w-c", 1.0 / 9.0, 3.0);
}

#[tokio::test]
async fn round_robin_is_the_pool_default_and_splits_dispatch_evenly() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    let api = app.api.clone();
    let pool = put_pool(&api, "even", json!({"queues": ["r-a", "r-b", "r-c"]}), 201).await;
    assert_eq!(pool["strategy"], "round-robin");
    let mut jobs = jobs_on("r-a", 600);
    jobs.extend(jobs_on("r-b", 600));
    jobs.extend(jobs_on("r-c", 600));
    enqueue(&api, jobs).await;

    let fetch = json!({"queues": ["r-a", "r-b", "r-c"], "count": 1});
    let dispatched = measure(&[api], "even", 6, &fetch, 900).await;
    for queue in ["r-a", "r-b", "r-c"] {
        assert_share(&dispatched, queue, 1.0 / 3.0, 2.0);
    }
}

#[tokio::test]
async fn weighted_shares_hold_across_two_replicas() {
    let db = TestDb::new().await;
    let url = db.url();
    let a = Replica::start(&url, "fs-weighted-a", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let api_a = Client::new(&a.base);
    put_pool(
        &api_a,
        "mix",
        json!({"queues": ["w-a", "w-b", "w-c"], "strategy": "weighted",
               "weights": {"w-a": 5, "w-b": 3, "w-c": 1}}),
        201,
    )
    .await;
    let mut jobs = jobs_on("w-a", 600);
    jobs.extend(jobs_on("w-b", 600));
    jobs.extend(jobs_on("w-c", 600));
    enqueue(&api_a, jobs).await;
    // Started after the pool exists, so it cannot hold an older view of it.
    let b = Replica::start(&url, "fs-weighted-b", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let api_b = api_a.of(&b.base);

    let fetch = json!({"queues": ["w-a", "w-b", "w-c"], "count": 1});
    let dispatched = measure(&[api_a, api_b], "mix", 6, &fetch, 900).await;
    assert_share(&dispatched, "w-a", 5.0 / 9.0, 3.0);
    assert_share(&dispatched, "w-b", 3.0 / 9.0, 3.0);
    assert_share(&dispatched, "w-c", 1.0 / 9.0, 3.0);
    drop(a);
    drop(b);
}

/// Dispatch times (epoch seconds, ascending) and queues of the jobs `ids`.
async fn starts(app: &TestApp, ids: &[String]) -> Vec<(f64, String)> {
    sqlx::query_as(
        "select extract(epoch from started_at)::float8, queue from ojs_job_all
          where id = any($1::text[]::uuid[]) and started_at is not null
          order by started_at",
    )
    .bind(ids)
    .fetch_all(app.pool())
    .await
    .unwrap()
}

/// The windows of `width` seconds, starting every 100 ms from 200 ms after the first dispatch
/// and ending at most 200 ms before the last, in which `queue` got less than `ratio` of the
/// dispatches. Two dispatches of slack: six workers claim concurrently, and `started_at` is
/// each claim's transaction time, so a window's edges can cut through claims in flight.
fn starved_windows(starts: &[(f64, String)], queue: &str, width: f64, ratio: f64) -> Vec<String> {
    let (Some(first), Some(last)) = (starts.first(), starts.last()) else {
        return vec!["no dispatches at all".to_owned()];
    };
    let mut violations = Vec::new();
    let mut step = 0;
    loop {
        let from = first.0 + 0.2 + f64::from(step) * 0.1;
        let to = from + width;
        if to > last.0 - 0.2 {
            break;
        }
        let inside: Vec<&(f64, String)> = starts
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .collect();
        let got = inside.iter().filter(|(_, q)| q == queue).count();
        if inside.is_empty() || (got as f64) + 2.0 < ratio * inside.len() as f64 {
            violations.push(format!(
                "{queue}: {got} of {} in [{:.1}, {:.1}) s",
                inside.len(),
                from - first.0,
                to - first.0
            ));
        }
        step += 1;
    }
    assert!(step > 0, "the run was too short for one window");
    violations
}

#[tokio::test]
async fn strict_with_starvation_prevention_gives_each_queue_its_share_of_every_window() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    let api = app.api.clone();
    put_pool(
        &api,
        "tiers",
        json!({"queues": ["critical", "default", "analytics"], "strategy": "strict",
               "starvation_prevention": {"enabled": true, "rotation_interval": "PT2S",
                                         "min_dispatch_ratio": 0.10}}),
        201,
    )
    .await;
    // The control: the same shape without starvation prevention.
    put_pool(
        &api,
        "plain-tiers",
        json!({"queues": ["c-critical", "c-default", "c-analytics"], "strategy": "strict"}),
        201,
    )
    .await;
    // Far more than the workers can take in the run (they hold each job 20 ms): every queue
    // has work from start to end.
    let mut jobs = jobs_on("critical", 3000);
    jobs.extend(jobs_on("default", 1000));
    jobs.extend(jobs_on("analytics", 1000));
    jobs.extend(jobs_on("c-critical", 1500));
    jobs.extend(jobs_on("c-default", 100));
    jobs.extend(jobs_on("c-analytics", 100));
    enqueue(&api, jobs).await;

    let run = Run::new(usize::MAX, Duration::from_secs(30));
    let control = Run::new(usize::MAX, Duration::from_secs(30));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let id = format!("tiers-{i}");
        register(&api, &id, Some("tiers"), None).await;
        tasks.push(spawn_worker(
            api.clone(),
            id,
            &json!({"queues": ["critical", "default", "analytics"]}),
            Duration::from_millis(20),
            run.clone(),
        ));
    }
    for i in 0..3 {
        let id = format!("plain-{i}");
        register(&api, &id, Some("plain-tiers"), None).await;
        tasks.push(spawn_worker(
            api.clone(),
            id,
            &json!({"queues": ["c-critical", "c-default", "c-analytics"]}),
            Duration::from_millis(20),
            control.clone(),
        ));
    }
    tokio::time::sleep(Duration::from_secs(7)).await;
    run.finish();
    control.finish();
    join(tasks).await;

    let ids: Vec<String> = run.dispatched().into_iter().map(|d| d.id).collect();
    let timeline = starts(&app, &ids).await;
    assert_eq!(timeline.len(), ids.len());
    let mut violations = starved_windows(&timeline, "analytics", 2.0, 0.10);
    violations.extend(starved_windows(&timeline, "default", 2.0, 0.10));
    assert!(
        violations.is_empty(),
        "{} dispatches; windows below 10%: {violations:#?}",
        timeline.len()
    );
    let left: i64 = sqlx::query_scalar(
        "select count(*) from ojs_job where queue = 'critical' and state = 'available'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert!(left > 0, "critical ran dry: the run did not saturate it");

    // Without starvation prevention, strict serves nothing else while critical has work, and
    // the window check says so.
    let ids: Vec<String> = control.dispatched().into_iter().map(|d| d.id).collect();
    let timeline = starts(&app, &ids).await;
    assert!(
        timeline.len() > 100,
        "{} control dispatches",
        timeline.len()
    );
    assert!(
        timeline.iter().all(|(_, q)| q == "c-critical"),
        "strict served a later queue while the first had work"
    );
    assert!(!starved_windows(&timeline, "c-analytics", 2.0, 0.10).is_empty());
}

#[tokio::test]
async fn a_queue_with_work_and_no_dispatch_for_the_rotation_interval_is_reported_starved() {
    let app = TestApp::spawn_with(|c| {
        c.maintenance.enabled = true;
        c.maintenance.leader_lease = std::time::Duration::from_millis(2000);
        c.maintenance.leader_renew_interval = std::time::Duration::from_millis(500);
        c.maintenance.leader_elect_interval = std::time::Duration::from_millis(500);
    })
    .await;
    let api = app.api.clone();
    put_pool(
        &api,
        "heat",
        json!({"queues": ["hot", "cold"], "strategy": "strict",
               "starvation_prevention": {"enabled": true, "rotation_interval": "PT1S",
                                         "min_dispatch_ratio": 0.05}}),
        201,
    )
    .await;
    // `hot` has no work, `elsewhere` belongs to no pool: neither is starved.
    enqueue(&api, jobs_on("cold", 3)).await;
    enqueue(&api, jobs_on("elsewhere", 3)).await;

    let events = events_of_type(&api, "scheduling.queue_starved", 1, Duration::from_secs(10)).await;
    assert!(!events.is_empty(), "no scheduling.queue_starved event");
    for event in &events {
        assert_eq!(event["data"]["queue"], "cold", "{event}");
    }
    let data = &events[0]["data"];
    assert_eq!(data["pool"], "heat", "{data}");
    assert_eq!(data["available_count"], 3, "{data}");
    assert!(
        data["duration_ms"].as_i64().is_some_and(|ms| ms >= 1000),
        "{data}"
    );
    assert!(
        data["duration"]
            .as_str()
            .is_some_and(|d| d.starts_with("PT")),
        "{data}"
    );

    let stats = api
        .get("/ojs/v1/admin/scheduling/stats")
        .await
        .expect(200)
        .json;
    assert!(
        stats["stats"]["queues_starved"]
            .as_array()
            .is_some_and(|q| q.contains(&json!("cold"))),
        "{stats}"
    );
    let cold = stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "cold");
    assert!(cold.is_some_and(|q| q["starved"] == true), "{stats}");
    let metrics = api.get("/metrics").await.expect(200).text;
    assert!(
        metrics.lines().any(|l| {
            l.starts_with("ojs_scheduling_starvation_events_total{")
                && l.contains(r#"queue="cold""#)
        }),
        "{metrics}"
    );
}

/// Tenant A has `a_jobs` on `queue` and `workers` (4, count 5) take them; after 300 dispatches
/// tenant B enqueues 100. Returns how many dispatches (of any tenant, in event order) after
/// B's enqueue response it took until all of B's jobs had started, or `None` if they had not
/// within `cap` dispatches in all.
async fn tenant_catch_up(
    app: &TestApp,
    queue: &str,
    pool: Option<&str>,
    a_jobs: usize,
    cap: usize,
) -> Option<usize> {
    let api = app.api.clone();
    enqueue(&api, tenant_jobs(queue, "A", a_jobs, None)).await;
    let run = Run::new(cap, Duration::from_secs(30));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let id = format!("{queue}-w{i}");
        let fetch = match pool {
            Some(pool) => {
                register(&api, &id, Some(pool), Some(10)).await;
                json!({"count": 5})
            }
            None => json!({"queues": [queue], "count": 5}),
        };
        tasks.push(spawn_worker(
            api.clone(),
            id,
            &fetch,
            Duration::ZERO,
            run.clone(),
        ));
    }
    while run.count() < 300 && !run.done() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let b_ids = enqueue(&api, tenant_jobs(queue, "B", 100, None)).await;
    // Transactions that get an id from now on began after B's enqueue answered.
    let after: String = sqlx::query_scalar("select pg_snapshot_xmax(pg_current_snapshot())::text")
        .fetch_one(app.pool())
        .await
        .unwrap();
    let started_b = || {
        run.dispatched()
            .iter()
            .filter(|d| d.tenant.as_deref() == Some("B"))
            .count()
    };
    while started_b() < 100 && !run.done() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    run.finish();
    join(tasks).await;
    if started_b() < 100 {
        return None;
    }
    let order: Vec<bool> = sqlx::query_scalar(
        "select job_id = any($3::text[]::uuid[]) from ojs_event_log
          where type = 'job.started' and queue = $1 and xid >= $2::text::xid8
          order by xid, seq",
    )
    .bind(queue)
    .bind(&after)
    .bind(&b_ids)
    .fetch_all(app.pool())
    .await
    .unwrap();
    Some(
        order
            .iter()
            .rposition(|is_b| *is_b)
            .map_or(0, |last| last + 1),
    )
}

#[tokio::test]
async fn a_tenant_arriving_behind_a_large_backlog_is_served_within_its_fair_share() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    let api = app.api.clone();
    put_pool(
        &api,
        "tenants",
        json!({"queues": ["t"], "tenant_fairness": {"enabled": true}}),
        201,
    )
    .await;
    // Equal weights: B's 100 jobs interleave one for one with A's, about 200 dispatches.
    let fair = tenant_catch_up(&app, "t", Some("tenants"), 10_000, 3000).await;
    assert!(
        fair.is_some_and(|n| {
            eprintln!("tenant B's 100 jobs were all dispatched within {n} dispatches");
            n <= 220
        }),
        "B's jobs all started after {fair:?} dispatches"
    );

    // Control, without tenant fairness: B waits behind A's backlog (700 jobs here).
    let unfair = tenant_catch_up(&app, "t-plain", None, 1000, 1200).await;
    assert!(
        unfair.is_none_or(|n| n > 220),
        "without tenant fairness B's jobs started after {unfair:?} dispatches: the measure cannot fail"
    );
}

#[tokio::test]
async fn tenant_weights_five_to_one_split_dispatch_five_to_one() {
    let app = TestApp::spawn_with(|c| c.database.max_connections = 20).await;
    let api = app.api.clone();
    put_pool(
        &api,
        "weighted-tenants",
        json!({"queues": ["tw"],
               "tenant_fairness": {"enabled": true, "weights": {"tenant:A": 5, "tenant:B": 1}}}),
        201,
    )
    .await;
    // B first: in plain FIFO order A would get nothing.
    enqueue(&api, tenant_jobs("tw", "B", 3000, None)).await;
    enqueue(&api, tenant_jobs("tw", "A", 3000, None)).await;

    let dispatched = measure(&[api], "weighted-tenants", 4, &json!({"count": 5}), 600).await;
    let a = dispatched
        .iter()
        .filter(|d| d.tenant.as_deref() == Some("A"))
        .count();
    let share = a as f64 / dispatched.len() as f64;
    assert!(
        (share - 5.0 / 6.0).abs() <= 0.03,
        "A got {a} of {} dispatches ({:.1}%), expected 83.3% ± 3",
        dispatched.len(),
        share * 100.0
    );
}

#[tokio::test]
async fn tenant_fairness_never_dispatches_a_less_urgent_priority_first() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    // B's bulk jobs first; then A's and C's critical ones.
    enqueue(&api, tenant_jobs("tp", "B", 20, Some(4))).await;
    enqueue(&api, tenant_jobs("tp", "A", 20, Some(0))).await;
    enqueue(&api, tenant_jobs("tp", "C", 20, Some(0))).await;
    // Saved after the jobs: fairness applies to jobs already waiting.
    put_pool(
        &api,
        "tp-pool",
        json!({"queues": ["tp"], "tenant_fairness": {"enabled": true}}),
        201,
    )
    .await;
    register(&api, "tp-1", Some("tp-pool"), Some(100)).await;

    let mut tenants = Vec::new();
    loop {
        let jobs = api.fetch(json!({"worker_id": "tp-1", "count": 3})).await;
        if jobs.is_empty() {
            break;
        }
        for j in &jobs {
            tenants.push(j["meta"]["tenant_id"].as_str().unwrap().to_owned());
            api.ack_job(j, "tp-1").await;
        }
    }
    assert_eq!(tenants.len(), 60);
    assert!(
        tenants[..40].iter().all(|t| t != "B") && tenants[40..].iter().all(|t| t == "B"),
        "a priority-4 job went before a priority-0 one: {tenants:?}"
    );
    // Within priority 0, the two tenants are interleaved (fairness is on).
    let a_first = tenants[..20].iter().filter(|t| *t == "A").count();
    assert!(
        (8..=12).contains(&a_first),
        "A got {a_first} of the first 20: {tenants:?}"
    );
}

#[tokio::test]
async fn pool_concurrency_four_holds_across_two_replicas_and_twelve_workers() {
    let db = TestDb::new().await;
    let url = db.url();
    let a = Replica::start(&url, "fs-narrow-a", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let api_a = Client::new(&a.base);
    put_pool(
        &api_a,
        "narrow",
        json!({"queues": ["cq"], "concurrency": 4}),
        201,
    )
    .await;
    enqueue(&api_a, jobs_on("cq", 100)).await;
    let b = Replica::start(&url, "fs-narrow-b", &[("OJS_SKIP_MIGRATIONS", "true")]);
    let api_b = api_a.of(&b.base);

    let run = Run::new(100, Duration::from_secs(30));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let api = if i % 2 == 0 { &api_a } else { &api_b };
        let id = format!("narrow-{i}");
        register(api, &id, Some("narrow"), None).await;
        tasks.push(spawn_worker(
            api.clone(),
            id,
            &json!({"queues": ["cq"]}),
            Duration::from_millis(50),
            run.clone(),
        ));
    }
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (active, unfinished): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where state = 'active'),
                    count(*) filter (where state not in ('completed', 'cancelled', 'discarded'))
               from ojs_job_all",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(
            active <= 4,
            "{active} active jobs in a pool of concurrency 4"
        );
        most = most.max(active);
        if unfinished == 0 || Instant::now() > deadline {
            break;
        }
    }
    run.finish();
    join(tasks).await;
    assert_eq!(run.count(), 100, "all jobs ran");
    assert_eq!(most, 4, "the limit was reached");

    let overloaded: Vec<Value> = sqlx::query_scalar(
        "select data::jsonb from ojs_event_log where type = 'scheduling.pool_overloaded'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        !overloaded.is_empty(),
        "no scheduling.pool_overloaded event"
    );
    for data in &overloaded {
        assert_eq!(data["pool"], "narrow", "{data}");
        assert_eq!(data["concurrency"], 4, "{data}");
    }
    drop(a);
    drop(b);
}

#[tokio::test]
async fn an_isolated_pool_serves_its_queues_only_to_members_and_its_settings_win() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    put_pool(
        &api,
        "gpu",
        json!({"queues": ["render"], "isolated": true}),
        201,
    )
    .await;
    let render = app.push_id(job("fs.work", "render")).await;
    let cpu = app.push_id(job("fs.work", "cpu")).await;

    // Outsiders: no pool, an unconfigured pool, no worker id at all.
    register(&api, "loner", None, None).await;
    register(&api, "other-member", Some("unconfigured"), None).await;
    for worker in [json!("loner"), json!("other-member"), Value::Null] {
        let mut body = json!({"queues": ["render"], "count": 5});
        if !worker.is_null() {
            body["worker_id"] = worker.clone();
        }
        assert!(
            api.fetch(body).await.is_empty(),
            "{worker} got render's job"
        );
    }
    // The pool's queues are dropped, the others stay.
    let jobs = api
        .fetch(json!({"queues": ["render", "cpu"], "count": 5, "worker_id": "loner"}))
        .await;
    let got: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(got, [cpu.as_str()]);

    // A member is served the pool's queues whatever it asks for.
    let other = app.push_id(job("fs.work", "other")).await;
    register(&api, "gpu-1", Some("gpu"), None).await;
    let jobs = api
        .fetch(json!({"queues": ["other"], "strategy": "strict", "worker_id": "gpu-1"}))
        .await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], render.as_str());
    assert_eq!(jobs[0]["queue"], "render");
    assert_eq!(app.job(&other).await["state"], "available");

    // Joining by heartbeat works too, and a member may leave `queues` out.
    let second = app.push_id(job("fs.work", "render")).await;
    assert!(
        api.fetch(json!({"queues": ["render"], "worker_id": "loner"}))
            .await
            .is_empty()
    );
    api.post(
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "loner", "pool": "gpu"}),
    )
    .await
    .expect(200);
    let jobs = api.fetch(json!({"worker_id": "loner"})).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], second.as_str());
}

#[tokio::test]
async fn workers_without_a_pool_follow_the_pool_named_default() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    let mine = app.push_id(job("fs.work", "mine")).await;
    let pooled = app.push_id(job("fs.work", "dq")).await;
    register(&api, "free", None, None).await;
    register(&api, "elsewhere", Some("unconfigured"), None).await;
    put_pool(&api, "default", json!({"queues": ["dq"]}), 201).await;

    // Without a pool: the default pool's queues replace the request's.
    let jobs = api
        .fetch(json!({"queues": ["mine"], "worker_id": "free"}))
        .await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], pooled.as_str());
    // In a pool without configuration: the request's settings.
    let jobs = api
        .fetch(json!({"queues": ["mine"], "worker_id": "elsewhere"}))
        .await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], mine.as_str());
}

#[tokio::test]
async fn least_loaded_gives_a_member_only_its_free_concurrency_from_the_fullest_queue() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    put_pool(
        &api,
        "ll",
        json!({"queues": ["small", "big"], "strategy": "least-loaded"}),
        201,
    )
    .await;
    enqueue(&api, jobs_on("small", 3)).await;
    enqueue(&api, jobs_on("big", 10)).await;
    register(&api, "ll-1", Some("ll"), Some(2)).await;

    let first = api.fetch(json!({"worker_id": "ll-1", "count": 5})).await;
    let queues: Vec<&str> = first.iter().map(|j| j["queue"].as_str().unwrap()).collect();
    assert_eq!(queues, ["big", "big"]);
    assert!(
        api.fetch(json!({"worker_id": "ll-1", "count": 5}))
            .await
            .is_empty(),
        "a member at its concurrency got more"
    );
    api.ack_job(&first[0], "ll-1").await;
    let next = api.fetch(json!({"worker_id": "ll-1", "count": 5})).await;
    let queues: Vec<&str> = next.iter().map(|j| j["queue"].as_str().unwrap()).collect();
    assert_eq!(queues, ["big"]);
    assert!(
        api.fetch(json!({"worker_id": "ll-1", "count": 5}))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn scheduling_stats_count_dispatches_ratios_waits_and_active_jobs() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    put_pool(
        &api,
        "st",
        json!({"queues": ["sa", "sb"], "strategy": "strict", "concurrency": 50, "weights": {"sb": 3}}),
        201,
    )
    .await;
    enqueue(&api, jobs_on("sa", 30)).await;
    enqueue(&api, jobs_on("sb", 10)).await;
    register(&api, "st-1", Some("st"), Some(100)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let jobs = api.fetch(json!({"worker_id": "st-1", "count": 10})).await;
        assert_eq!(jobs.len(), 10);
        held.extend(jobs);
    }
    // Strict: sa's 30 first, then sb's 10. 25 of sa's are acknowledged.
    assert!(held[..30].iter().all(|j| j["queue"] == "sa"));
    assert!(held[30..].iter().all(|j| j["queue"] == "sb"));
    for j in &held[..25] {
        api.ack_job(j, "st-1").await;
    }

    let stats = api
        .get("/ojs/v1/admin/scheduling/stats")
        .await
        .expect(200)
        .json;
    assert_eq!(stats["window"], "PT1M", "{stats}");
    let queue = |name: &str| {
        stats["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {stats}"))
            .clone()
    };
    // The OJS admin UI's fields beside the extension's.
    assert_eq!(stats["strategy"], "strict", "{stats}");
    for (name, count, ratio, active, weight) in [("sa", 30, 0.75, 5, 1), ("sb", 10, 0.25, 10, 3)] {
        let q = queue(name);
        assert_eq!(q["dispatch_count_1m"], count, "{q}");
        assert_eq!(q["dispatched"], count, "{q}");
        assert_eq!(q["starved"], false, "{q}");
        assert_eq!(q["weight"], weight, "{q}");
        assert!(
            q["dispatch_ratio_1m"]
                .as_f64()
                .is_some_and(|r| (r - ratio).abs() < 0.005),
            "{q}"
        );
        assert!(q["avg_wait_ms"].as_f64().is_some_and(|w| w >= 0.0), "{q}");
        assert_eq!(q["active_jobs"], active, "{q}");
    }
    let summary = &stats["stats"];
    assert_eq!(summary["total_dispatch_count_1m"], 40, "{stats}");
    assert!(summary["queues_starved"].is_array(), "{stats}");
    let pools = summary["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 1, "{stats}");
    let pool = &pools[0];
    assert_eq!(pool["name"], "st");
    assert_eq!(pool["strategy"], "strict");
    assert_eq!(pool["concurrency"], 50);
    assert_eq!(pool["active_jobs"], 15);
    assert_eq!(pool["active_workers"], 1);
    assert!(
        pool["utilization"]
            .as_f64()
            .is_some_and(|u| (u - 0.30).abs() < 0.005),
        "{pool}"
    );
}

#[tokio::test]
async fn dispatches_through_a_pool_are_counted_in_metrics() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    put_pool(&api, "fs-metrics", json!({"queues": ["fs-metrics-q"]}), 201).await;
    enqueue(&api, jobs_on("fs-metrics-q", 3)).await;
    enqueue(&api, jobs_on("fs-metrics-plain", 1)).await;
    register(&api, "fs-metrics-1", Some("fs-metrics"), None).await;
    let jobs = api
        .fetch(json!({"worker_id": "fs-metrics-1", "count": 3}))
        .await;
    assert_eq!(jobs.len(), 3);
    // Outside any pool (and with no pool named `default`): labelled `default`.
    assert_eq!(
        api.fetch(json!({"queues": ["fs-metrics-plain"]}))
            .await
            .len(),
        1
    );

    let metrics = api.get("/metrics").await.expect(200).text;
    let value = |name: &str, labels: &[&str]| -> Option<f64> {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{")) && labels.iter().all(|label| l.contains(label))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    assert!(
        value(
            "ojs_scheduling_dispatch_total",
            &[r#"queue="fs-metrics-q""#, r#"pool="fs-metrics""#]
        )
        .is_some_and(|v| v >= 3.0),
        "{metrics}"
    );
    assert!(
        value(
            "ojs_scheduling_dispatch_total",
            &[r#"queue="fs-metrics-plain""#, r#"pool="default""#]
        )
        .is_some_and(|v| v >= 1.0),
        "{metrics}"
    );
    assert!(
        value(
            "ojs_scheduling_queue_wait_duration_seconds_count",
            &[r#"queue="fs-metrics-q""#]
        )
        .is_some_and(|v| v >= 3.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_job_available_again_in_a_tenant_fair_queue_takes_a_new_place_behind_its_tenant() {
    let app = TestApp::spawn().await;
    let api = app.api.clone();
    put_pool(
        &api,
        "requeued",
        json!({"queues": ["tr"], "tenant_fairness": {"enabled": true}}),
        201,
    )
    .await;
    let first = enqueue(&api, tenant_jobs("tr", "A", 1, None))
        .await
        .remove(0);
    let claimed = api
        .fetch(json!({"queues": ["tr"], "count": 1, "worker_id": "w"}))
        .await;
    assert_eq!(claimed[0]["id"], first);
    let later = enqueue(&api, tenant_jobs("tr", "A", 2, None)).await;
    api.nack(json!({"job_id": first, "worker_id": "w", "requeue": true}))
        .await
        .expect(200);

    let (fair, tenant, requeued_key) = fair_tag(&app, &first).await;
    let (_, _, last_key) = fair_tag(&app, &later[1]).await;
    assert!(fair, "still tenant-fair");
    assert_eq!(tenant.as_deref(), Some("A"));
    assert!(
        requeued_key > last_key,
        "the requeued job was tagged again behind its tenant's newer jobs: {requeued_key:?} vs {last_key:?}"
    );
}

/// `tenant_fair`, `tenant` and `fair_key` of job `id`.
async fn fair_tag(app: &TestApp, id: &str) -> (bool, Option<String>, Option<f64>) {
    sqlx::query_as("select tenant_fair, tenant, fair_key from ojs_job where id = $1::uuid")
        .bind(id)
        .fetch_one(app.pool())
        .await
        .unwrap()
}
