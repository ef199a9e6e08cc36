//! `{mount}/blobs/{blobId}` (§5.9; docs/src/sql/blobs.md): the bytes are stored in the database by the
//! extension, which verifies the content address; this module only moves bytes.
//!
//! - `PUT` (host auth; §5.9.3): the body (decoded per `Content-Encoding: gzip`) streams into
//!   `syncular.blob_upload_*` in 1 MiB appends inside one transaction. A body of at most 1 MiB
//!   is read whole before a pool connection is taken; a larger one holds a connection only with
//!   one of the upload slots (a quarter of `--pool-size`, never its last connection) and while
//!   its pieces keep coming (10 s stall limit), so slow uploads never starve sync rounds or
//!   small uploads. A `Content-Length` over 1 MiB and over the
//!   cap (`syncular.blob_max_bytes`) is refused before the body is read, a streamed count over
//!   the cap as soon as it passes. 200 with an empty body (also for a blob already stored);
//!   400 `blob.hash_mismatch`; 413 `blob.too_large`; 400 `sync.invalid_request` (malformed id).
//! - `POST …/upload-grant` (host auth; §5.9.3): body `{"byteLength": n, "mediaType"?}`; the
//!   extension's answer verbatim: `{"present": true}` (stored: skip the upload), a presigned PUT
//!   `{"url", "urlExpiresAtMs"}` (the object store takes it; docs/src/operate/object-store.md) or
//!   `{"present": false}` (no URL: `PUT` the bytes here); 413 over the cap.
//! - `GET` (host auth; §5.9.5): authorized against the rows of the partition that reference the
//!   blob and the actor's allowed scopes (the token's, else the database resolver); 404
//!   `blob.not_found`, 403 `blob.forbidden`; 200 `application/octet-stream` streamed chunk by
//!   chunk with `ETag: "<blobId>"`, `Cache-Control: private, max-age=0`,
//!   `Vary: Authorization, Accept-Encoding`; 304 for a matching `If-None-Match` (after
//!   authorization). When the object store holds the blob: 200 `application/json`
//!   `{"url", "urlExpiresAtMs"}` (§5.9.5 always-issue), no bytes.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put, MethodRouter};
use tower_http::decompression::RequestDecompressionLayer;

use super::error_response;
use crate::db::blobs::{self, DownloadArgs};
use crate::db::ApiError;
use crate::AppState;

/// Largest upload-grant request body (a small JSON object).
const GRANT_BODY_BYTES: usize = 64 * 1024;

/// `PUT` (with request decompression) and `GET` of `/blobs/{id}`.
pub fn route() -> MethodRouter<AppState> {
    put(put_blob).layer::<_, Infallible>(RequestDecompressionLayer::new().gzip(true)).get(get_blob)
}

/// `POST /blobs/{id}/upload-grant`.
pub fn grant_route() -> MethodRouter<AppState> {
    post(upload_grant)
}

/// `blob.too_large` is a 413 (§5.9.3), whatever its category's status.
fn with_blob_status(e: ApiError) -> ApiError {
    if e.code_str() == "blob.too_large" {
        e.with_status(StatusCode::PAYLOAD_TOO_LARGE)
    } else {
        e
    }
}

/// `PUT /blobs/{id}`.
pub async fn put_blob(State(gw): State<AppState>, headers: HeaderMap, Path(id): Path<String>, body: Body) -> Response {
    let route = "/blobs/{id}";
    let identity = match gw.auth.authenticate(&headers, None) {
        Ok(id) => id,
        Err(e) => return error_response(&gw, route, e),
    };
    // The declared size of the bytes themselves: only an unencoded (or `identity`) body's
    // Content-Length (the decompression layer drops the header of an encoded one).
    let encoded = headers.get(header::CONTENT_ENCODING).is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let declared = if encoded { None } else { headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i64>().ok()) };
    match blobs::upload(&gw.pool, &gw.upload_slots, &identity.partition, &id, declared, body.into_data_stream()).await {
        Ok(()) => {
            let mut resp = StatusCode::OK.into_response();
            resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        Err(e) => error_response(&gw, route, with_blob_status(e)),
    }
}

/// `POST /blobs/{id}/upload-grant`.
pub async fn upload_grant(State(gw): State<AppState>, headers: HeaderMap, Path(id): Path<String>, body: Body) -> Response {
    let route = "/blobs/{id}/upload-grant";
    let identity = match gw.auth.authenticate(&headers, None) {
        Ok(id) => id,
        Err(e) => return error_response(&gw, route, e),
    };
    let bytes = match axum::body::to_bytes(body, GRANT_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return error_response(&gw, route, ApiError::invalid_request(format!("upload-grant body must be JSON of at most {GRANT_BODY_BYTES} bytes")))
        }
    };
    let byte_length = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("byteLength").and_then(serde_json::Value::as_i64))
        .filter(|n| *n >= 0);
    let Some(byte_length) = byte_length else {
        return error_response(
            &gw,
            route,
            ApiError::invalid_request("upload-grant body must be {\"byteLength\": <integer ≥ 0>, \"mediaType\"?: <string>} (§5.9.3)"),
        );
    };
    match blobs::upload_grant(&gw.pool, &identity.partition, &id, byte_length).await {
        Ok(grant) => {
            let mut resp = (StatusCode::OK, grant.to_string()).into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        Err(e) => error_response(&gw, route, with_blob_status(e)),
    }
}

/// True when `If-None-Match` lists `"<blob_id>"` (or `*`).
fn not_modified(headers: &HeaderMap, blob_id: &str) -> bool {
    let etag = format!("\"{blob_id}\"");
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').map(str::trim).any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag.as_str()))
    })
}

/// `GET /blobs/{id}`.
pub async fn get_blob(State(gw): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let route = "/blobs/{id}";
    let identity = match gw.auth.authenticate(&headers, None) {
        Ok(id) => id,
        Err(e) => return error_response(&gw, route, e),
    };
    let args = DownloadArgs {
        partition: identity.partition,
        actor_id: identity.actor_id,
        allowed_scopes: identity.allowed_scopes,
        blob_id: id.clone(),
    };
    let download = match blobs::download(&gw.pool, args).await {
        Ok(d) => d,
        Err(e) => return error_response(&gw, route, e),
    };
    let etag = HeaderValue::from_str(&format!("\"{id}\"")).unwrap_or(HeaderValue::from_static("\"\""));
    if let Some((url, expires_at_ms)) = &download.presigned {
        // §5.9.5 always-issue: the bucket serves the bytes; the answer is the URL, never cached.
        let body = serde_json::json!({"url": url, "urlExpiresAtMs": expires_at_ms}).to_string();
        let mut resp = (StatusCode::OK, body).into_response();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(header::VARY, HeaderValue::from_static("Authorization, Accept-Encoding"));
        return resp;
    }
    let mut resp = if not_modified(&headers, &id) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let byte_length = download.byte_length.max(0) as u64;
        let stream = futures_util::stream::unfold(download.chunks(), |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(byte_length));
        resp
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=0"));
    h.insert(header::VARY, HeaderValue::from_static("Authorization, Accept-Encoding"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_matches_the_blob_etag() {
        let mut h = HeaderMap::new();
        assert!(!not_modified(&h, "sha256:ab"));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"x\", W/\"sha256:ab\""));
        assert!(not_modified(&h, "sha256:ab"));
        assert!(!not_modified(&h, "sha256:cd"));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert!(not_modified(&h, "sha256:cd"));
    }
}
