//! Lifecycle events: written with the change, polled with a cursor, streamed over SSE.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestApp, job, sse_data};

/// Polls `GET /ojs/v1/events?{query}` until `n` events are visible (events of transactions still
/// running anywhere on the server are held back until those finish).
async fn poll(app: &TestApp, query: &str, n: usize) -> Value {
    // Generous: the log serves an event once no older transaction of the cluster can still
    // commit one before it, and beside a loaded test run that can take seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = app
            .get(&format!("/ojs/v1/events?{query}"))
            .await
            .expect(200);
        if resp.json["events"].as_array().unwrap().len() >= n || Instant::now() > deadline {
            return resp.json;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An id this server could have issued for an event it no longer has.
fn pruned_event_id() -> String {
    ojsd::events::EventKey {
        seq: 999_999_999,
        unix_ms: 1_790_000_000_000,
    }
    .to_id()
}

fn types(body: &Value) -> Vec<&str> {
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn lifecycle_events_are_written_with_each_change() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "email.send", "args": [], "queue": "mail",
                        "meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}))
        .await;
    app.fetch_one("mail", "w-1").await;
    app.ack(json!({"job_id": id, "result": {"sent": true}}))
        .await
        .expect(200);

    let body = poll(&app, "queues=mail", 4).await;
    assert_eq!(
        types(&body),
        [
            "queue.created",
            "job.enqueued",
            "job.started",
            "job.completed"
        ]
    );
    assert_eq!(body["has_more"], false);
    let events = body["events"].as_array().unwrap();
    let completed = &events[3];
    assert_eq!(body["cursor"], completed["id"]);
    assert_eq!(completed["specversion"], "1.0");
    assert!(completed["id"].as_str().unwrap().starts_with("evt_"));
    let instance = app.get("/ojs/v1/health").await.json["instance"]["id"].clone();
    assert_eq!(
        completed["source"],
        format!("ojs://ojs-server/api/{}", instance.as_str().unwrap())
    );
    assert_eq!(completed["subject"], id.as_str());
    assert_eq!(completed["datacontenttype"], "application/json");
    let data = &completed["data"];
    assert_eq!(data["job_id"], id.as_str());
    assert_eq!(data["job_type"], "email.send");
    assert_eq!(data["queue"], "mail");
    assert_eq!(data["state"], "completed");
    // Rendered compactly, like every response (the log stores `data` as jsonb).
    let text = app.get("/ojs/v1/events?queues=mail").await.expect(200).text;
    assert!(
        !text.contains("\": ") && !text.contains(", \""),
        "events are compact JSON: {text}"
    );
    assert_eq!(data["attempt"], 1);
    assert!(data["duration_ms"].as_i64().unwrap() >= 0);
    assert_eq!(data["result"], json!({"sent": true}));
    assert_eq!(data["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(events[2]["data"]["worker_id"], "w-1");
    assert_eq!(events[1]["data"]["priority"], 2);
    assert_eq!(events[0]["subject"], "mail");
    assert_eq!(
        events[0]["data"],
        json!({"queue": "mail", "implicit": true})
    );
}

#[tokio::test]
async fn failures_retries_discards_and_cancellations_are_events() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "q",
                        "retry": {"max_attempts": 2, "initial_interval": "PT1S", "jitter": false}}))
        .await;
    app.fetch_one("q", "w").await;
    app.nack(json!({"job_id": id, "error": {"code": "E1", "message": "first"}}))
        .await
        .expect(200);
    app.sql(&format!(
        "update ojs_job set next_retry_at = now() where id = '{id}'"
    ))
    .await;
    app.fetch_one("q", "w").await;
    app.nack(json!({"job_id": id, "error": {"code": "E2", "message": "second"}}))
        .await
        .expect(200);
    let cancelled = app.push_id(job("a.b", "c")).await;
    app.delete(&format!("/ojs/v1/jobs/{cancelled}"))
        .await
        .expect(200);

    let body = poll(&app, &format!("job_id={id}"), 9).await;
    assert_eq!(
        types(&body),
        [
            "job.enqueued",
            "job.started",
            "job.failed",
            "job.retrying",
            "job.enqueued",
            "job.started",
            "job.failed",
            "job.discarded",
            "dead_letter.added"
        ]
    );
    let events = body["events"].as_array().unwrap();
    assert_eq!(
        events[2]["data"]["error"],
        json!({"code": "E1", "message": "first"})
    );
    assert_eq!(events[3]["data"]["max_attempts"], 2);
    assert!(events[3]["data"]["next_retry_at"].is_string());
    let discarded = &events[7]["data"];
    assert_eq!(discarded["reason"], "exhausted");
    assert_eq!(discarded["dead_lettered"], true);
    assert_eq!(discarded["total_attempts"], 2);
    assert_eq!(discarded["last_error"]["code"], "E2");

    let body = poll(&app, &format!("job_id={cancelled}&types=job.cancelled"), 1).await;
    assert_eq!(body["events"][0]["data"]["previous_state"], "available");
}

