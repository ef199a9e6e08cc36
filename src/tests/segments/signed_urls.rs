//! Signed segment URLs, native scheme (§5.4): `mint` inside the extension,
//! `syncular.segment_open_signed` verifying — MAC against every key, `exp`
//! with ≤ 60 s skew, `seg`, `sd` against a live publication, `aud` against
//! the partition — and key rotation.

#[pgrx::pg_schema]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use pgrx::prelude::*;
    use serde_json::json;

    use crate::engine::segments::signed_url::{aud_for, mint, sign};
    use crate::store::segments::url_keys::select_keys;
    use crate::tests::segments::url_support::*;
    use crate::tests::support::{expect_error, int8, run};

    const P: &str = "seg-url";
    const SEG: &str = "sha256:00000000000000000000000000000000000000000000000000000000000000aa";
    const D1: &str = "d1d1";
    const NOW: i64 = 1_700_000_000_000;
    const BASE: &str = "https://cdn.example/segments/";

    fn setup() {
        set_now(NOW);
        run(&format!("SET LOCAL syncular.segment_url_base = '{BASE}'"));
        register_partition(P);
        store_segment(P, SEG, NOW);
        publish(P, EPOCH, "tasks", 100, D1, SEG, NOW + 3_600_000);
    }

    fn newest_key() -> Vec<u8> {
        select_keys().unwrap().into_iter().next().expect("a key").key
    }

    #[pg_test]
    fn no_base_no_url() {
        set_now(NOW);
        assert_eq!(mint(P, SEG, D1, NOW).unwrap(), None);
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_segment_url_keys"), Some(0), "no key made for nothing");
    }

    #[pg_test]
    fn a_minted_url_opens_its_segment() {
        setup();
        run("SET LOCAL syncular.segment_url_ttl_s = '10min'");
        let (url, expires) = mint(P, SEG, D1, NOW + 999).unwrap().expect("a URL");
        assert!(url.starts_with(&format!("{BASE}{SEG}?st=")), "{url}");
        assert_eq!(expires, NOW + 600_000, "exp is whole seconds, never past now + TTL");
        assert!(!url.contains(P), "no partition in clear");
        let token = token_of(&url);
        let (payload, _) = token.split_once('.').unwrap();
        let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        assert_eq!(claims["v"], 1);
        assert_eq!(claims["seg"], SEG);
        assert_eq!(claims["sd"], D1);
        assert_eq!(claims["exp"], (NOW + 600_000) / 1000);
        assert_eq!(claims["aud"], aud_for(&newest_key(), P));
        let opened = open_signed(SEG, &token).unwrap();
        assert_eq!(
            opened,
            json!({"segmentId": SEG, "byteLength": 3, "chunkCount": 1, "mediaType": 1, "partition": P, "urlExpiresAtMs": NOW + 600_000})
        );
        // Within the 60 s skew past exp: still good; beyond: refused.
        set_now(NOW + 600_000 + 60_000);
        assert!(open_signed(SEG, &token).is_ok());
        set_now(NOW + 600_000 + 60_001);
        expect_error(open_signed(SEG, &token), "42501", "sync.forbidden", "expired");
    }

    #[pg_test]
    fn tampered_or_misdirected_tokens_are_refused() {
        setup();
        let token = token_of(&mint(P, SEG, D1, NOW).unwrap().unwrap().0);
        let key = newest_key();
        let (payload, mac) = token.split_once('.').unwrap();
        // Another MAC over the same payload.
        let forged = format!("{payload}.{}", URL_SAFE_NO_PAD.encode([7u8; 32]));
        expect_error(open_signed(SEG, &forged), "42501", "sync.forbidden", "signature");
        // Another payload under the real MAC (sd changed).
        let other = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap().replace(D1, "d2d2");
        expect_error(open_signed(SEG, &format!("{}.{mac}", URL_SAFE_NO_PAD.encode(other))), "42501", "sync.forbidden", "signature");
        for bad in ["", "x", "a.b", "..", &format!("{payload}.")] {
            expect_error(open_signed(SEG, bad), "42501", "sync.forbidden", "");
        }
        // The URL of one segment fetched as another.
        let seg2 = SEG.replace("aa", "bb");
        store_segment(P, &seg2, NOW);
        publish(P, EPOCH, "tasks", 200, D1, &seg2, NOW + 3_600_000);
        expect_error(open_signed(&seg2, &token), "42501", "sync.forbidden", "another segment");
        // Validly signed, but for a scope digest the segment is not published under.
        let wrong_sd = sign(&key, SEG, "d2d2", &aud_for(&key, P), NOW / 1000 + 600);
        expect_error(open_signed(SEG, &wrong_sd), "42501", "sync.forbidden", "scope digest");
        // Another partition's aud: that partition holds no such segment.
        register_partition("seg-url-other");
        let other_aud = sign(&key, SEG, D1, &aud_for(&key, "seg-url-other"), NOW / 1000 + 600);
        expect_error(open_signed(SEG, &other_aud), "42704", "sync.not_found", "");
        // An aud this server never made (signed with the real key).
        let junk_aud = sign(&key, SEG, D1, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", NOW / 1000 + 600);
        expect_error(open_signed(SEG, &junk_aud), "42501", "sync.forbidden", "audience");
        // The error never echoes the token.
        let err = open_signed(SEG, &forged).unwrap_err();
        assert!(!err.message.contains(payload), "{}", err.message);
    }

    #[pg_test]
    fn expired_forgotten_and_old_epoch_segments() {
        setup();
        let token = token_of(&mint(P, SEG, D1, NOW).unwrap().unwrap().0);
        // The publication expired (the URL did not): segment_expired.
        run(&format!("UPDATE syncular.sync_segment_publications SET expires_at_ms = {NOW} WHERE partition = '{P}'"));
        expect_error(open_signed(SEG, &token), "42704", "sync.segment_expired", "");
        // Only published under an older log epoch: not found.
        run(&format!("UPDATE syncular.sync_segment_publications SET log_epoch = 'epoch-0', expires_at_ms = {} WHERE partition = '{P}'", NOW + 1));
        expect_error(open_signed(SEG, &token), "42704", "sync.not_found", "");
        // Forgotten entirely.
        run(&format!("DELETE FROM syncular.sync_segment_publications WHERE partition = '{P}'; DELETE FROM syncular.sync_segments WHERE partition = '{P}'"));
        expect_error(open_signed(SEG, &token), "42704", "sync.not_found", "");
    }

    #[pg_test]
    fn rotated_keys_still_verify_dropped_keys_do_not() {
        setup();
        let old = token_of(&mint(P, SEG, D1, NOW).unwrap().unwrap().0);
        let first = newest_key();
        assert_eq!(int8("SELECT syncular.rotate_segment_url_key()"), Some(2));
        let second = newest_key();
        assert_ne!(first, second);
        let new = token_of(&mint(P, SEG, D1, NOW).unwrap().unwrap().0);
        assert_ne!(old, new, "the newest key signs");
        assert_eq!(new.split_once('.').unwrap().1, sign(&second, SEG, D1, &aud_for(&second, P), (NOW + 600_000) / 1000).split_once('.').unwrap().1);
        assert!(open_signed(SEG, &old).is_ok(), "the previous key still verifies");
        assert!(open_signed(SEG, &new).is_ok());
        // Retention: a key retired more than 16 min ago goes with the next rotation.
        set_now(NOW + 960_001);
        assert_eq!(int8("SELECT syncular.rotate_segment_url_key()"), Some(3));
        assert_eq!(int8("SELECT min(key_id) FROM syncular.sync_segment_url_keys"), Some(2));
        expect_error(open_signed(SEG, &old), "42501", "sync.forbidden", "signature");
        // drop_previous: every older key at once.
        set_now(NOW);
        let third = token_of(&mint(P, SEG, D1, NOW).unwrap().unwrap().0);
        assert!(open_signed(SEG, &new).is_ok());
        assert_eq!(int8("SELECT syncular.rotate_segment_url_key(drop_previous => true)"), Some(4));
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_segment_url_keys"), Some(1));
        expect_error(open_signed(SEG, &new), "42501", "sync.forbidden", "signature");
        expect_error(open_signed(SEG, &third), "42501", "sync.forbidden", "signature");
        assert!(open_signed(SEG, &token_of(&mint(P, SEG, D1, NOW).unwrap().unwrap().0)).is_ok());
    }
}
