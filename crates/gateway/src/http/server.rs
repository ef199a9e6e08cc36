//! The HTTP/1.1 accept loop (hyper + hyper-util) that serves the router, with the connection
//! limits `axum::serve` does not have:
//!
//! - **Connection cap** (`--max-connections`): every accepted TCP connection holds a permit
//!   until it closes — an upgraded WebSocket included (the permit lives in its I/O object). A
//!   connection past the cap is answered `503 syncular.unavailable` (§10.1 JSON,
//!   `Connection: close`) and closed without reading it.
//! - **Header-read timeout** (`--http-header-read-timeout-secs`): once the first byte of a
//!   request head arrived, the whole head must arrive within it, else the connection is
//!   dropped (slowloris).
//! - **Idle timeout** (`--http-idle-timeout-secs`): a connection with no request in progress
//!   and no byte in either direction for that long is closed (a fresh connection that sends
//!   nothing, an idle keep-alive connection); and so is one whose response the peer stops
//!   reading (no byte written for that long). A running handler is bounded by
//!   `--request-timeout-secs` instead.
//!
//! WebSocket upgrades (`with_upgrades`) and graceful shutdown work as before: on stop the
//! listener closes, idle connections close at once, in-flight requests finish, and [`serve`]
//! returns when every HTTP connection is done (upgraded sockets are the realtime hub's).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::db::ApiError;
use crate::metrics::Metrics;

/// The limits of [`serve`].
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// A started request head must be complete within this.
    pub header_read_timeout: Duration,
    /// No request and no traffic for this long: the connection is closed.
    pub idle_timeout: Duration,
}

/// The connection cap: permits of open TCP connections (HTTP and upgraded WebSockets).
#[derive(Debug, Clone)]
pub struct Connections {
    permits: Arc<Semaphore>,
    max: usize,
}

impl Connections {
    /// At most `max` connections.
    pub fn new(max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Connections { permits: Arc::new(Semaphore::new(max)), max }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }
}

/// Serves `app` on `listener` until `stop` is cancelled, then drains (see the module docs).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    connections: Connections,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => match connections.permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        // Request/response and socket frames are small and latency-bound: no
                        // Nagle delay on our writes.
                        let _ = stream.set_nodelay(true);
                        tasks.spawn(serve_connection(stream, permit, app.clone(), limits, stop.clone()));
                    }
                    Err(_) => {
                        metrics.error("syncular.unavailable");
                        refuse(&stream, connections.max);
                    }
                },
                // Out of file descriptors and the like: do not spin; per-connection errors
                // (reset before accept) are harmless.
                Err(e) => {
                    if !matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted) {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            },
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// Answers a connection past the cap with a 503 (best effort: one non-blocking write of a
/// fresh socket's first bytes) and closes it.
fn refuse(stream: &TcpStream, max: usize) {
    let body = ApiError::unavailable(format!("the gateway holds its maximum of {max} connections; retry later")).to_json().to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncache-control: no-store\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

async fn serve_connection(stream: TcpStream, permit: OwnedSemaphorePermit, app: Router, limits: HttpLimits, stop: CancellationToken) {
    let state = Arc::new(ConnState::new());
    let io = TokioIo::new(Tracked { inner: stream, state: state.clone(), _permit: permit });
    let service = Service { app, state: state.clone() };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The header-read rule is ours (it starts at the first byte, not when the connection
    // becomes ready); hyper's own would need a timer.
    builder.header_read_timeout(None);
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        let (deadline, rule) = state.deadline(&limits);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            _ = stop.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            () = state.changed.notified() => {}
            () = tokio::time::sleep_until(deadline.into()), if rule != Rule::None => {
                // Recheck: traffic may have moved the deadline.
                let (deadline, rule) = state.deadline(&limits);
                if rule == Rule::None || Instant::now() < deadline {
                    continue;
                }
                match rule {
                    Rule::Idle if !draining => {
                        // No request in progress: hyper closes at once.
                        draining = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    _ => {
                        tracing::debug!(?rule, "HTTP connection timed out, dropping it");
                        return;
                    }
                }
            }
        }
    }
}

/// Which timeout the next deadline enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// A handler runs (bounded by the request timeout): no deadline.
    None,
    /// A request head started and must complete.
    HeaderRead,
    /// A response is being written; the peer must keep reading.
    Stalled,
    /// Nothing in progress.
    Idle,
}

