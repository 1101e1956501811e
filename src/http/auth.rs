//! Authentication and authorization of every request, in one place: [`authorize`] runs after
//! routing, decides from the route which role it needs ([`needed`]), and checks the key of
//! `Authorization: Bearer <key>` against this replica's [`KeyRing`](crate::auth::KeyRing).
//! Handlers that act on a queue or a job also check a queue-limited key through [`Caller`].

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use crate::auth::{Principal, Role};
use crate::job::JobId;

/// The role a route needs; `None`: anyone may call it.
pub fn needed(method: &Method, path: &str, protect_metrics: bool) -> Option<Role> {
    match path {
        "/health" | "/ready" | "/ojs/v1/health" | "/ojs/v1/ready" | "/ojs/manifest"
        | "/ojs/openapi.json" => return None,
        "/metrics" => return protect_metrics.then_some(Role::Admin),
        _ => {}
    }
    if super::admin_ui::serves(path) {
        // The UI's files; the API calls it makes are checked like any other.
        return None;
    }
    if spans_queues(path) {
        return Some(Role::Admin);
    }
    let producer = matches!(
        (method, path),
        (
            &Method::POST,
            "/ojs/v1/jobs" | "/ojs/v1/jobs/batch" | "/ojs/v1/jobs/{id}/activate"
        ) | (
            &Method::GET | &Method::DELETE | &Method::PATCH,
            "/ojs/v1/jobs/{id}"
        ) | (
            &Method::POST,
            "/ojs/v1/workflows" | "/ojs/v1/workflows/{id}/cancel"
        ) | (&Method::GET | &Method::DELETE, "/ojs/v1/workflows/{id}")
            | (&Method::GET, "/ojs/v1/workflows/{id}/progress")
            | (
                &Method::GET,
                "/ojs/v1/jobs/{id}/progress"
                    | "/ojs/v1/jobs/{id}/progress/stream"
                    | "/ojs/v1/jobs/{id}/events"
            )
    );
    if producer {
        return Some(Role::Producer);
    }
    if path.starts_with("/ojs/v1/workers/")
        || (method == Method::PUT && path == "/ojs/v1/jobs/{id}/progress")
    {
        return Some(Role::Worker);
    }
    Some(Role::Admin)
}

/// Routes whose resources are not bound to one queue: cron entries, which enqueue into any
/// queue on their schedule with no producer's key behind the jobs, and whose templates may
/// hold what a producer should not read. Reading them too needs an `admin` key (which is never
/// limited to some queues).
pub fn spans_queues(route: &str) -> bool {
    route == "/ojs/v1/cron"
        || route == "/ojs/v1/crons"
        || route.starts_with("/ojs/v1/cron/")
        || route.starts_with("/ojs/v1/crons/")
}

/// The key from `Authorization: Bearer <key>`.
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

