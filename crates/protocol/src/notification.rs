//! The payloads of the NOTIFY channels the extension raises for gateways (docs/src/sql/realtime.md),
//! shared by the extension (which signs) and gateways (which verify).
//!
//! Postgres has no privilege on NOTIFY: any role connected to the database can notify any
//! channel. So every payload ends with a tag, `base64url(first 16 bytes of HMAC-SHA256(key,
//! channel ‖ "\n" ‖ body))` (22 characters), over a random 32-byte key only the extension's
//! owner and the gateway role can read (`syncular.notification_key()`). A gateway drops every
//! payload whose tag does not verify; a forged `commitSeq` can then neither widen a delta
//! window nor silence a session. Replaying a genuine payload is harmless: a commit already
//! served moves nothing, and a refresh is idempotent and fail-closed.
//!
//! - `syncular_commit`: `<base64url(partition)>:<commitSeq>:<tag>`;
//! - `syncular_scopes`: `<base64url(partition)>[:<base64url(actor)>]:<tag>` — an actor whose
//!   payload would pass [`MAX_PAYLOAD_BYTES`] widens to the whole partition.
//!
//! base64url is RFC 4648 §5 without padding.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Applied commits.
pub const COMMIT_CHANNEL: &str = "syncular_commit";
/// Host-initiated registration refreshes (`syncular.refresh_scopes`).
pub const SCOPES_CHANNEL: &str = "syncular_scopes";
/// Postgres refuses NOTIFY payloads of 8000 bytes or more.
pub const MAX_PAYLOAD_BYTES: usize = 7999;
/// Length of the tag in bytes before base64url (128 bits).
const TAG_BYTES: usize = 16;
/// Length of the tag as it appears in a payload.
const TAG_CHARS: usize = 22;

fn tag(key: &[u8], channel: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(channel.as_bytes());
    mac.update(b"\n");
    mac.update(body.as_bytes());
    URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..TAG_BYTES])
}

/// `body` + `:` + its tag.
fn sign(key: &[u8], channel: &str, body: String) -> String {
    let t = tag(key, channel, &body);
    format!("{body}:{t}")
}

/// The body of a signed payload when its tag verifies (constant-time comparison).
fn verify<'p>(key: &[u8], channel: &str, payload: &'p str) -> Option<&'p str> {
    let (body, t) = payload.rsplit_once(':')?;
    if t.len() != TAG_CHARS {
        return None;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(channel.as_bytes());
    mac.update(b"\n");
    mac.update(body.as_bytes());
    let given = URL_SAFE_NO_PAD.decode(t).ok()?;
    mac.verify_truncated_left(&given).ok()?;
    Some(body)
}

/// Unpadded base64url of a string's UTF-8 bytes.
pub fn base64url(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text.as_bytes())
}

/// Inverse of [`base64url`]; `None` for bad base64url, non-UTF-8 or empty text.
pub fn from_base64url(encoded: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}

/// The signed `syncular_commit` payload of `commit_seq` in `partition`.
pub fn commit_payload(key: &[u8], partition: &str, commit_seq: i64) -> String {
    sign(key, COMMIT_CHANNEL, format!("{}:{commit_seq}", base64url(partition)))
}

/// `(partition, commitSeq)` of a `syncular_commit` payload whose tag verifies; `None` for a
/// malformed or forged one (or a `commitSeq` below 1).
pub fn parse_commit_payload(key: &[u8], payload: &str) -> Option<(String, i64)> {
    let body = verify(key, COMMIT_CHANNEL, payload)?;
    let (encoded, seq) = body.split_once(':')?;
    let commit_seq = seq.parse::<i64>().ok().filter(|s| *s >= 1)?;
    Some((from_base64url(encoded)?, commit_seq))
}

/// The signed `syncular_scopes` payload for `partition` and `actor_id` (every actor when
/// `None`, or when the actor's payload would pass [`MAX_PAYLOAD_BYTES`]: a refresh is
/// fail-closed and idempotent, so widening only costs work).
pub fn scopes_payload(key: &[u8], partition: &str, actor_id: Option<&str>) -> String {
    let partition = base64url(partition);
    let body = match actor_id {
        Some(actor) if partition.len() + 2 + actor.len().div_ceil(3) * 4 + TAG_CHARS <= MAX_PAYLOAD_BYTES => {
            format!("{partition}:{}", base64url(actor))
        }
        _ => partition,
    };
    sign(key, SCOPES_CHANNEL, body)
}

/// `(partition, actor)` of a `syncular_scopes` payload whose tag verifies; `None` for a
/// malformed or forged one.
pub fn parse_scopes_payload(key: &[u8], payload: &str) -> Option<(String, Option<String>)> {
    let body = verify(key, SCOPES_CHANNEL, payload)?;
    match body.split_once(':') {
        None => Some((from_base64url(body)?, None)),
        Some((p, a)) => Some((from_base64url(p)?, Some(from_base64url(a)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn commit_payloads_round_trip_and_refuse_forgeries() {
        let p = commit_payload(KEY, "tenant-1", 42);
        assert!(p.starts_with("dGVuYW50LTE:42:"), "{p}");
        assert_eq!(p.len(), "dGVuYW50LTE:42:".len() + 22);
        assert_eq!(parse_commit_payload(KEY, &p), Some(("tenant-1".into(), 42)));
        let odd = "a:b/c+d?é";
        assert_eq!(parse_commit_payload(KEY, &commit_payload(KEY, odd, 7)), Some((odd.into(), 7)));
        // A forged seq, a bare unsigned payload, another key, another channel's tag.
        let forged = p.replace(":42:", ":999999:");
        assert_eq!(parse_commit_payload(KEY, &forged), None);
        assert_eq!(parse_commit_payload(KEY, "dGVuYW50LTE:42"), None);
        assert_eq!(parse_commit_payload(b"another key", &p), None);
        let scopes_tagged = sign(KEY, SCOPES_CHANNEL, "dGVuYW50LTE:42".into());
        assert_eq!(parse_commit_payload(KEY, &scopes_tagged), None, "a tag binds its channel");
        assert_eq!(parse_commit_payload(KEY, &commit_payload(KEY, "t", 0)), None, "commitSeq ≥ 1");
    }

    #[test]
    fn scopes_payloads_name_partition_and_actor_and_widen_when_too_long() {
        let p = scopes_payload(KEY, "t:1", Some("alice:x"));
        assert_eq!(parse_scopes_payload(KEY, &p), Some(("t:1".into(), Some("alice:x".into()))));
        let all = scopes_payload(KEY, "tenant-1", None);
        assert!(all.starts_with("dGVuYW50LTE:"));
        assert_eq!(parse_scopes_payload(KEY, &all), Some(("tenant-1".into(), None)));
        let widened = scopes_payload(KEY, "t", Some(&"a".repeat(6000)));
        assert_eq!(parse_scopes_payload(KEY, &widened), Some(("t".into(), None)));
        let long_partition = "p".repeat(4096);
        let fits = scopes_payload(KEY, &long_partition, Some(&"b".repeat(1800)));
        assert!(fits.len() <= MAX_PAYLOAD_BYTES && fits.matches(':').count() == 2, "{}", fits.len());
        for n in [1700, 1750, 1760, 1780, 1800, 1850, 1900] {
            assert!(scopes_payload(KEY, &long_partition, Some(&"b".repeat(n))).len() <= MAX_PAYLOAD_BYTES, "{n}");
        }
        assert_eq!(parse_scopes_payload(KEY, &all.replace("dGVuYW50LTE", "dGVuYW50LTI")), None);
    }
}
