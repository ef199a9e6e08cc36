//! Graceful shutdown on SIGTERM/SIGINT, in this order: stop accepting, let in-flight HTTP
//! requests and socket rounds finish (up to `--shutdown-grace-secs`), close every socket
//! with 1001, drain the pending ack writes, say presence `bye`, close the pool; exit 0.

use std::sync::Arc;
use crate::realtime::Hub;

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// The last steps, once HTTP requests and sockets are done: drain the pending ack writes,
/// say presence `bye`, close the pool.
pub async fn finish(hub: &Arc<Hub>) {
    let updated = hub.acks.flush(&hub.pool, &hub.metrics).await;
    tracing::info!(acks_updated = updated, "shutdown: pending acks written");
    hub.relay.bye(hub).await;
    hub.pool.close();
}
