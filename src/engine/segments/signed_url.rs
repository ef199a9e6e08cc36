//! Signed segment URLs, native scheme (SPEC §5.4 "Signed URL claims"):
//! minted inside the pull for a `SEGMENT_REF` ([`mint`]) and verified when
//! the URL is fetched ([`open_signed`], `syncular.segment_open_signed`).
//!
//! ```text
//! url = <syncular.segment_url_base> + segmentId + "?st=" + st
//! st  = base64url(payloadJson) + "." + base64url(HMAC-SHA256(key, payloadJson))
//! payloadJson = {"v":1,"seg":"<segmentId>","sd":"<scopeDigest>","aud":"<aud>","exp":<unix s>}
//! ```
//!
//! base64url without padding. `exp` = ⌊(now + `syncular.segment_url_ttl_s`) / 1 s⌋ and
//! `urlExpiresAtMs` = `exp` × 1000 (never later than now + TTL).
//!
//! **Keys** (`sync_segment_url_keys`): the newest signs (created by the
//! first mint), every stored key verifies; [`rotate_key`] adds a newer one.
//! A key that stopped signing more than [`RETIRED_KEY_MS`] ago (the longest
//! TTL plus the verify skew) can verify nothing any more: rotation and the
//! sweep delete it.
//!
//! **`aud`** — opaque, stable per partition (per key), not derivable by a
//! client, and *openable by the verifier*: a token names no partition in
//! clear, and the fetch carries no host authentication, so the verifier
//! must learn the partition from the token to find the segment with one
//! single-partition read. `aud` = base64url(`n` ‖ ChaCha20-Poly1305(k_enc,
//! `n`, P)) where P = the partition padded with NULs to a multiple of 16
//! bytes and `n` = the first 12 bytes of HMAC-SHA256(k_siv, P) — a
//! deterministic (SIV-style) encryption: equal partitions give equal `aud`,
//! and opening it checks both the Poly1305 tag and `n`. `k_enc`, `k_siv` =
//! HMAC-SHA256(key, label), two labels. The verifier then compares `aud`
//! with the value derived from the found segment's partition (§5.4).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use syncular_protocol::ErrorCode;

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult};
use crate::store::partitions;
use crate::store::segments::signed_open::{self, PublicationState};
use crate::store::segments::url_keys::{self, UrlKey};

/// The verify skew allowance on `exp` (§5.4: ≤ 60 s), ms.
pub const VERIFY_SKEW_MS: i64 = 60_000;

/// How long after it stopped signing a key is deleted: the longest URL TTL
/// (15 min) plus the verify skew — no URL it signed verifies past that.
pub const RETIRED_KEY_MS: i64 = crate::settings::MAX_SEGMENT_URL_TTL_S as i64 * 1000 + VERIFY_SKEW_MS;

/// Bytes of a fresh key.
const KEY_BYTES: usize = 32;

const AUD_ENC_LABEL: &[u8] = b"syncular segment url aud enc v1";
const AUD_SIV_LABEL: &[u8] = b"syncular segment url aud siv v1";

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

fn padded(partition: &str) -> Vec<u8> {
    let mut p = partition.as_bytes().to_vec();
    let len = p.len().div_ceil(16).max(1) * 16;
    p.resize(len, 0);
    p
}

/// The `aud` of `partition` under `key` (module docs).
pub fn aud_for(key: &[u8], partition: &str) -> String {
    let plain = padded(partition);
    let siv = hmac(&hmac(key, &[AUD_SIV_LABEL]), &[&plain]);
    let nonce = Nonce::from_slice(&siv[..12]);
    let cipher = ChaCha20Poly1305::new(Key::from_slice(&hmac(key, &[AUD_ENC_LABEL])));
    let sealed = cipher.encrypt(nonce, plain.as_slice()).expect("ChaCha20-Poly1305 seals any short message");
    let mut out = siv[..12].to_vec();
    out.extend_from_slice(&sealed);
    URL_SAFE_NO_PAD.encode(out)
}

