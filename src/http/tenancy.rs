//! Tenant scope, for every route in one place.
//!
//! A request acts as a tenant when its API key is bound to one, or when it carries
//! `X-OJS-Tenant` (a bound key's request may only repeat its own tenant there). Such a request
//! sees and touches only that tenant's jobs, workflows, workers, cron entries, events, dead
//! letters and counts: anything else answers 404 as if it did not exist, and nothing changes.
//! A request acting as no tenant sees everything, as before tenants existed.
//!
//! [`rule`] says, for every route, how the rule is kept; [`enforce`] (run by the
//! [`authorize`](super::auth::authorize) middleware once the key is known) applies it:
//! - a route naming one resource in its path (a job, a workflow, a worker, a cron entry, a
//!   tenant) is checked here, before its handler runs, with one read of the resource's owner;
//! - a route that acts on what every tenant shares (queue configuration, API keys, pools,
//!   webhooks, rate-limit keys, metrics, maintenance mode) is refused with 403;
//! - the others are scoped by their handlers, which read the request's [`Tenant`]: an enqueue
//!   tags its jobs, a FETCH claims only the tenant's jobs, a listing, count or stream reads only
//!   the tenant's part, and the jobs a worker's body names are checked with
//!   [`Caller::check_jobs`](super::auth::Caller::check_jobs).
//!
//! A route [`rule`] does not know is refused to tenants (and a unit test fails until it is
//! classified), so a new route is never open to another tenant's data by omission;
//! `tests/integration/tenant_scope.rs` walks every operation of the OpenAPI document with one
//! tenant's keys against another's resources. Requests acting as no tenant pass straight
//! through: they pay one header lookup.

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request};
use axum::http::Method;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use crate::auth::Principal;
use crate::broker::Owned;
use crate::error::Error;

/// The header naming the tenant a request acts as (multi-tenancy extension).
pub const TENANT_HEADER: &str = "x-ojs-tenant";

/// How a route keeps the tenant rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Holds nothing of any tenant's: probes, the manifest, the OpenAPI document. The tenant is
    /// not even read.
    Open,
    /// Reads shared configuration that reveals nothing of any tenant (a queue's configuration,
    /// the schema registry, maintenance mode).
    SharedRead,
    /// Makes the tenant's own things (enqueue, workflows, cron entries, worker registration)
    /// or hands out only its jobs (FETCH): the handler tags or filters with [`Tenant`], and a
    /// worker id it names must be the tenant's.
    Own,
    /// Lists, counts and streams: the handler reads only the tenant's part.
    Filtered,
    /// Jobs named in the body (ACK, NACK, progress): the handler checks them with
    /// [`Caller::check_jobs`](super::auth::Caller::check_jobs).
    BodyJobs,
    /// The job `{id}` of the path.
    Job,
    /// The workflow `{id}` of the path.
    Workflow,
    /// The worker `{worker_id}` of the path.
    Worker,
    /// The cron entry `{name}` (or `{id}`) of the path.
    Cron,
    /// The tenant `{id}` of the path: only the request's own.
    Tenant,
    /// Acts on, or reads, what every tenant shares: refused (403) to a request acting as a
    /// tenant.
    Shared,
}

