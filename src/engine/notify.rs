//! Commit notifications for realtime fanout (DESIGN §4; the reference
//! server's `postgres-fanout` format).
//!
//! One notification per applied commit that emitted changes, queued inside
//! the commit's (sub)transaction: channel [`COMMIT_CHANNEL`], payload
//! `<base64url(partition)>:<commitSeq>` (unpadded RFC 4648 §5 base64url of
//! the partition's UTF-8 bytes, so a `:` in a partition cannot corrupt the
//! payload). No row data ever travels in a notification. A rejected commit,
//! or an applied commit with no changes, queues nothing.

use syncular_protocol::row_codec::{base64_decode, base64_encode};

use crate::engine::error::EngineResult;
use crate::store::notifications;

/// The channel a gateway `LISTEN`s on.
pub const COMMIT_CHANNEL: &str = "syncular_commit";

/// The payload for `commit_seq` of `partition`: `<base64url(partition)>:<commitSeq>`.
pub fn commit_payload(partition: &str, commit_seq: i64) -> String {
    format!("{}:{commit_seq}", base64url(partition.as_bytes()))
}

/// Parses a payload back into `(partition, commitSeq)`; `None` when malformed.
pub fn parse_commit_payload(payload: &str) -> Option<(String, i64)> {
    let (encoded, seq) = payload.rsplit_once(':')?;
    if encoded.contains(['+', '/', '=']) {
        return None;
    }
    let mut standard: String = encoded
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !standard.len().is_multiple_of(4) {
        standard.push('=');
    }
    let bytes = base64_decode(&standard)?;
    let partition = String::from_utf8(bytes).ok()?;
    let commit_seq = seq.parse::<i64>().ok().filter(|s| *s >= 1)?;
    Some((partition, commit_seq))
}

/// Unpadded base64url (RFC 4648 §5) derived from the standard alphabet.
fn base64url(bytes: &[u8]) -> String {
    base64_encode(bytes)
        .chars()
        .filter(|c| *c != '=')
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect()
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
    }
}
