//! How values are spelled in client JSON, with no knowledge of jobs: verbatim JSON text
//! ([`json`]), OJS durations ([`duration`]) and timestamps ([`timestamp`]), the names of
//! enum values (`names!`), the [`Violation`] every validator reports a bad field with, and the
//! [`Reader`] that reads fields and collects them.
//!
//! The bottom layer: it imports nothing else of the crate.

pub mod duration;
pub mod json;
mod names;
pub mod reader;
pub mod timestamp;
pub mod violation;

pub(crate) use names::names;
pub use reader::Reader;
pub use violation::Violation;
