//! `GET {mount}/segments/{segmentId}` (§5.5): the extension stores no segments yet (rows
//! segments are delivered inline), so after auth every id is 404 `sync.not_found`.
//! Unauthenticated: 401 `sync.auth_required`.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use syncular_protocol::ErrorCode;

use super::error_response;
use crate::db::ApiError;
use crate::AppState;

/// The segment download handler.
pub async fn get_segment(State(gw): State<AppState>, headers: HeaderMap, Path(_id): Path<String>) -> Response {
    let route = "/segments/{id}";
    if let Err(e) = gw.auth.authenticate(&headers, None) {
        return error_response(&gw, route, e);
    }
    error_response(&gw, route, ApiError::code(ErrorCode::NotFound, "unknown segment: this server stores no segments (§5.5)"))
}
