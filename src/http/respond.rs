//! The JSON response every handler answers with: [`Ojs`] labels it with the OJS media type.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::error::ApiError;

/// Media type of every JSON response.
pub const OJS_JSON: &str = "application/openjobspec+json";
/// The `OJS-Version` the server speaks.
pub const OJS_VERSION: &str = "1.0";

/// A JSON response with the OJS media type.
pub struct Ojs<T>(pub StatusCode, pub T);

impl<T: Serialize> IntoResponse for Ojs<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.1) {
            Ok(body) => (
                self.0,
                [(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON))],
                body,
            )
                .into_response(),
            Err(e) => {
                ApiError::internal(format!("response serialization failed: {e}")).into_response()
            }
        }
    }
}

/// A 200 JSON response.
pub fn ok<T: Serialize>(body: T) -> Ojs<T> {
    Ojs(StatusCode::OK, body)
}
