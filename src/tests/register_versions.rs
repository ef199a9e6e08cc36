//! register_schema version rules: lower / same-different / missing physical
//! column / non-append-only changes are refused (`syncular.schema_refused`,
//! 55000, nothing changed); allow_drop retires; appended nullable columns
//! rewrite stored payloads.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::row_codec::{decode_row, encode_row, RowValue};
    use syncular_protocol::schema_ir::Schema;

    use crate::tests::support::*;

    const REFUSED: (&str, &str) = ("55000", "syncular.schema_refused");

    fn refused(ir: &Value, fragment: &str) {
        let before = int8("SELECT max(version) FROM syncular.sync_schema_versions");
        let layouts = text("SELECT string_agg(tbl || layout::text, ';' ORDER BY tbl) FROM syncular.sync_schema_tables");
        expect_error(register(ir), REFUSED.0, REFUSED.1, fragment);
        assert_eq!(int8("SELECT max(version) FROM syncular.sync_schema_versions"), before, "version unchanged");
        assert_eq!(
            text("SELECT string_agg(tbl || layout::text, ';' ORDER BY tbl) FROM syncular.sync_schema_tables"),
            layouts,
            "layouts unchanged"
        );
    }

    /// `items` (id, ws, label) at `version`, plus `extra` columns appended.
    fn items(version: i32, extra: Vec<Value>) -> Value {
        let mut t = small_table("items");
        t["columns"].as_array_mut().unwrap().extend(extra);
        ir_of(version, vec![t])
    }

    fn with_columns(version: i32, columns: Value) -> Value {
        let mut t = small_table("items");
        t["columns"] = columns;
        ir_of(version, vec![t])
    }

    #[pg_test]
    fn refuses_a_lower_version() {
        register(&items(3, vec![])).unwrap();
        refused(&items(2, vec![]), "lower than the registered version 3");
    }

    #[pg_test]
    fn refuses_same_version_with_a_different_layout() {
        register(&items(1, vec![])).unwrap();
        refused(
            &items(1, vec![json!({"name": "extra", "type": "string", "nullable": true})]),
            "different layout for table \"items\"",
        );
        // nullability is part of the layout
        refused(
            &with_columns(
                1,
                json!([
                    {"name": "id", "type": "string", "nullable": false},
                    {"name": "ws", "type": "string", "nullable": false},
                    {"name": "label", "type": "string", "nullable": false}
                ]),
            ),
            "different layout",
        );
    }

    #[pg_test]
    fn refuses_same_version_with_other_scopes_or_indexes() {
        register(&items(1, vec![])).unwrap();
        let mut ir = items(1, vec![]);
        ir["tables"][0]["indexes"] = json!([{"name": "by_label", "columns": ["label"], "unique": false}]);
        refused(&ir, "different definition of table \"items\"");
    }

    #[pg_test]
    fn refuses_a_missing_physical_column() {
        register(&items(1, vec![])).unwrap();
        run("ALTER TABLE public.items DROP COLUMN _sync_scopes");
        refused(&items(1, vec![]), "missing column \"_sync_scopes\"");
        refused(&items(2, vec![]), "missing column \"_sync_scopes\"");
        run("DROP TABLE public.items");
        refused(&items(1, vec![]), "missing from schema");
    }

    #[pg_test]
    fn refuses_a_removed_column() {
        register(&items(1, vec![])).unwrap();
        refused(
            &with_columns(
                2,
                json!([{"name": "id", "type": "string", "nullable": false}, {"name": "ws", "type": "string", "nullable": false}]),
            ),
            "[\"label\"] were removed",
        );
    }

    #[pg_test]
    fn refuses_a_renamed_column() {
        register(&items(1, vec![])).unwrap();
        refused(
            &with_columns(
                2,
                json!([
                    {"name": "id", "type": "string", "nullable": false},
                    {"name": "ws", "type": "string", "nullable": false},
                    {"name": "caption", "type": "string", "nullable": true}
                ]),
            ),
            "column 2 changed from label string to caption string",
        );
    }

    #[pg_test]
    fn refuses_a_retyped_column() {
        register(&items(1, vec![])).unwrap();
        refused(
            &with_columns(
                2,
                json!([
                    {"name": "id", "type": "string", "nullable": false},
                    {"name": "ws", "type": "string", "nullable": false},
                    {"name": "label", "type": "json", "nullable": true}
                ]),
            ),
            "column 2 changed from label string to label json",
        );
    }

    #[pg_test]
    fn refuses_reordered_columns() {
        register(&items(1, vec![])).unwrap();
        refused(
            &with_columns(
                2,
                json!([
                    {"name": "id", "type": "string", "nullable": false},
                    {"name": "label", "type": "string", "nullable": true},
                    {"name": "ws", "type": "string", "nullable": false}
                ]),
            ),
            "column 1 changed",
        );
    }

    #[pg_test]
    fn refuses_an_appended_non_nullable_column() {
        register(&items(1, vec![])).unwrap();
        refused(
            &items(2, vec![json!({"name": "must", "type": "integer", "nullable": false})]),
            "appended column \"must\" must be nullable",
        );
        assert_eq!(columns_of("public", "items").len(), 9, "no column added");
    }

    #[pg_test]
    fn refuses_a_primary_key_or_scope_change() {
        register(&items(1, vec![])).unwrap();
        let mut ir = items(2, vec![]);
        ir["tables"][0]["primaryKey"] = json!("ws");
        refused(&ir, "primary key changed");
        let mut ir = items(2, vec![]);
        ir["tables"][0]["scopes"] = json!(["ws:{ws}", "l:{label}"]);
        refused(&ir, "scope variables/columns changed");
    }

    #[pg_test]
    fn refuses_moving_app_schema() {
        register(&items(1, vec![])).unwrap();
        expect_error(register_with(&items(2, vec![]), "elsewhere", false), REFUSED.0, REFUSED.1, "moving app tables");
    }

    #[pg_test]
    fn a_dropped_table_needs_allow_drop_then_is_retired() {
        register(&ir_of(1, vec![small_table("items"), small_table("notes")])).unwrap();
        run("INSERT INTO syncular.sync_row_scopes VALUES ('p', 'notes', 'ws', 'w1', 'n1'), ('p', 'items', 'ws', 'w1', 'i1')");
        refused(&ir_of(2, vec![small_table("items")]), "table \"notes\" is missing from version 2: pass allow_drop");
        assert!(table_exists("public", "notes"));
        let outcome = register_with(&ir_of(2, vec![small_table("items")]), "public", true).unwrap();
        assert!(outcome.contains("retired tables: [\"notes\"]"), "{outcome}");
        assert!(!table_exists("public", "notes"));
        assert!(table_exists("public", "items"));
        assert_eq!(text("SELECT string_agg(tbl, ',') FROM syncular.sync_row_scopes"), Some("items".into()));
        assert_eq!(text("SELECT string_agg(tbl, ',') FROM syncular.sync_schema_tables"), Some("items".into()));
        assert_eq!(int8("SELECT syncular.current_schema_version()::bigint"), Some(2));
    }

    #[pg_test]
    fn appended_nullable_columns_rewrite_stored_payloads() {
        let v1 = items(1, vec![]);
        register(&v1).unwrap();
        let layout1 = Schema::from_value(&v1).unwrap().tables[0].layout().clone();
        // 2,500 rows across two partitions: more than two rewrite batches.
        let mut expected = Vec::new();
        // Raw stored state, not a client-visible write: bypass the capture triggers.
        run("SET LOCAL session_replication_role = replica");
        for i in 0..2500 {
            let partition = if i % 2 == 0 { "pa" } else { "pb" };
            let row = vec![
                Some(RowValue::String(format!("r{i:05}"))),
                Some(RowValue::String("w1".into())),
                if i % 3 == 0 { None } else { Some(RowValue::String(format!("label {i}"))) },
            ];
            let payload = encode_row(&layout1, &row).unwrap();
            Spi::run_with_args(
                "INSERT INTO public.items(_sync_partition, _sync_row_id, id, ws, label, _sync_version, _sync_scopes, _sync_payload) \
                 VALUES ($1, $2, $2, 'w1', $3, 1, '{\"ws\":\"w1\"}', $4)",
                &[
                    partition.into(),
                    format!("r{i:05}").into(),
                    match &row[2] { Some(RowValue::String(s)) => Some(s.clone()), _ => None }.into(),
                    payload.into(),
                ],
            )
            .unwrap();
            expected.push((partition.to_string(), format!("r{i:05}"), row));
        }
        run("RESET session_replication_role");
        let v2 = items(
            2,
            vec![
                json!({"name": "due", "type": "integer", "nullable": true}),
                json!({"name": "meta", "type": "json", "nullable": true}),
            ],
        );
        let outcome = register(&v2).unwrap();
        assert_eq!(outcome, "migrated (rewritten rows: 2500, retired tables: [])");
        let layout2 = Schema::from_value(&v2).unwrap().tables[0].layout().clone();
        // ALTER TABLE appends physically after the storage columns.
        assert_eq!(columns_of("public", "items")[9..], ["due bigint".to_string(), "meta jsonb".to_string()]);
        for (partition, row_id, row) in expected.iter().step_by(97) {
            let payload = Spi::get_one_with_args::<Vec<u8>>(
                "SELECT _sync_payload FROM public.items WHERE _sync_partition = $1 AND _sync_row_id = $2",
                &[partition.as_str().into(), row_id.as_str().into()],
            )
            .unwrap()
            .unwrap();
            let mut want = row.clone();
            want.extend([None, None]);
            assert_eq!(payload, encode_row(&layout2, &want).unwrap(), "row {row_id}");
            assert_eq!(decode_row(&layout2, &payload).unwrap(), want);
        }
        assert_eq!(
            text("SELECT layout->4->>'name' || ',' || (layout->4->>'nullable') FROM syncular.sync_schema_tables WHERE tbl = 'items'"),
            Some("meta,true".into())
        );
    }

    #[pg_test]
    fn a_higher_version_adds_tables_and_rebuilds_indexes() {
        register(&items(1, vec![])).unwrap();
        let mut ir = ir_of(2, vec![small_table("items"), small_table("notes")]);
        ir["tables"][0]["indexes"] = json!([{"name": "by_label", "columns": ["label"], "unique": false}]);
        register(&ir).unwrap();
        assert!(table_exists("public", "notes"));
        assert_eq!(
            text("SELECT regexp_replace(pg_catalog.pg_get_indexdef('public.sync_ix_by_label'::regclass), '^.* USING ', '')"),
            Some("btree (_sync_partition, label)".into())
        );
        // v3 drops the index again; an operator-added index survives.
        run("CREATE INDEX ops_tuning ON public.items(label)");
        register(&ir_of(3, vec![small_table("items"), small_table("notes")])).unwrap();
        assert_eq!(int8("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'sync_ix_by_label'"), Some(0));
        assert_eq!(int8("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'ops_tuning'"), Some(1));
    }

    #[pg_test]
    fn refuses_to_take_over_a_foreign_table() {
        // A name no other test registers: a concurrent test registering
        // `items` holds the registration lock and waits for this test's
        // uncommitted `CREATE TABLE public.items`, while this one waits for
        // the lock — a deadlock (40P01) seen on Postgres 18.
        run("CREATE TABLE public.foreign_items(id text PRIMARY KEY, ws text, label text)");
        refused(&ir_of(1, vec![small_table("foreign_items")]), "already exists and is not a syncular app table");
        assert_eq!(columns_of("public", "foreign_items").len(), 3, "foreign table untouched");
    }

    #[pg_test]
    fn adopts_an_app_table_left_by_drop_extension() {
        register(&items(1, vec![])).unwrap();
        // Raw stored state, not a client-visible write: bypass the capture triggers.
        run("SET LOCAL session_replication_role = replica; \
             INSERT INTO public.items VALUES ('p', 'r1', 'r1', 'w1', NULL, 1, '{}', '\\x00'); \
             RESET session_replication_role");
        // Simulate DROP EXTENSION + CREATE EXTENSION: the marker is gone, the table stays.
        run("DELETE FROM syncular.sync_schema_tables; DELETE FROM syncular.sync_schema_versions");
        assert_eq!(register(&items(1, vec![])).unwrap(), "created");
        assert_eq!(int8("SELECT count(*) FROM public.items"), Some(1));
    }

    /// The modes in which this backend holds the schema fence
    /// (`store::schema_store::SCHEMA_FENCE_CLASS`), e.g. `ExclusiveLock,ShareLock`.
    fn schema_fence_modes() -> Option<String> {
        text(&format!(
            "SELECT string_agg(mode, ',' ORDER BY mode) FROM pg_catalog.pg_locks \
             WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() \
               AND classid = {} AND objid = 0 AND objsubid = 2",
            crate::store::schema_store::SCHEMA_FENCE_CLASS
        ))
    }

    #[pg_test]
    fn a_registration_takes_the_schema_fence_exclusively_and_a_sync_request_shares_it() {
        assert_eq!(schema_fence_modes(), None, "nothing took the fence yet");
        crate::tests::sync_support::setup_tasks();
        assert_eq!(schema_fence_modes().as_deref(), Some("ExclusiveLock"));
        crate::tests::sync_support::acquire_epoch("fence-p", "alice", "fence-c");
        assert_eq!(schema_fence_modes().as_deref(), Some("ExclusiveLock,ShareLock"));
    }

    #[pg_test]
    fn syncular_commit_shares_the_schema_fence() {
        register(&items(1, vec![])).unwrap();
        assert_eq!(schema_fence_modes().as_deref(), Some("ExclusiveLock"));
        run("SELECT syncular.commit('fence-p', 'alice', \
               '[{\"table\": \"items\", \"op\": \"upsert\", \"row\": {\"id\": \"r1\", \"ws\": \"w1\", \"label\": \"x\"}}]'::jsonb, \
               allowed_scopes => '{\"ws\": [\"*\"]}'::jsonb)");
        assert_eq!(schema_fence_modes().as_deref(), Some("ExclusiveLock,ShareLock"));
    }
}
