//! Wakes long-polling fetchers when jobs become available, and followers when a leader resigns.
//!
//! One connection per process LISTENs on [`store::JOB_AVAILABLE_CHANNEL`] and
//! [`store::leader::RESIGNED_CHANNEL`]; each notification is fanned out in memory to every
//! waiter. When the listening connection drops, notifications sent meanwhile are lost, so every
//! waiter is woken to poll once, and waiters also poll on a timer as a safety net. A lost
//! connection is also reported to [`DbHealth`]: it is usually the first sign of an outage.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::db::DbHealth;
use crate::store;

/// What a waiter is woken for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// This queue has new available jobs.
    Queue(Arc<str>),
    /// The maintenance leader resigned: followers should try to take over now.
    LeaderResigned,
    /// Anything may have changed (the listener reconnected): poll.
    All,
}

impl Wakeup {
    /// Whether a waiter on `queues` should poll.
    pub fn concerns(&self, queues: &[String]) -> bool {
        match self {
            Wakeup::All => true,
            Wakeup::Queue(q) => queues.iter().any(|name| name.as_str() == &**q),
            Wakeup::LeaderResigned => false,
        }
    }
}

/// The in-process fan-out of availability notifications.
#[derive(Debug, Clone)]
pub struct Notifier {
    tx: broadcast::Sender<Wakeup>,
}

impl Default for Notifier {
    fn default() -> Self {
        // Capacity only bounds how far a slow waiter can lag; a lagging waiter simply polls.
        let (tx, _) = broadcast::channel(1024);
        Notifier { tx }
    }
}

impl Notifier {
    /// A receiver of every wakeup from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Wakeup> {
        self.tx.subscribe()
    }

    /// Delivers a wakeup to current waiters (none waiting is fine).
    pub fn wake(&self, wakeup: Wakeup) {
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
                Some(n) => self.wake(Wakeup::Queue(n.payload().into())),
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
