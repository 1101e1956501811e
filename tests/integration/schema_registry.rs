//! The schema registry: CRUD as the conformance suite, the admin UI and the extension call it,
//! and the check of a PUSH's `args` against the job type's registered schema, in force on
//! every replica as soon as the registration answers.

use serde_json::{Value, json};

use crate::support::TestApp;

const ADMIN: &str = "/ojs/v1/admin/schemas";

fn tuple_schema() -> Value {
    json!({"type": "array", "items": [{"type": "string"}], "minItems": 1})
}

fn invoice_schema() -> Value {
    json!({
        "type": "object",
        "required": ["customer_id", "amount"],
        "properties": {
            "customer_id": {"type": "string"},
            "amount": {"type": "integer", "minimum": 0},
            "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}
        }
    })
}

#[tokio::test]
async fn versions_are_registered_read_listed_and_deleted() {
    let app = TestApp::spawn().await;
    let one = app
        .put(
            &format!("{ADMIN}/report.generate/1"),
            json!({"schema": tuple_schema()}),
        )
        .await
        .expect(201)
        .json;
    assert_eq!(one["type"], "report.generate");
    assert_eq!(one["job_type"], "report.generate");
    assert_eq!(one["version"], 1);
    assert_eq!(one["schema"], tuple_schema());
    assert_eq!(one["validation"], "strict");
    assert_eq!(one["validation_explicit"], false);
    assert!(one["created_at"].is_string());
    let two_schema = json!({"type": "array", "items": [{"type": "string"}, {"type": "object"}]});
    let two = app
        .put(
            &format!("{ADMIN}/report.generate/2.1.0"),
            json!({"schema": two_schema, "validation": "warn"}),
        )
        .await
        .expect(201)
        .json;
    assert_eq!(two["version"], "2.1.0");
    assert_eq!(two["validation"], "warn");
    assert_eq!(two["validation_explicit"], true);

    // The latest is the highest version; each version reads back; the list is latest first.
    let latest = app
        .get(&format!("{ADMIN}/report.generate"))
        .await
        .expect(200)
        .json;
    assert_eq!(latest["version"], "2.1.0");
    assert_eq!(latest["schema"]["items"][1]["type"], "object");
    let first = app
        .get(&format!("{ADMIN}/report.generate/1"))
        .await
        .expect(200)
        .json;
    assert_eq!(first, one);
    // 1, 1.0 and 1.0.0 are one version.
    assert_eq!(
        app.get(&format!("{ADMIN}/report.generate/1.0.0"))
            .await
            .expect(200)
            .json,
        one
    );
    let versions = app
        .get(&format!("{ADMIN}/report.generate/versions"))
        .await
        .expect(200)
        .json;
    assert_eq!(versions["type"], "report.generate");
    let listed: Vec<(Value, Value)> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].clone(), v["is_latest"].clone()))
        .collect();
    assert_eq!(
        listed,
        [(json!("2.1.0"), json!(true)), (json!(1), json!(false))]
    );
    let all = app.get(ADMIN).await.expect(200).json;
    assert_eq!(all["schemas"].as_array().unwrap().len(), 2);
    assert_eq!(all["schemas"][0]["version"], "2.1.0");

    // A registered version never changes.
    for again in ["1", "1.0", "1.0.0"] {
        let e = app
            .put(
                &format!("{ADMIN}/report.generate/{again}"),
                json!({"schema": {"type": "array"}}),
            )
            .await
            .expect_error(409, "conflict");
        assert!(
            e.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("already")
        );
    }
    assert_eq!(
        app.get(&format!("{ADMIN}/report.generate/1"))
            .await
            .expect(200)
            .json["schema"],
        tuple_schema()
    );

    // Deleting the latest makes the one before it the latest.
    let deleted = app
        .delete(&format!("{ADMIN}/report.generate/2.1"))
        .await
        .expect(200)
        .json;
    assert_eq!(deleted["version"], "2.1.0");
    assert_eq!(
        app.get(&format!("{ADMIN}/report.generate"))
            .await
            .expect(200)
            .json["version"],
        1
    );
    app.delete(&format!("{ADMIN}/report.generate/1"))
        .await
        .expect(200);
    app.get(&format!("{ADMIN}/report.generate"))
        .await
        .expect_error(404, "not_found");
    let empty = app
        .get(&format!("{ADMIN}/report.generate/versions"))
        .await
        .expect(200)
        .json;
    assert_eq!(empty["versions"], json!([]));
    app.delete(&format!("{ADMIN}/does.not.exist/99"))
        .await
        .expect_error(404, "not_found");
    app.get(&format!("{ADMIN}/report.generate/1"))
        .await
        .expect_error(404, "not_found");

    let events = app.event_types().await;
    assert_eq!(
        events.iter().filter(|e| *e == "schema.registered").count(),
        2,
        "{events:?}"
    );
    assert_eq!(
        events.iter().filter(|e| *e == "schema.deleted").count(),
        2,
        "{events:?}"
    );
}

