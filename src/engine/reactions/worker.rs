//! Reaction delivery (SPEC §6.9 "Delivery state machine", "Terminal
//! retention"): argument checks, the clock and the retry decision around
//! the statements of [`crate::store::reactions::worker`]. Every "now" is
//! [`crate::engine::clock::now_ms`] (`syncular.now_ms` in tests).
//!
//! A worker claims with a fresh opaque lease-owner token, renews each row
//! with [`extend_lease`] before starting its handler (a lost lease answers
//! NULL: skip the handler), then [`complete`]s or [`fail`]s it. Every call
//! but a claim compares the lease owner: a stale worker changes nothing.

use serde_json::{json, Value};

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::reactions::worker::{self as store, Claim, ReactionRow};

/// Longest lease-owner token, in bytes.
pub const MAX_OWNER_BYTES: usize = 256;
/// Longest failure code, in bytes.
pub const MAX_CODE_BYTES: usize = 256;
/// Largest failure details, compact JSON bytes.
pub const MAX_DETAILS_BYTES: usize = 8192;
/// Most rows one claim leases.
pub const MAX_CLAIM_ROWS: i32 = 1000;
/// Longest lease, ms (one day).
pub const MAX_LEASE_MS: i64 = 86_400_000;
/// Most rows one listing returns.
pub const MAX_LIST_ROWS: i32 = 10_000;

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::host(HostCode::InvalidArgument, message)
}

fn check_owner(owner: &str) -> EngineResult<()> {
    if owner.is_empty() || owner.len() > MAX_OWNER_BYTES {
        return Err(invalid(format!("lease_owner must be 1–{MAX_OWNER_BYTES} bytes, got {}", owner.len())));
    }
    Ok(())
}

fn check_lease_ms(lease_ms: i64) -> EngineResult<()> {
    if !(1..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(invalid(format!("lease_ms must be 1 … {MAX_LEASE_MS}, got {lease_ms}")));
    }
    Ok(())
}

/// Leases at most `max_rows` due rows of `partition` whose type is one of
/// `types` (pending rows due now, and leases expired now) to `lease_owner`
/// for `lease_ms`, incrementing their attempts; rows locked by a concurrent
/// claim are skipped, so concurrent workers get disjoint leases. Ordered by
/// enqueue time, then key. Errors: `syncular.invalid_argument` (an empty or
/// over-long owner, `max_rows` outside 1 … 1000, `lease_ms` outside 1 …
/// 86,400,000, an out-of-range `syncular.now_ms`).
pub fn claim(partition: &str, lease_owner: &str, types: &[String], max_rows: i32, lease_ms: i64) -> EngineResult<Vec<ReactionRow>> {
    check_owner(lease_owner)?;
    check_lease_ms(lease_ms)?;
    if !(1..=MAX_CLAIM_ROWS).contains(&max_rows) {
        return Err(invalid(format!("max_rows must be 1 … {MAX_CLAIM_ROWS}, got {max_rows}")));
    }
    if types.is_empty() {
        return Ok(Vec::new());
    }
    let now_ms = clock::now_ms()?;
    Ok(store::claim(&Claim {
        partition,
        lease_owner,
        types,
        max_rows: i64::from(max_rows),
        now_ms,
        lease_expires_at_ms: now_ms.saturating_add(lease_ms),
    })?)
}

/// Moves the expiry of `lease_owner`'s lease on the row to now + `lease_ms`;
/// `None` when the row is not leased to `lease_owner` (another worker
/// reclaimed it, or it completed/failed). Errors: `syncular.invalid_argument`.
pub fn extend_lease(partition: &str, key: &str, lease_owner: &str, lease_ms: i64) -> EngineResult<Option<i64>> {
    check_owner(lease_owner)?;
    check_lease_ms(lease_ms)?;
    let now_ms = clock::now_ms()?;
    Ok(store::extend_lease(partition, key, lease_owner, now_ms.saturating_add(lease_ms))?)
}

/// Marks the row completed if `lease_owner` holds its lease; `false`
/// otherwise. Errors: `syncular.invalid_argument`.
pub fn complete(partition: &str, key: &str, lease_owner: &str) -> EngineResult<bool> {
    check_owner(lease_owner)?;
    Ok(store::complete(partition, key, lease_owner, clock::now_ms()?)?)
}

/// How a failed attempt is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First retry delay, ms.
    pub initial_ms: i64,
    /// Largest delay, ms.
    pub max_ms: i64,
}

impl Backoff {
    /// The §6.9 defaults: 1 s, 5 min.
    pub const DEFAULT: Backoff = Backoff { initial_ms: 1000, max_ms: 300_000 };

    /// `min(max, initial × 2^(attempt − 1))`, saturating.
    pub fn delay_ms(self, attempt: i32) -> i64 {
        let shift = u32::try_from(attempt.saturating_sub(1).max(0)).unwrap_or(0);
        let scaled = if shift >= 62 { i64::MAX } else { self.initial_ms.saturating_mul(1i64 << shift) };
        scaled.min(self.max_ms)
    }
}

