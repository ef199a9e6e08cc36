//! Engine writes (pushes, `syncular.commit`) whose effects reach beyond the
//! row they name (issue 27): a foreign-key cascade onto the same table
//! (`ON DELETE CASCADE`, `ON DELETE SET NULL`) and an app's BEFORE ROW
//! trigger that rewrites a value or a scope column. After each, the log
//! replays to exactly what the tables hold
//! ([`crate::tests::capture::support::assert_log_is`]).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::row_codec::{decode_row, RowValue};
    use syncular_protocol::schema_ir::Schema;

    use crate::tests::capture::support::*;
    use crate::tests::support::{bytea, register, run, text};
    use crate::tests::sync_support::{acquire_epoch, commit as push_commit, push_results, request, sync};
    use syncular_protocol::frame_fields::Op;
    use syncular_protocol::request::Operation;
    use syncular_protocol::row_codec::encode_row;

    /// `nodes(id pk, ws scope, parent, title, meta json)`.
    fn ir() -> Value {
        json!({"version": 1, "tables": [
            {"name": "nodes", "primaryKey": "id", "scopes": ["ws:{ws}"], "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "ws", "type": "string", "nullable": false},
                {"name": "parent", "type": "string", "nullable": true},
                {"name": "title", "type": "string", "nullable": true},
                {"name": "meta", "type": "json", "nullable": true}]}]})
    }

    /// Registers `nodes` with a self-referencing foreign key `ON DELETE <action>`.
    fn setup(on_delete: &str) {
        register(&ir()).expect("register nodes");
        run(&format!(
            "ALTER TABLE public.nodes ADD CONSTRAINT nodes_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE {on_delete}"
        ));
    }

    fn payload_row(p: &str, id: &str) -> Vec<Option<RowValue>> {
        let schema = Schema::from_value(&ir()).unwrap();
        let bytes = bytea(&format!("SELECT _sync_payload FROM public.nodes WHERE _sync_partition = '{p}' AND _sync_row_id = '{id}'"));
        decode_row(schema.tables[0].layout(), &bytes).unwrap()
    }

    fn s(v: &str) -> Option<RowValue> {
        Some(RowValue::String(v.to_owned()))
    }

    /// Seeds root `a` ← `b` ← `c` with plain SQL.
    fn seed_chain(p: &str) {
        set_partition(p);
        write_ok("INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')");
        write_ok("INSERT INTO public.nodes (id, ws, parent) VALUES ('b', 'w1', 'a')");
        write_ok("INSERT INTO public.nodes (id, ws, parent) VALUES ('c', 'w1', 'b')");
        run("RESET syncular.partition");
    }

    #[pg_test]
    fn a_delete_cascading_onto_its_own_table_logs_every_row_it_removes() {
        const P: &str = "ew-cascade";
        setup("CASCADE");
        seed_chain(P);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(count(&format!("SELECT count(*) FROM public.nodes WHERE _sync_partition = '{P}'")), 0);
        // One commit: the named delete first, then what the foreign key removed.
        assert_eq!(
            text(&format!(
                "SELECT string_agg(row_id || ':' || op, ',' ORDER BY idx) FROM syncular.sync_changes \
                 WHERE partition = '{P}' AND commit_seq = {seq}"
            ))
            .as_deref(),
            Some("a:2,b:2,c:2")
        );
        assert_eq!(commits(P), 4, "3 plain inserts and the one engine commit");
        assert_log_is(P, "nodes");
    }

    /// `SET NULL (parent)`: the column list (Postgres 15+) keeps `_sync_partition`.
    #[cfg(not(feature = "pg13"))]
    #[pg_test]
    fn a_delete_setting_its_own_tables_references_null_logs_the_updated_rows() {
        const P: &str = "ew-set-null";
        setup("SET NULL (parent)");
        seed_chain(P);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(
            text(&format!(
                "SELECT string_agg(row_id || ':' || op || ':' || coalesce(row_version::text, '-'), ',' ORDER BY idx) \
                 FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = {seq}"
            ))
            .as_deref(),
            Some("a:2:-,b:1:2")
        );
        assert_eq!(payload_row(P, "b")[2], None, "b's payload has no parent any more");
        assert_log_is(P, "nodes");
        // b is an ordinary row afterwards: a client update applies on its new version.
        let out = engine_commit(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 2,
                                    "row": {"id": "b", "ws": "w1", "title": "kept"}}]))
        .unwrap();
        assert_eq!(out["status"], "applied", "{out}");
        assert_log_is(P, "nodes");
    }

    /// `BEFORE INSERT OR UPDATE` trigger `shout` (sorts before the capture's)
    /// running `body` on `nodes`.
    fn trigger(body: &str) {
        run(&format!("CREATE FUNCTION public.shout() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NEW; END $$"));
        run("CREATE TRIGGER shout BEFORE INSERT OR UPDATE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.shout()");
    }

    #[pg_test]
    fn a_user_trigger_rewriting_a_value_is_logged_as_stored() {
        const P: &str = "ew-upper";
        setup("CASCADE");
        trigger("NEW.title := upper(NEW.title);");
        engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1", "title": "quiet", "meta": {"b": 1, "a": [1.50, 2]}}}]));
        assert_eq!(text(&format!("SELECT title FROM public.nodes WHERE _sync_partition = '{P}'")).as_deref(), Some("QUIET"));
        assert_eq!(payload_row(P, "a")[3], s("QUIET"));
        assert_log_is(P, "nodes");
        engine_applied(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "again"}}]));
        assert_eq!(payload_row(P, "a")[3], s("AGAIN"));
        assert_log_is(P, "nodes");
    }

    #[pg_test]
    fn a_column_a_user_trigger_rewrites_on_update_moves_to_the_new_version() {
        const P: &str = "ew-versions";
        setup("CASCADE");
        trigger("IF TG_OP = 'UPDATE' THEN NEW.title := 'by trigger'; END IF;");
        engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1", "title": "x"}}]));
        // The client changes only meta; the trigger changes title.
        engine_applied(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "x", "meta": [1]}}]));
        let versions = text(&format!("SELECT encode(_sync_column_versions, 'hex') FROM public.nodes WHERE _sync_partition = '{P}'"))
            .map(|h| (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect::<Vec<u8>>());
        let read = crate::engine::column_versions::ColumnVersions::read_or_reset(versions.as_deref(), 2, "test row");
        assert_eq!((read.of(1), read.of(2), read.of(3), read.of(4)), (1, 1, 2, 2), "ws, parent at 1; title (trigger) and meta (client) at 2");
        assert_eq!(payload_row(P, "a")[3], s("by trigger"));
        assert_log_is(P, "nodes");
    }

    #[pg_test]
    fn a_user_trigger_that_changes_nothing_keeps_the_clients_payload() {
        const P: &str = "ew-noop";
        setup("CASCADE");
        trigger("NULL;");
        // Pushed over the wire: a json text jsonb prints differently, and a string only the
        // payload can hold (a NUL character: its typed column holds NULL).
        let schema = Schema::from_value(&ir()).unwrap();
        let row = vec![s("a"), s("w1"), None, s("t\u{0}nul"), Some(RowValue::Json(r#"{"b":1,"a":[1.50,2e0]}"#.into()))];
        let payload = encode_row(schema.tables[0].layout(), &row).unwrap();
        let op = Operation { table: "nodes".into(), row_id: "a".into(), op: Op::Upsert, base_version: None, payload: Some(payload.clone()) };
        let epoch = acquire_epoch(P, "svc", "c1");
        let resp = sync(P, "svc", &request(2, "c1", 1, Some(&epoch), vec![push_commit("k1", vec![op])], None), Some(&json!({"ws": ["w1"]})));
        let results = push_results(&resp);
        assert_eq!(results.len(), 1);
        assert!(results[0].commit_seq.is_some(), "applied: {:?}", results[0]);
        assert_eq!(bytea(&format!("SELECT _sync_payload FROM public.nodes WHERE _sync_partition = '{P}'")), payload, "the client's bytes");
        assert_eq!(text(&format!("SELECT title FROM public.nodes WHERE _sync_partition = '{P}'")), None);
        assert_log_is(P, "nodes");
    }

    #[pg_test]
    fn a_user_trigger_moving_an_inserted_row_to_another_scope_is_logged_in_it() {
        const P: &str = "ew-scope-insert";
        setup("CASCADE");
        trigger("IF TG_OP = 'INSERT' THEN NEW.ws := 'w2'; END IF;");
        engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        assert_eq!(text(&format!("SELECT _sync_scopes::text FROM public.nodes WHERE _sync_partition = '{P}'")).as_deref(), Some(r#"{"ws": "w2"}"#));
        assert_eq!(
            text(&format!("SELECT string_agg(value, ',') FROM syncular.sync_change_scopes WHERE partition = '{P}'")).as_deref(),
            Some("w2")
        );
        assert_log_is(P, "nodes");
    }

    #[pg_test]
    fn a_user_trigger_moving_an_updated_row_to_another_scope_rejects_the_commit() {
        const P: &str = "ew-scope-update";
        setup("CASCADE");
        engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        trigger("IF TG_OP = 'UPDATE' AND NEW.title = 'x' THEN NEW.ws := 'w2'; END IF;");
        let before = fingerprint_of(&["public.nodes"]);
        let out = engine_commit(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "x"}}])).unwrap();
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(out["results"][0]["code"], "sync.constraint_violation", "{out}");
        let message = out["results"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("changed a scope column of row \"a\" on update"), "{out}");
        assert_eq!(fingerprint_of(&["public.nodes"]), before, "nothing of the rejected commit survives");
        assert_log_is(P, "nodes");
        // A pushed commit is rejected the same way, and the next commit of the request applies.
        let epoch = acquire_epoch(P, "svc", "c1");
        let schema = Schema::from_value(&ir()).unwrap();
        let op = |title: &str, base: i64| {
            let payload = encode_row(schema.tables[0].layout(), &[s("a"), s("w1"), None, s(title), None]).unwrap();
            Operation { table: "nodes".into(), row_id: "a".into(), op: Op::Upsert, base_version: Some(base), payload: Some(payload) }
        };
        let commits = vec![push_commit("k1", vec![op("x", 1)]), push_commit("k2", vec![op("y", 1)])];
        let results = push_results(&sync(P, "svc", &request(2, "c1", 1, Some(&epoch), commits, None), Some(&json!({"ws": ["w1", "w2"]}))));
        assert_eq!(results.len(), 2);
        assert!(results[0].commit_seq.is_none(), "k1 rejected: {:?}", results[0]);
        assert!(results[1].commit_seq.is_some(), "k2 applied: {:?}", results[1]);
        assert_eq!(payload_row(P, "a")[3], s("y"));
        assert_log_is(P, "nodes");
    }
}