/// 401 with `WWW-Authenticate: Bearer`.
fn unauthenticated(message: &str) -> Response {
    let mut response = ApiError::unauthenticated(message).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The middleware: 401 without a known key, 403 when the key's role does not cover the route;
/// otherwise the request goes on carrying the key's [`Principal`].
pub async fn authorize(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let gate = state.gate();
    let Some(role) = needed(req.method(), route_of(&req), gate.protect_metrics) else {
        return next.run(req).await;
    };
    if !gate.enforced() {
        return next.run(req).await;
    }
    let Some(key) = bearer(&req) else {
        return unauthenticated(
            "This endpoint needs an API key: send Authorization: Bearer <key>.",
        );
    };
    let Some(principal) = gate.ring.lookup(key) else {
        return unauthenticated("The API key is not known (or was revoked).");
    };
    if !principal.role.covers(role) {
        return ApiError::forbidden(format!(
            "A {} key may not call {} {}; it needs a {} key.",
            principal.role.as_str(),
            req.method(),
            route_of(&req),
            role.as_str()
        ))
        .into_response();
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

/// The route a request matched (its template, such as `/ojs/v1/jobs/{id}`), else its path.
fn route_of(req: &Request) -> &str {
    req.extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path(), MatchedPath::as_str)
}

/// The key a request was made with, if keys are checked.
pub struct Caller(pub Option<Principal>);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, Self::Rejection> {
        Ok(Caller(parts.extensions.get::<Principal>().cloned()))
    }
}

impl Caller {
    /// 403 unless the key may use `queue`.
    pub fn check_queue(&self, queue: &str) -> Result<(), ApiError> {
        match &self.0 {
            Some(p) if !p.may_use(queue) => Err(ApiError::forbidden(format!(
                "This key may not use queue '{queue}'."
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the key is limited to some queues.
    pub fn limited(&self) -> bool {
        self.0.as_ref().is_some_and(|p| p.queues.is_some())
    }

    /// 403 unless the key may use the queue of job `id` (a job that does not exist passes: the
    /// operation answers 404 itself).
    pub async fn check_job(&self, state: &AppState, id: JobId) -> Result<(), ApiError> {
        self.check_jobs(state, &[id]).await
    }

    /// [`Caller::check_job`] for many jobs, in one read (none for a key without a queue limit).
    pub async fn check_jobs(&self, state: &AppState, ids: &[JobId]) -> Result<(), ApiError> {
        if !self.limited() || ids.is_empty() {
            return Ok(());
        }
        for queue in state.broker().job_queues(ids).await? {
            self.check_queue(&queue)?;
        }
        Ok(())
    }
}

/// The header naming the tenant a request acts for (multi-tenancy extension).
pub const TENANT_HEADER: &str = "x-ojs-tenant";

/// The tenant a request acts as: its API key's, when the key is bound to one, else the
/// `X-OJS-Tenant` header's; `None`: the request is not scoped to a tenant. With a tenant, an
/// enqueue tags its jobs with it, and reads, cancels and FETCHes see only its jobs (another
/// tenant's job answers 404, as if it did not exist).
#[derive(Debug, Clone, Default)]
pub struct Tenant(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Tenant, ApiError> {
        let header = match parts.headers.get(TENANT_HEADER) {
            None => None,
            Some(value) => {
                let value = value.to_str().map(str::trim).map_err(|_| {
                    ApiError::invalid_field("header.X-OJS-Tenant", "X-OJS-Tenant must be ASCII")
                })?;
                if !value.is_empty() && !crate::auth::is_valid_tenant(value) {
                    return Err(ApiError::invalid_field(
                        "header.X-OJS-Tenant",
                        crate::auth::invalid_tenant_message(value),
                    ));
                }
                (!value.is_empty()).then(|| value.to_owned())
            }
        };
        let bound = parts
            .extensions
            .get::<Principal>()
            .and_then(|p| p.tenant.clone());
        match (bound, header) {
            (Some(own), Some(named)) if *own != *named => Err(ApiError::forbidden(format!(
                "This key acts as tenant '{own}'; X-OJS-Tenant names '{named}'."
            ))),
            (Some(own), _) => Ok(Tenant(Some(own.to_string()))),
            (None, header) => Ok(Tenant(header)),
        }
    }
}

impl Tenant {
    /// The tenant, if the request is scoped to one.
    pub fn id(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// 404 for a job of another tenant (or of none), when the request is scoped to a tenant.
    pub fn check_job(&self, job: &crate::job::Job) -> Result<(), ApiError> {
        match self.id() {
            Some(tenant) if job.tenant_id().as_deref() != Some(tenant) => {
                Err(ApiError::not_found("job", &job.id.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// [`Tenant::check_job`] for job `id`, read only when the request is scoped to a tenant
    /// (a job that does not exist passes: the operation answers 404 itself).
    pub async fn check_job_id(&self, state: &AppState, id: JobId) -> Result<(), ApiError> {
        if self.id().is_none() {
            return Ok(());
        }
        match state.broker().info(id).await {
            Ok(job) => self.check_job(&job),
            Err(crate::Error::JobNotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
