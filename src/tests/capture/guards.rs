//! Capture guards found by review: a statement writes one partition, a
//! push's cascade onto another app table is logged in the push's commit, payload-only values
//! survive an update, a BEFORE ROW trigger running after the capture is
//! refused, and over-long partitions are refused.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;
    use syncular_protocol::row_codec::{decode_row, encode_row, RowValue};
    use syncular_protocol::schema_ir::Schema;

    use crate::tests::capture::support::*;
    use crate::tests::support::{register, run, text};

    /// `parents(id pk, ws scope)` and `kids(id pk, ws scope, parent, note json)`.
    fn ir() -> serde_json::Value {
        json!({"version": 1, "tables": [
            {"name": "parents", "primaryKey": "id", "scopes": ["ws:{ws}"], "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "ws", "type": "string", "nullable": false}]},
            {"name": "kids", "primaryKey": "id", "scopes": ["ws:{ws}"], "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "ws", "type": "string", "nullable": false},
                {"name": "parent", "type": "string", "nullable": true},
                {"name": "note", "type": "json", "nullable": true},
                {"name": "label", "type": "string", "nullable": true}]}]})
    }

    const APP_TABLES: &[&str] = &["public.parents", "public.kids"];

    fn setup() {
        register(&ir()).expect("register parents/kids");
    }

    fn last_op(p: &str, tbl: &str, row_id: &str) -> Option<String> {
        text(&format!(
            "SELECT op::text FROM syncular.sync_changes WHERE partition = '{p}' AND tbl = '{tbl}' AND row_id = '{row_id}' \
             ORDER BY commit_seq DESC, idx DESC LIMIT 1"
        ))
    }

    #[pg_test]
    fn a_statement_that_switches_the_partition_midway_is_refused() {
        setup();
        set_partition("cap-g-switch-a");
        refused_in(
            APP_TABLES,
            "INSERT INTO public.parents (id, ws) SELECT 'r' || g, \
               CASE WHEN g = 2 THEN pg_catalog.set_config('syncular.partition', 'cap-g-switch-b', true) ELSE 'w1' END \
             FROM generate_series(1, 3) g",
            "0A000",
            "syncular.write_refused",
            "syncular.partition changed while a statement on synced table \"parents\" ran",
        );
    }

    #[pg_test]
    fn a_push_cascading_onto_another_app_table_logs_it_in_the_same_commit() {
        const P: &str = "cap-g-cascade";
        setup();
        run("ALTER TABLE public.kids ADD CONSTRAINT kids_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.parents (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        set_partition(P);
        write_ok("INSERT INTO public.parents (id, ws) VALUES ('a', 'w1')");
        write_ok("INSERT INTO public.kids (id, ws, parent) VALUES ('k1', 'w1', 'a'), ('k2', 'w1', 'a')");
        run("RESET syncular.partition");
        // A server-authored delete of the parent (no syncular.partition set): the engine writes
        // `parents`, the foreign key deletes the kids — logged in the engine's commit.
        let out = Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.commit($1, 'svc', $2, allowed_scopes => $3)",
            &[P.into(), JsonB(json!([{"table": "parents", "op": "delete", "rowId": "a"}])).into(), JsonB(json!({"ws": ["w1"]})).into()],
        )
        .unwrap()
        .unwrap()
        .0;
        assert_eq!(out["status"], "applied", "{out}");
        assert_eq!(count(&format!("SELECT count(*) FROM public.kids WHERE _sync_partition = '{P}'")), 0);
        assert_eq!(last_op(P, "kids", "k1").as_deref(), Some("2"), "k1's delete is logged");
        assert_eq!(last_op(P, "kids", "k2").as_deref(), Some("2"), "k2's delete is logged");
        assert_eq!(last_op(P, "parents", "a").as_deref(), Some("2"));
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_tombstones WHERE partition = '{P}' AND tbl = 'kids'")), 2);
        // Dense log: 2 plain statements, then the engine's commit with the cascade's deletes in it.
        assert_eq!(commits(P), 3);
        assert_eq!(max_commit_seq(P), 3);
        assert_eq!(
            text(&format!(
                "SELECT string_agg(tbl || '/' || row_id, ',' ORDER BY idx) FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = 3"
            ))
            .as_deref(),
            Some("parents/a,kids/k1,kids/k2")
        );
    }

    #[pg_test]
    fn an_update_keeps_values_only_the_payload_holds() {
        const P: &str = "cap-g-payload-only";
        setup();
        // A stored row (as a push stores it) whose json value jsonb cannot hold ("\u0000"):
        // the typed column is NULL, the payload keeps the value. Seeded raw (capture bypassed).
        let schema = Schema::from_value(&ir()).unwrap();
        let layout = schema.tables[1].layout();
        let note = RowValue::Json(r#"{"s":"\u0000"}"#.into());
        let stored = encode_row(layout, &[Some(RowValue::String("k".into())), Some(RowValue::String("w1".into())), None, Some(note.clone()), None])
            .unwrap();
        run("SET LOCAL session_replication_role = replica");
        Spi::run_with_args(
            "INSERT INTO public.kids (_sync_partition, _sync_row_id, id, ws, _sync_version, _sync_scopes, _sync_payload) \
             VALUES ($1, 'k', 'k', 'w1', 1, '{\"ws\":\"w1\"}', $2)",
            &[P.into(), stored.into()],
        )
        .unwrap();
        run("SET LOCAL session_replication_role = origin");
        set_partition(P);
        write_ok(&format!("UPDATE public.kids SET label = 'x' WHERE _sync_partition = '{P}' AND id = 'k'"));
        let payload = crate::tests::support::bytea(&format!(
            "SELECT _sync_payload FROM public.kids WHERE _sync_partition = '{P}' AND _sync_row_id = 'k'"
        ));
        let row = decode_row(layout, &payload).unwrap();
        assert_eq!(row[3], Some(note), "the payload-only value survived");
        assert_eq!(text(&format!("SELECT _sync_version::text FROM public.kids WHERE _sync_partition = '{P}'")).as_deref(), Some("2"));
        assert_eq!(row[4], Some(RowValue::String("x".into())));
    }

    #[pg_test]
    fn a_before_row_trigger_running_after_the_capture_is_refused() {
        const P: &str = "cap-g-late-trigger";
        setup();
        run("CREATE FUNCTION public.shout() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.label := upper(NEW.label); RETURN NEW; END $$");
        run("CREATE TRIGGER zzz_shout BEFORE INSERT OR UPDATE ON public.kids FOR EACH ROW EXECUTE FUNCTION public.shout()");
        set_partition(P);
        refused_in(
            APP_TABLES,
            "INSERT INTO public.kids (id, ws, label) VALUES ('k', 'w1', 'quiet')",
            "0A000",
            "syncular.write_refused",
            "BEFORE ROW trigger \"zzz_shout\" on synced table \"kids\" runs after the capture",
        );
        // Named to run before the capture, its change is in the payload too.
        run("ALTER TRIGGER zzz_shout ON public.kids RENAME TO shout");
        write_ok("INSERT INTO public.kids (id, ws, label) VALUES ('k', 'w1', 'quiet')");
        let payload = crate::tests::support::bytea(&format!(
            "SELECT _sync_payload FROM public.kids WHERE _sync_partition = '{P}' AND _sync_row_id = 'k'"
        ));
        let schema = Schema::from_value(&ir()).unwrap();
        assert_eq!(decode_row(schema.tables[1].layout(), &payload).unwrap()[4], Some(RowValue::String("QUIET".into())));
    }

    #[pg_test]
    fn a_partition_longer_than_the_sync_functions_accept_is_refused() {
        setup();
        set_partition(&"p".repeat(513));
        refused_in(APP_TABLES, "INSERT INTO public.parents (id, ws) VALUES ('a', 'w1')", "22023", "syncular.invalid_argument", "513 bytes long");
    }
}
