//! Job traces: OpenTelemetry spans for enqueue, fetch (the claim), ACK and NACK, exported over
//! OTLP/HTTP when an endpoint is configured.
//!
//! A job carries its trace in `meta.traceparent` (and `meta.tracestate`), as the [OJS
//! observability extension] says. Every span of a job is a child of that trace, so the
//! producer's trace goes on into the job's claim and its ACK or NACK; the trace context of the
//! request itself (its W3C `traceparent` header: a worker's own span, say) is attached as a
//! link when it is another one. On enqueue, a job whose `meta` has no `traceparent` gets one:
//! the enqueue span's (the producer's `traceparent` header is then its parent), or, when ojsd
//! exports no traces, the request's `traceparent` header as it came; a `traceparent` the
//! producer put in `meta` is never changed.
//!
//! With no endpoint configured, [`JobTracer::off`] makes nothing: no span is built, no `meta`
//! read; the only work left is looking for a `traceparent` header on an enqueue.
//!
//! [OJS observability extension]: https://github.com/openjobspec/spec/blob/main/spec/ojs-observability.md#5-trace-context-propagation

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde::Deserialize;

use crate::job::envelope::NewJob;
use crate::job::{Job, JobId};
use crate::store::job::Completed;

/// Where and how job traces are exported.
#[derive(Debug, Clone, Default)]
pub struct TraceSettings {
    /// The collector's traces URL (`…/v1/traces`); `None`: no traces.
    pub endpoint: Option<String>,
    /// OTLP/HTTP body encoding.
    pub json: bool,
    /// `service.name` of the spans when `OTEL_SERVICE_NAME` does not set it.
    pub service_name: String,
    /// `service.instance.id` of the spans.
    pub instance_id: String,
}

impl TraceSettings {
    /// The settings the standard `OTEL_*` variables give (as read into the configuration):
    /// the traces endpoint as it is, or the base endpoint with `/v1/traces` appended;
    /// `http/protobuf` (the default) or `http/json`. gRPC is refused: ojsd speaks OTLP/HTTP
    /// only, which every collector takes (port 4318).
    pub fn from_variables(
        vars: &OtelVariables,
        service_name: &str,
        instance_id: &str,
    ) -> anyhow::Result<TraceSettings> {
        let disabled = vars
            .sdk_disabled
            .as_deref()
            .map(str::trim)
            .is_some_and(|v| {
                v.eq_ignore_ascii_case("true") || v == "1" || v.eq_ignore_ascii_case("yes")
            });
        let exporters: Vec<String> = vars
            .traces_exporter
            .as_deref()
            .unwrap_or("otlp")
            .split(',')
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        if let Some(other) = exporters.iter().find(|e| *e != "otlp" && *e != "none") {
            anyhow::bail!(
                "OTEL_TRACES_EXPORTER={other} is not supported: ojsd exports traces over OTLP \
                 only (otlp, or none for no traces)"
            );
        }
        let nonempty = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let endpoint = nonempty(&vars.traces_endpoint).or_else(|| {
            nonempty(&vars.endpoint).map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
        });
        let endpoint = endpoint.filter(|_| !disabled && !exporters.iter().any(|e| e == "none"));
        let protocol = nonempty(&vars.traces_protocol)
            .or_else(|| nonempty(&vars.protocol))
            .unwrap_or_else(|| "http/protobuf".to_owned());
        let json = match protocol.as_str() {
            "http/protobuf" => false,
            "http/json" => true,
            other => anyhow::bail!(
                "OTLP protocol '{other}' is not supported: ojsd exports over OTLP/HTTP; set \
                 OTEL_EXPORTER_OTLP_PROTOCOL to http/protobuf (the default) or http/json and \
                 point the endpoint at the collector's HTTP port (4318)"
            ),
        };
        if let Some(url) = &endpoint {
            let parsed: axum::http::Uri = url
                .parse()
                .with_context(|| format!("the OTLP traces endpoint '{url}' is not a URL"))?;
            if !matches!(parsed.scheme_str(), Some("http" | "https")) {
                anyhow::bail!("the OTLP traces endpoint '{url}' must be an http or https URL");
            }
        }
        Ok(TraceSettings {
            endpoint,
            json,
            service_name: service_name.to_owned(),
            instance_id: instance_id.to_owned(),
        })
    }
}

