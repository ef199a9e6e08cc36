//! `POST {mount}/sync` (§1.1, §1.3): one SSP2 request in, one SSP2 response out.
//!
//! - `Content-Type` must be `application/vnd.syncular.sync.v2` (parameters after `;` are
//!   allowed) — else 415 `sync.invalid_request`.
//! - Auth — else 401 `sync.auth_required`.
//! - Request bodies may be `Content-Encoding: gzip`; the body limit (`--max-body-bytes`)
//!   applies to the transferred AND the decoded size (a gzip bomb stops at the limit) — 413.
//!   A body that cannot be read or gunzipped — 400.
//! - The push half is persisted before a byte is answered ([`crate::db::round`]); the pull half
//!   is streamed ([`crate::db::stream`]: chunked transfer, one subscription section at a time,
//!   `END` only after the pull's COMMIT). Errors met before the first byte are §10.1 JSON with
//!   their category's status (transient database trouble: 503 after retries); an error met
//!   after it ends the body with an in-band `ERROR` frame and `END` (§1.6).
//! - Success: 200 `application/vnd.syncular.sync.v2`, compressed gzip/zstd per
//!   `Accept-Encoding`.

use std::convert::Infallible;
use std::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;

use super::error_response;
use crate::db::round::{run_round_streamed, RoundArgs, RoundBody};
use crate::db::ApiError;
use crate::AppState;

/// The SSP2 media type (§1.1).
pub const CONTENT_TYPE: &str = "application/vnd.syncular.sync.v2";

/// The `/sync` route with its body limit, request decompression and response compression.
pub fn route(gw: &AppState) -> MethodRouter<AppState> {
    post(post_sync)
        .layer::<_, Infallible>(CompressionLayer::new().gzip(true).zstd(true))
        .layer::<_, Infallible>(RequestDecompressionLayer::new().gzip(true))
        .layer::<_, Infallible>(RequestBodyLimitLayer::new(gw.config.max_body_bytes))
}

/// True when `content_type` is the SSP2 media type (case-insensitive, parameters allowed).
pub fn is_ssp2(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|v| v.eq_ignore_ascii_case(CONTENT_TYPE))
}

async fn post_sync(State(gw): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let route = "/sync";
    if !is_ssp2(headers.get(header::CONTENT_TYPE)) {
        return error_response(
            &gw,
            route,
            ApiError::invalid_request(format!("Content-Type must be {CONTENT_TYPE} (§1.1)"))
                .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE),
        );
    }
    let identity = match gw.auth.authenticate(&headers, None) {
        Ok(id) => id,
        Err(e) => return error_response(&gw, route, e),
    };
    let request = match axum::body::to_bytes(body, gw.config.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(e) => return error_response(&gw, route, body_error(&e, gw.config.max_body_bytes)),
    };
    if let Some(code) = crate::framing::round_failure_code(&request) {
        gw.metrics.round_failure(&code);
    }
    let started = Instant::now();
    let args = RoundArgs {
        partition: &identity.partition,
        actor_id: &identity.actor_id,
        request: &request,
        allowed_scopes: identity.allowed_scopes.as_ref(),
        connection_client_id: None,
    };
    let result = run_round_streamed(&gw.pool, &args, 1).await;
    gw.metrics.round("http", result.is_ok(), started.elapsed().as_secs_f64());
    let mut resp = match result {
        Ok(RoundBody::Whole(response)) => (StatusCode::OK, response).into_response(),
        Ok(RoundBody::Stream { head, rest }) => (StatusCode::OK, Body::from_stream(chunks(head, rest))).into_response(),
        Err(e) => return error_response(&gw, route, e),
    };
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The body of a streamed round: `head`, then every chunk of `rest` as it comes. Fused: the
/// compression layer polls its body once more after the end.
fn chunks(head: Vec<u8>, rest: mpsc::Receiver<Bytes>) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    futures_util::stream::once(std::future::ready(Ok(Bytes::from(head)))).chain(futures_util::stream::unfold(
        rest,
        |mut rest| async move { rest.recv().await.map(|chunk| (Ok(chunk), rest)) },
    ))
    .fuse()
}

/// 413 when a length limit was hit (raw or decoded), else 400 (unreadable / bad gzip).
fn body_error(e: &axum::Error, limit: usize) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() || err.to_string().contains("length limit exceeded") {
            return ApiError::invalid_request(format!("request body larger than {limit} bytes"))
                .with_status(StatusCode::PAYLOAD_TOO_LARGE);
        }
        source = err.source();
    }
    ApiError::invalid_request("request body could not be read (truncated, or not valid gzip)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed body through the route's compression layer decompresses to the chunks.
    #[tokio::test]
    async fn a_streamed_body_is_compressed_whole() {
        use axum::routing::get;
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let app = axum::Router::new().route(
            "/s",
            get(|| async {
                let (tx, rx) = mpsc::channel(1);
                tokio::spawn(async move {
                    for i in 0..20u8 {
                        tx.send(Bytes::from(vec![i; 100_000])).await.unwrap();
                    }
                });
                Body::from_stream(chunks(b"head".to_vec(), rx))
            })
            .layer::<_, Infallible>(CompressionLayer::new().gzip(true).zstd(true)),
        );
        for enc in ["gzip", "zstd", "identity"] {
            let req = axum::http::Request::get("/s").header("accept-encoding", enc).body(Body::empty()).unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.headers().get("content-encoding").map(|v| v.to_str().unwrap().to_owned()), (enc != "identity").then(|| enc.to_owned()));
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            assert!(!bytes.is_empty());
        }
    }

    #[test]
    fn content_type_check() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert!(is_ssp2(Some(&v("application/vnd.syncular.sync.v2"))));
        assert!(is_ssp2(Some(&v("Application/VND.syncular.sync.v2; charset=binary"))));
        assert!(!is_ssp2(Some(&v("application/octet-stream"))));
        assert!(!is_ssp2(Some(&v("application/vnd.syncular.sync.v20"))));
        assert!(!is_ssp2(None));
    }
}
