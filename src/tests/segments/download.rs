//! The §5.5 download: re-authorized on every call, one publication per
//! context, never a union of digests.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;
    use syncular_protocol::constants::ACCEPT_EXTERNAL_ROWS;
    use syncular_protocol::response::SegmentRef;

    use crate::tests::segments::support::*;
    use crate::tests::support::{expect_error, run};
    use crate::tests::sync_pull_support::*;

    const NOT_FOUND: (&str, &str) = ("42704", "sync.not_found");
    const EXPIRED: (&str, &str) = ("42704", "sync.segment_expired");
    const FORBIDDEN: (&str, &str) = ("42501", "sync.forbidden");
    const W1: &str = r#"{"ws":["w1"]}"#;
    const W12: &str = r#"{"ws":["w1","w2"]}"#;

    /// Rows only in w1; one bootstrap of `ws` `requested` under `allowed`, by reference.
    fn bootstrap(actor: &str, requested: &[&str], allowed: serde_json::Value) -> SegmentRef {
        let mut c = Client::with_allowed("p1", actor, &format!("c-{actor}"), Some(allowed));
        let p = c.pull(header(0, 0, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", requested)], -1, None)]);
        assert_eq!(p.one().refs.len(), 1);
        p.one().refs[0].clone()
    }

    fn seeded() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        a.push_ok(vec![task("t1", "w1", "one"), task("t2", "w1", "two")]);
    }

    #[pg_test]
    fn identical_bytes_under_two_scopes_are_two_publications_each_with_its_own_digest() {
        seeded();
        let a = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        let b = bootstrap("ben", &["w1", "w2"], json!({"ws": ["w1", "w2"]}));
        assert_eq!(a.segment_id, b.segment_id, "same rows, same bytes");
        assert_eq!(a.scope_digest, ws_digest(&["w1"]), "each caller's own digest");
        assert_eq!(b.scope_digest, ws_digest(&["w1", "w2"]));
        assert_eq!(count("sync_segments", "p1"), 1, "stored once");
        assert_eq!(count("sync_segment_publications", "p1"), 2, "published twice");
        // Each downloads under its own grant.
        let bytes = download("p1", "ann", &a.segment_id, Some(W1), Some(json!({"ws": ["w1"]}))).unwrap();
        assert_eq!(ids_of(&bytes, &a), ["t1", "t2"]);
        let bytes = download("p1", "ben", &b.segment_id, Some(W12), Some(json!({"ws": ["w1", "w2"]}))).unwrap();
        assert_eq!(ids_of(&bytes, &b), ["t1", "t2"]);
        // Not under a grant whose effective scopes match no publication.
        expect_error(
            download("p1", "cat", &b.segment_id, Some(W12), Some(json!({"ws": ["w2"]}))),
            FORBIDDEN.0,
            FORBIDDEN.1,
            "do not match",
        );
        expect_error(
            download("p1", "cat", &a.segment_id, Some(W1), Some(json!({"ws": ["w2"]}))),
            FORBIDDEN.0,
            FORBIDDEN.1,
            "revoked",
        );
        // Ben's requested scopes narrowed by a w1-only grant are Ann's
        // context, which is published: served (the digest is what binds).
        assert!(download("p1", "dan", &b.segment_id, Some(W12), Some(json!({"ws": ["w1"]}))).is_ok());
    }

    #[pg_test]
    fn tampered_missing_or_malformed_requested_scopes_are_forbidden() {
        seeded();
        let a = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        let all = || Some(json!({"ws": ["*"]}));
        for (requested, needle) in [
            (Some(r#"{"ws":["w2"]}"#), "do not match"),
            (Some(W12), "do not match"),
            (Some(r#"{"ws":"w1"}"#), "JSON map"),
            (Some("not json"), "JSON map"),
            (None, "missing"),
        ] {
            expect_error(download("p1", "ann", &a.segment_id, requested, all()), FORBIDDEN.0, FORBIDDEN.1, needle);
        }
        // A resolver that raises is a resolution failure: forbidden.
        run("CREATE FUNCTION public.raising(text, text) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'down'; END $$");
        run("SELECT syncular.set_scope_resolver('public.raising(text,text)')");
        expect_error(download("p1", "ann", &a.segment_id, Some(W1), None), FORBIDDEN.0, FORBIDDEN.1, "revoked");
        assert!(download("p1", "ann", &a.segment_id, Some(W1), all()).is_ok());
    }

    #[pg_test]
    fn unknown_ids_other_partitions_and_older_epochs_are_not_found() {
        seeded();
        let a = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        let ok = || Some(json!({"ws": ["w1"]}));
        let zeros = format!("sha256:{}", "0".repeat(64));
        for id in [zeros.as_str(), "sha256:abc", "nope"] {
            expect_error(download("p1", "ann", id, Some(W1), ok()), NOT_FOUND.0, NOT_FOUND.1, "segment");
        }
        expect_error(download("p2", "ann", &a.segment_id, Some(W1), ok()), NOT_FOUND.0, NOT_FOUND.1, "not published");
        // p2 holds the same rows, but nothing was published there.
        let mut other = Client::with_allowed("p2", "ann", "c2", ok());
        other.push_ok(vec![task("t1", "w1", "one"), task("t2", "w1", "two")]);
        expect_error(download("p2", "ann", &a.segment_id, Some(W1), ok()), NOT_FOUND.0, NOT_FOUND.1, "not published");
        assert!(download("p1", "ann", &a.segment_id, Some(W1), ok()).is_ok());
        Spi::run("SELECT * FROM syncular.rotate_log_epoch('p1')").unwrap();
        expect_error(download("p1", "ann", &a.segment_id, Some(W1), ok()), NOT_FOUND.0, NOT_FOUND.1, "log epoch");
    }

    #[pg_test]
    fn expired_publications_are_segment_expired_and_a_new_pull_publishes_again() {
        seeded();
        set_now(10_000_000);
        let a = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        let ok = || Some(json!({"ws": ["w1"]}));
        set_now(10_000_000 + 86_400_000 - 1);
        assert!(download("p1", "ann", &a.segment_id, Some(W1), ok()).is_ok(), "live until the TTL (24 h)");
        set_now(10_000_000 + 86_400_000);
        expect_error(download("p1", "ann", &a.segment_id, Some(W1), ok()), EXPIRED.0, EXPIRED.1, "expired");
        // A wrong grant is still forbidden, not told about the expiry.
        expect_error(
            download("p1", "ann", &a.segment_id, Some(r#"{"ws":["w2"]}"#), Some(json!({"ws": ["*"]}))),
            FORBIDDEN.0,
            FORBIDDEN.1,
            "do not match",
        );
        // Re-pulling mints a fresh publication of the same bytes.
        let again = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        assert_eq!(again.segment_id, a.segment_id);
        assert!(download("p1", "ann", &a.segment_id, Some(W1), ok()).is_ok());
        // The TTL setting applies to new publications.
        run("SET LOCAL syncular.segment_ttl_s = 60");
        let mut b = Client::new("p1", "bob", "cb");
        b.push_ok(vec![task("t3", "w1", "three")]);
        let fresh = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        set_now(10_000_000 + 86_400_000 + 60_000);
        expect_error(download("p1", "ann", &fresh.segment_id, Some(W1), ok()), EXPIRED.0, EXPIRED.1, "expired");
    }

    #[pg_test]
    fn segment_open_and_chunks_stream_the_same_bytes() {
        seeded();
        let a = bootstrap("ann", &["w1"], json!({"ws": ["w1"]}));
        let whole = download("p1", "ann", &a.segment_id, Some(W1), Some(json!({"ws": ["w1"]}))).unwrap();
        let opened = Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.segment_open('p1', 'ann', $1, $2, '{\"ws\":[\"w1\"]}')",
            &[a.segment_id.as_str().into(), W1.into()],
        )
        .unwrap()
        .unwrap()
        .0;
        assert_eq!(
            opened,
            json!({"segmentId": a.segment_id, "byteLength": whole.len(), "chunkCount": 1, "mediaType": 1})
        );
        let chunk = Spi::get_one_with_args::<Vec<u8>>(
            "SELECT syncular.segment_chunk('p1', $1, 0)",
            &[a.segment_id.as_str().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(chunk, whole);
        let id = a.segment_id.clone();
        let beyond = crate::store::spi::subtransaction::run(move || {
            Spi::get_one_with_args::<Vec<u8>>("SELECT syncular.segment_chunk('p1', $1, 1)", &[id.as_str().into()])
                .unwrap_or_else(|e| panic!("SPI: {e}"))
        });
        expect_error(beyond, NOT_FOUND.0, NOT_FOUND.1, "no chunk 1");
    }
}