/// The partition inside `aud` under `key`; `None` when it was not made by
/// [`aud_for`] with this key.
pub fn open_aud(key: &[u8], aud: &str) -> Option<String> {
    let raw = URL_SAFE_NO_PAD.decode(aud).ok()?;
    if raw.len() < 12 + 16 + 16 {
        return None;
    }
    let (nonce, sealed) = raw.split_at(12);
    let cipher = ChaCha20Poly1305::new(Key::from_slice(&hmac(key, &[AUD_ENC_LABEL])));
    let plain = cipher.decrypt(Nonce::from_slice(nonce), sealed).ok()?;
    let siv = hmac(&hmac(key, &[AUD_SIV_LABEL]), &[&plain]);
    if !constant_eq(&siv[..12], nonce) {
        return None;
    }
    let end = plain.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    String::from_utf8(plain[..end].to_vec()).ok().filter(|p| !p.is_empty())
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The §5.4 token for the claims, signed with `key`.
pub fn sign(key: &[u8], segment_id: &str, scope_digest: &str, aud: &str, exp_s: i64) -> String {
    // serde_json keeps insertion order here (feature preserve_order): v, seg, sd, aud, exp.
    let payload = json!({"v": 1, "seg": segment_id, "sd": scope_digest, "aud": aud, "exp": exp_s}).to_string();
    let mac = hmac(key, &[payload.as_bytes()]);
    format!("{}.{}", URL_SAFE_NO_PAD.encode(payload.as_bytes()), URL_SAFE_NO_PAD.encode(mac))
}

/// The verified claims of a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `seg`.
    pub segment_id: String,
    /// `sd`.
    pub scope_digest: String,
    /// `aud`.
    pub aud: String,
    /// `exp`, Unix seconds.
    pub exp_s: i64,
}

/// The claims of `token` if its MAC verifies under one of `keys` (tried
/// newest first, each in constant time), with the key that verified it;
/// `None` for anything else (malformed, bad MAC, bad payload).
pub fn verify<'k>(keys: &'k [UrlKey], token: &str) -> Option<(Claims, &'k UrlKey)> {
    let (payload_b64, mac_b64) = token.split_once('.')?;
    let payload = URL_SAFE_NO_PAD.decode(payload_b64).ok()?;
    let mac = URL_SAFE_NO_PAD.decode(mac_b64).ok()?;
    let key = keys.iter().find(|k| {
        let mut m = <HmacSha256 as Mac>::new_from_slice(&k.key).expect("HMAC takes any key length");
        m.update(&payload);
        m.verify_slice(&mac).is_ok()
    })?;
    let v: Value = serde_json::from_slice(&payload).ok()?;
    if v.get("v")?.as_i64()? != 1 {
        return None;
    }
    let text = |name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
    let claims = Claims {
        segment_id: text("seg")?,
        scope_digest: text("sd")?,
        aud: text("aud")?,
        exp_s: v.get("exp")?.as_i64()?,
    };
    Some((claims, key))
}

