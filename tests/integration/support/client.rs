//! The one HTTP client of the tests: every exchange is checked against the server's OpenAPI
//! document ([`Contract`]), whichever server it talks to (the in-process [`TestApp`], a
//! replica in this process, or an `ojsd` process), and the worker protocol has helpers so that
//! tests say what they do (`ack`, `nack`, `heartbeat`, `register`) rather than spell paths.
//!
//! [`TestApp`]: super::TestApp

use std::sync::Arc;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::contract::{Contract, Exchange};

/// A contract-checked client of one server.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub client: reqwest::Client,
    /// The server's OpenAPI document, read on the first request.
    contract: Arc<tokio::sync::OnceCell<Contract>>,
}

/// One HTTP response, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`).
    pub fn new(base: impl Into<String>) -> Client {
        ojsd::app::install_tls();
        Client {
            base: base.into(),
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(32)
                .build()
                .expect("http client"),
            contract: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// A client of the server at `base` that sends with `http` (for timeouts of its own).
    pub fn with_http(base: impl Into<String>, http: reqwest::Client) -> Client {
        Client {
            base: base.into(),
            client: http,
            contract: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// A client of another server (a replica of the same build), sharing this one's
    /// connection pool and document.
    pub fn of(&self, base: impl Into<String>) -> Client {
        Client {
            base: base.into(),
            client: self.client.clone(),
            contract: self.contract.clone(),
        }
    }

    /// The server's OpenAPI document as a [`Contract`], read before the first request (a
    /// server may be gone by the time an answer came).
    async fn contract(&self) -> Result<&Contract, reqwest::Error> {
        self.contract
            .get_or_try_init(|| async {
                let doc: Value = self
                    .client
                    .get(format!("{}/ojs/openapi.json", self.base))
                    .send()
                    .await?
                    .json()
                    .await?;
                Ok(Contract::new(doc))
            })
            .await
    }

    /// Sends a request with an optional raw body and content type, and checks the exchange
    /// against the server's OpenAPI document.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        self.try_send(method, path, body, headers)
            .await
            .expect("request reaches the server")
    }

    /// [`Client::send`] for a server that may be away: `Err` when no answer came (refused,
    /// reset, timed out); an answer is checked against the document.
    pub async fn try_send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Resp, reqwest::Error> {
        let contract = self.contract().await?;
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = &body {
            request = request.body(body.clone());
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await?;
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        contract.check(&Exchange {
            method: method.as_str(),
            path,
            request_body: body.as_deref(),
            status,
            content_type: headers
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            body: &text,
        });
        Ok(Resp {
            status,
            headers,
            text,
            json,
        })
    }

    /// A request with an optional `Authorization: Bearer <key>` and JSON body.
    pub async fn as_key(
        &self,
        key: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Resp {
        let authorization = key.map(|k| format!("Bearer {k}"));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(value) = &authorization {
            headers.push(("authorization", value));
        }
        self.send(
            method,
            path,
            body.map(|b| b.to_string().into_bytes()),
            &headers,
        )
        .await
    }

    /// Creates an API key through the admin API (with the `admin` key, or openly while there
    /// is none) and returns it.
    pub async fn create_key(&self, admin: Option<&str>, body: Value) -> String {
        let resp = self
            .as_key(admin, Method::POST, "/ojs/v1/admin/keys", Some(body))
            .await
            .expect(201);
        let key = resp.json["key"].as_str().unwrap().to_owned();
        assert!(key.starts_with("ojs_"), "{}", resp.text);
        key
    }

    /// A POST of JSON to a server that may be away (see [`Client::try_send`]).
    pub async fn try_post(&self, path: &str, body: Value) -> Result<Resp, reqwest::Error> {
        self.try_send(
            Method::POST,
            path,
            Some(body.to_string().into_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    }

    /// A JSON request with `method` and `body`.
    pub async fn send_json(&self, method: Method, path: &str, body: &Value) -> Resp {
        self.send(
            method,
            path,
            Some(body.to_string().into_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send_json(Method::POST, path, &body).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Resp {
        self.send_json(Method::PUT, path, &body).await
    }

    pub async fn post_text(&self, path: &str, body: &str) -> Resp {
        self.send(
            Method::POST,
            path,
            Some(body.as_bytes().to_vec()),
            &[("content-type", "application/json")],
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, path, None, &[]).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(Method::DELETE, path, None, &[]).await
    }

    /// Enqueues a job and returns it (asserts 201).
    pub async fn push(&self, job: Value) -> Value {
        let resp = self.post("/ojs/v1/jobs", job).await.expect(201);
        resp.json["job"].clone()
    }

    /// Enqueues a job and returns its id.
    pub async fn push_id(&self, job: Value) -> String {
        self.push(job).await["id"].as_str().unwrap().to_owned()
    }

    /// The job as INFO returns it (asserts 200).
    pub async fn job(&self, id: &str) -> Value {
        self.get(&format!("/ojs/v1/jobs/{id}"))
            .await
            .expect(200)
            .json["job"]
            .clone()
    }

    /// FETCH with `body`; the jobs claimed (asserts 200).
    pub async fn fetch(&self, body: Value) -> Vec<Value> {
        let resp = self.post("/ojs/v1/workers/fetch", body).await.expect(200);
        resp.json["jobs"].as_array().cloned().unwrap_or_default()
    }

    /// Fetches one job of `queue` for `worker` and returns it (asserts one was claimed).
    pub async fn fetch_one(&self, queue: &str, worker: &str) -> Value {
        let jobs = self
            .fetch(json!({"queues": [queue], "worker_id": worker}))
            .await;
        assert_eq!(jobs.len(), 1, "expected one job from {queue}");
        jobs[0].clone()
    }

    /// ACK: `{"job_id", "worker_id"?, "result"?}`.
    pub async fn ack(&self, body: Value) -> Resp {
        self.post("/ojs/v1/workers/ack", body).await
    }

    /// ACKs `job` as `worker` (asserts 200).
    pub async fn ack_job(&self, job: &Value, worker: &str) -> Resp {
        self.ack(json!({"job_id": job["id"], "worker_id": worker}))
            .await
            .expect(200)
    }

    /// NACK: `{"job_id", "worker_id"?, "error"?, "requeue"?}`.
    pub async fn nack(&self, body: Value) -> Resp {
        self.post("/ojs/v1/workers/nack", body).await
    }

    /// A heartbeat: `{"worker_id", "active_jobs"?, "state"?, ...}`.
    pub async fn heartbeat(&self, body: Value) -> Resp {
        self.post("/ojs/v1/workers/heartbeat", body).await
    }

    /// A registration: `{"worker_id", "queues"?, "pool"?, ...}`.
    pub async fn register(&self, body: Value) -> Resp {
        self.post("/ojs/v1/workers/register", body).await
    }

    /// Starts a POST in the background; resolves to its status. (Not contract-checked: the
    /// concurrent requests of a race are checked by the answers the test reads afterwards.)
    pub fn spawn_post(&self, path: &str, body: &Value) -> JoinHandle<u16> {
        let request = self.client.post(format!("{}{path}", self.base)).json(body);
        tokio::spawn(async move {
            request
                .send()
                .await
                .expect("request reaches the server")
                .status()
                .as_u16()
        })
    }

    /// Starts a (long-polling) FETCH in the background; resolves to the response body.
    pub fn spawn_fetch(&self, body: &Value) -> JoinHandle<Value> {
        spawn_fetch(&self.client, &self.base, body)
    }
}

/// Starts a (long-polling) FETCH against the server at `base` in the background; resolves to
/// the response body.
pub fn spawn_fetch(client: &reqwest::Client, base: &str, body: &Value) -> JoinHandle<Value> {
    let request = client
        .post(format!("{base}/ojs/v1/workers/fetch"))
        .json(body);
    tokio::spawn(async move {
        request
            .send()
            .await
            .expect("request reaches the server")
            .json::<Value>()
            .await
            .expect("a JSON body")
    })
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status, printing the body when it differs.
    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }

    /// Asserts an OJS error with this status and code, and the error body's invariants.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Resp {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        let e = &self.json["error"];
        assert_eq!(e["code"], code, "body: {}", self.text);
        assert_eq!(e["type"], code, "body: {}", self.text);
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.text
        );
        assert!(e["retryable"].is_boolean(), "{}", self.text);
        assert!(
            e["hint"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.text
        );
        assert_eq!(
            e["docs_url"],
            format!("https://openjobspec.org/errors/{code}"),
            "{}",
            self.text
        );
        assert_eq!(
            e["request_id"].as_str(),
            self.header("x-request-id"),
            "request_id echoes X-Request-Id"
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/openjobspec+json")
        );
        self
    }
}

/// A list of JSON objects: an array value, or the values themselves.
pub trait Items {
    fn items(&self) -> &[Value];
}

impl Items for Value {
    #[track_caller]
    fn items(&self) -> &[Value] {
        self.as_array()
            .unwrap_or_else(|| panic!("an array: {self}"))
    }
}

impl Items for [Value] {
    fn items(&self) -> &[Value] {
        self
    }
}

impl Items for Vec<Value> {
    fn items(&self) -> &[Value] {
        self
    }
}

/// The `id` of each object of `items`.
#[track_caller]
pub fn ids(items: &(impl Items + ?Sized)) -> Vec<String> {
    items
        .items()
        .iter()
        .map(|item| item["id"].as_str().expect("an id").to_owned())
        .collect()
}
