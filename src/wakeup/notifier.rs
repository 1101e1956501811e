//! Wakes long-polling fetchers when jobs become available, and followers when a leader resigns.
//!
//! One connection per process LISTENs on every channel ojsd uses:
//! [`store::JOB_AVAILABLE_CHANNEL`], [`store::leader::RESIGNED_CHANNEL`],
//! [`store::SQL_ENQUEUED_CHANNEL`], [`store::RATE_KEY_CHANNEL`], [`store::TENANT_CHANNEL`] and
//! [`store::result::JOB_ENDED_CHANNEL`] (an awaited job ended: its result waiters,
//! [`super::results`], are woken).
//! A queue's notification wakes as many of the long polls parked on it ([`super::waiters`]) as
//! it has new jobs, or all of them when it does not say; a resignation is broadcast to the
//! followers, and a key or tenant that may have room to the rate-limit releaser. When the listening connection drops,
//! notifications sent meanwhile are lost, so every waiter is woken to poll once, and waiters
//! also poll on a timer as a safety net. The connection is pinged every
//! [`LISTENER_PING_INTERVAL`]: one whose server froze or vanished without a reset (sqlx sets no
//! TCP keepalive) is taken for lost after [`LISTENER_PING_TIMEOUT`]. A lost
//! connection is also reported to [`DbHealth`]: it is usually the first sign of an outage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::db::{Db, DbHealth};
use crate::job::dispatch::DispatchPlace;
use crate::store;
use crate::wakeup::ClaimFloors;
use crate::wakeup::results::ResultWaits;
use crate::wakeup::waiters::Waiters;

/// What a waiter is woken for.
#[derive(Debug, Clone)]
pub enum Wakeup {
    /// This queue has new available jobs.
    Queue(Arc<QueueWakeup>),
    /// The maintenance leader resigned: followers should try to take over now.
    LeaderResigned,
    /// Anything may have changed (the listener reconnected): poll.
    All,
    /// A rate-limit key may have room: its held jobs can be released.
    RateKey(Arc<str>),
    /// A tenant with a concurrency limit may have room: its held jobs can be released.
    Tenant(Arc<str>),
}

/// New available jobs in a queue.
#[derive(Debug)]
pub struct QueueWakeup {
    queue: Arc<str>,
    /// How many (`usize::MAX`: unknown): at most this many parked FETCHes are woken.
    jobs: usize,
    /// No new job is before this place in the queue's dispatch order.
    from: DispatchPlace,
}

impl Wakeup {
    /// `jobs` new jobs in `queue` (`usize::MAX`: an unknown number), anywhere in its dispatch
    /// order.
    pub fn queue(queue: &str, jobs: usize) -> Wakeup {
        Wakeup::queue_from(queue, jobs, DispatchPlace::START)
    }

