//! The lease record at rest and its signature (SPEC §7.3.1: "host-signed at
//! rest — the server verifies its own signature on read").
//!
//! The signature is HMAC-SHA256, under the extension's lease key
//! (`syncular.sync_lease_key`), over a canonical byte string of every
//! stored field: a domain tag, then `partition`, `clientId`, `leaseId`,
//! `actorId`, the allowed map as canonical JSON (keys sorted, values in
//! stored order), each as an 8-byte big-endian length and its UTF-8 bytes,
//! then `issuedAtMs`, `expiresAtMs` as 8-byte big-endian integers and
//! `revokedAtMs` as a presence byte and (when present) its 8 bytes. A row
//! moved to another client or partition, a widened scope, a pushed expiry
//! or a cleared revocation no longer verifies. Nothing here reaches the wire.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::engine::auth::allowed::AllowedMap;

/// Domain separation from every other HMAC under any key.
const DOMAIN: &[u8] = b"syncular.auth-lease.v1";

/// One lease record (§7.3.1) plus its binding and revocation.
#[derive(Debug, Clone, Copy)]
pub struct LeaseRecord<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// `REQ_HEADER.clientId` the lease is bound to.
    pub client_id: &'a str,
    /// Revocation handle.
    pub lease_id: &'a str,
    /// Actor it authorizes.
    pub actor_id: &'a str,
    /// Allowed map captured at issuance.
    pub allowed: &'a AllowedMap,
    /// Issuance, Unix ms.
    pub issued_at_ms: i64,
    /// Expiry, Unix ms.
    pub expires_at_ms: i64,
    /// Revocation, Unix ms.
    pub revoked_at_ms: Option<i64>,
}

/// The allowed map as stored: canonical JSON (keys sorted).
pub fn scopes_json(allowed: &AllowedMap) -> String {
    serde_json::to_string(allowed).unwrap_or_else(|_| "{}".to_owned())
}

impl LeaseRecord<'_> {
    fn canonical(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(DOMAIN);
        let scopes = scopes_json(self.allowed);
        for field in [self.partition, self.client_id, self.lease_id, self.actor_id, scopes.as_str()] {
            out.extend_from_slice(&(field.len() as u64).to_be_bytes());
            out.extend_from_slice(field.as_bytes());
        }
        out.extend_from_slice(&self.issued_at_ms.to_be_bytes());
        out.extend_from_slice(&self.expires_at_ms.to_be_bytes());
        match self.revoked_at_ms {
            Some(at) => {
                out.push(1);
                out.extend_from_slice(&at.to_be_bytes());
            }
            None => out.push(0),
        }
        out
    }

    fn mac(&self, key: &[u8]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(&self.canonical());
        mac
    }

    /// The signature under `key` (32 bytes).
    pub fn sign(&self, key: &[u8]) -> Vec<u8> {
        self.mac(key).finalize().into_bytes().to_vec()
    }

    /// Whether `signature` is this record's under `key` (constant time).
    pub fn verify(&self, key: &[u8], signature: &[u8]) -> bool {
        self.mac(key).verify_slice(signature).is_ok()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn map(pairs: &[(&str, &[&str])]) -> AllowedMap {
        pairs.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn every_field_is_covered() {
        let scopes = map(&[("project_id", &["p1"])]);
        let wider = map(&[("project_id", &["p1", "p2"])]);
        let base = LeaseRecord {
            partition: "p",
            client_id: "c1",
            lease_id: "l1",
            actor_id: "alice",
            allowed: &scopes,
            issued_at_ms: 10,
            expires_at_ms: 20,
            revoked_at_ms: None,
        };
        let key = [7u8; 32];
        let sig = base.sign(&key);
        assert_eq!(sig.len(), 32);
        assert!(base.verify(&key, &sig));
        assert!(!base.verify(&[8u8; 32], &sig), "another key");
        let variants = [
            LeaseRecord { partition: "q", ..base },
            LeaseRecord { client_id: "c2", ..base },
            LeaseRecord { lease_id: "l2", ..base },
            LeaseRecord { actor_id: "bob", ..base },
            LeaseRecord { allowed: &wider, ..base },
            LeaseRecord { issued_at_ms: 11, ..base },
            LeaseRecord { expires_at_ms: 21, ..base },
            LeaseRecord { revoked_at_ms: Some(15), ..base },
        ];
        for v in variants {
            assert!(!v.verify(&key, &sig), "{v:?}");
        }
        // Length prefixes: moving bytes between adjacent fields changes the record.
        let shifted = LeaseRecord { partition: "pc", client_id: "1", ..base };
        let unshifted = LeaseRecord { partition: "p", client_id: "c1", ..base };
        assert_ne!(shifted.sign(&key), unshifted.sign(&key));
    }

    #[test]
    fn scopes_json_sorts_keys_and_keeps_value_order() {
        let scopes = map(&[("b", &["2", "1"]), ("a", &[])]);
        assert_eq!(scopes_json(&scopes), r#"{"a":[],"b":["2","1"]}"#);
    }
}
