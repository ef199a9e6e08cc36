//! S3's `x-amz-checksum-sha256` header value.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::error::KeyError;

/// The `x-amz-checksum-sha256` value of an object: standard base64 (with
/// padding, 44 characters) of the 32-byte digest whose lowercase hex is
/// `sha256_hex` (the 64 digits after `sha256:` in a content id).
///
/// # Errors
///
/// [`KeyError::InvalidSha256Hex`] unless `sha256_hex` is exactly 64 lowercase hex digits.
pub fn checksum_sha256_base64(sha256_hex: &str) -> Result<String, KeyError> {
    let digits = sha256_hex.as_bytes();
    if digits.len() != 64 {
        return Err(KeyError::InvalidSha256Hex);
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(digits.chunks_exact(2)) {
        let mut value = 0u8;
        for &d in pair {
            let nibble = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                _ => return Err(KeyError::InvalidSha256Hex),
            };
            value = (value << 4) | nibble;
        }
        *byte = value;
    }
    Ok(STANDARD.encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        // Computed independently (Python): base64.b64encode(hashlib.sha256(b"...").digest())
        assert_eq!(
            checksum_sha256_base64(
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            )
            .unwrap(),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        assert_eq!(
            checksum_sha256_base64(
                "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
            )
            .unwrap(),
            "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="
        );
    }

    #[test]
    fn malformed_digests() {
        let good = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        for bad in [
            String::new(),
            good[1..].to_owned(),
            format!("{good}0"),
            good.to_uppercase(),
            format!("sha256:{good}"),
            format!("{}g", &good[1..]),
            format!("é{}", &good[2..]),
        ] {
            assert_eq!(
                checksum_sha256_base64(&bad),
                Err(KeyError::InvalidSha256Hex),
                "{bad:?}"
            );
        }
    }
}