    /// [`Wakeup::queue`] for jobs at or after `from` in dispatch order.
    pub fn queue_from(queue: &str, jobs: usize, from: DispatchPlace) -> Wakeup {
        Wakeup::Queue(Arc::new(QueueWakeup {
            queue: queue.into(),
            jobs,
            from,
        }))
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
    /// The long polls parked on their queues, which queue wakeups wake.
    waiters: Arc<Waiters>,
    /// The clients waiting for a job's result, which `ojs_job_ended` wakes.
    results: Arc<ResultWaits>,
    /// Whether this replica leads maintenance (set by its elector): the leader alone counts
    /// the jobs enqueued from SQL.
    leads: Arc<AtomicBool>,
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
            waiters: Arc::default(),
            results: Arc::default(),
            leads: Arc::default(),
        }
    }

    /// Told by this replica's elector whether it leads.
    pub fn set_leading(&self, leads: bool) {
        self.leads.store(leads, Ordering::Relaxed);
    }

    /// Where this process's claims start (see [`crate::wakeup::floors`]).
    pub fn floors(&self) -> &Arc<ClaimFloors> {
        &self.floors
    }

    /// The long polls parked on their queues.
    pub fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// The clients waiting for a job's result.
    pub fn results(&self) -> &Arc<ResultWaits> {
        &self.results
    }

    /// A receiver of the leader's resignations, of the keys and tenants that may have room,
    /// and of [`Wakeup::All`], from now on (queue wakeups go to the parked long polls only).
    pub fn subscribe(&self) -> broadcast::Receiver<Wakeup> {
        self.tx.subscribe()
    }

    /// Delivers a wakeup: a queue's wakes as many of its parked long polls as it has new jobs,
    /// after lowering the claim floors to them.
    pub fn wake(&self, wakeup: Wakeup) {
        match &wakeup {
            Wakeup::Queue(w) => {
                self.floors.lower(&w.queue, w.from);
                self.waiters.wake(&w.queue, w.jobs);
                return;
            }
            Wakeup::All => {
                self.floors.reset_all();
                self.waiters.wake_all();
                self.results.wake_all();
            }
            Wakeup::LeaderResigned | Wakeup::RateKey(_) | Wakeup::Tenant(_) => {}
        }
        let _ = self.tx.send(wakeup);
    }

    /// Without a listener (behind a transaction-mode pooler with no session of its own): every
    /// `interval` until `shutdown`, wakes everything a notification would have woken — long
    /// polls, result waits, the releaser's sweep — as after a lost notification.
    pub async fn poll(self, interval: Duration, shutdown: CancellationToken) {
        tracing::info!(
            interval_ms = interval.as_millis() as u64,
            "no notification listener (a transaction-mode pooler and no OJS_LISTEN_DATABASE_URL): polling"
        );
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => self.wake(Wakeup::All),
            }
        }
    }

    /// Listens for notifications until `shutdown`, reconnecting with backoff on failure.
    pub async fn listen(self, db: PgPool, health: DbHealth, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let result = tokio::select! {
                () = shutdown.cancelled() => break,
                r = self.listen_once(&db, &health, &shutdown) => r,
            };
            // A listener that was up starts its retries from the shortest wait again.
            if self.listener_pid.swap(0, Ordering::Relaxed) != 0 {
                backoff = Duration::from_millis(100);
            }
            match result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "notification listener failed; retrying");
                    health.report(&e);
                    self.wake(Wakeup::All);
                    // During an outage, the prober finding the database (perhaps on another
                    // host, after a failover) ends the wait at once.
                    let down = health.is_down();
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(backoff) => {}
                        () = health.came_back(), if down => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        // Other replicas stop notifying this one now rather than once its registration is 10 s
        // old. (The pool closes only after the background tasks end.)
        self.listener_pid.store(0, Ordering::Relaxed);
        if !health.is_down() {
            let _ = tokio::time::timeout(
                LISTENER_PING_TIMEOUT,
                store::stopped_listening(&db, &self.instance),
            )
            .await;
        }
    }

    /// Registers (or renews) this replica's listener in `ojs_listener`. Only a failure of the
    /// connection is an error: the listener goes on without a registration that the database
    /// refused (other replicas then do not notify this one, whose waiters poll), and a
    /// notifier without an instance id (in tests) does not register.
    async fn register(
        &self,
        listener: &mut PgListener,
        pid: i32,
        prune: bool,
    ) -> Result<(), sqlx::Error> {
        if self.instance.is_empty() {
            return sqlx::query("select 1").execute(listener).await.map(|_| ());
        }
        match store::listening(listener, &self.instance, pid, prune).await {
            Err(e) if !crate::db::is_connection_error(&e) => {
                tracing::warn!(error = %e, "cannot register the notification listener");
                Ok(())
            }
            other => other,
        }
    }

    async fn listen_once(
        &self,
        db: &PgPool,
        health: &DbHealth,
        shutdown: &CancellationToken,
    ) -> Result<(), sqlx::Error> {
        let mut listener = PgListener::connect_with(db).await?;
        // Named, for operators looking at pg_stat_activity.
        let pid: i32 = sqlx::query_scalar(
            "select pg_backend_pid() from set_config('application_name', $1, false)",
        )
        .bind(store::LISTENER_APPLICATION_NAME)
        .fetch_one(&mut listener)
        .await?;
        listener
            .listen_all([
                store::JOB_AVAILABLE_CHANNEL,
                store::leader::RESIGNED_CHANNEL,
                store::SQL_ENQUEUED_CHANNEL,
                store::RATE_KEY_CHANNEL,
                store::TENANT_CHANNEL,
                store::result::JOB_ENDED_CHANNEL,
            ])
            .await?;
        // Registered once listening, so that announcers of other replicas start notifying it.
        self.register(&mut listener, pid, true).await?;
        self.listener_pid.store(pid, Ordering::Relaxed);
        tracing::debug!("listening for notifications");
        // Anything enqueued while we were not listening would otherwise wait for a poll.
        self.wake(Wakeup::All);
        let mut ping = tokio::time::interval(LISTENER_PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                _ = ping.tick() => {
                    // An idle connection to a server that froze never errors (its kernel
                    // answers keepalives), nor, for tens of seconds, one to a server that
                    // vanished without a reset: ask it something. The ping renews this
                    // replica's registration as a listener.
                    let answered = tokio::time::timeout(
                        LISTENER_PING_TIMEOUT,
                        self.register(&mut listener, pid, false),
                    )
                    .await;
                    match answered {
                        Ok(Ok(_)) => continue,
                        Ok(Err(e)) => return Err(e),
                        Err(_) => {
                            tracing::warn!(
                                "the notification connection did not answer within {} ms; reconnecting",
                                LISTENER_PING_TIMEOUT.as_millis()
                            );
                            // Before the connection is dropped: the pool then closes it rather
                            // than testing it (which would wait on the silent server). Every
                            // statement waiting on that server fails now.
                            health.report_unresponsive();
                            return Err(sqlx::Error::Io(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                "the notification connection did not answer a ping",
                            )));
                        }
                    }
                }
                n = listener.try_recv() => n?,
            };
            match next {
                Some(n) if n.channel() == store::leader::RESIGNED_CHANNEL => {
                    self.wake(Wakeup::LeaderResigned);
                }
                Some(n) if n.channel() == store::SQL_ENQUEUED_CHANNEL => {
                    self.sql_enqueued(n.payload());
                }
                Some(n) if n.channel() == store::RATE_KEY_CHANNEL => {
                    self.wake(Wakeup::RateKey(n.payload().into()));
                }
                Some(n) if n.channel() == store::TENANT_CHANNEL => {
                    self.wake(Wakeup::Tenant(n.payload().into()));
                }
                Some(n) if n.channel() == store::result::JOB_ENDED_CHANNEL => {
                    if let Ok(id) = n.payload().parse() {
                        self.results.ended(id);
                    }
                }
                Some(n) => match parse_available(n.payload()) {
                    Available {
                        sender: Some(sender),
                        ..
                    } if sender == &*self.instance => {}
                    Available {
                        queue, from, jobs, ..
                    } => self.wake(Wakeup::queue_from(queue, jobs, from)),
                },
                // The connection was lost. sqlx's listener would reconnect by itself on the
                // next call, but without the session's name (which other replicas look for)
                // and without the pid bookkeeping: listen again from the start instead.
                None => {
                    health.report_lost();
                    return Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "the notification connection was lost",
                    )));
                }
            }
        }
    }
}

