//! CREATE EXTENSION installs exactly the seed's 0.22 Postgres storage: the
//! catalog of schema `syncular` (columns, types, nullability, defaults,
//! primary keys, constraints, indexes) equals the catalog of the verbatim
//! seed DDL created in a scratch schema. Plus: every table is marked for
//! pg_dump, and the extension lives in schema `syncular`, not relocatable.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::support::{int8, run, text};

    const SEED_DDL: &str = include_str!("seed_postgres_ddl.sql");

    const SEED_TABLES: &[&str] = &[
        "sync_partitions",
        "sync_partition_registry",
        "sync_row_scopes",
        "sync_commits",
        "sync_changes",
        "sync_change_scopes",
        "sync_push_results",
        "sync_reactions",
        "sync_clients",
        "sync_blob_refs",
        "sync_tombstones",
    ];

    /// Every catalog fact about the seed tables of `schema`, one sorted line each.
    fn catalog_of(schema: &str) -> Vec<String> {
        let tables = SEED_TABLES.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(",");
        let sql = format!(
            r#"
            WITH t AS (
              SELECT c.oid, c.relname FROM pg_catalog.pg_class c
                JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = '{schema}' AND c.relkind = 'r' AND c.relname IN ({tables})
            )
            SELECT string_agg(line, E'\n' ORDER BY line) FROM (
              SELECT format('column %s.%s #%s %s notnull=%s default=%s', t.relname, a.attname, a.attnum,
                            pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
                            coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), '-')) AS line
                FROM t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
                LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = t.oid AND d.adnum = a.attnum
              UNION ALL
              SELECT format('constraint %s on %s: %s', con.conname, t.relname, pg_catalog.pg_get_constraintdef(con.oid))
                FROM t JOIN pg_catalog.pg_constraint con ON con.conrelid = t.oid
              UNION ALL
              SELECT format('index %s on %s: unique=%s primary=%s %s', ic.relname, t.relname, i.indisunique, i.indisprimary,
                            regexp_replace(pg_catalog.pg_get_indexdef(i.indexrelid), '^.* USING ', 'USING '))
                FROM t JOIN pg_catalog.pg_index i ON i.indrelid = t.oid
                JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
              UNION ALL
              SELECT format('table %s', t.relname) FROM t
            ) facts"#
        );
        text(&sql).unwrap_or_default().lines().map(str::to_string).collect()
    }

    #[pg_test]
    fn installed_sync_tables_equal_the_seed_ddl() {
        run("CREATE SCHEMA seed_ddl_scratch");
        run("SET LOCAL search_path = seed_ddl_scratch");
        run(SEED_DDL);
        run("RESET search_path");
        let seed = catalog_of("seed_ddl_scratch");
        let installed = catalog_of("syncular");
        // The seed itself must have produced all 11 tables and their indexes.
        assert_eq!(seed.iter().filter(|l| l.starts_with("table ")).count(), SEED_TABLES.len());
        assert!(seed.iter().any(|l| l.starts_with("index sync_row_scopes_by_row on sync_row_scopes")), "{seed:#?}");
        assert!(seed.len() > 100, "seed catalog suspiciously small: {}", seed.len());
        if installed != seed {
            let missing: Vec<_> = seed.iter().filter(|l| !installed.contains(l)).collect();
            let extra: Vec<_> = installed.iter().filter(|l| !seed.contains(l)).collect();
            panic!("installed catalog differs from the seed DDL\nmissing: {missing:#?}\nextra: {extra:#?}");
        }
    }

    /// pg_upgrade refuses a cluster with a column of a reg* type other than
    /// regclass/regrole/regtype in any user table (the OIDs they store are not
    /// preserved); `tests/tests/pg_upgrade_check.rs` runs pg_upgrade itself.
    #[pg_test]
    fn no_extension_table_has_a_column_pg_upgrade_refuses() {
        let refused = text(
            "SELECT string_agg(c.relname || '.' || a.attname || ' ' || a.atttypid::regtype::text, ', ') \
               FROM pg_catalog.pg_attribute a \
               JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'syncular' AND a.attnum > 0 AND NOT a.attisdropped \
                AND a.atttypid IN ('pg_catalog.regproc'::regtype, 'pg_catalog.regprocedure'::regtype, \
                                   'pg_catalog.regoper'::regtype, 'pg_catalog.regoperator'::regtype, \
                                   'pg_catalog.regconfig'::regtype, 'pg_catalog.regdictionary'::regtype, \
                                   'pg_catalog.regnamespace'::regtype, 'pg_catalog.regcollation'::regtype)",
        );
        assert_eq!(refused, None, "columns pg_upgrade refuses");
    }

    #[pg_test]
    fn every_extension_table_is_marked_for_pg_dump() {
        // Except the segment cache (§5.1: cache entries, not durable state): deliberately not
        // dumped, rebuilt on demand (docs/src/sql/segments.md "Segments"); which segments the
        // object store holds goes with it, and the object store's per-day signing keys are the
        // mover's to hand over again (docs/src/operate/object-store.md).
        let unmarked = text(
            "SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_catalog.pg_class c \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'syncular' AND c.relkind = 'r' \
                AND c.oid <> ALL (SELECT unnest(extconfig) FROM pg_catalog.pg_extension WHERE extname = 'syncular')",
        );
        assert_eq!(
            unmarked.as_deref(),
            Some("sync_object_store_keys,sync_segment_chunks,sync_segment_objects,sync_segment_publications,sync_segment_url_keys,sync_segments"),
            "only the segment cache and the object store's signing keys are left out of pg_dump"
        );
        let marked = int8(
            "SELECT count(*) FROM pg_catalog.pg_extension e, unnest(e.extconfig) WHERE e.extname = 'syncular'",
        );
        assert!(marked.unwrap_or(0) >= 14, "expected >= 14 config tables, got {marked:?}");
    }

    #[pg_test]
    fn extension_objects_live_in_schema_syncular_which_is_a_member() {
        assert_eq!(
            text("SELECT extrelocatable::text FROM pg_catalog.pg_extension WHERE extname = 'syncular'"),
            Some("false".to_string())
        );
        // The schema is an extension member, so DROP EXTENSION removes it.
        assert_eq!(
            int8(
                "SELECT count(*) FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
                  WHERE e.extname = 'syncular' AND d.deptype = 'e' \
                    AND d.classid = 'pg_catalog.pg_namespace'::regclass AND d.objid = 'syncular'::regnamespace"
            ),
            Some(1)
        );
        // Every member table and function (besides the pg_test harness' schema `tests`) is in `syncular`.
        let stray = text(
            "SELECT string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, 0), ', ') \
               FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
               LEFT JOIN pg_catalog.pg_class c ON d.classid = 'pg_catalog.pg_class'::regclass AND c.oid = d.objid \
               LEFT JOIN pg_catalog.pg_proc p ON d.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = d.objid \
              WHERE e.extname = 'syncular' AND d.deptype = 'e' \
                AND coalesce(c.relnamespace, p.pronamespace) NOT IN ('syncular'::regnamespace, 'tests'::regnamespace)",
        );
        assert_eq!(stray, None);
        assert!(int8("SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = 'syncular'::regnamespace").unwrap_or(0) >= 4);
    }
}
