//! Wakes long-polling fetchers when jobs become available, and followers when a leader resigns.
//!
//! One connection per process LISTENs on [`store::JOB_AVAILABLE_CHANNEL`] and
//! [`store::leader::RESIGNED_CHANNEL`]; each notification is fanned out in memory to every
//! waiter. When the listening connection drops, notifications sent meanwhile are lost, so every
//! waiter is woken to poll once, and waiters also poll on a timer as a safety net. A lost
//! connection is also reported to [`DbHealth`]: it is usually the first sign of an outage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::claim_floor::{ClaimFloors, FloorKey};
use crate::db::DbHealth;
use crate::store;

/// What a waiter is woken for.
#[derive(Debug, Clone)]
pub enum Wakeup {
    /// This queue has new available jobs.
    Queue(Arc<QueueWakeup>),
    /// The maintenance leader resigned: followers should try to take over now.
    LeaderResigned,
    /// Anything may have changed (the listener reconnected): poll.
    All,
}

/// New jobs in a queue, and how many waiters they are for.
///
/// Every waiter receives every wakeup, but only as many waiters as there are new jobs take it
/// and poll: one enqueued job does not send every long-polling worker of its queue to the
/// database (a waiter that polls in vain waits again; all of them also poll on a timer).
#[derive(Debug)]
pub struct QueueWakeup {
    queue: Arc<str>,
    permits: AtomicUsize,
    /// No new job is before this place in the queue's dispatch order.
    from: FloorKey,
}

impl Wakeup {
    /// New jobs in `queue`, for up to `waiters` waiters (`usize::MAX`: all of them, when the
    /// number of jobs is unknown), anywhere in its dispatch order.
    pub fn queue(queue: &str, waiters: usize) -> Wakeup {
        Wakeup::queue_from(queue, waiters, FloorKey::START)
    }

    /// [`Wakeup::queue`] for jobs at or after `from` in dispatch order.
    pub fn queue_from(queue: &str, waiters: usize, from: FloorKey) -> Wakeup {
        Wakeup::Queue(Arc::new(QueueWakeup {
            queue: queue.into(),
            permits: AtomicUsize::new(waiters),
            from,
        }))
    }

    /// Whether a waiter on `queues` should poll now. A queue wakeup is taken by at most as
    /// many waiters as it has permits.
    pub fn take_for(&self, queues: &[String]) -> bool {
        match self {
            Wakeup::All => true,
            Wakeup::Queue(w) => {
                queues.iter().any(|name| name.as_str() == &*w.queue)
                    && w.permits
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_sub(1))
                        .is_ok()
            }
            Wakeup::LeaderResigned => false,
        }
    }
}

/// The in-process fan-out of availability notifications.
#[derive(Debug, Clone)]
pub struct Notifier {
    tx: broadcast::Sender<Wakeup>,
    /// This process's instance id: its own notifications, which it already delivered in
    /// process, are ignored when they come back from the database.
    instance: Arc<str>,
    /// Backend pid of this process's listening connection (0 while not listening).
    listener_pid: Arc<AtomicI32>,
    /// Where claims start: lowered by every wakeup.
    floors: Arc<ClaimFloors>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier::new("")
    }
}

impl Notifier {
    /// A notifier for the process with instance id `instance`.
    pub fn new(instance: &str) -> Notifier {
        // Capacity only bounds how far a slow waiter can lag; a lagging waiter simply polls.
        let (tx, _) = broadcast::channel(1024);
        Notifier {
            tx,
            instance: instance.into(),
            listener_pid: Arc::default(),
            floors: Arc::default(),
        }
    }

    /// Where this process's claims start (see [`crate::claim_floor`]).
    pub fn floors(&self) -> &Arc<ClaimFloors> {
        &self.floors
    }

    /// A receiver of every wakeup from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Wakeup> {
        self.tx.subscribe()
    }

    /// Delivers a wakeup to current waiters (none waiting is fine), first lowering the claim
    /// floors to the new jobs.
    pub fn wake(&self, wakeup: Wakeup) {
        match &wakeup {
            Wakeup::Queue(w) => self.floors.lower(&w.queue, w.from),
            Wakeup::All => self.floors.reset_all(),
            Wakeup::LeaderResigned => {}
        }
        let _ = self.tx.send(wakeup);
    }

    /// Listens for notifications until `shutdown`, reconnecting with backoff on failure.
    pub async fn listen(self, pool: PgPool, health: DbHealth, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                r = self.listen_once(&pool, &health, &shutdown) => r,
            };
            self.listener_pid.store(0, Ordering::Relaxed);
            match result {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "notification listener failed; retrying");
                    health.report(&e);
                    self.wake(Wakeup::All);
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    async fn listen_once(
        &self,
        pool: &PgPool,
        health: &DbHealth,
        shutdown: &CancellationToken,
    ) -> Result<(), sqlx::Error> {
        let mut listener = PgListener::connect_with(pool).await?;
        // Named, so that announcers can tell whether any other replica listens.
        let pid: i32 = sqlx::query_scalar(
            "select pg_backend_pid() from set_config('application_name', $1, false)",
        )
        .bind(store::LISTENER_APPLICATION_NAME)
        .fetch_one(&mut listener)
        .await?;
        self.listener_pid.store(pid, Ordering::Relaxed);
        listener
            .listen_all([
                store::JOB_AVAILABLE_CHANNEL,
                store::leader::RESIGNED_CHANNEL,
            ])
            .await?;
        tracing::debug!("listening for notifications");
        // Anything enqueued while we were not listening would otherwise wait for a poll.
        self.wake(Wakeup::All);
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                n = listener.try_recv() => n?,
            };
            match next {
                Some(n) if n.channel() == store::leader::RESIGNED_CHANNEL => {
                    self.wake(Wakeup::LeaderResigned);
                }
                Some(n) => match parse_available(n.payload()) {
                    (_, Some(sender), _) if sender == &*self.instance => {}
                    (queue, _, from) => self.wake(Wakeup::queue_from(queue, usize::MAX, from)),
                },
                // The connection was lost; the next try_recv reconnects and re-listens.
                None => {
                    tracing::warn!("notification connection lost; reconnecting");
                    health.report_lost();
                    self.wake(Wakeup::All);
                }
            }
        }
    }
}