#[tokio::test]
async fn nothing_is_written_for_a_change_that_rolls_back() {
    let app = TestApp::spawn().await;
    let taken = app.push_id(job("a.b", "first")).await;
    // The second job's id is taken: the whole batch is refused, events included.
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": [job("a.b", "batch"), {"type": "a.b", "args": [], "queue": "batch", "id": taken}]}),
    )
    .await
    .expect_error(409, "duplicate");
    let body = poll(&app, "", 2).await;
    // Nor is the queue the refused batch would have created.
    assert_eq!(types(&body), ["queue.created", "job.enqueued"]);
    assert_eq!(body["events"][1]["data"]["queue"], "first");
}

#[tokio::test]
async fn the_cursor_pages_through_events_and_filters_them() {
    let app = TestApp::spawn().await;
    for i in 0..5 {
        app.push(json!({"type": "a.b", "args": [i], "queue": "p"}))
            .await;
    }
    app.push(job("other.kind", "p")).await;
    // Six jobs, and the queue they created.
    poll(&app, "", 7).await;
    let first = poll(&app, "limit=2", 2).await;
    assert_eq!(first["events"].as_array().unwrap().len(), 2);
    assert_eq!(first["has_more"], true);
    let mut seen: Vec<Value> = first["events"].as_array().unwrap().clone();
    let mut cursor = first["cursor"].as_str().unwrap().to_owned();
    loop {
        let page = app
            .get(&format!("/ojs/v1/events?limit=2&after={cursor}"))
            .await
            .expect(200)
            .json;
        seen.extend(page["events"].as_array().unwrap().iter().cloned());
        if page["has_more"] == false {
            break;
        }
        cursor = page["cursor"].as_str().unwrap().to_owned();
    }
    assert_eq!(seen.len(), 7);
    let ids: std::collections::HashSet<&str> =
        seen.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 7, "no event twice");

    let body = poll(&app, "job_types=other.kind", 1).await;
    assert_eq!(body["events"].as_array().unwrap().len(), 1);
    let body = poll(&app, "types=job.*&queues=p,none", 6).await;
    assert_eq!(body["events"].as_array().unwrap().len(), 6);
    let body = poll(&app, "types=worker.*", 0).await;
    assert_eq!(body["events"], json!([]));
    assert!(body.get("cursor").is_none());

    app.get("/ojs/v1/events?after=nonsense")
        .await
        .expect_error(400, "invalid_request");
    let gone = app
        .get(&format!("/ojs/v1/events?after={}", pruned_event_id()))
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(gone.json["error"]["details"]["reason"], "cursor_expired");
    app.get("/ojs/v1/events?job_id=nope")
        .await
        .expect_error(400, "invalid_request");
    app.get("/ojs/v1/events?limit=-3")
        .await
        .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn an_event_that_commits_late_is_never_skipped() {
    let app = TestApp::spawn().await;
    app.push(job("a.b", "order")).await;
    let start = poll(&app, "queues=order", 1).await;
    let cursor = start["cursor"].as_str().unwrap().to_owned();

    // A transaction has written an event but has not committed yet…
    let mut tx = app.pool().begin().await.unwrap();
    sqlx::query(
        "insert into ojs_event (type, queue, job_type, data)
         values ('job.enqueued', 'order', 'slow.commit', '{\"job_type\": \"slow.commit\"}')",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    // …while a later one commits right away.
    app.push(job("fast.commit", "order")).await;
    let page = app
        .get(&format!("/ojs/v1/events?queues=order&after={cursor}"))
        .await
        .expect(200)
        .json;
    assert_eq!(
        page["events"],
        json!([]),
        "the later event waits until the earlier transaction ends"
    );
    tx.commit().await.unwrap();
    let page = poll(&app, &format!("queues=order&after={cursor}"), 2).await;
    let job_types: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["job_type"].as_str().unwrap())
        .collect();
    assert_eq!(job_types, ["slow.commit", "fast.commit"]);
}

