//! Steps and signals of a job (durable execution beyond the OJS extensions): their names, and a
//! recorded step as the broker hands it out.

use chrono::{DateTime, Utc};

use super::{JobId, RawJson};

pub use super::id_schema::DURABLE_NAME_MAX as MAX_NAME_CHARS;

/// Whether `name` can name a step or a signal: 1 to [`MAX_NAME_CHARS`] characters, no control
/// characters.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && !name.chars().any(char::is_control)
}

/// A recorded step: what it returned, and which attempt (and worker) recorded it.
#[derive(Debug, Clone)]
pub struct Step {
    pub job_id: JobId,
    pub name: String,
    /// What the step returned (`None`: null).
    pub result: Option<RawJson>,
    pub attempt: i32,
    pub worker_id: Option<String>,
    pub recorded_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_and_printable() {
        assert!(is_valid_name("charge-card"));
        assert!(is_valid_name("é/ü:1"));
        assert!(is_valid_name(&"x".repeat(MAX_NAME_CHARS)));
        assert!(!is_valid_name(&"x".repeat(MAX_NAME_CHARS + 1)));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a\nb"));
    }
}
