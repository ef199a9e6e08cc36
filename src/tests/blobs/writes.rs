//! The push-time existence check (§5.9.6, §6.6) and the reference index
//! (§5.9.4) on every write path: pushes, `syncular.commit`, captured plain
//! SQL writes, schema retirement.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::blob::blob_id_of;
    use syncular_protocol::response::PushStatus;
    use syncular_protocol::row_codec::RowValue;

    use crate::tests::blobs::support::*;
    use crate::tests::capture::support::{set_partition, write_ok};
    use crate::tests::support::{expect_error, int8, text};
    use crate::tests::sync_support::*;

    const P: &str = "blob-writes";

    fn with_att(id: &str, bytes: Option<&[u8]>) -> Vec<Option<RowValue>> {
        with(task(id, "p1", id, None), "att", bytes.map(|b| RowValue::BlobRef(blob_ref(b))))
    }

    fn changes() -> i64 {
        count(&format!("SELECT count(*) FROM syncular.sync_changes WHERE partition = '{P}'"))
    }

    #[pg_test]
    fn a_push_naming_an_unknown_blob_is_rejected_and_the_commits_around_it_apply() {
        setup_tasks();
        put(P, b"present");
        let epoch = acquire_epoch(P, "alice", "c1");
        let allowed = allowed_p1_p2();
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("k1", vec![upsert(&task("t0", "p1", "plain", None), None)]),
                commit("k2", vec![upsert(&task("t1", "p1", "ok", None), None), upsert(&with_att("t2", Some(b"never uploaded")), None)]),
                commit("k3", vec![upsert(&with_att("t3", Some(b"present")), None)]),
            ],
            Some(&allowed),
        );
        assert_eq!(results[0].status, PushStatus::Applied);
        assert_eq!(results[1].status, PushStatus::Rejected);
        let (op, code, retryable) = rejection(&results[1]);
        assert_eq!((op, code.as_str(), retryable), (1, "blob.not_found", false));
        assert_eq!(results[2].status, PushStatus::Applied);
        // Nothing of k2 stays: no row, no change, no reference.
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND id IN ('t1', 't2')")), 0);
        assert_eq!(changes(), 2);
        assert_eq!(refs(P), format!("tasks/t3/{}", &blob_id_of(b"present")[..13]));
        // The replay answers the same rejection.
        let again = push(P, "alice", "c1", &epoch, vec![commit("k2", vec![upsert(&with_att("t2", Some(b"never uploaded")), None)])], Some(&allowed));
        assert_eq!(rejection(&again[0]).1, "blob.not_found");
        // Uploaded, a new commit of the same row applies.
        put(P, b"never uploaded");
        let later = push(P, "alice", "c1", &epoch, vec![commit("k4", vec![upsert(&with_att("t2", Some(b"never uploaded")), None)])], Some(&allowed));
        assert_eq!(later[0].status, PushStatus::Applied);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_blob_refs WHERE partition = '{P}'")), 2);
    }

    #[pg_test]
    fn updates_replace_a_rows_references_and_deletes_remove_them() {
        setup_tasks();
        put(P, b"A");
        put(P, b"B");
        let epoch = acquire_epoch(P, "alice", "c1");
        let allowed = allowed_p1_p2();
        let go = |id: &str, ops| push(P, "alice", "c1", &epoch, vec![commit(id, ops)], Some(&allowed))[0].status;
        assert_eq!(go("k1", vec![upsert(&with_att("t1", Some(b"A")), None)]), PushStatus::Applied);
        assert_eq!(refs(P), format!("tasks/t1/{}", &blob_id_of(b"A")[..13]));
        assert_eq!(go("k2", vec![upsert(&with_att("t1", Some(b"B")), None)]), PushStatus::Applied);
        assert_eq!(refs(P), format!("tasks/t1/{}", &blob_id_of(b"B")[..13]));
        // An update to an unknown blob is rejected and keeps the old reference.
        let rejected = push(P, "alice", "c1", &epoch, vec![commit("k3", vec![upsert(&with_att("t1", Some(b"C")), None)])], Some(&allowed));
        assert_eq!(rejection(&rejected[0]).1, "blob.not_found");
        assert_eq!(refs(P), format!("tasks/t1/{}", &blob_id_of(b"B")[..13]));
        assert_eq!(go("k4", vec![upsert(&with_att("t1", None), None)]), PushStatus::Applied);
        assert_eq!(refs(P), "");
        assert_eq!(go("k5", vec![upsert(&with_att("t1", Some(b"A")), None), upsert(&with_att("t2", Some(b"A")), None)]), PushStatus::Applied);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_blob_refs WHERE partition = '{P}'")), 2);
        assert_eq!(go("k6", vec![delete("t1")]), PushStatus::Applied);
        assert_eq!(refs(P), format!("tasks/t2/{}", &blob_id_of(b"A")[..13]));
        // A delete carries no payload and is never checked (§5.9.6).
        assert_eq!(go("k7", vec![delete("t2"), delete("t9")]), PushStatus::Applied);
        assert_eq!(refs(P), "");
    }

    #[pg_test]
    fn syncular_commit_runs_the_same_check() {
        setup_tasks();
        let att = blob_ref(b"nope");
        let out = text(&format!(
            "SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"t1\", \"project_id\": \"p1\", \"done\": false, \"att\": {att}}}}}]', \
               allowed_scopes => '{{\"project_id\": [\"*\"]}}')::text"
        ))
        .unwrap();
        let out: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(out["results"][0]["code"], "blob.not_found", "{out}");
        assert_eq!(refs(P), "");
    }

    #[pg_test]
    fn captured_plain_sql_writes_are_checked_and_indexed() {
        setup_tasks();
        put(P, b"A");
        put(P, b"B");
        set_partition(P);
        let insert = |id: &str, bytes: &[u8]| {
            format!("INSERT INTO public.tasks (id, project_id, done, att) VALUES ('{id}', 'p1', false, '{}')", blob_ref(bytes))
        };
        // An unknown blob fails the statement: nothing is written.
        let before = changes();
        expect_error(attempt(&insert("t1", b"unknown")), "42704", "blob.not_found", "not stored in partition");
        assert_eq!(changes(), before);
        assert_eq!(count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}'")), 0);
        write_ok(&insert("t1", b"A"));
        write_ok(&format!("INSERT INTO public.tasks (id, project_id, done, att) VALUES ('t2', 'p1', false, '{}'), ('t3', 'p1', false, NULL)", blob_ref(b"B")));
        assert_eq!(refs(P), format!("tasks/t1/{},tasks/t2/{}", &blob_id_of(b"A")[..13], &blob_id_of(b"B")[..13]));
        write_ok(&format!("UPDATE public.tasks SET att = '{}' WHERE _sync_partition = '{P}' AND id = 't1'", blob_ref(b"B")));
        write_ok(&format!("UPDATE public.tasks SET att = NULL WHERE _sync_partition = '{P}' AND id = 't2'"));
        assert_eq!(refs(P), format!("tasks/t1/{}", &blob_id_of(b"B")[..13]));
        expect_error(
            attempt(&format!("UPDATE public.tasks SET att = '{}' WHERE _sync_partition = '{P}' AND id = 't3'", blob_ref(b"zz"))),
            "42704",
            "blob.not_found",
            "",
        );
        write_ok(&format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}'"));
        assert_eq!(refs(P), "");
    }

    #[pg_test]
    fn retiring_a_table_drops_its_references() {
        use crate::tests::support::{ir_of, register_with, small_table};
        setup_tasks();
        put(P, b"A");
        let epoch = acquire_epoch(P, "alice", "c1");
        let r = push(P, "alice", "c1", &epoch, vec![commit("k1", vec![upsert(&with_att("t1", Some(b"A")), None)])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.sync_blob_refs WHERE partition = '{P}'")), Some(1));
        register_with(&ir_of(2, vec![small_table("notes")]), "public", true).expect("retire tasks");
        assert_eq!(refs(P), "");
    }

    #[pg_test]
    fn adopting_a_kept_app_table_rebuilds_its_references() {
        use crate::tests::support::{register, run, tasks_ir};
        setup_tasks();
        put(P, b"A");
        let epoch = acquire_epoch(P, "alice", "c1");
        let r = push(P, "alice", "c1", &epoch, vec![commit("k1", vec![upsert(&with_att("t1", Some(b"A")), None), upsert(&with_att("t2", None), None)])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Applied);
        // DROP EXTENSION + CREATE EXTENSION, simulated: the sync tables are emptied, the app table stays.
        run("DO $$ DECLARE t text; BEGIN \
               FOR t IN SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'syncular' LOOP \
                 EXECUTE format('DELETE FROM syncular.%I', t); \
               END LOOP; END $$");
        assert_eq!(refs(P), "");
        register(&tasks_ir(1)).expect("adopt the kept tasks table");
        assert_eq!(refs(P), format!("tasks/t1/{}", &blob_id_of(b"A")[..13]));
    }
}
