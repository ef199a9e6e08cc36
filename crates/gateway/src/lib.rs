//! `syncular-gateway`: the reference thin gateway of the syncular extension — HTTP
//! `POST {mount}/sync`, WebSocket `{mount}/realtime` (SSP2 §8), auth, operations. It holds
//! sockets, authenticates and moves bytes; every sync decision is a SQL call into schema
//! `syncular` (see `REALTIME_SQL_CONTRACT.md`). It only *frames* SSP2 ([`framing`]).
//!
//! Modules: [`config`] (flags), [`auth`], [`db`] (pool, §10.1 errors, rounds, realtime SQL),
//! [`framing`], [`http`], [`realtime`], [`metrics`], [`logging`], [`shutdown`].

pub mod auth;
pub mod config;
pub mod db;
pub mod framing;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod objects;
pub mod realtime;
pub mod shutdown;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::realtime::{Hub, HubSettings};

/// State shared by every handler.
pub struct Gateway {
    /// The configuration.
    pub config: Config,
    /// Connection pool.
    pub pool: Pool,
    /// The authenticator.
    pub auth: Authenticator,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The realtime hub.
    pub hub: Arc<Hub>,
    /// Open TCP connections (`--max-connections`).
    pub connections: http::server::Connections,
    /// Blob uploads that may hold a pool connection at once (`db::blobs::upload_slots`).
    pub upload_slots: tokio::sync::Semaphore,
}

/// The handlers' state.
pub type AppState = Arc<Gateway>;

