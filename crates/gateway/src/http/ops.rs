//! Operations endpoints at the root (never under the mount): `GET /healthz` — 200
//! `{"status":"ok",…}` when a pooled connection answers `SELECT 1` and every LISTEN connection
//! is up (`listenDown`: the indexes of those that are not), else 503 `{"status":"unavailable",…}`; in dev auth mode the body carries an
//! `"auth":"dev (UNSAFE: …)"` warning; `roundBufferBytes` is what socket rounds hold of
//! `--round-buffer-bytes`, `connections` the open TCP connections (HTTP and WebSocket) of
//! `--max-connections`. `GET /metrics` — Prometheus text exposition.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::db::realtime::ping;
use crate::AppState;

/// `/healthz`.
pub async fn healthz(State(gw): State<AppState>) -> Response {
    let database = ping(&gw.pool).await;
    let listen_down = gw.hub.listen_down();
    let listen = listen_down.is_empty();
    let ok = database && listen && !gw.hub.is_shutting_down();
    let auth = if gw.auth.is_unsafe() {
        "dev (UNSAFE: actor and partition are taken from request headers; never expose this gateway)"
    } else {
        "jwt"
    };
    let body = json!({
        "status": if ok { "ok" } else { "unavailable" },
        "database": database,
        "listen": listen,
        "listenDown": listen_down,
        "sessions": gw.hub.session_count(),
        "roundBufferBytes": gw.hub.settings.limits.round_bytes.used(),
        "connections": gw.connections.open(),
        "gatewayId": gw.hub.gateway_id,
        "auth": auth,
    });
    let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// `/metrics`.
pub async fn metrics(State(gw): State<AppState>) -> Response {
    let mut resp = gw.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}
