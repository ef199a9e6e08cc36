//! The pruning fence (SPEC §4.6): a transaction-scoped advisory lock per
//! partition that keeps a log reader from missing commits deleted under it.
//!
//! A pull (and a realtime delta call) reads `horizonSeq` once and then walks
//! the log in later statements, each with a fresh snapshot under READ
//! COMMITTED. Were commits above its cursor deleted between those
//! statements, it would skip them silently. So a reader takes the fence in
//! **shared** mode *before* the statement that reads the bounds (by a direct
//! call of the lock function, [`share`] and `store::round::context::read`:
//! no statement of its own), and a pruning
//! batch takes it **exclusively** as its first lock, then reads the horizon
//! and deletes at or below it. Pruning advances the horizon in an earlier,
//! already committed transaction. Either the batch waits for the reader to
//! finish, or the reader's bounds statement starts after the batch committed
//! and sees the advanced horizon (its cursor below it → `reset`). Under
//! REPEATABLE READ / SERIALIZABLE the reader's snapshot predates the batch
//! and still sees every deleted row: equally consistent.
//!
//! Key: the two-`int4` advisory form `(FENCE_CLASS, fnv1a32(partition))` —
//! a separate lock space from the push locks' `bigint` keys. Two partitions
//! sharing a hash only share waits, never correctness.
//!
//! **The write fence** (`(WRITE_FENCE_CLASS, fnv1a32(partition))`, same
//! shape) orders the partition's writers against a drop batch
//! (`engine::lifecycle::drop`): every sync request, server commit, captured
//! statement, realtime open or ack and blob upload of the partition takes it
//! **shared** before it writes a row ([`share_writes`]; after the schema
//! fence where it takes that one), and a drop batch takes it
//! **exclusively** ([`exclusive_writes`]) before its first delete. A writer
//! in flight therefore finishes before a batch's deletes start (they see
//! and delete its rows), and a writer arriving meanwhile waits for the
//! batch to commit; after the last batch it meets an unknown partition and
//! creates it anew. Without it a push whose rows were still uncommitted
//! during the last batch outlived the drop, half-deleted. Pruning does not
//! take it: a push-only transaction never holds a pruning batch off.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::spi::subtransaction;
use crate::store::{StoreError, StoreResult};

/// The fence's first key ("SYNF").
pub const FENCE_CLASS: i32 = 0x5359_4E46;

/// The fence's second key: 32-bit FNV-1a of the partition's UTF-8 bytes.
pub fn fence_key(partition: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in partition.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as i32
}

/// Takes the fence of `partition` in shared mode (a log reader), until the
/// end of the transaction, by a direct call of the lock function (no
/// statement): the caller's next statement takes its snapshot after it.
/// Waits at most one pruning batch. Errors: none of its own (a cancel or
/// deadlock while waiting unwinds as a Postgres ERROR); `StoreResult` for
/// its callers' `?`.
pub fn share(partition: &str) -> StoreResult<()> {
    crate::store::push::locks::take_shared_pair(FENCE_CLASS, fence_key(partition));
    Ok(())
}

/// The write fence's first key ("SYNW"; module docs).
pub const WRITE_FENCE_CLASS: i32 = 0x5359_4E57;

/// Takes the write fence of `partition` shared (a writer; module docs), until
/// the end of the transaction, by a direct call of the lock function (no
/// statement). Waits at most one drop batch. Errors: none of its own (a
/// cancel, `lock_timeout` or deadlock while waiting unwinds as a Postgres
/// ERROR).
pub fn share_writes(partition: &str) {
    crate::store::push::locks::take_shared_pair(WRITE_FENCE_CLASS, fence_key(partition));
}

/// Takes the write fence of `partition` exclusively (a drop batch; module
/// docs), until the end of the transaction, waiting for every writer in
/// flight like any lock (the session's `lock_timeout` and
/// `statement_timeout` apply: 55P03 / 57014 unwind as Postgres ERRORs).
pub fn exclusive_writes(partition: &str) {
    crate::store::push::locks::take_exclusive_pair(WRITE_FENCE_CLASS, fence_key(partition));
}

/// Takes the fence of `partition` exclusively (a pruning batch), waiting at
/// most `wait_ms` in the lock queue (readers arriving meanwhile queue behind
/// it for no longer). Returns `false` when it timed out (a long transaction
/// holds the fence shared; the caller retries later). Errors: SPI failures
/// other than the lock timeout.
pub fn exclusive(partition: &str, wait_ms: i32) -> StoreResult<bool> {
    let previous = Spi::get_one::<String>("SELECT pg_catalog.current_setting('lock_timeout')")
        .map_err(StoreError::spi("fence_exclusive"))?
        .unwrap_or_else(|| "0".to_owned());
    let outcome = subtransaction::run(|| {
        Spi::connect_mut(|client| {
            plan_cache::execute(
                client,
                "SELECT pg_catalog.set_config('lock_timeout', $3, true), \
                        pg_catalog.pg_advisory_xact_lock($1, $2)",
                None,
                &[
                    DatumWithOid::from(FENCE_CLASS),
                    DatumWithOid::from(fence_key(partition)),
                    DatumWithOid::from(format!("{wait_ms}ms").as_str()),
                ],
            )?;
            Ok(())
        })
        .map_err(StoreError::spi("fence_exclusive"))
    });
    match outcome {
        Ok(result) => {
            result?;
            // The lock outlives the released subtransaction; the setting must not.
            Spi::connect_mut(|client| {
                client.update(
                    "SELECT pg_catalog.set_config('lock_timeout', $1, true)",
                    None,
                    &[DatumWithOid::from(previous.as_str())],
                )?;
                Ok(())
            })
            .map_err(StoreError::spi("fence_exclusive"))?;
            Ok(true)
        }
        Err(e) if e.sqlstate == "55P03" => Ok(false),
        Err(e) => Err(StoreError::new("fence_exclusive", format!("{} ({})", e.message, e.sqlstate))),
    }
}
