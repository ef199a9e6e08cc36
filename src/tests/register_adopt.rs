//! register_schema safety around existing relations: adopting a kept app
//! table only when it is the admin's own, untampered table of the expected
//! shape (and rebuilding its scope index so bootstrap serves it); re-checking
//! kept tables on a version bump; refusing to re-add a retired table under
//! another layout; refusing a declared index name that is already taken.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};

    use crate::tests::support::*;
    use crate::tests::sync_pull_support::{self as pull, header, sub, Client, ACCEPT_ROWS};

    const REFUSED: (&str, &str) = ("55000", "syncular.schema_refused");

    fn items(version: i32) -> Value {
        ir_of(version, vec![small_table("items")])
    }

    /// Simulates `DROP EXTENSION` + `CREATE EXTENSION`: every syncular table
    /// is emptied, the app tables stay. DELETE, not TRUNCATE: pg_tests run
    /// concurrently, and TRUNCATE's ACCESS EXCLUSIVE locks on every sync table
    /// deadlocked against tests registering a schema at the same time. Each
    /// test's transaction rolls back, so no other test's rows are visible here.
    fn forget_extension_state() {
        run("DO $$ DECLARE t text; BEGIN \
               FOR t IN SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'syncular' LOOP \
                 EXECUTE format('DELETE FROM syncular.%I', t); \
               END LOOP; END $$");
    }

    /// A kept `public.items` app table (registered, then the marker forgotten).
    fn kept_items_table() {
        register(&items(1)).unwrap();
        forget_extension_state();
    }

    fn refused_adoption(fragment: &str) {
        expect_error(register(&items(1)), REFUSED.0, REFUSED.1, fragment);
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_schema_versions"), Some(0), "nothing registered");
    }

    fn other_role() {
        run("DO $$ BEGIN CREATE ROLE syncular_test_mallory; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
    }

    #[pg_test]
    fn refuses_to_adopt_a_table_owned_by_another_role() {
        kept_items_table();
        other_role();
        run("ALTER TABLE public.items OWNER TO syncular_test_mallory");
        refused_adoption("is owned by role \"syncular_test_mallory\"");
    }

    #[pg_test]
    fn refuses_to_adopt_a_table_with_a_trigger_rule_or_row_security() {
        kept_items_table();
        run("CREATE FUNCTION public.sneaky() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$");
        run("CREATE TRIGGER sneaky BEFORE INSERT ON public.items FOR EACH ROW EXECUTE FUNCTION public.sneaky()");
        refused_adoption("has 1 user trigger(s)");
        run("DROP TRIGGER sneaky ON public.items");
        run("CREATE RULE sneaky AS ON INSERT TO public.items DO ALSO NOTIFY sneaky");
        refused_adoption("has 1 rule(s)");
        run("DROP RULE sneaky ON public.items");
        run("ALTER TABLE public.items ENABLE ROW LEVEL SECURITY");
        refused_adoption("row-level security");
        run("ALTER TABLE public.items DISABLE ROW LEVEL SECURITY");
        assert_eq!(register(&items(1)).unwrap(), "created");
    }

    #[pg_test]
    fn refuses_to_adopt_wrong_column_types_or_primary_key() {
        kept_items_table();
        run("ALTER TABLE public.items ALTER COLUMN _sync_version TYPE text");
        refused_adoption("storage column \"_sync_version\" is text NOT NULL — expected bigint NOT NULL");
        run("ALTER TABLE public.items ALTER COLUMN _sync_version TYPE bigint USING _sync_version::bigint");
        run("ALTER TABLE public.items ALTER COLUMN _sync_scopes DROP NOT NULL");
        refused_adoption("storage column \"_sync_scopes\" is jsonb — expected jsonb NOT NULL");
        run("ALTER TABLE public.items ALTER COLUMN _sync_scopes SET NOT NULL");
        run("ALTER TABLE public.items ALTER COLUMN label TYPE bigint USING NULL");
        refused_adoption("column \"label\" is bigint, expected text");
        run("ALTER TABLE public.items ALTER COLUMN label TYPE text");
        run("ALTER TABLE public.items DROP CONSTRAINT items_pkey");
        run("ALTER TABLE public.items ADD PRIMARY KEY (_sync_row_id)");
        refused_adoption("primary key is [\"_sync_row_id\"]");
        run("ALTER TABLE public.items DROP CONSTRAINT items_pkey");
        run("ALTER TABLE public.items ADD PRIMARY KEY (_sync_partition, _sync_row_id)");
        assert_eq!(register(&items(1)).unwrap(), "created");
    }

    #[pg_test]
    fn a_version_bump_rechecks_owner_and_triggers_of_kept_tables() {
        register(&items(1)).unwrap();
        run("CREATE FUNCTION public.sneaky() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$");
        run("CREATE TRIGGER sneaky BEFORE INSERT ON public.items FOR EACH ROW EXECUTE FUNCTION public.sneaky()");
        expect_error(register(&items(2)), REFUSED.0, REFUSED.1, "public.items has 1 user trigger(s)");
        run("DROP TRIGGER sneaky ON public.items");
        other_role();
        run("ALTER TABLE public.items OWNER TO syncular_test_mallory");
        expect_error(register(&items(2)), REFUSED.0, REFUSED.1, "is owned by role \"syncular_test_mallory\"");
        assert_eq!(int8("SELECT max(version) FROM syncular.sync_schema_versions"), Some(1), "bump refused");
        run("ALTER TABLE public.items OWNER TO CURRENT_USER");
        assert!(register(&items(2)).unwrap().starts_with("migrated"));
    }

    #[pg_test]
    fn an_adopted_table_is_served_by_bootstrap() {
        pull::setup();
        let mut a = Client::new("p1", "alice", "ca");
        a.push_ok(vec![pull::task("t1", "w1", "one"), pull::task("t2", "w1", "two")]);
        a.push_ok(vec![pull::task("t3", "w2", "other scope")]);
        forget_extension_state();
        assert_eq!(int8("SELECT count(*) FROM public.tasks"), Some(3), "app rows kept");
        assert_eq!(register(&pull::pull_ir()).unwrap(), "created");
        assert_eq!(
            text("SELECT string_agg(partition || '/' || tbl || '/' || var || '=' || value || '/' || row_id, ',' ORDER BY row_id) FROM syncular.sync_row_scopes"),
            Some("p1/tasks/ws=w1/t1,p1/tasks/ws=w1/t2,p1/tasks/ws=w2/t3".into())
        );
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let sec = p.one();
        assert!(sec.start.bootstrap);
        assert_eq!(sec.segment_ids(), ["t1", "t2"]);
        assert_eq!(pull::task_values(&sec.segment_rows()[1].2), ("t2".into(), "w1".into(), "two".into()));
    }

    #[pg_test]
    fn re_adding_a_retired_table_needs_its_old_layout() {
        let notes = small_table("notes");
        register(&ir_of(1, vec![small_table("items"), notes.clone()])).unwrap();
        register_with(&ir_of(2, vec![small_table("items")]), "public", true).unwrap();
        let mut changed = notes.clone();
        changed["columns"][2] = json!({"name": "body", "type": "integer", "nullable": true});
        expect_error(
            register(&ir_of(3, vec![small_table("items"), changed])),
            REFUSED.0,
            REFUSED.1,
            "table \"notes\" was retired after version 1 with a different layout",
        );
        assert!(!table_exists("public", "notes"));
        assert_eq!(int8("SELECT max(version) FROM syncular.sync_schema_versions"), Some(2));
        assert!(register(&ir_of(3, vec![small_table("items"), notes])).unwrap().starts_with("migrated"));
        assert!(table_exists("public", "notes"));
    }

    #[pg_test]
    fn refuses_a_declared_index_name_that_is_taken() {
        run("CREATE TABLE public.sync_ix_pre(x int)");
        let mut t = small_table("items");
        t["indexes"] = json!([{"name": "pre", "columns": ["label"], "unique": false}]);
        expect_error(
            register(&ir_of(1, vec![t.clone()])),
            REFUSED.0,
            REFUSED.1,
            "declared index \"pre\" of table \"items\" is created as public.sync_ix_pre, but a relation (relkind \"r\") already has that name",
        );
        assert!(!table_exists("public", "items"), "nothing half-created");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_schema_versions"), Some(0));
        // Same on a version bump: the bump is refused, v1 stays.
        register(&items(1)).unwrap();
        expect_error(register(&ir_of(2, vec![t])), REFUSED.0, REFUSED.1, "public.sync_ix_pre");
        assert_eq!(int8("SELECT max(version) FROM syncular.sync_schema_versions"), Some(1));
        assert_eq!(int8("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'sync_ix_pre' AND relkind = 'r'"), Some(1));
    }
}
