//! FETCH: the long poll, one attempt of it (route, promote, claim), and what the broker
//! remembers of fetching workers. The claims themselves are in [`super::claim`]; the routing
//! policy in [`crate::scheduling`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::Db;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::claim_group::{CLAIM_GROUP_MAX, CLAIM_PATIENCE, SharedClaim, flush_claims};
use super::configs::Configs;
use super::dispatch_stats::DispatchStats;
use super::group::GROUP_FLUSHERS;
use super::group::GroupCommit;
use super::settings::Settings;
use crate::db::HotConnections;
use crate::error::{Error, Result};
use crate::hold::SystemHold;
use crate::job::Job;
use crate::job::dispatch::DispatchPlace;
use crate::scheduling::{
    self, DEFAULT_POOL, DEFAULT_WORKER_CONCURRENCY, Dispatcher, NoQueues, Pools, Preference, Route,
    Sources, Strategy, Weights,
};
use crate::store;
use crate::telemetry;
use crate::wakeup::Notifier;
use crate::wakeup::waiters::{Delivery, HandoffTarget, Parking, Waiters, give_back};

/// Due scheduled/retryable jobs a FETCH promotes per queue kind and call (the promoter
/// service handles the rest of a large backlog).
const FETCH_PROMOTE_LIMIT: i64 = 1_000;

/// A fetching worker's `last_seen_at` is written at most this often per worker and process.
const SEEN_WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// A FETCH request, validated.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Queues in order of preference (deduplicated).
    pub queues: Vec<String>,
    /// Jobs wanted, 1..=1000.
    pub count: usize,
    pub worker_id: Option<String>,
    pub visibility_timeout_ms: Option<i64>,
    /// How long to wait for work when none is available right away.
    pub wait: Duration,
    /// How the slots are spread over the queues, when the request says.
    pub strategy: Option<Strategy>,
    /// Queue weights of the `weighted` strategy, when the request gives them.
    pub weights: Option<Weights>,
    /// Only this tenant's jobs (`X-OJS-Tenant`, or the key's tenant).
    pub tenant: Option<String>,
}

/// A worker recorded as seen by a FETCH.
#[derive(Debug)]
struct Seen {
    at: Instant,
    defaults: FetchDefaults,
    /// The tenant the worker was recorded as the tenant's for (`None`: recorded acting as no
    /// tenant, which a FETCH acting as a tenant does not take as proof).
    tenant: Option<String>,
}

/// What a worker registered with that its FETCHes use: its pool and capacity, and the
/// strategy and weights for when no pool configuration applies.
#[derive(Debug, Clone, Default)]
pub(super) struct FetchDefaults {
    strategy: Option<Strategy>,
    weights: Option<Weights>,
    pool: Option<String>,
    concurrency: Option<i32>,
}

impl FetchDefaults {
    /// From the stored registration (whose strategy was checked when it was written; one that
    /// no longer parses, edited by hand, is logged and ignored).
    fn from_stored(r: store::worker::Registration) -> FetchDefaults {
        let strategy = r.strategy.and_then(|name| {
            name.parse::<Strategy>()
                .inspect_err(|e| {
                    tracing::warn!(strategy = name, error = e, "stored worker strategy ignored")
                })
                .ok()
        });
        FetchDefaults {
            strategy,
            weights: r.weights.and_then(|w| Weights::from_json(&w)),
            pool: r.pool,
            concurrency: r.concurrency,
        }
    }
}

/// How an enqueue may hand jobs to this FETCH while it waits, when it may: jobs written for it
/// must be the ones its claim would take. So not for a tenant's FETCH, nor when a pool's
/// concurrency, a starvation guarantee, or a strategy other than `strict` over its queues
/// decides what it takes (queue
/// dispatch limits and tenant-fair queues are left out by the enqueue, per job).
fn handoff_target(req: &FetchRequest, route: &Route) -> Option<HandoffTarget> {
    let pool_limited = route.pool.as_ref().is_some_and(|p| p.concurrency.is_some());
    // An enqueue does not know a waiting FETCH's tenant: a tenant's FETCH is woken and claims.
    let plain = req.tenant.is_none();
    (plain && route.strategy == Strategy::Strict && route.guarantee.is_none() && !pool_limited)
        .then(|| HandoffTarget {
            worker_id: req.worker_id.clone(),
            visibility_timeout_ms: req.visibility_timeout_ms,
            pool: route.pool_name().map(str::to_owned),
            room: req.count,
        })
}

