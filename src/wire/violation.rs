//! A problem with one field of a request, located by its JSON path (the field readers that
//! record them are in [`super::reader`]).
//!
//! Validation collects every [`Violation`] it finds, so a refusal names all of them at once;
//! the HTTP layer renders them as an `invalid_request` error with `details.validation_errors`.

/// One problem with a request field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON path of the offending field, e.g. `$.options.priority`.
    pub path: String,
    /// What is wrong, naming the field.
    pub message: String,
}

impl Violation {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Violation {
        Violation {
            path: path.into(),
            message: message.into(),
        }
    }
}