/// The standard OpenTelemetry variables ojsd reads (the exporter reads the others itself:
/// `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION`; the SDK `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OtelVariables {
    /// OTLP/HTTP collector base URL for job traces (`/v1/traces` is appended). Unset: no
    /// traces are made.
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub endpoint: Option<String>,
    /// OTLP/HTTP traces URL, used as it is (wins over OTEL_EXPORTER_OTLP_ENDPOINT).
    #[arg(
        long = "otlp-traces-endpoint",
        env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )]
    pub traces_endpoint: Option<String>,
    /// `http/protobuf` (default) or `http/json`.
    #[arg(long = "otlp-protocol", env = "OTEL_EXPORTER_OTLP_PROTOCOL")]
    pub protocol: Option<String>,
    /// As OTEL_EXPORTER_OTLP_PROTOCOL, for traces only (wins over it).
    #[arg(
        long = "otlp-traces-protocol",
        env = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    )]
    pub traces_protocol: Option<String>,
    /// `otlp` (default) or `none`.
    #[arg(long = "otel-traces-exporter", env = "OTEL_TRACES_EXPORTER")]
    pub traces_exporter: Option<String>,
    /// `true`: no traces, whatever the endpoint.
    #[arg(long = "otel-sdk-disabled", env = "OTEL_SDK_DISABLED")]
    pub sdk_disabled: Option<String>,
}

/// Makes the job spans, or nothing when traces are off. Cheap to clone.
#[derive(Clone, Default)]
pub struct JobTracer {
    inner: Option<Arc<Exporting>>,
}

struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl std::fmt::Debug for JobTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTracer")
            .field("on", &self.is_on())
            .finish()
    }
}

/// What a span records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Enqueue,
    Fetch,
    Ack,
    Nack,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Enqueue => "enqueue",
            Operation::Fetch => "fetch",
            Operation::Ack => "ack",
            Operation::Nack => "nack",
        }
    }

    /// `messaging.operation.type` of the OpenTelemetry messaging conventions.
    fn kind(self) -> &'static str {
        match self {
            Operation::Enqueue => "send",
            Operation::Fetch => "receive",
            Operation::Ack | Operation::Nack => "settle",
        }
    }
}

impl JobTracer {
    /// No traces.
    pub fn off() -> JobTracer {
        JobTracer::default()
    }

