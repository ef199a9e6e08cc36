//! The commit notification statement (DESIGN §4, SPEC §8.3 fanout): a
//! `pg_notify` issued inside the caller's transaction, so Postgres delivers
//! it at COMMIT, in commit order, and never for a rollback.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

extern "C-unwind" {
    /// `commands/async.h`: queues a notification for the end of the current
    /// (sub)transaction — what `pg_notify` calls.
    fn Async_Notify(channel: *const std::os::raw::c_char, payload: *const std::os::raw::c_char);
}

/// Queues `NOTIFY channel, payload` without an SQL statement (the hot path:
/// one per applied commit): delivered at COMMIT, discarded with a rolled-back
/// (sub)transaction, exactly as `pg_notify`. Errors: a channel or payload
/// with a NUL byte (`StoreError`); Postgres's own checks (payload of 8000
/// bytes or more, 22023) raise.
pub fn queue_notification_direct(channel: &str, payload: &str) -> StoreResult<()> {
    let channel = std::ffi::CString::new(channel).map_err(|_| StoreError::new("queue_notification", "NUL byte in channel"))?;
    let payload = std::ffi::CString::new(payload).map_err(|_| StoreError::new("queue_notification", "NUL byte in payload"))?;
    // SAFETY: two valid NUL-terminated strings that outlive the call (Async_Notify
    // copies them); the boundary guard turns a Postgres ERROR into a Rust unwind,
    // and the closure holds nothing that needs dropping.
    unsafe { pgrx::pg_sys::ffi::pg_guard_ffi_boundary(|| Async_Notify(channel.as_ptr(), payload.as_ptr())) };
    Ok(())
}

/// Queues `pg_notify(channel, payload)` in the current (sub)transaction.
/// Errors: SPI failures (a payload over 8000 bytes is a Postgres ERROR).
pub fn queue_notification(channel: &str, payload: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "SELECT pg_notify($1, $2)",
            None,
            &[DatumWithOid::from(channel), DatumWithOid::from(payload)],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("queue_notification"))
}

/// The NOTIFY signing key (32 bytes, `syncular.sync_notification_key`), created with
/// `gen_random_uuid()` randomness (244 random bits) the first time it is needed; concurrent
/// creators agree (`ON CONFLICT DO NOTHING`, then read). Errors: SPI failures, or no key
/// after creating one (a broken invariant).
pub fn notification_key() -> StoreResult<Vec<u8>> {
    const READ: &str = "SELECT key FROM syncular.sync_notification_key WHERE id = 1";
    let read = || {
        Spi::connect_mut(|client| -> Result<Option<Vec<u8>>, pgrx::spi::Error> {
            let table = plan_cache::execute(client, READ, Some(1), &[])?;
            if table.is_empty() {
                return Ok(None);
            }
            table.first().get_one::<Vec<u8>>()
        })
        .map_err(StoreError::spi("notification_key"))
    };
    if let Some(key) = read()? {
        return Ok(key);
    }
    Spi::connect_mut(|client| {
        client.update(
            "INSERT INTO syncular.sync_notification_key (id, key) \
             VALUES (1, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')) \
             ON CONFLICT (id) DO NOTHING",
            None,
            &[],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("create_notification_key"))?;
    read()?.ok_or_else(|| StoreError::new("notification_key", "no key after creating one"))
}
