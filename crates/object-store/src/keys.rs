//! The object key layout: deterministic, content-addressed keys under a
//! deployment prefix.
//!
//! - segments: `{prefix}seg/sha256/{hex}`
//! - blobs: `{prefix}blob/{partition_token}/sha256/{hex}`
//!
//! where `{hex}` is the 64 lowercase hex digits of the `sha256:` content id and
//! `{partition_token}` is [`partition_token`] of the blob's partition.

use crate::encode::{hex_lower, is_lower_hex};
use crate::error::KeyError;
use crate::sigv4::hmac_sha256;

/// The longest accepted prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 512;

/// The domain separator HMAC'd before the partition name in [`partition_token`].
const PARTITION_TOKEN_CONTEXT: &[u8] = b"syncular object partition v1\0";

/// Checks a key prefix: empty, or at most 512 bytes of `[A-Za-z0-9!_.*'()/-]`
/// that end with `/`, do not start with `/` and have no empty, `.` or `..`
/// segment (so every key built on it is a valid, unambiguous URL path).
///
/// # Errors
///
/// [`KeyError::InvalidPrefix`] naming the broken rule.
pub fn validate_prefix(prefix: &str) -> Result<(), KeyError> {
    if prefix.is_empty() {
        return Ok(());
    }
    let why = if prefix.len() > MAX_PREFIX_LEN {
        "it is longer than 512 bytes"
    } else if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!_.*'()/-".contains(&b))
    {
        "it has a character outside [A-Za-z0-9!_.*'()/-]"
    } else if prefix.starts_with('/') {
        "it starts with '/'"
    } else if !prefix.ends_with('/') {
        "it does not end with '/'"
    } else if prefix
        .trim_end_matches('/')
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
        || prefix.ends_with("//")
    {
        "it has an empty, '.' or '..' segment"
    } else {
        return Ok(());
    };
    Err(KeyError::InvalidPrefix(why))
}

/// The 64 hex digits of a `"sha256:" + 64 lowercase hex` content id.
fn content_hex(id: &str) -> Result<&str, KeyError> {
    match id.strip_prefix("sha256:") {
        Some(hex) if is_lower_hex(hex, 64) => Ok(hex),
        _ => Err(KeyError::InvalidContentId),
    }
}

/// The object key of a segment: `{prefix}seg/sha256/{hex}`.
///
/// `segment_id` is `"sha256:"` + 64 lowercase hex digits.
///
/// # Errors
///
/// [`KeyError::InvalidPrefix`] (see [`validate_prefix`]) or
/// [`KeyError::InvalidContentId`].
pub fn segment_object_key(prefix: &str, segment_id: &str) -> Result<String, KeyError> {
    validate_prefix(prefix)?;
    let hex = content_hex(segment_id)?;
    Ok(format!("{prefix}seg/sha256/{hex}"))
}

/// The object key of a blob: `{prefix}blob/{partition_token}/sha256/{hex}`.
///
/// `partition_token` is 32 lowercase hex digits (see [`partition_token`]);
/// `blob_id` is `"sha256:"` + 64 lowercase hex digits.
///
/// # Errors
///
/// [`KeyError::InvalidPrefix`] (see [`validate_prefix`]),
/// [`KeyError::InvalidPartitionToken`] or [`KeyError::InvalidContentId`].
pub fn blob_object_key(
    prefix: &str,
    partition_token: &str,
    blob_id: &str,
) -> Result<String, KeyError> {
    validate_prefix(prefix)?;
    if !is_lower_hex(partition_token, 32) {
        return Err(KeyError::InvalidPartitionToken);
    }
    let hex = content_hex(blob_id)?;
    Ok(format!("{prefix}blob/{partition_token}/sha256/{hex}"))
}

/// `{prefix}up/{nonce}/{hex}`: where a presigned upload of `blob_id` lands (one key per grant,
/// `nonce` 32 lowercase hex digits). The mover copies the bytes to the blob's content key once it
/// verified them, so a grant can never rewrite a blob that already counts.
///
/// # Errors
/// [`KeyError`] for a bad prefix, nonce or blob id.
pub fn staging_object_key(prefix: &str, nonce: &str, blob_id: &str) -> Result<String, KeyError> {
    validate_prefix(prefix)?;
    if !is_lower_hex(nonce, 32) {
        return Err(KeyError::InvalidPartitionToken);
    }
    let hex = content_hex(blob_id)?;
    Ok(format!("{prefix}up/{nonce}/{hex}"))
}

