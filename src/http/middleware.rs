//! What runs around every request: the request id, `OJS-Version` negotiation, the tracing
//! span, the time limit, the database gate (503 while the database is unreachable) and the
//! final rendering of error bodies.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::error::{ApiError, PendingError};
use super::respond::{OJS_JSON, OJS_VERSION};
use super::state::AppState;
use super::{admin_ui, unread};

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static OJS_VERSION_HEADER: HeaderName = HeaderName::from_static("ojs-version");

/// A client-supplied request id if usable (1–200 printable ASCII characters), else a new one.
fn request_id(req: &Request) -> String {
    req.headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| (1..=200).contains(&v.len()) && v.bytes().all(|b| (0x20..0x7f).contains(&b)))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("req_{}", uuid::Uuid::now_v7()))
}

/// Accepts `OJS-Version` 1.0 in any patch/pre-release spelling (`1.0`, `1.0.0`, `1.0.0-rc.1`).
fn version_supported(value: &str) -> bool {
    let mut parts = value.trim().split(['.', '-', '+']);
    parts.next() == Some("1") && parts.next() == Some("0")
}

/// Per request: request id, version negotiation, tracing span, time limit, and the final
/// rendering of error bodies.
pub(super) async fn ojs_middleware(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let request_id = request_id(&req);
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    // A debug span: at the default level an info span cost ~4 of the 27 µs of CPU a small
    // request takes (its fields are formatted when it is made); a failure's log line names
    // the request itself (below).
    let span = tracing::debug_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        request_id = %request_id,
    );
    let started = Instant::now();
    // What a response leaves unread of the body is discarded, so the connection lives on
    // (or the response says `Connection: close`): see `unread`.
    let (req, unread) = unread::watch(req);
    let mut response = answer(&state, req, next).instrument(span.clone()).await;
    unread.settle(&mut response);
    let status = response.status();
    if let Some(PendingError(error)) = response.extensions_mut().remove::<PendingError>() {
        if error.connection_lost {
            state.health().report_lost();
        }
        let body = serde_json::to_vec(&error.body(&request_id)).unwrap_or_default();
        *response.body_mut() = body.into();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON));
        let request = (method.as_str(), route.as_str(), request_id.as_str());
        span.in_scope(|| log_error(request, status, &error));
    } else {
        span.in_scope(|| {
            tracing::debug!(
                status = status.as_u16(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "request done"
            );
        });
    }
    crate::telemetry::http_request(method.as_str(), &route, status.as_u16(), started.elapsed());
    stamp(&state, &mut response, &request_id);
    response
}

/// The handler's answer, unless the request is refused first (an `OJS-Version` this server
/// does not speak, or the database down for a route that needs it) or takes too long.
async fn answer(state: &AppState, req: Request, next: Next) -> Response {
    if let Some(version) = req.headers().get(&OJS_VERSION_HEADER)
        && !version.to_str().is_ok_and(version_supported)
    {
        return ApiError::unsupported(format!(
            "OJS-Version '{}' is not supported; this server speaks {OJS_VERSION}.",
            version.to_str().unwrap_or("?")
        ))
        .into_response();
    }
    let database = needs_database(req.uri().path());
    if database && state.health().is_down() {
        return db_unavailable();
    }
    let run = tokio::time::timeout(state.settings().request_timeout, next.run(req));
    let outcome = if database {
        // A request waiting on the database when it goes away is answered now, not when its
        // connection attempts give up.
        tokio::select! {
            biased;
            outcome = run => outcome,
            () = state.health().went_down() => return db_unavailable(),
        }
    } else {
        run.await
    };
    match outcome {
        Ok(response) => response,
        Err(_) => ApiError::unavailable(
            "The request took too long; retry shortly.",
            Some("request timed out".to_owned()),
        )
        .into_response(),
    }
}

