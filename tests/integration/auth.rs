//! API keys: the role matrix over every documented route, queue limits, revocation, replicas,
//! the CLI, and the refusal to serve the network without a key.

use std::time::{Duration, Instant};

use ojsd::app::Application;
use ojsd::config::Config;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Resp, TestApp, job};

/// A concrete path for a documented template.
fn concrete(template: &str) -> String {
    template
        .replace("{id}", "0196b7a0-0000-7000-8000-000000000000")
        .replace("{name}", "zz")
        .replace("{worker_id}", "w-none")
        .replace("{directive}", "quiet")
        .replace("{action}", "cancel")
}

#[tokio::test]
async fn the_role_matrix_holds_for_every_documented_route() {
    let app = TestApp::spawn().await;
    // Without any key, a loopback server answers everyone.
    app.get("/ojs/v1/queues").await.expect(200);
    let admin = app
        .create_key(None, json!({"role": "admin", "name": "ops"}))
        .await;
    let producer = app
        .create_key(Some(&admin), json!({"role": "producer"}))
        .await;
    let worker = app
        .create_key(Some(&admin), json!({"role": "worker"}))
        .await;

    let doc = app.get("/ojs/openapi.json").await.expect(200).json;
    let mut checked = 0;
    for (template, item) in doc["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_none() || template == "/ojs/v1/admin/reset" {
                continue;
            }
            // Streams would not end; their access is the same as the routes beside them.
            if template.ends_with("/stream")
                || template.ends_with("/events") && template != "/ojs/v1/events"
            {
                continue;
            }
            let method: Method = method.to_uppercase().parse().unwrap();
            let path = concrete(template);
            let body = (method != Method::GET && method != Method::DELETE).then(|| json!({}));
            let needed = ojsd::http::auth::needed(&method, template, false);
            let status = |resp: &Resp| resp.status;
            for key in [None, Some("ojs_not-a-key")] {
                let resp = app.as_key(key, method.clone(), &path, body.clone()).await;
                if needed.is_some() {
                    resp.expect_error(401, "unauthenticated");
                } else {
                    assert!(
                        !matches!(status(&resp), 401 | 403),
                        "{method} {template} is open"
                    );
                }
            }
            for (role, key) in [
                (ojsd::auth::Role::Admin, &admin),
                (ojsd::auth::Role::Producer, &producer),
                (ojsd::auth::Role::Worker, &worker),
            ] {
                let resp = app
                    .as_key(Some(key), method.clone(), &path, body.clone())
                    .await;
                if needed.is_none_or(|n| role.covers(n)) {
                    assert!(
                        !matches!(resp.status, 401 | 403),
                        "{method} {template} with a {role:?} key: {}",
                        resp.text
                    );
                } else {
                    resp.expect_error(403, "forbidden");
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 70, "{checked} operations checked");
    // The roles the issue names.
    use ojsd::auth::Role::{Admin, Producer, Worker};
    let role = |m: Method, p: &str| ojsd::http::auth::needed(&m, p, false);
    assert_eq!(role(Method::POST, "/ojs/v1/jobs"), Some(Producer));
    assert_eq!(role(Method::DELETE, "/ojs/v1/jobs/{id}"), Some(Producer));
    assert_eq!(role(Method::POST, "/ojs/v1/workers/fetch"), Some(Worker));
    assert_eq!(
        role(Method::POST, "/ojs/v1/workers/heartbeat"),
        Some(Worker)
    );
    assert_eq!(
        role(Method::POST, "/ojs/v1/admin/jobs/bulk/{action}"),
        Some(Admin)
    );
    assert_eq!(
        role(Method::DELETE, "/ojs/v1/admin/workers/{worker_id}"),
        Some(Admin)
    );
    // Cron entries, reads included, are for admin keys.
    for (method, path) in [
        (Method::GET, "/ojs/v1/cron"),
        (Method::POST, "/ojs/v1/cron"),
        (Method::GET, "/ojs/v1/cron/{name}"),
        (Method::PATCH, "/ojs/v1/cron/{name}"),
        (Method::DELETE, "/ojs/v1/cron/{name}"),
        (Method::GET, "/ojs/v1/cron/{name}/runs"),
        (Method::GET, "/ojs/v1/crons"),
        (Method::GET, "/ojs/v1/crons/{id}"),
    ] {
        assert_eq!(role(method.clone(), path), Some(Admin), "{method} {path}");
    }
    assert_eq!(role(Method::GET, "/metrics"), None);
    assert_eq!(
        ojsd::http::auth::needed(&Method::GET, "/metrics", true),
        Some(Admin)
    );
}

#[tokio::test]
async fn queue_limited_keys_stay_in_their_queues() {
    let app = TestApp::spawn().await;
    let admin = app.create_key(None, json!({"role": "admin"})).await;
    let producer = app
        .create_key(Some(&admin), json!({"role": "producer", "queues": ["a"]}))
        .await;
    let worker = app
        .create_key(Some(&admin), json!({"role": "worker", "queues": ["a"]}))
        .await;
    app.as_key(
        Some(&admin),
        Method::POST,
        "/ojs/v1/admin/keys",
        Some(json!({"role": "admin", "queues": ["a"]})),
    )
    .await
    .expect_error(400, "invalid_request");

    let push = |key: String, queue: &'static str| {
        let app = &app;
        async move {
            app.as_key(
                Some(&key),
                Method::POST,
                "/ojs/v1/jobs",
                Some(job("a.b", queue)),
            )
            .await
        }
    };
    push(producer.clone(), "b")
        .await
        .expect_error(403, "forbidden");
    let in_a = push(producer.clone(), "a").await.expect(201).json["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let in_b = push(admin.clone(), "b").await.expect(201).json["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.as_key(
        Some(&producer),
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({"jobs": [job("a.b", "a"), job("a.b", "b")]})),
    )
    .await
    .expect_error(403, "forbidden");
    assert_eq!(
        app.job_count().await,
        2,
        "the refused batch enqueued nothing"
    );
    app.as_key(
        Some(&producer),
        Method::GET,
        &format!("/ojs/v1/jobs/{in_b}"),
        None,
    )
    .await
    .expect_error(403, "forbidden");
    app.as_key(
        Some(&producer),
        Method::DELETE,
        &format!("/ojs/v1/jobs/{in_b}"),
        None,
    )
    .await
    .expect_error(403, "forbidden");
    app.as_key(
        Some(&producer),
        Method::GET,
        &format!("/ojs/v1/jobs/{in_a}"),
        None,
    )
    .await
    .expect(200);

    let fetch = |queues: Value| {
        app.as_key(
            Some(&worker),
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": queues, "worker_id": "w"})),
        )
    };
    fetch(json!(["b"])).await.expect_error(403, "forbidden");
    fetch(json!(["a", "b"]))
        .await
        .expect_error(403, "forbidden");
    app.as_key(
        Some(&worker),
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(json!({"worker_id": "w"})),
    )
    .await
    .expect_error(403, "forbidden");
    let fetched = fetch(json!(["a"])).await.expect(200);
    assert_eq!(fetched.json["jobs"][0]["id"], in_a);
    // The job of queue b, fetched by an unlimited worker, is out of this key's reach.
    app.as_key(
        Some(&admin),
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(json!({"queues": ["b"], "worker_id": "w2"})),
    )
    .await
    .expect(200);
    app.as_key(
        Some(&worker),
        Method::POST,
        "/ojs/v1/workers/ack",
        Some(json!({"job_id": in_b})),
    )
    .await
    .expect_error(403, "forbidden");
    app.as_key(
        Some(&worker),
        Method::POST,
        "/ojs/v1/workers/nack/batch",
        Some(json!({"nacks": [{"job_id": in_b, "error": {"message": "x"}}]})),
    )
    .await
    .expect_error(403, "forbidden");
    let in_b_now = app
        .as_key(
            Some(&admin),
            Method::GET,
            &format!("/ojs/v1/jobs/{in_b}"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(in_b_now.json["job"]["state"], "active", "untouched");
    app.as_key(
        Some(&worker),
        Method::POST,
        "/ojs/v1/workers/ack",
        Some(json!({"job_id": in_a, "worker_id": "w"})),
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn revoked_keys_stop_at_once_here_and_within_a_second_on_other_replicas() {
    let app = TestApp::spawn().await;
    let other = app.spawn_replica(|_| {}).await;
    let admin = app.create_key(None, json!({"role": "admin"})).await;
    let producer = app
        .create_key(Some(&admin), json!({"role": "producer", "name": "svc"}))
        .await;
    // Only a hash is stored.
    let stored: Vec<String> = sqlx::query_scalar("select row_to_json(k)::text from ojs_api_key k")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert!(
        stored.iter().all(|row| !row.contains(&producer[4..])),
        "{stored:?}"
    );

    let on_other = |key: String| {
        let client = app.client.clone();
        let url = format!(
            "{}/ojs/v1/jobs/0196b7a0-0000-7000-8000-000000000000",
            other.base
        );
        async move {
            client
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let started = Instant::now();
    while on_other(producer.clone()).await != 404 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the key reached the other replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let list = app
        .as_key(Some(&admin), Method::GET, "/ojs/v1/admin/keys", None)
        .await
        .expect(200);
    let listed = list.json["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "svc")
        .unwrap()
        .clone();
    assert!(producer.starts_with(listed["prefix"].as_str().unwrap()));
    assert!(!list.text.contains(&producer), "lists never show a key");
    let id = listed["id"].as_str().unwrap();
    app.as_key(
        Some(&admin),
        Method::DELETE,
        &format!("/ojs/v1/admin/keys/{id}"),
        None,
    )
    .await
    .expect(200);
    app.as_key(
        Some(&producer),
        Method::POST,
        "/ojs/v1/jobs",
        Some(job("a.b", "q")),
    )
    .await
    .expect_error(401, "unauthenticated");
    let started = Instant::now();
    while on_other(producer.clone()).await != 401 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the revocation reached the other replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.as_key(
        Some(&admin),
        Method::DELETE,
        "/ojs/v1/admin/keys/not-an-id",
        None,
    )
    .await
    .expect_error(404, "not_found");
    other.stop().await;
}

#[tokio::test]
async fn a_server_beyond_loopback_needs_a_key_or_an_explicit_opt_out() {
    let app = TestApp::spawn().await;
    let config = |auth| {
        let mut c = Config::default();
        c.database.url = app.db.url();
        c.server.listen_addr = "0.0.0.0:0".parse().unwrap();
        c.database.skip_migrations = true;
        c.maintenance.enabled = false;
        c.auth.mode = auth;
        c
    };
    let refused = Application::build(&config(ojsd::auth::AuthMode::Keys))
        .await
        .err()
        .expect("no key: refused");
    assert!(
        refused.to_string().contains("ojsd keys create"),
        "{refused}"
    );
    Application::build(&config(ojsd::auth::AuthMode::Disabled))
        .await
        .expect("explicitly disabled");
    app.create_key(None, json!({"role": "admin"})).await;
    Application::build(&config(ojsd::auth::AuthMode::Keys))
        .await
        .expect("with a key");
}

#[tokio::test]
async fn the_cli_creates_lists_and_revokes_keys() {
    let app = TestApp::spawn().await;
    let ojsd = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args(args)
            .env("DATABASE_URL", app.db.url())
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let created = ojsd(&[
        "keys", "create", "--role", "worker", "--queues", "a,b", "--name", "mailer",
    ]);
    let key = created
        .lines()
        .find_map(|l| l.strip_prefix("key: "))
        .expect("the key is printed")
        .to_owned();
    let id = created.split_whitespace().next().unwrap().to_owned();
    let started = Instant::now();
    loop {
        let resp = app
            .as_key(
                Some(&key),
                Method::POST,
                "/ojs/v1/workers/fetch",
                Some(json!({"queues": ["a"]})),
            )
            .await;
        if resp.status == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(3), "{}", resp.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.as_key(
        Some(&key),
        Method::POST,
        "/ojs/v1/jobs",
        Some(job("a.b", "a")),
    )
    .await
    .expect_error(403, "forbidden");
    let listed = ojsd(&["keys", "list"]);
    assert!(
        listed.contains(&id) && listed.contains("mailer") && !listed.contains(&key),
        "{listed}"
    );
    ojsd(&["keys", "revoke", &id]);
    let started = Instant::now();
    while app
        .as_key(
            Some(&key),
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": ["a"]})),
        )
        .await
        .status
        != 401
    {
        assert!(started.elapsed() < Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