#[tokio::test]
async fn bad_registrations_get_clear_400s() {
    let app = TestApp::spawn().await;
    let cases = [
        ("a.b/1", json!({}), "$.schema", "'schema' is required"),
        (
            "a.b/1",
            json!({"schema": {"type": 12}}),
            "$.schema",
            "not a valid JSON Schema",
        ),
        (
            "a.b/1",
            json!({"schema": [1]}),
            "$.schema",
            "must be a JSON Schema object",
        ),
        (
            "a.b/1",
            json!({"schema": {}, "validation": "loud"}),
            "$.validation",
            "strict, warn or off",
        ),
        (
            "a.b/v1",
            json!({"schema": {}}),
            "version",
            "is not a schema version",
        ),
        (
            "a.b/1.2.3.4",
            json!({"schema": {}}),
            "version",
            "is not a schema version",
        ),
        (
            "a.b/01",
            json!({"schema": {}}),
            "version",
            "is not a schema version",
        ),
        (
            "Not..A.Type/1",
            json!({"schema": {}}),
            "type",
            "not a valid job type",
        ),
        (
            "a.b/1",
            json!({"schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "items": [{}]}}),
            "$.schema",
            "not a valid JSON Schema",
        ),
    ];
    for (path, body, field, message) in cases {
        let e = app
            .put(&format!("{ADMIN}/{path}"), body.clone())
            .await
            .expect_error(400, "invalid_request")
            .json;
        assert_eq!(e["error"]["details"]["field"], field, "{path} {body}: {e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(message),
            "{path} {body}: {e}"
        );
    }
    app.get(&format!("{ADMIN}/a.b/x"))
        .await
        .expect_error(400, "invalid_request");
    // A name that is not a job type has nothing registered (a NUL byte never reaches the
    // database).
    app.get(&format!("{ADMIN}/a%00b"))
        .await
        .expect_error(404, "not_found");
    app.get("/ojs/v1/schemas/a%00b")
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        app.get(&format!("{ADMIN}/a%00b/versions"))
            .await
            .expect(200)
            .json["versions"],
        json!([])
    );
    app.get(&format!("{ADMIN}/a%00b/1"))
        .await
        .expect_error(404, "not_found");
    app.delete(&format!("{ADMIN}/a%00b/1"))
        .await
        .expect_error(404, "not_found");
    assert_eq!(app.get(ADMIN).await.expect(200).json["schemas"], json!([]));
}

#[tokio::test]
async fn a_push_is_checked_against_the_version_it_names_else_the_latest() {
    let app = TestApp::spawn().await;
    app.put(
        &format!("{ADMIN}/invoice.generate/1"),
        json!({"schema": invoice_schema()}),
    )
    .await
    .expect(201);
    // Version 2 also wants a currency.
    let mut v2 = invoice_schema();
    v2["required"] = json!(["customer_id", "amount", "currency"]);
    app.put(
        &format!("{ADMIN}/invoice.generate/2"),
        json!({"schema": v2}),
    )
    .await
    .expect(201);

    let ok = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "invoice.generate", "args": [{"customer_id": "c1", "amount": 5, "currency": "EUR"}]}),
        )
        .await
        .expect(201)
        .json;
    assert!(ok.get("warnings").is_none(), "{ok}");
    // Version 1 does not need the currency; the job's version is kept as sent.
    let v1 = app
        .push(json!({"type": "invoice.generate", "version": 1, "args": [{"customer_id": "c1", "amount": 5}]}))
        .await;
    let id = v1["id"].as_str().unwrap();
    assert_eq!(app.job(id).await["version"], 1);

    // The latest (2) wants it.
    let e = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "invoice.generate", "args": [{"customer_id": "c1", "amount": -5}]}),
        )
        .await
        .expect_error(400, "schema_validation")
        .json;
    let error = &e["error"];
    assert_eq!(error["retryable"], false);
    assert_eq!(error["details"]["schema"], "invoice.generate@2");
    let paths: Vec<&str> = error["details"]["validation_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["$.args[0].amount", "$.args[0]"], "{e}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("$.args[0].amount") && message.contains("invoice.generate@2"),
        "{message}"
    );

    // A version that is not registered.
    let e = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "invoice.generate", "version": "3.0.0", "args": [{"customer_id": "c", "amount": 1}]}),
        )
        .await
        .expect_error(400, "schema_validation")
        .json;
    assert_eq!(e["error"]["details"]["field"], "$.version");
    // Not the one object the schema describes.
    let e = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "invoice.generate", "version": 1, "args": ["c1", 5]}),
        )
        .await
        .expect_error(400, "schema_validation")
        .json;
    assert_eq!(e["error"]["details"]["field"], "$.args");

    // A batch is all or nothing, the failing job named by its index.
    let before = app.job_count().await;
    let e = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [
                {"type": "invoice.generate", "version": 1, "args": [{"customer_id": "c", "amount": 1}]},
                {"type": "invoice.generate", "version": 1, "args": [{"customer_id": 7, "amount": 1}]}
            ]}),
        )
        .await
        .expect_error(400, "schema_validation")
        .json;
    assert_eq!(e["error"]["details"]["index"], 1);
    assert_eq!(e["error"]["details"]["field"], "$.args[0].customer_id");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("jobs[1]: ")
    );
    assert_eq!(app.job_count().await, before);

    // Types without a schema are not checked.
    app.push(json!({"type": "other.job", "args": [{"amount": "lots"}]}))
        .await;
}

