//! The blob store (§5.9.2, §5.9.3): content addresses verified in the
//! extension, idempotent re-uploads, the size cap, chunked streamed
//! uploads; download authorization from the referencing rows (§5.9.5);
//! the orphan sweep (§5.9.2).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;
    use syncular_protocol::blob::blob_id_of;

    use crate::tests::blobs::support::*;
    use crate::tests::support::{bytea, expect_error, int8, run, text};
    use crate::tests::sync_support::setup_tasks;

    const P: &str = "blob-store";

    #[pg_test]
    fn put_verifies_the_content_address_and_is_idempotent() {
        let out = put(P, b"abc");
        assert_eq!(out, json!({"blobId": blob_id_of(b"abc"), "byteLength": 3, "stored": true}));
        // Again: a success that stores nothing new.
        let again = put(P, b"abc");
        assert_eq!(again["stored"], false);
        assert_eq!(stored(P), "sha256:ba7816:3:1");
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.sync_blob_chunks WHERE partition = '{P}'")), Some(1));
        // Per partition: another partition does not hold it.
        assert_eq!(stored("blob-store-other"), "");
        // Wrong bytes for the id, first upload and re-upload alike: 400-class, nothing stored.
        let wrong = blob_id_of(b"xyz");
        expect_error(
            attempt(&format!("SELECT syncular.blob_put('{P}', '{wrong}', 'abd'::bytea)")),
            "22023",
            "blob.hash_mismatch",
            "hash to sha256:",
        );
        expect_error(
            attempt(&format!("SELECT syncular.blob_put('{P}', '{}', 'abd'::bytea)", blob_id_of(b"abc"))),
            "22023",
            "blob.hash_mismatch",
            "",
        );
        assert_eq!(stored(P), "sha256:ba7816:3:1");
        expect_error(attempt(&format!("SELECT syncular.blob_put('{P}', 'sha256:AB', 'abc'::bytea)")), "22023", "sync.invalid_request", "not a blob id");
        expect_error(attempt(&format!("SELECT syncular.blob_put('{P}', NULL, 'abc'::bytea)")), "22023", "syncular.invalid_argument", "blob_id");
        // The empty blob is a blob.
        assert_eq!(put(P, b"")["byteLength"], 0);
    }

    #[pg_test]
    fn the_size_cap_applies_to_the_declared_and_the_streamed_size() {
        run("SET LOCAL syncular.blob_max_bytes = 4");
        expect_error(
            attempt(&format!("SELECT syncular.blob_put('{P}', '{}', 'abcde'::bytea)", blob_id_of(b"abcde"))),
            "22023",
            "blob.too_large",
            "limit of 4 bytes",
        );
        let id = blob_id_of(b"abcde");
        expect_error(attempt(&format!("SELECT syncular.blob_upload_begin('{P}', '{id}', 5)")), "22023", "blob.too_large", "");
        expect_error(
            attempt(&format!(
                "SELECT syncular.blob_upload_begin('{P}', '{id}'), syncular.blob_upload_append('{P}', '{id}', 'abc'::bytea), \
                        syncular.blob_upload_append('{P}', '{id}', 'de'::bytea)"
            )),
            "22023",
            "blob.too_large",
            "5 bytes",
        );
        expect_error(
            attempt(&format!("SELECT syncular.blob_upload_grant('{P}', '{id}', 5)")),
            "22023",
            "blob.too_large",
            "",
        );
        assert_eq!(stored(P), "");
        assert_eq!(put(P, b"abcd")["stored"], true);
        // The grant of a server storing bytes itself: present, or no URL (stream through PUT).
        assert_eq!(text(&format!("SELECT syncular.blob_upload_grant('{P}', '{}', 4)::text", blob_id_of(b"abcd"))).unwrap(), r#"{"present": true}"#);
        assert_eq!(text(&format!("SELECT syncular.blob_upload_grant('{P}', '{id}', 4)::text")).unwrap(), r#"{"present": false}"#);
    }

    #[pg_test]
    fn a_streamed_upload_is_stored_in_chunks_of_at_most_one_mib() {
        let bytes: Vec<u8> = (0..(5 * 1024 * 1024 / 2)).map(|i: u32| (i % 253) as u8).collect();
        let id = blob_id_of(&bytes);
        let (a, b) = bytes.split_at(3 * 1024 * 1024 / 2);
        // Appending without a begin, or beginning twice, is refused.
        expect_error(attempt(&format!("SELECT syncular.blob_upload_append('{P}', '{id}', 'x'::bytea)")), "22023", "syncular.invalid_argument", "blob_upload_begin");
        assert!(!Spi::get_one::<bool>(&format!("SELECT syncular.blob_upload_begin('{P}', '{id}', {})", bytes.len())).unwrap().unwrap());
        expect_error(attempt(&format!("SELECT syncular.blob_upload_begin('{P}', '{}')", blob_id_of(b"q"))), "22023", "syncular.invalid_argument", "still in progress");
        assert_eq!(int8(&format!("SELECT syncular.blob_upload_append('{P}', '{id}', {})", bytea_lit(a))), Some(a.len() as i64));
        assert_eq!(int8(&format!("SELECT syncular.blob_upload_append('{P}', '{id}', {})", bytea_lit(b))), Some(bytes.len() as i64));
        let done = text(&format!("SELECT syncular.blob_upload_finish('{P}', '{id}')->>'stored'")).unwrap();
        assert_eq!(done, "true");
        // 1.5 MiB → 1 MiB + 0.5 MiB; 1 MiB → 1 MiB.
        assert_eq!(
            text(&format!("SELECT string_agg(octet_length(bytes)::text, ',' ORDER BY idx) FROM syncular.sync_blob_chunks WHERE partition = '{P}'")).unwrap(),
            "1048576,524288,1048576"
        );
        assert_eq!(stored(P), format!("{}:{}:3", &id[..13], bytes.len()));
        // Read back, authorized by a referencing row.
        setup_tasks();
        let row = json!({"id": "t1", "project_id": "p1", "done": false, "att": serde_json::from_str::<serde_json::Value>(&blob_ref(&bytes)).unwrap()});
        let out = text(&format!(
            "SELECT syncular.commit('{P}', 'alice', '[{{\"table\": \"tasks\", \"row\": {row}}}]', allowed_scopes => '{{\"project_id\": [\"p1\"]}}')->>'status'"
        ));
        assert_eq!(out.as_deref(), Some("applied"));
        let scopes = r#"'{"project_id": ["p1"]}'"#;
        let meta = text(&format!("SELECT syncular.blob_open('{P}', 'bob', '{id}', {scopes})::text")).unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&meta).unwrap(), json!({"blobId": id, "byteLength": bytes.len(), "chunkCount": 3}));
        let mut read = Vec::new();
        for chunk in 0..3 {
            read.extend(bytea(&format!("SELECT syncular.blob_read('{P}', 'bob', '{id}', {chunk}, {scopes})")));
        }
        assert!(read == bytes, "the chunks read back are the bytes uploaded");
        expect_error(attempt(&format!("SELECT syncular.blob_read('{P}', 'bob', '{id}', 3, {scopes})")), "22023", "syncular.invalid_argument", "out of range");
    }

    #[pg_test]
    fn an_upload_rolled_back_with_its_subtransaction_leaves_nothing() {
        let id = blob_id_of(b"abc");
        let err = attempt(&format!(
            "DO $$ BEGIN PERFORM syncular.blob_upload_begin('{P}', '{id}'); \
                         PERFORM syncular.blob_upload_append('{P}', '{id}', 'abc'::bytea); RAISE EXCEPTION 'boom'; END $$"
        ))
        .unwrap_err();
        assert_eq!(err.sqlstate, "P0001", "{err:?}");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_blob_chunks"), Some(0));
        // The stale upload state of the rolled-back subtransaction does not block a new one.
        assert_eq!(put(P, b"abc")["stored"], true);
    }

    #[pg_test]
    fn downloads_are_authorized_by_a_referencing_row_the_actor_may_see() {
        setup_tasks();
        let id = blob_id_of(b"abc");
        let open = |scopes: &str| attempt(&format!("SELECT syncular.blob_open('{P}', 'bob', '{id}', {scopes})"));
        // Unknown blob: 404-class; stored but unreferenced: 403-class.
        expect_error(open("'{\"project_id\": [\"*\"]}'"), "42704", "blob.not_found", "not stored");
        put(P, b"abc");
        expect_error(open("'{\"project_id\": [\"*\"]}'"), "42501", "blob.forbidden", "");
        let row = json!({"id": "t1", "project_id": "p1", "done": false, "att": serde_json::from_str::<serde_json::Value>(&blob_ref(b"abc")).unwrap()});
        let status = text(&format!(
            "SELECT syncular.commit('{P}', 'alice', '[{{\"table\": \"tasks\", \"row\": {row}}}]', allowed_scopes => '{{\"project_id\": [\"p1\"]}}')->>'status'"
        ));
        assert_eq!(status.as_deref(), Some("applied"));
        assert!(open("'{\"project_id\": [\"p1\"]}'").is_ok());
        assert!(open("'{\"project_id\": [\"*\"]}'").is_ok());
        expect_error(open("'{\"project_id\": [\"p2\"]}'"), "42501", "blob.forbidden", "no row this actor may see");
        // No allowed map and no resolver: forbidden; a raising resolver: forbidden too.
        expect_error(open("NULL"), "42501", "blob.forbidden", "");
        run("CREATE FUNCTION public.blob_resolver(p text, a text) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN \
               IF a = 'mallory' THEN RAISE EXCEPTION 'revoked'; END IF; RETURN '{\"project_id\": [\"p1\"]}'; END $$");
        run("SELECT syncular.set_scope_resolver('public.blob_resolver(text,text)')");
        assert!(open("NULL").is_ok());
        expect_error(attempt(&format!("SELECT syncular.blob_open('{P}', 'mallory', '{id}')")), "42501", "blob.forbidden", "");
        // Another partition holds neither the blob nor the row.
        expect_error(attempt(&format!("SELECT syncular.blob_open('other', 'bob', '{id}', '{{\"project_id\": [\"*\"]}}')")), "42704", "blob.not_found", "");
        // The chunk read is authorized the same way.
        expect_error(attempt(&format!("SELECT syncular.blob_read('{P}', 'bob', '{id}', 0, '{{\"project_id\": [\"p2\"]}}')")), "42501", "blob.forbidden", "");
        assert_eq!(bytea(&format!("SELECT syncular.blob_read('{P}', 'bob', '{id}', 0)")), b"abc");
    }

    #[pg_test]
    fn the_sweep_deletes_old_unreferenced_blobs_only() {
        setup_tasks();
        set_now(1_000_000);
        put(P, b"kept: referenced");
        put(P, b"orphan");
        put(P, b"young orphan");
        let row = json!({"id": "t1", "project_id": "p1", "done": false, "att": serde_json::from_str::<serde_json::Value>(&blob_ref(b"kept: referenced")).unwrap()});
        let status = text(&format!(
            "SELECT syncular.commit('{P}', 'alice', '[{{\"table\": \"tasks\", \"row\": {row}}}]', allowed_scopes => '{{\"project_id\": [\"p1\"]}}')->>'status'"
        ));
        assert_eq!(status.as_deref(), Some("applied"));
        set_now(1_000_000 + 86_400_000);
        // The young orphan is re-uploaded (or its grant asked for): its grace period restarts.
        put(P, b"young orphan");
        set_now(1_000_001 + 86_400_000);
        assert_eq!(int8(&format!("SELECT syncular.blob_sweep_orphans(partition => '{P}')")), Some(1));
        // NULL arguments are invalid arguments (they were XX000 with a Rust backtrace).
        for args in ["NULL", "1, NULL"] {
            let r = crate::tests::support::try_run(&format!("SELECT syncular.blob_sweep_orphans({args})"));
            expect_error(r, "22023", "syncular.invalid_argument", "must not be NULL");
        }
        let left = stored(P);
        assert!(left.contains(&blob_id_of(b"kept: referenced")[..13]) && left.contains(&blob_id_of(b"young orphan")[..13]), "{left}");
        assert!(!left.contains(&blob_id_of(b"orphan")[..13]), "{left}");
        // The referenced one survives any age; without rows referencing it, it goes.
        assert_eq!(int8("SELECT syncular.blob_sweep_orphans(0, 10)"), Some(1));
        assert_eq!(stored(P), format!("{}:16:1", &blob_id_of(b"kept: referenced")[..13]));
        let del = text(&format!(
            "SELECT syncular.commit('{P}', 'alice', '[{{\"table\": \"tasks\", \"op\": \"delete\", \"rowId\": \"t1\"}}]', allowed_scopes => '{{\"project_id\": [\"p1\"]}}')->>'status'"
        ));
        assert_eq!(del.as_deref(), Some("applied"));
        assert_eq!(int8("SELECT syncular.blob_sweep_orphans(0)"), Some(1));
        assert_eq!(stored(P), "");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_blob_chunks"), Some(0));
        expect_error(attempt("SELECT syncular.blob_sweep_orphans(-1)"), "22023", "syncular.invalid_argument", "");
    }

    /// The push-time presence check locks the named blobs by primary-key
    /// probes, never by filtering the partition's blobs — on never-analyzed
    /// and on analyzed tables — and returns exactly the stored ones of the
    /// ids asked, each once.
    #[pg_test]
    fn present_blobs_are_probed_by_primary_key() {
        use crate::store::blobs::bytes::{explain_lock_present, lock_present_blobs};
        // 20 000 blob rows over 2 partitions (no chunks needed for the presence check).
        run("INSERT INTO syncular.sync_blobs (partition, blob_id, byte_length, chunk_count, uploaded_at_ms) \
             SELECT 'bp' || (g % 2), 'sha256:' || lpad(g::text, 64, '0'), 1, 1, 0 FROM generate_series(0, 19999) AS g");
        let id = |g: i64| format!("sha256:{g:064}");
        let asked = vec![id(7), id(19_999), id(8), "sha256:missing".to_owned(), id(7)];
        for analyzed in [false, true] {
            if analyzed {
                run("ANALYZE syncular.sync_blobs");
            }
            let plan = explain_lock_present("bp1", &asked).unwrap();
            assert!(plan.contains("sync_blobs_pkey") && plan.contains("blob_id = u.id"), "analyzed={analyzed}: {plan}");
            let filtered = plan.lines().any(|l| l.contains("\"Filter\"") && l.contains("blob_id"));
            assert!(!filtered, "analyzed={analyzed}: the id must be an index condition: {plan}");
        }
        // g % 2 = 1 lives in bp1: 7 and 19 999 are there, 8 is in bp0.
        assert_eq!(lock_present_blobs("bp1", &asked).unwrap(), vec![id(7), id(19_999)]);
        assert_eq!(lock_present_blobs("bp0", &asked).unwrap(), vec![id(8)]);
    }
}
