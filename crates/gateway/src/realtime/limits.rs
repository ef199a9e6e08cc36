//! Gateway-wide limits of the realtime side that no single session can enforce on its own:
//! the byte budget of socket rounds ([`ByteBudget`]: requests being reassembled and responses
//! being sent, `--round-buffer-bytes`), the session caps ([`SessionCaps`]: `--max-sessions`,
//! `--max-sessions-per-client`, `--max-sessions-per-actor`) and the socket write timeout
//! (`--write-timeout-secs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use syncular_protocol::ErrorCode;

use super::lock;
use crate::db::ApiError;

/// The realtime limits shared by every session (cheap to clone: the budget is shared).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest a socket may take to accept one frame; a socket that does not drain is dropped.
    pub write_timeout: Duration,
    /// Bytes held by socket rounds, gateway-wide.
    pub round_bytes: ByteBudget,
    /// Sessions per (partition, actor).
    pub max_sessions_per_actor: usize,
}

impl Limits {
    /// Limits with these values.
    pub fn new(write_timeout: Duration, round_buffer_bytes: usize, max_sessions_per_actor: usize) -> Self {
        Limits { write_timeout, round_bytes: ByteBudget::new(round_buffer_bytes), max_sessions_per_actor }
    }
}

/// A gateway-wide byte budget. Holders take [`Lease`]s that grow while they buffer more and
/// give everything back when dropped; a lease that would exceed the budget is refused (the
/// caller decides what refusal means — for socket rounds: close the socket with 1013).
#[derive(Debug, Clone)]
pub struct ByteBudget {
    limit: usize,
    used: Arc<AtomicUsize>,
}

impl ByteBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        ByteBudget { limit, used: Arc::default() }
    }

    /// Bytes currently leased.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// An empty lease.
    pub fn lease(&self) -> Lease {
        Lease { budget: self.clone(), bytes: 0 }
    }
}

/// Bytes taken from a [`ByteBudget`]; returned on drop.
#[derive(Debug)]
pub struct Lease {
    budget: ByteBudget,
    bytes: usize,
}

impl Lease {
    /// Takes `n` more bytes when the budget has room (all or nothing).
    pub fn try_grow(&mut self, n: usize) -> bool {
        let limit = self.budget.limit;
        let fits = |used: usize| used.checked_add(n).filter(|&v| v <= limit);
        let grown = self.budget.used.fetch_update(Ordering::SeqCst, Ordering::SeqCst, fits);
        self.bytes += if grown.is_ok() { n } else { 0 };
        grown.is_ok()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// What a session counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Cap {
    /// (partition, actor, clientId): the actor is part of it so another actor presenting a
    /// victim's clientId cannot take the victim's slots.
    Client(String, String, String),
    /// The whole gateway.
    Total,
    /// (partition, actor): one actor (one token, or one forged dev header) cannot take the
    /// whole `--max-sessions`.
    Actor(String, String),
}

/// The session counts, checked against `--max-sessions-per-client`, `--max-sessions` and
/// `--max-sessions-per-actor` in that order.
#[derive(Debug)]
pub struct SessionCaps {
    max: [usize; 3],
    counts: Mutex<HashMap<Cap, usize>>,
}

impl SessionCaps {
    /// At most `per_client`, `total` and `per_actor` sessions.
    pub fn new(per_client: usize, total: usize, per_actor: usize) -> Arc<Self> {
        Arc::new(SessionCaps { max: [per_client, total, per_actor], counts: Mutex::default() })
    }

    /// Reserves one session of (partition, actor, clientId) until the slot is dropped.
    ///
    /// Errors: `sync.websocket_connection_limit` (429, retryable) when a cap is reached.
    pub fn reserve(self: &Arc<Self>, partition: &str, actor: &str, client: &str) -> Result<CapSlot, ApiError> {
        let (p, a) = (partition.to_owned(), actor.to_owned());
        let caps = [Cap::Client(p.clone(), a.clone(), client.to_owned()), Cap::Total, Cap::Actor(p, a)];
        let mut counts = lock(&self.counts);
        for (cap, max) in caps.iter().zip(self.max) {
            let n = counts.get(cap).copied().unwrap_or(0);
            if n >= max {
                let message = match cap {
                    Cap::Client(..) => format!("clientId already has {n} realtime sessions (limit {max})"),
                    Cap::Total => format!("the gateway holds its maximum of {max} realtime sessions"),
                    Cap::Actor(..) => format!("the actor already has {n} realtime sessions (limit {max})"),
                };
                return Err(ApiError::code(ErrorCode::WebsocketConnectionLimit, message));
            }
        }
        for cap in &caps {
            *counts.entry(cap.clone()).or_default() += 1;
        }
        Ok(CapSlot { caps: self.clone(), held: caps })
    }

    /// Sessions held gateway-wide.
    pub fn total(&self) -> usize {
        lock(&self.counts).get(&Cap::Total).copied().unwrap_or(0)
    }
}

/// One reserved session; released on drop.
#[derive(Debug)]
pub struct CapSlot {
    caps: Arc<SessionCaps>,
    held: [Cap; 3],
}

impl Drop for CapSlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.caps.counts);
        for cap in &self.held {
            if let Some(n) = counts.get_mut(cap) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(cap);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_stay_within_the_budget_and_return_on_drop() {
        let budget = ByteBudget::new(100);
        let mut a = budget.lease();
        assert!(a.try_grow(60));
        let mut b = budget.lease();
        assert!(!b.try_grow(41), "all or nothing");
        assert!(b.try_grow(40));
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        assert!(!b.try_grow(usize::MAX), "no overflow");
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn sessions_are_capped_per_client_per_actor_and_in_all() {
        let caps = SessionCaps::new(2, 5, 3);
        let message = |e: ApiError| e.body["message"].as_str().unwrap_or_default().to_owned();
        let s1 = caps.reserve("p", "a", "c").unwrap();
        let _s2 = caps.reserve("p", "a", "c").unwrap();
        let e = caps.reserve("p", "a", "c").unwrap_err();
        assert_eq!((e.status.as_u16(), e.code_str()), (429, "sync.websocket_connection_limit"));
        assert!(message(e).contains("clientId already has 2"));
        // Another actor presenting the same clientId has its own slots.
        let _other_actor = caps.reserve("p", "b", "c").unwrap();
        let _s3 = caps.reserve("p", "a", "d").unwrap();
        assert!(message(caps.reserve("p", "a", "e").unwrap_err()).contains("the actor already has 3"));
        let _other_partition = caps.reserve("q", "a", "c").unwrap();
        assert_eq!(caps.total(), 5);
        assert!(message(caps.reserve("r", "z", "z").unwrap_err()).contains("maximum of 5"));
        drop(s1);
        assert_eq!(caps.total(), 4);
        assert!(caps.reserve("p", "a", "c").is_ok());
    }
}
