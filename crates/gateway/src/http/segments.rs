//! `GET {mount}/segments/{segmentId}` (SPEC §5.4, §5.5, §5.8; docs/src/sql/segments.md "Segments"): two ways in.
//!
//! - **Direct endpoint** (§5.5): host auth (401 `sync.auth_required`) plus `X-Syncular-Scopes`,
//!   the canonical JSON of the owning subscription's requested scopes (missing: 403
//!   `sync.forbidden`); `syncular.segment_open` re-authorizes every download (404
//!   `sync.not_found`, 404 `sync.segment_expired`, 403 `sync.forbidden`), then the chunks
//!   stream from `syncular.segment_chunk`. 200 `application/octet-stream`, `ETag:
//!   "<segmentId>"`, `Cache-Control: private, max-age=0`, `Vary: Authorization,
//!   X-Syncular-Scopes, Accept-Encoding`; `Content-Encoding` zstd (preferred) or gzip per
//!   `Accept-Encoding`, identity when neither is offered (§5.8: compressed per response, the
//!   stored bytes never are); 304 for a matching `If-None-Match`, after authorization.
//! - **Signed URL** (§5.4 native scheme): `?st=<token>` — the URL is the entire grant, so no
//!   host auth is read (whatever the request carries) and no scopes header is needed;
//!   `syncular.segment_open_signed` verifies the token (every token fault, an expired token
//!   included, is 403 `sync.forbidden`; 404 `sync.not_found` / `sync.segment_expired` for a
//!   valid token whose segment is gone or expired). Served verbatim (§5.8: never compressed on
//!   this path — the content address pins the bytes; a CDN may compress at its edge) with
//!   `Cache-Control: public, max-age=<seconds until the URL expires>, immutable` so a CDN in
//!   front keeps the response no longer than the grant; `ETag` and 304 as above.
//!
//! The token is never logged (request logs carry the path only) nor echoed in an error.

use std::collections::HashMap;
use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, Extensions, HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use syncular_protocol::ErrorCode;
use tower_http::compression::predicate::{DefaultPredicate, Predicate};
use tower_http::compression::CompressionLayer;

use super::error_response;
use crate::db::segments::{self, Download, OpenArgs};
use crate::db::ApiError;
use crate::AppState;

/// The §5.5 scopes header.
pub const SCOPES_HEADER: HeaderName = HeaderName::from_static("x-syncular-scopes");

/// Response extension: serve this body verbatim (the signed-URL path, §5.8).
#[derive(Debug, Clone, Copy)]
struct Verbatim;

/// The route: `GET` with response compression (zstd, gzip) for the direct endpoint only.
pub fn route() -> MethodRouter<AppState> {
    let direct_only = |_: StatusCode, _: Version, _: &HeaderMap, ext: &Extensions| ext.get::<Verbatim>().is_none();
    get(get_segment).layer::<_, Infallible>(
        CompressionLayer::new().gzip(true).zstd(true).compress_when(DefaultPredicate::new().and(direct_only)),
    )
}

/// True when `If-None-Match` lists `"<segment_id>"` (or `*`).
fn not_modified(headers: &HeaderMap, segment_id: &str) -> bool {
    let etag = format!("\"{segment_id}\"");
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').map(str::trim).any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag.as_str()))
    })
}

/// The segment download handler.
pub async fn get_segment(
    State(gw): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let route = "/segments/{id}";
    if let Some(token) = query.get("st") {
        return match segments::open_signed(&gw.pool, &id, token).await {
            Ok(d) => respond(&headers, d, true),
            Err(e) => error_response(&gw, route, e),
        };
    }
    let identity = match gw.auth.authenticate(&headers, None) {
        Ok(id) => id,
        Err(e) => return error_response(&gw, route, e),
    };
    let Some(requested_scopes) = headers.get(&SCOPES_HEADER).and_then(|v| String::from_utf8(v.as_bytes().to_vec()).ok()) else {
        return error_response(
            &gw,
            route,
            ApiError::code(ErrorCode::Forbidden, "a segment download needs X-Syncular-Scopes: the canonical JSON of the subscription's requested scopes (§5.5)"),
        );
    };
    let args = OpenArgs {
        partition: identity.partition,
        actor_id: identity.actor_id,
        segment_id: id,
        requested_scopes,
        allowed_scopes: identity.allowed_scopes,
    };
    match segments::open(&gw.pool, args).await {
        Ok(d) => respond(&headers, d, false),
        Err(e) => error_response(&gw, route, e),
    }
}

fn respond(headers: &HeaderMap, download: Download, signed: bool) -> Response {
    let etag = HeaderValue::from_str(&format!("\"{}\"", download.segment_id)).unwrap_or(HeaderValue::from_static("\"\""));
    let cache_control = match download.url_expires_at_ms.filter(|_| signed) {
        Some(expires) => {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let max_age = (expires.saturating_sub(now_ms) / 1000).max(0);
            HeaderValue::from_str(&format!("public, max-age={max_age}, immutable")).unwrap_or(HeaderValue::from_static("no-store"))
        }
        None if signed => HeaderValue::from_static("no-store"),
        None => HeaderValue::from_static("private, max-age=0"),
    };
    let mut resp = if not_modified(headers, &download.segment_id) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let byte_length = download.byte_length.max(0) as u64;
        // poll_fn, not unfold: the compression layer may poll a finished body again, and an
        // mpsc receiver answers None for ever after its end.
        let mut rx = download.chunks();
        let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(byte_length));
        resp
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag);
    h.insert(header::CACHE_CONTROL, cache_control);
    if signed {
        resp.extensions_mut().insert(Verbatim);
    } else {
        h.insert(header::VARY, HeaderValue::from_static("Authorization, X-Syncular-Scopes, Accept-Encoding"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_matches_the_segment_etag() {
        let mut h = HeaderMap::new();
        assert!(!not_modified(&h, "sha256:ab"));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"x\", W/\"sha256:ab\""));
        assert!(not_modified(&h, "sha256:ab"));
        assert!(!not_modified(&h, "sha256:cd"));
    }
}