/// Runs the gateway until SIGTERM/SIGINT, then shuts down gracefully.
///
/// Errors: bad auth configuration (key files), an unparsable database URL, a listen address
/// that cannot be bound, a server failure.
pub async fn run(config: Config) -> Result<(), String> {
    let gateway_id = config.gateway_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let auth = Authenticator::from_config(&config)?;
    if auth.is_unsafe() {
        // On stderr whatever the log filter (even `--log-filter off`): dev mode must never be
        // switched on silently.
        const BANNER: &str = "UNSAFE: --auth dev trusts the x-syncular-actor / x-syncular-partition headers of \
                              every request; never expose this gateway";
        eprintln!("syncular-gateway: {BANNER}");
        tracing::warn!("{BANNER}");
    }
    let pool = db::build_pool(db::pg_config(&config.database_url, "--database-url", &format!("syncular-gateway-{gateway_id}"))?, config.pool_size)?;
    let listen_name = format!("syncular-gateway-listen-{gateway_id}");
    let listen_configs = if config.notify_database_urls.is_empty() {
        vec![db::pg_config(&config.database_url, "--database-url", &listen_name)?]
    } else {
        let what = |i: usize| format!("--notify-database-url (node {i})");
        config.listen_urls().iter().enumerate().map(|(i, url)| db::pg_config(url, &what(i), &listen_name)).collect::<Result<_, _>>()?
    };
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let settings = HubSettings {
        max_delta_bytes: config.max_delta_bytes,
        max_sessions: config.max_sessions,
        max_sessions_per_client: config.max_sessions_per_client,
        session_queue: usize::try_from(config.session_queue).unwrap_or(64),
        max_body_bytes: config.max_body_bytes,
        heartbeat: Duration::from_secs(config.heartbeat_secs),
        idle_timeout: Duration::from_secs(config.idle_timeout_secs),
        presence_max_bytes: config.presence_max_bytes,
        presence_min_interval: Duration::from_millis(config.presence_min_interval_ms),
        ws_max_message_bytes: config.ws_max_message_bytes,
        limits: realtime::limits::Limits::new(
            Duration::from_secs(config.write_timeout_secs),
            config.round_buffer_bytes,
            usize::try_from(config.max_sessions_per_actor).unwrap_or(usize::MAX),
        ),
        listen_nodes: listen_configs.len(),
    };
    let hub = Hub::new(pool.clone(), metrics.clone(), settings, gateway_id.clone(), shutdown.clone());
    let background = CancellationToken::new();
    for (node, listen_config) in listen_configs.into_iter().enumerate() {
        tokio::spawn(realtime::listen::run(hub.clone(), node, listen_config, background.clone()));
    }
    {
        let (hub, stop) = (hub.clone(), background.clone());
        let interval = Duration::from_millis(config.ack_flush_ms);
        tokio::spawn(async move { hub.acks.run(hub.pool.clone(), hub.metrics.clone(), interval, stop).await });
    }
    realtime::relay::Relay::start(&hub, Duration::from_secs(config.presence_heartbeat_secs), background.clone());
    let mover = objects::mover::start(pool.clone(), &config.object_store, background.clone())?;

    // No socket before the first LISTEN: a session joined earlier could miss a host refresh
    // (and the notification key that verifies payloads comes with that connection). With
    // several nodes, one is enough: each later connect resynchronizes every session, and
    // `/healthz` answers 503 until all are up.
    wait_for_listen(&hub).await;

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    let connections = http::server::Connections::new(usize::try_from(config.max_connections).unwrap_or(usize::MAX));
    let http_limits = http::server::HttpLimits {
        header_read_timeout: Duration::from_secs(config.http_header_read_timeout_secs),
        idle_timeout: Duration::from_secs(config.http_idle_timeout_secs),
    };
    warn_if_fd_limit_is_low(config.max_connections, config.pool_size);
    let upload_slots = db::blobs::upload_slots(config.pool_size);
    let gw = Arc::new(Gateway { config, pool, auth, metrics: metrics.clone(), hub: hub.clone(), connections: connections.clone(), upload_slots });
    let app = http::router(gw);
    // Signal handlers before the address is announced: a SIGTERM right after it drains.
    let stop = CancellationToken::new();
    let signal_stop = stop.clone();
    tokio::spawn(async move {
        shutdown::signal().await;
        tracing::info!("shutdown requested: draining");
        signal_stop.cancel();
    });
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
    }
    tracing::info!(%addr, gateway_id = %gateway_id, "syncular-gateway listening");

    let server = http::server::serve(listener, app, http_limits, connections, metrics, stop.clone());
    // HTTP stops accepting and finishes its in-flight requests while the realtime side lets
    // its rounds finish and closes its sockets; then acks, presence bye, pool.
    let sessions_closed = async {
        stop.cancelled().await;
        hub.shutdown_sessions(grace).await;
    };
    tokio::join!(server, sessions_closed);
    shutdown::finish(&hub).await;
    background.cancel();
    if let Some(mover) = mover {
        // Its last act: the heartbeat to 0 (stop presigning).
        let _ = tokio::time::timeout(Duration::from_secs(5), mover).await;
    }
    tracing::info!("syncular-gateway stopped");
    Ok(())
}

/// Warns when the soft file-descriptor limit cannot hold `--max-connections` plus the pool
/// (Linux: `/proc/self/limits`; elsewhere nothing is checked).
fn warn_if_fd_limit_is_low(max_connections: u64, pool_size: usize) {
    let Ok(limits) = std::fs::read_to_string("/proc/self/limits") else { return };
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok());
    let needed = max_connections.saturating_add(pool_size as u64).saturating_add(64);
    if let Some(soft) = soft.filter(|&soft| soft < needed) {
        tracing::warn!(
            soft_limit = soft,
            needed,
            "the open-files limit is below --max-connections + --pool-size + 64: raise `ulimit -n` or lower --max-connections"
        );
    }
}

/// Waits until a LISTEN connection is up for the first time (each retries with backoff and
/// logs why it cannot connect); says so every 5 s meanwhile.
async fn wait_for_listen(hub: &Hub) {
    let started = std::time::Instant::now();
    let mut said = Duration::ZERO;
    while !hub.is_listening_somewhere() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if started.elapsed() >= said + Duration::from_secs(5) {
            said = started.elapsed();
            tracing::warn!(waited_secs = said.as_secs(), "waiting for the LISTEN connection before accepting connections");
        }
    }
}
