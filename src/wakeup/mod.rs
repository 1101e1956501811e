//! How a long-polling FETCH is woken, and where its claim starts.
//!
//! A FETCH that finds nothing parks in [`Waiters`], in line behind the FETCHes of its queues
//! that were waiting before it. Three things end the wait:
//! - a commit that made jobs available: this process's enqueues tell the [`Announcer`], which
//!   wakes the local waiters at once and sends one `NOTIFY` per queue for the other replicas;
//!   the [`Notifier`] (the process's one `LISTEN` connection, for every channel ojsd uses:
//!   it also hands the rate-limit releaser the keys and tenants that may have room) wakes
//!   the waiters of those;
//! - an enqueue that hands its job straight to a parked FETCH ([`waiters::Taken`]);
//! - the FETCH's own timer, the safety net for anything missed.
//!
//! Every claim starts its walk of the queue's dispatch index at the queue's *floor*
//! ([`ClaimFloors`]): the place in dispatch order below which no claimable job is known to be,
//! which keeps claims fast while the MVCC horizon is pinned. Every wake-up that carries a
//! place lowers the floor to it; every other wake-up resets it.
//!
//! A client waiting for a job's result is woken the same way, by the job's id on
//! `ojs_job_ended` ([`results`]).
//!
//! What a notification's payload looks like is written in [`notifier`], next to the code that
//! parses it.

pub mod floors;
pub mod notifier;
pub mod results;
pub mod waiters;

pub use floors::ClaimFloors;
pub use notifier::{Announcer, LISTENER_PING_INTERVAL, LISTENER_PING_TIMEOUT, Notifier, Wakeup};
pub use waiters::Waiters;