/// How route `route` (its template) with `method` keeps the tenant rule; `None`: a route this
/// table does not know, which [`enforce`] refuses to tenants like [`Rule::Shared`].
pub fn rule(method: &Method, route: &str) -> Option<Rule> {
    use Rule::*;
    let get = method == Method::GET;
    let rule = match route {
        "/health" | "/ready" | "/ojs/v1/health" | "/ojs/v1/ready" | "/ojs/manifest"
        | "/ojs/openapi.json" | "/ojs/v1/middleware" => Open,

        "/ojs/v1/jobs" | "/ojs/v1/jobs/batch" | "/ojs/v1/workflows" if !get => Own,
        "/ojs/v1/cron" if !get => Own,
        "/ojs/v1/workers/register"
        | "/ojs/v1/workers/fetch"
        | "/ojs/v1/workers/heartbeat"
        | "/ojs/v1/workers/beat" => Own,
        "/ojs/v1/workers/ack"
        | "/ojs/v1/workers/ack/batch"
        | "/ojs/v1/workers/nack"
        | "/ojs/v1/workers/nack/batch"
        | "/ojs/v1/workers/progress"
        | "/ojs/v1/workers/wait"
        | "/ojs/v1/jobs/results" => BodyJobs,

        "/ojs/v1/jobs/{id}"
        | "/ojs/v1/jobs/{id}/activate"
        | "/ojs/v1/jobs/{id}/events"
        | "/ojs/v1/jobs/{id}/progress"
        | "/ojs/v1/jobs/{id}/progress/stream"
        | "/ojs/v1/jobs/{id}/checkpoint"
        | "/ojs/v1/jobs/{id}/result"
        | "/ojs/v1/jobs/{id}/result/stream"
        | "/ojs/v1/jobs/{id}/history"
        | "/ojs/v1/jobs/{id}/lineage"
        | "/ojs/v1/jobs/{id}/steps"
        | "/ojs/v1/jobs/{id}/steps/{name}"
        | "/ojs/v1/jobs/{id}/signals"
        | "/ojs/v1/jobs/{id}/signals/{name}"
        | "/ojs/v1/admin/jobs/{id}"
        | "/ojs/v1/admin/jobs/{id}/cancel"
        | "/ojs/v1/admin/jobs/{id}/retry"
        | "/ojs/v1/dead-letter/{id}"
        | "/ojs/v1/dead-letter/{id}/retry"
        | "/ojs/v1/admin/dead-letter/{id}"
        | "/ojs/v1/admin/dead-letter/{id}/retry" => Job,
        "/ojs/v1/workflows/{id}"
        | "/ojs/v1/workflows/{id}/cancel"
        | "/ojs/v1/workflows/{id}/progress" => Workflow,
        "/ojs/v1/workers/{worker_id}"
        | "/ojs/v1/workers/{worker_id}/health"
        | "/ojs/v1/admin/workers/{worker_id}"
        | "/ojs/v1/admin/workers/{worker_id}/{directive}" => Worker,
        "/ojs/v1/cron/{name}" | "/ojs/v1/cron/{name}/runs" | "/ojs/v1/crons/{id}" => Cron,
        "/ojs/v1/admin/tenants/{id}"
        | "/ojs/v1/admin/tenants/{id}/stats"
        | "/ojs/v1/admin/tenants/{id}/jobs"
            if get =>
        {
            Tenant
        }

        "/ojs/v1/admin/jobs"
        | "/ojs/v1/admin/jobs/bulk/{action}"
        | "/ojs/v1/dead-letter"
        | "/ojs/v1/dead-letter/retry"
        | "/ojs/v1/dead-letter/stats"
        | "/ojs/v1/admin/dead-letter"
        | "/ojs/v1/admin/dead-letter/retry"
        | "/ojs/v1/admin/dead-letter/stats"
        | "/ojs/v1/events"
        | "/ojs/v1/queues/{name}/events"
        | "/ojs/v1/admin/tenants" => Filtered,
        "/ojs/v1/queues"
        | "/ojs/v1/queues/{name}"
        | "/ojs/v1/queues/{name}/stats"
        | "/ojs/v1/queues/{name}/priority-stats"
        | "/ojs/v1/admin/workers"
        | "/ojs/v1/workflows"
        | "/ojs/v1/cron"
        | "/ojs/v1/crons"
            if get =>
        {
            Filtered
        }

        "/ojs/v1/queues/{name}/config"
        | "/ojs/v1/admin/queues/{name}/config"
        | "/ojs/v1/admin/schemas"
        | "/ojs/v1/admin/schemas/{type}"
        | "/ojs/v1/admin/schemas/{type}/versions"
        | "/ojs/v1/admin/schemas/{type}/{version}"
        | "/ojs/v1/schemas/{type}"
        | "/ojs/v1/schemas/{type}/versions"
        | "/ojs/v1/admin/system/maintenance"
            if get =>
        {
            SharedRead
        }

        // The operator's dashboards, which span every tenant (a tenant's own counts are at
        // /ojs/v1/admin/tenants/{id}/stats and on the queue routes above).
        "/ojs/v1/admin/queues"
        | "/ojs/v1/admin/queues/{name}"
        | "/ojs/v1/admin/stats"
        | "/ojs/v1/unique-jobs"
        | "/metrics"
        | "/ojs/v1/admin/reset"
        | "/ojs/v1/admin/keys"
        | "/ojs/v1/admin/keys/{id}"
        | "/ojs/v1/admin/pools"
        | "/ojs/v1/admin/pools/{name}"
        | "/ojs/v1/admin/scheduling/stats"
        | "/ojs/v1/admin/stats/history"
        | "/ojs/v1/scaling"
        | "/ojs/v1/scaling/{name}"
        | "/ojs/v1/admin/system/maintenance"
        | "/ojs/v1/admin/schemas/{type}/{version}"
        | "/ojs/v1/schemas"
        | "/ojs/v1/schemas/{type}/{version}"
        | "/ojs/v1/queues"
        | "/ojs/v1/queues/{name}"
        | "/ojs/v1/queues/{name}/config"
        | "/ojs/v1/queues/{name}/pause"
        | "/ojs/v1/queues/{name}/resume"
        | "/ojs/v1/admin/queues/{name}/config"
        | "/ojs/v1/admin/queues/{name}/jobs"
        | "/ojs/v1/admin/queues/{name}/pause"
        | "/ojs/v1/admin/queues/{name}/resume"
        // A tenant's limits are the operator's to set, not the tenant's.
        | "/ojs/v1/admin/tenants/{id}"
        | "/ojs/v1/admin/tenants/{id}/limits"
        | "/ojs/v1/rate-limits"
        | "/ojs/v1/rate-limits/{key}"
        | "/ojs/v1/rate-limits/{key}/override"
        | "/ojs/v1/webhooks/subscriptions"
        | "/ojs/v1/webhooks/subscriptions/{id}"
        | "/ojs/v1/webhooks/subscriptions/{id}/test" => Shared,
        _ => return None,
    };
    Some(rule)
}