#[tokio::test]
async fn warn_mode_accepts_with_warnings_and_off_mode_only_keeps_the_schema() {
    let app = TestApp::spawn().await;
    app.put(
        &format!("{ADMIN}/email.send/1"),
        json!({"schema": {"type": "array", "items": {"type": "string"}}, "validation": "warn"}),
    )
    .await
    .expect(201);
    let pushed = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": ["a@b.c", 42]}),
        )
        .await
        .expect(201)
        .json;
    let warnings = pushed["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{pushed}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("schema email.send@1: $.args[1]: "),
        "{pushed}"
    );
    let batch = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "email.send", "args": ["x"]}, {"type": "email.send", "args": [1]}]}),
        )
        .await
        .expect(201)
        .json;
    assert_eq!(batch["count"], 2);
    assert!(
        batch["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("jobs[1]: schema email.send@1"),
        "{batch}"
    );

    app.put(
        &format!("{ADMIN}/email.send/2"),
        json!({"schema": {"type": "array", "maxItems": 0}, "validation": "off"}),
    )
    .await
    .expect(201);
    let pushed = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": [1, 2]}),
        )
        .await
        .expect(201)
        .json;
    assert!(pushed.get("warnings").is_none(), "{pushed}");
}

#[tokio::test]
async fn a_registration_is_in_force_on_every_replica_when_it_answers() {
    let app = TestApp::spawn().await;
    let other = app.spawn_replica(|_| {}).await;
    let api_b = app.api.of(&other.base);
    // Replica B has loaded its configuration (an enqueue), so it holds a cached generation.
    api_b
        .post("/ojs/v1/jobs", json!({"type": "sms.send", "args": [1]}))
        .await
        .expect(201);
    app.put(
        &format!("{ADMIN}/sms.send/1"),
        json!({"schema": {"type": "array", "items": {"type": "string"}}}),
    )
    .await
    .expect(201);
    // At once on B: the enqueue statement refuses B's stale generation, B reloads and checks.
    api_b
        .post("/ojs/v1/jobs", json!({"type": "sms.send", "args": [1]}))
        .await
        .expect_error(400, "schema_validation");
    app.delete(&format!("{ADMIN}/sms.send/1")).await.expect(200);
    api_b
        .post("/ojs/v1/jobs", json!({"type": "sms.send", "args": [1]}))
        .await
        .expect(201);
    other.stop().await;
}

#[tokio::test]
async fn the_extension_binding_wraps_the_same_registry() {
    let app = TestApp::spawn().await;
    let created = app
        .post(
            "/ojs/v1/schemas",
            json!({"job_type": "invoice.generate", "version": "2.0.0", "schema": invoice_schema()}),
        )
        .await
        .expect(201)
        .json;
    assert_eq!(created["schema"]["job_type"], "invoice.generate");
    assert_eq!(created["schema"]["version"], "2.0.0");
    assert_eq!(created["schema"]["schema"], invoice_schema());
    app.post(
        "/ojs/v1/schemas",
        json!({"job_type": "invoice.generate", "version": "2.0", "schema": {}}),
    )
    .await
    .expect_error(409, "conflict");
    app.post(
        "/ojs/v1/schemas",
        json!({"job_type": "invoice.generate", "schema": {}}),
    )
    .await
    .expect_error(400, "invalid_request");
    let latest = app
        .get("/ojs/v1/schemas/invoice.generate")
        .await
        .expect(200)
        .json;
    assert_eq!(latest["schema"]["version"], "2.0.0");
    // The same row through the admin binding.
    assert_eq!(
        app.get(&format!("{ADMIN}/invoice.generate/2"))
            .await
            .expect(200)
            .json,
        latest["schema"]
    );
    let versions = app
        .get("/ojs/v1/schemas/invoice.generate/versions")
        .await
        .expect(200)
        .json;
    assert_eq!(versions["versions"][0]["is_latest"], true);
    let deleted = app
        .delete("/ojs/v1/schemas/invoice.generate/2.0.0")
        .await
        .expect(200)
        .json;
    assert_eq!(deleted["schema"]["version"], "2.0.0");
    app.get("/ojs/v1/schemas/invoice.generate")
        .await
        .expect_error(404, "not_found");
}
