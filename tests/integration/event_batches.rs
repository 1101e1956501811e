//! Job events written one row per statement (batch rows): what the API serves from them is
//! what the operators' view `ojs_event_log` shows, and cursors and job filters work inside a
//! row.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::TestApp;

/// Every event the API serves, paging with `limit` (waits until at least `n` are visible).
async fn all_events(app: &TestApp, query: &str, limit: usize, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut seen = Vec::new();
        let mut url = format!("/ojs/v1/events?limit={limit}{query}");
        loop {
            let page = app.get(&url).await.expect(200).json;
            seen.extend(page["events"].as_array().unwrap().iter().cloned());
            if page["has_more"] != true {
                break;
            }
            url = format!(
                "/ojs/v1/events?limit={limit}{query}&after={}",
                page["cursor"].as_str().unwrap()
            );
        }
        if seen.len() >= n || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn served_events_match_the_operators_view_and_page_inside_a_batch() {
    let app = TestApp::spawn().await;
    let jobs = json!({"jobs": [
        {"type": "a.b", "args": [1], "queue": "bq",
         "meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
        {"type": "a.b", "args": [2], "queue": "bq", "priority": 5,
         "unique": {"keys": ["args"], "period": "PT1H"}},
        {"type": "a.b", "args": [3], "queue": "bq", "scheduled_at": "2099-01-01T00:00:00Z"},
        {"type": "c.d", "args": [4], "queue": "bq", "meta": {"trace_id": "t-4"}},
        {"type": "a.b", "args": [5], "queue": "other"},
    ]});
    app.post("/ojs/v1/jobs/batch", jobs).await.expect(201);
    let claimed = app
        .fetch(json!({"queues": ["bq"], "count": 10, "worker_id": "w-1"}))
        .await;
    assert_eq!(claimed.len(), 3);
    for (i, job) in claimed.iter().enumerate() {
        let result = if i == 0 {
            json!({"kept": 1, "dropped": null, "nested": [{"n": null, "m": 2}]})
        } else {
            json!(i)
        };
        app.ack(json!({"job_id": job["id"], "worker_id": "w-1", "result": result}))
            .await
            .expect(200);
    }
    // 2 queue.created, 4 job.enqueued, 1 job.scheduled, 3 job.started, 3 job.completed.
    let served = all_events(&app, "", 2, 13).await;
    assert_eq!(served.len(), 13, "{served:#?}");
    let ids: std::collections::HashSet<&str> =
        served.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 13, "no event twice");

    // The view, one row per event, in delivery order, with the same payloads.
    let rows: Vec<(String, Value)> = sqlx::query_as(
        "select type, data::json from ojs_event_log where type like 'job.%' order by xid, seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    let served_jobs: Vec<(String, Value)> = served
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("job."))
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["data"].clone()))
        .collect();
    assert_eq!(served_jobs, rows);

    let by_type = |t: &str| -> Vec<&Value> {
        served
            .iter()
            .filter(|e| e["type"] == t)
            .map(|e| &e["data"])
            .collect()
    };
    let enqueued = by_type("job.enqueued");
    assert_eq!(enqueued.len(), 4);
    assert_eq!(enqueued[0]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(enqueued[1]["priority"], 5);
    assert!(enqueued[1]["unique_key"].is_string());
    let scheduled = by_type("job.scheduled");
    assert_eq!(scheduled[0]["scheduled_at"], "2099-01-01T00:00:00.000Z");
    assert!(scheduled[0].get("priority").is_none());
    let started = by_type("job.started");
    assert!(
        started
            .iter()
            .all(|d| d["worker_id"] == "w-1" && d["attempt"] == 1)
    );
    let completed: HashMap<String, &Value> = by_type("job.completed")
        .into_iter()
        .map(|d| (d["job_id"].as_str().unwrap().to_owned(), d))
        .collect();
    let first = completed[claimed[0]["id"].as_str().unwrap()];
    assert_eq!(
        first["result"],
        json!({"kept": 1, "nested": [{"m": 2}]}),
        "null members are left out of results, as before"
    );
    assert!(first["duration_ms"].is_number());

    // One job's events, out of the batch rows.
    let id = claimed[1]["id"].as_str().unwrap();
    let mine = all_events(&app, &format!("&job_id={id}"), 1, 3).await;
    let types: Vec<&str> = mine.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["job.enqueued", "job.started", "job.completed"]);
    assert!(mine.iter().all(|e| e["data"]["job_id"] == id));

    // An event id inside a batch row is a cursor: the rest of the row follows it.
    let third = served[2]["id"].as_str().unwrap();
    let rest = app
        .get(&format!("/ojs/v1/events?after={third}&limit=100"))
        .await
        .expect(200)
        .json;
    let rest_ids: Vec<&str> = rest["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = served[3..]
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(rest_ids, expected);
}

#[tokio::test]
async fn a_batch_writes_one_event_row_per_queue_job_type_and_event_type() {
    let app = TestApp::spawn().await;
    let jobs: Vec<Value> = (0..300)
        .map(|i| json!({"type": "a.b", "args": [i], "queue": "big"}))
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "select type, coalesce(cardinality(job_ids), 1) from ojs_event order by xid, seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("queue.created".to_owned(), 1),
            ("job.enqueued".to_owned(), 300)
        ]
    );
    let per_job: i64 = sqlx::query_scalar(
        "select count(distinct job_id) from ojs_event_log where type = 'job.enqueued'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(per_job, 300);

    // The claim and a batch ACK of all 300 write one row each too, and every row lists its
    // jobs in the order they were enqueued (seq), as the per-job events are served.
    let fetched = app
        .fetch(json!({"queues": ["big"], "count": 300, "worker_id": "w"}))
        .await;
    assert_eq!(fetched.len(), 300);
    let acks: Vec<Value> = fetched
        .iter()
        .rev()
        .map(|j| json!({"job_id": j["id"], "result": null}))
        .collect();
    app.post(
        "/ojs/v1/workers/ack/batch",
        json!({"worker_id": "w", "acks": acks}),
    )
    .await
    .expect(200);
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "select e.type,
                e.job_ids = array(select j.id from ojs_job_all j
                                   where j.id = any(e.job_ids) order by j.seq)
           from ojs_event e
          where e.job_ids is not null
          order by e.xid, e.seq",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("job.enqueued".to_owned(), true),
            ("job.started".to_owned(), true),
            ("job.completed".to_owned(), true)
        ]
    );
}
