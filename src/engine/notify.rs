//! Commit notifications for realtime fanout (DESIGN §4; the reference
//! server's `postgres-fanout` format).
//!
//! One notification per applied commit that emitted changes, queued inside
//! the commit's (sub)transaction: channel [`COMMIT_CHANNEL`], payload
//! `<base64url(partition)>:<commitSeq>` (unpadded RFC 4648 §5 base64url of
//! the partition's UTF-8 bytes, so a `:` in a partition cannot corrupt the
//! payload). No row data ever travels in a notification. A rejected commit,
//! or an applied commit with no changes, queues nothing.
//!
//! Host-initiated registration refreshes (§8.7, `syncular.refresh_scopes`)
//! go to [`SCOPES_CHANNEL`]. Postgres delivers both channels to one
//! listening connection in commit order, so a gateway that handles them in
//! arrival order refreshes an actor's sessions before it serves any commit
//! made after the membership change.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::engine::error::EngineResult;
use crate::store::notifications;

/// The channel a gateway `LISTEN`s on for applied commits.
pub const COMMIT_CHANNEL: &str = "syncular_commit";

/// The channel of host-initiated registration refreshes
/// (`syncular.refresh_scopes`, §8.7): gateways re-resolve the sessions named.
pub const SCOPES_CHANNEL: &str = "syncular_scopes";

/// Postgres refuses NOTIFY payloads of 8000 bytes or more.
pub const MAX_PAYLOAD_BYTES: usize = 7999;

/// The payload for `commit_seq` of `partition`: `<base64url(partition)>:<commitSeq>`.
pub fn commit_payload(partition: &str, commit_seq: i64) -> String {
    format!("{}:{commit_seq}", base64url(partition))
}

/// Parses a payload back into `(partition, commitSeq)`; `None` when malformed.
pub fn parse_commit_payload(payload: &str) -> Option<(String, i64)> {
    let (encoded, seq) = payload.rsplit_once(':')?;
    let partition = from_base64url(encoded)?;
    let commit_seq = seq.parse::<i64>().ok().filter(|s| *s >= 1)?;
    Some((partition, commit_seq))
}

/// The `syncular_scopes` payload: `<base64url(partition)>` (every actor of
/// the partition) or `<base64url(partition)>:<base64url(actor_id)>`; an
/// actor whose payload would pass [`MAX_PAYLOAD_BYTES`] widens to the whole
/// partition (a refresh is fail-closed and idempotent, so widening only
/// costs work).
pub fn scopes_payload(partition: &str, actor_id: Option<&str>) -> String {
    let partition = base64url(partition);
    match actor_id {
        Some(actor) if partition.len() + 1 + actor.len().div_ceil(3) * 4 <= MAX_PAYLOAD_BYTES => {
            format!("{partition}:{}", base64url(actor))
        }
        _ => partition,
    }
}

/// Parses a `syncular_scopes` payload into `(partition, actor)`; `None` when malformed.
pub fn parse_scopes_payload(payload: &str) -> Option<(String, Option<String>)> {
    match payload.split_once(':') {
        None => Some((from_base64url(payload)?, None)),
        Some((p, a)) => Some((from_base64url(p)?, Some(from_base64url(a)?))),
    }
}

/// Unpadded base64url (RFC 4648 §5) of a string's UTF-8 bytes.
fn base64url(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text.as_bytes())
}

/// Inverse of [`base64url`]; `None` for bad base64url or non-UTF-8 / empty text.
fn from_base64url(encoded: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}

/// Queues the `syncular_scopes` notification for `partition` (and `actor_id`,
/// or every actor) in the current transaction: delivered at COMMIT, never
/// for a rollback. Errors: store failures.
pub fn notify_scopes(partition: &str, actor_id: Option<&str>) -> EngineResult<()> {
    notifications::queue_notification(SCOPES_CHANNEL, &scopes_payload(partition, actor_id))?;
    Ok(())
}

thread_local! {
    /// How many notifications this backend queued, and the last payload —
    /// a test hook: delivery happens only at COMMIT, so a `#[pg_test]`
    /// inside one transaction observes the queueing here. Constant memory.
    static QUEUED: std::cell::RefCell<(u64, Option<String>)> = const { std::cell::RefCell::new((0, None)) };
}

/// Queues the notification of applied commit `commit_seq` (call only when
/// the commit emitted at least one change). Errors: store failures.
pub fn notify_commit(partition: &str, commit_seq: i64) -> EngineResult<()> {
    let payload = commit_payload(partition, commit_seq);
    notifications::queue_notification(COMMIT_CHANNEL, &payload)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_base64url_partition_and_seq() {
        assert_eq!(commit_payload("tenant-1", 42), "dGVuYW50LTE:42");
        let odd = "a:b/c+d?é";
        let p = commit_payload(odd, 7);
        assert_eq!(p.matches(':').count(), 1);
        assert!(!p.contains('+') && !p.contains('/') && !p.contains('='));
        assert_eq!(parse_commit_payload(&p), Some((odd.to_owned(), 7)));
        assert_eq!(parse_commit_payload("!!:1"), None);
        assert_eq!(parse_commit_payload("dGVuYW50LTE:0"), None);
        assert_eq!(parse_commit_payload("dGVuYW50LTE=:3"), None, "padding is not base64url");
    }

    #[test]
    fn scopes_payload_names_partition_and_actor() {
        assert_eq!(scopes_payload("tenant-1", None), "dGVuYW50LTE");
        let p = scopes_payload("t:1", Some("alice:x"));
        assert_eq!(parse_scopes_payload(&p), Some(("t:1".into(), Some("alice:x".into()))));
        assert_eq!(parse_scopes_payload("dGVuYW50LTE"), Some(("tenant-1".into(), None)));
        let huge = "a".repeat(6000);
        let widened = scopes_payload("t", Some(&huge));
        assert_eq!(parse_scopes_payload(&widened), Some(("t".into(), None)));
        let long_partition = "p".repeat(4096);
        let fits = scopes_payload(&long_partition, Some(&"b".repeat(1800)));
        assert!(fits.len() <= MAX_PAYLOAD_BYTES && fits.contains(':'), "{}", fits.len());
        assert!(scopes_payload(&long_partition, Some(&"b".repeat(1900))).len() <= MAX_PAYLOAD_BYTES);
    }
}
