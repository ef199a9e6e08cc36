//! The gateway's ONE `LISTEN` connection (channels `syncular_commit`, `syncular_scopes`,
//! `syncular_presence`; contract §7), fanning notifications out to the partition workers
//! and the presence relay. On each connect it first reads `syncular.notification_key()`:
//! payloads are verified with it ([`super::keys`]), since any role may NOTIFY. Its `application_name` is `syncular-gateway-listen-<gateway id>`.
//! When it drops: reconnect with backoff (100 ms doubling to 5 s); once back, every session
//! is refreshed (fail-closed) and every partition runs a delta pass from its sessions'
//! cursors (nothing lost, nothing duplicated), and presence is resynchronized.
//! `/healthz` answers 503 while it is down.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use syncular_protocol::notification::{parse_commit_payload, parse_scopes_payload};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::hub::Hub;

pub use syncular_protocol::notification::{COMMIT_CHANNEL, SCOPES_CHANNEL};

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
                // The key first: every notification is verified with it (any role can NOTIFY).
                let listened = async {
                    let key: Vec<u8> = client.query_one("SELECT syncular.notification_key()", &[]).await?.try_get(0)?;
                    hub.set_notification_key(key);
                    client.batch_execute("LISTEN syncular_commit; LISTEN syncular_scopes; LISTEN syncular_presence").await
                }
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

/// Routes one notification. `syncular_commit` and `syncular_scopes` payloads are acted on
/// only when their tag verifies with the notification key (forgeries are counted in
/// `notifications_rejected` and dropped); relay payloads are opened by the relay.
pub fn dispatch(hub: &Arc<Hub>, channel: &str, payload: &str) {
    let Some(keys) = hub.notification_keys() else { return };
    match channel {
        COMMIT_CHANNEL => match parse_commit_payload(&keys.hmac_key, payload) {
            Some((partition, seq)) => hub.commit_notified(&partition, seq),
            None => rejected(hub, channel, payload),
        },
        SCOPES_CHANNEL => match parse_scopes_payload(&keys.hmac_key, payload) {
            Some((partition, actor)) => hub.scopes_changed(&partition, actor),
            None => rejected(hub, channel, payload),
        },
        super::relay::CHANNEL => hub.relay.handle(hub, payload),
        _ => {}
    }
}

fn rejected(hub: &Hub, channel: &str, payload: &str) {
    hub.metrics.notification_rejected(channel);
    tracing::warn!(channel, len = payload.len(), "notification dropped: its tag does not verify (forged, or signed by another install)");
}
