//! Commit notifications for realtime fanout (DESIGN §4; the reference
//! server's `postgres-fanout` format).
//!
//! One notification per applied commit that emitted changes, queued inside
//! the commit's (sub)transaction: channel [`COMMIT_CHANNEL`], payload
//! `<base64url(partition)>:<commitSeq>:<tag>` (unpadded RFC 4648 §5 base64url
//! of the partition's UTF-8 bytes, so a `:` in a partition cannot corrupt the
//! payload; the tag is an HMAC under the extension's notification key — any
//! role may NOTIFY, so gateways verify it; `syncular_protocol::notification`).
//! No row data ever travels in a notification. A rejected commit, or an
//! applied commit with no changes, queues nothing.
//!
//! Host-initiated registration refreshes (§8.7, `syncular.refresh_scopes`)
//! go to [`SCOPES_CHANNEL`]. Postgres delivers both channels to one
//! listening connection in commit order, so a gateway that handles them in
//! arrival order refreshes an actor's sessions before it serves any commit
//! made after the membership change.

use syncular_protocol::notification;

use crate::engine::error::EngineResult;
use crate::store::notifications;

pub use syncular_protocol::notification::{COMMIT_CHANNEL, MAX_PAYLOAD_BYTES, SCOPES_CHANNEL};

/// The signed payload for `commit_seq` of `partition`:
/// `<base64url(partition)>:<commitSeq>:<tag>`. Errors: store failures (reading the key).
pub fn commit_payload(partition: &str, commit_seq: i64) -> EngineResult<String> {
    Ok(notification::commit_payload(&notifications::notification_key()?, partition, commit_seq))
}

/// The signed `syncular_scopes` payload: `<base64url(partition)>[:<base64url(actor_id)>]:<tag>`
/// (an actor too long for the payload widens to the whole partition). Errors: store failures.
pub fn scopes_payload(partition: &str, actor_id: Option<&str>) -> EngineResult<String> {
    Ok(notification::scopes_payload(&notifications::notification_key()?, partition, actor_id))
}

/// Queues the `syncular_scopes` notification for `partition` (and `actor_id`,
/// or every actor) in the current transaction: delivered at COMMIT, never
/// for a rollback. Errors: store failures.
pub fn notify_scopes(partition: &str, actor_id: Option<&str>) -> EngineResult<()> {
    notifications::queue_notification(SCOPES_CHANNEL, &scopes_payload(partition, actor_id)?)?;
    Ok(())
}

thread_local! {
    /// How many notifications this backend queued, and the last payload —
    /// a test hook: delivery happens only at COMMIT, so a `#[pg_test]`
    /// inside one transaction observes the queueing here. Constant memory.
    static QUEUED: std::cell::RefCell<(u64, Option<String>)> = const { std::cell::RefCell::new((0, None)) };
}

/// Queues the notification of applied commit `commit_seq` of `partition`,
/// signed with `key` when the caller already read it (`None`: read or
/// created here). Only the commit writer calls it ([`crate::engine::commit`]),
/// once per applied commit with at least one change. Errors: store failures.
pub fn notify_commit(key: Option<&[u8]>, partition: &str, commit_seq: i64) -> EngineResult<()> {
    let payload = match key {
        Some(key) => notification::commit_payload(key, partition, commit_seq),
        None => commit_payload(partition, commit_seq)?,
    };
    notifications::queue_notification_direct(COMMIT_CHANNEL, &payload)?;
    QUEUED.with(|q| {
        let mut q = q.borrow_mut();
        q.0 += 1;
        q.1 = Some(payload);
    });
    Ok(())
}

/// `(count, last payload)` of the notifications this backend queued since it
/// started — a test hook (see `QUEUED`).
pub fn queued_in_backend() -> (u64, Option<String>) {
    QUEUED.with(|q| q.borrow().clone())
}
