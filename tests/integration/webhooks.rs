//! Webhooks: subscriptions as the suite and the admin UI call them, and delivery from the event
//! log — in order, at least once, signed, retried, paused, never to a private address unless
//! allowed, continued by whichever replica leads.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use ojsd::maintenance::Service;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::support::TestApp;

const SUBS: &str = "/ojs/v1/webhooks/subscriptions";

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    event: Value,
    delivery_id: String,
    signature_ok: bool,
}

/// A receiver on loopback that records what it gets and answers 500 to the first `fail_first`
/// requests.
#[derive(Clone)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    fail_first: Arc<Mutex<usize>>,
    secret: &'static str,
}

impl Receiver {
    async fn start(secret: &'static str, fail_first: usize) -> (Receiver, SocketAddr) {
        let receiver = Receiver {
            got: Arc::default(),
            fail_first: Arc::new(Mutex::new(fail_first)),
            secret,
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, addr)
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let timestamp = header("x-ojs-timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(r.secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(&body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    {
        let mut fail = r.fail_first.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return StatusCode::INTERNAL_SERVER_ERROR;
        }
    }
    assert_eq!(
        header("x-ojs-event-type"),
        event["type"].as_str().unwrap_or("")
    );
    r.got.lock().unwrap().push(Received {
        signature_ok: header("x-ojs-signature") == expected,
        delivery_id: header("x-ojs-delivery-id"),
        event,
    });
    StatusCode::OK
}

async fn subscribe(app: &TestApp, addr: SocketAddr, events: Value, secret: &str) -> Value {
    app.post(
        SUBS,
        json!({"url": format!("http://{addr}/hook"), "events": events, "secret": secret}),
    )
    .await
    .expect(201)
    .json
}