/// How a parked FETCH's wait ended.
enum Woke {
    /// An enqueue wrote these jobs for it.
    Jobs(Vec<Job>),
    /// Jobs may be available: claim.
    Poll,
    /// Its timer ran out, or the server is shutting down; it left the line.
    TimeUp,
}

/// A FETCH parked on its queues. Dropped while jobs are on their way to it (its client went
/// away), it gives them back: they become available again.
struct ParkedFetch<'a> {
    waiters: &'a Waiters,
    db: &'a Db,
    parking: Option<Parking>,
}

impl ParkedFetch<'_> {
    /// Waits for a delivery until `until` or `shutdown`; then leaves the line, unless a
    /// delivery is already on its way, which it waits for.
    async fn wait(&mut self, until: Instant, shutdown: &CancellationToken) -> Woke {
        let waiters = self.waiters;
        let Some(parking) = self.parking.as_mut() else {
            return Woke::Poll;
        };
        let delivered = tokio::select! {
            d = &mut parking.rx => Some(d),
            () = tokio::time::sleep_until(until) => None,
            () = shutdown.cancelled() => None,
        };
        let delivered = match delivered {
            Some(d) => d,
            None if waiters.leave(parking.id) => {
                self.parking = None;
                return Woke::TimeUp;
            }
            None => (&mut parking.rx).await,
        };
        self.parking = None;
        match delivered {
            Ok(Delivery::Jobs(jobs)) => Woke::Jobs(jobs),
            Ok(Delivery::Poll) | Err(_) => Woke::Poll,
        }
    }
}

impl Drop for ParkedFetch<'_> {
    fn drop(&mut self) {
        let Some(parking) = self.parking.take() else {
            return;
        };
        if self.waiters.leave(parking.id) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let db = self.db.clone();
        runtime.spawn(async move {
            if let Ok(Delivery::Jobs(jobs)) = parking.rx.await {
                give_back(&db, &jobs).await;
            }
        });
    }
}

/// The FETCH side of the broker.
#[derive(Debug)]
pub(super) struct Fetcher {
    pub(super) db: Db,
    pub(super) configs: Arc<Configs>,
    pub(super) settings: Settings,
    /// Wakes long polls; keeps the claim floors.
    pub(super) notifier: Notifier,
    /// Maintenance mode: while in force nothing is handed out.
    hold: SystemHold,
    /// Fetching workers recently recorded as seen (so FETCH writes `last_seen_at` rarely),
    /// with the fetch defaults they registered.
    seen_workers: Mutex<HashMap<String, Seen>>,
    /// State of the strategies and starvation guarantees.
    pub(super) dispatcher: Dispatcher,
    /// Dispatch counts, backlog depths and overload events of fair scheduling.
    pub(super) stats: DispatchStats,
    /// Claims without dispatch limits, shared by the FETCHes of a queue that run at once.
    pub(super) claims: GroupCommit<SharedClaim, Result<Vec<Job>, sqlx::Error>>,
}

impl Fetcher {
    pub(super) fn new(
        db: Db,
        hot: HotConnections,
        configs: Arc<Configs>,
        settings: Settings,
        notifier: Notifier,
        hold: SystemHold,
    ) -> Fetcher {
        let floors = notifier.floors().clone();
        let default_visibility = settings.default_visibility_timeout_ms;
        // Patient flushers, as for ACKs: the FETCHes that arrive during a claim statement
        // share the next one.
        let claims = GroupCommit::spawn_patient(
            GROUP_FLUSHERS,
            CLAIM_GROUP_MAX,
            CLAIM_PATIENCE,
            move |claims| flush_claims(hot.clone(), floors.clone(), default_visibility, claims),
        );
        Fetcher {
            db,
            configs,
            settings,
            notifier,
            hold,
            seen_workers: Mutex::default(),
            dispatcher: Dispatcher::default(),
            stats: DispatchStats::default(),
            claims,
        }
    }

