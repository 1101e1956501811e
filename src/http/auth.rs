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
use super::tenancy::Tenant;
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
            "/ojs/v1/jobs"
                | "/ojs/v1/jobs/batch"
                | "/ojs/v1/jobs/{id}/activate"
                | "/ojs/v1/jobs/results"
                | "/ojs/v1/jobs/{id}/signals/{name}"
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
                    | "/ojs/v1/jobs/{id}/checkpoint"
                    | "/ojs/v1/jobs/{id}/result"
                    | "/ojs/v1/jobs/{id}/result/stream"
                    | "/ojs/v1/jobs/{id}/history"
                    | "/ojs/v1/jobs/{id}/lineage"
                    | "/ojs/v1/jobs/{id}/steps"
                    | "/ojs/v1/jobs/{id}/signals"
            )
    );
    if producer {
        return Some(Role::Producer);
    }
    if path.starts_with("/ojs/v1/workers/")
        || (method == Method::PUT && path == "/ojs/v1/jobs/{id}/progress")
        || path == "/ojs/v1/jobs/{id}/checkpoint"
        || path == "/ojs/v1/jobs/{id}/steps/{name}"
        // What the worker fleet scales on: its own key (or an admin's) reads it.
        || (method == Method::GET && matches!(path, "/ojs/v1/scaling" | "/ojs/v1/scaling/{name}"))
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
/// otherwise the request goes on carrying the key's [`Principal`], through the tenant rule
/// ([`tenancy::enforce`](super::tenancy::enforce)).
pub async fn authorize(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let gate = state.gate();
    let Some(role) = needed(req.method(), route_of(&req), gate.protect_metrics) else {
        return super::tenancy::enforce(&state, req, next).await;
    };
    if !gate.enforced() {
        return super::tenancy::enforce(&state, req, next).await;
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
    super::tenancy::enforce(&state, req, next).await
}

/// The route a request matched (its template, such as `/ojs/v1/jobs/{id}`), else its path.
fn route_of(req: &Request) -> &str {
    req.extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path(), MatchedPath::as_str)
}

/// Who a request is: the key it was made with (if keys are checked) and the tenant it acts as
/// (see [`tenancy`](super::tenancy)).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    key: Option<Principal>,
    tenant: Tenant,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Caller, Self::Rejection> {
        Ok(Caller {
            key: parts.extensions.get::<Principal>().cloned(),
            tenant: Tenant::from_request_parts(parts, state).await?,
        })
    }
}

impl Caller {
    /// The tenant the request acts as.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// 403 unless the key may use `queue`.
    pub fn check_queue(&self, queue: &str) -> Result<(), ApiError> {
        match &self.key {
            Some(p) if !p.may_use(queue) => Err(ApiError::forbidden(format!(
                "This key may not use queue '{queue}'."
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the key is limited to some queues.
    pub fn limited(&self) -> bool {
        self.key.as_ref().is_some_and(|p| p.queues.is_some())
    }

    /// 404 unless job `id` is the tenant's, and 403 unless the key may use its queue (a job
    /// that does not exist passes: the operation answers 404 itself).
    pub async fn check_job(&self, state: &AppState, id: JobId) -> Result<(), ApiError> {
        self.check_jobs(state, &[id]).await
    }

    /// [`Caller::check_job`] for many jobs, in one read (none for a request acting as no
    /// tenant with a key without a queue limit).
    pub async fn check_jobs(&self, state: &AppState, ids: &[JobId]) -> Result<(), ApiError> {
        if (!self.limited() && self.tenant.id().is_none()) || ids.is_empty() {
            return Ok(());
        }
        let owners = state.broker().job_owners(ids).await?;
        if let Some(foreign) = owners
            .iter()
            .find(|o| !self.tenant.sees(o.tenant.as_deref()))
        {
            return Err(crate::Error::JobNotFound(JobId(foreign.id)).into());
        }
        for owner in &owners {
            self.check_queue(&owner.queue)?;
        }
        Ok(())
    }
}
