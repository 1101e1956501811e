//! Job traces: the spans ojsd exports over OTLP/HTTP to a collector running in this test, their
//! parents and links, and the trace context a job carries in `meta`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::app::TestApp;
use crate::support::client::Resp;

/// An OTLP/HTTP (protobuf) trace receiver on a free port, keeping every span it is sent.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    resources: Arc<Mutex<Vec<(String, String)>>>,
}

impl Collector {
    async fn start() -> Collector {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let resources: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let (kept, named) = (spans.clone(), resources.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: Bytes| {
                let (kept, named) = (kept.clone(), named.clone());
                async move {
                    let request =
                        ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
                    for resource_spans in request.resource_spans {
                        if let Some(resource) = resource_spans.resource {
                            for kv in resource.attributes {
                                if let Some(text) = kv.value.and_then(|v| v.value).and_then(text) {
                                    named.lock().unwrap().push((kv.key, text));
                                }
                            }
                        }
                        for scope in resource_spans.scope_spans {
                            kept.lock().unwrap().extend(scope.spans);
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector {
            url,
            spans,
            resources,
        }
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits for the span named `name` of job `id` (exports are batched).
    async fn span_of(&self, name: &str, id: &str) -> Span {
        for _ in 0..150 {
            if let Some(span) = self
                .spans()
                .into_iter()
                .find(|s| s.name == name && attr(s, "ojs.job.id").as_deref() == Some(id))
            {
                return span;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "no span '{name}' for job {id}; got {:?}",
            self.spans()
                .iter()
                .map(|s| (&s.name, attr(s, "ojs.job.id")))
                .collect::<Vec<_>>()
        );
    }
}

fn text(value: AnyValue) -> Option<String> {
    match value {
        AnyValue::StringValue(s) => Some(s),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A span attribute as text.
fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value)
        .and_then(text)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's trace id and parent span id.
fn parent_of(span: &Span) -> (String, String) {
    (hex(&span.trace_id), hex(&span.parent_span_id))
}

/// A span's links as (trace id, span id).
fn links_of(span: &Span) -> Vec<(String, String)> {
    span.links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect()
}

/// `span` continues the producer's trace under the job's enqueue span, linked to the worker's.
fn assert_child_linked_to_worker(span: &Span, enqueue_span: &str) {
    assert_eq!(
        parent_of(span),
        (PRODUCER_TRACE.into(), enqueue_span.to_owned()),
        "{}",
        span.name
    );
    assert_eq!(
        links_of(span),
        vec![(WORKER_TRACE.into(), WORKER_SPAN.into())],
        "{}",
        span.name
    );
}

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
const SDK_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const SDK_SPAN: &str = "b7ad6b7169203331";
const WORKER_TRACE: &str = "11112222333344445555666677778888";
const WORKER_SPAN: &str = "aaaabbbbccccdddd";

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

async fn post_traced(app: &TestApp, path: &str, body: Value, traceparent: &str) -> Resp {
    app.send(
        Method::POST,
        path,
        Some(body.to_string().into_bytes()),
        &[
            ("content-type", "application/json"),
            ("traceparent", traceparent),
            ("tracestate", "vendor=x1"),
        ],
    )
    .await
}

#[tokio::test]
async fn a_producers_trace_goes_on_into_the_jobs_claim_ack_and_nack() {
    let collector = Collector::start().await;
    let app = TestApp::spawn_with(|c| {
        c.telemetry.otel.endpoint = Some(collector.url.clone());
        c.server.service_name = "ojsd-traced".into();
    })
    .await;
    let producer = traceparent(PRODUCER_TRACE, PRODUCER_SPAN);

    // 1. No trace in `meta`: the producer's header is the enqueue span's parent, and the job
    //    carries the enqueue span's context.
    let first = post_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "email.send", "queue": "traced", "args": [1], "meta": {"k": "v"}}),
        &producer,
    )
    .await
    .expect(201);
    let first_id = first.json["job"]["id"].as_str().unwrap().to_owned();
    let carried = first.json["job"]["meta"]["traceparent"]
        .as_str()
        .expect("the job carries a trace context")
        .to_owned();
    assert_eq!(first.json["job"]["meta"]["k"], "v", "meta otherwise kept");
    assert_eq!(first.json["job"]["meta"]["tracestate"], "vendor=x1");
    assert!(
        carried.starts_with(&format!("00-{PRODUCER_TRACE}-")),
        "{carried}"
    );
    let enqueue_span = carried[36..52].to_owned();
    assert_ne!(enqueue_span, PRODUCER_SPAN);

    // 2. A producer SDK put its own context in `meta`: it is kept and is the parent; the
    //    request's header becomes a link.
    let sdk = traceparent(SDK_TRACE, SDK_SPAN);
    let second = post_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "report.build", "queue": "traced", "args": [], "meta": {"traceparent": sdk}}),
        &producer,
    )
    .await
    .expect(201);
    let second_id = second.json["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(second.json["job"]["meta"]["traceparent"], sdk.as_str());
    assert!(second.json["job"]["meta"].get("tracestate").is_none());

    // 3. A batch without any trace: each job's enqueue span is a root, and the job carries it.
    let batch = app
        .post(
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "batch.item", "queue": "traced", "args": []}]}),
        )
        .await
        .expect(201);
    let third_id = batch.json["jobs"][0]["id"].as_str().unwrap().to_owned();
    let third_carried = batch.json["jobs"][0]["meta"]["traceparent"]
        .as_str()
        .expect("a root span's context")
        .to_owned();

    // The worker claims all three, within its own trace.
    let worker = traceparent(WORKER_TRACE, WORKER_SPAN);
    let fetched = post_traced(
        &app,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["traced"], "count": 3, "worker_id": "w-1"}),
        &worker,
    )
    .await
    .expect(200);
    assert_eq!(fetched.json["jobs"].as_array().unwrap().len(), 3);
    for job in fetched.json["jobs"].as_array().unwrap() {
        assert!(job["meta"]["traceparent"].is_string(), "{job}");
    }
    post_traced(
        &app,
        "/ojs/v1/workers/ack",
        json!({"job_id": first_id, "worker_id": "w-1"}),
        &worker,
    )
    .await
    .expect(200);
    post_traced(
        &app,
        "/ojs/v1/workers/nack",
        json!({"job_id": second_id, "worker_id": "w-1",
               "error": {"type": "Timeout", "message": "the report timed out"}}),
        &worker,
    )
    .await
    .expect(200);
    app.post(
        "/ojs/v1/workers/ack/batch",
        json!({"worker_id": "w-1", "acks": [{"job_id": third_id}]}),
    )
    .await
    .expect(200);
    // A refused ACK (the job is no longer active) is a span too, marked as an error.
    post_traced(
        &app,
        "/ojs/v1/workers/ack",
        json!({"job_id": first_id, "worker_id": "w-1"}),
        &worker,
    )
    .await
    .expect(409);

    // Enqueue spans.
    let enqueue = collector.span_of("traced enqueue", &first_id).await;
    assert_eq!(hex(&enqueue.span_id), enqueue_span);
    assert_eq!(
        parent_of(&enqueue),
        (PRODUCER_TRACE.into(), PRODUCER_SPAN.into())
    );
    assert!(enqueue.links.is_empty());
    assert_eq!(attr(&enqueue, "messaging.system").as_deref(), Some("ojs"));
    assert_eq!(
        attr(&enqueue, "messaging.operation.type").as_deref(),
        Some("send")
    );
    assert_eq!(
        attr(&enqueue, "messaging.destination.name").as_deref(),
        Some("traced")
    );
    assert_eq!(
        attr(&enqueue, "ojs.job.type").as_deref(),
        Some("email.send")
    );
    assert_eq!(attr(&enqueue, "ojs.job.queue").as_deref(), Some("traced"));
    assert_eq!(attr(&enqueue, "ojs.job.attempt").as_deref(), Some("0"));
    let enqueue_sdk = collector.span_of("traced enqueue", &second_id).await;
    assert_eq!(parent_of(&enqueue_sdk), (SDK_TRACE.into(), SDK_SPAN.into()));
    assert_eq!(
        links_of(&enqueue_sdk),
        vec![(PRODUCER_TRACE.into(), PRODUCER_SPAN.into())]
    );
    let enqueue_root = collector.span_of("traced enqueue", &third_id).await;
    assert!(enqueue_root.parent_span_id.is_empty(), "a root span");
    assert_eq!(
        third_carried,
        traceparent(&hex(&enqueue_root.trace_id), &hex(&enqueue_root.span_id))
    );

    // Fetch (claim) spans: children of the job's trace, linked to the worker's.
    let claim = collector.span_of("traced fetch", &first_id).await;
    assert_child_linked_to_worker(&claim, &enqueue_span);
    assert_eq!(attr(&claim, "ojs.job.attempt").as_deref(), Some("1"));
    assert_eq!(attr(&claim, "ojs.worker.id").as_deref(), Some("w-1"));
    assert_eq!(
        attr(&claim, "messaging.operation.type").as_deref(),
        Some("receive")
    );
    let claim_sdk = collector.span_of("traced fetch", &second_id).await;
    assert_eq!(parent_of(&claim_sdk), (SDK_TRACE.into(), SDK_SPAN.into()));
    let claim_root = collector.span_of("traced fetch", &third_id).await;
    assert_eq!(
        parent_of(&claim_root),
        (hex(&enqueue_root.trace_id), hex(&enqueue_root.span_id))
    );

    // ACK and NACK spans.
    let ack = collector.span_of("traced ack", &first_id).await;
    assert_child_linked_to_worker(&ack, &enqueue_span);
    assert_eq!(attr(&ack, "ojs.job.attempt").as_deref(), Some("1"));
    assert_eq!(attr(&ack, "ojs.job.state").as_deref(), Some("completed"));
    assert_ne!(
        ack.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    let nack = collector.span_of("traced nack", &second_id).await;
    assert_eq!(parent_of(&nack), (SDK_TRACE.into(), SDK_SPAN.into()));
    assert_eq!(attr(&nack, "ojs.job.attempt").as_deref(), Some("1"));
    assert_eq!(attr(&nack, "error.type").as_deref(), Some("Timeout"));
    let status = nack.status.clone().expect("a status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert_eq!(status.message, "the report timed out");
    let batch_ack = collector.span_of("traced ack", &third_id).await;
    assert_eq!(
        parent_of(&batch_ack),
        (hex(&enqueue_root.trace_id), hex(&enqueue_root.span_id))
    );
    assert_eq!(attr(&batch_ack, "ojs.job.attempt").as_deref(), Some("1"));
    let refused = collector.span_of("ack", &first_id).await;
    assert_eq!(
        parent_of(&refused),
        (WORKER_TRACE.into(), WORKER_SPAN.into())
    );
    let status = refused.status.clone().expect("a status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert_eq!(attr(&refused, "error.type").as_deref(), Some("conflict"));

    // Every job span is a server span, and the resource names the service.
    for span in collector.spans() {
        assert_eq!(span.kind, 2, "{}: SPAN_KIND_SERVER", span.name);
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    }
    assert!(
        collector
            .resources
            .lock()
            .unwrap()
            .contains(&("service.name".into(), "ojsd-traced".into()))
    );
    app.stop().await.expect("clean stop");
}

#[tokio::test]
async fn without_an_endpoint_the_producers_context_is_carried_into_the_job() {
    let app = TestApp::spawn().await;
    let producer = traceparent(PRODUCER_TRACE, PRODUCER_SPAN);
    // The header goes into `meta` as it came (no span of ojsd's own to put there).
    let carried = post_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "email.send", "args": []}),
        &producer,
    )
    .await
    .expect(201);
    assert_eq!(
        carried.json["job"]["meta"]["traceparent"],
        producer.as_str()
    );
    assert_eq!(carried.json["job"]["meta"]["tracestate"], "vendor=x1");
    // What the producer put in `meta` is never changed, even when invalid.
    for meta in [
        json!({"traceparent": traceparent(SDK_TRACE, SDK_SPAN)}),
        json!({"traceparent": "not a context", "a": 1}),
    ] {
        let kept = post_traced(
            &app,
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": [], "meta": meta}),
            &producer,
        )
        .await
        .expect(201);
        assert_eq!(kept.json["job"]["meta"], meta);
    }
    // No header, or an invalid one: `meta` as sent.
    let plain = app
        .post(
            "/ojs/v1/jobs",
            json!({"type": "email.send", "args": [], "meta": {"a": 1}}),
        )
        .await
        .expect(201);
    assert_eq!(plain.json["job"]["meta"], json!({"a": 1}));
    let invalid = post_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "email.send", "args": []}),
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    )
    .await
    .expect(201);
    assert_eq!(invalid.json["job"]["meta"], json!({}));
    // A batch carries it into every job.
    let batch = post_traced(
        &app,
        "/ojs/v1/jobs/batch",
        json!({"jobs": [{"type": "a.b", "args": []}, {"type": "a.b", "args": [], "meta": {"x": true}}]}),
        &producer,
    )
    .await
    .expect(201);
    for job in batch.json["jobs"].as_array().unwrap() {
        assert_eq!(job["meta"]["traceparent"], producer.as_str(), "{job}");
    }
    assert_eq!(batch.json["jobs"][1]["meta"]["x"], true);
    app.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_collector_that_is_down_costs_no_request_anything() {
    // Nothing listens at the endpoint: exports fail on the exporter's own thread, requests
    // answer as usual.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let app = TestApp::spawn_with(|c| c.telemetry.otel.endpoint = Some(url)).await;
    for _ in 0..20 {
        let id = app
            .push_id(json!({"type": "a.b", "queue": "down", "args": []}))
            .await;
        let job = app.fetch_one("down", "w").await;
        assert_eq!(job["id"], id.as_str());
        app.ack_job(&job, "w").await.expect(200);
    }
    tokio::time::timeout(Duration::from_secs(20), app.stop())
        .await
        .expect("stops within the export timeout")
        .expect("clean stop");
}