    /// FETCH: claims up to `count` jobs from the queues the request (or the worker's pool)
    /// names, spread by the effective strategy, waiting up to `wait` for work when none is
    /// available. Returns early (empty) on `shutdown`.
    ///
    /// A FETCH that waits parks on its queues ([`crate::wakeup::waiters`]): it claims again when
    /// woken, on its poll timer, or when a scheduled job comes due; or an enqueue hands it the
    /// job it creates, written active for it, and it answers with that.
    pub(super) async fn fetch(
        &self,
        req: &FetchRequest,
        shutdown: &CancellationToken,
    ) -> Result<Vec<Job>> {
        let waiters = self.notifier.waiters();
        let deadline = Instant::now() + req.wait;
        let mut queues = req.queues.clone();
        let mut route = None;
        let mut place = None;
        let mut first = true;
        loop {
            if self.hold.is_on() {
                // Maintenance mode: nothing is handed out; a long poll waits for its end.
                tokio::select! {
                    () = self.hold.lifted() => {}
                    () = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
                    () = shutdown.cancelled() => return Ok(Vec::new()),
                }
                if Instant::now() >= deadline {
                    return Ok(Vec::new());
                }
            }
            // Taken before the claim: a commit between the claim and parking is not missed.
            let mark = waiters.mark();
            let (jobs, routed) = self.try_fetch(req, first).await?;
            first = false;
            if !jobs.is_empty() && self.hold.is_on() {
                // The hold came into force while this claim ran: what it took may have been
                // enqueued after the hold began, so it goes back (attempt not counted) and the
                // FETCH waits like any other.
                give_back(&self.db, &jobs).await;
                continue;
            }
            if let Some(routed) = routed {
                queues = routed.queue_names();
                route = Some(routed);
            }
            let now = Instant::now();
            if !jobs.is_empty() || now >= deadline || shutdown.is_cancelled() {
                return Ok(jobs);
            }
            let handoff = route.as_ref().and_then(|r| handoff_target(req, r));
            let Some(parking) = waiters.park(place, &queues, mark, handoff) else {
                continue;
            };
            place = Some(parking.id);
            let mut parked = ParkedFetch {
                waiters,
                db: &self.db,
                parking: Some(parking),
            };
            let mut until = (now + self.settings.fetch_poll_interval).min(deadline);
            if let Some(due) = waiters.next_due() {
                until = until.min(due);
            }
            match parked.wait(until, shutdown).await {
                Woke::Jobs(mut jobs) => {
                    if let Some(route) = &route {
                        self.started(&mut jobs, route);
                    }
                    return Ok(jobs);
                }
                Woke::Poll => {}
                Woke::TimeUp if shutdown.is_cancelled() => return Ok(Vec::new()),
                Woke::TimeUp => {}
            }
        }
    }

