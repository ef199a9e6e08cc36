//! The gateway's ONE `LISTEN` connection (channels `syncular_commit`, `syncular_scopes`,
//! `syncular_presence`; contract §7), fanning notifications out to the partition workers
//! and the presence relay. Its `application_name` is `syncular-gateway-listen-<gateway id>`.
//! When it drops: reconnect with backoff (100 ms doubling to 5 s); once back, every session
//! is refreshed (fail-closed) and every partition runs a delta pass from its sessions'
//! cursors (nothing lost, nothing duplicated), and presence is resynchronized.
//! `/healthz` answers 503 while it is down.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::hub::Hub;

/// Commit notifications (`<base64url(partition)>:<commitSeq>`).
pub const COMMIT_CHANNEL: &str = "syncular_commit";
/// Host refresh notifications (`<base64url(partition)>[:<base64url(actor)>]`).
pub const SCOPES_CHANNEL: &str = "syncular_scopes";

/// Runs until `stop` is cancelled.
pub async fn run(hub: Arc<Hub>, config: tokio_postgres::Config, stop: CancellationToken) {
    let mut backoff = Duration::from_millis(100);
    let mut connected_before = false;
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<tokio_postgres::Notification>(4096);
                let driver = tokio::spawn(async move {
                    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n).await.is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "LISTEN connection failed");
                                return;
                            }
                        }
                    }
                });
                let listened = client
                    .batch_execute("LISTEN syncular_commit; LISTEN syncular_scopes; LISTEN syncular_presence")
                    .await;
                match listened {
                    Ok(()) => {
                        if connected_before {
                            hub.metrics.listen_reconnects.inc();
                            tracing::info!("LISTEN connection re-established: resynchronizing sessions");
                        } else {
                            tracing::info!("LISTEN connection established");
                        }
                        connected_before = true;
                        backoff = Duration::from_millis(100);
                        hub.listen_connected();
                        hub.relay.connected(&hub);
                        loop {
                            tokio::select! {
                                n = rx.recv() => match n {
                                    Some(n) => dispatch(&hub, n.channel(), n.payload()),
                                    None => break,
                                },
                                _ = stop.cancelled() => {
                                    driver.abort();
                                    return;
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "LISTEN failed"),
                }
                hub.listen_lost();
                driver.abort();
                drop(client);
            }
            Err(e) => {
                hub.listen_lost();
                tracing::warn!(error = %e, "cannot open the LISTEN connection");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Routes one notification.
pub fn dispatch(hub: &Arc<Hub>, channel: &str, payload: &str) {
    match channel {
        COMMIT_CHANNEL => match parse_commit(payload) {
            Some((partition, seq)) => hub.commit_notified(&partition, seq),
            None => tracing::warn!(len = payload.len(), "malformed syncular_commit payload ignored"),
        },
        SCOPES_CHANNEL => match parse_scopes(payload) {
            Some((partition, actor)) => hub.scopes_changed(&partition, actor),
            None => tracing::warn!(len = payload.len(), "malformed syncular_scopes payload ignored"),
        },
        super::relay::CHANNEL => hub.relay.handle(hub, payload),
        _ => {}
    }
}

fn b64_text(s: &str) -> Option<String> {
    String::from_utf8(URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok()?).ok()
}

/// Parses `<base64url(partition)>:<commitSeq>`.
pub fn parse_commit(payload: &str) -> Option<(String, i64)> {
    let (p, seq) = payload.rsplit_once(':')?;
    Some((b64_text(p)?, seq.parse().ok()?))
}

/// Parses `<base64url(partition)>[:<base64url(actor)>]`.
pub fn parse_scopes(payload: &str) -> Option<(String, Option<String>)> {
    match payload.split_once(':') {
        Some((p, a)) => Some((b64_text(p)?, Some(b64_text(a)?))),
        None => Some((b64_text(payload)?, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse() {
        assert_eq!(parse_commit("dGVuYW50LWE:2"), Some(("tenant-a".into(), 2)));
        assert_eq!(parse_commit("dGVuYW50LWE"), None);
        assert_eq!(parse_commit("!!:2"), None);
        assert_eq!(parse_scopes("dGVuYW50LWE"), Some(("tenant-a".into(), None)));
        assert_eq!(parse_scopes("dGVuYW50LWE:dTE"), Some(("tenant-a".into(), Some("u1".into()))));
        assert_eq!(parse_scopes("dGVuYW50LWE:%%"), None);
    }
}