    /// Exports to `settings.endpoint` through a batch processor (its own thread: a slow or
    /// absent collector never holds a request; a full queue drops spans). Off without an
    /// endpoint.
    pub fn new(settings: &TraceSettings) -> anyhow::Result<JobTracer> {
        let Some(endpoint) = &settings.endpoint else {
            return Ok(JobTracer::off());
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint.clone())
            .with_protocol(if settings.json {
                Protocol::HttpJson
            } else {
                Protocol::HttpBinary
            })
            .build()
            .context("cannot set up the OTLP trace exporter")?;
        let mut resource = Resource::builder().with_attributes([
            KeyValue::new("service.instance.id", settings.instance_id.clone()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ]);
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(settings.service_name.clone());
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("ojsd");
        tracing::info!(endpoint = %endpoint, "exporting job traces over OTLP/HTTP");
        Ok(JobTracer {
            inner: Some(Arc::new(Exporting { provider, tracer })),
        })
    }

    /// Whether spans are made.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Sends the spans still queued and stops the exporter (blocks up to `timeout`).
    pub fn shutdown(&self, timeout: Duration) {
        if let Some(on) = &self.inner
            && let Err(e) = on.provider.shutdown_with_timeout(timeout)
        {
            tracing::warn!(error = %e, "job traces not all exported at shutdown");
        }
    }

    /// Before an enqueue: starts the job's enqueue span and gives the job its trace context
    /// (see the module's description). End it with [`EnqueueSpan::end`].
    pub fn enqueue(&self, caller: Option<&Traceparent>, job: &mut NewJob) -> EnqueueSpan {
        let Some(on) = &self.inner else {
            // Not exporting: carry the producer's context into the job, nothing else.
            if let Some(caller) = caller
                && !MetaTrace::read(&job.meta).present
            {
                job.meta = caller.inject(&job.meta);
            }
            return EnqueueSpan(None);
        };
        let meta = MetaTrace::read(&job.meta);
        let span = on.job_span(
            Operation::Enqueue,
            Named {
                id: job.id,
                job_type: &job.r#type,
                queue: &job.queue,
                attempt: 0,
            },
            meta.context.as_ref(),
            caller,
            None,
            [KeyValue::new("ojs.job.priority", i64::from(job.priority))],
        );
        if !meta.present {
            let own = span.span_context();
            let traceparent = Traceparent {
                context: own.clone(),
                state: (!own.trace_state().header().is_empty()).then(|| own.trace_state().header()),
            };
            job.meta = traceparent.inject(&job.meta);
        }
        EnqueueSpan(Some(span))
    }

    /// After a FETCH: one span per claimed job, from `started` (or the claim, when the job
    /// came during a long poll) to now.
    pub fn fetched(
        &self,
        caller: Option<&Traceparent>,
        started: SystemTime,
        worker_id: Option<&str>,
        jobs: &[Job],
    ) {
        let Some(on) = &self.inner else { return };
        for job in jobs {
            let start = job
                .started_at
                .map(SystemTime::from)
                .filter(|claimed| *claimed > started && *claimed < SystemTime::now())
                .unwrap_or(started);
            let worker = worker_id.or(job.worker_id.as_deref());
            on.job_span(
                Operation::Fetch,
                Named::of(job),
                MetaTrace::read(job.meta.get()).context.as_ref(),
                caller,
                Some(start),
                [
                    Some(KeyValue::new("ojs.job.state", job.state.as_str())),
                    Some(KeyValue::new("ojs.job.priority", i64::from(job.priority))),
                    worker.map(|w| KeyValue::new("ojs.worker.id", w.to_owned())),
                ]
                .into_iter()
                .flatten(),
            )
            .end();
        }
    }

    /// After an ACK that completed `job`.
    pub fn acked(&self, caller: Option<&Traceparent>, started: SystemTime, job: &Job) {
        let Some(on) = &self.inner else { return };
        on.job_span(
            Operation::Ack,
            Named::of(job),
            MetaTrace::read(job.meta.get()).context.as_ref(),
            caller,
            Some(started),
            [
                Some(KeyValue::new("ojs.job.state", job.state.as_str())),
                job.worker_id
                    .as_ref()
                    .map(|w| KeyValue::new("ojs.worker.id", w.clone())),
            ]
            .into_iter()
            .flatten(),
        )
        .end();
    }

    /// After a batch ACK item that completed a job (what a batch ACK reads of it).
    pub fn acked_brief(&self, caller: Option<&Traceparent>, started: SystemTime, job: &Completed) {
        let Some(on) = &self.inner else { return };
        let context = job
            .traceparent
            .as_deref()
            .and_then(|t| Traceparent::parse(t, None))
            .map(|t| t.context);
        on.job_span(
            Operation::Ack,
            Named {
                id: job.id,
                job_type: &job.r#type,
                queue: &job.queue,
                attempt: job.attempt,
            },
            context.as_ref(),
            caller,
            Some(started),
            [KeyValue::new("ojs.job.state", "completed")],
        )
        .end();
    }

    /// After a NACK that recorded a failed attempt of `job` (`job` as the NACK left it;
    /// `failure`: the worker's error type and message). The span's status is an error, as the
    /// attempt failed, unless the worker only put the job back (`requeue` without an error).
    pub fn nacked(
        &self,
        caller: Option<&Traceparent>,
        started: SystemTime,
        job: &Job,
        failure: Option<(&str, &str)>,
    ) {
        let Some(on) = &self.inner else { return };
        let error = failure.map(|(kind, _)| {
            [
                KeyValue::new("error.type", kind.to_owned()),
                KeyValue::new("ojs.job.error.attempt", i64::from(job.attempt)),
            ]
        });
        let mut span = on.job_span(
            Operation::Nack,
            Named::of(job),
            MetaTrace::read(job.meta.get()).context.as_ref(),
            caller,
            Some(started),
            std::iter::once(KeyValue::new("ojs.job.state", job.state.as_str()))
                .chain(error.into_iter().flatten()),
        );
        if let Some((_, message)) = failure {
            span.set_status(Status::error(message.to_owned()));
        }
        span.end();
    }

    /// After an ACK or NACK that was refused (`code`, `message`: the OJS error answered).
    pub fn refused(
        &self,
        operation: Operation,
        caller: Option<&Traceparent>,
        started: SystemTime,
        id: JobId,
        code: &str,
        message: &str,
    ) {
        let Some(on) = &self.inner else { return };
        let id = id.to_string();
        let attributes = vec![
            KeyValue::new("messaging.system", "ojs"),
            KeyValue::new("messaging.operation.name", operation.name()),
            KeyValue::new("messaging.operation.type", operation.kind()),
            KeyValue::new("messaging.message.id", id.clone()),
            KeyValue::new("ojs.job.id", id),
            KeyValue::new("error.type", code.to_owned()),
        ];
        let parent = caller.map(|c| c.context.clone());
        let mut span = on.build_named(
            Cow::Borrowed(operation.name()),
            parent,
            None,
            Some(started),
            attributes,
        );
        span.set_status(Status::error(message.to_owned()));
        span.end();
    }
}

/// The job a span is about.
#[derive(Clone, Copy)]
struct Named<'a> {
    id: JobId,
    job_type: &'a str,
    queue: &'a str,
    attempt: i32,
}

