//! Every writer keeps `_sync_column_versions` (docs/src/reference/client-generations.md "Per-column
//! versions"): a captured plain SQL `UPDATE` moves exactly the columns whose
//! value it changed (an `INSERT` stores NULL), the computed column cannot be
//! written by hand, `syncular.commit` moves the changed columns of an
//! `upsert` and the named columns of a `patch` (which also answers column
//! conflicts by name), and plain SQL still reads the app table as before.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};

    use crate::tests::capture::support::{set_partition, write, write_ok};
    use crate::tests::support::{expect_error, int8, text};
    use crate::tests::sync_support::setup_tasks;
    use crate::tests::wire_v3::support::*;

    const P: &str = "v3-writers";

    fn commit(ops: Value) -> Value {
        let sql = format!(
            "SELECT syncular.commit('{P}', 'svc', '{ops}'::jsonb, allowed_scopes => '{{\"project_id\": [\"*\"]}}'::jsonb)::text"
        );
        serde_json::from_str(&text(&sql).expect("commit result")).expect("json")
    }

    #[pg_test]
    fn captured_updates_move_the_columns_they_change() {
        setup_tasks();
        set_partition(P);
        write_ok("INSERT INTO public.tasks (id, project_id, title, done, n) VALUES ('t1', 'p1', 'a', false, 1)");
        let inserted = stored(P, "t1");
        assert_eq!((inserted.0, inserted.2.is_none()), (1, true), "an insert stores NULL");
        write_ok("UPDATE public.tasks SET title = 'b' WHERE id = 't1'");
        let one = stored(P, "t1");
        assert_eq!((one.0, version_of(&one, "title"), version_of(&one, "n"), version_of(&one, "done")), (2, 2, 1, 1));
        // Setting a column to the value it holds does not move it.
        write_ok("UPDATE public.tasks SET n = 1, done = true WHERE id = 't1'");
        let two = stored(P, "t1");
        assert_eq!((two.0, version_of(&two, "n"), version_of(&two, "done"), version_of(&two, "title")), (3, 1, 3, 2));
        // Plain SQL reads the table as before; the column versions are one more column.
        assert_eq!(text("SELECT title FROM public.tasks WHERE id = 't1'"), Some("b".into()));
        assert_eq!(int8("SELECT count(*) FROM public.tasks WHERE _sync_column_versions IS NOT NULL"), Some(1));
    }

    #[pg_test]
    fn the_column_versions_column_is_computed() {
        setup_tasks();
        set_partition(P);
        expect_error(
            write("INSERT INTO public.tasks (id, project_id, done, _sync_column_versions) VALUES ('t9', 'p1', false, '\\x0102')"),
            "0A000",
            "syncular.write_refused",
            "_sync_column_versions",
        );
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', false)");
        expect_error(
            write("UPDATE public.tasks SET _sync_column_versions = '\\x0102' WHERE id = 't1'"),
            "0A000",
            "syncular.write_refused",
            "_sync_column_versions",
        );
    }

    #[pg_test]
    fn server_commits_upsert_whole_rows_and_patch_named_columns() {
        setup_tasks();
        let r = commit(json!([{"table": "tasks", "op": "upsert", "row": {"id": "t1", "project_id": "p1", "title": "a", "done": false, "n": 1}}]));
        assert_eq!(r["status"], json!("applied"), "{r}");
        // An upsert names every column: a missing one is NULL, and only changed values move.
        let r = commit(json!([{"table": "tasks", "op": "upsert", "row": {"id": "t1", "project_id": "p1", "title": "b", "done": false}}]));
        assert_eq!(r["status"], json!("applied"), "{r}");
        let state = stored(P, "t1");
        assert_eq!((value(&state.1, "n"), version_of(&state, "n"), version_of(&state, "title"), version_of(&state, "done")), (None, 2, 2, 1));
        // A patch keeps what it does not name.
        let r = commit(json!([{"table": "tasks", "op": "patch", "row": {"id": "t1", "n": 5}, "baseVersion": 2}]));
        assert_eq!(r["status"], json!("applied"), "{r}");
        let state = stored(P, "t1");
        assert_eq!((state.0, value(&state.1, "title"), value(&state.1, "n")), (3, s("b"), Some(syncular_protocol::row_codec::RowValue::Integer(5))));
        // A stale patch of a moved column answers its conflict by name.
        let r = commit(json!([{"table": "tasks", "op": "patch", "row": {"id": "t1", "title": "c", "n": 6}, "baseVersion": 2}]));
        assert_eq!(r["status"], json!("rejected"), "{r}");
        assert_eq!(r["results"][0]["status"], json!("conflict"));
        assert_eq!(r["results"][0]["conflictColumns"], json!(["n"]));
        assert_eq!(r["results"][0]["serverRow"]["n"], json!(5));
        // A patch of a missing row, and a patch without the primary key.
        let r = commit(json!([{"table": "tasks", "op": "patch", "row": {"id": "nope", "title": "x"}}]));
        assert_eq!(r["results"][0]["code"], json!("sync.row_missing"), "{r}");
        let e = crate::tests::support::try_run(&format!(
            "SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"op\": \"patch\", \"row\": {{\"title\": \"x\"}}, \"rowId\": \"t1\"}}]'::jsonb, allowed_scopes => '{{\"project_id\": [\"*\"]}}'::jsonb)"
        ));
        expect_error(e, "22023", "sync.invalid_request", "primary");
    }
}
