//! CRDT columns (§5.10): a pushed `crdt` value is merged into the stored
//! state (`yjs-doc`), the stored, logged and served value is the merged
//! state; an update that does not decode is `sync.crdt_merge_failed` with
//! nothing applied; NULL clears; an insert merges against the empty
//! document; a stale `baseVersion` still conflicts (no merge) with the
//! merged state in `serverRow`; write and commit validators see the merged
//! row;
//! `syncular.commit` and captured plain SQL writes merge the same way; a
//! schema naming an unknown `crdtType` is refused at registration.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;
    use syncular_crdt::{text, Registry, YJS_DOC};
    use syncular_protocol::response::{OpResult, PushResult, PushStatus};
    use syncular_protocol::row_codec::{decode_row, RowValue};

    use crate::tests::support::{bytea, register, run, tasks_ir};
    use crate::tests::sync_support::*;

    const P: &str = "crdt-p";

    fn ready() -> String {
        setup_tasks();
        acquire_epoch(P, "alice", "c1")
    }

    fn doc_row(id: &str, doc: Option<Vec<u8>>) -> Vec<Option<RowValue>> {
        with(task(id, "p1", "title", None), "doc", doc.map(RowValue::Crdt))
    }

    /// The `doc` column of the row-codec payload `bytes`.
    fn doc_of(bytes: &[u8]) -> Option<Vec<u8>> {
        let layout = tasks_layout();
        let row = decode_row(&layout, bytes).expect("payload decodes");
        match &row[layout.index_of("doc").unwrap()] {
            Some(RowValue::Crdt(b)) => Some(b.clone()),
            None => None,
            other => panic!("doc is {other:?}"),
        }
    }

    fn stored_doc(id: &str) -> Option<Vec<u8>> {
        Spi::get_one::<Vec<u8>>(&format!("SELECT doc FROM public.tasks WHERE _sync_partition = '{P}' AND id = '{id}'")).unwrap()
    }

    fn stored_payload(id: &str) -> Vec<u8> {
        bytea(&format!("SELECT _sync_payload FROM public.tasks WHERE _sync_partition = '{P}' AND id = '{id}'"))
    }

    fn change_payload(seq: i64) -> Vec<u8> {
        bytea(&format!("SELECT payload FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = {seq}"))
    }

    fn merge(stored: Option<&[u8]>, incoming: &[u8]) -> Vec<u8> {
        Registry::builtin().merge(YJS_DOC, stored, incoming).unwrap()
    }

    fn push_one(epoch: &str, client: &str, key: &str, row: &[Option<RowValue>], base: Option<i64>) -> PushResult {
        push(P, "alice", client, epoch, vec![commit(key, vec![upsert(row, base)])], Some(&allowed_p1_p2()))
            .pop()
            .unwrap()
    }

    #[pg_test]
    fn two_concurrent_updates_merge_into_the_stored_state() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "base ").unwrap();
        let r = push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        assert_eq!(r.status, PushStatus::Applied);
        // An insert stores merge(NULL, incoming): a full state is its own merge.
        assert_eq!(stored_doc("t1"), Some(merge(None, &base)));
        // Two clients edit from the same base, offline, and push baseVersion-less.
        let a = text::insert(&base, 2, "text", 5, "alpha").unwrap();
        let b = text::insert(&base, 3, "text", 5, "beta").unwrap();
        assert_eq!(push_one(&e, "c2", "ka", &doc_row("t1", Some(a.clone())), None).status, PushStatus::Applied);
        assert_eq!(push_one(&e, "c3", "kb", &doc_row("t1", Some(b.clone())), None).status, PushStatus::Applied);
        let merged = stored_doc("t1").unwrap();
        let expected = merge(Some(&merge(Some(&merge(None, &base)), &a)), &b);
        assert_eq!(merged, expected);
        // Order-independent: the other arrival order gives the same bytes.
        assert_eq!(merged, merge(Some(&merge(Some(&merge(None, &base)), &b)), &a));
        let t = text::read(&merged, "text").unwrap();
        assert!(t.starts_with("base ") && t.contains("alpha") && t.contains("beta"), "{t}");
        // The stored payload (bootstraps) and the logged change (incremental pulls)
        // carry the merged state, never the raw pushed update.
        assert_eq!(doc_of(&stored_payload("t1")), Some(merged.clone()));
        assert_eq!(doc_of(&change_payload(3)), Some(merged.clone()));
        assert_ne!(doc_of(&change_payload(3)), Some(b));
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_version = 3")), 1);
        // A replayed update is a no-op merge (a new commit, same state).
        assert_eq!(push_one(&e, "c2", "ka2", &doc_row("t1", Some(a)), None).status, PushStatus::Applied);
        assert_eq!(stored_doc("t1"), Some(merged));
    }

    #[pg_test]
    fn an_update_that_does_not_decode_is_rejected_and_nothing_applies() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "kept").unwrap();
        push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        let before = stored_payload("t1");
        // Invalid UTF-8 inside the text: refused before yrs sees it.
        let mut bad = base.clone();
        let at = bad.windows(4).position(|w| w == b"kept").unwrap();
        bad[at] = 0xff;
        for (key, garbage) in [("k1", vec![1u8, 2, 3]), ("k2", bad), ("k3", vec![0xff; 16])] {
            let r = push(
                P,
                "alice",
                "c1",
                &e,
                vec![commit(key, vec![upsert(&task("t2", "p1", "other", None), None), upsert(&doc_row("t1", Some(garbage)), None)])],
                Some(&allowed_p1_p2()),
            );
            assert_eq!(rejection(&r[0]), (1, "sync.crdt_merge_failed".into(), false));
            match &r[0].results[0] {
                OpResult::Error { message, .. } => assert!(message.contains("crdt column \"doc\""), "{message}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(stored_payload("t1"), before);
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND id = 't2'")), 0);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}'")), 1);
        // A rejected insert with a bad doc writes nothing either.
        let r = push_one(&e, "c1", "k4", &doc_row("t9", Some(vec![9, 9])), None);
        assert_eq!(rejection(&r), (0, "sync.crdt_merge_failed".into(), false));
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND id = 't9'")), 0);
    }

    #[pg_test]
    fn null_clears_and_empty_bytes_keep_the_state() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "x").unwrap();
        push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        // Empty bytes are an empty update: the state stays.
        push_one(&e, "c1", "k1", &doc_row("t1", Some(vec![])), None);
        assert_eq!(stored_doc("t1"), Some(base.clone()));
        // NULL is a plain write: the column is cleared (no merge).
        assert_eq!(push_one(&e, "c1", "k2", &doc_row("t1", None), None).status, PushStatus::Applied);
        assert_eq!(stored_doc("t1"), None);
        assert_eq!(doc_of(&stored_payload("t1")), None);
        // The next update merges against the empty document again.
        let again = text::insert(&[], 2, "text", 0, "fresh").unwrap();
        push_one(&e, "c1", "k3", &doc_row("t1", Some(again.clone())), None);
        assert_eq!(text::read(&stored_doc("t1").unwrap(), "text").unwrap(), "fresh");
        // An insert with a NULL doc stays NULL.
        push_one(&e, "c1", "k4", &doc_row("t2", None), None);
        assert_eq!(stored_doc("t2"), None);
    }

    #[pg_test]
    fn a_stale_base_version_conflicts_without_merging_and_shows_the_merged_state() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "base").unwrap();
        push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        let a = text::insert(&base, 2, "text", 4, " A").unwrap();
        push_one(&e, "c2", "k1", &doc_row("t1", Some(a.clone())), None);
        let merged = stored_doc("t1").unwrap();
        // A crdt-only edit without baseVersion never conflicts, however far the version moved.
        // With a stale baseVersion the non-crdt state conflicts: rejected, nothing merged.
        let b = text::insert(&base, 3, "text", 4, " B").unwrap();
        let r = push_one(&e, "c3", "k2", &with(doc_row("t1", Some(b.clone())), "title", Some(RowValue::String("b".into()))), Some(1));
        assert_eq!(r.status, PushStatus::Rejected);
        match &r.results[0] {
            OpResult::Conflict { code, server_version, server_row, .. } => {
                assert_eq!(code, "sync.version_conflict");
                assert_eq!(*server_version, 2);
                assert_eq!(doc_of(server_row), Some(merged.clone()), "serverRow carries the merged state");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(stored_doc("t1"), Some(merged.clone()));
        // The current baseVersion applies and merges.
        let r = push_one(&e, "c3", "k3", &with(doc_row("t1", Some(b)), "title", Some(RowValue::String("b".into()))), Some(2));
        assert_eq!(r.status, PushStatus::Applied);
        let t = text::read(&stored_doc("t1").unwrap(), "text").unwrap();
        assert!(t.contains(" A") && t.contains(" B"), "{t}");
    }

    #[pg_test]
    fn the_write_validator_sees_the_merged_value() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "base").unwrap();
        push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        // Rejects every write, echoing the doc it saw (base64) in its message.
        run("CREATE FUNCTION public.echo_doc(write jsonb) RETURNS jsonb LANGUAGE sql AS \
             $$ SELECT jsonb_build_object('code', 'test.echo', 'message', coalesce(write->'row'->>'doc', '-')) $$");
        run("SELECT syncular.set_write_validator('tasks', 'public.echo_doc(jsonb)')");
        let a = text::insert(&base, 2, "text", 4, "!").unwrap();
        let r = push_one(&e, "c2", "k1", &doc_row("t1", Some(a.clone())), None);
        let expected = merge(Some(&base), &a);
        match &r.results[0] {
            OpResult::Error { code, message, .. } => {
                assert_eq!(code, "test.echo");
                use base64::Engine as _;
                assert_eq!(message, &base64::engine::general_purpose::STANDARD.encode(&expected));
            }
            other => panic!("{other:?}"),
        }
    }

    #[pg_test]
    fn the_commit_validator_sees_the_merged_value_and_the_candidate_row() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "base").unwrap();
        push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        // Rejects every commit, echoing the evidence row's doc and the candidate state's doc.
        run("CREATE FUNCTION public.echo_commit(commit jsonb) RETURNS jsonb LANGUAGE sql AS \
             $$ SELECT jsonb_build_object('code', 'test.echo', 'message', \
                  (commit->'operations'->0->'row'->>'doc') || '|' || \
                  (SELECT encode(doc, 'base64') FROM public.tasks WHERE _sync_partition = commit->>'partition' AND id = 't1')) $$");
        run("SELECT syncular.set_commit_validator('public.echo_commit(jsonb)')");
        let a = text::insert(&base, 2, "text", 4, "!").unwrap();
        let r = push_one(&e, "c2", "k1", &doc_row("t1", Some(a.clone())), None);
        use base64::Engine as _;
        let expected = base64::engine::general_purpose::STANDARD.encode(merge(Some(&base), &a));
        match &r.results[0] {
            OpResult::Error { code, message, .. } => {
                assert_eq!(code, "test.echo");
                // Postgres' base64 wraps lines at 76 characters.
                assert_eq!(message.replace('\n', ""), format!("{expected}|{expected}"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(stored_doc("t1"), Some(base), "the rejection rolled the merge back");
    }

    #[pg_test]
    fn syncular_commit_merges_like_a_push() {
        let e = ready();
        let base = text::insert(&[], 1, "text", 0, "base").unwrap();
        push_one(&e, "c1", "k0", &doc_row("t1", Some(base.clone())), None);
        let a = text::insert(&base, 2, "text", 4, "+sql").unwrap();
        use base64::Engine as _;
        let doc = base64::engine::general_purpose::STANDARD.encode(&a);
        let ops = json!([{"op": "upsert", "table": "tasks", "row": {"id": "t1", "project_id": "p1", "title": "title", "done": false, "doc": doc}}]);
        let out = crate::tests::support::text(&format!(
            "SELECT syncular.commit('{P}', 'server', '{}'::jsonb, allowed_scopes => '{{\"project_id\": [\"p1\"]}}'::jsonb)::text",
            ops.to_string().replace('\'', "''")
        ))
        .unwrap();
        assert!(out.contains("\"applied\""), "{out}");
        assert_eq!(stored_doc("t1"), Some(merge(Some(&base), &a)));
        assert_eq!(text::read(&stored_doc("t1").unwrap(), "text").unwrap(), "base+sql");
    }

    #[pg_test]
    fn registration_refuses_an_unknown_crdt_type() {
        let mut ir = tasks_ir(1);
        ir["tables"][0]["columns"][9]["crdtType"] = json!("rga-log");
        let err = register(&ir).unwrap_err();
        assert_eq!(err.sqlstate, "42P15", "{err:?}");
        assert!(err.message.starts_with("syncular.invalid_schema: "), "{}", err.message);
        assert!(err.message.contains("unknown crdtType \"rga-log\""), "{}", err.message);
        // yjs-doc is served.
        register(&tasks_ir(1)).unwrap();
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[pg_test]
    fn captured_plain_sql_writes_merge_too() {
        use crate::tests::capture::support::{commits, set_partition, write_ok};
        const C: &str = "crdt-capture";
        setup_tasks();
        set_partition(C);
        let base = text::insert(&[], 1, "text", 0, "base").unwrap();
        write_ok(&format!(
            "INSERT INTO public.tasks (id, project_id, done, doc) VALUES ('t1', 'p1', false, '\\x{}')",
            hex(&base)
        ));
        let at = |sql: &str| bytea(&format!("SELECT {sql} FROM public.tasks WHERE _sync_partition = '{C}' AND id = 't1'"));
        assert_eq!(at("doc"), merge(None, &base));
        // An UPDATE that sets the column to an update merges it into the stored state.
        let a = text::insert(&base, 2, "text", 4, "+a").unwrap();
        let b = text::insert(&base, 3, "text", 4, "+b").unwrap();
        for u in [&a, &b] {
            write_ok(&format!(
                "UPDATE public.tasks SET doc = '\\x{}' WHERE _sync_partition = '{C}' AND id = 't1'",
                hex(u)
            ));
        }
        let merged = merge(Some(&merge(Some(&merge(None, &base)), &a)), &b);
        assert_eq!(at("doc"), merged);
        assert_eq!(doc_of(&at("_sync_payload")), Some(merged.clone()));
        let last = bytea(&format!(
            "SELECT payload FROM syncular.sync_changes WHERE partition = '{C}' ORDER BY commit_seq DESC LIMIT 1"
        ));
        assert_eq!(doc_of(&last), Some(merged.clone()));
        // Updating another column leaves the state as it is.
        write_ok(&format!("UPDATE public.tasks SET title = 'x' WHERE _sync_partition = '{C}' AND id = 't1'"));
        assert_eq!(at("doc"), merged);
        // NULL clears.
        write_ok(&format!("UPDATE public.tasks SET doc = NULL WHERE _sync_partition = '{C}' AND id = 't1'"));
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{C}' AND doc IS NULL")), 1);
        assert_eq!(commits(C), 5);
    }
}
