//! Sqlite image segments (§5.3) built from stored rows: the image opened with
//! SQLite holds exactly the pushed rows of the subscription's effective
//! scopes (every §2.4 type, NULLs, `_syncular_version` = the rows' server
//! versions), nothing of other scopes or deleted rows, the metadata row of
//! the request; eligibility (`accept` bit 2, table start, more rows than
//! one page); a NaN float sends the bootstrap back to the rows lane.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use std::collections::BTreeMap;
    use std::io::Read;

    use syncular_crdt::{text, Registry, YJS_DOC};
    use syncular_protocol::request::PullHeader;
    use syncular_protocol::response::PushStatus;
    use syncular_protocol::row_codec::{RowValue, TableLayout};
    use syncular_protocol::scope_digest::scope_digest;
    use syncular_protocol::scopes::ScopeMap;
    use syncular_sqlite_image::rusqlite::types::Value;
    use syncular_sqlite_image::rusqlite::{Connection, OpenFlags};

    use crate::engine::pull::limits::PullLimits;
    use crate::engine::schema::require_registered_schema;
    use crate::engine::pull::bootstrap::image::{image_eligible, snapshot_exceeds_one_page};
    use crate::engine::segments::image::{build_image, BuiltImage, ImageRequest};
    use crate::tests::blobs::support::{blob_ref, put};
    use crate::tests::support::int8;
    use crate::tests::sync_support::*;

    const P: &str = "image-p";

    fn scopes(values: &[&str]) -> ScopeMap {
        BTreeMap::from([("project_id".to_string(), values.iter().map(|v| v.to_string()).collect())])
    }

    /// Pushes `rows` (one commit each) and asserts they applied; the last commitSeq.
    fn push_rows(epoch: &str, rows: &[Vec<Option<RowValue>>]) -> i64 {
        let mut last = 0;
        for (i, row) in rows.iter().enumerate() {
            let key = format!("k{}-{i}", int8("SELECT count(*) FROM syncular.sync_commits").unwrap_or(0));
            let r = push(P, "alice", "c1", epoch, vec![commit(&key, vec![upsert(row, None)])], Some(&allowed_p1_p2()));
            assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
            last = r[0].commit_seq.unwrap();
        }
        last
    }

    fn build(effective: &ScopeMap, pin: i64) -> Option<BuiltImage> {
        let schema = require_registered_schema().unwrap();
        let digest = scope_digest(effective.iter());
        build_image(&ImageRequest {
            partition: P,
            table: schema.table("tasks").unwrap(),
            effective,
            schema_version: schema.version,
            as_of_commit_seq: pin,
            scope_digest: &digest,
        })
        .unwrap()
    }

    /// The image bytes (read through its chunk reader) in a file SQLite opens.
    fn open(image: &BuiltImage) -> (Connection, FileGuard) {
        let mut bytes = Vec::new();
        image.reader().unwrap().read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes.len() as i64, image.byte_length());
        assert_eq!(image.segment_id(), format!("sha256:{}", syncular_protocol::scope_digest::sha256_hex(&bytes)));
        let guard = FileGuard::write(&bytes);
        let conn = Connection::open_with_flags(&guard.0, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        (conn, guard)
    }

    /// A file removed on drop.
    struct FileGuard(std::path::PathBuf);

    impl FileGuard {
        fn write(bytes: &[u8]) -> FileGuard {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("syncular-image-test-{}-{n}.sqlite", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            FileGuard(path)
        }
    }

    impl Drop for FileGuard {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Every data row, ordered by id, as raw SQLite values.
    fn image_rows(conn: &Connection) -> Vec<Vec<Value>> {
        let n: usize = conn.query_row("SELECT count(*) FROM pragma_table_info('tasks')", [], |r| r.get(0)).unwrap();
        let mut stmt = conn.prepare("SELECT * FROM tasks ORDER BY id").unwrap();
        stmt.query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect::<Result<Vec<_>, _>>())
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn cell(v: &Option<RowValue>) -> Value {
        match v {
            None => Value::Null,
            Some(RowValue::String(s) | RowValue::Json(s) | RowValue::BlobRef(s)) => Value::Text(s.clone()),
            Some(RowValue::Integer(n)) => Value::Integer(*n),
            Some(RowValue::Float(f)) => Value::Real(*f),
            Some(RowValue::Boolean(b)) => Value::Integer(i64::from(*b)),
            Some(RowValue::Bytes(b) | RowValue::Crdt(b)) => Value::Blob(b.clone()),
        }
    }

    /// The image row of pushed `row` at `version` (a crdt value is stored as
    /// its merge into the empty document, §5.10).
    fn expected(layout: &TableLayout, row: &[Option<RowValue>], version: i64) -> Vec<Value> {
        let mut out: Vec<Value> = layout
            .columns
            .iter()
            .zip(row)
            .map(|(c, v)| match (c.name.as_str(), v) {
                ("doc", Some(RowValue::Crdt(update))) => {
                    Value::Blob(Registry::builtin().merge(YJS_DOC, None, update).unwrap())
                }
                _ => cell(v),
            })
            .collect();
        out.push(Value::Integer(version));
        out
    }

    fn set(row: Vec<Option<RowValue>>, name: &str, v: RowValue) -> Vec<Option<RowValue>> {
        with(row, name, Some(v))
    }

    #[pg_test]
    fn the_image_holds_exactly_the_pushed_rows_of_the_scope() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let att = b"attachment bytes";
        put(P, att);
        let layout = tasks_layout();
        let doc = text::insert(&[], 1, "text", 0, "hello").unwrap();
        let full = {
            let r = task("a-full", "p1", "Ünïcødé ✓ 𝄞 日本語", Some("C1"));
            let r = set(r, "n", RowValue::Integer(-9_007_199_254_740_991));
            let r = set(r, "f", RowValue::Float(f64::INFINITY));
            let r = set(r, "done", RowValue::Boolean(true));
            let r = set(r, "meta", RowValue::Json("{ \"b\" : [1, 2.50],  \"a\" : \"\\u00e9\" }".into()));
            let r = set(r, "bin", RowValue::Bytes((0..=255u8).cycle().take(300_000).collect()));
            let r = set(r, "att", RowValue::BlobRef(blob_ref(att)));
            let r = set(r, "doc", RowValue::Crdt(doc));
            set(r, "secret", RowValue::Bytes(vec![0, 1, 2, 0]))
        };
        let sparse = task("b-sparse", "p1", "", None); // every nullable column NULL
        let float = set(task("c-float", "p1", "x", None), "f", RowValue::Float(-1.25e-300));
        let hidden = task("d-hidden", "p2", "other scope", None);
        let deleted = task("e-deleted", "p1", "gone", None);
        push_rows(&epoch, &[full.clone(), sparse.clone(), float.clone(), hidden.clone(), deleted.clone()]);
        // A second write: server_version 2.
        let float2 = set(float.clone(), "title", RowValue::String("x2".into()));
        push_rows(&epoch, std::slice::from_ref(&float2));
        let r = push(P, "alice", "c1", &epoch, vec![commit("del", vec![delete("e-deleted")])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Applied);
        let pin = r[0].commit_seq.unwrap();

        let effective = scopes(&["p1"]);
        let image = build(&effective, pin).expect("representable");
        assert_eq!(image.row_count(), 3);
        let (conn, _g) = open(&image);
        let got = image_rows(&conn);
        let want = vec![expected(&layout, &full, 1), expected(&layout, &sparse, 1), expected(&layout, &float2, 2)];
        assert_eq!(got, want);
        // `_syncular_version` is the server's `_sync_version` of each row.
        let server: Vec<i64> = ["a-full", "b-sparse", "c-float"]
            .iter()
            .map(|id| int8(&format!("SELECT _sync_version FROM public.tasks WHERE _sync_partition = '{P}' AND id = '{id}'")).unwrap())
            .collect();
        assert_eq!(got.iter().map(|r| r.last().cloned().unwrap()).collect::<Vec<_>>(), server.into_iter().map(Value::Integer).collect::<Vec<_>>());
        let meta: (i64, String, i64, i64, String, i64) = conn
            .query_row("SELECT format, \"table\", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM _syncular_segment", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
            })
            .unwrap();
        assert_eq!(meta, (1, "tasks".into(), 1, pin, scope_digest(effective.iter()), 3));
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(tables, ["_syncular_segment", "tasks"]);
        let names: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('tasks') ORDER BY cid")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut want_names: Vec<String> = layout.columns.iter().map(|c| c.name.clone()).collect();
        want_names.push("_syncular_version".into());
        assert_eq!(names, want_names);

        // The other scope alone: only its row; both scopes: all four.
        let other = build(&scopes(&["p2"]), pin).unwrap();
        let (conn2, _g2) = open(&other);
        assert_eq!(image_rows(&conn2), vec![expected(&layout, &hidden, 1)]);
        let both = build(&scopes(&["p1", "p2"]), pin).unwrap();
        assert_eq!(both.row_count(), 4);
        // An unknown scope value: a valid empty image.
        let none = build(&scopes(&["p9"]), pin).unwrap();
        let (conn3, _g3) = open(&none);
        assert!(image_rows(&conn3).is_empty());
        assert_eq!(none.row_count(), 0);
    }

    #[pg_test]
    fn an_image_goes_when_dropped_and_lives_in_pgsql_tmp() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let pin = push_rows(&epoch, &[task("t1", "p1", "one", None)]);
        let image = build(&scopes(&["p1"]), pin).unwrap();
        let dir = int8("SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp') AS d WHERE d LIKE 'pgsql_tmp_syncular_image_%'");
        assert_eq!(dir, Some(1), "one private directory under base/pgsql_tmp");
        drop(image);
        let dir = int8("SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp') AS d WHERE d LIKE 'pgsql_tmp_syncular_image_%'");
        assert_eq!(dir, Some(0), "removed with the image");
    }

    #[pg_test]
    fn a_nan_float_sends_the_table_back_to_the_rows_lane() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let pin = push_rows(&epoch, &[set(task("t1", "p1", "nan", None), "f", RowValue::Float(f64::NAN))]);
        assert!(build(&scopes(&["p1"]), pin).is_none(), "SQLite would store NaN as NULL");
        let dir = int8("SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp') AS d WHERE d LIKE 'pgsql_tmp_syncular_image_%'");
        assert_eq!(dir, Some(0), "the refused build left nothing behind");
    }

    #[pg_test]
    fn eligibility_needs_bit_2_the_table_start_and_more_than_one_page() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let rows: Vec<_> = (0..3).map(|i| task(&format!("a{i}"), "p1", "t", None)).collect();
        push_rows(&epoch, &rows);
        // Rows of another scope never count.
        let noise: Vec<_> = (0..5).map(|i| task(&format!("z{i}"), "p2", "t", None)).collect();
        push_rows(&epoch, &noise);
        let schema = require_registered_schema().unwrap();
        let table = schema.table("tasks").unwrap();
        let limits = |rows: i32, accept: u8| {
            PullLimits::from_header(&PullHeader { limit_commits: 0, limit_snapshot_rows: rows, max_snapshot_pages: 0, accept })
        };
        let p1 = scopes(&["p1"]);
        let eligible = |rows: i32, accept: u8, cursor: Option<&str>, eff: &ScopeMap| {
            image_eligible(P, table, eff, &limits(rows, accept), cursor).unwrap()
        };
        assert!(eligible(2, 0b0111, None, &p1), "3 rows > a 2-row page");
        assert!(!eligible(3, 0b0111, None, &p1), "3 rows fit a 3-row page");
        assert!(!eligible(0, 0b0111, None, &p1), "the default page (1000) holds them");
        assert!(!eligible(2, 0b0011, None, &p1), "no accept bit 2");
        assert!(!eligible(2, 0b0111, Some("a0"), &p1), "never mid-table");
        assert!(eligible(2, 0b0100, None, &p1), "bit 2 alone");
        assert!(!eligible(5, 0b0111, None, &p1), "p2's five rows are not p1's");
        assert!(eligible(7, 0b0111, None, &scopes(&["p1", "p2"])), "8 rows > 7");
        assert!(!eligible(8, 0b0111, None, &scopes(&["p1", "p2"])));
        // Negative limits clamp to 1 (§4.2): 3 rows > 1.
        assert!(snapshot_exceeds_one_page(P, table, &p1, &limits(-4, 0b0111)).unwrap());
        // Deleted rows never count.
        for i in 0..2 {
            let r = push(P, "alice", "c1", &epoch, vec![commit(&format!("d{i}"), vec![delete(&format!("a{i}"))])], Some(&allowed_p1_p2()));
            assert_eq!(r[0].status, PushStatus::Applied);
        }
        assert!(!eligible(1, 0b0111, None, &p1), "1 row left fits a 1-row page");
    }
}
