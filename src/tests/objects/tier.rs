//! The mover's interface end to end inside one backend: configure → keys → heartbeat → work →
//! report, and what the blob functions and the push answer at each step.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::blob::blob_id_of;

    use crate::tests::blobs::support::*;
    use crate::tests::support::{expect_error, run, text};
    use crate::tests::sync_support::*;

    const P: &str = "objects";
    const NOW: i64 = 1_800_000_000_000; // 2027-01-15T08:00:00Z
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

    fn json_of(sql: &str) -> Value {
        serde_json::from_str(&text(sql).unwrap_or_else(|| panic!("{sql}: NULL"))).unwrap()
    }

    /// Today's key as `object_store_signing_keys` takes it.
    fn keys() -> Value {
        let (day, _) = syncular_object_store::amz_date(NOW).unwrap();
        let key: String = syncular_object_store::derive_signing_key(SECRET, &day, "eu-west-1").iter().map(|b| format!("{b:02x}")).collect();
        json!([{"day": day, "accessKeyId": "AKIDEXAMPLE", "signingKey": key}])
    }

    /// Configured, today's key handed over, healthy for a minute.
    fn tier_on() {
        set_now(NOW);
        run("SELECT syncular.object_store_configure('https://s3.example.com', 'bkt', 'eu-west-1', 'p/', 'AKIDEXAMPLE', 600)");
        assert_eq!(text(&format!("SELECT syncular.object_store_signing_keys('{}')::text", keys())).as_deref(), Some("1"));
        assert_eq!(text("SELECT syncular.object_store_heartbeat(60000)::text").as_deref(), Some("true"));
    }

    fn work() -> Vec<Value> {
        let rows = text("SELECT coalesce(jsonb_agg(w), '[]')::text FROM syncular.object_store_work(100, 60000, 60000) w").unwrap();
        serde_json::from_str::<Vec<Value>>(&rows).unwrap()
    }

    fn report(item: &Value, result: &str, etag: Option<&str>) -> String {
        let mut item = item.clone();
        item["result"] = json!(result);
        if let Some(etag) = etag {
            item["etag"] = json!(etag);
        }
        text(&format!("SELECT syncular.object_store_report('{}')", item.to_string().replace('\'', "''"))).unwrap()
    }

    #[pg_test]
    fn configuration_is_validated_and_holds_no_secret() {
        set_now(NOW);
        for (args, fragment) in [
            ("'ftp://h', 'b', 'r', '', 'AK'", "endpoint"),
            ("'https://h/path', 'b', 'r', '', 'AK'", "endpoint"),
            ("'https://h', 'b/x', 'r', '', 'AK'", "bucket"),
            ("'https://h', 'b', 'r r', '', 'AK'", "region"),
            ("'https://h', 'b', 'r', 'noslash', 'AK'", "key_prefix"),
            ("'https://h', 'b', 'r', '', 'A/K'", "access_key_id"),
            ("'https://h', 'b', 'r', '', 'AK', 901", "url_ttl_s"),
        ] {
            expect_error(attempt(&format!("SELECT syncular.object_store_configure({args})")), "22023", "syncular.invalid_argument", fragment);
        }
        expect_error(attempt("SELECT syncular.object_store_signing_keys('[{\"day\": \"2027-01-15\", \"accessKeyId\": \"A\", \"signingKey\": \"00\"}]')"), "22023", "syncular.invalid_argument", "YYYYMMDD");
        expect_error(attempt("SELECT syncular.object_store_heartbeat(600001)"), "22023", "syncular.invalid_argument", "healthy_for_ms");
        tier_on();
        let columns = text(
            "SELECT string_agg(column_name, ',' ORDER BY column_name) FROM information_schema.columns \
              WHERE table_schema = 'syncular' AND table_name IN ('sync_object_store', 'sync_object_store_keys')",
        )
        .unwrap();
        assert!(!columns.contains("secret"), "{columns}");
        let stored = text("SELECT string_agg(encode(signing_key, 'hex'), ',') FROM syncular.sync_object_store_keys").unwrap();
        assert_eq!(stored.len(), 64, "one derived 32-byte key");
        assert!(!stored.contains("wJalr"));
    }

    #[pg_test]
    fn a_blob_is_copied_then_downloaded_by_presigned_url_and_forgotten_when_missing() {
        setup_tasks();
        set_now(NOW);
        let bytes = b"object store bytes";
        let id = blob_id_of(bytes);
        put(P, bytes);
        // Not in the bucket yet: blob_open answers chunks, no URL.
        run(&format!("SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"t1\", \"project_id\": \"p1\", \"done\": false, \"att\": {}}}}}]', allowed_scopes => '{{\"project_id\": [\"*\"]}}')", blob_ref(bytes)));
        let open = || json_of(&format!("SELECT syncular.blob_open('{P}', 'a', '{id}', '{{\"project_id\": [\"p1\"]}}')::text"));
        assert!(open().get("url").is_none());
        tier_on();
        assert!(open().get("url").is_none(), "configured, but the bucket does not hold it yet");
        let items = work();
        let copy = items.iter().find(|i| i["op"] == "copyBlob").expect("a copyBlob item");
        let key = copy["objectKey"].as_str().unwrap();
        assert!(key.starts_with("p/blob/") && key.ends_with(&format!("/sha256/{}", &id[7..])), "{key}");
        assert!(!key.contains(P), "the key names no partition: {key}");
        assert_eq!(copy["chunkCount"], 1);
        assert_eq!(report(copy, "copied", Some("etag-1")), "blob object recorded");
        let answer = open();
        let url = answer["url"].as_str().expect("a presigned GET");
        assert!(url.starts_with(&format!("https://s3.example.com/bkt/{key}?X-Amz-Algorithm=AWS4-HMAC-SHA256")), "{url}");
        assert!(url.contains("X-Amz-Expires=600") && url.contains("X-Amz-SignedHeaders=host"), "{url}");
        assert_eq!(answer["urlExpiresAtMs"], json!(NOW + 600_000));
        assert!(!work().iter().any(|i| i["op"] == "copyBlob"), "copied: off the queue");
        // The heartbeat lapses: no URL, Postgres serves its copy.
        run("SELECT syncular.object_store_heartbeat(0)");
        assert!(open().get("url").is_none());
        run("SELECT syncular.object_store_heartbeat(60000)");
        // Found missing by a check: forgotten, copied again next.
        set_now(NOW + 120_000);
        let check = work().into_iter().find(|i| i["op"] == "checkBlob").expect("a checkBlob item after check_after_ms");
        assert_eq!(check["etag"], "etag-1");
        report(&check, "missing", None);
        assert!(work().iter().any(|i| i["op"] == "copyBlob"), "queued for another copy");
    }

    #[pg_test]
    fn a_presigned_upload_counts_only_once_verified_and_a_push_waits_for_it() {
        setup_tasks();
        tier_on();
        let bytes = b"uploaded straight to the bucket";
        let id = blob_id_of(bytes);
        let grant = json_of(&format!("SELECT syncular.blob_upload_grant('{P}', '{id}', {})::text", bytes.len()));
        let url = grant["url"].as_str().expect("a presigned PUT");
        assert!(url.contains("X-Amz-SignedHeaders=content-length%3Bhost"), "the size is signed: {url}");
        assert_eq!(grant["urlExpiresAtMs"], json!(NOW + 600_000));
        // Referenced before the mover verified it: retry, not blob.not_found.
        let push = format!(
            "SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"t1\", \"project_id\": \"p1\", \"done\": false, \"att\": {}}}}}]', allowed_scopes => '{{\"project_id\": [\"*\"]}}')",
            blob_ref(bytes)
        );
        expect_error(attempt(&push), "55006", "syncular.blob_pending", &id);
        let verify = work().into_iter().find(|i| i["op"] == "verifyUpload").expect("a verifyUpload item");
        assert_eq!(verify["byteLength"], json!(bytes.len()));
        // Not there yet: checked again 100 ms later.
        assert_eq!(report(&verify, "absent", None), "grant still pending");
        assert!(!work().iter().any(|i| i["op"] == "verifyUpload"), "not due again yet");
        set_now(NOW + 100);
        let verify = work().into_iter().find(|i| i["op"] == "verifyUpload").expect("due again");
        assert_eq!(report(&verify, "verified", Some("etag-2")), "upload verified: blob stored");
        assert_eq!(stored(P), format!("{}:{}:0", &id[..13], bytes.len()), "a blob without chunks");
        let out = json_of(&format!("{push}::text"));
        assert_eq!(out["status"], "applied", "{out}");
        let open = json_of(&format!("SELECT syncular.blob_open('{P}', 'a', '{id}', '{{\"project_id\": [\"p1\"]}}')::text"));
        assert!(open["url"].as_str().is_some(), "{open}");
        // The bucket down: only the bucket holds it.
        run("SELECT syncular.object_store_heartbeat(0)");
        expect_error(
            attempt(&format!("SELECT syncular.blob_open('{P}', 'a', '{id}', '{{\"project_id\": [\"p1\"]}}')")),
            "57P03",
            "syncular.object_store_unavailable",
            &id,
        );
        let grant = json_of(&format!("SELECT syncular.blob_upload_grant('{P}', '{}', 3)::text", blob_id_of(b"new")));
        assert_eq!(grant, json!({"present": false}), "no presigned PUT while the bucket is down");
    }

    #[pg_test]
    fn an_invalid_upload_is_dropped_and_a_lapsed_grant_is_blob_not_found() {
        setup_tasks();
        tier_on();
        let id = blob_id_of(b"claimed");
        json_of(&format!("SELECT syncular.blob_upload_grant('{P}', '{id}', 7)::text"));
        let verify = work().into_iter().find(|i| i["op"] == "verifyUpload").unwrap();
        assert_eq!(report(&verify, "invalid", None), "upload refused: wrong length or hash");
        assert_eq!(stored(P), "");
        let out = json_of(&format!(
            "SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"t1\", \"project_id\": \"p1\", \"done\": false, \"att\": {{\"blobId\": \"{id}\", \"byteLength\": 7}}}}}}]', allowed_scopes => '{{\"project_id\": [\"*\"]}}')::text"
        ));
        assert_eq!(out["results"][0]["code"], "blob.not_found", "{out}");
        // A grant nobody used lapses 60 s after its URL expired.
        let other = blob_id_of(b"never");
        json_of(&format!("SELECT syncular.blob_upload_grant('{P}', '{other}', 5)::text"));
        set_now(NOW + 600_000 + 60_001);
        let verify = work().into_iter().find(|i| i["op"] == "verifyUpload" && i["blobId"] == other.as_str()).unwrap();
        assert_eq!(report(&verify, "absent", None), "grant lapsed without an upload");
    }

    #[pg_test]
    fn orphaned_objects_are_deleted_and_another_bucket_forgets_copies() {
        setup_tasks();
        tier_on();
        let bytes = b"orphan";
        let id = blob_id_of(bytes);
        put(P, bytes);
        let copy = work().into_iter().find(|i| i["op"] == "copyBlob").unwrap();
        report(&copy, "copied", Some("e"));
        set_now(NOW + 1_000);
        assert_eq!(text(&format!("SELECT syncular.blob_sweep_orphans(0, 10, '{P}')::text")).as_deref(), Some("1"));
        assert!(!work().iter().any(|i| i["op"] == "deleteBlob"), "deletions wait for the next whole-table scan");
        set_now(NOW + 61_000);
        let delete = work().into_iter().find(|i| i["op"] == "deleteBlob").expect("the swept blob's object");
        assert_eq!(delete["blobId"], json!(id));
        assert_eq!(report(&delete, "deleted", None), "blob object forgotten: true");
        put(P, bytes);
        report(&work().into_iter().find(|i| i["op"] == "copyBlob").unwrap(), "copied", Some("e"));
        run("SELECT syncular.object_store_configure('https://other.example.com', 'bkt', 'eu-west-1', 'p/', 'AKIDEXAMPLE', 600)");
        assert!(work().iter().any(|i| i["op"] == "copyBlob"), "another bucket: copied again");
        expect_error(attempt("SELECT syncular.object_store_report('{\"op\": \"copyBlob\", \"result\": \"sideways\"}')"), "22023", "syncular.invalid_argument", "");
    }

    #[pg_test]
    fn a_segment_object_no_partition_stores_is_deleted() {
        tier_on();
        let hex = "ab".repeat(32);
        run(&format!("INSERT INTO syncular.sync_segment_objects VALUES ('sha256:{hex}', 10, 'e', {NOW}, {NOW})"));
        run("UPDATE syncular.sync_object_store SET scanned_at_ms = 0");
        let delete = work().into_iter().find(|i| i["op"] == "deleteSegment").expect("the orphaned segment object");
        assert_eq!(delete["objectKey"], json!(format!("p/seg/sha256/{hex}")));
        assert_eq!(report(&delete, "deleted", None), "segment object forgotten: true");
        assert!(!work().iter().any(|i| i["op"] == "deleteSegment"));
    }

    #[pg_test]
    fn a_replaced_mover_is_refused_and_reports_are_checked_against_the_rows() {
        setup_tasks();
        set_now(NOW);
        run("SELECT syncular.object_store_configure('https://s3.example.com', 'bkt', 'eu-west-1', 'p/', 'AKIDEXAMPLE', 600, 'moverA')");
        assert_eq!(text("SELECT syncular.object_store_heartbeat(60000, 'moverA')::text").as_deref(), Some("true"));
        // Another mover configured it since: the first one is refused, the new one owns it.
        run("SELECT syncular.object_store_configure('https://s3.example.com', 'bkt', 'eu-west-1', 'p/', 'AKIDOTHER', 600, 'moverB')");
        expect_error(attempt("SELECT syncular.object_store_heartbeat(60000, 'moverA')"), "55000", "syncular.object_store_conflict", "another mover");
        expect_error(attempt("SELECT syncular.object_store_signing_keys('[]', 'moverA')"), "55000", "syncular.object_store_conflict", "");
        assert_eq!(text("SELECT syncular.object_store_heartbeat(60000, 'moverB')::text").as_deref(), Some("true"));
        // Keys are checked like the configuration.
        for (entry, fragment) in [
            (r#"{"day": "20270230", "accessKeyId": "A", "signingKey": "00"}"#, "a date"),
            (r#"{"day": "20270115", "accessKeyId": "a/b", "signingKey": "00"}"#, "access_key_id"),
            (r#"{"day": "20270115", "accessKeyId": "A", "signingKey": "+0000000000000000000000000000000000000000000000000000000000000000"}"#, "64 hex"),
        ] {
            expect_error(attempt(&format!("SELECT syncular.object_store_signing_keys('[{entry}]')")), "22023", "syncular.invalid_argument", fragment);
        }
        // Reports name real rows; sizes come from Postgres.
        for bad in [
            r#"{"op": "copySegment", "result": "copied", "segmentId": "nope", "etag": "e"}"#,
            r#"{"op": "copyBlob", "result": "copied", "partition": "", "blobId": "sha256:00", "etag": "e"}"#,
            r#"{"op": "checkSegment", "result": "checked", "segmentId": "sha256:00", "etag": ""}"#,
        ] {
            expect_error(attempt(&format!("SELECT syncular.object_store_report('{bad}')")), "22023", "syncular.invalid_argument", "");
        }
        let ghost = format!("sha256:{}", "cd".repeat(32));
        let out = text(&format!("SELECT syncular.object_store_report('{{\"op\": \"copySegment\", \"result\": \"copied\", \"segmentId\": \"{ghost}\", \"etag\": \"e\"}}')")).unwrap();
        assert!(out.starts_with("no such segment"), "{out}");
        let id = blob_id_of(b"twelve bytes");
        run(&format!("SELECT syncular.object_store_signing_keys('{}', 'moverB')", keys()));
        let grant = json_of(&format!("SELECT syncular.blob_upload_grant('{P}', '{id}', 12)::text"));
        let url = grant["url"].as_str().expect("a presigned PUT");
        assert!(url.contains("/bkt/p/up/"), "an upload key of the grant's own: {url}");
        let out = text(&format!(
            "SELECT syncular.object_store_report('{{\"op\": \"verifyUpload\", \"result\": \"verified\", \"partition\": \"{P}\", \"blobId\": \"{id}\", \"byteLength\": -77, \"etag\": \"e\"}}')"
        ))
        .unwrap();
        assert_eq!(out, "upload verified: blob stored");
        assert_eq!(stored(P), format!("{}:12:0", &id[..13]), "the grant's size, not the report's");
    }
}