    /// One attempt of a FETCH, with the route it took (`None`: the worker may take nothing
    /// now).
    ///
    /// Due scheduled and retryable jobs become available through the promoter (every
    /// `OJS_PROMOTE_INTERVAL_MS`, with `enqueued_at` = their due time, so they keep their FIFO
    /// place) or here: a fetch that finds fewer jobs than it wants promotes its queues' due jobs
    /// and claims again, so a job is never missed once due. That promotion is skipped while
    /// nothing can be due ([`crate::wakeup::waiters::Waiters::may_be_due`]). A fetch that is served at
    /// once costs one statement per queue asked.
    ///
    /// A long poll's first attempt claims nothing when FETCHes that would take hand-offs are
    /// already parked on every one of its queues and nothing can be due: since they claimed in
    /// vain, any job made available woke them (or went to them), so this FETCH goes straight
    /// into line behind them. Later attempts (woken, or on the poll timer) always claim.
    async fn try_fetch(
        &self,
        req: &FetchRequest,
        first: bool,
    ) -> Result<(Vec<Job>, Option<Route>)> {
        let configs = self.configs.current(&self.db).await?;
        let registered = match &req.worker_id {
            Some(worker) => {
                if req.queues.is_empty() && !self.in_configured_pool(worker, &*configs).await? {
                    return Err(no_queues());
                }
                self.record_seen(worker, req.tenant.as_deref()).await?
            }
            None => FetchDefaults::default(),
        };
        let sources = Sources {
            server: Preference {
                strategy: self.settings.fetch_strategy,
                weights: self.settings.queue_weights.as_ref(),
            },
            request: Preference {
                strategy: req.strategy,
                weights: req.weights.as_ref(),
            },
            registered: Preference {
                strategy: registered.strategy,
                weights: registered.weights.as_ref(),
            },
        };
        let route = scheduling::route(&req.queues, registered.pool.as_deref(), &sources, &*configs)
            .map_err(|NoQueues| no_queues())?;
        if route.queues.is_empty() {
            return Ok((Vec::new(), Some(route)));
        }
        let mut wanted = req.count;
        if route.strategy == Strategy::LeastLoaded
            && let Some(worker) = &req.worker_id
        {
            let capacity = i64::from(registered.concurrency.unwrap_or(DEFAULT_WORKER_CONCURRENCY));
            let active = store::worker::active_jobs(&self.db, worker).await?;
            wanted = wanted.min(usize::try_from(capacity - active).unwrap_or(0));
            if wanted == 0 {
                return Ok((Vec::new(), Some(route)));
            }
        }
        let names = route.queue_names();
        let queues: Vec<&str> = names.iter().map(String::as_str).collect();
        let waiters = self.notifier.waiters();
        if first
            && !req.wait.is_zero()
            && handoff_target(req, &route).is_some()
            && !waiters.may_be_due()
            && queues.iter().all(|queue| {
                waiters.handoff_parked(queue)
                    && !configs.of(queue).limits_dispatch()
                    && !configs.is_tenant_fair(queue)
            })
        {
            return Ok((Vec::new(), Some(route)));
        }
        let mut jobs = self
            .claim_routed(req, &configs, &route, wanted, Vec::new())
            .await?;
        let (may_be_due, learning) = (waiters.may_be_due(), waiters.due_version());
        if jobs.len() < wanted {
            telemetry::fetch_promotion(may_be_due);
        }
        if jobs.len() < wanted && may_be_due {
            // Claim again even when this promoted nothing: the promoter may have made the due
            // jobs available between the claim above and this promotion, and they are owed to
            // this FETCH as much as the ones promoted here.
            let promoted =
                store::job::promote_due(&self.db, Some(&queues), None, FETCH_PROMOTE_LIMIT).await?;
            waiters.learned_next_due(
                learning,
                match promoted.next_due_ms {
                    None => None,
                    // A full batch leaves more due: unknown, so the next FETCH promotes again.
                    Some(_) if promoted.jobs >= FETCH_PROMOTE_LIMIT => Some(Duration::ZERO),
                    Some(ms) => Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                },
            );
            if promoted.jobs > 0 {
                // The promotion's notification reaches the claim floors only after the claim
                // below has started: lower them now, or it starts past the jobs just promoted.
                self.lower_floors(&queues);
            }
            jobs = self
                .claim_routed(req, &configs, &route, wanted, jobs)
                .await?;
            // Something was due before the promotion yet it promoted less than its limit: the
            // rest was locked by another promotion (the promoter's, another FETCH's) still
            // committing. Wait for it, then claim what it made available.
            if jobs.len() < wanted
                && promoted.jobs < FETCH_PROMOTE_LIMIT
                && promoted.next_due_ms.is_some_and(|ms| ms <= 0)
            {
                store::job::await_due_locks(&self.db, &queues).await?;
                self.lower_floors(&queues);
                jobs = self
                    .claim_routed(req, &configs, &route, wanted, jobs)
                    .await?;
            }
        }
        self.started(&mut jobs, &route);
        Ok((jobs, Some(route)))
    }

