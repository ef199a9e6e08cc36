//! Gateway-wide limits of the realtime side that no single session can enforce on its own:
//! the byte budget of socket rounds ([`ByteBudget`]: requests being reassembled and responses
//! being sent, `--round-buffer-bytes`), the per-actor session cap ([`ActorCap`],
//! `--max-sessions-per-actor`) and the socket write timeout (`--write-timeout-secs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::ApiError;

/// The realtime limits shared by every session (cheap to clone: the budget and the counts
/// are shared).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest a socket may take to accept one frame; a socket that does not drain is dropped.
    pub write_timeout: Duration,
    /// Bytes held by socket rounds, gateway-wide.
    pub round_bytes: ByteBudget,
    /// Sessions per (partition, actor).
    pub actors: ActorCap,
}

impl Limits {
    /// Limits with these values.
    pub fn new(write_timeout: Duration, round_buffer_bytes: usize, max_sessions_per_actor: usize) -> Self {
        Limits {
            write_timeout,
            round_bytes: ByteBudget::new(round_buffer_bytes),
            actors: ActorCap::new(max_sessions_per_actor),
        }
    }
}

#[derive(Debug)]
struct BudgetInner {
    limit: usize,
    used: AtomicUsize,
}

/// A gateway-wide byte budget. Holders take [`Lease`]s that grow while they buffer more and
/// give everything back when dropped; a lease that would exceed the budget is refused (the
/// caller decides what refusal means — for socket rounds: close the socket with 1013).
#[derive(Debug, Clone)]
pub struct ByteBudget(Arc<BudgetInner>);

impl ByteBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        ByteBudget(Arc::new(BudgetInner { limit, used: AtomicUsize::new(0) }))
    }

    /// Bytes currently leased.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::SeqCst)
    }

    /// The budget, bytes.
    pub fn limit(&self) -> usize {
        self.0.limit
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
        let inner = &self.budget.0;
        let mut current = inner.used.load(Ordering::SeqCst);
        loop {
            let Some(next) = current.checked_add(n).filter(|&v| v <= inner.limit) else { return false };
            match inner.used.compare_exchange_weak(current, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    self.bytes += n;
                    return true;
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Gives back `n` bytes (at most what the lease holds).
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.budget.0.used.fetch_sub(n, Ordering::SeqCst);
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A new empty lease on the same budget.
    pub fn fresh(&self) -> Lease {
        self.budget.lease()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release(self.bytes);
    }
}

/// Sessions per (partition, actor): one actor (one token, or one forged dev header) cannot
/// take the whole `--max-sessions`.
#[derive(Debug, Clone)]
pub struct ActorCap {
    max: usize,
    counts: Arc<Mutex<HashMap<(String, String), usize>>>,
}

impl ActorCap {
    /// At most `max` sessions per actor.
    pub fn new(max: usize) -> Self {
        ActorCap { max, counts: Arc::new(Mutex::new(HashMap::new())) }
    }

    /// Reserves one session of `actor` in `partition` until the slot is dropped.
    ///
    /// Errors: `sync.websocket_connection_limit` (429, retryable) when the actor already holds
    /// `--max-sessions-per-actor` sessions.
    pub fn reserve(&self, partition: &str, actor: &str) -> Result<ActorSlot, ApiError> {
        let key = (partition.to_owned(), actor.to_owned());
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(key.clone()).or_insert(0);
        if *n >= self.max {
            let n = *n;
            return Err(ApiError::code(
                syncular_protocol::ErrorCode::WebsocketConnectionLimit,
                format!("the actor already has {n} realtime sessions (limit {})", self.max),
            ));
        }
        *n += 1;
        Ok(ActorSlot { cap: self.clone(), key })
    }

    /// Sessions `actor` holds in `partition`.
    pub fn count(&self, partition: &str, actor: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(&(partition.to_owned(), actor.to_owned())).copied().unwrap_or(0)
    }
}

/// One reserved session of an actor; released on drop.
#[derive(Debug)]
pub struct ActorSlot {
    cap: ActorCap,
    key: (String, String),
}

impl Drop for ActorSlot {
    fn drop(&mut self) {
        let mut counts = self.cap.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.key);
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
        a.release(10);
        assert_eq!((a.bytes(), budget.used()), (50, 90));
        drop(a);
        assert_eq!(budget.used(), 40);
        assert!(!b.try_grow(usize::MAX), "no overflow");
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn actor_slots_are_capped_per_partition_and_actor() {
        let cap = ActorCap::new(2);
        let s1 = cap.reserve("p", "a").unwrap();
        let _s2 = cap.reserve("p", "a").unwrap();
        let e = cap.reserve("p", "a").unwrap_err();
        assert_eq!((e.status.as_u16(), e.code_str()), (429, "sync.websocket_connection_limit"));
        let _other = cap.reserve("p", "b").unwrap();
        let _other_partition = cap.reserve("q", "a").unwrap();
        drop(s1);
        assert_eq!(cap.count("p", "a"), 1);
        assert!(cap.reserve("p", "a").is_ok());
    }
}
