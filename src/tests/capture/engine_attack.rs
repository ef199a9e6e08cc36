//! Attacks on the claim of issue 27 (docs/src/guide/plain-sql.md "What your
//! own triggers may do"): every row an engine write changes — foreign-key
//! actions, user BEFORE ROW rewrites, rows user AFTER triggers write — is
//! logged exactly as stored, in the same commit. Each test tries to make
//! the log and the tables diverge, leave something half-applied, or crash a
//! backend; a comment "Before the fix" names the divergence a test found.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::frame_fields::Op;
    use syncular_protocol::request::Operation;
    use syncular_protocol::row_codec::{encode_row, RowValue};
    use syncular_protocol::schema_ir::Schema;

    use crate::store::spi::subtransaction::SubtransactionError;
    use crate::tests::capture::support::*;
    use crate::tests::support::{register, run, text};
    use crate::tests::sync_support::{acquire_epoch, commit as push_commit, push_results, request, sync};

    const TABLES: [&str; 3] = ["nodes", "notes", "tags"];

    /// `nodes(id, ws, parent, title, meta)`, `notes(id, ws, node, body)`,
    /// `tags(id, ws, note, label)`; every table scoped by `ws`.
    fn ir() -> Value {
        json!({"version": 1, "tables": [
            {"name": "nodes", "primaryKey": "id", "scopes": ["ws:{ws}"], "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "ws", "type": "string", "nullable": false},
                {"name": "parent", "type": "string", "nullable": true},
                {"name": "title", "type": "string", "nullable": true},
                {"name": "meta", "type": "json", "nullable": true}]},
            {"name": "notes", "primaryKey": "id", "scopes": ["ws:{ws}"], "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "ws", "type": "string", "nullable": false},
                {"name": "node", "type": "string", "nullable": true},
                {"name": "body", "type": "string", "nullable": true}]},
            {"name": "tags", "primaryKey": "id", "scopes": ["ws:{ws}"], "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "ws", "type": "string", "nullable": false},
                {"name": "note", "type": "string", "nullable": true},
                {"name": "label", "type": "string", "nullable": true}]}]})
    }

    fn setup() {
        register(&ir()).expect("register");
    }

    fn assert_log_is_the_table(p: &str) {
        for tbl in TABLES {
            assert_log_is(p, tbl);
        }
    }

    /// `tbl:row:op` of the changes of commit `seq` in `p`, in order.
    fn changes_of(p: &str, seq: i64) -> String {
        text(&format!(
            "SELECT string_agg(tbl || ':' || row_id || ':' || op, ',' ORDER BY idx) FROM syncular.sync_changes \
             WHERE partition = '{p}' AND commit_seq = {seq}"
        ))
        .unwrap_or_default()
    }

    fn rows(p: &str, tbl: &str, cols: &str) -> String {
        text(&format!(
            "SELECT string_agg(concat_ws(':', {cols}), ',' ORDER BY _sync_row_id) FROM public.{tbl} WHERE _sync_partition = '{p}'"
        ))
        .unwrap_or_default()
    }

    fn plain(p: &str, sqls: &[&str]) {
        set_partition(p);
        for sql in sqls {
            write_ok(sql);
        }
        run("RESET syncular.partition");
    }

    fn function(name: &str, body: &str) {
        run(&format!(
            "CREATE FUNCTION public.{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$"
        ));
    }

    fn all_fingerprint() -> (String, u64) {
        fingerprint_of(&["public.nodes", "public.notes", "public.tags"])
    }

    // ---------------------------------------------------------------- foreign keys

    /// ON DELETE SET DEFAULT (parent) (parent → 'root'; without the column list the action
    /// would also reset `_sync_partition`, which is refused): b and c move to root, in the
    /// engine's commit, with their new payloads.
    #[cfg(not(feature = "pg13"))]
    #[pg_test]
    fn attack_on_delete_set_default() {
        const P: &str = "ea-default";
        setup();
        run("ALTER TABLE public.nodes ALTER COLUMN parent SET DEFAULT 'root'");
        run("ALTER TABLE public.nodes ADD CONSTRAINT nodes_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE SET DEFAULT (parent)");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('root', 'w1', NULL)",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('a', 'w1', 'root')",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('b', 'w1', 'a'), ('c', 'w1', 'a')",
        ]);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(changes_of(P, seq), "nodes:a:2,nodes:b:1,nodes:c:1");
        assert_eq!(rows(P, "nodes", "id, parent, _sync_version"), "b:root:2,c:root:2,root:1");
        assert_log_is_the_table(P);
    }

    /// A composite foreign key (partition, parent, ws) → nodes(partition, id, ws)
    /// with ON DELETE SET NULL (parent): only `parent` is nulled.
    #[cfg(not(feature = "pg13"))]
    #[pg_test]
    fn attack_composite_fk_set_null_column() {
        const P: &str = "ea-composite";
        setup();
        run("CREATE UNIQUE INDEX nodes_id_ws ON public.nodes (_sync_partition, id, ws)");
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node FOREIGN KEY (_sync_partition, node, ws) \
             REFERENCES public.nodes (_sync_partition, id, ws) ON DELETE SET NULL (node)");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
            "INSERT INTO public.notes (id, ws, node, body) VALUES ('n1', 'w1', 'a', 'x'), ('n2', 'w1', 'a', 'y')",
        ]);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(changes_of(P, seq), "nodes:a:2,notes:n1:1,notes:n2:1");
        assert_eq!(rows(P, "notes", "id, ws, coalesce(node, '-'), _sync_version"), "n1:w1:-:2,n2:w1:-:2");
        assert_log_is_the_table(P);
    }

    /// nodes (self-referencing CASCADE) → notes (CASCADE) → tags (SET NULL (note)):
    /// one engine delete of the root reaches all three tables.
    #[cfg(not(feature = "pg13"))]
    #[pg_test]
    fn attack_cascade_chain_of_three_tables_with_self_reference() {
        const P: &str = "ea-chain";
        setup();
        run("ALTER TABLE public.nodes ADD CONSTRAINT nodes_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node FOREIGN KEY (_sync_partition, node) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        run("ALTER TABLE public.tags ADD CONSTRAINT tags_note FOREIGN KEY (_sync_partition, note) \
             REFERENCES public.notes (_sync_partition, _sync_row_id) ON DELETE SET NULL (note)");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('b', 'w1', 'a')",
            "INSERT INTO public.notes (id, ws, node) VALUES ('n1', 'w1', 'a'), ('n2', 'w1', 'b')",
            "INSERT INTO public.tags (id, ws, note) VALUES ('t1', 'w1', 'n1'), ('t2', 'w1', 'n2')",
        ]);
        let before = commits(P);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(commits(P), before + 1, "one commit");
        let changes = changes_of(P, seq);
        for expected in ["nodes:a:2", "nodes:b:2", "notes:n1:2", "notes:n2:2", "tags:t1:1", "tags:t2:1"] {
            assert!(changes.split(',').any(|c| c == expected), "{expected} in {changes}");
        }
        assert_eq!(rows(P, "tags", "id, coalesce(note, '-'), _sync_version"), "t1:-:2,t2:-:2");
        assert_log_is_the_table(P);
    }

    /// A DEFERRABLE INITIALLY DEFERRED foreign key with ON DELETE CASCADE
    /// (Postgres runs referential actions immediately regardless), plus a
    /// deferred constraint trigger that writes another app table: it fires at
    /// `SET CONSTRAINTS ALL IMMEDIATE` (or COMMIT), after the engine finished.
    /// Claim: its row is logged in the engine's commit.
    #[pg_test]
    fn attack_deferred_fk_cascade_and_deferred_constraint_trigger() {
        const P: &str = "ea-deferred";
        setup();
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node FOREIGN KEY (_sync_partition, node) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
            "INSERT INTO public.notes (id, ws, node) VALUES ('n1', 'w1', 'a')",
        ]);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(changes_of(P, seq), "nodes:a:2,notes:n1:2", "the cascade is immediate and in the commit");
        assert_log_is_the_table(P);
        // A deferred constraint trigger writing tags when a node is inserted.
        function("tag_node", "INSERT INTO public.tags (id, ws, label) VALUES ('t-' || NEW.id, NEW.ws, 'deferred'); RETURN NULL;");
        run("CREATE CONSTRAINT TRIGGER tag_node AFTER INSERT ON public.nodes DEFERRABLE INITIALLY DEFERRED \
             FOR EACH ROW EXECUTE FUNCTION public.tag_node()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "b", "ws": "w1"}}]));
        let after_engine = commits(P);
        // COMMIT would fire it now; SET CONSTRAINTS does the same inside the test transaction.
        // A deferred trigger runs after the engine's write, as plain SQL (docs "What your own
        // triggers may do"): without syncular.partition its write is refused…
        let fired = write("SET CONSTRAINTS ALL IMMEDIATE");
        let Err(e) = fired else { panic!("a deferred write without syncular.partition is refused") };
        assert!(format!("{e:?}").contains("syncular.partition_required"), "{e:?}");
        assert_eq!(changes_of(P, seq), "nodes:b:1");
        assert_eq!(commits(P), after_engine);
        // …and with it, it is its own commit after the engine's.
        set_partition(P);
        write_ok("SET CONSTRAINTS ALL IMMEDIATE");
        run("RESET syncular.partition");
        assert_eq!(commits(P), after_engine + 1);
        assert_eq!(changes_of(P, seq + 1), "tags:t-b:1");
        assert_log_is_the_table(P);
    }

    /// A foreign key on (parent) alone → a unique id across partitions: the
    /// engine's delete in one partition cascades into another partition's row.
    /// Expected: the commit is rejected and nothing survives (a statement
    /// writes one partition).
    #[pg_test]
    fn attack_cascade_into_another_partition() {
        setup();
        run("CREATE UNIQUE INDEX nodes_global_id ON public.nodes (id)");
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node_global FOREIGN KEY (node) \
             REFERENCES public.nodes (id) ON DELETE CASCADE");
        plain("ea-x1", &["INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')"]);
        plain("ea-x2", &["INSERT INTO public.notes (id, ws, node) VALUES ('n1', 'w1', 'a')"]);
        let before = all_fingerprint();
        let out = engine_commit("ea-x1", json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        match out {
            Ok(out) => {
                assert_eq!(out["status"], "rejected", "{out}");
                assert_eq!(out["results"][0]["code"], "sync.constraint_violation", "{out}");
                assert_eq!(all_fingerprint().0, before.0, "nothing of the rejected commit survives");
            }
            Err(e) => {
                assert_eq!(all_fingerprint().0, before.0, "nothing survives the failed call ({} {})", e.sqlstate, e.message);
            }
        }
        assert_log_is_the_table("ea-x1");
        assert_log_is_the_table("ea-x2");
    }

    /// ON UPDATE CASCADE through a non-key unique column: an engine update of
    /// `nodes.title` rewrites `notes.body` of the notes referencing it.
    #[pg_test]
    fn attack_on_update_cascade_through_a_unique_column() {
        const P: &str = "ea-upd-cascade";
        setup();
        run("CREATE UNIQUE INDEX nodes_title ON public.nodes (_sync_partition, title)");
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_body FOREIGN KEY (_sync_partition, body) \
             REFERENCES public.nodes (_sync_partition, title) ON UPDATE CASCADE");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws, title) VALUES ('a', 'w1', 'old')",
            "INSERT INTO public.notes (id, ws, body) VALUES ('n1', 'w1', 'old')",
        ]);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "new"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:1,notes:n1:1");
        assert_eq!(rows(P, "notes", "id, body, _sync_version"), "n1:new:2");
        assert_log_is_the_table(P);
    }

    /// ON UPDATE CASCADE into a scope column of the referencing table: a
    /// side effect moves a row to another scope on update. Expected:
    /// rejected (scopes are immutable), nothing survives.
    #[pg_test]
    fn attack_on_update_cascade_into_a_scope_column() {
        const P: &str = "ea-upd-scope";
        setup();
        run("CREATE UNIQUE INDEX nodes_title ON public.nodes (_sync_partition, title)");
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_ws FOREIGN KEY (_sync_partition, ws) \
             REFERENCES public.nodes (_sync_partition, title) ON UPDATE CASCADE");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws, title) VALUES ('a', 'w1', 'w1')",
            "INSERT INTO public.notes (id, ws) VALUES ('n1', 'w1')",
        ]);
        let before = all_fingerprint();
        let out = engine_commit(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "w2"}}]))
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(out["results"][0]["code"], "sync.constraint_violation", "{out}");
        assert_eq!(all_fingerprint().0, before.0);
        assert_log_is_the_table(P);
    }

    /// One commit: delete a (SET NULL onto b, b → v2), then upsert b on
    /// baseVersion 1 (stale now: conflict) — and on baseVersion 2 (applies, v3).
    #[cfg(not(feature = "pg13"))]
    #[pg_test]
    fn attack_cascade_then_engine_op_on_the_cascaded_row_in_one_commit() {
        const P: &str = "ea-cascade-then-op";
        setup();
        run("ALTER TABLE public.nodes ADD CONSTRAINT nodes_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE SET NULL (parent)");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('b', 'w1', 'a')",
        ]);
        let before = all_fingerprint();
        let out = engine_commit(P, json!([
            {"table": "nodes", "op": "delete", "rowId": "a"},
            {"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "b", "ws": "w1", "title": "t"}}])).unwrap();
        assert_eq!(out["status"], "rejected", "b is at version 2 after the cascade: {out}");
        assert_eq!(all_fingerprint().0, before.0);
        let seq = engine_applied(P, json!([
            {"table": "nodes", "op": "delete", "rowId": "a"},
            {"table": "nodes", "op": "upsert", "baseVersion": 2, "row": {"id": "b", "ws": "w1", "title": "t"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:2,nodes:b:1,nodes:b:1");
        assert_eq!(rows(P, "nodes", "id, _sync_version"), "b:3");
        assert_log_is_the_table(P);
    }

    /// A DELETE by plain SQL cascading onto its own table and another table:
    /// captured as commits of their statements; the log is the table.
    #[pg_test]
    fn attack_plain_sql_delete_cascade() {
        const P: &str = "ea-plain-cascade";
        setup();
        run("ALTER TABLE public.nodes ADD CONSTRAINT nodes_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node FOREIGN KEY (_sync_partition, node) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('b', 'w1', 'a')",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('c', 'w1', 'b')",
            "INSERT INTO public.notes (id, ws, node) VALUES ('n1', 'w1', 'c')",
        ]);
        let before = commits(P);
        plain(P, &["DELETE FROM public.nodes WHERE id = 'a'"]);
        let added = commits(P) - before;
        // Each cascade level is a statement of its own (Postgres's RI triggers run one per level).
        assert!((1..=4).contains(&added), "{added} commits");
        assert_eq!(rows(P, "nodes", "id"), "");
        assert_eq!(rows(P, "notes", "id"), "");
        assert_log_is_the_table(P);
    }

    // ---------------------------------------------------------------- user triggers

    /// An AFTER INSERT OR UPDATE trigger on nodes that UPDATEs the row the
    /// engine just wrote (once: only when title is not yet 'after').
    #[pg_test]
    fn attack_after_trigger_updates_the_engines_own_row() {
        const P: &str = "ea-after-self";
        setup();
        function("touch", "IF NEW.title IS DISTINCT FROM 'after' THEN \
             UPDATE public.nodes SET title = 'after' WHERE _sync_partition = NEW._sync_partition AND id = NEW.id; END IF; RETURN NULL;");
        run("CREATE TRIGGER touch AFTER INSERT OR UPDATE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.touch()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1", "title": "x"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:1,nodes:a:1");
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:after:2");
        assert_log_is_the_table(P);
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 2, "row": {"id": "a", "ws": "w1", "title": "y"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:1,nodes:a:1");
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:after:4");
        assert_log_is_the_table(P);
    }

    /// An AFTER trigger inserting into another app table with an explicit
    /// `_sync_partition` of another partition. Expected: rejected (or the
    /// call fails), nothing survives in either partition.
    #[pg_test]
    fn attack_after_trigger_inserts_into_another_partition() {
        setup();
        function("elsewhere", "INSERT INTO public.notes (_sync_partition, id, ws) VALUES ('ea-other', 'n-' || NEW.id, NEW.ws); RETURN NULL;");
        run("CREATE TRIGGER elsewhere AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.elsewhere()");
        plain("ea-own", &["INSERT INTO public.tags (id, ws) VALUES ('seed', 'w1')"]);
        plain("ea-other", &["INSERT INTO public.tags (id, ws) VALUES ('seed', 'w1')"]);
        let before = all_fingerprint();
        match engine_commit("ea-own", json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}])) {
            Ok(out) => {
                assert_eq!(out["status"], "rejected", "{out}");
                assert_eq!(all_fingerprint().0, before.0, "nothing survives: {out}");
            }
            Err(e) => assert_eq!(all_fingerprint().0, before.0, "nothing survives ({} {})", e.sqlstate, e.message),
        }
        assert_log_is_the_table("ea-own");
        assert_log_is_the_table("ea-other");
    }

    /// An AFTER trigger inserting into another app table without naming the
    /// partition, while `syncular.partition` is set to another partition:
    /// the row goes to the engine's partition, in its commit.
    #[pg_test]
    fn attack_after_trigger_write_while_the_setting_names_another_partition() {
        setup();
        function("follow", "INSERT INTO public.notes (id, ws) VALUES ('n-' || NEW.id, NEW.ws); RETURN NULL;");
        run("CREATE TRIGGER follow AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.follow()");
        set_partition("ea-setting");
        let seq = engine_applied("ea-engine", json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        run("RESET syncular.partition");
        assert_eq!(changes_of("ea-engine", seq), "nodes:a:1,notes:n-a:1");
        assert_eq!(commits("ea-setting"), 0);
        assert_log_is_the_table("ea-engine");
        assert_log_is_the_table("ea-setting");
    }

    /// An AFTER INSERT trigger that DELETEs the row the engine just inserted.
    #[pg_test]
    fn attack_after_trigger_deletes_the_engines_own_row() {
        const P: &str = "ea-after-delete";
        setup();
        function("vanish", "DELETE FROM public.nodes WHERE _sync_partition = NEW._sync_partition AND id = NEW.id; RETURN NULL;");
        run("CREATE TRIGGER vanish AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.vanish()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:1,nodes:a:2");
        assert_eq!(rows(P, "nodes", "id"), "");
        assert_log_is_the_table(P);
    }

    /// An AFTER DELETE trigger that re-INSERTs the row the engine deleted.
    #[pg_test]
    fn attack_after_delete_trigger_reinserts_the_row() {
        const P: &str = "ea-reinsert";
        setup();
        plain(P, &["INSERT INTO public.nodes (id, ws, title) VALUES ('a', 'w1', 'x')"]);
        function("phoenix", "INSERT INTO public.nodes (id, ws, title) VALUES (OLD.id, OLD.ws, 'reborn'); RETURN NULL;");
        run("CREATE TRIGGER phoenix AFTER DELETE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.phoenix()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(changes_of(P, seq), "nodes:a:2,nodes:a:1");
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:reborn:1");
        assert_log_is_the_table(P);
    }

    /// A BEFORE DELETE trigger returning NULL (skips the engine's delete).
    /// Docs: not supported on engine writes, "the push fails". Expected: the
    /// call fails or the commit is rejected; the log never says deleted while
    /// the row stands.
    #[pg_test]
    fn attack_before_delete_trigger_returning_null() {
        const P: &str = "ea-null-delete";
        setup();
        plain(P, &["INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')"]);
        run("CREATE FUNCTION public.keep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$");
        run("CREATE TRIGGER keep BEFORE DELETE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.keep()");
        let before = all_fingerprint();
        let out = engine_commit(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        // Before the fix (found by the attack): the engine ignores that its DELETE removed nothing (delete_app_row's bool is
        // dropped): the commit is applied, the log says a is deleted (tombstone, row scopes gone)
        // while the table still holds a.
        assert_eq!(rows(P, "nodes", "id"), "a", "the trigger kept the row");
        assert_log_is_the_table(P);
        let out = out.unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(out["results"][0]["code"], "sync.constraint_violation", "{out}");
        assert_eq!(all_fingerprint().0, before.0);
    }

    /// A BEFORE INSERT OR UPDATE trigger returning NULL: the insert's commit,
    /// and an update's, are rejected; nothing of them survives.
    #[pg_test]
    fn attack_before_insert_or_update_trigger_returning_null() {
        const P: &str = "ea-null-insert";
        setup();
        run("CREATE FUNCTION public.skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$");
        run("CREATE TRIGGER skip BEFORE INSERT OR UPDATE ON public.nodes FOR EACH ROW WHEN (NEW.title IS DISTINCT FROM 'kept') \
             EXECUTE FUNCTION public.skip()");
        let skipped = |out: Result<Value, SubtransactionError>| {
            let out = out.unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
            assert_eq!(out["status"], "rejected", "{out}");
            assert_eq!(out["results"][0]["code"], "sync.constraint_violation", "{out}");
            assert!(out["results"][0]["message"].as_str().unwrap_or_default().contains("skipped the write"), "{out}");
        };
        // A row the trigger lets through (it also creates the partition: a rejected commit
        // keeps the partition's registry rows).
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1", "title": "kept"}}]));
        let before = all_fingerprint();
        skipped(engine_commit(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "b", "ws": "w1"}}])));
        assert_eq!(all_fingerprint().0, before.0);
        assert_log_is_the_table(P);
        skipped(engine_commit(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "new"}}])));
        assert_eq!(all_fingerprint().0, before.0);
        assert_eq!(changes_of(P, seq), "nodes:a:1");
        assert_log_is_the_table(P);
    }

    /// A BEFORE trigger (sorting before the capture) that rewrites
    /// `_sync_version` of the engine's row. Plain SQL doing this is refused;
    /// expected for an engine write: rejected, or logged as stored.
    #[pg_test]
    fn attack_before_trigger_rewrites_sync_version() {
        const P: &str = "ea-version";
        setup();
        function("bump", "NEW._sync_version := 42; RETURN NEW;");
        run("CREATE TRIGGER bump BEFORE INSERT OR UPDATE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.bump()");
        let out = engine_commit(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        // Before the fix (found by the attack): the engine's own row is only re-read for its typed columns: the table holds
        // _sync_version 42, the log version 1.
        assert_log_is_the_table(P);
        let out = out.unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(out["status"], "rejected", "{out}");
        assert!(out["results"][0]["message"].as_str().unwrap_or_default().contains("_sync_version"), "{out}");
    }

    /// A BEFORE trigger that moves the engine's row to another partition
    /// (`NEW._sync_partition`).
    #[pg_test]
    fn attack_before_trigger_rewrites_sync_partition() {
        setup();
        function("move_partition", "NEW._sync_partition := 'ea-stolen'; RETURN NEW;");
        run("CREATE TRIGGER move_partition BEFORE INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.move_partition()");
        let out = engine_commit("ea-home", json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        // Before the fix (found by the attack): the row is claimed by table and id only: it is stored in ea-stolen while
        // ea-home's log has it.
        assert_log_is_the_table("ea-home");
        assert_log_is_the_table("ea-stolen");
        assert!(out.is_err() || out.as_ref().is_ok_and(|o| o["status"] == "rejected"), "{out:?}");
    }

    /// A BEFORE INSERT trigger that rewrites the primary key of the engine's
    /// row. Expected: rejected, nothing survives.
    #[pg_test]
    fn attack_before_trigger_rewrites_the_primary_key_on_insert() {
        const P: &str = "ea-pk";
        setup();
        function("rekey", "NEW.id := NEW.id || '-x'; RETURN NEW;");
        run("CREATE TRIGGER rekey BEFORE INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.rekey()");
        plain(P, &["INSERT INTO public.tags (id, ws) VALUES ('seed', 'w1')"]);
        let before = all_fingerprint();
        let out = engine_commit(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        assert_log_is_the_table(P);
        assert!(out.is_err() || out.as_ref().is_ok_and(|o| o["status"] == "rejected"), "{out:?}");
        assert_eq!(all_fingerprint().0, before.0);
    }

    fn nodes_op(id: &str, title: &str) -> Operation {
        let schema = Schema::from_value(&ir()).unwrap();
        let s = |v: &str| Some(RowValue::String(v.to_owned()));
        let payload = encode_row(schema.tables[0].layout(), &[s(id), s("w1"), None, s(title), None]).unwrap();
        Operation { table: "nodes".into(), row_id: id.into(), op: Op::Upsert, base_version: None, payload: Some(payload) }
    }

    /// A push of three commits; an AFTER trigger (writing notes) raises a
    /// check violation on the 2nd. Expected: k1 and k3 applied with their
    /// side effects, k2 rejected with nothing of it logged.
    #[pg_test]
    fn attack_trigger_raises_on_the_second_of_three_commits() {
        const P: &str = "ea-three";
        setup();
        function("side", "INSERT INTO public.notes (id, ws, body) VALUES ('n-' || NEW.id, NEW.ws, NEW.title); \
             IF NEW.id = 'b' THEN RAISE EXCEPTION 'no b' USING ERRCODE = 'check_violation'; END IF; RETURN NULL;");
        run("CREATE TRIGGER side AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.side()");
        let epoch = acquire_epoch(P, "svc", "c1");
        let commits_ = vec![
            push_commit("k1", vec![nodes_op("a", "1")]),
            push_commit("k2", vec![nodes_op("b", "2")]),
            push_commit("k3", vec![nodes_op("c", "3")]),
        ];
        let results = push_results(&sync(P, "svc", &request(2, "c1", 1, Some(&epoch), commits_, None), Some(&json!({"ws": ["w1"]}))));
        assert_eq!(results.len(), 3);
        assert!(results[0].commit_seq.is_some(), "{:?}", results[0]);
        assert!(results[1].commit_seq.is_none(), "{:?}", results[1]);
        assert!(results[2].commit_seq.is_some(), "{:?}", results[2]);
        assert_eq!(rows(P, "nodes", "id"), "a,c");
        assert_eq!(rows(P, "notes", "id"), "n-a,n-c");
        assert_eq!(changes_of(P, results[0].commit_seq.unwrap()), "nodes:a:1,notes:n-a:1");
        assert_eq!(changes_of(P, results[2].commit_seq.unwrap()), "nodes:c:1,notes:n-c:1");
        assert_log_is_the_table(P);
    }

    /// The same with a plain `RAISE EXCEPTION` (P0001): the request fails as
    /// a whole; nothing of any commit is logged or stored.
    #[pg_test]
    fn attack_trigger_raises_p0001_on_the_second_of_three_commits() {
        const P: &str = "ea-three-raise";
        setup();
        function("side", "INSERT INTO public.notes (id, ws, body) VALUES ('n-' || NEW.id, NEW.ws, NEW.title); \
             IF NEW.id = 'b' THEN RAISE EXCEPTION 'no b'; END IF; RETURN NULL;");
        run("CREATE TRIGGER side AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.side()");
        let epoch = acquire_epoch(P, "svc", "c1");
        let before = all_fingerprint();
        let commits_ = vec![
            push_commit("k1", vec![nodes_op("a", "1")]),
            push_commit("k2", vec![nodes_op("b", "2")]),
            push_commit("k3", vec![nodes_op("c", "3")]),
        ];
        let out = crate::tests::sync_support::call("sync", P, "svc", &request(2, "c1", 1, Some(&epoch), commits_, None), Some(&json!({"ws": ["w1"]})));
        assert!(out.is_err(), "the request fails");
        assert_eq!(all_fingerprint().0, before.0);
        // The backend is not left inside an engine write: a plain write is its own commit.
        run("DROP TRIGGER side ON public.nodes");
        let c = commits(P);
        plain(P, &["INSERT INTO public.nodes (id, ws) VALUES ('z', 'w1')"]);
        assert_eq!(commits(P), c + 1);
        assert_log_is_the_table(P);
    }

    /// Recursion: nodes' AFTER INSERT inserts a note; notes' AFTER INSERT
    /// updates the node's title (and the nodes trigger only fires on INSERT).
    #[pg_test]
    fn attack_recursive_triggers_across_two_tables() {
        const P: &str = "ea-recursion";
        setup();
        function("to_notes", "INSERT INTO public.notes (id, ws, node) VALUES ('n-' || NEW.id, NEW.ws, NEW.id); RETURN NULL;");
        run("CREATE TRIGGER to_notes AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.to_notes()");
        function("to_nodes", "UPDATE public.nodes SET title = 'noted ' || NEW.id \
             WHERE _sync_partition = NEW._sync_partition AND id = NEW.node; \
             INSERT INTO public.tags (id, ws, note) VALUES ('t-' || NEW.id, NEW.ws, NEW.id); RETURN NULL;");
        run("CREATE TRIGGER to_nodes AFTER INSERT ON public.notes FOR EACH ROW EXECUTE FUNCTION public.to_nodes()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        let changes = changes_of(P, seq);
        assert_eq!(changes.split(',').count(), 4, "{changes}");
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:noted n-a:2");
        assert_log_is_the_table(P);
    }

    /// Plain SQL: a DELETE whose AFTER DELETE trigger re-inserts the row, and
    /// an UPDATE whose AFTER UPDATE trigger updates it again. Expected: the
    /// log ends at what the table holds, and a statement with no nested
    /// write still logs every row.
    #[pg_test]
    fn attack_plain_statements_whose_triggers_rewrite_their_own_rows() {
        const P: &str = "ea-plain-rewrite";
        setup();
        plain(P, &["INSERT INTO public.nodes (id, ws, title) VALUES ('a', 'w1', 'x'), ('b', 'w1', 'y')"]);
        function("phoenix", "INSERT INTO public.nodes (id, ws, title) VALUES (OLD.id, OLD.ws, 'reborn'); RETURN NULL;");
        run("CREATE TRIGGER phoenix AFTER DELETE ON public.nodes FOR EACH ROW WHEN (OLD.id = 'a') EXECUTE FUNCTION public.phoenix()");
        plain(P, &["DELETE FROM public.nodes WHERE _sync_partition = 'ea-plain-rewrite'"]);
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:reborn:1");
        assert_log_is_the_table(P);
        function("again", "UPDATE public.nodes SET title = 'again' WHERE _sync_partition = NEW._sync_partition AND id = NEW.id; RETURN NULL;");
        run("CREATE TRIGGER again AFTER UPDATE ON public.nodes FOR EACH ROW WHEN (NEW.title = 'first') EXECUTE FUNCTION public.again()");
        plain(P, &["UPDATE public.nodes SET title = 'first' WHERE _sync_partition = 'ea-plain-rewrite'"]);
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:again:3");
        assert_log_is_the_table(P);
        // No nested write: every row of the statement is logged.
        let c = commits(P);
        plain(P, &["INSERT INTO public.nodes (id, ws) VALUES ('c', 'w1'), ('d', 'w1')"]);
        assert_eq!(commits(P), c + 1);
        assert_eq!(changes_of(P, c + 1), "nodes:c:1,nodes:d:1");
        assert_log_is_the_table(P);
    }

    /// The recursion of [`attack_recursive_triggers_across_two_tables`]
    /// through plain SQL (before the fix it diverged as
    /// [`attack_plain_insert_with_after_row_trigger_updating_the_same_row`]).
    #[pg_test]
    fn attack_plain_recursive_triggers_across_two_tables() {
        const P: &str = "ea-recursion-plain";
        setup();
        function("to_notes", "INSERT INTO public.notes (id, ws, node) VALUES ('n-' || NEW.id, NEW.ws, NEW.id); RETURN NULL;");
        run("CREATE TRIGGER to_notes AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.to_notes()");
        function("to_nodes", "UPDATE public.nodes SET title = 'noted ' || NEW.id \
             WHERE _sync_partition = NEW._sync_partition AND id = NEW.node; \
             INSERT INTO public.tags (id, ws, note) VALUES ('t-' || NEW.id, NEW.ws, NEW.id); RETURN NULL;");
        run("CREATE TRIGGER to_nodes AFTER INSERT ON public.notes FOR EACH ROW EXECUTE FUNCTION public.to_nodes()");
        plain(P, &["INSERT INTO public.nodes (id, ws) VALUES ('b', 'w1')"]);
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "b:noted n-b:2");
        assert_log_is_the_table(P);
    }

    /// Two operations of one commit on the same row: insert then update;
    /// update then delete; delete then re-insert (baseVersion 0).
    #[pg_test]
    fn attack_two_operations_on_one_row_in_one_commit() {
        const P: &str = "ea-twice";
        setup();
        function("shout", "NEW.title := upper(NEW.title); RETURN NEW;");
        run("CREATE TRIGGER shout BEFORE INSERT OR UPDATE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.shout()");
        let seq = engine_applied(P, json!([
            {"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1", "title": "one"}},
            {"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "two"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:1,nodes:a:1");
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:TWO:2");
        assert_log_is_the_table(P);
        engine_applied(P, json!([
            {"table": "nodes", "op": "upsert", "baseVersion": 2, "row": {"id": "a", "ws": "w1", "title": "three"}},
            {"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(rows(P, "nodes", "id"), "");
        assert_log_is_the_table(P);
        plain(P, &["INSERT INTO public.nodes (id, ws, title) VALUES ('b', 'w1', 'x')"]);
        engine_applied(P, json!([
            {"table": "nodes", "op": "delete", "rowId": "b"},
            {"table": "nodes", "op": "upsert", "baseVersion": 0, "row": {"id": "b", "ws": "w2", "title": "moved"}}]));
        assert_eq!(rows(P, "nodes", "id, ws, title, _sync_version"), "b:w2:MOVED:1");
        assert_log_is_the_table(P);
    }

    /// `syncular.commit` in a subtransaction (a savepoint) followed by plain
    /// SQL, rolled back (ROLLBACK TO SAVEPOINT); then more work in the outer
    /// transaction. Nothing of the rolled-back part survives, the counter is
    /// dense, and later engine and plain writes log normally.
    #[pg_test]
    fn attack_commit_and_plain_sql_rolled_back_to_a_savepoint() {
        const P: &str = "ea-savepoint";
        setup();
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node FOREIGN KEY (_sync_partition, node) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        plain(P, &["INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
                   "INSERT INTO public.notes (id, ws, node) VALUES ('n1', 'w1', 'a')"]);
        let before = all_fingerprint();
        let rolled = write(&format!(
            "DO $$ BEGIN \
               PERFORM syncular.commit('{P}', 'svc', '[{{\"table\": \"nodes\", \"op\": \"delete\", \"rowId\": \"a\"}}]'::jsonb, \
                       allowed_scopes => '{{\"ws\": [\"w1\"]}}'::jsonb); \
               SET LOCAL syncular.partition = '{P}'; \
               INSERT INTO public.nodes (id, ws) VALUES ('b', 'w1'); \
               RAISE EXCEPTION 'roll back to savepoint'; \
             END $$"
        ));
        assert!(rolled.is_err());
        assert_eq!(all_fingerprint().0, before.0, "nothing of the savepoint survives");
        // Inside a block with an exception handler (a savepoint that is released).
        write_ok(&format!(
            "DO $$ BEGIN \
               BEGIN \
                 PERFORM syncular.commit('{P}', 'svc', '[{{\"table\": \"nodes\", \"op\": \"delete\", \"rowId\": \"a\"}}]'::jsonb, \
                         allowed_scopes => '{{\"ws\": [\"w1\"]}}'::jsonb); \
                 RAISE EXCEPTION 'undo'; \
               EXCEPTION WHEN raise_exception THEN NULL; END; \
               SET LOCAL syncular.partition = '{P}'; \
               INSERT INTO public.nodes (id, ws) VALUES ('c', 'w1'); \
             END $$"
        ));
        run("RESET syncular.partition");
        assert_eq!(rows(P, "nodes", "id"), "a,c");
        assert_eq!(rows(P, "notes", "id"), "n1");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        assert_eq!(changes_of(P, seq), "nodes:a:2,notes:n1:2");
        assert_eq!(max_commit_seq(P), commits(P), "dense commit sequence");
        assert_log_is_the_table(P);
    }

    /// `syncular.commit` called by a user AFTER trigger during another engine
    /// write (a nested engine write into another partition).
    #[pg_test]
    fn attack_nested_syncular_commit_from_a_trigger() {
        setup();
        function("mirror", "IF NEW._sync_partition = 'ea-outer' THEN \
             PERFORM syncular.commit('ea-inner', 'svc', jsonb_build_array(jsonb_build_object('table', 'notes', 'op', 'upsert', \
               'row', jsonb_build_object('id', 'm-' || NEW.id, 'ws', NEW.ws))), allowed_scopes => '{\"ws\": [\"w1\"]}'::jsonb); \
             END IF; RETURN NULL;");
        run("CREATE TRIGGER mirror AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.mirror()");
        let out = engine_commit("ea-outer", json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        let _ = out;
        assert_log_is_the_table("ea-outer");
        assert_log_is_the_table("ea-inner");
        assert_eq!(rows("ea-outer", "notes", "id"), "", "the nested commit's row is not the outer's");
    }

    /// Plain SQL: an AFTER ROW trigger that UPDATEs the row its INSERT just
    /// wrote. Expected: the log ends at what the table holds (v2, 'after').
    /// Before the fix: the nested UPDATE was logged first (a v2), then the
    /// INSERT's statement trigger logged its transition table (a v1) as a
    /// later commit.
    #[pg_test]
    fn attack_plain_insert_with_after_row_trigger_updating_the_same_row() {
        const P: &str = "ea-plain-after-self";
        setup();
        function("touch", "IF NEW.title IS DISTINCT FROM 'after' THEN \
             UPDATE public.nodes SET title = 'after' WHERE _sync_partition = NEW._sync_partition AND id = NEW.id; END IF; RETURN NULL;");
        run("CREATE TRIGGER touch AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.touch()");
        plain(P, &["INSERT INTO public.nodes (id, ws, title) VALUES ('a', 'w1', 'x')"]);
        assert_eq!(rows(P, "nodes", "id, title, _sync_version"), "a:after:2");
        // Before the fix (found by the attack): the nested UPDATE is logged first (commit 1: a v2), the INSERT's statement
        // trigger fires after its row triggers and logs its transition table (commit 2: a v1).
        assert_log_is_the_table(P);
    }

    /// An AFTER trigger writes another app table inside a plpgsql block whose
    /// EXCEPTION handler rolls that write back (a subtransaction inside the
    /// engine's statement). Expected: the rolled-back row is not logged.
    #[pg_test]
    fn attack_after_trigger_write_rolled_back_by_its_exception_block() {
        const P: &str = "ea-caught";
        setup();
        function("try_note", "BEGIN \
               INSERT INTO public.notes (id, ws) VALUES ('n-' || NEW.id, NEW.ws); \
               RAISE EXCEPTION 'changed my mind'; \
             EXCEPTION WHEN raise_exception THEN NULL; END; RETURN NULL;");
        run("CREATE TRIGGER try_note AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.try_note()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        assert_eq!(rows(P, "notes", "id"), "", "the block rolled the note back");
        // Before the fix (found by the attack): the capture's row trigger recorded the note as a side effect before the
        // subtransaction rolled it back; the engine logs notes:n-a although no such row exists.
        assert_eq!(changes_of(P, seq), "nodes:a:1");
        assert_log_is_the_table(P);
    }

    /// The same with a cascade: an AFTER UPDATE trigger deletes a node
    /// (cascading to its notes) in a block that is rolled back.
    #[pg_test]
    fn attack_cascade_rolled_back_by_an_exception_block() {
        const P: &str = "ea-caught-cascade";
        setup();
        run("ALTER TABLE public.notes ADD CONSTRAINT notes_node FOREIGN KEY (_sync_partition, node) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE CASCADE");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1'), ('b', 'w1')",
            "INSERT INTO public.notes (id, ws, node) VALUES ('n1', 'w1', 'b')",
        ]);
        function("try_delete", "BEGIN \
               DELETE FROM public.nodes WHERE _sync_partition = NEW._sync_partition AND id = 'b'; \
               RAISE EXCEPTION 'no'; \
             EXCEPTION WHEN raise_exception THEN NULL; END; RETURN NULL;");
        run("CREATE TRIGGER try_delete AFTER UPDATE ON public.nodes FOR EACH ROW WHEN (NEW.id = 'a') EXECUTE FUNCTION public.try_delete()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "baseVersion": 1, "row": {"id": "a", "ws": "w1", "title": "t"}}]));
        assert_eq!(rows(P, "nodes", "id"), "a,b");
        assert_eq!(rows(P, "notes", "id"), "n1");
        // Before the fix (found by the attack): b and n1 logged as deleted although they stand.
        assert_eq!(changes_of(P, seq), "nodes:a:1");
        assert_log_is_the_table(P);
    }

    /// A BEFORE DELETE trigger (sorting before the capture) that deletes the
    /// row with the same id in another partition (a mirror). Plain SQL doing
    /// so is refused (a statement writes one partition). Expected: the
    /// engine's commit is rejected, or the mirror's delete is logged in the
    /// mirror partition.
    #[pg_test]
    fn attack_before_trigger_deletes_the_same_id_in_another_partition() {
        setup();
        plain("ea-mirror", &["INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')"]);
        // The last plain statement on nodes is in ea-main (the capture caches a statement's
        // partition per table; see attack_stale_capture_context_rejects_a_side_effect).
        plain("ea-main", &["INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')"]);
        function("aa_mirror", "IF OLD._sync_partition = 'ea-main' THEN \
             DELETE FROM public.nodes WHERE _sync_partition = 'ea-mirror' AND id = OLD.id; END IF; RETURN OLD;");
        run("CREATE TRIGGER aa_mirror BEFORE DELETE ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.aa_mirror()");
        let out = engine_commit("ea-main", json!([{"table": "nodes", "op": "delete", "rowId": "a"}]));
        // Before the fix (found by the attack): the guard claims the engine's row by table and id only: the mirror's delete
        // fires first and is taken for the engine's own row (ea-mirror's a is gone, nothing logged
        // there); the engine's real delete is then logged as a side effect in ea-main.
        assert_log_is_the_table("ea-mirror");
        assert_log_is_the_table("ea-main");
        let _ = out;
    }

    /// A user AFTER … FOR EACH STATEMENT trigger on nodes writing notes:
    /// it fires at the end of the engine's statement; its row is in the commit.
    #[pg_test]
    fn attack_after_statement_trigger_writes_another_table() {
        const P: &str = "ea-after-stmt";
        setup();
        function("count_nodes", "INSERT INTO public.notes (id, ws, body) \
             SELECT 'count-' || (SELECT count(*) FROM public.notes), 'w1', 'x'; RETURN NULL;");
        run("CREATE TRIGGER count_nodes AFTER INSERT ON public.nodes FOR EACH STATEMENT EXECUTE FUNCTION public.count_nodes()");
        let seq = engine_applied(P, json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]));
        assert_eq!(changes_of(P, seq), "nodes:a:1,notes:count-0:1");
        assert_log_is_the_table(P);
    }

    /// ON DELETE SET DEFAULT without a column list resets `_sync_partition`
    /// too: rejected, nothing survives.
    #[pg_test]
    fn attack_on_delete_set_default_of_the_partition_column() {
        const P: &str = "ea-default-all";
        setup();
        run("ALTER TABLE public.nodes ADD CONSTRAINT nodes_parent FOREIGN KEY (_sync_partition, parent) \
             REFERENCES public.nodes (_sync_partition, _sync_row_id) ON DELETE SET DEFAULT");
        plain(P, &[
            "INSERT INTO public.nodes (id, ws) VALUES ('a', 'w1')",
            "INSERT INTO public.nodes (id, ws, parent) VALUES ('b', 'w1', 'a')",
        ]);
        let before = all_fingerprint();
        let out = engine_commit(P, json!([{"table": "nodes", "op": "delete", "rowId": "a"}]))
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(all_fingerprint().0, before.0);
        assert_log_is_the_table(P);
    }

    /// A plain SQL statement on notes in partition ea-s1, then an engine
    /// commit in ea-s2 whose AFTER trigger inserts into notes. Expected:
    /// applied, the note in ea-s2's commit.
    #[pg_test]
    fn attack_stale_capture_context_rejects_a_side_effect() {
        setup();
        plain("ea-s1", &["INSERT INTO public.notes (id, ws) VALUES ('n0', 'w1')"]);
        function("follow", "INSERT INTO public.notes (id, ws) VALUES ('n-' || NEW.id, NEW.ws); RETURN NULL;");
        run("CREATE TRIGGER follow AFTER INSERT ON public.nodes FOR EACH ROW EXECUTE FUNCTION public.follow()");
        let out = engine_commit("ea-s2", json!([{"table": "nodes", "op": "upsert", "row": {"id": "a", "ws": "w1"}}]))
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        // Before the fix (found by the attack): the side effect reuses the capture context cached (thread-local, per relid,
        // never cleared) by the earlier plain statement in ea-s1 and is refused: "syncular.partition
        // changed while a statement on synced table \"notes\" ran (from \"ea-s1\" to \"ea-s2\")".
        assert_eq!(out["status"], "applied", "{out}");
        assert_log_is_the_table("ea-s1");
        assert_log_is_the_table("ea-s2");
    }
}