/// Logs an error answer: a 5xx as an error (a 503 at most once every few seconds), a refusal
/// at debug level. `request` is the method, route and request id.
fn log_error(request: (&str, &str, &str), status: StatusCode, error: &ApiError) {
    let (method, route, request_id) = request;
    let cause = error.cause.as_deref().unwrap_or(&error.message);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // An outage answers every request 503 (the prober logs its start and end); one line
        // every few seconds says how many, instead of one per request.
        if let Some(suppressed) = UNAVAILABLE_LOG.admit(UNAVAILABLE_LOG_EVERY) {
            tracing::warn!(
                method,
                route,
                request_id,
                code = error.code,
                cause,
                suppressed,
                "request answered 503 (later ones within {}s are counted, not logged)",
                UNAVAILABLE_LOG_EVERY.as_secs()
            );
        }
    } else if status.is_server_error() {
        tracing::error!(
            method,
            route,
            request_id,
            status = status.as_u16(),
            code = error.code,
            cause,
            "request failed"
        );
    } else {
        tracing::debug!(status = status.as_u16(), code = error.code, message = %error.message, "request refused");
    }
}

/// The headers every response carries: `X-Request-Id`, `OJS-Version`, and the JSON media
/// type the deployment asked for.
fn stamp(state: &AppState, response: &mut Response, request_id: &str) {
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert(X_REQUEST_ID.clone(), value);
    }
    headers.insert(
        OJS_VERSION_HEADER.clone(),
        HeaderValue::from_static(OJS_VERSION),
    );
    if state.settings().plain_json
        && headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t == OJS_JSON)
    {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
}

/// 503 with `Retry-After`: the database is unreachable.
/// How often a 503 is logged at most.
const UNAVAILABLE_LOG_EVERY: Duration = Duration::from_secs(5);

/// Throttles the log lines of 503 answers.
static UNAVAILABLE_LOG: LogThrottle = LogThrottle::new();

/// Lets one log line through per period and counts the others.
struct LogThrottle {
    /// Milliseconds since the process started at which the last line was let through, + 1
    /// (0: never).
    last: std::sync::atomic::AtomicU64,
    suppressed: std::sync::atomic::AtomicU64,
}

impl LogThrottle {
    const fn new() -> LogThrottle {
        LogThrottle {
            last: std::sync::atomic::AtomicU64::new(0),
            suppressed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(lines suppressed since the last one)` when this line may be logged: the first,
    /// and then the first `every` after the last one let through.
    fn admit(&self, every: Duration) -> Option<u64> {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        let every = every.as_millis() as u64;
        if (last == 0 || now >= last + every)
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn db_unavailable() -> Response {
    ApiError::unavailable("The database is unavailable; retry shortly.", None).into_response()
}

/// Whether a path is answered from the database (probes and metrics answer without it, or
/// report on it themselves).
fn needs_database(path: &str) -> bool {
    !matches!(
        path,
        "/health"
            | "/ready"
            | "/metrics"
            | "/ojs/v1/health"
            | "/ojs/v1/ready"
            | "/ojs/manifest"
            | "/ojs/openapi.json"
    ) && !admin_ui::serves(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation() {
        for ok in ["1.0", "1.0.0", "1.0.0-rc.1", " 1.0 ", "1.0.7"] {
            assert!(version_supported(ok), "{ok}");
        }
        for bad in ["2.0", "1.1", "1", "", "10.0", "abc"] {
            assert!(!version_supported(bad), "{bad}");
        }
    }

    #[test]
    fn a_throttled_log_lets_one_line_through_per_period_and_counts_the_rest() {
        let throttle = LogThrottle::new();
        let hour = Duration::from_secs(3600);
        assert_eq!(throttle.admit(hour), Some(0));
        assert_eq!(throttle.admit(hour), None);
        assert_eq!(throttle.admit(hour), None);
        // Once the period is over, the next line goes out with the count of those held back.
        assert_eq!(throttle.admit(Duration::ZERO), Some(2));
        assert_eq!(throttle.admit(Duration::ZERO), Some(0));
    }
}
