//! The gateway's `LISTEN` connections (channels `syncular_commit`, `syncular_scopes`,
//! `syncular_presence`; contract §7), fanning notifications out to the partition workers
//! and the presence relay. ONE per node: `--database-url` by default, else one per
//! `--notify-database-url` (Citus function delegation: a sync call runs on the worker owning
//! its partition, and its NOTIFY fires there), all feeding the same hub; a node is named by
//! its index (never its URL) in logs and metrics. Each has the `application_name`
//! `syncular-gateway-listen-<gateway id>`.
//!
//! On each connect a connection first reads `syncular.notification_key()` and verifies its
//! payloads with it ([`super::keys`]), since any role may NOTIFY. Every node must answer the
//! same key — on Citus `syncular.sync_notification_key` is a reference table; the key read
//! last is also the hub's (it seals the presence relay), and a node answering another key than
//! the one installed is logged as an error.
//!
//! When a connection drops: it reconnects with backoff (100 ms doubling to 5 s), on its own;
//! once back, every session is refreshed (fail-closed) and every partition runs a delta pass
//! from its sessions' cursors (nothing lost, nothing duplicated), and presence is
//! resynchronized — whichever node it was. `/healthz` answers 503 while any is down.
//!
//! Duplicates are harmless: a commit heard twice (two nodes, or a repeated NOTIFY) only
//! schedules another pass, which starts at each session's delivered cursor and so sends
//! nothing it already sent. Order: Postgres delivers one connection's notifications in commit
//! order, so a commit after a membership change is served only after its `syncular_scopes`
//! refresh as long as both are notified on the same node (as they are when the partition's
//! sync and `refresh_scopes` calls run there).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use syncular_protocol::notification::{parse_commit_payload, parse_scopes_payload};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::deltas::Work;
use super::hub::Hub;
use super::keys::NotificationKeys;

pub use syncular_protocol::notification::{COMMIT_CHANNEL, SCOPES_CHANNEL};

/// Runs the LISTEN connection of node `node` until `stop` is cancelled.
pub async fn run(hub: Arc<Hub>, node: usize, config: tokio_postgres::Config, stop: CancellationToken) {
    let mut backoff = Duration::from_millis(100);
    let mut connected_before = false;
    loop {
        match listen(&hub, node, &config, &stop, connected_before).await {
            Ok(()) => (connected_before, backoff) = (true, Duration::from_millis(100)),
            Err((what, e)) => tracing::warn!(node, error = %e, "{what}"),
        }
        hub.set_listening(node, false);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Opens the connection, reads the key, LISTENs and dispatches until the connection is lost
/// or `stop` is cancelled; `Ok` when it was established.
async fn listen(
    hub: &Arc<Hub>,
    node: usize,
    config: &tokio_postgres::Config,
    stop: &CancellationToken,
    connected_before: bool,
) -> Result<(), (&'static str, tokio_postgres::Error)> {
    let (client, mut connection) = config.connect(NoTls).await.map_err(|e| ("cannot open the LISTEN connection", e))?;
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
                Err(e) => return tracing::warn!(node, error = %e, "LISTEN connection failed"),
            }
        }
    });
    let listened = async {
        // The key first: every notification is verified with it (any role can NOTIFY).
        let key: Vec<u8> = client.query_one("SELECT syncular.notification_key()", &[]).await?.try_get(0)?;
        client.batch_execute("LISTEN syncular_commit; LISTEN syncular_scopes; LISTEN syncular_presence").await?;
        Ok(Arc::new(NotificationKeys::new(key)))
    };
    let keys = listened.await.map_err(|e| {
        driver.abort();
        ("LISTEN failed", e)
    })?;
    if !hub.set_notification_key(keys.clone()) {
        tracing::error!(
            node,
            "this node's syncular.notification_key() differs from another node's: every node must \
             answer the same key (on Citus, sync_notification_key is a reference table); each \
             node's payloads are verified with its own key, but the presence relay seals with the \
             key read last"
        );
    }
    if connected_before {
        hub.metrics.listen_reconnects.inc();
        tracing::info!(node, "LISTEN connection re-established: resynchronizing sessions");
    } else {
        tracing::info!(node, "LISTEN connection established");
    }
    hub.set_listening(node, true);
    hub.relay.connected(hub);
    loop {
        tokio::select! {
            n = rx.recv() => match n {
                Some(n) => dispatch(hub, &keys, n.channel(), n.payload()),
                None => break,
            },
            _ = stop.cancelled() => break,
        }
    }
    driver.abort();
    Ok(())
}

/// Routes one notification heard on a connection that read `keys`. `syncular_commit` and
/// `syncular_scopes` payloads are acted on only when their tag verifies with the notification
/// key (forgeries are counted in `notifications_rejected` and dropped); relay payloads are
/// opened by the relay.
pub fn dispatch(hub: &Arc<Hub>, keys: &NotificationKeys, channel: &str, payload: &str) {
    match channel {
        COMMIT_CHANNEL => match parse_commit_payload(&keys.hmac_key, payload) {
            Some((partition, seq)) => {
                if let Some(p) = hub.partition(&partition) {
                    p.schedule(Work::Commit(seq));
                }
            }
            None => rejected(hub, channel, payload),
        },
        SCOPES_CHANNEL => match parse_scopes_payload(&keys.hmac_key, payload) {
            Some((partition, actor)) => hub.scopes_changed(&partition, actor),
            None => rejected(hub, channel, payload),
        },
        super::relay::CHANNEL => hub.relay.handle(hub, keys, payload),
        _ => {}
    }
}

fn rejected(hub: &Hub, channel: &str, payload: &str) {
    hub.metrics.notification_rejected(channel);
    tracing::warn!(channel, len = payload.len(), "notification dropped: its tag does not verify (forged, or signed by another install)");
}