fn random_key() -> EngineResult<Vec<u8>> {
    let mut key = vec![0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(|e| EngineError::internal(format!("no randomness for a segment URL key: {e}")))?;
    Ok(key)
}

/// The newest key, created (as key 1) when none is stored.
/// Errors: store failures, no randomness.
fn signing_key(now_ms: i64) -> EngineResult<UrlKey> {
    if let Some(k) = url_keys::select_keys()?.into_iter().next() {
        return Ok(k);
    }
    url_keys::insert_first_key(&random_key()?, now_ms)?;
    url_keys::select_keys()?
        .into_iter()
        .next()
        .ok_or_else(|| EngineError::internal("no segment URL key after creating one"))
}

/// Creates the signing key unless one exists (`syncular.distribute()`:
/// while the key table is still local). Errors: store failures.
pub fn ensure_key() -> EngineResult<()> {
    signing_key(clock::now_ms()?).map(|_| ())
}

/// A signed URL for segment `segment_id` of `partition`, published under
/// `scope_digest` (the caller's own digest, §5.4), minted at `now_ms`:
/// `(url, urlExpiresAtMs)`; `None` when `syncular.segment_url_base` is
/// empty (no signed URLs: the descriptor goes without `url`). Call it only
/// for a client that advertised `accept` bit 3, right after the pull's
/// scope resolution. One key read per call (and two writes, once, to
/// create the first key). Errors: store failures, no randomness.
pub fn mint(partition: &str, segment_id: &str, scope_digest: &str, now_ms: i64) -> EngineResult<Option<(String, i64)>> {
    let Some(base) = crate::settings::segment_url_base() else { return Ok(None) };
    let key = signing_key(now_ms)?;
    let exp_s = now_ms.saturating_add(crate::settings::segment_url_ttl_ms()).div_euclid(1000);
    let token = sign(&key.key, segment_id, scope_digest, &aud_for(&key.key, partition), exp_s);
    Ok(Some((format!("{base}{segment_id}?st={token}"), exp_s * 1000)))
}

fn forbidden(why: &str) -> EngineError {
    EngineError::protocol(ErrorCode::Forbidden, format!("signed segment URL refused: {why} (§5.4)"))
}

/// `syncular.segment_open_signed`: verifies token `token` for a fetch of
/// `segment_id` (§5.4) — the MAC against every stored key, `exp` (≤ 60 s
/// skew), `seg` = `segment_id`, the partition opened from `aud`, a
/// publication of the segment in that partition's live log epoch under
/// `sd`, and `aud` = the value derived from that partition — and answers
/// `{"segmentId", "byteLength", "chunkCount", "mediaType", "partition",
/// "urlExpiresAtMs"}` (the gateway reads the chunks with
/// `syncular.segment_chunk(partition, …)`; `partition` never goes on the
/// wire). Errors: `sync.forbidden` (42501: malformed token, no key
/// verifies it, expired past the skew, another segment, an `aud` no key
/// opens, a publication only under other digests); `sync.not_found`
/// (42704: no such segment or no publication of it in the partition's
/// live epoch); `sync.segment_expired` (42704: its publications under
/// `sd` all expired). Messages never carry the token.
pub fn open_signed(segment_id: &str, token: &str) -> EngineResult<Value> {
    let now_ms = clock::now_ms()?;
    let keys = url_keys::select_keys()?;
    let Some((claims, key)) = verify(&keys, token) else {
        return Err(forbidden("the token is malformed or its signature does not verify"));
    };
    if now_ms > claims.exp_s.saturating_mul(1000).saturating_add(VERIFY_SKEW_MS) {
        return Err(forbidden("the token expired"));
    }
    if claims.segment_id != segment_id {
        return Err(forbidden("the token was issued for another segment"));
    }
    let Some(partition) = open_aud(&key.key, &claims.aud) else {
        return Err(forbidden("the token's audience is not one of this server's"));
    };
    let not_found = || EngineError::protocol(ErrorCode::NotFound, format!("segment {segment_id} is not stored (§5.5)"));
    let Some(registry) = partitions::select_partition_registry(&partition)? else { return Err(not_found()) };
    let Some(shape) = crate::store::segments::bytes::select_segment(&partition, segment_id)? else { return Err(not_found()) };
    let state = signed_open::select_publication_state(&partition, &registry.log_epoch, segment_id, &claims.scope_digest)?;
    match state {
        PublicationState { any: false, .. } => return Err(not_found()),
        PublicationState { digest_expires_at_ms: None, .. } => {
            return Err(forbidden("the segment is not published under the token's scope digest"))
        }
        PublicationState { digest_expires_at_ms: Some(expires), .. } if expires <= now_ms => {
            return Err(EngineError::protocol(
                ErrorCode::SegmentExpired,
                format!("segment {segment_id} expired; pull again for a fresh descriptor (§5.1)"),
            ))
        }
        PublicationState { .. } => {}
    }
    if !constant_eq(aud_for(&key.key, &partition).as_bytes(), claims.aud.as_bytes()) {
        return Err(forbidden("the token's audience does not match the segment's partition"));
    }
    Ok(json!({
        "segmentId": segment_id,
        "byteLength": shape.byte_length,
        "chunkCount": shape.chunk_count,
        "mediaType": shape.media_type,
        "partition": partition,
        "urlExpiresAtMs": claims.exp_s.saturating_mul(1000),
    }))
}

/// `syncular.rotate_segment_url_key`: adds a fresh newest key (it signs
/// from now on) and deletes the keys retired more than [`RETIRED_KEY_MS`]
/// ago — or, with `drop_previous`, every older key at once (URLs already
/// issued stop verifying: a leaked key). Returns the new key's id.
/// Errors: store failures, no randomness.
pub fn rotate_key(drop_previous: bool) -> EngineResult<i64> {
    let now_ms = clock::now_ms()?;
    let key_id = url_keys::insert_next_key(&random_key()?, now_ms)?;
    if drop_previous {
        url_keys::delete_keys_before(key_id)?;
    } else {
        url_keys::delete_keys_retired_by(now_ms.saturating_sub(RETIRED_KEY_MS))?;
    }
    Ok(key_id)
}

#[cfg(test)]
mod unit {
    use super::*;

    fn key(id: i64, byte: u8) -> UrlKey {
        UrlKey { key_id: id, key: vec![byte; 32], created_at_ms: 0 }
    }

    #[test]
    fn aud_is_stable_opaque_and_opens_only_under_its_key() {
        let k = [7u8; 32];
        let a = aud_for(&k, "tenant-1");
        assert_eq!(a, aud_for(&k, "tenant-1"));
        assert_ne!(a, aud_for(&k, "tenant-2"));
        assert!(!a.contains("tenant"));
        assert_eq!(open_aud(&k, &a).as_deref(), Some("tenant-1"));
        assert_eq!(open_aud(&[8u8; 32], &a), None);
        let long = "p".repeat(40);
        assert_eq!(open_aud(&k, &aud_for(&k, &long)).as_deref(), Some(long.as_str()));
        // One flipped byte: refused.
        let mut raw = URL_SAFE_NO_PAD.decode(&a).unwrap();
        raw[20] ^= 1;
        assert_eq!(open_aud(&k, &URL_SAFE_NO_PAD.encode(raw)), None);
    }

    #[test]
    fn token_is_payload_dot_mac_and_verifies_under_any_stored_key() {
        let keys = [key(2, 2), key(1, 1)];
        let st = sign(&keys[1].key, "sha256:ab", "d1", "AUD", 1_700_000_000);
        let (payload, mac) = st.split_once('.').unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(payload).unwrap(),
            br#"{"v":1,"seg":"sha256:ab","sd":"d1","aud":"AUD","exp":1700000000}"#
        );
        assert_eq!(URL_SAFE_NO_PAD.decode(mac).unwrap().len(), 32);
        let (claims, by) = verify(&keys, &st).unwrap();
        assert_eq!(by.key_id, 1);
        assert_eq!(claims, Claims { segment_id: "sha256:ab".into(), scope_digest: "d1".into(), aud: "AUD".into(), exp_s: 1_700_000_000 });
        assert!(verify(&keys[..1], &st).is_none(), "a dropped key verifies nothing");
        assert!(verify(&keys, &format!("{payload}.{}", URL_SAFE_NO_PAD.encode([0u8; 32]))).is_none());
        assert!(verify(&keys, "garbage").is_none());
        assert!(verify(&keys, "a.b.c").is_none());
    }
}
