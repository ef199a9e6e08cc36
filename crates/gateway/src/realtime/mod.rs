//! WebSocket `{mount}/realtime` (§8): sessions, the LISTEN connection(s), per-partition
//! delta passes, batched acks, socket sync rounds, presence and its cross-gateway relay.
//!
//! - [`socket`]: upgrade (auth, caps, `realtime_connect`, hello) and the read loop
//! - [`session`]: per-connection state and the bounded outbound queue + writer
//! - [`hub`]: all sessions; admission, acks, registration refresh, shutdown
//! - [`deltas`]: partition workers, one `realtime_pass` call per burst
//! - [`listen`]: one LISTEN connection per node and notification dispatch (verified with [`keys`])
//! - [`keys`]: the extension's notification key: payload tags, the relay's seal
//! - [`acks`]: batched `realtime_ack`
//! - [`limits`]: gateway-wide round byte budget, session caps, write timeout
//! - [`round`]: §8.7 rounds over the socket
//! - [`presence`], [`relay`]: §8.6 presence, locally and across gateways

pub mod acks;
pub mod deltas;
pub mod hub;
pub mod keys;
pub mod limits;
pub mod listen;
pub mod presence;
pub mod relay;
pub mod round;
pub mod session;
pub mod socket;

pub use hub::{Hub, HubSettings};

/// Locks a mutex, taking it over from a holder that panicked (the state stays usable).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
