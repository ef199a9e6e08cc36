//! register_schema: the app table it creates, and every IR validation
//! (fail loud, `syncular.invalid_schema` / 42P15, nothing changed).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};

    use crate::tests::support::*;

    const INVALID: (&str, &str) = ("42P15", "syncular.invalid_schema");

    fn expect_invalid(ir: Value, fragment: &str) {
        expect_error(register(&ir), INVALID.0, INVALID.1, fragment);
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_schema_versions"), Some(0), "nothing registered");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_schema_tables"), Some(0));
    }

    fn with_table(mutate: impl FnOnce(&mut Value)) -> Value {
        let mut t = small_table("items");
        mutate(&mut t);
        ir_of(1, vec![t])
    }

    #[pg_test]
    fn creates_the_app_table_with_typed_projection_columns() {
        assert_eq!(register(&tasks_ir(1)).unwrap(), "created");
        assert_eq!(
            columns_of("public", "tasks"),
            vec![
                "_sync_partition text not null",
                "_sync_row_id text not null",
                "id text",
                "project_id text",
                "title text",
                "n bigint",
                "f double precision",
                "done boolean",
                "meta jsonb",
                "bin bytea",
                "att text",
                "doc bytea",
                "secret bytea",
                "code text",
                "_sync_version bigint not null",
                "_sync_scopes jsonb not null",
                "_sync_payload bytea not null",
                "_sync_column_versions bytea",
            ]
        );
        assert_eq!(
            text("SELECT pg_catalog.pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint WHERE conrelid = 'public.tasks'::regclass AND contype = 'p'"),
            Some("PRIMARY KEY (_sync_partition, _sync_row_id)".into())
        );
        assert_eq!(
            text("SELECT regexp_replace(pg_catalog.pg_get_indexdef('public.sync_ix_tasks_code'::regclass), '^.* USING ', '')"),
            Some("btree (_sync_partition, code)".into())
        );
        assert_eq!(text("SELECT indisunique::text FROM pg_catalog.pg_index WHERE indexrelid = 'public.sync_ix_tasks_code'::regclass"), Some("true".into()));
        // ftsIndexes are client-only: nothing besides the PK and the declared index.
        assert_eq!(int8("SELECT count(*) FROM pg_catalog.pg_index WHERE indrelid = 'public.tasks'::regclass"), Some(2));
        // Not an extension member: DROP EXTENSION leaves it.
        assert_eq!(
            int8("SELECT count(*) FROM pg_catalog.pg_depend WHERE objid = 'public.tasks'::regclass AND deptype = 'e'"),
            Some(0)
        );
        // Marker: version row + per-table layout in IR order.
        assert_eq!(int8("SELECT version FROM syncular.sync_schema_versions"), Some(1));
        assert_eq!(
            text("SELECT layout->11->>'name' || ' ' || (layout->10->>'type') || ' ' || jsonb_array_length(layout) FROM syncular.sync_schema_tables WHERE tbl = 'tasks'"),
            Some("code bytes 12".into())
        );
        assert_eq!(int8("SELECT syncular.current_schema_version()::bigint"), Some(1));
    }

    #[pg_test]
    fn the_sql_function_returns_void_and_takes_named_defaults() {
        register_sql(&tasks_ir(1), "public", false).unwrap();
        assert!(table_exists("public", "tasks"));
        run("SELECT syncular.register_schema(ir => (SELECT ir FROM syncular.sync_schema_versions), app_schema => 'public')");
        assert_eq!(
            text("SELECT pg_catalog.format_type(prorettype, NULL) || ' ' || pronargdefaults FROM pg_catalog.pg_proc WHERE proname = 'register_schema'"),
            Some("void 2".into())
        );
        expect_error(register_sql(&json!({"version": 0}), "public", false), INVALID.0, INVALID.1, "schema IR");
        expect_error(register_sql(&tasks_ir(0), "public", false), INVALID.0, INVALID.1, "version");
    }

    #[pg_test]
    fn identical_re_registration_is_unchanged() {
        assert_eq!(register(&tasks_ir(1)).unwrap(), "created");
        assert_eq!(register(&tasks_ir(1)).unwrap(), "unchanged");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_schema_versions"), Some(1));
    }

    #[pg_test]
    fn app_schema_argument_places_tables() {
        assert_eq!(register_with(&tasks_ir(1), "app data", false).unwrap(), "created");
        assert!(table_exists("app data", "tasks"));
        assert!(!table_exists("public", "tasks"));
        expect_error(register_with(&tasks_ir(1), "syncular", false), INVALID.0, INVALID.1, "reserved");
    }

    #[pg_test]
    fn refuses_a_table_without_scopes() {
        expect_invalid(with_table(|t| t["scopes"] = json!([])), "scope");
    }

    #[pg_test]
    fn refuses_a_pattern_with_two_variables() {
        expect_invalid(with_table(|t| t["scopes"] = json!(["ws:{ws}:{label}"])), "exactly one variable");
    }

    #[pg_test]
    fn refuses_a_pattern_without_variable() {
        expect_invalid(with_table(|t| t["scopes"] = json!(["ws"])), "exactly one variable");
    }

    #[pg_test]
    fn refuses_a_variable_mapped_to_two_columns() {
        expect_invalid(
            with_table(|t| {
                t["scopes"] = json!([{"pattern": "ws:{ws}"}, {"pattern": "team:{ws}", "column": "label"}])
            }),
            "ws",
        );
    }

    #[pg_test]
    fn refuses_a_missing_scope_column() {
        expect_invalid(with_table(|t| t["scopes"] = json!([{"pattern": "org:{org_id}"}])), "org_id");
    }

    #[pg_test]
    fn refuses_a_non_string_scope_column() {
        expect_invalid(
            with_table(|t| {
                t["columns"].as_array_mut().unwrap().push(json!({"name": "num", "type": "integer", "nullable": true}));
                t["scopes"] = json!([{"pattern": "n:{num}"}]);
            }),
            "num",
        );
    }

    #[pg_test]
    fn refuses_a_crdt_scope_column() {
        expect_invalid(
            with_table(|t| {
                t["columns"].as_array_mut().unwrap().push(json!({"name": "d", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"}));
                t["scopes"] = json!([{"pattern": "d:{d}"}]);
            }),
            "\"d\"",
        );
    }

    #[pg_test]
    fn refuses_an_encrypted_scope_column() {
        expect_invalid(
            with_table(|t| {
                t["columns"].as_array_mut().unwrap().push(json!({"name": "s", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "string"}));
                t["scopes"] = json!([{"pattern": "s:{s}"}]);
            }),
            "\"s\"",
        );
    }

    #[pg_test]
    fn refuses_a_missing_primary_key() {
        expect_invalid(with_table(|t| t["primaryKey"] = json!("nope")), "nope");
    }

    #[pg_test]
    fn refuses_an_unknown_type() {
        expect_invalid(with_table(|t| t["columns"][2]["type"] = json!("decimal")), "decimal");
    }

    #[pg_test]
    fn refuses_reserved_and_invalid_identifiers() {
        expect_invalid(with_table(|t| t["columns"][2]["name"] = json!("_sync_version")), "_sync_version");
        expect_invalid(with_table(|t| t["name"] = json!("")), "");
        expect_invalid(with_table(|t| t["name"] = json!("x".repeat(64))), "63");
    }

    #[pg_test]
    fn refuses_malformed_json() {
        expect_invalid(json!({"version": 1}), "tables");
        expect_invalid(json!([1, 2]), "schema IR");
    }

    #[pg_test]
    fn quotes_identifiers() {
        let ir = ir_of(
            1,
            vec![json!({
                "name": "Odd \"Table\"; DROP",
                "primaryKey": "Key Col",
                "columns": [
                    {"name": "Key Col", "type": "string", "nullable": false},
                    {"name": "select", "type": "string", "nullable": false}
                ],
                "scopes": ["ws:{select}"],
                "indexes": [{"name": "Odd idx", "columns": ["select"], "unique": false}]
            })],
        );
        assert_eq!(register(&ir).unwrap(), "created");
        assert_eq!(
            columns_of("public", "Odd \"Table\"; DROP"),
            vec![
                "_sync_partition text not null",
                "_sync_row_id text not null",
                "Key Col text",
                "select text",
                "_sync_version bigint not null",
                "_sync_scopes jsonb not null",
                "_sync_payload bytea not null",
                "_sync_column_versions bytea",
            ]
        );
        assert_eq!(int8("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'sync_ix_Odd idx'"), Some(1));
    }
}