/// Reads an SSE response until `done` says so (or the stream ends, or 10 s pass).
async fn read_sse(mut resp: reqwest::Response, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(&text) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => {}
        }
    }
    text
}

#[tokio::test]
async fn a_job_stream_follows_the_job_until_it_finishes() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "s")).await;
    // Resumed after the enqueue: what follows is replayed from the log, however late the
    // stream's task starts reading.
    let enqueued = poll(&app, &format!("job_id={id}"), 1).await["events"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app
        .client
        .get(format!("{}/ojs/v1/jobs/{id}/events", app.base))
        .header("Last-Event-ID", &enqueued)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let worker = async {
        app.fetch_one("s", "w").await;
        app.heartbeat(json!({"worker_id": "w", "active_jobs": [id]}))
            .await
            .expect(200);
        app.ack(json!({"job_id": id})).await.expect(200);
    };
    let (text, ()) = tokio::join!(
        read_sse(resp, |t| t.contains("\"to\":\"completed\"")),
        worker
    );
    assert!(text.starts_with("retry: 3000"), "{text}");
    // A stream starts at the newest event every transaction has finished writing; under load
    // that can be just before the enqueue committed, so it may or may not be included.
    let changes: Vec<Value> = sse_data(&text, Some("job.state_changed"))
        .into_iter()
        .filter(|c| c["to"] != "available")
        .collect();
    let moves: Vec<(Value, Value)> = changes
        .iter()
        .map(|c| (c["from"].clone(), c["to"].clone()))
        .collect();
    assert_eq!(
        moves,
        [
            (json!("available"), json!("active")),
            (json!("active"), json!("completed"))
        ],
        "{text}"
    );
    assert_eq!(changes[0]["job_id"], id.as_str());
    assert_eq!(changes[0]["type"], "a.b");
    assert_eq!(sse_data(&text, Some("job.heartbeat"))[0]["worker_id"], "w");
    assert!(text.contains("id: evt_"));
}

#[tokio::test]
async fn a_finished_job_streams_its_state_once_and_a_resumed_stream_replays() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "s")).await;
    app.fetch_one("s", "w").await;
    app.ack(json!({"job_id": id})).await.expect(200);
    let resp = app
        .client
        .get(format!("{}/ojs/v1/jobs/{id}/events", app.base))
        .send()
        .await
        .unwrap();
    let text = read_sse(resp, |_| false).await;
    let changes = sse_data(&text, Some("job.state_changed"));
    assert_eq!(changes.len(), 1, "{text}");
    assert_eq!(changes[0]["to"], "completed");

    // Resuming after the first event replays the rest from the log.
    let events = poll(&app, &format!("job_id={id}"), 3).await;
    let first = events["events"][0]["id"].as_str().unwrap();
    let resp = app
        .client
        .get(format!("{}/ojs/v1/jobs/{id}/events", app.base))
        .header("Last-Event-ID", first)
        .send()
        .await
        .unwrap();
    let text = read_sse(resp, |t| t.contains("\"to\":\"completed\"")).await;
    let moves: Vec<Value> = sse_data(&text, Some("job.state_changed"))
        .iter()
        .map(|c| c["to"].clone())
        .collect();
    assert_eq!(moves, [json!("active"), json!("completed")], "{text}");

    // An id the log no longer has: a gap notice, then what is retained.
    let resp = app
        .client
        .get(format!("{}/ojs/v1/jobs/{id}/events", app.base))
        .header("Last-Event-ID", pruned_event_id())
        .send()
        .await
        .unwrap();
    let text = read_sse(resp, |t| t.contains("\"to\":\"completed\"")).await;
    let gap = sse_data(&text, Some("system.gap"));
    assert_eq!(gap.len(), 1, "{text}");
    assert_eq!(gap[0]["channel"], format!("job:{id}"));
    assert_eq!(sse_data(&text, Some("job.state_changed")).len(), 3);
}