/// What the watchdog of one connection knows (times in ms since `started`).
struct ConnState {
    started: Instant,
    last_activity: AtomicU64,
    /// First byte of the current request head + 1 (0: none).
    head_started: AtomicU64,
    /// When the last response finished.
    idle_since: AtomicU64,
    /// Requests whose response body is not finished.
    in_flight: AtomicUsize,
    /// Handlers running.
    handling: AtomicUsize,
    changed: Notify,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            started: Instant::now(),
            last_activity: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            handling: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.started + Duration::from_millis(ms)
    }

    fn on_read(&self) {
        let now = self.now();
        self.last_activity.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::SeqCst) == 0
            && self.head_started.compare_exchange(0, now + 1, Ordering::SeqCst, Ordering::SeqCst).is_ok()
        {
            self.changed.notify_one();
        }
    }

    fn on_write(&self) {
        self.last_activity.store(self.now(), Ordering::Relaxed);
    }

    fn deadline(&self, limits: &HttpLimits) -> (Instant, Rule) {
        if self.handling.load(Ordering::SeqCst) > 0 {
            return (self.started, Rule::None);
        }
        let last = self.last_activity.load(Ordering::Relaxed);
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return (self.at(last) + limits.idle_timeout, Rule::Stalled);
        }
        match self.head_started.load(Ordering::SeqCst) {
            0 => (self.at(last.max(self.idle_since.load(Ordering::SeqCst))) + limits.idle_timeout, Rule::Idle),
            first => (self.at(first - 1) + limits.header_read_timeout, Rule::HeaderRead),
        }
    }
}

/// The TCP stream of a connection: records traffic for the watchdog and holds the
/// connection's permit (for as long as the stream lives — after an upgrade, the WebSocket's).
struct Tracked {
    inner: TcpStream,
    state: Arc<ConnState>,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.on_read();
        }
        result
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.state.on_write();
        }
        result
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.state.on_write();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router as a hyper service that tells the watchdog when a request starts, when its
/// handler is done and when its response body has been written.
#[derive(Clone)]
struct Service {
    app: Router,
    state: Arc<ConnState>,
}

/// Decrements a counter of [`ConnState`] on drop.
struct Counted {
    state: Arc<ConnState>,
    in_flight: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.in_flight {
            if self.state.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
                self.state.idle_since.store(self.state.now(), Ordering::SeqCst);
            }
        } else {
            self.state.handling.fetch_sub(1, Ordering::SeqCst);
        }
        self.state.changed.notify_one();
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        let state = &self.state;
        state.head_started.store(0, Ordering::SeqCst);
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        state.handling.fetch_add(1, Ordering::SeqCst);
        state.changed.notify_one();
        let in_flight = Counted { state: state.clone(), in_flight: true };
        let handling = Counted { state: state.clone(), in_flight: false };
        let app = self.app.clone();
        Box::pin(async move {
            let response = match app.oneshot(req.map(Body::new)).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            drop(handling);
            Ok(response.map(|body| TrackedBody { body, _in_flight: in_flight }))
        })
    }
}

/// A response body that marks its request finished when hyper drops it (written, or the
/// connection is gone).
struct TrackedBody {
    body: Body,
    _in_flight: Counted,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits { header_read_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(60) }
    }

    #[test]
    fn the_watchdog_picks_the_rule_of_the_connection_phase() {
        let s = ConnState::new();
        let l = limits();
        // Fresh and silent: idle.
        assert_eq!(s.deadline(&l), (s.started + l.idle_timeout, Rule::Idle));
        // First byte of a head: the header-read rule, from that byte.
        s.on_read();
        let (d, rule) = s.deadline(&l);
        assert_eq!(rule, Rule::HeaderRead);
        assert!(d <= Instant::now() + l.header_read_timeout);
        // More bytes do not restart it.
        s.on_read();
        assert_eq!(s.deadline(&l).0, d);
        // The head is complete and the handler runs: no deadline (request timeout).
        s.head_started.store(0, Ordering::SeqCst);
        s.in_flight.fetch_add(1, Ordering::SeqCst);
        s.handling.fetch_add(1, Ordering::SeqCst);
        assert_eq!(s.deadline(&l).1, Rule::None);
        // Handler done, body being written: the peer must keep reading.
        s.handling.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(s.deadline(&l).1, Rule::Stalled);
        // Response written: idle again (keep-alive), and reads while busy were not a head.
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(s.deadline(&l).1, Rule::Idle);
    }

    #[test]
    fn the_cap_counts_open_connections() {
        let c = Connections::new(2);
        let a = c.permits.clone().try_acquire_owned().unwrap();
        let _b = c.permits.clone().try_acquire_owned().unwrap();
        assert_eq!(c.open(), 2);
        assert!(c.permits.clone().try_acquire_owned().is_err());
        drop(a);
        assert_eq!(c.open(), 1);
    }
}