impl Named<'_> {
    fn of(job: &Job) -> Named<'_> {
        Named {
            id: job.id,
            job_type: &job.r#type,
            queue: &job.queue,
            attempt: job.attempt,
        }
    }
}

impl Exporting {
    /// A span of `job`: the common attributes and `extra`, a child of the job's trace (`job_trace`)
    /// linked to the caller's (see [`parent_and_link`]).
    fn job_span(
        &self,
        operation: Operation,
        job: Named<'_>,
        job_trace: Option<&SpanContext>,
        caller: Option<&Traceparent>,
        start: Option<SystemTime>,
        extra: impl IntoIterator<Item = KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        let mut attributes = job_attributes(
            operation,
            &job.id.to_string(),
            job.job_type,
            job.queue,
            job.attempt,
        );
        attributes.extend(extra);
        let (parent, link) = parent_and_link(job_trace, caller);
        self.build(operation, job.queue, parent, link, start, attributes)
    }

    fn build(
        &self,
        operation: Operation,
        queue: &str,
        parent: Option<SpanContext>,
        link: Option<SpanContext>,
        start: Option<SystemTime>,
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        self.build_named(
            Cow::Owned(format!("{queue} {}", operation.name())),
            parent,
            link,
            start,
            attributes,
        )
    }

    fn build_named(
        &self,
        name: Cow<'static, str>,
        parent: Option<SpanContext>,
        link: Option<SpanContext>,
        start: Option<SystemTime>,
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        let mut builder = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes);
        if let Some(start) = start {
            builder = builder.with_start_time(start);
        }
        if let Some(link) = link {
            builder = builder.with_links(vec![Link::with_context(link)]);
        }
        let cx = match parent {
            Some(parent) => Context::new().with_remote_span_context(parent),
            None => Context::new(),
        };
        self.tracer.build_with_context(builder, &cx)
    }
}

/// The span of one job's enqueue, ended once the outcome is known.
#[must_use = "end the span with the enqueue's outcome"]
pub struct EnqueueSpan(Option<opentelemetry_sdk::trace::Span>);

impl EnqueueSpan {
    /// Ends the span: the job stored (`Ok(deduplicated)`: another job was answered, whose id is
    /// `id`) or the enqueue refused (`Err((code, message))`).
    pub fn end(self, outcome: Result<(JobId, bool), (&str, &str)>) {
        let Some(mut span) = self.0 else { return };
        match outcome {
            Ok((id, deduplicated)) => {
                if deduplicated {
                    span.set_attribute(KeyValue::new("ojs.job.deduplicated", true));
                    span.set_attribute(KeyValue::new("ojs.job.existing_id", id.to_string()));
                }
            }
            Err((code, message)) => {
                span.set_attribute(KeyValue::new("error.type", code.to_owned()));
                span.set_status(Status::error(message.to_owned()));
            }
        }
        span.end();
    }
}

/// The attributes every job span has ([OJS observability] §7, OpenTelemetry messaging).
///
/// [OJS observability]: https://github.com/openjobspec/spec/blob/main/spec/ojs-observability.md#7-span-attributes
fn job_attributes(
    operation: Operation,
    id: &str,
    job_type: &str,
    queue: &str,
    attempt: i32,
) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", "ojs"),
        KeyValue::new("messaging.operation.name", operation.name()),
        KeyValue::new("messaging.operation.type", operation.kind()),
        KeyValue::new("messaging.destination.name", queue.to_owned()),
        KeyValue::new("messaging.message.id", id.to_owned()),
        KeyValue::new("ojs.job.id", id.to_owned()),
        KeyValue::new("ojs.job.type", job_type.to_owned()),
        KeyValue::new("ojs.job.queue", queue.to_owned()),
        KeyValue::new("ojs.job.attempt", i64::from(attempt)),
    ]
}

