//! The extension's notification key (`syncular.notification_key()`, docs/src/sql/realtime.md) and
//! what the gateway does with it. Postgres lets any role NOTIFY any channel and LISTEN to any
//! channel, so:
//! - `syncular_commit` / `syncular_scopes` payloads are accepted only when their HMAC tag
//!   verifies (`syncular_protocol::notification`): a forged `commitSeq` can neither widen a
//!   delta window nor silence a session;
//! - the presence relay's `syncular_presence` payloads are sealed (ChaCha20-Poly1305 under a
//!   key derived from the same secret, the channel name as associated data): a role that is
//!   not a gateway can neither read presence documents nor inject or alter them.
//!
//! The key is read on every LISTEN connection each time it (re)connects; every node answers
//! the same key (on Citus `syncular.sync_notification_key` is a reference table).

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};

/// Prefix of a sealed relay payload (format version 1).
const SEALED_PREFIX: &str = "s1.";
const NONCE_BYTES: usize = 12;

/// The key material of one extension install.
pub struct NotificationKeys {
    /// Verifies `syncular_commit` / `syncular_scopes` tags.
    pub hmac_key: Vec<u8>,
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for NotificationKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NotificationKeys(..)")
    }
}

impl NotificationKeys {
    /// From the 32 bytes `syncular.notification_key()` answers. The relay's cipher key is
    /// SHA-256("syncular relay" ‖ key), so the two uses never share a key.
    pub fn new(key: Vec<u8>) -> Self {
        let derived = Sha256::new().chain_update(b"syncular relay\n").chain_update(&key).finalize();
        NotificationKeys { cipher: ChaCha20Poly1305::new(Key::from_slice(&derived)), hmac_key: key }
    }

    /// Seals a relay payload: `s1.` + base64(nonce ‖ ciphertext ‖ tag), `channel` bound as
    /// associated data. Output length = 3 + ⌈(len + 28) · 4/3⌉.
    pub fn seal(&self, channel: &str, text: &str) -> String {
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: text.as_bytes(), aad: channel.as_bytes() })
            .expect("ChaCha20-Poly1305 encryption of an in-memory buffer cannot fail");
        format!("{SEALED_PREFIX}{}", STANDARD_NO_PAD.encode([nonce.as_slice(), &sealed].concat()))
    }

    /// Opens a sealed relay payload; `None` when it was not sealed with this key for `channel`.
    pub fn open(&self, channel: &str, payload: &str) -> Option<String> {
        let bytes = STANDARD_NO_PAD.decode(payload.strip_prefix(SEALED_PREFIX)?).ok()?;
        let (nonce, sealed) = bytes.split_at_checked(NONCE_BYTES)?;
        let plain = self.cipher.decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: channel.as_bytes() }).ok()?;
        String::from_utf8(plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_payloads_open_only_with_the_key_and_channel() {
        let k = NotificationKeys::new(vec![7; 32]);
        let text = "{\"t\":\"pub\",\"d\":{\"secret\":\"plaintext-marker\"}}";
        let sealed = k.seal("syncular_presence", text);
        assert!(sealed.starts_with("s1.") && !sealed.contains("plaintext-marker"), "{sealed}");
        assert_eq!(k.open("syncular_presence", &sealed).as_deref(), Some(text));
        assert_ne!(k.seal("syncular_presence", text), sealed, "a fresh nonce per payload");
        assert_eq!(k.open("other_channel", &sealed), None, "the channel is bound");
        assert_eq!(NotificationKeys::new(vec![8; 32]).open("syncular_presence", &sealed), None);
        assert_eq!(k.open("syncular_presence", "{\"t\":\"hb\",\"g\":\"forged\"}"), None, "plain JSON is refused");
        // Flip one character in the middle (ciphertext, not the nonce or the tag's padding bits).
        let mut tampered: Vec<char> = sealed.chars().collect();
        let mid = tampered.len() / 2;
        tampered[mid] = if tampered[mid] == 'A' { 'B' } else { 'A' };
        let tampered: String = tampered.into_iter().collect();
        assert_ne!(tampered, sealed);
        assert_eq!(k.open("syncular_presence", &tampered), None);
        // The relay's largest whole message fits a NOTIFY (under 8000 bytes) once sealed.
        let plain = "x".repeat(super::super::relay::MAX_PAYLOAD);
        assert!(k.seal("syncular_presence", &plain).len() <= 7999);
    }
}
