//! Plain SQL writes to app tables become commits (issue 9, docs/src/guide/plain-sql.md "Writing
//! with plain SQL"): one commit per statement with the log a push writes
//! (header, changes, scope indexes, tombstones, NOTIFY), payloads equal to
//! what `syncular.commit` encodes for the same values, versions bumped, the
//! actor from `syncular.actor_id` or the current role, engine writes never
//! captured twice, schema bumps followed, and pulls/pushes seeing the result.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::{json, Value};
    use syncular_protocol::frame_fields::Op;
    use syncular_protocol::request::PushCommit;
    use syncular_protocol::response::{OpResult, PushStatus};
    use syncular_protocol::row_codec::{decode_row, encode_row, Row, RowValue, TableLayout};
    use syncular_protocol::schema_ir::Schema;

    use crate::tests::capture::support::*;
    use crate::tests::support::{bytea, int8, register, run, tasks_ir, text};
    use crate::tests::sync_support::{self, setup_tasks};

    /// A `tasks` row from `(column, value)` pairs; other columns NULL.
    fn row_of(layout: &TableLayout, values: &[(&str, Option<RowValue>)]) -> Row {
        let mut row: Row = vec![None; layout.columns.len()];
        for (name, value) in values {
            row[layout.index_of(name).unwrap_or_else(|| panic!("column {name}"))] = value.clone();
        }
        row
    }

    /// The row of [`full_values`] as the codec holds it; `meta` is the
    /// `json` column's text.
    fn full_row(id: &str, project: &str, meta: Option<&str>) -> Row {
        row_of(
            &layout(),
            &[
                ("id", s(id)),
                ("project_id", s(project)),
                ("title", s("Ship it")),
                ("n", Some(RowValue::Integer(9_007_199_254_740_991))),
                ("f", Some(RowValue::Float(1.5))),
                ("done", Some(RowValue::Boolean(true))),
                ("meta", meta.map(|m| RowValue::Json(m.into()))),
                ("bin", Some(RowValue::Bytes(vec![0x00, 0xff, 0x10]))),
                ("att", Some(RowValue::BlobRef(BLOB_REF.into()))),
                ("secret", Some(RowValue::Bytes(vec![0xde, 0xad, 0xbe, 0xef]))),
                ("code", s("C-1")),
            ],
        )
    }

    /// SQL VALUES tuple of [`full_row`] (columns of [`COLUMNS`]), `meta` an SQL expression.
    fn full_values(id: &str, project: &str, meta: &str) -> String {
        format!("('{id}', '{project}', 'Ship it', 9007199254740991, 1.5, true, {meta}, '\\x00ff10', '{BLOB_REF}', '\\xdeadbeef', 'C-1')")
    }

    /// A `json` value as SQL text and as the payload's text (jsonb's output made
    /// compact: keys in jsonb order, every digit of a number kept).
    const META_SQL: &str = r#"'{"b": [1, 2.50], "a": "x", "big": 123456789012345678901234567890.000000000000000000001}'"#;
    const META_TEXT: &str = r#"{"a":"x","b":[1,2.50],"big":123456789012345678901234567890.000000000000000000001}"#;

    const COLUMNS: &str = "(id, project_id, title, n, f, done, meta, bin, att, secret, code)";

    fn payload_of(partition: &str, row_id: &str) -> Vec<u8> {
        bytea(&format!(
            "SELECT _sync_payload FROM public.tasks WHERE _sync_partition = '{partition}' AND _sync_row_id = '{row_id}'"
        ))
    }

    fn change_payload(partition: &str, commit_seq: i64, row_id: &str) -> Vec<u8> {
        bytea(&format!(
            "SELECT payload FROM syncular.sync_changes WHERE partition = '{partition}' AND commit_seq = {commit_seq} AND row_id = '{row_id}'"
        ))
    }

    /// `idx/row_id/op/row_version/scopes` of every change of a commit, by idx.
    fn changes_of(partition: &str, commit_seq: i64) -> String {
        text(&format!(
            "SELECT string_agg(concat_ws('/', idx, row_id, op, coalesce(row_version::text, 'null'), scopes::text, \
                                         CASE WHEN payload IS NULL THEN 'no payload' ELSE 'payload' END), ',' ORDER BY idx) \
               FROM syncular.sync_changes WHERE partition = '{partition}' AND commit_seq = {commit_seq}"
        ))
        .unwrap_or_default()
    }

    /// `row_id=version` of the partition's app rows, by row id.
    fn versions(partition: &str) -> String {
        text(&format!(
            "SELECT string_agg(_sync_row_id || '=' || _sync_version, ',' ORDER BY _sync_row_id) FROM public.tasks WHERE _sync_partition = '{partition}'"
        ))
        .unwrap_or_default()
    }

    fn row_scopes(partition: &str) -> String {
        text(&format!(
            "SELECT string_agg(concat_ws('/', tbl, var, value, row_id), ',' ORDER BY row_id, var) FROM syncular.sync_row_scopes WHERE partition = '{partition}'"
        ))
        .unwrap_or_default()
    }

    fn change_scopes(partition: &str) -> String {
        text(&format!(
            "SELECT string_agg(concat_ws('/', tbl, var, value, commit_seq), ',' ORDER BY commit_seq, value) FROM syncular.sync_change_scopes WHERE partition = '{partition}'"
        ))
        .unwrap_or_default()
    }

    fn tombstones(partition: &str) -> String {
        text(&format!(
            "SELECT string_agg(concat_ws('/', tbl, row_id, commit_seq), ',' ORDER BY row_id) FROM syncular.sync_tombstones WHERE partition = '{partition}'"
        ))
        .unwrap_or_default()
    }

    /// `commit_seq:client_id:actor_id` of every commit of the partition.
    fn headers(partition: &str) -> String {
        text(&format!(
            "SELECT string_agg(commit_seq || ':' || client_id || ':' || actor_id, ',' ORDER BY commit_seq) FROM syncular.sync_commits WHERE partition = '{partition}'"
        ))
        .unwrap_or_default()
    }

    fn server_commit(partition: &str, ops: Value) -> Value {
        Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.commit($1, 'svc', $2, allowed_scopes => $3)",
            &[partition.into(), JsonB(ops).into(), JsonB(json!({"project_id": ["p1", "p2"]})).into()],
        )
        .unwrap_or_else(|e| panic!("syncular.commit: {e}"))
        .expect("commit result")
        .0
    }

    #[pg_test]
    fn a_multi_row_insert_is_one_commit_with_the_log_a_push_writes() {
        const P: &str = "cap-w-insert";
        put_abc(P);
        setup_tasks();
        set_partition(P);
        set_actor("billing-job");
        run("SET LOCAL syncular.now_ms = '1700000000123'");
        let notified = notifications();
        write_ok(&format!(
            "INSERT INTO public.tasks {COLUMNS} VALUES {}, \
               ('t2', 'p2', NULL, -9007199254740991, NULL, false, NULL, NULL, NULL, NULL, NULL), \
               ('t3', 'p1', 'third', 0, -0.25, false, '[]', '\\x', NULL, NULL, 'C-3')",
            full_values("t1", "p1", META_SQL)
        ));
        // One commit: the header of a server-authored commit.
        assert_eq!(
            text(&format!(
                "SELECT concat_ws('|', commit_seq, client_id, actor_id, created_at_ms, client_commit_id::uuid::text = client_commit_id) \
                   FROM syncular.sync_commits WHERE partition = '{P}'"
            )),
            Some("1|sql:billing-job|billing-job|1700000000123|t".into())
        );
        assert_eq!(commits(P), 1);
        assert_eq!(max_commit_seq(P), 1);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_partition_registry WHERE partition = '{P}'")), 1);
        // The app rows: computed storage columns.
        assert_eq!(
            text(&format!(
                "SELECT string_agg(concat_ws('/', _sync_row_id, id, _sync_version, _sync_scopes::text), ',' ORDER BY id) \
                   FROM public.tasks WHERE _sync_partition = '{P}'"
            )),
            Some(
                "t1/t1/1/{\"project_id\": \"p1\"},t2/t2/1/{\"project_id\": \"p2\"},t3/t3/1/{\"project_id\": \"p1\"}"
                    .into()
            )
        );
        // One change per row, in statement order, payload = the stored payload.
        assert_eq!(
            changes_of(P, 1),
            "0/t1/1/1/{\"project_id\": \"p1\"}/payload,1/t2/1/1/{\"project_id\": \"p2\"}/payload,2/t3/1/1/{\"project_id\": \"p1\"}/payload"
        );
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM syncular.sync_changes c JOIN public.tasks t \
                   ON t._sync_partition = c.partition AND t._sync_row_id = c.row_id \
                 WHERE c.partition = '{P}' AND c.payload = t._sync_payload AND c.scopes = t._sync_scopes"
            )),
            3
        );
        // The payloads are the row codec of the typed values.
        let layout = layout();
        let t2 = row_of(
            &layout,
            &[
                ("id", s("t2")),
                ("project_id", s("p2")),
                ("n", Some(RowValue::Integer(-9_007_199_254_740_991))),
                ("done", Some(RowValue::Boolean(false))),
            ],
        );
        let t3 = row_of(
            &layout,
            &[
                ("id", s("t3")),
                ("project_id", s("p1")),
                ("title", s("third")),
                ("n", Some(RowValue::Integer(0))),
                ("f", Some(RowValue::Float(-0.25))),
                ("done", Some(RowValue::Boolean(false))),
                ("meta", Some(RowValue::Json("[]".into()))),
                ("bin", Some(RowValue::Bytes(vec![]))),
                ("code", s("C-3")),
            ],
        );
        for (id, want) in [("t1", full_row("t1", "p1", Some(META_TEXT))), ("t2", t2), ("t3", t3)] {
            let stored = payload_of(P, id);
            assert_eq!(decode_row(&layout, &stored).unwrap(), want, "{id}");
            assert_eq!(stored, encode_row(&layout, &want).unwrap(), "{id}: the bytes a client would push");
        }
        // Scope indexes: distinct change scopes, one row-scope entry per row.
        assert_eq!(change_scopes(P), "tasks/project_id/p1/1,tasks/project_id/p2/1");
        assert_eq!(row_scopes(P), "tasks/project_id/p1/t1,tasks/project_id/p2/t2,tasks/project_id/p1/t3");
        assert_eq!(tombstones(P), "");
        // No idempotency record, no client record: nothing replays a captured commit.
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_push_results WHERE partition = '{P}'")), 0);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_clients WHERE partition = '{P}'")), 0);
        // Its NOTIFY is queued, signed like a pushed commit's.
        let (queued, last) = crate::engine::notify::queued_in_backend();
        assert_eq!(queued, notified + 1);
        assert_eq!(last, Some(crate::engine::notify::commit_payload(P, 1).unwrap()));
    }

    #[pg_test]
    fn the_payload_is_what_syncular_commit_encodes_for_the_same_values() {
        const Q: &str = "cap-w-same-commit";
        const P: &str = "cap-w-same-sql";
        put_abc(Q);
        put_abc(P);
        setup_tasks();
        let full = json!({"id": "t1", "project_id": "p1", "title": "Ship it", "n": 9007199254740991_i64, "f": 1.5,
                          "done": true, "bin": "AP8Q", "att": serde_json::from_str::<Value>(BLOB_REF).unwrap(),
                          "secret": "3q2+7w==", "code": "C-1"});
        let sparse = json!({"id": "t2", "project_id": "p2", "done": false});
        let with_json = json!({"id": "t3", "project_id": "p1", "done": false, "meta": {"b": [1, 2], "a": "x"}});
        let out = server_commit(
            Q,
            json!([{"table": "tasks", "op": "upsert", "row": full}, {"table": "tasks", "op": "upsert", "row": sparse},
                   {"table": "tasks", "op": "upsert", "row": with_json}]),
        );
        assert_eq!(out["status"], "applied", "{out}");
        set_partition(P);
        set_actor("svc");
        write_ok(&format!(
            "INSERT INTO public.tasks {COLUMNS} VALUES {}, ('t2', 'p2', NULL, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL), \
               ('t3', 'p1', NULL, NULL, NULL, false, '{{\"b\": [1, 2], \"a\": \"x\"}}', NULL, NULL, NULL, NULL)",
            full_values("t1", "p1", "NULL")
        ));
        // Row ids whose app rows are equal in both partitions, payload bytes included.
        let same_rows = || {
            text(&format!(
                "SELECT string_agg(a._sync_row_id, ',' ORDER BY a._sync_row_id) FROM public.tasks a JOIN public.tasks b ON b._sync_row_id = a._sync_row_id \
                  WHERE a._sync_partition = '{P}' AND b._sync_partition = '{Q}' \
                    AND a._sync_payload = b._sync_payload AND a._sync_scopes = b._sync_scopes AND a._sync_version = b._sync_version \
                    AND (a.id, a.project_id, a.title, a.n, a.f, a.done, a.meta, a.bin, a.att, a.doc, a.secret, a.code) \
                        IS NOT DISTINCT FROM (b.id, b.project_id, b.title, b.n, b.f, b.done, b.meta, b.bin, b.att, b.doc, b.secret, b.code)"
            ))
            .unwrap_or_default()
        };
        // Row ids whose changes of commit `seq` are equal in both partitions.
        let same_changes = |seq: i64| {
            text(&format!(
                "SELECT string_agg(a.row_id, ',' ORDER BY a.row_id) FROM syncular.sync_changes a JOIN syncular.sync_changes b ON b.idx = a.idx AND b.row_id = a.row_id \
                  WHERE a.partition = '{P}' AND a.commit_seq = {seq} AND b.partition = '{Q}' AND b.commit_seq = {seq} \
                    AND a.op = b.op AND a.row_version IS NOT DISTINCT FROM b.row_version AND a.scopes = b.scopes \
                    AND a.payload IS NOT DISTINCT FROM b.payload AND a.tbl = b.tbl"
            ))
            .unwrap_or_default()
        };
        let both = || {
            text("SELECT string_agg(t::text, E'\\n' ORDER BY t._sync_row_id, t._sync_partition) FROM public.tasks t").unwrap_or_default()
        };
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}'")), 3);
        assert_eq!(same_rows(), "t1,t2,t3", "{}", both());
        assert_eq!(same_changes(1), "t1,t2,t3");
        assert_eq!(payload_of(P, "t1"), encode_row(&layout(), &full_row("t1", "p1", None)).unwrap());
        // The json value: both paths write the same compact text (jsonb sorts keys).
        let layout = layout();
        let meta = layout.index_of("meta").unwrap();
        let sql_row = decode_row(&layout, &payload_of(P, "t3")).unwrap();
        assert_eq!(sql_row[meta], Some(RowValue::Json(r#"{"a":"x","b":[1,2]}"#.into())));

        // An update: a full-row upsert through syncular.commit, a plain UPDATE here.
        let mut updated = full.clone();
        updated["title"] = json!("v2");
        updated["bin"] = Value::Null;
        let out = server_commit(Q, json!([{"table": "tasks", "op": "upsert", "baseVersion": 1, "row": updated}]));
        assert_eq!((out["status"].as_str(), out["commitSeq"].as_i64()), (Some("applied"), Some(2)), "{out}");
        write_ok(&format!("UPDATE public.tasks SET title = 'v2', bin = NULL WHERE _sync_partition = '{P}' AND id = 't1'"));
        assert_eq!(same_rows(), "t1,t2,t3", "{}", both());
        assert_eq!(same_changes(2), "t1");
        assert_eq!(versions(P), "t1=2,t2=1,t3=1");

        // A delete.
        let out = server_commit(Q, json!([{"table": "tasks", "op": "delete", "rowId": "t2"}]));
        assert_eq!(out["commitSeq"], 3, "{out}");
        write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND id = 't2'"));
        assert_eq!(same_changes(3), "t2");
        assert_eq!(tombstones(P), "tasks/t2/3");
        assert_eq!(tombstones(P), tombstones(Q));
        assert_eq!(row_scopes(P), row_scopes(Q));
        assert_eq!(change_scopes(P), change_scopes(Q));
        // The same header form (client id `sql:<actor>`).
        assert_eq!(headers(P), headers(Q));
        assert_eq!(headers(P), "1:sql:svc:svc,2:sql:svc:svc,3:sql:svc:svc");
    }

    #[pg_test]
    fn updates_bump_versions_one_commit_per_statement() {
        const P: &str = "cap-w-update";
        setup_tasks();
        set_partition(P);
        set_actor("job");
        let notified = notifications();
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t1', 'p1', 'a', false), ('t2', 'p2', 'b', false), ('t3', 'p1', 'c', false)");
        write_ok(&format!("UPDATE public.tasks SET title = 'second' WHERE _sync_partition = '{P}' AND project_id = 'p1'"));
        write_ok(&format!("UPDATE public.tasks SET n = 7 WHERE _sync_partition = '{P}' AND id = 't1'"));
        let t2_before = payload_of(P, "t2");
        write_ok(&format!("UPDATE public.tasks SET title = title WHERE _sync_partition = '{P}' AND id = 't2'"));
        assert_eq!(commits(P), 4);
        assert_eq!(max_commit_seq(P), 4);
        assert_eq!(headers(P), "1:sql:job:job,2:sql:job:job,3:sql:job:job,4:sql:job:job");
        assert_eq!(versions(P), "t1=3,t2=2,t3=2");
        assert_eq!(notifications(), notified + 4);

        // Commit 2: both p1 rows, version 2, in one commit (idx 0 and 1).
        assert_eq!(
            text(&format!(
                "SELECT string_agg(concat_ws('/', row_id, op, row_version), ',' ORDER BY row_id) || ' idx ' || string_agg(idx::text, ',' ORDER BY idx) \
                   FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = 2"
            )),
            Some("t1/1/2,t3/1/2 idx 0,1".into())
        );
        let layout = layout();
        let second = |id: &str, n: Option<i64>| {
            row_of(
                &layout,
                &[
                    ("id", s(id)),
                    ("project_id", s("p1")),
                    ("title", s("second")),
                    ("n", n.map(RowValue::Integer)),
                    ("done", Some(RowValue::Boolean(false))),
                ],
            )
        };
        // Each change keeps the row as it was written then.
        assert_eq!(decode_row(&layout, &change_payload(P, 2, "t1")).unwrap(), second("t1", None));
        assert_eq!(decode_row(&layout, &change_payload(P, 2, "t3")).unwrap(), second("t3", None));
        assert_eq!(change_payload(P, 2, "t3"), payload_of(P, "t3"));
        assert_eq!(changes_of(P, 3), "0/t1/1/3/{\"project_id\": \"p1\"}/payload");
        assert_eq!(change_payload(P, 3, "t1"), payload_of(P, "t1"));
        assert_eq!(decode_row(&layout, &payload_of(P, "t1")).unwrap(), second("t1", Some(7)));
        // A no-op UPDATE is still a write: new version, same payload bytes.
        assert_eq!(changes_of(P, 4), "0/t2/1/2/{\"project_id\": \"p2\"}/payload");
        assert_eq!(payload_of(P, "t2"), t2_before);
        // Scopes never change on update: the row-scope index is untouched.
        assert_eq!(row_scopes(P), "tasks/project_id/p1/t1,tasks/project_id/p2/t2,tasks/project_id/p1/t3");
        assert_eq!(
            change_scopes(P),
            "tasks/project_id/p1/1,tasks/project_id/p2/1,tasks/project_id/p1/2,tasks/project_id/p1/3,tasks/project_id/p2/4"
        );
    }

    #[pg_test]
    fn deletes_write_tombstones_and_a_reinsert_clears_them() {
        const P: &str = "cap-w-delete";
        setup_tasks();
        set_partition(P);
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t1', 'p1', 'a', false), ('t2', 'p2', 'b', false), ('t3', 'p1', 'c', false)");
        write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND id IN ('t1', 't2')"));
        assert_eq!(commits(P), 2);
        assert_eq!(
            text(&format!(
                "SELECT string_agg(concat_ws('/', row_id, op, coalesce(row_version::text, 'null'), scopes::text, coalesce(payload::text, 'null')), ',' ORDER BY row_id) \
                        || ' idx ' || string_agg(idx::text, ',' ORDER BY idx) \
                   FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = 2"
            )),
            Some("t1/2/null/{\"project_id\": \"p1\"}/null,t2/2/null/{\"project_id\": \"p2\"}/null idx 0,1".into())
        );
        assert_eq!(tombstones(P), "tasks/t1/2,tasks/t2/2");
        assert_eq!(row_scopes(P), "tasks/project_id/p1/t3");
        assert_eq!(versions(P), "t3=1");
        assert!(change_scopes(P).ends_with("tasks/project_id/p1/2,tasks/project_id/p2/2"), "{}", change_scopes(P));

        // Re-inserting t1: a new row (version 1), its tombstone gone, its scope back.
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t1', 'p2', 'again', true)");
        assert_eq!(tombstones(P), "tasks/t2/2");
        assert_eq!(row_scopes(P), "tasks/project_id/p2/t1,tasks/project_id/p1/t3");
        assert_eq!(versions(P), "t1=1,t3=1");
        assert_eq!(changes_of(P, 3), "0/t1/1/1/{\"project_id\": \"p2\"}/payload");

        // Deleted again: the tombstone points at the newest delete.
        write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND id = 't1'"));
        assert_eq!(tombstones(P), "tasks/t1/4,tasks/t2/2");
        assert_eq!(changes_of(P, 4), "0/t1/2/null/{\"project_id\": \"p2\"}/no payload");
        assert_eq!(commits(P), 4);
        assert_eq!(max_commit_seq(P), 4);
    }

    #[pg_test]
    fn insert_select_and_copy_are_one_commit_each() {
        const P: &str = "cap-w-bulk";
        setup_tasks();
        set_partition(P);
        let notified = notifications();
        write_ok(
            "INSERT INTO public.tasks (id, project_id, title, n, done) \
             SELECT 'g' || lpad(g::text, 4, '0'), 'p' || (g % 3), 'row ' || g, g, g % 2 = 0 FROM generate_series(1, 500) g",
        );
        assert_eq!(commits(P), 1);
        assert_eq!(
            text(&format!(
                "SELECT concat_ws('/', count(*), count(DISTINCT idx), min(idx), max(idx), bool_and(op = 1 AND row_version = 1)) \
                   FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = 1"
            )),
            Some("500/500/0/499/t".into())
        );
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM syncular.sync_changes c JOIN public.tasks t ON t._sync_partition = c.partition AND t._sync_row_id = c.row_id \
                  WHERE c.partition = '{P}' AND c.payload = t._sync_payload AND c.scopes = t._sync_scopes"
            )),
            500
        );
        assert_eq!(change_scopes(P), "tasks/project_id/p0/1,tasks/project_id/p1/1,tasks/project_id/p2/1");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = '{P}'")), 500);
        let layout = layout();
        assert_eq!(
            decode_row(&layout, &payload_of(P, "g0042")).unwrap(),
            row_of(
                &layout,
                &[
                    ("id", s("g0042")),
                    ("project_id", s("p0")),
                    ("title", s("row 42")),
                    ("n", Some(RowValue::Integer(42))),
                    ("done", Some(RowValue::Boolean(true))),
                ]
            )
        );

        // COPY … FROM: the same capture (one commit for the whole load).
        write_ok(
            "COPY public.tasks (id, project_id, title, done) FROM PROGRAM 'seq 1 300 | sed -e ''s/.*/c&,p1,copied &,true/''' WITH (FORMAT csv)",
        );
        assert_eq!(commits(P), 2);
        assert_eq!(
            text(&format!(
                "SELECT concat_ws('/', count(*), count(DISTINCT idx), min(idx), max(idx), bool_and(op = 1 AND row_version = 1)) \
                   FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = 2"
            )),
            Some("300/300/0/299/t".into())
        );
        assert_eq!(
            decode_row(&layout, &change_payload(P, 2, "c7")).unwrap(),
            row_of(
                &layout,
                &[("id", s("c7")), ("project_id", s("p1")), ("title", s("copied 7")), ("done", Some(RowValue::Boolean(true)))]
            )
        );
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = '{P}'")), 800);
        assert_eq!(max_commit_seq(P), 2);
        assert_eq!(notifications(), notified + 2);
    }

    #[pg_test]
    fn the_actor_is_syncular_actor_id_or_the_current_role() {
        const P: &str = "cap-w-actor";
        setup_tasks();
        set_partition(P);
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', false)");
        let me = text("SELECT current_user::text").unwrap();
        assert_eq!(headers(P), format!("1:sql:{me}:{me}"));

        set_actor("nightly-import");
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t2', 'p1', false)");
        set_actor("");
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t3', 'p1', false)");

        // A role with only table privileges writes through capture (the
        // triggers are SECURITY DEFINER); the actor is that role.
        run("CREATE ROLE cap_w_writer NOLOGIN");
        run("GRANT USAGE ON SCHEMA public TO cap_w_writer");
        run("GRANT SELECT, INSERT, UPDATE, DELETE ON public.tasks TO cap_w_writer");
        write_ok(&format!(
            "SET LOCAL ROLE cap_w_writer; \
             INSERT INTO public.tasks (id, project_id, done) VALUES ('t4', 'p2', false); \
             UPDATE public.tasks SET done = true WHERE _sync_partition = '{P}' AND id = 't4'; \
             RESET ROLE"
        ));
        assert_eq!(
            headers(P),
            format!("1:sql:{me}:{me},2:sql:nightly-import:nightly-import,3:sql:{me}:{me},4:sql:cap_w_writer:cap_w_writer,5:sql:cap_w_writer:cap_w_writer")
        );
        assert_eq!(versions(P), "t1=1,t2=1,t3=1,t4=2");
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results"), 0);
    }

    #[pg_test]
    fn engine_writes_are_not_captured_again() {
        const P: &str = "cap-w-engine";
        setup_tasks();
        set_partition(P);
        set_actor("job");
        // e1: syncular.commit (2 rows)
        let out = server_commit(
            P,
            json!([{"table": "tasks", "op": "upsert", "row": {"id": "s1", "project_id": "p1", "done": false}},
                   {"table": "tasks", "op": "upsert", "row": {"id": "s2", "project_id": "p2", "done": false}}]),
        );
        assert_eq!(out["commitSeq"], 1, "{out}");
        // m1
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t3', 'p1', 'sql', false)");
        // e2: a pushed commit
        let epoch = sync_support::acquire_epoch(P, "alice", "c1");
        let pushed = sync_support::push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![PushCommit {
                client_commit_id: "k1".into(),
                operations: vec![sync_support::upsert(&sync_support::task("t9", "p1", "pushed", None), None)],
            }],
            Some(&sync_support::allowed_p1_p2()),
        );
        assert_eq!((pushed[0].status, pushed[0].commit_seq), (PushStatus::Applied, Some(3)));
        // m2
        write_ok(&format!("UPDATE public.tasks SET title = 'from sql' WHERE _sync_partition = '{P}' AND id = 's2'"));
        // e3
        let out = server_commit(P, json!([{"table": "tasks", "op": "delete", "rowId": "t3"}]));
        assert_eq!(out["commitSeq"], 5, "{out}");
        // m3
        write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND id = 's1'"));
        // A client holding the pre-SQL version conflicts, and sees the SQL-written row.
        let out = server_commit(
            P,
            json!([{"table": "tasks", "op": "upsert", "baseVersion": 1, "row": {"id": "s2", "project_id": "p2", "done": true}}]),
        );
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(out["results"][0]["code"], "sync.version_conflict", "{out}");
        assert_eq!(out["results"][0]["serverVersion"], 2, "{out}");
        assert_eq!(out["results"][0]["serverRow"]["title"], "from sql", "{out}");

        // 3 engine commits + 3 plain statements = 6 commits, dense, one log each.
        assert_eq!(commits(P), 6);
        assert_eq!(max_commit_seq(P), 6);
        assert_eq!(headers(P), "1:sql:svc:svc,2:sql:job:job,3:c1:alice,4:sql:job:job,5:sql:svc:svc,6:sql:job:job");
        assert_eq!(
            text(&format!(
                "SELECT string_agg(n::text, ',' ORDER BY commit_seq) FROM \
                   (SELECT commit_seq, count(*) AS n FROM syncular.sync_changes WHERE partition = '{P}' GROUP BY commit_seq) x"
            )),
            Some("2,1,1,1,1,1".into())
        );
        assert_eq!(versions(P), "s2=2,t9=1");
        // Idempotency records: the engine's four calls (the rejected one too), none for SQL.
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_push_results WHERE partition = '{P}'")), 4);

        // A schema bump rewrites stored payloads without capturing them.
        let mut v2 = tasks_ir(2);
        v2["tables"][0]["columns"].as_array_mut().unwrap().push(json!({"name": "extra", "type": "string", "nullable": true}));
        assert_eq!(register(&v2).unwrap(), "migrated (rewritten rows: 2, retired tables: [])");
        assert_eq!(commits(P), 6);
        assert_eq!(versions(P), "s2=2,t9=1");
        // The next plain write encodes with the new layout.
        write_ok("INSERT INTO public.tasks (id, project_id, done, extra) VALUES ('t10', 'p1', true, 'new column')");
        assert_eq!(commits(P), 7);
        let layout2 = Schema::from_value(&v2).unwrap().tables[0].layout().clone();
        assert_eq!(
            decode_row(&layout2, &payload_of(P, "t10")).unwrap(),
            row_of(
                &layout2,
                &[("id", s("t10")), ("project_id", s("p1")), ("done", Some(RowValue::Boolean(true))), ("extra", s("new column"))]
            )
        );
        let rewritten = decode_row(&layout2, &payload_of(P, "s2")).unwrap();
        assert_eq!(rewritten[layout2.index_of("title").unwrap()], s("from sql"));
    }

    #[pg_test]
    fn captured_writes_follow_repeated_schema_bumps() {
        // Statements that touch no row between bumps, then a write: the
        // row encoding must always use the current layout.
        const P: &str = "cap-w-bumps";
        setup_tasks();
        set_partition(P);
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('r0', 'p1', false)");
        let mut ir = tasks_ir(1);
        for round in 1..=6 {
            for step in 0..2 {
                let version = 1 + 2 * (round - 1) + step + 1;
                ir["version"] = json!(version);
                ir["tables"][0]["columns"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": format!("c{version}"), "type": "integer", "nullable": true}));
                assert!(register(&ir).unwrap().starts_with("migrated"), "version {version}");
                if step == 0 {
                    write_ok(&format!("UPDATE public.tasks SET done = true WHERE _sync_partition = '{P}' AND false"));
                    write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND false"));
                }
            }
            let version = ir["version"].as_i64().unwrap();
            let id = format!("r{round}");
            write_ok(&format!(
                "INSERT INTO public.tasks (id, project_id, done, c{version}) VALUES ('{id}', 'p1', true, {version})"
            ));
            let layout = Schema::from_value(&ir).unwrap().tables[0].layout().clone();
            assert_eq!(
                decode_row(&layout, &payload_of(P, &id)).unwrap(),
                row_of(
                    &layout,
                    &[
                        ("id", s(&id)),
                        ("project_id", s("p1")),
                        ("done", Some(RowValue::Boolean(true))),
                        (&format!("c{version}"), Some(RowValue::Integer(version))),
                    ]
                ),
                "round {round}"
            );
        }
        assert_eq!(commits(P), 7);
    }

    #[pg_test]
    fn pulls_serve_captured_commits_and_bootstraps_their_rows() {
        use crate::tests::sync_pull_support::{self as pull, header, sub, Client, ACCEPT_ROWS};
        const P: &str = "cap-w-pull";
        pull::setup();
        let mut alice = Client::new(P, "alice", "ca");
        let s1 = alice.push_ok(vec![pull::task("t1", "w1", "pushed")]);
        set_partition(P);
        set_actor("importer");
        write_ok("INSERT INTO public.tasks (id, ws, title) VALUES ('t2', 'w1', 'two'), ('t3', 'w1', 'three')");
        write_ok("INSERT INTO public.tasks (id, ws, title) VALUES ('t4', 'w2', 'elsewhere')");
        write_ok(&format!("UPDATE public.tasks SET title = 'edited in sql' WHERE _sync_partition = '{P}' AND id = 't1'"));
        write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND id = 't3'"));

        let mut bob = Client::new(P, "bob", "cb");
        let p = bob.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], s1, None)]);
        let sec = p.one();
        assert_eq!(sec.commit_seqs(), vec![2, 4, 5], "the w2-only commit 3 is not in scope");
        assert_eq!(sec.end.next_cursor, 5);
        let c2 = &sec.commits[0];
        assert_eq!(c2.actor_id, "importer");
        assert_eq!(
            c2.changes.iter().map(|c| (c.row_id.as_str(), c.op, c.row_version)).collect::<Vec<_>>(),
            vec![("t2", Op::Upsert, Some(1)), ("t3", Op::Upsert, Some(1))]
        );
        assert_eq!(pull::task_values(c2.changes[0].row.as_ref().unwrap()), ("t2".into(), "w1".into(), "two".into()));
        let c4 = &sec.commits[1].changes[0];
        assert_eq!((c4.row_id.as_str(), c4.row_version), ("t1", Some(2)));
        assert_eq!(c4.row.as_deref(), Some(payload_of(P, "t1").as_slice()));
        assert_eq!(pull::task_values(c4.row.as_ref().unwrap()).2, "edited in sql");
        let c5 = &sec.commits[2].changes[0];
        assert_eq!((c5.row_id.as_str(), c5.op, c5.row.is_none()), ("t3", Op::Delete, true));
        assert_eq!(c5.scopes, vec![("ws".to_string(), "w1".to_string())]);

        // A bootstrap serves the SQL-written rows with their versions and payloads.
        let mut carol = Client::new(P, "carol", "cc");
        let p = carol.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let rows = p.one().segment_rows();
        assert_eq!(
            rows.iter().map(|(id, v, _)| (id.as_str(), *v)).collect::<Vec<_>>(),
            vec![("t1", 2), ("t2", 1)]
        );
        assert_eq!(rows[0].2, payload_of(P, "t1"));
        assert_eq!(rows[1].2, payload_of(P, "t2"));

        // alice's next write of t1 on version 1 conflicts with the SQL update.
        let r = alice.push(vec![syncular_protocol::request::Operation {
            base_version: Some(1),
            ..pull::task("t1", "w1", "stale")
        }]);
        assert_eq!(r.status, PushStatus::Rejected);
        match &r.results[..] {
            [OpResult::Conflict { code, server_version: 2, server_row, .. }] => {
                assert_eq!(code, "sync.version_conflict");
                assert_eq!(server_row, &payload_of(P, "t1"));
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[pg_test]
    fn install_capture_triggers_repairs_a_dropped_trigger() {
        const P: &str = "cap-w-install";
        setup_tasks();
        let triggers = || {
            text(
                "SELECT string_agg(tgname::text, ',' ORDER BY tgname) FROM pg_catalog.pg_trigger \
                  WHERE tgrelid = 'public.tasks'::regclass AND NOT tgisinternal",
            )
            .unwrap_or_default()
        };
        let all = "syncular_capture_delete,syncular_capture_insert,syncular_capture_start,syncular_capture_truncate,syncular_capture_update,zz_syncular_capture_row";
        assert_eq!(triggers(), all);
        run("DROP TRIGGER zz_syncular_capture_row ON public.tasks");
        run("DROP TRIGGER syncular_capture_insert ON public.tasks");
        assert_eq!(int8("SELECT syncular.install_capture_triggers()::bigint"), Some(1));
        assert_eq!(triggers(), all);
        // Each depends on the extension (DROP EXTENSION removes them, keeps the table).
        assert_eq!(
            count(
                "SELECT count(*) FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_trigger g ON g.oid = d.objid \
                  WHERE d.classid = 'pg_catalog.pg_trigger'::regclass AND d.refclassid = 'pg_catalog.pg_extension'::regclass \
                    AND d.deptype = 'x' AND g.tgrelid = 'public.tasks'::regclass"
            ),
            6
        );
        set_partition(P);
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', false)");
        assert_eq!(commits(P), 1);
        // Re-registering the same IR repairs too.
        run("DROP TRIGGER syncular_capture_start ON public.tasks");
        assert_eq!(register(&tasks_ir(1)).unwrap(), "unchanged");
        assert_eq!(triggers(), all);
    }
}