    /// Starts the next claims of `queues` from the beginning of their dispatch order.
    fn lower_floors(&self, queues: &[&str]) {
        let floors = self.notifier.floors();
        for queue in queues {
            floors.lower(queue, DispatchPlace::START);
        }
    }

    /// Orders the jobs a FETCH got (claims return rows in no particular order: by queue
    /// preference, then dispatch order) and counts them as started.
    fn started(&self, jobs: &mut [Job], route: &Route) {
        let rank = |queue: &str| route.queues.iter().position(|(q, _)| q == queue);
        jobs.sort_by_cached_key(|job| (rank(&job.queue), job.dispatch_key()));
        telemetry::jobs_started(jobs);
        telemetry::jobs_dispatched(jobs, route.pool_name().unwrap_or(DEFAULT_POOL));
        self.stats.record(jobs, route.pool_name().unwrap_or(""));
    }

    /// Records a fetching worker as seen, at most every few seconds per worker, and returns
    /// what it registered with (as of that write). A FETCH acting as a tenant may use only a
    /// worker id that is new or the tenant's (409 otherwise); a worker is taken as the tenant's
    /// from the cache only when that write was made acting as the same tenant.
    async fn record_seen(&self, worker_id: &str, tenant: Option<&str>) -> Result<FetchDefaults> {
        let now = Instant::now();
        {
            let mut seen = self.seen_workers.lock().expect("seen-workers lock");
            if let Some(entry) = seen.get(worker_id)
                && now.duration_since(entry.at) < SEEN_WRITE_INTERVAL
                && (tenant.is_none() || entry.tenant.as_deref() == tenant)
            {
                return Ok(entry.defaults.clone());
            }
            if seen.len() >= 10_000 {
                seen.retain(|_, entry| now.duration_since(entry.at) < SEEN_WRITE_INTERVAL);
            }
            seen.insert(
                worker_id.to_owned(),
                Seen {
                    at: now,
                    defaults: FetchDefaults::default(),
                    tenant: None,
                },
            );
        }
        let recorded = store::worker::record_seen(&self.db, worker_id, tenant).await;
        let mut seen = self.seen_workers.lock().expect("seen-workers lock");
        match recorded {
            Ok(Some(registration)) => {
                let defaults = FetchDefaults::from_stored(registration);
                seen.insert(
                    worker_id.to_owned(),
                    Seen {
                        at: now,
                        defaults: defaults.clone(),
                        tenant: tenant.map(str::to_owned),
                    },
                );
                Ok(defaults)
            }
            Ok(None) => {
                seen.remove(worker_id);
                Err(Error::WorkerIdTaken(worker_id.to_owned()))
            }
            Err(e) => {
                seen.remove(worker_id);
                Err(e.into())
            }
        }
    }

    /// Whether a FETCH naming no queues from `worker_id` has a pool to serve it: the worker's
    /// registered pool, or [`DEFAULT_POOL`] for a worker of none (or one never seen). Read
    /// without writing, so that a refused FETCH does not record its worker as seen.
    async fn in_configured_pool(&self, worker_id: &str, pools: &impl Pools) -> Result<bool> {
        let cached = (self.seen_workers.lock().expect("seen-workers lock"))
            .get(worker_id)
            .map(|entry| entry.defaults.pool.clone());
        let pool = match cached {
            Some(pool) => pool,
            None => store::worker::pool_of(&self.db, worker_id).await?,
        };
        Ok(pools
            .pool(pool.as_deref().unwrap_or(DEFAULT_POOL))
            .is_some())
    }

    /// Forgets what was cached about a worker (it registered or heartbeat: new fetch defaults).
    pub(super) fn forget_seen(&self, worker_id: &str) {
        self.seen_workers
            .lock()
            .expect("seen-workers lock")
            .remove(worker_id);
    }

    /// Forgets every worker (after a reset).
    pub(super) fn forget_all(&self) {
        self.seen_workers.lock().expect("seen-workers lock").clear();
    }
}

/// The refusal of a FETCH that names no queues from a worker of no configured pool.
fn no_queues() -> Error {
    Error::invalid(
        "$.queues",
        "'queues' is required unless the worker belongs to a configured pool",
    )
}
