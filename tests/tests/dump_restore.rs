//! pg_dump / restore keeps everything: a database with the extension, a
//! registered schema, a scope resolver, rows in every `sync_*` table and in
//! the app table is dumped with `pg_dump` and restored into a fresh database;
//! every table's content, the registered version and the resolver are equal.
//!
//! Needs the server of `scripts/test` (`SYNCULAR_TEST_DSN`, superuser) and its
//! client binaries (`SYNCULAR_PG_BIN`, else `pg_dump`/`psql` on PATH).

use std::process::Command;

use postgres::Client;
use syncular_integration_tests::{connect_to, dsn, dsn_for_db};

fn pg_bin(tool: &str) -> String {
    match std::env::var("SYNCULAR_PG_BIN") {
        Ok(dir) if !dir.is_empty() => format!("{dir}/{tool}"),
        _ => tool.to_string(),
    }
}

const IR: &str = r#"{"version": 3, "tables": [{
  "name": "notes", "primaryKey": "id",
  "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "ws", "type": "string", "nullable": false},
    {"name": "body", "type": "string", "nullable": true},
    {"name": "meta", "type": "json", "nullable": true}],
  "scopes": ["ws:{ws}"],
  "indexes": [{"name": "notes_body", "columns": ["body"], "unique": true}]}]}"#;

fn seed(db: &mut Client) {
    db.batch_execute("CREATE EXTENSION syncular").unwrap();
    db.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&IR]).unwrap();
    db.batch_execute(
        r#"
        CREATE FUNCTION public.dump_resolver(partition text, actor_id text) RETURNS jsonb
          LANGUAGE sql AS $$ SELECT jsonb_build_object('ws', jsonb_build_array(actor_id)) $$;
        SELECT syncular.set_scope_resolver('public.dump_resolver(text,text)');
        INSERT INTO syncular.sync_partitions VALUES ('p1', 2, 0), ('p2', 1, 0);
        INSERT INTO syncular.sync_partition_registry VALUES ('p1', 'epoch-a', true, 1700000000000);
        INSERT INTO syncular.sync_commits VALUES
          ('p1', 1, 'c1', 'cc1', 'alice', 1700000000001), ('p1', 2, 'c1', 'cc2', 'alice', 1700000000002),
          ('p2', 1, 'c2', 'cc1', 'bob', 1700000000003);
        INSERT INTO syncular.sync_changes VALUES
          ('p1', 1, 0, 'notes', 'n1', 1, 1, '{"ws":"w1"}', '\x0001'),
          ('p1', 2, 0, 'notes', 'n1', 2, NULL, '{"ws":"w1"}', NULL),
          ('p2', 1, 0, 'notes', 'n1', 1, 1, '{"ws":"w9"}', '\x00ff');
        INSERT INTO syncular.sync_change_scopes VALUES ('p1', 'notes', 'ws', 'w1', 1), ('p1', 'notes', 'ws', 'w1', 2);
        INSERT INTO syncular.sync_row_scopes VALUES ('p2', 'notes', 'ws', 'w9', 'n1');
        INSERT INTO syncular.sync_push_results VALUES ('p1', 'c1', 'cc1', '{"status":"applied","commitSeq":1}');
        INSERT INTO syncular.sync_clients VALUES ('p1', 'c1', 'alice', 2, 2, '[{"id":"s1"}]', 1700000000004);
        INSERT INTO syncular.sync_tombstones VALUES ('p1', 'notes', 'n1', 2);
        INSERT INTO syncular.sync_blob_refs VALUES ('p2', 'notes', 'n1', 'sha256:ab');
        INSERT INTO syncular.sync_blobs VALUES ('p2', 'sha256:ab', 3, 1, 1700000000000);
        INSERT INTO syncular.sync_blob_chunks VALUES ('p2', 'sha256:ab', 0, '\x616263');
        INSERT INTO syncular.sync_reactions VALUES ('p1', 'k1', 'email', 1, '{}', 'c1', 'cc1', 1,
          1700000000000, 1700000000000, 'pending', 0, 5, NULL, NULL, NULL, NULL);
        -- Raw stored state, not a client-visible write: bypass the capture triggers.
        SET session_replication_role = replica;
        INSERT INTO public.notes VALUES
          ('p2', 'n1', 'n1', 'w9', 'hello', '{"a": [1, 2]}', 1, '{"ws":"w9"}', '\x00ff'),
          ('p1', 'n2', 'n2', 'w1', 'hello', NULL, 1, '{"ws":"w1"}', '\x0102');
        RESET session_replication_role;
        "#,
    )
    .unwrap();
}

