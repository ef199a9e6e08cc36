//! The HTTP surface (§1.1): routes under the configured mount — `POST {mount}/sync`
//! ([`sync`]), `GET {mount}/segments/{id}` ([`segments`]), `{mount}/blobs/{id}…` ([`blobs`]),
//! `GET {mount}/realtime` ([`crate::realtime::socket`]) — plus `/healthz` and `/metrics` at the
//! root ([`ops`]), served by the accept loop of [`server`] (connection cap, header-read and
//! idle timeouts). Every error is §10.1 JSON (`application/json`) with the status of its
//! category, including the ones produced by the transport layers (413 body limit, 415
//! content encoding, 503 timeout). Request logs carry method, path (never the query string:
//! `?access_token=`) and status; headers are never logged.

pub mod blobs;
pub mod ops;
pub mod segments;
pub mod server;
pub mod sync;

use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::db::ApiError;
use crate::metrics::HttpLabels;
use crate::AppState;

/// Builds the router of the gateway.
pub fn router(gw: AppState) -> Router {
    let api = Router::new()
        .route("/sync", sync::route(&gw))
        .route("/segments/{id}", segments::route())
        .route("/blobs/{id}", blobs::route())
        .route("/blobs/{id}/upload-grant", blobs::grant_route())
        .route("/realtime", get(crate::realtime::socket::upgrade));
    let mount = gw.config.mount_prefix();
    let app = if mount.is_empty() { api } else { Router::new().nest(&mount, api) };
    app.route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .fallback(not_found)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(gw.config.request_timeout_secs.max(1)),
        ))
        // Outside the timeout, so a request cut by it is answered §10.1 JSON too.
        .layer(middleware::from_fn_with_state(gw.clone(), observe))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<Body>| {
                    tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
                })
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .with_state(gw)
}

/// A §10.1 JSON error response; counts the error by code.
pub fn error_response(gw: &AppState, route: &str, e: ApiError) -> Response {
    gw.metrics.error(e.code_str());
    tracing::debug!(route, code = e.code_str(), status = e.status.as_u16(), "error answered");
    json_error(&e)
}

/// A §10.1 JSON error response (no metrics).
pub fn json_error(e: &ApiError) -> Response {
    let mut resp = (e.status, e.to_json().to_string()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn not_found(State(gw): State<AppState>) -> Response {
    error_response(&gw, "unmatched", ApiError::code(syncular_protocol::ErrorCode::NotFound, "no such route"))
}

/// Counts every response by route and status and turns the bodiless/plain-text errors of the
/// transport layers into §10.1 JSON. A request target holding `%00` is refused first (400
/// `sync.invalid_request`): a NUL decodes into no id, token or clientId Postgres `text` can hold.
async fn observe(State(gw): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
    let resp = if req.uri().path_and_query().is_some_and(|t| t.as_str().contains("%00")) {
        error_response(&gw, &route, ApiError::invalid_request("the request target holds a NUL (%00)"))
    } else {
        next.run(req).await
    };
    let resp = jsonify(&gw, resp);
    gw.metrics.http_requests.get_or_create(&HttpLabels { route, status: resp.status().as_u16() }).inc();
    resp
}

fn jsonify(gw: &AppState, resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let e = match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::invalid_request(format!(
            "request body larger than {} bytes",
            gw.config.max_body_bytes
        )),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::invalid_request("unsupported Content-Encoding (accepted: gzip, identity)")
        }
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::REQUEST_TIMEOUT => {
            ApiError::unavailable("the request did not complete in time")
        }
        StatusCode::METHOD_NOT_ALLOWED => ApiError::invalid_request("method not allowed on this route"),
        _ if status.is_client_error() => ApiError::invalid_request(format!("request refused ({status})")),
        _ => ApiError::internal(format!("server error ({status})")),
    }
    .with_status(status);
    gw.metrics.error(e.code_str());
    let mut out = json_error(&e);
    for (name, value) in resp.headers() {
        if name == header::ALLOW {
            out.headers_mut().insert(name, value.clone());
        }
    }
    out
}
