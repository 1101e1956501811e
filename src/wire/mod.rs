//! How values are spelled in client JSON, with no knowledge of jobs: verbatim JSON text
//! ([`json`]), OJS durations ([`duration`]) and timestamps ([`timestamp`]), and the
//! [`Violation`] every validator reports a bad field with.
//!
//! The bottom layer: it imports nothing else of the crate.

pub mod duration;
pub mod json;
pub mod timestamp;
pub mod violation;

pub use violation::Violation;
