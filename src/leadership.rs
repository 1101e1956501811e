//! Leader election: which replica runs the maintenance services.
//!
//! # Design
//!
//! Leadership is a lease: one row in `ojs_leader` (`leader_id`, `term`, `expires_at`) that
//! operators can `SELECT` (or read through the `ojs_leadership` view). No advisory locks: they
//! are invisible, tie leadership to one session, and break behind connection poolers. The three
//! operations are single statements in `store::leader`, each scoped to the caller's term:
//!
//! * **elect** takes the lease for a new term if nobody holds it (no row, or `expires_at` has
//!   passed, or its holder resigned);
//! * **re-elect** extends the caller's lease, only if it still holds that term and the lease has
//!   not run out;
//! * **resign** ends the caller's lease now and notifies the other replicas, which try to take
//!   over at once instead of waiting for the lease to run out.
//!
//! # States
//!
//! ```text
//!          elect ok                       re-elect fails with "not yours" / trust window over
//! Follower ─────────▶ Leader(term) ─────────────────────────────────────────────▶ Follower
//!    ▲  │ lease held: sleep until it runs out        │ shutdown: resign, exit
//!    │  │ (at most the elect interval), or until     ▼
//!    └──┘ its holder resigns                      stopped
//! ```
//!
//! # Trust window
//!
//! The database clock decides when a lease runs out; replicas never compare their own clocks.
//! A leader measures with its monotonic clock from the moment it *sent* the statement that
//! (re)acquired the lease: the database stamped `expires_at = now() + lease` after that moment,
//! so the lease lasts at least `lease` from it. The leader trusts its leadership only for
//! `lease − margin` from then ([`LeaderConfig::trust`]), renewing every `renew_interval` (at
//! most a third of the lease, so two renewals can fail before trust runs out). A renewal that
//! hangs is abandoned when the trust window closes.
//!
//! # Failures
//!
//! * Leader crashes (SIGKILL, host loss): its lease runs out; followers, which slept until the
//!   lease's end, elect within the lease plus one elect attempt.
//! * Leader loses the database: renewals fail; it steps down when its trust window closes,
//!   before the lease ends, so two replicas never both believe they lead (barring a clock that
//!   runs more than `margin` slow over one lease).
//! * Graceful shutdown: the leader resigns; a follower takes over within moments.
//!
//! Maintenance does not depend on a single leader for correctness: every maintenance statement
//! is a conditional state transition on rows it locked with `SKIP LOCKED`, so even overlapping
//! leaders could only duplicate effort, never a transition. Leadership keeps the work in one
//! place; it does not guard invariants.

use std::time::Duration;

use crate::db::Db;
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::db::DbHealth;
use crate::store;
use crate::store::leader::Election;
use crate::wakeup::{Notifier, Wakeup};

/// Lease timing.
#[derive(Debug, Clone, Copy)]
pub struct LeaderConfig {
    /// How long a lease lasts after each (re-)election.
    pub lease: Duration,
    /// How often the leader renews.
    pub renew_interval: Duration,
    /// How often a follower tries to take over while the lease is held.
    pub elect_interval: Duration,
}

impl LeaderConfig {
    /// How long the leader trusts a lease after sending the statement that obtained it.
    pub fn trust(&self) -> Duration {
        let margin = (self.lease / 5).max(Duration::from_millis(100));
        self.lease.saturating_sub(margin)
    }
}

/// This replica's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Follower,
    Leader { term: i64 },
}

impl Role {
    pub fn is_leader(self) -> bool {
        matches!(self, Role::Leader { .. })
    }
}

/// Runs the election for one replica.
pub struct Elector {
    db: Db,
    instance_id: String,
    config: LeaderConfig,
    notifier: Notifier,
    health: DbHealth,
    role: watch::Sender<Role>,
}

/// `d` scaled by a random factor in [0.9, 1.1], so replicas do not act in lockstep.
pub fn jittered(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.9..1.1))
}

impl Elector {
    pub fn new(
        db: Db,
        instance_id: String,
        config: LeaderConfig,
        notifier: Notifier,
        health: DbHealth,
    ) -> Elector {
        Elector {
            db,
            instance_id,
            config,
            notifier,
            health,
            role: watch::Sender::new(Role::Follower),
        }
    }