#[tokio::test]
async fn a_queue_stream_follows_the_queue() {
    let app = TestApp::spawn().await;
    app.get("/ojs/v1/queues/never-used/events")
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/queues/Not%20Valid/events")
        .await
        .expect_error(400, "invalid_request");
    app.get(&format!(
        "/ojs/v1/jobs/{}/events",
        "01a20269-f028-715a-9efc-1beadc0d76ee"
    ))
    .await
    .expect_error(404, "not_found");

    app.push(job("a.b", "qs")).await;
    // Resumed after the newest event: what follows is replayed from the log, however late the
    // stream's task starts reading.
    let newest = poll(&app, "limit=1000", 2).await["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app
        .client
        .get(format!(
            "{}/ojs/v1/queues/qs/events?event_types=job.state_changed",
            app.base
        ))
        .header("Last-Event-ID", &newest)
        .send()
        .await
        .unwrap();
    let producer = async {
        app.push(job("a.b", "elsewhere")).await;
        app.push(job("c.d", "qs")).await;
    };
    let (text, ()) = tokio::join!(read_sse(resp, |t| t.contains("c.d")), producer);
    // The job enqueued just before connecting may show up too (see the job stream test).
    let changes: Vec<Value> = sse_data(&text, Some("job.state_changed"))
        .into_iter()
        .filter(|c| c["type"] != "a.b")
        .collect();
    assert!(!text.contains("elsewhere"), "{text}");
    assert_eq!(changes.len(), 1, "only this queue: {text}");
    assert_eq!(changes[0]["type"], "c.d");
    assert_eq!(changes[0]["from"], Value::Null);
    assert_eq!(changes[0]["to"], "available");
}

/// The enqueue, claim and ACK statements write their event payloads as expressions of their own
/// (inlining `ojs_job_transition_data` would cost milliseconds of planning per execution); they
/// must say exactly what that function says of the same change.
#[tokio::test]
async fn hot_path_event_payloads_match_the_transition_function() {
    let app = TestApp::spawn().await;
    // Checks the newest event of `id` against the function applied to the row as it is now.
    async fn newest_matches(app: &TestApp, id: &str, expected_type: &str) {
        let (ty, same, data): (String, bool, Value) = sqlx::query_as(
            "select e.type, e.data = ojs_job_transition_data(e.from_state, row(j.*)::ojs_job), e.data
               from ojs_event_log e join ojs_job_all j on j.id = e.job_id
              where e.job_id = $1::uuid
              order by e.xid desc, e.seq desc limit 1",
        )
        .bind(id)
        .fetch_one(app.pool())
        .await
        .unwrap();
        assert_eq!(ty, expected_type);
        assert!(
            same,
            "{expected_type} payload differs from the function: {data}"
        );
    }

    let traced = app
        .push_id(json!({
            "type": "email.send", "queue": "hot", "args": [1], "priority": 7,
            "meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            "unique": {"keys": ["args"]}
        }))
        .await;
    newest_matches(&app, &traced, "job.enqueued").await;
    let delayed = app
        .push_id(json!({"type": "email.send", "queue": "hot", "args": [2], "scheduled_at": "2099-01-01T00:00:00Z"}))
        .await;
    newest_matches(&app, &delayed, "job.scheduled").await;
    let past = app
        .push_id(json!({"type": "email.send", "queue": "hot", "args": [3],
                        "scheduled_at": "2020-01-01T00:00:00.5Z", "meta": {"trace_id": "t-1"}}))
        .await;
    newest_matches(&app, &past, "job.enqueued").await;

    let fetched = app
        .fetch(json!({"queues": ["hot"], "count": 2, "worker_id": "w-1"}))
        .await;
    assert_eq!(fetched.len(), 2);
    for job in &fetched {
        newest_matches(&app, job["id"].as_str().unwrap(), "job.started").await;
    }
    let first = fetched[0]["id"].as_str().unwrap();
    let second = fetched[1]["id"].as_str().unwrap();
    app.ack(json!({"job_id": first, "worker_id": "w-1", "result": {"ok": true, "nested": {"gone": null}}}))
    .await
    .expect(200);
    newest_matches(&app, first, "job.completed").await;
    app.ack(json!({"job_id": second})).await.expect(200);
    newest_matches(&app, second, "job.completed").await;
}

/// The admin UI's paged form: `page`/`per_page` give the newest events first as
/// `{items, pagination}`, each with `timestamp`; pages cut through batch rows (one row holds a
/// batch enqueue's events) exactly where the cursor form would.
#[tokio::test]
async fn events_page_newest_first_with_page_and_per_page() {
    let app = TestApp::spawn().await;
    app.push(job("one.first", "paged")).await;
    app.post(
        "/ojs/v1/jobs/batch",
        json!({"jobs": (0..5).map(|i| json!({"type": "batch.job", "args": [i], "queue": "paged"})).collect::<Vec<_>>()}),
    )
    .await
    .expect(201);
    app.push(job("one.last", "paged")).await;
    // Oldest first, as the cursor form delivers them: queue.created, then 7 enqueues.
    let all = poll(&app, "queues=paged", 8).await["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(all.len(), 8, "{all:?}");
    let newest_first: Vec<&Value> = all.iter().rev().collect();

    let mut seen = Vec::new();
    for page in 1..=3 {
        let body = app
            .get(&format!(
                "/ojs/v1/events?queue=paged&page={page}&per_page=3"
            ))
            .await
            .expect(200)
            .json;
        assert_eq!(body["pagination"]["total"], 8, "{body}");
        assert_eq!(body["pagination"]["page"], page, "{body}");
        assert_eq!(body["pagination"]["per_page"], 3, "{body}");
        for item in body["items"].as_array().unwrap() {
            assert_eq!(item["timestamp"], item["time"], "{item}");
            assert!(item["data"].is_object(), "{item}");
            seen.push(item["id"].clone());
        }
    }
    let expected: Vec<Value> = newest_first.iter().map(|e| e["id"].clone()).collect();
    assert_eq!(
        seen, expected,
        "pages, in order, are the events newest first"
    );

    // `type` filters; a page past the end is empty but still counted.
    let batch = app
        .get("/ojs/v1/events?queue=paged&type=job.enqueued&page=1&per_page=50")
        .await
        .expect(200)
        .json;
    assert_eq!(batch["pagination"]["total"], 7, "{batch}");
    let empty = app
        .get("/ojs/v1/events?queue=paged&type=job.completed&page=1&per_page=50")
        .await
        .expect(200)
        .json;
    assert_eq!(empty["items"], json!([]));
    assert_eq!(empty["pagination"]["total"], 0);
    let past = app
        .get("/ojs/v1/events?queue=paged&page=9&per_page=3")
        .await
        .expect(200)
        .json;
    assert_eq!(past["items"], json!([]));
    assert_eq!(past["pagination"]["total"], 8);

    // The cursor form is unchanged when neither page nor per_page is given.
    let cursor = app.get("/ojs/v1/events?queue=paged").await.expect(200).json;
    assert!(cursor.get("items").is_none() && cursor["events"].is_array());
    app.get("/ojs/v1/events?page=0")
        .await
        .expect_error(400, "invalid_request");
    app.get("/ojs/v1/events?page=1&job_id=x")
        .await
        .expect_error(400, "invalid_request");
}
