//! `{mount}/blobs/{blobId}` (§5.9) — blobs are not served yet (issue 13). After auth:
//! `GET` → 404 `blob.not_found`; `PUT` and `POST …/upload-grant` → 501
//! `syncular.not_implemented` (category internal, not retryable). Unauthenticated: 401.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use syncular_protocol::ErrorCode;

use super::error_response;
use crate::db::ApiError;
use crate::AppState;

fn not_implemented(what: &str) -> ApiError {
    ApiError::host(
        StatusCode::NOT_IMPLEMENTED,
        "syncular.not_implemented",
        format!("{what} is not served by this gateway yet (blobs: issue 13)"),
        false,
        "inspectServer",
    )
}

/// `GET /blobs/{id}`.
pub async fn get_blob(State(gw): State<AppState>, headers: HeaderMap, Path(_id): Path<String>) -> Response {
    let route = "/blobs/{id}";
    if let Err(e) = gw.auth.authenticate(&headers, None) {
        return error_response(&gw, route, e);
    }
    error_response(&gw, route, ApiError::code(ErrorCode::BlobNotFound, "unknown blob: this server stores no blobs"))
}

/// `PUT /blobs/{id}` (the body is not read).
pub async fn put_blob(State(gw): State<AppState>, headers: HeaderMap, Path(_id): Path<String>) -> Response {
    let route = "/blobs/{id}";
    if let Err(e) = gw.auth.authenticate(&headers, None) {
        return error_response(&gw, route, e);
    }
    error_response(&gw, route, not_implemented("blob upload"))
}

/// `POST /blobs/{id}/upload-grant`.
pub async fn upload_grant(State(gw): State<AppState>, headers: HeaderMap, Path(_id): Path<String>) -> Response {
    let route = "/blobs/{id}/upload-grant";
    if let Err(e) = gw.auth.authenticate(&headers, None) {
        return error_response(&gw, route, e);
    }
    error_response(&gw, route, not_implemented("blob upload grant"))
}