/// The job's trace is the parent; the caller's, when it is another span, a link. Without a
/// job trace, the caller's is the parent.
fn parent_and_link(
    job: Option<&SpanContext>,
    caller: Option<&Traceparent>,
) -> (Option<SpanContext>, Option<SpanContext>) {
    match (job, caller) {
        (Some(job), Some(caller)) if caller.context.span_id() != job.span_id() => {
            (Some(job.clone()), Some(caller.context.clone()))
        }
        (Some(job), _) => (Some(job.clone()), None),
        (None, caller) => (caller.map(|c| c.context.clone()), None),
    }
}

/// A W3C trace context: a parsed `traceparent` and its `tracestate`.
#[derive(Debug, Clone)]
pub struct Traceparent {
    context: SpanContext,
    state: Option<String>,
}

impl Traceparent {
    /// Parses `traceparent` as W3C Trace Context level 1 says (`00-<32 hex>-<16 hex>-<2 hex>`,
    /// lowercase, neither id all zeros; a later version may append fields). `None` for anything
    /// else: an invalid context is ignored, as the recommendation says, never an error.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Traceparent> {
        let t = traceparent.trim();
        let version = t.get(0..2)?;
        if !is_lower_hex(version) || version == "ff" {
            return None;
        }
        if t.len() < 55 || (version == "00" && t.len() != 55) || (t.len() > 55 && &t[55..56] != "-")
        {
            return None;
        }
        let (trace, span, flags) = (t.get(3..35)?, t.get(36..52)?, t.get(53..55)?);
        if &t[2..3] != "-" || &t[35..36] != "-" || &t[52..53] != "-" {
            return None;
        }
        if !is_lower_hex(trace) || !is_lower_hex(span) || !is_lower_hex(flags) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8();
        let state = tracestate.map(str::trim).filter(|s| !s.is_empty());
        let trace_state = state
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(Traceparent {
            context: SpanContext::new(trace_id, span_id, TraceFlags::new(flags), true, trace_state),
            state: state.map(str::to_owned),
        })
    }

    /// The context as a `traceparent` value.
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.context.trace_id(),
            self.context.span_id(),
            self.context.trace_flags().to_u8()
        )
    }

    /// `meta` (a JSON object's text, without `traceparent`) with this context added in front.
    fn inject(&self, meta: &str) -> String {
        let mut fields = format!(
            "{{\"traceparent\":{}",
            serde_json::Value::String(self.header())
        );
        if let Some(state) = &self.state {
            fields.push_str(",\"tracestate\":");
            fields.push_str(&serde_json::Value::String(state.clone()).to_string());
        }
        let rest = meta.trim_start().strip_prefix('{').unwrap_or("}");
        if rest.trim_start().starts_with('}') {
            fields.push('}');
        } else {
            fields.push(',');
            fields.push_str(rest);
        }
        fields
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The trace context in a job's `meta`.
struct MetaTrace {
    /// `meta` has a `traceparent` member (valid or not: either way it is the producer's).
    present: bool,
    /// Its context, when valid.
    context: Option<SpanContext>,
}

impl MetaTrace {
    fn read(meta: &str) -> MetaTrace {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(borrow)]
            traceparent: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow)]
            tracestate: Option<&'a serde_json::value::RawValue>,
        }
        let Ok(fields) = serde_json::from_str::<Fields<'_>>(meta) else {
            return MetaTrace {
                present: false,
                context: None,
            };
        };
        let text = |raw: Option<&serde_json::value::RawValue>| {
            raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        };
        let state = text(fields.tracestate);
        MetaTrace {
            present: fields.traceparent.is_some(),
            context: text(fields.traceparent)
                .and_then(|t| Traceparent::parse(&t, state.as_deref()))
                .map(|t| t.context),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_w3c_traceparent() {
        let t = Traceparent::parse(VALID, Some("ojs=p:8")).expect("valid");
        assert_eq!(t.header(), VALID);
        assert!(t.context.is_sampled());
        assert!(t.context.is_remote());
        assert_eq!(t.context.trace_state().get("ojs"), Some("p:8"));
        // A later version may append fields after a dash.
        assert!(Traceparent::parse(&format!("01{}-extra", &VALID[2..]), None).is_some());
        // Unknown flag bits are dropped.
        let t = Traceparent::parse(&format!("{}ff", &VALID[..53]), None).expect("valid");
        assert_eq!(t.header(), VALID);
    }

    #[test]
    fn refuses_invalid_traceparents() {
        for bad in [
            "",
            "00",
            "garbage",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(Traceparent::parse(bad, None).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn injects_into_meta_in_front() {
        let t = Traceparent::parse(VALID, None).expect("valid");
        assert_eq!(t.inject("{}"), format!("{{\"traceparent\":\"{VALID}\"}}"));
        assert_eq!(
            t.inject(" { } "),
            format!("{{\"traceparent\":\"{VALID}\"}}")
        );
        let meta = t.inject("{\"a\": [1, {\"b\": 2}]}");
        let value: serde_json::Value = serde_json::from_str(&meta).expect("JSON");
        assert_eq!(value["traceparent"], VALID);
        assert_eq!(value["a"][1]["b"], 2);
        let t = Traceparent::parse(VALID, Some("ojs=p:8,x=\"y\"")).expect("valid");
        let value: serde_json::Value = serde_json::from_str(&t.inject("{}")).expect("JSON");
        assert_eq!(value["tracestate"], "ojs=p:8,x=\"y\"");
    }

    #[test]
    fn reads_the_trace_of_meta() {
        let read = MetaTrace::read(&format!(
            "{{\"x\":{{\"traceparent\":1}},\"traceparent\":\"{VALID}\",\"tracestate\":\"a=b\"}}"
        ));
        assert!(read.present);
        let context = read.context.expect("valid");
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(context.trace_state().get("a"), Some("b"));
        let invalid = MetaTrace::read("{\"traceparent\": 7}");
        assert!(invalid.present && invalid.context.is_none());
        let none = MetaTrace::read("{\"trace_id\": \"abc\"}");
        assert!(!none.present && none.context.is_none());
    }

    #[test]
    fn settings_follow_the_standard_variables() {
        let vars = |endpoint: Option<&str>, traces: Option<&str>| OtelVariables {
            endpoint: endpoint.map(str::to_owned),
            traces_endpoint: traces.map(str::to_owned),
            ..OtelVariables::default()
        };
        let off = TraceSettings::from_variables(&vars(None, None), "ojsd", "i").expect("valid");
        assert_eq!(off.endpoint, None);
        let base = TraceSettings::from_variables(&vars(Some("http://c:4318/"), None), "ojsd", "i")
            .expect("valid");
        assert_eq!(base.endpoint.as_deref(), Some("http://c:4318/v1/traces"));
        assert!(!base.json);
        let exact = TraceSettings::from_variables(
            &vars(Some("http://c:4318"), Some("http://t:9/x")),
            "ojsd",
            "i",
        )
        .expect("valid");
        assert_eq!(exact.endpoint.as_deref(), Some("http://t:9/x"));
        let mut disabled = vars(Some("http://c:4318"), None);
        disabled.sdk_disabled = Some("true".into());
        assert_eq!(
            TraceSettings::from_variables(&disabled, "ojsd", "i")
                .expect("valid")
                .endpoint,
            None
        );
        let mut none = vars(Some("http://c:4318"), None);
        none.traces_exporter = Some("none".into());
        assert_eq!(
            TraceSettings::from_variables(&none, "ojsd", "i")
                .expect("valid")
                .endpoint,
            None
        );
        let mut json = vars(Some("http://c:4318"), None);
        json.protocol = Some("http/json".into());
        assert!(
            TraceSettings::from_variables(&json, "ojsd", "i")
                .expect("valid")
                .json
        );
        let mut grpc = vars(Some("http://c:4317"), None);
        grpc.protocol = Some("grpc".into());
        let e = TraceSettings::from_variables(&grpc, "ojsd", "i").expect_err("grpc");
        assert!(e.to_string().contains("OTLP/HTTP"), "{e}");
        let mut zipkin = vars(Some("http://c:4318"), None);
        zipkin.traces_exporter = Some("zipkin".into());
        assert!(TraceSettings::from_variables(&zipkin, "ojsd", "i").is_err());
        assert!(TraceSettings::from_variables(&vars(Some("c:4318"), None), "ojsd", "i").is_err());
    }
}
