//! The system hold: maintenance mode, as this replica knows it.
//!
//! While the hold is in force no replica hands out work — FETCH answers empty and a long poll
//! waits for the end (or its own), enqueues hand nothing to parked FETCHes — and the promoter
//! and the cron firer pause; enqueues, heartbeats, ACKs and NACKs go on. The row
//! (`ojs_system_hold`, migration V22) is read every [`RELOAD_INTERVAL`], so a change made
//! through any replica is in force on every other within that; a hold with an end lifts at its
//! end on every replica without waiting for a read (each counts down the time the database said
//! was left), and the first replica to find it past its end clears the row and writes
//! `server.maintenance_ended`. Named apart from [`crate::maintenance`], the leader's services.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store;
use crate::store::hold::HoldRow;
use crate::wakeup::waiters::Waiters;

/// How often every replica reads the hold.
pub const RELOAD_INTERVAL: Duration = Duration::from_millis(500);

/// The hold as last read, with the instant it lifts by this process's clock.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub row: HoldRow,
    lifts_at: Option<Instant>,
}

impl Held {
    fn of(row: HoldRow) -> Held {
        let lifts_at = row.lifts_in_ms.map(|ms| {
            let now = Instant::now();
            match u64::try_from(ms) {
                Ok(ms) => now + Duration::from_millis(ms),
                Err(_) => now,
            }
        });
        Held { row, lifts_at }
    }

    /// Whether the hold is in force now.
    pub fn in_force(&self) -> bool {
        self.row.enabled && self.lifts_at.is_none_or(|at| Instant::now() < at)
    }
}

/// This replica's view of the hold. Cheap to clone.
#[derive(Clone)]
pub struct SystemHold {
    tx: Arc<watch::Sender<Held>>,
    /// Parked FETCHes, woken when the hold comes into force so they stop waiting for jobs.
    waiters: Option<Arc<Waiters>>,
}

impl Default for SystemHold {
    fn default() -> SystemHold {
        SystemHold {
            tx: Arc::new(watch::Sender::new(Held::default())),
            waiters: None,
        }
    }
}

impl std::fmt::Debug for SystemHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemHold")
            .field("held", &*self.tx.borrow())
            .finish()
    }
}

impl SystemHold {
    /// A hold that wakes `waiters` when it comes into force.
    pub fn new(waiters: Arc<Waiters>) -> SystemHold {
        SystemHold {
            waiters: Some(waiters),
            ..SystemHold::default()
        }
    }

    /// Whether the hold is in force now.
    pub fn is_on(&self) -> bool {
        self.tx.borrow().in_force()
    }

    /// The hold as last read.
    pub fn current(&self) -> Held {
        self.tx.borrow().clone()
    }

    /// Takes `row` (just read or written) as the hold.
    pub fn learned(&self, row: HoldRow) {
        let was_on = self.is_on();
        let held = Held::of(row);
        let on = held.in_force();
        self.tx.send_if_modified(|current| {
            let changed = current.row != held.row;
            *current = held;
            changed
        });
        crate::telemetry::maintenance_mode(on);
        if on && !was_on {
            tracing::warn!("maintenance mode is on: no work is handed out until it ends");
            if let Some(waiters) = &self.waiters {
                waiters.wake_all();
            }
        } else if was_on && !on {
            tracing::warn!("maintenance mode is over");
        }
    }

    /// Resolves once the hold is not in force (at once when it is not).
    pub async fn lifted(&self) {
        let mut rx = self.tx.subscribe();
        loop {
            let (on, lifts_at) = {
                let held = rx.borrow_and_update();
                (held.in_force(), held.lifts_at)
            };
            if !on {
                return;
            }
            let changed = async {
                if rx.changed().await.is_err() {
                    // No sender any more: nothing will lift it.
                    std::future::pending::<()>().await;
                }
            };
            match lifts_at {
                Some(at) => tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(at) => {}
                },
                None => changed.await,
            }
        }
    }

    /// Reads the hold every [`RELOAD_INTERVAL`] until `shutdown`, and clears it once past its
    /// end (writing its event; of several replicas at once, one does).
    pub async fn run(self, db: Db, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(RELOAD_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let held = self.current();
            if held.row.enabled
                && !held.in_force()
                && let Err(e) = store::hold::end_expired(&db).await
            {
                tracing::debug!(error = %e, "ending maintenance mode failed; retrying");
            }
            match store::hold::read(&db).await {
                Ok(row) => self.learned(row),
                Err(e) => {
                    tracing::debug!(error = %e, "reading maintenance mode failed; keeping the last state")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(enabled: bool, lifts_in_ms: Option<i64>) -> HoldRow {
        HoldRow {
            enabled,
            lifts_in_ms,
            ..HoldRow::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_with_an_end_lifts_at_its_end_without_a_read() {
        let hold = SystemHold::default();
        assert!(!hold.is_on());
        hold.learned(row(true, Some(1_000)));
        assert!(hold.is_on());
        let waited = Instant::now();
        hold.lifted().await;
        assert_eq!(waited.elapsed(), Duration::from_millis(1_000));
        assert!(!hold.is_on());
        // Past its end already when read: not in force.
        hold.learned(row(true, Some(-5)));
        assert!(!hold.is_on());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_without_an_end_lasts_until_turned_off() {
        let hold = SystemHold::default();
        hold.learned(row(true, None));
        let lifted = tokio::spawn({
            let hold = hold.clone();
            async move { hold.lifted().await }
        });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(hold.is_on() && !lifted.is_finished());
        hold.learned(row(false, None));
        lifted.await.expect("lifted");
    }
}
