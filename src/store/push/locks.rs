//! The push's request-start locks (SPEC §2.3 exactly-once, DESIGN §4):
//! every transaction-scoped advisory lock a push request needs, taken in
//! ascending key order, so two requests never wait on each other in
//! opposite orders. They are taken by calling the lock functions behind
//! `pg_advisory_xact_lock` directly ([`take_exclusive`], [`take_shared_pair`]):
//! the same lock tags as the SQL functions, no statement to plan and run.
//!
//! Keys are 64-bit FNV-1a hashes ([`idempotency_key`], [`row_key`]) in the
//! database-wide advisory-lock space: a collision with another key (ours or
//! the host's) only makes two transactions wait for one another, never
//! changes an outcome. Each key is one entry of the shared lock table
//! (`max_locks_per_transaction`): a request takes at most one per distinct
//! `clientCommitId` plus one per row bucket ([`ROW_BUCKETS`] per partition).

use pgrx::pg_sys;
use pgrx::IntoDatum;

use crate::store::StoreResult;

/// Row buckets per partition: rows are locked by bucket, so one request
/// takes at most this many row locks whatever its size.
pub const ROW_BUCKETS: u64 = 1024;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = FNV_OFFSET;
    for part in parts {
        for b in part.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    h
}

/// The lock serializing deliveries of one `(partition, clientId,
/// clientCommitId)`: a duplicate delivery waits for the first one's
/// transaction, then finds its stored outcome.
pub fn idempotency_key(partition: &str, client_id: &str, client_commit_id: &str) -> i64 {
    fnv1a(&[b"syncular:commit", partition.as_bytes(), client_id.as_bytes(), client_commit_id.as_bytes()]) as i64
}

/// The lock of the bucket holding row `row_id` of IR table `table` in
/// `partition`: pushes writing the same rows take their buckets in one
/// ascending pass before any write, so they cannot deadlock on the rows.
pub fn row_key(partition: &str, table: &str, row_id: &str) -> i64 {
    let bucket = fnv1a(&[table.as_bytes(), row_id.as_bytes()]) % ROW_BUCKETS;
    fnv1a(&[b"syncular:row", partition.as_bytes(), &bucket.to_be_bytes()]) as i64
}

/// The lock serializing every push of `partition` while a whole-commit
/// validator (§6.8) is registered: taken after the request's other locks
/// (so it closes no cycle with them), held to the transaction's end, so no
/// two commits of the partition are validated against candidate states that
/// exclude one another.
pub fn partition_key(partition: &str) -> i64 {
    fnv1a(&[b"syncular:partition", partition.as_bytes()]) as i64
}

/// The lock serializing uploads of one blob of `partition` (§5.9.3): two
/// identical uploads run one after the other, so the bytes are stored once
/// and the second one finds them present.
pub fn blob_key(partition: &str, blob_id: &str) -> i64 {
    fnv1a(&[b"syncular:blob", partition.as_bytes(), blob_id.as_bytes()]) as i64
}

/// `keys` ascending, each once: the order every taker of these locks uses.
pub fn ordered(mut keys: Vec<i64>) -> Vec<i64> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Takes `pg_advisory_xact_lock` on every key (held to the end of the
/// caller's transaction), in ascending order; duplicates are taken once.
/// Blocks while another transaction holds one of them. Errors: a deadlock
/// with a lock taken outside this order (another extension, the host) raises
/// 40P01; a full lock table 53200 (Postgres ERRORs, they unwind).
pub fn lock_keys(keys: Vec<i64>) -> StoreResult<()> {
    take_exclusive(&ordered(keys));
    Ok(())
}

/// `pg_advisory_xact_lock(key)` for each of `keys`, in the given order (the
/// callers pass [`ordered`] keys), without an SQL statement: a lock taken
/// here is held when the caller's next statement takes its snapshot, as
/// after a statement of its own. Postgres ERRORs (deadlock 40P01, a full
/// lock table 53200, a cancel while waiting) unwind.
pub fn take_exclusive(keys: &[i64]) {
    for key in keys {
        // SAFETY: a V1 C function of one non-null int8 argument returning void,
        // called from the backend's main thread inside a transaction.
        unsafe {
            pgrx::fcinfo::direct_function_call_as_datum(pg_sys::pg_advisory_xact_lock_int8, &[key.into_datum()]);
        }
    }
}

/// `pg_advisory_xact_lock(class, key)` (the two-int4 form, exclusive),
/// without an SQL statement; see [`take_exclusive`].
pub fn take_exclusive_pair(class: i32, key: i32) {
    // SAFETY: a V1 C function of two non-null int4 arguments returning void,
    // called from the backend's main thread inside a transaction.
    unsafe {
        pgrx::fcinfo::direct_function_call_as_datum(
            pg_sys::pg_advisory_xact_lock_int4,
            &[class.into_datum(), key.into_datum()],
        );
    }
}

/// `pg_advisory_xact_lock_shared(class, key)` (the two-int4 form), without
/// an SQL statement; see [`take_exclusive`].
pub fn take_shared_pair(class: i32, key: i32) {
    // SAFETY: a V1 C function of two non-null int4 arguments returning void,
    // called from the backend's main thread inside a transaction.
    unsafe {
        pgrx::fcinfo::direct_function_call_as_datum(
            pg_sys::pg_advisory_xact_lock_shared_int4,
            &[class.into_datum(), key.into_datum()],
        );
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn keys_are_stable_and_separate_their_inputs() {
        // Fixed values: every backend (and every build) must compute the same keys.
        assert_eq!(fnv1a(&[]), FNV_OFFSET);
        assert_ne!(idempotency_key("p", "c", "k"), idempotency_key("p", "ck", ""));
        assert_ne!(idempotency_key("p", "c", "k"), idempotency_key("q", "c", "k"));
        assert_eq!(row_key("p", "tasks", "r1"), row_key("p", "tasks", "r1"));
        assert_ne!(row_key("p", "tasks", "r1"), row_key("q", "tasks", "r1"));
        // Buckets: at most ROW_BUCKETS distinct row keys per partition.
        let distinct: std::collections::HashSet<i64> =
            (0..20_000).map(|i| row_key("p", "tasks", &format!("r{i}"))).collect();
        assert!(distinct.len() as u64 <= ROW_BUCKETS && distinct.len() > 900, "{}", distinct.len());
    }
}