/// A notification of available jobs: `queue` (from a statement), `queue sender` (from an
/// announcer before the claim floors) or `queue sender priority time_ms` (from an announcer
/// that knows where the new jobs are in dispatch order).
fn parse_available(payload: &str) -> (&str, Option<&str>, FloorKey) {
    let mut fields = payload.split(' ');
    let queue = fields.next().unwrap_or_default();
    let sender = fields.next();
    let from = match (fields.next(), fields.next()) {
        (Some(priority), Some(time_ms)) => {
            FloorKey::from_wire(priority, time_ms).unwrap_or(FloorKey::START)
        }
        _ => FloorKey::START,
    };
    (queue, sender, from)
}

/// Announces queues that gained available jobs: at once to this process's waiters, and to the
/// other replicas with a NOTIFY sent after the change committed, coalesced per queue.
///
/// One task sends the notifications: it takes every queue announced since its last send and
/// notifies them all in one statement, so however many enqueues commit per second, a queue is
/// notified at most once per round trip of that statement. An idle announcer sends at once.
/// A notification that cannot be sent is only logged: other replicas' waiters also poll on a
/// timer, and this process's were already woken.
///
/// A NOTIFY is a commit that takes the notification queue's lock, so nothing is sent while no
/// other replica listens on the database: each replica names its listening connection
/// ([`store::LISTENER_APPLICATION_NAME`]), and the announcer looks for another one in
/// `pg_stat_activity` at most every [`PEER_CHECK_INTERVAL`]. A replica that starts listening
/// is therefore told about new jobs within that interval (its waiters poll meanwhile).
#[derive(Debug, Clone, Default)]
pub struct Announcer {
    notifier: Notifier,
    /// Queues to notify, with the earliest place of their new jobs.
    pending: Arc<Mutex<HashMap<Arc<str>, FloorKey>>>,
    signal: Arc<Notify>,
}

impl Announcer {
    /// An announcer waking `notifier`'s waiters.
    pub fn new(notifier: Notifier) -> Announcer {
        Announcer {
            notifier,
            ..Announcer::default()
        }
    }

    /// The notifier this announcer wakes.
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// `queue` has `jobs` new available jobs (committed), none before `from` in its dispatch
    /// order (`FloorKey::START` when unknown).
    pub fn announce(&self, queue: &str, jobs: usize, from: FloorKey) {
        self.notifier.wake(Wakeup::queue_from(queue, jobs, from));
        self.pending
            .lock()
            .expect("announcer lock")
            .entry(queue.into())
            .and_modify(|earliest| *earliest = earliest.min(from))
            .or_insert(from);
        self.signal.notify_one();
    }

    /// `job`'s place in its queue's dispatch order changed (its priority was raised): claims
    /// here and on other replicas must look there. Wakes no waiter.
    pub fn moved(&self, job: &crate::job::Job) {
        if job.state == crate::job::JobState::Available {
            self.announce(&job.queue, 0, FloorKey::of(job).unwrap_or(FloorKey::START));
        }
    }

    /// Sends the coalesced notifications until `shutdown` (then once more for what is left).
    pub async fn run(self, pool: PgPool, shutdown: CancellationToken) {
        let mut peers = PeerCheck::default();
        loop {
            let stopping = tokio::select! {
                () = shutdown.cancelled() => true,
                () = self.signal.notified() => false,
            };
            let sender = &*self.notifier.instance;
            let payloads: Vec<String> = self
                .pending
                .lock()
                .expect("announcer lock")
                .drain()
                .map(|(queue, from)| {
                    if from == FloorKey::START {
                        format!("{queue} {sender}")
                    } else {
                        format!("{queue} {sender} {}", from.to_wire())
                    }
                })
                .collect();
            if !payloads.is_empty()
                && peers.any(&pool, &self.notifier).await
                && let Err(e) = store::notify_available(&pool, &payloads).await
            {
                tracing::debug!(error = %e, queues = payloads.len(), "cannot notify other replicas");
            }
            if stopping {
                return;
            }
        }
    }
}

/// How long the answer to "does another replica listen?" is trusted.
pub const PEER_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The announcer's cached knowledge of other listening replicas.
#[derive(Debug, Default)]
struct PeerCheck {
    checked: Option<(Instant, bool)>,
}

impl PeerCheck {
    /// Whether another replica may be listening. Unknown (this process is not listening, or
    /// the check fails) counts as yes: a needless NOTIFY costs little, a missing one a poll.
    async fn any(&mut self, pool: &PgPool, notifier: &Notifier) -> bool {
        if let Some((at, answer)) = self.checked
            && at.elapsed() < PEER_CHECK_INTERVAL
        {
            return answer;
        }
        let own = notifier.listener_pid.load(Ordering::Relaxed);
        if own == 0 {
            return true;
        }
        let answer = store::other_listeners(pool, own).await.unwrap_or(true);
        self.checked = Some((Instant::now(), answer));
        answer
    }
}
