//! Job-level rate limits by key (migration V20): a key's limits and use, and the releaser that
//! lets held jobs go when their key has room.
//!
//! The database decides what a key allows (`ojs_rate_release`, under the key's row lock);
//! this side only says when to ask: at once after an enqueue (see the enqueuer), when a
//! notification on `ojs_rate_key` (heard by the process's one listener,
//! [`crate::wakeup::Notifier`]) says a job of a key holding others back left flight, or a
//! keyed job became available again, when a key's `next_check_at` comes due (a window
//! sliding, a throttle interval, a block lapsing), and every few seconds for keys holding jobs
//! with no check to come (an enqueue whose process died before it released). Every replica
//! runs a releaser; they take turns on a key's row.
//!
//! Tenants with a concurrency limit hold their jobs the same way (migration V28): the releaser
//! also hears `ojs_tenant` and sweeps tenants holding jobs, and `ojs_tenant_release` lets
//! go what a tenant allows, under its row lock.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::db::Db;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio_util::sync::CancellationToken;

use super::Broker;
use crate::error::{Error, Result};
use crate::store;
use crate::store::rate_limit::{KeyUsage, Override as RateOverride};
use crate::telemetry;
use crate::wakeup::Wakeup;

/// Longest wait between two looks at the due keys (another replica may have set an earlier
/// check without a notification reaching this one).
const MAX_IDLE: Duration = Duration::from_secs(1);

/// Keys released per look at the due ones.
const DUE_BATCH: i64 = 500;

/// How often the releaser looks for keys holding jobs with no check to come.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

impl Broker {
    /// A key's limits and use (404 for a key nothing has named).
    pub async fn rate_key(&self, key: &str) -> Result<KeyUsage> {
        store::rate_limit::usage(&self.db, key)
            .await?
            .ok_or_else(|| Error::RateKeyNotFound(key.to_owned()))
    }

    /// Sets a key's temporary override (it applies besides the key's own limits, so the
    /// stricter wins, until `expires_at`) and answers the key as it stands.
    pub async fn override_rate_key(&self, key: &str, o: &RateOverride) -> Result<KeyUsage> {
        let mut tx = self.db.begin().await?;
        store::rate_limit::set_override(&mut tx, key, o).await?;
        tx.commit().await?;
        self.rate_key(key).await
    }

    /// Removes a key's override (404 for an unknown key).
    pub async fn clear_rate_override(&self, key: &str) -> Result<()> {
        let mut tx = self.db.begin().await?;
        let found = store::rate_limit::clear_override(&mut tx, key).await?;
        tx.commit().await?;
        if found {
            Ok(())
        } else {
            Err(Error::RateKeyNotFound(key.to_owned()))
        }
    }

    /// Rate-limit keys by key, a page at a time, with how many there are.
    pub async fn rate_keys(&self, limit: i64, offset: i64) -> Result<(Vec<KeyUsage>, i64)> {
        Ok(store::rate_limit::list(&self.db, limit, offset).await?)
    }
}

/// Releases held jobs of rate-limit keys and limited tenants until `shutdown`: when the
/// process's listener hears that a key or tenant may have room (`wakeups`, from
/// [`Notifier::subscribe`](crate::wakeup::Notifier::subscribe)), and when keys come due.
pub async fn run_releaser(
    db: Db,
    mut wakeups: broadcast::Receiver<Wakeup>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            r = release_loop(&db, &mut wakeups, &shutdown) => r,
        };
        match result {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "rate-limit releaser failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// What the releaser has heard and not yet acted on.
#[derive(Default)]
struct Heard {
    keys: BTreeSet<String>,
    tenants: BTreeSet<String>,
    /// Notifications may have been missed (the listener reconnected, or this receiver fell
    /// behind): look for everything holding jobs.
    sweep: bool,
}

impl Heard {
    /// Notes one wakeup; `false` when the notifier is gone.
    fn note(&mut self, wakeup: Result<Wakeup, RecvError>) -> bool {
        match wakeup {
            Ok(Wakeup::RateKey(key)) => {
                self.keys.insert(key.to_string());
            }
            Ok(Wakeup::Tenant(tenant)) => {
                self.tenants.insert(tenant.to_string());
            }
            Ok(Wakeup::All) | Err(RecvError::Lagged(_)) => self.sweep = true,
            Ok(Wakeup::Queue(_) | Wakeup::LeaderResigned) => {}
            Err(RecvError::Closed) => return false,
        }
        true
    }
}

async fn release_loop(
    db: &Db,
    wakeups: &mut broadcast::Receiver<Wakeup>,
    shutdown: &CancellationToken,
) -> Result<(), sqlx::Error> {
    // The first pass sweeps (what waited while no releaser ran).
    let mut heard = Heard {
        sweep: true,
        ..Heard::default()
    };
    let mut swept_at = std::time::Instant::now();
    loop {
        if heard.sweep || swept_at.elapsed() >= SWEEP_EVERY {
            heard
                .keys
                .extend(store::rate_limit::stranded(db, DUE_BATCH).await?);
            heard
                .tenants
                .extend(store::tenant::holding(db, DUE_BATCH).await?);
            heard.sweep = false;
            swept_at = std::time::Instant::now();
        }
        // Tenants first: a job a tenant releases may then wait for its key.
        for tenant in std::mem::take(&mut heard.tenants) {
            let released = store::tenant::release(db, &tenant, true).await?;
            telemetry::rate_released(released.iter().map(|(_, n)| n).sum());
        }
        // Due keys first (also those missed while not listening), then wait for the next one
        // to come due or for a notification.
        let (due, next_at) = store::rate_limit::due(db, DUE_BATCH).await?;
        let many = due.len() as i64 >= DUE_BATCH;
        heard.keys.extend(due);
        for key in std::mem::take(&mut heard.keys) {
            let released = store::rate_limit::release(db, &key, true).await?;
            telemetry::rate_released(released.iter().map(|(_, n)| n).sum());
        }
        if many {
            continue;
        }
        let wait = next_at
            .and_then(|at| (at - chrono::Utc::now()).to_std().ok())
            .unwrap_or(MAX_IDLE)
            .min(MAX_IDLE);
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
            wakeup = wakeups.recv() => {
                if !heard.note(wakeup) {
                    return Ok(());
                }
                // Whatever else is already here, in one pass.
                loop {
                    match wakeups.try_recv() {
                        Ok(wakeup) => {
                            heard.note(Ok(wakeup));
                        }
                        Err(TryRecvError::Lagged(n)) => {
                            heard.note(Err(RecvError::Lagged(n)));
                        }
                        Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                    }
                }
            }
        }
    }
}
