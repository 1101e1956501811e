//! The OpenAPI document as a contract: every request a test sends through
//! [`TestApp::send`](super::harness::TestApp::send) is checked against `GET /ojs/openapi.json`.
//!
//! - A JSON response must match the schema the document gives for its operation and status
//!   (the exact status, else `4XX`/`5XX`, else `default`).
//! - A request the server accepted (2xx) must match the operation's request body schema.
//! - A request to a path the document does not list must be answered 404 or 405.
//!
//! So the whole integration suite checks that the document says what the server does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jsonschema::Validator;
use serde_json::{Value, json};

/// One documented path: its template split into segments (`None` for a parameter).
struct Template {
    path: String,
    segments: Vec<Option<String>>,
}

impl Template {
    fn new(path: &str) -> Template {
        let segments = path
            .split('/')
            .map(|s| (!s.starts_with('{')).then(|| s.to_owned()))
            .collect();
        Template {
            path: path.to_owned(),
            segments,
        }
    }

    /// When the whole path matches, which of its segments are literal: a router prefers a
    /// literal segment to a parameter at the first place they differ, and so does the
    /// comparison of these lists.
    fn matches(&self, path: &str) -> Option<Vec<bool>> {
        let parts: Vec<&str> = path.split('/').collect();
        if parts.len() != self.segments.len() {
            return None;
        }
        let mut literal = Vec::with_capacity(parts.len());
        for (part, segment) in parts.iter().zip(&self.segments) {
            match segment {
                Some(s) if s == part => literal.push(true),
                Some(_) => return None,
                None if part.is_empty() => return None,
                None => literal.push(false),
            }
        }
        Some(literal)
    }
}

/// An exchange to check.
pub struct Exchange<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub request_body: Option<&'a [u8]>,
    pub status: u16,
    pub content_type: Option<&'a str>,
    pub body: &'a str,
}

pub struct Contract {
    doc: Value,
    templates: Vec<Template>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

impl Contract {
    pub fn new(doc: Value) -> Contract {
        let templates = doc["paths"]
            .as_object()
            .expect("the document has paths")
            .keys()
            .map(|p| Template::new(p))
            .collect();
        Contract {
            doc,
            templates,
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// The documented path template `path` falls under (literal segments win over parameters).
    fn template(&self, path: &str) -> Option<&str> {
        self.templates
            .iter()
            .filter_map(|t| t.matches(path).map(|score| (score, t)))
            .max_by(|(a, _), (b, _)| a.cmp(b))
            .map(|(_, t)| t.path.as_str())
    }

    /// Panics, describing the difference, when the exchange does not follow the document.
    pub fn check(&self, x: &Exchange<'_>) {
        let path = x.path.split('?').next().unwrap_or_default();
        let method = x.method.to_ascii_lowercase();
        let operation = self
            .template(path)
            .map(|t| (t, &self.doc["paths"][t][&method]))
            .filter(|(_, op)| op.is_object());
        let Some((template, operation)) = operation else {
            // The admin UI's static files are not the API.
            if path == "/ojs/admin" || path.starts_with("/ojs/admin/") {
                return;
            }
            assert!(
                matches!(x.status, 404 | 405),
                "{} {path} is not in the OpenAPI document, yet it was answered {}: {}",
                x.method,
                x.status,
                x.body
            );
            return;
        };
        let where_ = format!("{} {template} ({})", x.method, x.status);

        // `{}` to an endpoint that reads no body is how tests (and clients) post nothing.
        if (200..300).contains(&x.status)
            && let Some(sent) = x
                .request_body
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            && (sent != json!({}) || operation.get("requestBody").is_some())
        {
            let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
            assert!(
                schema.is_object(),
                "{where_}: the server accepted a JSON body the document does not describe: {sent}"
            );
            self.validate(&format!("request {where_}"), schema, &sent);
        }

        let is_json = x.content_type.is_some_and(|t| {
            t.starts_with("application/openjobspec+json") || t.starts_with("application/json")
        });
        if !is_json || x.body.is_empty() {
            return;
        }
        let responses = &operation["responses"];
        let status = x.status.to_string();
        let range = format!("{}XX", &status[..1]);
        let response = [status.as_str(), range.as_str(), "default"]
            .into_iter()
            .map(|key| &responses[key])
            .find(|r| r.is_object())
            .unwrap_or_else(|| panic!("{where_}: no response documented"));
        let received: Value = serde_json::from_str(x.body)
            .unwrap_or_else(|e| panic!("{where_}: the body is not JSON ({e}): {}", x.body));
        let schema = response["content"]
            .as_object()
            .and_then(|c| c.values().next())
            .map(|media| &media["schema"])
            .unwrap_or_else(|| {
                panic!(
                    "{where_}: documented without a body, yet answered: {}",
                    x.body
                )
            });
        self.validate(&format!("response {where_}"), schema, &received);
    }

    fn validate(&self, what: &str, schema: &Value, instance: &Value) {
        let key = schema.to_string();
        let validator = {
            let mut cache = self.validators.lock().unwrap();
            cache
                .entry(key)
                .or_insert_with(|| {
                    let root = json!({
                        "components": self.doc["components"],
                        "allOf": [schema],
                    });
                    Arc::new(
                        jsonschema::validator_for(&root)
                            .unwrap_or_else(|e| panic!("{what}: the schema does not compile: {e}")),
                    )
                })
                .clone()
        };
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("at {}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what} does not match the OpenAPI document:\n  {}\nbody: {instance}",
            errors.join("\n  ")
        );
    }
}

#[test]
fn the_contract_refuses_what_the_document_does_not_say() {
    let contract = Contract::new(json!({
        "paths": {"/things/{id}": {"get": {"responses": {
            "200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
            "204": {"description": "nothing"},
        }}}},
        "components": {"schemas": {"Thing": {
            "type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}
        }}},
    }));
    let fails = |path: &str, status: u16, body: &str| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            contract.check(&Exchange {
                method: "GET",
                path,
                request_body: None,
                status,
                content_type: Some("application/json"),
                body,
            });
        }))
        .is_err()
    };
    assert!(!fails("/things/1", 200, r#"{"id":"1"}"#));
    assert!(fails("/things/1", 200, r#"{"id":1}"#), "a wrong type");
    assert!(fails("/things/1", 200, "{}"), "a missing field");
    assert!(
        fails("/things/1", 204, r#"{"id":"1"}"#),
        "an undocumented body"
    );
    assert!(
        fails("/other", 200, r#"{"id":"1"}"#),
        "an undocumented path"
    );
    assert!(!fails("/other", 404, r#"{"id":"1"}"#));
}