/// table name → md5 of its rows (text form, sorted) and row count.
fn fingerprint(db: &mut Client) -> Vec<(String, String, i64)> {
    let tables: Vec<String> = db
        .query(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE c.relkind = 'r' AND n.nspname IN ('syncular', 'public') ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    tables
        .into_iter()
        .map(|t| {
            let row = db
                .query_one(
                    &format!("SELECT coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '-'), count(*) FROM {t} x"),
                    &[],
                )
                .unwrap();
            (t, row.get(0), row.get(1))
        })
        .collect()
}

#[test]
fn dump_and_restore_keep_log_registry_schema_and_app_rows() {
    let base = dsn();
    let mut admin = connect_to(&base);
    let src = format!("syncular_dump_src_{}", std::process::id());
    let dst = format!("syncular_dump_dst_{}", std::process::id());
    for db in [&src, &dst] {
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    }
    let src_dsn = dsn_for_db(&base, &src);
    let dst_dsn = dsn_for_db(&base, &dst);
    let mut source = connect_to(&src_dsn);
    seed(&mut source);
    let before = fingerprint(&mut source);
    // 11 seed tables + 3 marker tables + the app table, every one holding rows.
    assert!(before.iter().filter(|(_, _, n)| *n > 0).count() >= 15, "{before:?}");
    drop(source);

    let dump = std::env::temp_dir().join(format!("{src}.sql"));
    let out = Command::new(pg_bin("pg_dump")).args(["--format=plain", "--file"]).arg(&dump).arg(&src_dsn).output().unwrap();
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(pg_bin("psql"))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&dump)
        .arg(&dst_dsn)
        .output()
        .unwrap();
    assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));

    let mut restored = connect_to(&dst_dsn);
    let after = fingerprint(&mut restored);
    let differing: Vec<_> = before.iter().filter(|b| !after.contains(b)).map(|b| &b.0).collect();
    assert_eq!(after.len(), before.len(), "table sets differ: {before:?} vs {after:?}");
    assert!(differing.is_empty(), "restored contents differ in {differing:?}");
    let version: Option<i32> = restored.query_one("SELECT syncular.current_schema_version()", &[]).unwrap().get(0);
    assert_eq!(version, Some(3));
    let resolver: String = restored.query_one("SELECT resolver::text FROM syncular.sync_scope_resolver", &[]).unwrap().get(0);
    assert_eq!(resolver, "public.dump_resolver(text,text)");
    // The capture triggers came back (created after the data was loaded).
    let triggers: String = restored
        .query_one(
            "SELECT string_agg(tgname::text, ',' ORDER BY tgname) FROM pg_catalog.pg_trigger \
              WHERE tgrelid = 'public.notes'::regclass AND NOT tgisinternal",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        triggers,
        "syncular_capture_delete,syncular_capture_insert,syncular_capture_start,syncular_capture_truncate,\
         syncular_capture_update,zz_syncular_capture_row"
    );
    // The restored schema is live: re-registering the same IR is a no-op, and the
    // partition-leading unique index came back.
    restored.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&IR]).unwrap();
    let versions: i64 = restored.query_one("SELECT count(*) FROM syncular.sync_schema_versions", &[]).unwrap().get(0);
    assert_eq!(versions, 1);
    // Raw stored state (capture bypassed); RESET after, whatever the outcome.
    let dup = restored.batch_execute(
        "SET session_replication_role = replica; \
         INSERT INTO public.notes VALUES ('p1', 'n3', 'n3', 'w1', 'hello', NULL, 1, '{\"ws\":\"w1\"}', '\\x00')",
    );
    restored.batch_execute("RESET session_replication_role").unwrap();
    assert_eq!(dup.unwrap_err().code().map(|c| c.code().to_string()), Some("23505".into()));
    drop(restored);
    let _ = std::fs::remove_file(&dump);
    for db in [&src, &dst] {
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
    }
}
