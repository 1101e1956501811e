//! Input and connections a hostile client sends: values the database cannot store, loose
//! worker fields, slow or idle connections, and requests answered without reading their body.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use ojsd::app::Application;
use ojsd::config::Config;

use crate::support::processes::PrivateCluster;
use crate::support::{TestApp, job};

#[tokio::test]
async fn values_postgres_cannot_store_are_refused_naming_the_field_and_change_nothing() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    app.fetch_one("q", "w1").await;
    let events_before = app.event_types().await.len();
    // The same rule for every field: numbers must be finite doubles, strings must not hold a
    // lone surrogate.
    for (path, body, field) in [
        (
            "/ojs/v1/jobs",
            r#"{"type":"a.b","args":[1e309]}"#,
            "$.args[0]",
        ),
        (
            "/ojs/v1/jobs",
            r#"{"type":"a.b","args":[{"n":-1e999999}]}"#,
            "$.args[0].n",
        ),
        (
            "/ojs/v1/jobs",
            r#"{"type":"a.b","args":[],"meta":{"k":"\ud800"}}"#,
            "$.meta.k",
        ),
        (
            "/ojs/v1/jobs",
            r#"{"type":"a.b","args":[1e-400]}"#,
            "$.args[0]",
        ),
        (
            "/ojs/v1/jobs/batch",
            r#"{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":["\udc00"]}]}"#,
            "$.jobs[1].args[0]",
        ),
        (
            "/ojs/v1/workers/ack",
            &format!(r#"{{"job_id":"{id}","worker_id":"w1","result":{{"r":1e999999}}}}"#),
            "$.result.r",
        ),
        (
            "/ojs/v1/workers/nack",
            &format!(r#"{{"job_id":"{id}","error":{{"message":"x","details":{{"d":1e309}}}}}}"#),
            "$.error.details.d",
        ),
        (
            "/ojs/v1/workers/nack/batch",
            &format!(
                r#"{{"nacks":[{{"job_id":"{id}","error":{{"message":"x","details":{{"d":1e309}}}}}}]}}"#
            ),
            "$.nacks[0].error.details.d",
        ),
        (
            "/ojs/v1/workers/ack/batch",
            &format!(r#"{{"acks":[{{"job_id":"{id}","result":"\ud83d"}}]}}"#),
            "$.acks[0].result",
        ),
        (
            "/ojs/v1/workers/heartbeat",
            r#"{"worker_id":"w1","active_jobs":1e309}"#,
            "$.active_jobs",
        ),
    ] {
        let resp = app
            .post_text(path, body)
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(
            resp.json["error"]["details"]["field"], field,
            "{path} {body}"
        );
        assert!(
            resp.json["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{}",
            resp.text
        );
    }
    let job = app.job(&id).await;
    assert_eq!(job["state"], "active", "nothing changed");
    assert_eq!(job["attempt"], 1);
    assert_eq!(app.job_count().await, 1, "nothing was enqueued");
    assert_eq!(app.event_types().await.len(), events_before);
    // A surrogate pair is a character, and the largest doubles are numbers.
    app.post_text(
        "/ojs/v1/jobs",
        r#"{"type":"a.b","args":["\ud83d\ude00", 1.7e308, 5e-324, 0e-999]}"#,
    )
    .await
    .expect(201);
    // Unique keys no longer see every undecodable number as the same one.
    let unique = |n: &str| {
        format!(r#"{{"type":"a.b","queue":"u","args":[{n}],"unique":{{"keys":["args"]}}}}"#)
    };
    app.post_text("/ojs/v1/jobs", &unique("1e308"))
        .await
        .expect(201);
    app.post_text("/ojs/v1/jobs", &unique("1e307"))
        .await
        .expect(201);
    app.post_text("/ojs/v1/jobs", &unique("1e400"))
        .await
        .expect_error(400, "invalid_request");
    // The held job completes normally afterwards.
    app.ack(json!({"job_id": id, "worker_id": "w1", "result": {"r": 1}}))
        .await
        .expect(200);
}

#[tokio::test]
async fn worker_fields_are_checked_strictly() {
    let app = TestApp::spawn().await;
    for labels in [
        json!(5),
        json!("v2"),
        json!([1]),
        json!({"zone": 1}),
        json!([["a"]]),
    ] {
        app.register(json!({"worker_id": "w", "labels": labels}))
            .await
            .expect_error(400, "invalid_request");
    }
    for labels in [json!(["v2.1", "gpu"]), json!({"zone": "eu-1"})] {
        app.register(json!({"worker_id": "w", "labels": labels}))
            .await;
    }
    for active_jobs in [json!(-1), json!(1.5), json!("3"), json!([1])] {
        app.heartbeat(json!({"worker_id": "w", "active_jobs": active_jobs}))
            .await
            .expect_error(400, "invalid_request");
    }
    app.heartbeat(json!({"worker_id": "w", "active_jobs": 3}))
        .await
        .expect(200);
    let worker = app.get("/ojs/v1/admin/workers/w").await.expect(200);
    assert_eq!(worker.json["labels"], json!({"zone": "eu-1"}));
}

#[tokio::test]
async fn a_statement_held_past_the_statement_timeout_answers_503_and_leaves_no_lock() {
    let app =
        TestApp::spawn_with(|c| c.database.statement_timeout = std::time::Duration::from_secs(1))
            .await;
    let id = app.push_id(job("a.b", "q")).await;
    // Another session holds the job's row.
    let mut tx = app.pool().begin().await.unwrap();
    sqlx::query("select 1 from ojs_job where id = $1::uuid for update")
        .bind(&id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let resp = app
        .delete(&format!("/ojs/v1/jobs/{id}"))
        .await
        .expect_error(503, "backend_error");
    assert_eq!(resp.json["error"]["retryable"], true);
    tx.rollback().await.unwrap();
    // The cancel that timed out left nothing behind; the retry works.
    assert_eq!(
        app.delete(&format!("/ojs/v1/jobs/{id}"))
            .await
            .expect(200)
            .json["job"]["state"],
        "cancelled"
    );
}

/// Reads what the server sends until it closes the connection or `wait` passes; `None` when
/// it is still open.
async fn read_until_closed(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// The status line and headers of the next response, lowercased; `None` if the connection
/// closes (or stays silent for 5 s) first.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).to_ascii_lowercase())
}

#[tokio::test]
async fn partial_headers_and_idle_connections_are_closed_after_the_idle_timeout() {
    let app =
        TestApp::spawn_with(|c| c.server.http_idle_timeout = std::time::Duration::from_secs(1))
            .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    // Headers that never end.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /ojs/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    // A keep-alive connection that answered one request, then stays idle.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /ojs/manifest HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    for (name, stream) in [("partial headers", &mut slow), ("idle", &mut idle)] {
        assert!(
            read_until_closed(stream, Duration::from_secs(5))
                .await
                .is_some(),
            "the {name} connection is closed"
        );
    }
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_answered_408_and_enqueues_nothing() {
    let app =
        TestApp::spawn_with(|c| c.server.http_idle_timeout = std::time::Duration::from_secs(1))
            .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let body = br#"{"type":"a.b","args":[1]}"#;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            format!(
                "POST /ojs/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    stream.write_all(&body[..10]).await.unwrap();
    let started = std::time::Instant::now();
    let answer = read_until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("answered, then closed");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 408"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered after the idle timeout, not the request timeout"
    );
    assert_eq!(app.job_count().await, 0);
    // A body sent in slow parts, each within the timeout and all of them past it, is read
    // whole. (A server of its own, with a longer timeout: gaps of a third of it leave room for
    // a busy machine.)
    let app =
        TestApp::spawn_with(|c| c.server.http_idle_timeout = std::time::Duration::from_secs(3))
            .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            format!(
                "POST /ojs/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    for part in body.chunks(9) {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        stream.write_all(part).await.unwrap();
    }
    let answer = read_until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("answered");
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 201"));
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn past_the_connection_limit_new_connections_wait_for_a_free_one() {
    let app = TestApp::spawn_with(|c| {
        c.server.max_connections = 2;
        c.server.http_idle_timeout = std::time::Duration::from_secs(30);
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(b"GET /ojs/manifest HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut status = [0u8; 12];
        stream.read_exact(&mut status).await.unwrap();
        held.push(stream);
    }
    let mut third = TcpStream::connect(&addr).await.unwrap();
    third
        .write_all(b"GET /ojs/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert!(
        read_until_closed(&mut third, Duration::from_millis(500))
            .await
            .is_none(),
        "not served while two connections are open"
    );
    held.pop();
    let answer = read_until_closed(&mut third, Duration::from_secs(5))
        .await
        .expect("served once a connection closed");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

#[tokio::test]
async fn a_503_given_before_the_body_is_read_keeps_the_connection_usable_or_announces_its_close() {
    let cluster = std::sync::Arc::new(
        tokio::task::spawn_blocking(PrivateCluster::start)
            .await
            .unwrap(),
    );
    let config = {
        let mut c = Config::default();
        c.database.url = cluster.url("ojs");
        c.server.listen_addr = "127.0.0.1:0".parse().unwrap();
        c.database.acquire_timeout = std::time::Duration::from_millis(10_000);
        c.maintenance.enabled = false;
        c
    };
    let server = Application::build(&config).await.expect("build the server");
    let base = format!("http://{}", server.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let stopping = cluster.clone();
    tokio::task::spawn_blocking(move || stopping.stop())
        .await
        .unwrap();
    // Once a request has met the outage, the next ones are refused before their body is read.
    ojsd::app::install_tls();
    let client = reqwest::Client::new();
    let status = client
        .post(format!("{base}/ojs/v1/jobs"))
        .json(&job("a.b", "q"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 503);
    // That 503 may be the pool's acquire timeout (10 s here), before the server has marked the
    // database down (its listener notices the lost connection, or a connection error does):
    // under load that takes a moment, and until then a request still waits for its body. Once
    // marked down, a request to a database route is answered at once: well within the 10 s a
    // request waiting on the pool would take, however loaded the machine (an answer under 5 s
    // tells them apart; a 1 s bound failed on a machine also building the release).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let asked = std::time::Instant::now();
        let answer = client
            .get(format!(
                "{base}/ojs/v1/jobs/019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f"
            ))
            .send()
            .await
            .unwrap();
        if answer.status() == 503 && asked.elapsed() < Duration::from_secs(5) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the database was never marked down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let addr = base.trim_start_matches("http://").to_owned();
    // A body the server has not received in full when it answers.
    let body = format!(r#"{{"type":"a.b","args":["{}"]}}"#, "x".repeat(200_000));
    let head = format!(
        "POST /ojs/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (first, rest) = body.as_bytes().split_at(1_000);
    for _ in 0..3 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(first).await.unwrap();
        let answer = read_head(&mut stream).await.expect("answered");
        assert!(answer.starts_with("http/1.1 503"), "{answer}");
        if answer.contains("connection: close") {
            continue;
        }
        // Not announced: then the connection must still serve the next request.
        stream.write_all(rest).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body.as_bytes()).await.unwrap();
        // (What is read now starts with the rest of the first answer, its body.)
        let next = read_head(&mut stream).await;
        assert!(
            next.as_deref().is_some_and(|a| a.contains("http/1.1 503")),
            "a connection kept open without `Connection: close` answers the next request: {next:?}"
        );
    }
    let starting = cluster.clone();
    tokio::task::spawn_blocking(move || starting.start_again())
        .await
        .unwrap();
    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_fetch_refused_for_naming_no_queues_records_no_worker() {
    let app = TestApp::spawn().await;
    app.post(
        "/ojs/v1/workers/fetch",
        json!({"worker_id": "stranger", "count": 1}),
    )
    .await
    .expect_error(400, "invalid_request");
    app.get("/ojs/v1/admin/workers/stranger")
        .await
        .expect_error(404, "not_found");
    let workers: i64 = sqlx::query_scalar("select count(*) from ojs_worker")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(workers, 0, "a refused FETCH records no worker");
}

#[tokio::test]
async fn a_heartbeat_refused_for_a_job_not_held_records_nothing() {
    let app = TestApp::spawn().await;
    let id = app.push_id(job("a.b", "q")).await;
    // A worker never seen, naming a job it does not hold.
    app.heartbeat(json!({"worker_id": "stranger", "job_id": id}))
        .await
        .expect_error(409, "conflict");
    app.get("/ojs/v1/admin/workers/stranger")
        .await
        .expect_error(404, "not_found");
    // A registered worker keeps its last heartbeat, and the job is untouched.
    app.register(json!({"worker_id": "w", "queues": ["q"]}))
        .await
        .expect(201);
    let heartbeat_at = || async {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "select last_heartbeat_at from ojs_worker where id = 'w'",
        )
        .fetch_one(app.pool())
        .await
        .unwrap()
    };
    let before = heartbeat_at().await;
    let job_before = app.job(&id).await;
    for path in ["/ojs/v1/workers/heartbeat", "/ojs/v1/workers/beat"] {
        app.post(path, json!({"worker_id": "w", "job_id": id}))
            .await
            .expect_error(409, "conflict");
    }
    assert_eq!(heartbeat_at().await, before);
    assert_eq!(app.job(&id).await, job_before);
    // Once it holds the job, the same heartbeat is answered and recorded.
    app.fetch_one("q", "w").await;
    app.heartbeat(json!({"worker_id": "w", "job_id": id}))
        .await
        .expect(200);
    assert!(heartbeat_at().await > before);
}

/// Writes `request` whole, then reads one response whole: its head (lowercased) and body.
async fn exchange(stream: &mut TcpStream, request: &[u8]) -> Option<(String, Vec<u8>)> {
    stream.write_all(request).await.ok()?;
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        received.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = received[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some((head, body))
}

#[tokio::test]
async fn answers_that_leave_the_body_unread_keep_the_connection() {
    let app = TestApp::spawn().await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let request = |method: &str, path: &str, content_type: &str, body: &[u8]| {
        let mut r = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let big = vec![b'x'; 1_000_000];
    let too_big = format!(r#"{{"type":"a.b","args":["{}"]}}"#, "x".repeat(5_000_000));
    for (what, first, status) in [
        (
            "a body of the wrong type",
            request("POST", "/ojs/v1/jobs", "text/plain", &big),
            "415",
        ),
        (
            "a route that takes no body",
            request(
                "DELETE",
                "/ojs/v1/jobs/01a21299-177e-7177-8bed-8580ec4a9d2c",
                "application/json",
                &big,
            ),
            "404",
        ),
        (
            "no such route",
            request("POST", "/nowhere", "application/json", &big),
            "404",
        ),
        (
            "a body over the limit",
            request(
                "POST",
                "/ojs/v1/jobs",
                "application/json",
                too_big.as_bytes(),
            ),
            "413",
        ),
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let (head, _) = exchange(&mut stream, &first)
            .await
            .unwrap_or_else(|| panic!("{what}: answered"));
        assert!(
            head.starts_with(&format!("http/1.1 {status}")),
            "{what}: {head}"
        );
        assert!(!head.contains("connection: close"), "{what}: {head}");
        let next = request(
            "POST",
            "/ojs/v1/jobs",
            "application/json",
            br#"{"type":"a.b","args":[]}"#,
        );
        let (head, _) = exchange(&mut stream, &next)
            .await
            .unwrap_or_else(|| panic!("{what}: the connection serves the next request"));
        assert!(head.starts_with("http/1.1 201"), "{what}: {head}");
    }
    assert_eq!(app.job_count().await, 4);
}
