//! Serves a built OJS admin UI (`OJS_ADMIN_UI_DIR`) at `/ojs/admin/`, the base its router
//! expects, from the API's own origin, so it needs no CORS and no URL setting.
//!
//! The UI is a single-page application with relative asset paths: a path that names a file
//! of the build is that file; `…/assets/<file>` at any depth is the build's `assets/<file>`
//! (a page opened at a nested route asks there); any other path is `index.html`, whose
//! router shows the page.

use std::path::{Component, Path, PathBuf};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::AppState;
use super::error::ApiError;

/// Where the UI lives.
pub const BASE: &str = "/ojs/admin";

/// The UI's routes, when a build directory is configured. They serve files, not the API, so the
/// OpenAPI document leaves them out (its test exempts exactly [`BASE`]).
pub fn router(enabled: bool) -> Router<AppState> {
    if !enabled {
        return Router::new();
    }
    Router::new()
        .route(BASE, get(|| async { Redirect::permanent("/ojs/admin/") }))
        .route("/ojs/admin/", get(serve))
        .route("/ojs/admin/{*path}", get(serve))
}

/// Whether `path` is the UI's (answered without the database).
pub fn serves(path: &str) -> bool {
    path == BASE || path.starts_with("/ojs/admin/")
}

/// The file of the build a request path names: itself if it exists, an `assets/` file by its
/// name, else `index.html`. `None` for a path that tries to leave the directory.
fn resolve(dir: &Path, request_path: &str) -> Option<PathBuf> {
    let relative = request_path.strip_prefix("/ojs/admin/").unwrap_or_default();
    let relative = match relative.rfind("assets/") {
        Some(i) if i == 0 || relative[..i].ends_with('/') => &relative[i..],
        _ => relative,
    };
    let candidate = Path::new(relative);
    if candidate
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let file = dir.join(candidate);
    if !relative.is_empty() && file.is_file() {
        return Some(file);
    }
    if relative.starts_with("assets/") {
        // A missing asset is a 404, not the page.
        return Some(file);
    }
    Some(dir.join("index.html"))
}

/// The media type of a build file, by extension.
fn content_type(path: &Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
    {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "map" => "application/json",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

async fn serve(State(state): State<AppState>, request: Request) -> Response {
    let Some(dir) = state.settings().admin_ui_dir.as_deref() else {
        return ApiError::route_not_found(request.uri().path()).into_response();
    };
    let Some(file) = resolve(dir, request.uri().path()) else {
        return ApiError::route_not_found(request.uri().path()).into_response();
    };
    match tokio::fs::read(&file).await {
        Ok(bytes) => {
            // Hashed assets never change; the page must be re-read to find new ones.
            let cache = if file.parent().is_some_and(|p| p.ends_with("assets")) {
                "public, max-age=31536000, immutable"
            } else {
                "no-cache"
            };
            (
                StatusCode::OK,
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static(content_type(&file)),
                    ),
                    (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
                ],
                bytes,
            )
                .into_response()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            ApiError::route_not_found(request.uri().path()).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, file = %file.display(), "admin UI file unreadable");
            ApiError::internal(format!("admin UI file unreadable: {e}")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_inside_the_build() {
        let dir = std::env::temp_dir().join(format!("ojsd-ui-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("index.html"), "<html>").unwrap();
        std::fs::write(dir.join("favicon.svg"), "<svg/>").unwrap();
        std::fs::write(dir.join("assets/app.js"), "x").unwrap();
        let r = |p: &str| resolve(&dir, p).map(|f| f.strip_prefix(&dir).unwrap().to_owned());
        assert_eq!(r("/ojs/admin/"), Some("index.html".into()));
        assert_eq!(r("/ojs/admin/jobs"), Some("index.html".into()));
        assert_eq!(r("/ojs/admin/favicon.svg"), Some("favicon.svg".into()));
        assert_eq!(r("/ojs/admin/assets/app.js"), Some("assets/app.js".into()));
        assert_eq!(
            r("/ojs/admin/workflows/assets/app.js"),
            Some("assets/app.js".into())
        );
        assert_eq!(
            r("/ojs/admin/assets/gone.js"),
            Some("assets/gone.js".into())
        );
        assert_eq!(r("/ojs/admin/../secret"), None);
        assert_eq!(r("/ojs/admin/assets/../../secret"), None);
        assert_eq!(
            content_type(Path::new("a.js")),
            "text/javascript; charset=utf-8"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
