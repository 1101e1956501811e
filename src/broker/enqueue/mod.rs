//! PUSH: the queue configuration applied to validated jobs, the write (grouped with concurrent
//! single-job PUSHes, or alone, or under unique-key locks), what a full queue does by its
//! overflow policy, and what a PUSH tells afterwards (wakeups, metrics, back-pressure).
//!
//! | file | what |
//! |---|---|
//! | `enqueuer.rs` | the [`Enqueuer`]: the write, grouped or alone, and the overflow policies |
//! | `prepare.rs` | configuration, schemas and tenants applied before the write |
//! | `writer.rs` | the grouped write and its hand-off to parked FETCHes |
//! | `tell.rs` | what a PUSH tells after its commit |
//! | `outcome.rs` | what a PUSH is given and answers |

mod enqueuer;
mod outcome;
mod prepare;
mod tell;
mod writer;

pub(super) use enqueuer::Enqueuer;
pub use outcome::{Pressure, PushContext, PushOutcome, PushResult, Pushed};
pub(super) use prepare::admit_tenants;
pub(super) use writer::insert_jobs;