/// The partition's path token: 32 lowercase hex digits, the first 16 bytes
/// of `HMAC-SHA256(salt, "syncular object partition v1\0" + partition)`.
///
/// Stable for a deployment's `salt` (a secret of at least 32 random bytes),
/// unguessable from the partition name without it. Never fails.
pub fn partition_token(salt: &[u8], partition: &str) -> String {
    let message = [PARTITION_TOKEN_CONTEXT, partition.as_bytes()].concat();
    let digest = hmac_sha256(salt, &message);
    hex_lower(digest.get(..16).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn layout() {
        let id = format!("sha256:{HEX}");
        assert_eq!(
            segment_object_key("", &id).unwrap(),
            format!("seg/sha256/{HEX}")
        );
        assert_eq!(
            segment_object_key("prod/syncular/", &id).unwrap(),
            format!("prod/syncular/seg/sha256/{HEX}")
        );
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            blob_object_key("p/", token, &id).unwrap(),
            format!("p/blob/{token}/sha256/{HEX}")
        );
    }

    #[test]
    fn prefixes() {
        for good in [
            "",
            "a/",
            "a/b/",
            "A-z_0.9!*'()/x/",
            "...../",
            &format!("{}/", "a".repeat(511)),
        ] {
            assert_eq!(validate_prefix(good), Ok(()), "{good:?}");
        }
        for bad in [
            "/",
            "/a/",
            "a",
            "a/b",
            "a//",
            "a//b/",
            "./",
            "a/../",
            "a b/",
            "a+b/",
            "é/",
            "a\\/",
            "a%2F/",
            &format!("{}/", "a".repeat(512)),
        ] {
            assert!(
                matches!(validate_prefix(bad), Err(KeyError::InvalidPrefix(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn content_ids() {
        let token = "0123456789abcdef0123456789abcdef";
        for bad in [
            String::new(),
            HEX.to_owned(),
            format!("sha256:{}", HEX.to_uppercase()),
            format!("sha256:{}", &HEX[1..]),
            format!("sha256:{HEX}0"),
            format!("SHA256:{HEX}"),
            format!("sha512:{HEX}"),
            format!("sha256: {}", &HEX[1..]),
        ] {
            assert_eq!(
                segment_object_key("", &bad),
                Err(KeyError::InvalidContentId)
            );
            assert_eq!(
                blob_object_key("", token, &bad),
                Err(KeyError::InvalidContentId)
            );
        }
        let id = format!("sha256:{HEX}");
        for bad in [
            "",
            "0123456789abcdef",
            "0123456789ABCDEF0123456789ABCDEF",
            "../../../../../../../../../../..",
        ] {
            assert_eq!(
                blob_object_key("", bad, &id),
                Err(KeyError::InvalidPartitionToken)
            );
        }
        assert!(matches!(
            segment_object_key("x", &id),
            Err(KeyError::InvalidPrefix(_))
        ));
    }

    #[test]
    fn partition_tokens() {
        // Computed independently (Python's hmac module):
        // hmac.new(b"salt", b"syncular object partition v1\0" + b"tenant-1", sha256).hexdigest()[:32]
        assert_eq!(
            partition_token(b"salt", "tenant-1"),
            "d7b432ddeca87b53c4bcc9f86adc9356"
        );
        assert_eq!(
            partition_token(&[0x5a; 32], "Ünïcode partition/1"),
            "38fd375e0e19339fe54ca3a2839892bf"
        );
        let a = partition_token(&[7; 32], "p");
        assert_eq!(a, partition_token(&[7; 32], "p"));
        assert!(is_lower_hex(&a, 32));
        assert_ne!(a, partition_token(&[8; 32], "p"));
        assert_ne!(a, partition_token(&[7; 32], "q"));
        assert!(is_lower_hex(&partition_token(b"", ""), 32));
        assert!(is_lower_hex(&partition_token(&[0; 1000], "é\0"), 32));
    }
}