    /// Follows this replica's role.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// Campaigns, leads and renews until `shutdown`; a leader resigns on the way out.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut wakeups = self.notifier.subscribe();
        loop {
            let Some((term, sent)) = self.follow(&shutdown, &mut wakeups).await else {
                return;
            };
            tracing::info!(term, instance_id = %self.instance_id, "elected maintenance leader");
            crate::telemetry::leader_changed(true);
            self.notifier.set_leading(true);
            self.role.send_replace(Role::Leader { term });
            let resign = self.lead(term, sent, &shutdown).await;
            self.role.send_replace(Role::Follower);
            self.notifier.set_leading(false);
            crate::telemetry::leader_changed(false);
            if resign {
                self.resign(term).await;
                return;
            }
        }
    }

    /// Tries to take the lease until it succeeds (returns the term and when the winning
    /// statement was sent) or `shutdown` (returns `None`).
    async fn follow(
        &self,
        shutdown: &CancellationToken,
        wakeups: &mut tokio::sync::broadcast::Receiver<Wakeup>,
    ) -> Option<(i64, Instant)> {
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            let sent = Instant::now();
            let attempt = store::leader::elect(&self.db, &self.instance_id, self.config.lease);
            let wait = match tokio::time::timeout(self.config.lease, attempt).await {
                Ok(Ok(Election::Elected { term })) => return Some((term, sent)),
                // Wake just after the lease runs out, unless that is later than the interval.
                Ok(Ok(Election::Held { remaining, .. })) => self
                    .config
                    .elect_interval
                    .min(remaining + Duration::from_millis(20)),
                Ok(Err(e)) => {
                    self.health.report(&e);
                    tracing::warn!(error = %e, "leader election failed; retrying");
                    self.config.elect_interval
                }
                Err(_) => {
                    tracing::warn!("leader election timed out; retrying");
                    self.config.elect_interval
                }
            };
            let deadline = Instant::now() + jittered(wait);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return None,
                    () = tokio::time::sleep_until(deadline) => break,
                    wakeup = wakeups.recv() => match wakeup {
                        Ok(Wakeup::LeaderResigned) => break,
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            tokio::time::sleep_until(deadline).await;
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Renews the lease of `term` until it is lost (returns `false`) or `shutdown` (returns
    /// `true`: the caller resigns).
    async fn lead(&self, term: i64, acquired: Instant, shutdown: &CancellationToken) -> bool {
        let mut trusted_until = acquired + self.config.trust();
        let mut next_renewal = acquired + self.config.renew_interval;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return true,
                () = tokio::time::sleep_until(next_renewal.min(trusted_until)) => {}
            }
            let sent = Instant::now();
            if sent >= trusted_until {
                tracing::warn!(
                    term,
                    "could not renew the leader lease in time; stepping down"
                );
                return false;
            }
            let renewal =
                store::leader::reelect(&self.db, &self.instance_id, term, self.config.lease);
            match tokio::time::timeout(trusted_until - sent, renewal).await {
                Ok(Ok(true)) => {
                    trusted_until = sent + self.config.trust();
                    next_renewal = sent + self.config.renew_interval;
                }
                Ok(Ok(false)) => {
                    tracing::warn!(term, "the leader lease was lost; stepping down");
                    return false;
                }
                Ok(Err(e)) => {
                    self.health.report(&e);
                    tracing::warn!(term, error = %e, "renewing the leader lease failed; retrying");
                    next_renewal = Instant::now() + self.config.renew_interval / 4;
                }
                Err(_) => {
                    tracing::warn!(term, "renewing the leader lease timed out; stepping down");
                    return false;
                }
            }
        }
    }

    async fn resign(&self, term: i64) {
        let resignation = store::leader::resign(&self.db, &self.instance_id, term);
        match tokio::time::timeout(Duration::from_secs(2), resignation).await {
            Ok(Ok(true)) => tracing::info!(term, "resigned maintenance leadership"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(term, error = %e, "resigning failed; the lease will run out")
            }
            Err(_) => tracing::warn!(term, "resigning timed out; the lease will run out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_ends_before_the_lease() {
        let config = LeaderConfig {
            lease: Duration::from_secs(10),
            renew_interval: Duration::from_secs(3),
            elect_interval: Duration::from_secs(2),
        };
        assert_eq!(config.trust(), Duration::from_secs(8));
        let short = LeaderConfig {
            lease: Duration::from_millis(300),
            ..config
        };
        assert_eq!(short.trust(), Duration::from_millis(200));
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..1000 {
            let d = jittered(Duration::from_millis(1000));
            assert!((900..=1100).contains(&d.as_millis()), "{d:?}");
        }
    }
}