/// Runs `deliverer` until `receiver` has `n` events, then once more. An event is deliverable
/// once every older transaction of the cluster has ended, which takes a while when other tests
/// hold transactions open.
async fn deliver_until(
    deliverer: &ojsd::broker::webhooks::WebhookDeliverer,
    receiver: &Receiver,
    n: usize,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while receiver.got().len() < n && std::time::Instant::now() < deadline {
        let pass = deliverer.run_once(None).await.unwrap();
        if pass.processed == 0 && !pass.more {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    deliverer.run_once(None).await.unwrap();
    assert!(receiver.got().len() >= n, "{:?}", receiver.got());
}

/// Runs `deliverer` until subscription `id` satisfies `done` (its JSON), at most a minute (see
/// [`deliver_until`]).
async fn pass_until(
    app: &TestApp,
    deliverer: &ojsd::broker::webhooks::WebhookDeliverer,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        deliverer.run_once(None).await.unwrap();
        let state = app.get(&format!("{SUBS}/{id}")).await.expect(200).json;
        if done(&state) || std::time::Instant::now() > deadline {
            return state;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn subscriptions_are_created_read_changed_and_deleted_as_the_suite_and_the_ui_call_them() {
    let app = TestApp::spawn().await;
    let created = app
        .post(
            SUBS,
            json!({"url": "https://example.com/h", "events": ["job.completed", "job.failed"], "secret": "s1"}),
        )
        .await
        .expect(201)
        .json;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["subscription"]["id"], id.as_str());
    assert_eq!(created["subscription"]["active"], true);
    assert_eq!(created["events"], json!(["job.completed", "job.failed"]));
    assert_eq!(created["secret"], "s1", "shown once");
    // Without a secret, one is made.
    let generated = app
        .post(
            SUBS,
            json!({"url": "https://example.com/g", "events": ["*"]}),
        )
        .await
        .expect(201)
        .json;
    assert!(generated["secret"].as_str().unwrap().starts_with("whsec_"));

    let read = app.get(&format!("{SUBS}/{id}")).await.expect(200).json;
    assert_eq!(read["subscription"]["url"], "https://example.com/h");
    assert!(read.get("secret").is_none(), "never shown again: {read}");
    let list = app
        .get(&format!("{SUBS}?page=1&per_page=1"))
        .await
        .expect(200)
        .json;
    assert_eq!(list["pagination"]["total"], 2);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["subscriptions"], list["items"]);

    // PATCH (the suite) and PUT (the UI) change the fields given.
    let patched = app
        .send_json(
            reqwest::Method::PATCH,
            &format!("{SUBS}/{id}"),
            &json!({"events": ["job.completed", "job.failed", "job.cancelled"]}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(
        patched["subscription"]["events"].as_array().unwrap().len(),
        3
    );
    assert_eq!(patched["url"], "https://example.com/h");
    let paused = app
        .put(&format!("{SUBS}/{id}"), json!({"active": false}))
        .await
        .expect(200)
        .json;
    assert_eq!(paused["state"], "paused");
    assert_eq!(paused["paused_reason"], "paused by an operator");
    let resumed = app
        .put(
            &format!("{SUBS}/{id}"),
            json!({"active": true, "url": "https://example.com/x"}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(
        (resumed["active"].as_bool(), resumed["url"].as_str()),
        (Some(true), Some("https://example.com/x"))
    );
    assert!(resumed.get("paused_reason").is_none());

    // Bad input: clear 400s naming the field.
    for (body, field) in [
        (json!({"events": ["job.completed"]}), "$.url"),
        (json!({"url": "https://e.com/h"}), "$.events"),
        (json!({"url": "ftp://e.com/h", "events": ["*"]}), "$.url"),
        (
            json!({"url": "https://u:p@e.com/h", "events": ["*"]}),
            "$.url",
        ),
        (json!({"url": "https://e.com/h", "events": []}), "$.events"),
        (
            json!({"url": "https://e.com/h", "events": ["Job.Done"]}),
            "$.events[0]",
        ),
        (
            json!({"url": "https://e.com/h", "events": ["*"], "secret": ""}),
            "$.secret",
        ),
        (
            json!({"url": "https://e.com/h", "events": ["*"], "metadata": [1]}),
            "$.metadata",
        ),
        (json!({"url": 7, "events": ["*"]}), "$.url"),
    ] {
        let e = app
            .post(SUBS, body.clone())
            .await
            .expect_error(400, "invalid_request")
            .json;
        assert_eq!(e["error"]["details"]["field"], field, "{body}: {e}");
    }
    app.get(&format!("{SUBS}/not-a-uuid"))
        .await
        .expect_error(400, "invalid_request");
    let unknown = "0196b7a0-0000-7000-8000-000000000000";
    app.get(&format!("{SUBS}/{unknown}"))
        .await
        .expect_error(404, "not_found");

    app.delete(&format!("{SUBS}/{id}")).await.expect(204);
    app.get(&format!("{SUBS}/{id}"))
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("{SUBS}/{id}"))
        .await
        .expect_error(404, "not_found");
    let manifest = app.get("/ojs/manifest").await.expect(200).json;
    assert_eq!(manifest["capabilities"]["webhooks"], true);
    assert!(
        manifest["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!("webhooks"))
    );
}

#[tokio::test]
async fn every_matching_event_is_delivered_in_order_signed_and_retried() {
    let app = TestApp::spawn().await;
    // The first two attempts fail: the first event is tried again at once, then again.
    let (receiver, addr) = Receiver::start("k3y", 1).await;
    let sub = subscribe(&app, addr, json!(["job.enqueued", "job.completed"]), "k3y").await;
    let id = sub["id"].as_str().unwrap().to_owned();
    let deliverer = app.webhook_deliverer(true);

    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(
            app.push_id(json!({"type": "w.a", "queue": "wq", "args": [i]}))
                .await,
        );
    }
    let fetched = app
        .fetch(json!({"queues": ["wq"], "worker_id": "w-1", "count": 5}))
        .await;
    for job in &fetched {
        app.ack_job(job, "w-1").await.expect(200);
    }
    // The failed attempt is retried at once, on the next pass.
    deliver_until(&deliverer, &receiver, 10).await;

    let got = receiver.got();
    assert!(got.iter().all(|r| r.signature_ok), "{got:?}");
    let seen: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            (
                r.event["type"].as_str().unwrap().to_owned(),
                r.event["subject"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let mut expected: Vec<(String, String)> = jobs
        .iter()
        .map(|j| ("job.enqueued".to_owned(), j.clone()))
        .collect();
    expected.extend(fetched.iter().map(|j| {
        (
            "job.completed".to_owned(),
            j["id"].as_str().unwrap().to_owned(),
        )
    }));
    assert_eq!(
        seen, expected,
        "every event once here, in log order; job.started filtered out"
    );
    // Delivery ids name the subscription and the event (receivers deduplicate on them).
    assert!(got[0].delivery_id.starts_with(&format!("{id}:evt_")));
    let state = app.get(&format!("{SUBS}/{id}")).await.expect(200).json;
    assert_eq!(state["delivered"], 10);
    assert_eq!(state["failure_count"], 0);
    assert_eq!(state["last_delivery_status"], 200);
}

#[tokio::test]
async fn delivery_goes_on_from_the_cursor_whichever_replica_leads() {
    let app = TestApp::spawn().await;
    let (receiver, addr) = Receiver::start("k", 0).await;
    subscribe(&app, addr, json!(["job.enqueued"]), "k").await;
    let first_leader = app.webhook_deliverer(true);
    for i in 0..3 {
        app.push_id(json!({"type": "w.a", "args": [i]})).await;
    }
    deliver_until(&first_leader, &receiver, 3).await;
    drop(first_leader);
    // Another replica leads now: it starts where the cursor is.
    let second_leader = app.webhook_deliverer(true);
    for i in 3..6 {
        app.push_id(json!({"type": "w.a", "args": [i]})).await;
    }
    deliver_until(&second_leader, &receiver, 6).await;
    let args: Vec<i64> = receiver
        .got()
        .iter()
        .map(|r| {
            assert_eq!(r.event["type"], "job.enqueued");
            r.event["data"]["args"][0].as_i64().unwrap_or(-1)
        })
        .collect();
    let ids: Vec<String> = receiver
        .got()
        .iter()
        .map(|r| r.event["id"].as_str().unwrap().to_owned())
        .collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique.len(), 6, "each event once: {ids:?} {args:?}");
}

#[tokio::test]
async fn private_addresses_are_refused_unless_allowed() {
    let app = TestApp::spawn().await;
    let (receiver, addr) = Receiver::start("k", 0).await;
    let by_ip = subscribe(&app, addr, json!(["*"]), "k").await;
    let by_name = app
        .post(
            SUBS,
            json!({"url": format!("http://localhost:{}/hook", addr.port()), "events": ["*"], "secret": "k"}),
        )
        .await
        .expect(201)
        .json;
    app.push_id(json!({"type": "w.a", "args": []})).await;
    // The default: refused, by address and by a name that resolves to loopback.
    let deliverer = app.webhook_deliverer(false);
    for sub in [&by_ip, &by_name] {
        let state = pass_until(&app, &deliverer, sub["id"].as_str().unwrap(), |s| {
            s["failure_count"].as_i64() >= Some(1)
        })
        .await;
        let error = state["last_error"].as_str().unwrap_or("");
        assert!(error.contains("is not a public address"), "{state}");
        assert!(state["failure_count"].as_i64() >= Some(1), "{state}");
    }
    assert!(receiver.got().is_empty());
    // The test endpoint says the same, and sends nothing.
    let tested = app
        .post(
            &format!("{SUBS}/{}/test", by_ip["id"].as_str().unwrap()),
            json!({}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(tested["success"], false);
    assert!(
        tested["error"]
            .as_str()
            .unwrap()
            .contains("not a public address"),
        "{tested}"
    );
    assert!(receiver.got().is_empty());
}

#[tokio::test]
async fn the_test_endpoint_sends_a_signed_test_event() {
    let app = TestApp::spawn_with(|c| c.webhooks.allow_private = true).await;
    let (receiver, addr) = Receiver::start("k", 0).await;
    let sub = subscribe(&app, addr, json!(["job.completed"]), "k").await;
    let tested = app
        .post(
            &format!("{SUBS}/{}/test", sub["id"].as_str().unwrap()),
            json!({}),
        )
        .await
        .expect(200)
        .json;
    assert_eq!(
        (tested["success"].as_bool(), tested["status"].as_u64()),
        (Some(true), Some(200)),
        "{tested}"
    );
    let got = receiver.got();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event["type"], "webhook.test");
    assert!(got[0].signature_ok);
}

#[tokio::test]
async fn a_subscription_that_keeps_failing_is_paused_and_resumes_where_it_stopped() {
    let app = TestApp::spawn().await;
    let (receiver, addr) = Receiver::start("k", 1).await;
    let sub = subscribe(&app, addr, json!(["job.enqueued"]), "k").await;
    let id = sub["id"].as_str().unwrap().to_owned();
    let job = app.push_id(json!({"type": "w.a", "args": []})).await;
    // Its retries are spent (as if the last one were due now).
    app.sql(&format!(
        "update ojs_webhook set attempt = 8, failure_count = 8 where id = '{id}'"
    ))
    .await;
    let deliverer = app.webhook_deliverer(true);
    let paused = pass_until(&app, &deliverer, &id, |s| s["state"] == "paused").await;
    assert_eq!(paused["state"], "paused", "{paused}");
    let reason = paused["paused_reason"].as_str().unwrap();
    assert!(
        reason.contains("9 failed attempts") && reason.contains("500"),
        "{reason}"
    );
    deliverer.run_once(None).await.unwrap();
    assert!(receiver.got().is_empty(), "nothing delivered while paused");
    // Turned on again: the same event is delivered.
    app.put(&format!("{SUBS}/{id}"), json!({"active": true}))
        .await
        .expect(200);
    deliver_until(&deliverer, &receiver, 1).await;
    let got = receiver.got();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event["subject"], job.as_str());
}

#[tokio::test]
async fn events_pruned_before_delivery_are_reported_as_a_gap() {
    let app = TestApp::spawn().await;
    let (receiver, addr) = Receiver::start("k", 0).await;
    let sub = subscribe(&app, addr, json!(["job.*"]), "k").await;
    let id = sub["id"].as_str().unwrap().to_owned();
    app.put(&format!("{SUBS}/{id}"), json!({"active": false}))
        .await
        .expect(200);
    for i in 0..3 {
        app.push_id(json!({"type": "w.a", "args": [i]})).await;
    }
    // The retention passes while it is paused: every event so far is pruned.
    let far = app.db_now_plus(std::time::Duration::from_secs(3600)).await;
    ojsd::store::event::prune(app.pool(), far, i64::MAX, 10_000)
        .await
        .unwrap();
    let later = app.push_id(json!({"type": "w.a", "args": ["later"]})).await;
    let state = app.get(&format!("{SUBS}/{id}")).await.expect(200).json;
    assert_eq!(state["gap_events"], 3, "{state}");
    assert!(state["gap_at"].is_string());
    assert!(
        app.event_types()
            .await
            .contains(&"webhook.events_pruned".to_owned())
    );
    // Resumed, it goes on from the oldest retained event.
    app.put(&format!("{SUBS}/{id}"), json!({"active": true}))
        .await
        .expect(200);
    deliver_until(&app.webhook_deliverer(true), &receiver, 1).await;
    let subjects: Vec<String> = receiver
        .got()
        .iter()
        .map(|r| r.event["subject"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(subjects, [later]);
}

/// The database's data as `pg_dump` writes it.
fn dump(app: &TestApp) -> String {
    let output = std::process::Command::new("pg_dump")
        .args(["--data-only", "--dbname", &app.db.url()])
        .output()
        .expect("pg_dump runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

const SECRET: &str = "s3cret-that-must-not-be-readable";

#[tokio::test]
async fn a_secret_is_kept_sealed_a_dump_never_shows_it_and_deliveries_are_signed_with_it() {
    let app = TestApp::spawn().await;
    let (receiver, addr) = Receiver::start(SECRET, 0).await;
    let sub = subscribe(&app, addr, json!(["job.*"]), SECRET).await;
    assert_eq!(sub["secret"], SECRET, "shown in the answer that made it");
    let generated = app
        .post(
            SUBS,
            json!({"url": "https://example.com/g", "events": ["*"]}),
        )
        .await
        .expect(201)
        .json["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_sealed(&app, 2, "v1:").await;
    let dump = dump(&app);
    assert!(dump.contains("ojs_webhook"), "the dump holds the table");
    for secret in [SECRET, generated.as_str()] {
        assert!(!dump.contains(secret), "{secret} in the dump");
    }
    // A new secret is sealed too, and signs from then on.
    let id = sub["id"].as_str().unwrap().to_owned();
    let again = "another-s3cret-value";
    app.put(&format!("{SUBS}/{id}"), json!({"secret": again}))
        .await
        .expect(200);
    assert!(!dump_of_secrets(&app).await.contains(again));
    app.put(&format!("{SUBS}/{id}"), json!({"secret": SECRET}))
        .await
        .expect(200);
    app.push_id(json!({"type": "w.a", "args": []})).await;
    deliver_until(&app.webhook_deliverer(true), &receiver, 1).await;
    assert!(receiver.got().iter().all(|r| r.signature_ok));
}

/// Asserts `ojs_webhook` holds `n` secrets, each sealed (starting with `prefix`).
async fn assert_sealed(app: &TestApp, n: usize, prefix: &str) {
    let stored: Vec<String> = sqlx::query_scalar("select secret from ojs_webhook")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert_eq!(stored.len(), n);
    for sealed in &stored {
        assert!(sealed.starts_with(prefix), "{sealed}");
    }
}

async fn dump_of_secrets(app: &TestApp) -> String {
    sqlx::query_scalar::<_, String>("select string_agg(w::text, ' ') from ojs_webhook w")
        .fetch_one(app.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn without_a_secret_key_no_subscription_is_made_and_nothing_is_written() {
    let app = TestApp::spawn_with(|c| c.auth.secret_key = None).await;
    let refused = app
        .post(
            SUBS,
            json!({"url": "https://example.com/h", "events": ["*"], "secret": SECRET}),
        )
        .await
        .expect_error(503, "backend_error")
        .json;
    assert_eq!(
        refused["error"]["details"]["reason"], "secret_key_missing",
        "{refused}"
    );
    assert_eq!(refused["error"]["retryable"], false);
    let rows: i64 = sqlx::query_scalar("select count(*) from ojs_webhook")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_new_key_seals_every_secret_again_at_start_and_clear_ones_from_before_are_sealed() {
    const NEW_KEY: &str = "0f0e0d0c0b0a09080706050403020100f0e0d0c0b0a090807060504030201000";
    let app = TestApp::spawn().await;
    let (receiver, addr) = Receiver::start(SECRET, 0).await;
    let sub = subscribe(&app, addr, json!(["job.*"]), SECRET).await;
    let id = sub["id"].as_str().unwrap().to_owned();
    // A subscription an earlier release stored with its secret in clear.
    app.sql(
        "insert into ojs_webhook (id, url, events, secret, cursor_xid, cursor_seq)
         values ('0196b7a0-0000-7000-8000-0000000000aa', 'https://example.com/old', '{*}',
                 'legacy-clear-secret', 0, 0)",
    )
    .await;
    // A replica starts with the new key, the old one in OJS_SECRET_KEY_PREVIOUS.
    let rotated = app
        .spawn_replica(|c| {
            c.auth.secret_key = Some(ojsd::config::Redacted(NEW_KEY.to_owned()));
            c.auth.secret_key_previous = vec![crate::support::app::test_secret_key()];
        })
        .await;
    let new_id = ojsd::webhook::secret::Keyring::new(NEW_KEY, &[])
        .unwrap()
        .current_id()
        .to_owned();
    assert_sealed(&app, 2, &format!("v1:{new_id}:")).await;
    assert!(!dump_of_secrets(&app).await.contains("legacy-clear-secret"));
    // Deliveries under the new key sign with the same secret.
    app.push_id(json!({"type": "w.a", "args": []})).await;
    let deliverer = app.webhook_deliverer_with(|c| {
        c.webhooks.allow_private = true;
        c.auth.secret_key = Some(ojsd::config::Redacted(NEW_KEY.to_owned()));
    });
    deliver_until(&deliverer, &receiver, 1).await;
    assert!(receiver.got().iter().all(|r| r.signature_ok));
    // A server that has only the old key cannot open it: the delivery fails, and says why.
    app.push_id(json!({"type": "w.a", "args": []})).await;
    let stale = app.webhook_deliverer(true);
    let state = pass_until(&app, &stale, &id, |s| s["failure_count"] != 0).await;
    assert!(
        state["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("cannot be opened"),
        "{state}"
    );
    rotated.stop().await;
}
