//! The scope digest (§3.5): lowercase-hex SHA-256 over the canonical JSON
//! (§11.2) of an effective-scope map. Segments are bound to the effective
//! scopes they were built for by this digest; a server recomputes and
//! compares it on download (§5.5), a mismatch being `sync.forbidden`.

use crate::canonical_json::canonical_scope_json;
use sha2::{Digest, Sha256};

/// Lowercase-hex SHA-256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// §3.5 scope digest of a scope map (keys sorted, values as sorted unique
/// lists): 64 lowercase hex characters. Invariant under key order, value
/// order and duplicate values.
pub fn scope_digest<K, V, I>(scopes: I) -> String
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: IntoIterator,
    V::Item: AsRef<str>,
{
    sha256_hex(canonical_scope_json(scopes).as_bytes())
}

/// Constant-time-ish comparison of two hex digests (length, then every byte),
/// for the §5.5 download check.
pub fn digests_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn digest_is_sha256_of_canonical_text() {
        let m: BTreeMap<String, Vec<String>> =
            [("project_id".to_owned(), vec!["p1".to_owned()])].into_iter().collect();
        let want = sha256_hex(b"{\"project_id\":[\"p1\"]}");
        assert_eq!(scope_digest(&m), want);
        assert_eq!(want.len(), 64);
        // Known SHA-256 of the empty map text "{}".
        let empty: BTreeMap<String, Vec<String>> = BTreeMap::new();
        assert_eq!(
            scope_digest(&empty),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert!(digests_equal(&want, &want));
        assert!(!digests_equal(&want, &want[1..]));
    }
}
