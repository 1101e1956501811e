//! Maintenance mode (`/ojs/v1/admin/system/maintenance`): nothing handed out while it is on,
//! everything else going on; on every replica, across restarts, ending by itself.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ojsd::hold::SystemHold;
use ojsd::maintenance::{Promoter, PromoterConfig, Service};
use ojsd::store::hold::HoldRow;
use serde_json::{Value, json};

use crate::support::TestApp;
use crate::support::client::Client;

const PATH: &str = "/ojs/v1/admin/system/maintenance";

async fn set(api: &Client, body: Value) -> Value {
    api.post(PATH, body).await.expect(200).json
}

async fn fetch_now(api: &Client, queue: &str) -> Vec<Value> {
    api.fetch(json!({"queues": [queue], "worker_id": "w-1", "count": 10}))
        .await
}

/// A hold that is on, as a replica that read it would know it.
fn held() -> SystemHold {
    let hold = SystemHold::default();
    hold.learned(HoldRow {
        enabled: true,
        ..HoldRow::default()
    });
    hold
}

#[tokio::test]
async fn while_on_nothing_is_handed_out_and_everything_else_goes_on() {
    let app = TestApp::spawn().await;
    let before = app
        .push_id(json!({"type": "a.b", "queue": "mm", "args": [1]}))
        .await;
    // A job a worker holds when maintenance starts.
    let held_job = app.fetch_one("mm", "w-1").await;
    let second = app
        .push_id(json!({"type": "a.b", "queue": "mm", "args": [2]}))
        .await;

    let on = set(&app, json!({"enabled": true, "reason": "database upgrade"})).await;
    assert_eq!(on["enabled"], true);
    assert_eq!(on["maintenance"], true);
    assert_eq!(on["reason"], "database upgrade");
    assert!(on["started_at"].is_string() && on["enabled_at"] == on["started_at"]);
    assert!(on.get("ends_at").is_none(), "no end given: {on}");
    assert_eq!(app.get(PATH).await.expect(200).json, on);

    // No work handed out; enqueues land.
    assert!(fetch_now(&app, "mm").await.is_empty());
    let during = app
        .push_id(json!({"type": "a.b", "queue": "mm", "args": [3]}))
        .await;
    assert_eq!(app.job(&during).await["state"], "available");
    // The job held before goes on: heartbeat, then ACK.
    let id = held_job["id"].as_str().unwrap();
    app.heartbeat(json!({"worker_id": "w-1", "active_jobs": [id]}))
        .await
        .expect(200);
    app.ack_job(&held_job, "w-1").await.expect(200);
    assert_eq!(app.job(&before).await["state"], "completed");

    // Health, metrics, events.
    let health = app.get("/ojs/v1/health").await.expect(200).json;
    assert_eq!(health["status"], "degraded");
    assert_eq!(health["maintenance"], true);
    // The gauge is process-wide (tests run several servers in one process): only its
    // presence is checked here.
    let metrics = app.get("/metrics").await.expect(200).text;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ojs_maintenance_mode ")),
        "{metrics}"
    );
    assert!(
        app.event_types()
            .await
            .contains(&"server.maintenance_started".to_owned())
    );

    // A long poll waits for the end, then takes a job.
    let poll = app
        .spawn_fetch(&json!({"queues": ["mm"], "worker_id": "w-2", "count": 1, "wait_ms": 5000}));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !poll.is_finished(),
        "a long poll waits while maintenance mode is on"
    );
    let off = set(&app, json!({"enabled": false})).await;
    assert_eq!(off, json!({"enabled": false, "maintenance": false}));
    let got = tokio::time::timeout(Duration::from_secs(3), poll)
        .await
        .expect("the long poll answers once maintenance mode ends")
        .unwrap();
    assert_eq!(got["jobs"][0]["id"], second.as_str(), "{got}");
    assert_eq!(fetch_now(&app, "mm").await.len(), 1);
    assert_eq!(
        app.get("/ojs/v1/health").await.expect(200).json["status"],
        "ok"
    );
    let types = app.event_types().await;
    assert!(
        types.contains(&"server.maintenance_ended".to_owned()),
        "{types:?}"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn with_a_duration_it_ends_by_itself_once() {
    let app = TestApp::spawn().await;
    let id = app
        .push_id(json!({"type": "a.b", "queue": "end", "args": []}))
        .await;
    // The admin UI's shape: `duration` as its select sends it.
    let on = set(
        &app,
        json!({"enabled": true, "reason": "short", "duration": "1s"}),
    )
    .await;
    let started: DateTime<Utc> = on["started_at"].as_str().unwrap().parse().unwrap();
    let ends: DateTime<Utc> = on["ends_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(on["estimated_end"], on["ends_at"]);
    let length = (ends - started).num_milliseconds();
    assert!((990..=1100).contains(&length), "{length} ms");
    assert!(fetch_now(&app, "end").await.is_empty());
    // Changing the reason of a hold in force keeps its start.
    let again = set(
        &app,
        json!({"enabled": true, "reason": "longer", "estimated_duration": "PT2S"}),
    )
    .await;
    assert_eq!(again["started_at"], on["started_at"]);
    assert_eq!(again["reason"], "longer");

    let waited = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(waited.elapsed() < Duration::from_secs(5), "still held");
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = fetch_now(&app, "end").await;
    }
    assert_eq!(got[0]["id"], id.as_str());
    assert_eq!(app.get(PATH).await.expect(200).json["enabled"], false);
    // One replica clears the row and writes the end, with `expired`.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let ended: Vec<Value> = sqlx::query_scalar(
            "select data from ojs_event where type = 'server.maintenance_ended'",
        )
        .fetch_all(app.pool())
        .await
        .unwrap();
        if let [one] = &ended[..] {
            assert_eq!(one["expired"], true);
            assert_eq!(one["reason"], "longer");
            break;
        }
        assert!(ended.is_empty(), "one end event: {ended:?}");
        assert!(
            Instant::now() < deadline,
            "the expired hold was not cleared"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let types = app.event_types().await;
    assert_eq!(
        types
            .iter()
            .filter(|t| t.starts_with("server.maintenance"))
            .collect::<Vec<_>>(),
        [
            "server.maintenance_started",
            "server.maintenance_updated",
            "server.maintenance_ended"
        ]
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn every_replica_follows_within_a_second_and_a_restart_keeps_it() {
    let app = TestApp::spawn().await;
    let replica = app.spawn_replica(|_| {}).await;
    let other = app.of(&replica.base);
    app.push_id(json!({"type": "a.b", "queue": "rep", "args": []}))
        .await;
    // Turned on through the other replica: this one follows within a second.
    set(&other, json!({"enabled": true})).await;
    let seen = Instant::now();
    while app.get("/ojs/v1/health").await.json["status"] != "degraded" {
        assert!(
            seen.elapsed() < Duration::from_secs(1),
            "not followed within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fetch_now(&app, "rep").await.is_empty());
    // A parked long poll on this replica is let go of at once, and waits for the end.
    replica.stop().await;
    let restarted = app.spawn_replica(|_| {}).await;
    let restarted_api = app.of(&restarted.base);
    assert_eq!(
        restarted_api.get(PATH).await.expect(200).json["enabled"],
        true
    );
    assert!(fetch_now(&restarted_api, "rep").await.is_empty());
    set(&app, json!({"enabled": false})).await;
    let seen = Instant::now();
    loop {
        let got = fetch_now(&restarted_api, "rep").await;
        if !got.is_empty() {
            break;
        }
        assert!(
            seen.elapsed() < Duration::from_secs(1),
            "not followed within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    restarted.stop().await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_long_poll_parked_before_it_starts_gets_nothing_during_it() {
    let app = TestApp::spawn().await;
    let poll = app.spawn_fetch(
        &json!({"queues": ["parked"], "worker_id": "w-1", "count": 1, "wait_ms": 1500}),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    set(&app, json!({"enabled": true})).await;
    // Enqueued during maintenance: neither handed to the parked poll nor claimed by it.
    app.push_id(json!({"type": "a.b", "queue": "parked", "args": []}))
        .await;
    let got = poll.await.unwrap();
    assert_eq!(got["jobs"], json!([]), "{got}");
    set(&app, json!({"enabled": false})).await;
    assert_eq!(fetch_now(&app, "parked").await.len(), 1);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_promoter_and_the_cron_firer_pause() {
    let app = TestApp::spawn().await;
    let scheduled = app
        .push_id(json!({"type": "a.b", "queue": "later", "args": [], "scheduled_at": "+PT1H"}))
        .await;
    let config = PromoterConfig {
        interval: Duration::from_secs(1),
        batch_size: 100,
    };
    let in_two_hours = app.db_now_plus(Duration::from_secs(7200)).await;
    let paused = Promoter::new(app.maintenance().with_hold(held()), config.clone());
    paused.run_once(Some(in_two_hours)).await.unwrap();
    assert_eq!(app.job(&scheduled).await["state"], "scheduled");
    Promoter::new(app.maintenance(), config)
        .run_once(Some(in_two_hours))
        .await
        .unwrap();
    assert_eq!(app.job(&scheduled).await["state"], "available");

    app.post(
        "/ojs/v1/cron",
        json!({"name": "tick", "expression": "* * * * *",
               "job_template": {"type": "cron.tick", "args": [], "options": {"queue": "ticks"}}}),
    )
    .await
    .expect(201);
    let later = app.db_now_plus(Duration::from_secs(120)).await;
    let fired = app
        .cron_firer_with(held())
        .run_once(Some(later))
        .await
        .unwrap();
    assert_eq!(fired.processed, 0);
    assert_eq!(app.job_count().await, 1, "no cron job while held");
    let fired = app.cron_firer().run_once(Some(later)).await.unwrap();
    assert!(fired.processed > 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    for (body, field) in [
        (json!({}), "$.enabled"),
        (json!({"enabled": "yes"}), "$.enabled"),
        (json!({"enabled": true, "duration": "soon"}), "$.duration"),
        (json!({"enabled": true, "duration": 0}), "$.duration"),
        (json!({"enabled": true, "duration": -5}), "$.duration"),
        (json!({"enabled": true, "duration": "0s"}), "$.duration"),
        (json!({"enabled": true, "duration": true}), "$.duration"),
        (
            json!({"enabled": true, "estimated_duration": "P200Y"}),
            "$.estimated_duration",
        ),
        (
            json!({"enabled": true, "duration": "1h", "estimated_duration": "2h"}),
            "$.estimated_duration",
        ),
        (json!({"enabled": true, "reason": 5}), "$.reason"),
        (
            json!({"enabled": true, "reason": "x".repeat(1001)}),
            "$.reason",
        ),
    ] {
        let refused = app
            .post(PATH, body.clone())
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(refused.json["error"]["details"]["field"], field, "{body}");
    }
    app.post_text(PATH, "[1]").await.expect(400);
    app.post_text(PATH, "{").await.expect(400);
    assert_eq!(app.get(PATH).await.expect(200).json["enabled"], false);
    // The UI's "until turned off": an empty duration; a blank reason is no reason.
    let on = set(
        &app,
        json!({"enabled": true, "reason": "  ", "duration": ""}),
    )
    .await;
    assert!(
        on.get("ends_at").is_none() && on.get("reason").is_none(),
        "{on}"
    );
    // Whole seconds work too.
    let on = set(&app, json!({"enabled": true, "duration": 90})).await;
    assert!(on["ends_at"].is_string());
    // Turning off what is off writes no event.
    set(&app, json!({"enabled": false})).await;
    set(&app, json!({"enabled": false})).await;
    let ends = app
        .event_types()
        .await
        .into_iter()
        .filter(|t| t == "server.maintenance_ended")
        .count();
    assert_eq!(ends, 1);
    app.stop().await.unwrap();
}