/// Records a failed attempt of `lease_owner`'s lease: `permanent`, or
/// attempts ≥ maxAttempts → `dead-letter` (failure time in
/// `available_at_ms`); else `pending` again, due after the [`Backoff`]
/// delay. `last_failure` = `{"code", "atMs", "details"?}`. Returns the new
/// status, `None` when the row is not leased to `lease_owner`. Errors:
/// `syncular.invalid_argument` (an empty or over-256-byte code, details over
/// 8,192 bytes, a negative backoff or max below initial).
pub fn fail(
    partition: &str,
    key: &str,
    lease_owner: &str,
    code: &str,
    details: Option<&Value>,
    permanent: bool,
    backoff: Backoff,
) -> EngineResult<Option<&'static str>> {
    check_owner(lease_owner)?;
    if code.is_empty() || code.len() > MAX_CODE_BYTES {
        return Err(invalid(format!("code must be 1–{MAX_CODE_BYTES} bytes, got {}", code.len())));
    }
    let details = details.filter(|d| !d.is_null());
    if let Some(d) = details {
        let bytes = d.to_string().len();
        if bytes > MAX_DETAILS_BYTES {
            return Err(invalid(format!("details are {bytes} bytes as JSON; the limit is {MAX_DETAILS_BYTES}")));
        }
    }
    if backoff.initial_ms < 0 || backoff.max_ms < backoff.initial_ms {
        return Err(invalid(format!(
            "backoff must satisfy 0 <= initial_backoff_ms <= max_backoff_ms, got {} and {}",
            backoff.initial_ms, backoff.max_ms
        )));
    }
    let now_ms = clock::now_ms()?;
    let Some((attempts, max_attempts)) = store::lock_lease(partition, key, lease_owner)? else {
        return Ok(None);
    };
    let mut failure = json!({"code": code, "atMs": now_ms});
    if let Some(d) = details {
        failure["details"] = d.clone();
    }
    let (status, at) = if permanent || attempts >= max_attempts {
        ("dead-letter", now_ms)
    } else {
        ("pending", now_ms.saturating_add(backoff.delay_ms(attempts)))
    };
    Ok(store::record_failure(partition, key, lease_owner, status, at, &failure)?.then_some(status))
}

/// The operator's reset of a dead-lettered row: pending, due now, attempts
/// 0, failure cleared. `false` when the row is not dead-lettered (or a
/// concurrent cleanup deleted it first).
pub fn retry_dead_letter(partition: &str, key: &str) -> EngineResult<bool> {
    Ok(store::retry_dead_letter(partition, key, clock::now_ms()?)?)
}

/// What one cleanup pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Completed rows deleted.
    pub completed: i64,
    /// Dead-lettered rows deleted.
    pub dead_lettered: i64,
    /// The pass stopped at its row limit: call again.
    pub may_have_more: bool,
}

/// One bounded cleanup pass over `partition`'s terminal rows: `completed`
/// rows completed strictly before now − `completed_retention_ms`, then
/// `dead-letter` rows failed strictly before now − `dead_letter_retention_ms`,
/// at most `max_rows` in all. Pending and leased rows (expired leases
/// included) are never touched. Errors: `syncular.invalid_argument` (a
/// negative retention, `max_rows` below 1).
pub fn prune(partition: &str, completed_retention_ms: i64, dead_letter_retention_ms: i64, max_rows: i32) -> EngineResult<Pruned> {
    if completed_retention_ms < 0 || dead_letter_retention_ms < 0 {
        return Err(invalid("retentions must not be negative"));
    }
    if max_rows < 1 {
        return Err(invalid(format!("max_rows must be at least 1, got {max_rows}")));
    }
    let now_ms = clock::now_ms()?;
    let limit = i64::from(max_rows);
    let completed = store::prune(partition, false, now_ms.saturating_sub(completed_retention_ms), limit)?;
    if completed >= limit {
        return Ok(Pruned { completed, dead_lettered: 0, may_have_more: true });
    }
    let left = limit - completed;
    let dead_lettered = store::prune(partition, true, now_ms.saturating_sub(dead_letter_retention_ms), left)?;
    Ok(Pruned { completed, dead_lettered, may_have_more: dead_lettered >= left })
}

/// At most `max_rows` rows of `partition` (of `status` when given), oldest
/// first. Errors: `syncular.invalid_argument` (an unknown status, `max_rows`
/// outside 1 … 10,000).
pub fn list(partition: &str, status: Option<&str>, max_rows: i32) -> EngineResult<Vec<ReactionRow>> {
    if let Some(s) = status {
        if !matches!(s, "pending" | "leased" | "completed" | "dead-letter") {
            return Err(invalid(format!("status must be pending, leased, completed or dead-letter, got {s:?}")));
        }
    }
    if !(1..=MAX_LIST_ROWS).contains(&max_rows) {
        return Err(invalid(format!("max_rows must be 1 … {MAX_LIST_ROWS}, got {max_rows}")));
    }
    Ok(store::list(partition, status, i64::from(max_rows))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_initial_and_caps() {
        let b = Backoff::DEFAULT;
        assert_eq!([1, 2, 3, 9, 10].map(|a| b.delay_ms(a)), [1000, 2000, 4000, 256_000, 300_000]);
        assert_eq!(b.delay_ms(0), 1000);
        assert_eq!(b.delay_ms(i32::MAX), 300_000);
        assert_eq!(Backoff { initial_ms: i64::MAX / 2, max_ms: i64::MAX }.delay_ms(5), i64::MAX);
    }
}