impl Notifier {
    /// Jobs enqueued from SQL committed (`queue type jobs scheduled`): counted in the metrics
    /// (by the leader only, so that replicas do not each count them), and when some are
    /// scheduled, the next due time is asked again. Their available jobs have their own
    /// notification.
    fn sql_enqueued(&self, payload: &str) {
        let mut fields = payload.split(' ');
        let (Some(queue), Some(job_type), Some(jobs), scheduled) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return;
        };
        if scheduled.and_then(|n| n.parse::<u64>().ok()).unwrap_or(1) > 0 {
            self.waiters.forget_next_due();
        }
        if let (Ok(jobs), true) = (jobs.parse::<u64>(), self.leads.load(Ordering::Relaxed)) {
            crate::telemetry::jobs_enqueued_by_sql(queue, job_type, jobs);
        }
    }
}

/// How often the listening connection is asked `select 1`, and how long it may take to answer
/// before it is taken for lost (the database marked down, the listener reconnected).
pub const LISTENER_PING_INTERVAL: Duration = Duration::from_secs(2);
pub const LISTENER_PING_TIMEOUT: Duration = Duration::from_secs(3);

/// A notification of available jobs, read.
#[derive(Debug, PartialEq)]
struct Available<'a> {
    queue: &'a str,
    sender: Option<&'a str>,
    from: DispatchPlace,
    /// `usize::MAX` when the notification does not say.
    jobs: usize,
}

