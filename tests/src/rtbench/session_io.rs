//! The network side of one benchmark session (module `sessions`): the
//! WebSocket upgrade up to `hello`, and a client's catch-up pulls through the
//! gateway's `POST /sync` after a wake-up or a `hello` with `requiresSync`.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ssp2::realtime::{parse_control, ControlMessage};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use super::http::HttpConn;
use super::sessions::{Ctx, HelloInfo, SessionSpec, Shared};
use super::setup::{pull_outcome, pull_request};
use crate::wire::decode_response;

pub(super) type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Upgrades `/realtime?clientId=…` with dev-auth headers and reads up to the `hello`.
pub(super) async fn connect(ctx: &Ctx, spec: &SessionSpec) -> Result<(Ws, HelloInfo), String> {
    let url = format!("ws://{}/realtime?clientId={}", ctx.addr, spec.client_id);
    let mut req = url.into_client_request().map_err(|e| e.to_string())?;
    let h = req.headers_mut();
    h.insert("x-syncular-actor", HeaderValue::from_str(&spec.actor).map_err(|e| e.to_string())?);
    h.insert("x-syncular-partition", HeaderValue::from_str(&spec.partition).map_err(|e| e.to_string())?);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(req, None, true)
        .await
        .map_err(|e| format!("{}: upgrade failed: {e}", spec.client_id))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let next = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| format!("{}: no hello within 30 s", spec.client_id))?;
        match next {
            Some(Ok(Message::Text(text))) => {
                if let Ok(ControlMessage::Hello { cursor, latest_cursor, requires_sync, .. }) =
                    parse_control(text.as_str())
                {
                    return Ok((ws, HelloInfo { cursor, latest_cursor, requires_sync }));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("{}: socket error before hello: {e}", spec.client_id)),
            None => return Err(format!("{}: closed before hello", spec.client_id)),
        }
    }
}

/// A client's recovery after a wake-up: jitter, pull through `POST /sync`
/// until the session holds data through the highest wake cursor, then ack.
pub(super) async fn catch_up(ctx: Ctx, spec: SessionSpec, shared: Arc<Shared>, acks: mpsc::UnboundedSender<i64>) {
    if ctx.jitter_ms > 0 {
        let r = RandomState::new().hash_one(Instant::now()) % (ctx.jitter_ms + 1);
        {
            let mut st = shared.lock();
            if st.reached_at.is_none() {
                st.jitter += Duration::from_millis(r);
            }
        }
        tokio::time::sleep(Duration::from_millis(r)).await;
    }
    let mut failures = 0;
    loop {
        let cursor = {
            let mut st = shared.lock();
            if st.covered >= st.wake_target || st.ended {
                st.catching_up = false;
                let c = st.covered;
                drop(st);
                let _ = acks.send(c);
                return;
            }
            st.covered
        };
        match pull_once(&ctx, &spec, cursor).await {
            Ok((seqs, next)) => {
                let mut st = shared.lock();
                st.log.recovered.extend(seqs);
                st.cover(next);
            }
            Err(e) => {
                failures += 1;
                let give_up = {
                    let mut st = shared.lock();
                    st.log.errors.push(format!("catch-up pull: {e}"));
                    if failures >= 5 {
                        st.catching_up = false;
                    }
                    failures >= 5
                };
                if give_up {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One incremental pull from `cursor` through the gateway: `(commitSeqs, nextCursor)`.
async fn pull_once(ctx: &Ctx, spec: &SessionSpec, cursor: i64) -> Result<(Vec<i64>, i64), String> {
    let mut conn = HttpConn::connect(ctx.addr).await?;
    let body = conn
        .sync(&spec.actor, &spec.partition, pull_request(&spec.client_id, &spec.epoch, cursor))
        .await?;
    let out = pull_outcome(&decode_response(&body)?);
    let next = out.next_cursor.ok_or("pull response without SUB_END")?;
    Ok((out.commit_seqs, next))
}