/// The tenant a request acts as, as [`enforce`] resolved it (in the request's extensions).
#[derive(Debug, Clone)]
struct Scope(Arc<str>);

/// The tenant a request acts as (`None`: none; such a request is not scoped). With a tenant,
/// an enqueue tags its jobs with it, and reads, cancels and FETCHes see only its jobs.
#[derive(Debug, Clone, Default)]
pub struct Tenant(pub Option<Arc<str>>);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Tenant, Self::Rejection> {
        Ok(Tenant(parts.extensions.get::<Scope>().map(|s| s.0.clone())))
    }
}

impl Tenant {
    /// The tenant, if the request is scoped to one.
    pub fn id(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Whether something owned by `owner` is the request's to see.
    pub fn sees(&self, owner: Option<&str>) -> bool {
        crate::tenant::visible(self.id(), owner)
    }

    /// The tenant as an owned string (for filters handed to the broker).
    pub fn owned(&self) -> Option<String> {
        self.id().map(str::to_owned)
    }
}

/// The tenant of `X-OJS-Tenant` and of the key (`parts` after
/// [`authorize`](super::auth::authorize)): 400 for a malformed header, 403 when a key bound to
/// one tenant names another.
fn resolve(parts: &Parts) -> Result<Option<Arc<str>>, ApiError> {
    let header = match parts.headers.get(TENANT_HEADER) {
        None => None,
        Some(value) => {
            let value = value.to_str().map(str::trim).map_err(|_| {
                ApiError::invalid_field("header.X-OJS-Tenant", "X-OJS-Tenant must be ASCII")
            })?;
            if !value.is_empty() && !crate::tenant::is_valid_id(value) {
                return Err(ApiError::invalid_field(
                    "header.X-OJS-Tenant",
                    crate::tenant::invalid_id_message(value),
                ));
            }
            (!value.is_empty()).then_some(value)
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
        (Some(own), _) => Ok(Some(own)),
        (None, header) => Ok(header.map(Arc::from)),
    }
}

/// Resolves the tenant a request acts as and applies the route's [`Rule`] (see the module
/// documentation), then runs the request; called by [`authorize`](super::auth::authorize).
pub async fn enforce(state: &AppState, req: Request, next: Next) -> Response {
    // Most requests act as no tenant: one header lookup, one extension lookup.
    let bound = req
        .extensions()
        .get::<Principal>()
        .is_some_and(|p| p.tenant.is_some());
    if !bound && !req.headers().contains_key(TENANT_HEADER) {
        return next.run(req).await;
    }
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let Some(route) = route else {
        // Not a route of the API (the admin UI's files, a 404): nothing of a tenant's.
        return next.run(req).await;
    };
    let rule = rule(req.method(), &route);
    if rule == Some(Rule::Open) {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let tenant = match resolve(&parts) {
        Ok(Some(tenant)) => tenant,
        Ok(None) => return next.run(Request::from_parts(parts, body)).await,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check(state, &mut parts, rule, &tenant).await {
        return e.into_response();
    }
    parts.extensions.insert(Scope(tenant));
    next.run(Request::from_parts(parts, body)).await
}

/// Applies `rule` for a request acting as `tenant`: refuses shared routes, and answers 404 for
/// a resource of the path that is not the tenant's.
async fn check(
    state: &AppState,
    parts: &mut Parts,
    rule: Option<Rule>,
    tenant: &str,
) -> Result<(), ApiError> {
    let Some(rule) = rule.filter(|r| *r != Rule::Shared) else {
        return Err(ApiError::forbidden(format!(
            "A request acting as tenant '{tenant}' may not call {} {}: it acts on what every \
             tenant shares.",
            parts.method,
            parts
                .extensions
                .get::<MatchedPath>()
                .map_or("", MatchedPath::as_str)
        )));
    };
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::invalid_field("path", e.body_text()))?;
    let path = |name: &str| {
        params
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
            .unwrap_or_default()
    };
    let (resource, missing) = match rule {
        Rule::Job => {
            let id = path("id");
            let Ok(uuid) = id.parse::<uuid::Uuid>() else {
                // Not a job id: the handler answers it, touching nothing.
                return Ok(());
            };
            (
                Owned::Job(uuid),
                Error::JobNotFound(crate::job::JobId(uuid)),
            )
        }
        Rule::Workflow => {
            let Ok(uuid) = path("id").parse::<uuid::Uuid>() else {
                return Ok(());
            };
            (Owned::Workflow(uuid), Error::WorkflowNotFound(uuid))
        }
        Rule::Worker => {
            let id = path("worker_id");
            (Owned::Worker(id.clone()), Error::WorkerNotFound(id))
        }
        Rule::Cron => {
            let name = if route_has(parts, "{name}") {
                path("name")
            } else {
                path("id")
            };
            (Owned::Cron(name.clone()), Error::CronNotFound(name))
        }
        Rule::Tenant => {
            let id = path("id");
            return if id == tenant {
                Ok(())
            } else {
                Err(ApiError::not_found("tenant", &id))
            };
        }
        Rule::Open
        | Rule::SharedRead
        | Rule::Own
        | Rule::Filtered
        | Rule::BodyJobs
        | Rule::Shared => return Ok(()),
    };
    match state.broker().owner(&resource).await? {
        // Does not exist: the handler answers 404 itself.
        None => Ok(()),
        Some(owner) if owner.as_deref() == Some(tenant) => Ok(()),
        Some(_) => Err(missing.into()),
    }
}

/// Whether the matched route's template contains `segment`.
fn route_has(parts: &Parts, segment: &str) -> bool {
    parts
        .extensions
        .get::<MatchedPath>()
        .is_some_and(|p| p.as_str().contains(segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_of_the_api_has_a_rule() {
        let settings = crate::http::openapi::tests::every_route();
        let (_, doc) = crate::http::api(&settings).split_for_parts();
        let mut missing = Vec::new();
        let mut seen = 0;
        for (path, item) in &doc.paths.paths {
            for (method, present) in [
                (Method::GET, item.get.is_some()),
                (Method::POST, item.post.is_some()),
                (Method::PUT, item.put.is_some()),
                (Method::PATCH, item.patch.is_some()),
                (Method::DELETE, item.delete.is_some()),
            ] {
                if !present {
                    continue;
                }
                seen += 1;
                if rule(&method, path).is_none() {
                    missing.push(format!("{method} {path}"));
                }
            }
        }
        assert!(seen > 100, "{seen} operations");
        assert!(
            missing.is_empty(),
            "routes without a tenant rule (add them to http::tenancy::rule): {missing:#?}"
        );
    }

    #[test]
    fn reads_are_scoped_and_changes_to_what_tenants_share_are_refused() {
        use Rule::*;
        let r = |m: Method, p: &str| rule(&m, p);
        assert_eq!(r(Method::GET, "/ojs/v1/queues"), Some(Filtered));
        assert_eq!(r(Method::POST, "/ojs/v1/queues"), Some(Shared));
        assert_eq!(r(Method::DELETE, "/ojs/v1/workflows/{id}"), Some(Workflow));
        assert_eq!(r(Method::GET, "/ojs/v1/jobs/{id}/events"), Some(Job));
        assert_eq!(r(Method::POST, "/ojs/v1/jobs"), Some(Own));
        assert_eq!(r(Method::GET, "/ojs/v1/jobs"), None);
        assert_eq!(
            r(Method::GET, "/ojs/v1/admin/system/maintenance"),
            Some(SharedRead)
        );
        assert_eq!(
            r(Method::POST, "/ojs/v1/admin/system/maintenance"),
            Some(Shared)
        );
        assert_eq!(r(Method::GET, "/ojs/v1/some/new/route"), None);
    }
}