/// Reads a notification of available jobs: `queue` (from a statement that does not count),
/// `queue - - - jobs` (from one that does), `queue sender` (from an older announcer), or
/// `queue sender priority time_ms jobs` from an announcer, with `-` for a place in dispatch
/// order it does not know.
fn parse_available(payload: &str) -> Available<'_> {
    let mut fields = payload.split(' ');
    let queue = fields.next().unwrap_or_default();
    let sender = fields.next().filter(|s| *s != "-");
    let from = match (fields.next(), fields.next()) {
        (Some(priority), Some(time_ms)) => {
            DispatchPlace::from_wire(priority, time_ms).unwrap_or(DispatchPlace::START)
        }
        _ => DispatchPlace::START,
    };
    let jobs = fields
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    Available {
        queue,
        sender,
        from,
        jobs,
    }
}

/// Queues to notify: the earliest place of their new jobs in dispatch order, and how many.
type Pending = HashMap<Arc<str>, (DispatchPlace, usize)>;

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
/// other replica listens on the database: each replica registers its listening connection in
/// `ojs_listener` ([`store::listening`], renewed by every ping; not `pg_stat_activity`, which a
/// connection pooler or a managed Postgres may hide), and the announcer looks for another one
/// there at most every [`PEER_CHECK_INTERVAL`]. A replica that starts listening is therefore
/// told about new jobs within that interval (its waiters poll meanwhile).
#[derive(Debug, Clone, Default)]
pub struct Announcer {
    notifier: Notifier,
    /// Queues to notify, with the earliest place of their new jobs and how many there are.
    pending: Arc<Mutex<Pending>>,
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
    /// order (`DispatchPlace::START` when unknown).
    pub fn announce(&self, queue: &str, jobs: usize, from: DispatchPlace) {
        self.notifier.wake(Wakeup::queue_from(queue, jobs, from));
        self.pending
            .lock()
            .expect("announcer lock")
            .entry(queue.into())
            .and_modify(|(earliest, n)| {
                *earliest = (*earliest).min(from);
                *n = n.saturating_add(jobs);
            })
            .or_insert((from, jobs));
        self.signal.notify_one();
    }

    /// `job`'s place in its queue's dispatch order changed (its priority was raised): claims
    /// here and on other replicas must look there. Wakes no waiter.
    pub fn moved(&self, job: &crate::job::Job) {
        if job.state == crate::job::JobState::Available {
            self.announce(
                &job.queue,
                0,
                DispatchPlace::of(job).unwrap_or(DispatchPlace::START),
            );
        }
    }

    /// Sends the coalesced notifications until `shutdown` (then once more for what is left).
    pub async fn run(self, db: Db, shutdown: CancellationToken) {
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
                .map(|(queue, (from, jobs))| {
                    let place = if from == DispatchPlace::START {
                        "- -".to_owned()
                    } else {
                        from.to_wire()
                    };
                    format!("{queue} {sender} {place} {jobs}")
                })
                .collect();
            if !payloads.is_empty()
                && peers.any(&db, &self.notifier).await
                && let Err(e) = store::notify_available(&db, &payloads).await
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
    async fn any(&mut self, db: &Db, notifier: &Notifier) -> bool {
        if let Some((at, answer)) = self.checked
            && at.elapsed() < PEER_CHECK_INTERVAL
        {
            return answer;
        }
        let own = notifier.listener_pid.load(Ordering::Relaxed);
        if own == 0 {
            return true;
        }
        let answer = store::other_listeners(db, &notifier.instance)
            .await
            .unwrap_or(true);
        self.checked = Some((Instant::now(), answer));
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_of_every_sender_are_read() {
        let read = |p| {
            let a = parse_available(p);
            (a.queue, a.sender, a.from == DispatchPlace::START, a.jobs)
        };
        assert_eq!(read("q"), ("q", None, true, usize::MAX));
        assert_eq!(read("q - - - 3"), ("q", None, true, 3));
        assert_eq!(read("q r1"), ("q", Some("r1"), true, usize::MAX));
        assert_eq!(read("q r1 - - 2"), ("q", Some("r1"), true, 2));
        assert_eq!(read("q r1 1 1700000000000 4"), ("q", Some("r1"), false, 4));
        assert_eq!(
            read("q r1 1 1700000000000"),
            ("q", Some("r1"), false, usize::MAX)
        );
    }
}
