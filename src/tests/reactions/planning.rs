//! The reaction planner (§6.9): registration checks; one call per new
//! commit after the commit validator accepted, with the commit validator's
//! input and the candidate state; its records enqueued with the commit's
//! `commitSeq`, the stable idempotency key, pending and due now — in both
//! log modes; rejected and conflicting commits enqueue nothing and do not
//! call it; a replay adds nothing; `syncular.commit` plans too; a malformed
//! answer or a raise fails the request and leaves nothing.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::response::PushStatus;

    use crate::tests::support::*;
    use crate::tests::sync_support::*;

    const P: &str = "reactions-p";
    const NOW: i64 = 1_700_000_000_000;

    /// A plpgsql planner `public.test_planner(commit jsonb)` with `body`,
    /// registered; every call bumps `public.planner_calls`.
    fn set_planner(body: &str) {
        run("CREATE SEQUENCE IF NOT EXISTS public.planner_calls");
        run(&format!(
            "CREATE OR REPLACE FUNCTION public.test_planner(commit jsonb) RETURNS jsonb \
             LANGUAGE plpgsql AS $fn$ BEGIN PERFORM nextval('public.planner_calls'); {body} END $fn$"
        ));
        run("SELECT syncular.set_reaction_planner('public.test_planner(jsonb)')");
    }

    fn calls() -> i64 {
        int8("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.planner_calls").unwrap_or(0)
    }

    /// One record per operation: key `op-<i>`, type `task.changed`, the row id
    /// and the number of the partition's tasks in the candidate state.
    const ONE_PER_OPERATION: &str = "RETURN (SELECT jsonb_agg(jsonb_build_object( \
           'key', 'op-' || (o->>'opIndex'), 'type', 'task.changed', 'version', 2, \
           'payload', jsonb_build_object('rowId', o->>'rowId', 'candidateRows', \
              (SELECT count(*) FROM public.tasks WHERE _sync_partition = commit->>'partition')))) \
         FROM jsonb_array_elements(commit->'operations') o);";

    fn reactions() -> Vec<Value> {
        Spi::get_one::<pgrx::JsonB>(&format!(
            "SELECT coalesce(jsonb_agg(to_jsonb(r) - 'partition' ORDER BY r.source_commit_seq, r.idempotency_key), '[]') \
               FROM syncular.sync_reactions r WHERE partition = '{P}'"
        ))
        .unwrap()
        .unwrap()
        .0
        .as_array()
        .unwrap()
        .clone()
    }

    fn log_rows() -> i64 {
        count(&format!(
            "SELECT (SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}') \
                  + (SELECT count(*) FROM syncular.sync_push_results WHERE partition = '{P}') \
                  + (SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}') \
                  + (SELECT count(*) FROM syncular.sync_reactions WHERE partition = '{P}')"
        ))
    }

    #[pg_test]
    fn planner_registration_checks_shape_and_owner() {
        run("CREATE FUNCTION public.planner(commit jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        expect_error(try_run("SELECT syncular.set_reaction_planner('public.planner(jsonb)')"), "55000", "syncular.no_schema", "");
        setup_tasks();
        run("CREATE FUNCTION public.planner_set(commit jsonb) RETURNS SETOF jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        expect_error(
            try_run("SELECT syncular.set_reaction_planner('public.planner_set(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "cannot be a reaction planner: it must not return a set",
        );
        run("CREATE ROLE syncular_test_planner_owner NOSUPERUSER");
        run("CREATE FUNCTION public.planner_weak(commit jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        run("ALTER FUNCTION public.planner_weak(jsonb) OWNER TO syncular_test_planner_owner");
        expect_error(
            try_run("SELECT syncular.set_reaction_planner('public.planner_weak(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "not a superuser",
        );
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_reaction_planner"), Some(0));
        run("SELECT syncular.set_reaction_planner('public.planner(jsonb)')");
        assert_eq!(text("SELECT planner::text FROM syncular.sync_reaction_planner"), Some("public.planner(jsonb)".into()));
        // A dropped planner fails closed at the next commit, never silently plans nothing.
        run("DROP FUNCTION public.planner(jsonb)");
        let epoch = acquire_epoch(P, "alice", "c1");
        let req = request(2, "c1", 1, Some(&epoch), vec![commit("x", vec![upsert(&task("t1", "p1", "a", None), None)])], None);
        expect_error(call("sync", P, "alice", &req, Some(&allowed_p1_p2())), "22023", "syncular.invalid_validator", "no longer exists");
        run("SELECT syncular.set_reaction_planner(NULL)");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_reaction_planner"), Some(0));
    }

    #[pg_test]
    fn accepted_commits_enqueue_their_records_with_their_commit_seq() {
        setup_tasks();
        run(&format!("SET syncular.now_ms = '{NOW}'"));
        run("CREATE TABLE public.planner_log(input jsonb)");
        set_planner(&format!("INSERT INTO public.planner_log VALUES (commit); {ONE_PER_OPERATION}"));
        let epoch = acquire_epoch(P, "alice", "c1");
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("first", vec![upsert(&task("t1", "p1", "one", None), None)]),
                commit("second", vec![upsert(&task("t2", "p1", "two", None), None), delete("t9")]),
            ],
            Some(&allowed_p1_p2()),
        );
        assert!(results.iter().all(|r| r.status == PushStatus::Applied), "{results:?}");
        assert_eq!(calls(), 2, "one call per commit");
        let input: Value = Spi::get_one::<pgrx::JsonB>("SELECT input FROM public.planner_log WHERE input->>'clientCommitId' = 'second'")
            .unwrap()
            .unwrap()
            .0;
        assert_eq!((&input["clientId"], &input["actorId"], &input["partition"]), (&json!("c1"), &json!("alice"), &json!(P)));
        assert_eq!(input["operations"][1]["op"], json!("delete"), "the commit validator's evidence: {input}");
        let rows = reactions();
        assert_eq!(rows.len(), 3, "{rows:?}");
        let seq_first = results[0].commit_seq.unwrap();
        let seq_second = results[1].commit_seq.unwrap();
        assert_eq!(
            rows[0],
            json!({
                "idempotency_key": format!("[\"{P}\",\"c1\",\"first\",\"op-0\"]"),
                "type": "task.changed", "version": 2,
                "payload": {"rowId": "t1", "candidateRows": 1},
                "source_client_id": "c1", "source_client_commit_id": "first", "source_commit_seq": seq_first,
                "created_at_ms": NOW, "available_at_ms": NOW, "status": "pending", "attempts": 0, "max_attempts": 10,
                "lease_owner": null, "lease_expires_at_ms": null, "completed_at_ms": null, "last_failure": null,
            })
        );
        assert_eq!((&rows[1]["source_commit_seq"], &rows[1]["payload"]), (&json!(seq_second), &json!({"rowId": "t2", "candidateRows": 2})));
        assert_eq!(rows[2]["idempotency_key"], json!(format!("[\"{P}\",\"c1\",\"second\",\"op-1\"]")));
    }

    #[pg_test]
    fn router_statements_enqueue_the_same_rows() {
        setup_tasks();
        run("SET syncular.router_statements = on");
        set_planner(ONE_PER_OPERATION);
        let epoch = acquire_epoch(P, "alice", "c1");
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("a", vec![upsert(&task("t1", "p1", "one", None), None), upsert(&task("t2", "p1", "two", None), None)]),
                commit("b", vec![upsert(&task("t3", "p2", "three", None), None)]),
            ],
            Some(&allowed_p1_p2()),
        );
        let rows = reactions();
        let seqs: Vec<(Value, Value)> = rows.iter().map(|r| (r["source_client_commit_id"].clone(), r["source_commit_seq"].clone())).collect();
        assert_eq!(
            seqs,
            vec![
                (json!("a"), json!(results[0].commit_seq.unwrap())),
                (json!("a"), json!(results[0].commit_seq.unwrap())),
                (json!("b"), json!(results[1].commit_seq.unwrap())),
            ]
        );
    }

    #[pg_test]
    fn rejected_and_conflicting_commits_plan_nothing_and_a_replay_adds_nothing() {
        setup_tasks();
        set_planner(ONE_PER_OPERATION);
        run(
            "CREATE FUNCTION public.no_p2(commit jsonb) RETURNS jsonb LANGUAGE sql AS $$ \
               SELECT CASE WHEN commit->'operations'->0->'row'->>'project_id' = 'p2' \
                 THEN '{\"code\": \"project.closed\"}'::jsonb END $$",
        );
        run("SELECT syncular.set_commit_validator('public.no_p2(jsonb)')");
        let epoch = acquire_epoch(P, "alice", "c1");
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![
                commit("ok", vec![upsert(&task("t1", "p1", "one", None), None)]),
                commit("validator-rejects", vec![upsert(&task("t2", "p2", "two", None), None)]),
                commit("conflicts", vec![upsert(&task("t1", "p1", "stale", None), Some(7))]),
                commit("forbidden", vec![upsert(&task("t3", "p9", "nope", None), None)]),
            ],
            None,
        );
        let results = push_results(&sync(P, "alice", &req, Some(&allowed_p1_p2())));
        let statuses: Vec<PushStatus> = results.iter().map(|r| r.status).collect();
        assert_eq!(statuses, vec![PushStatus::Applied, PushStatus::Rejected, PushStatus::Rejected, PushStatus::Rejected]);
        assert_eq!(calls(), 1, "only the accepted commit is planned");
        assert_eq!(reactions().len(), 1);
        let again = push_results(&sync(P, "alice", &req, Some(&allowed_p1_p2())));
        assert_eq!(again[0].status, PushStatus::Cached);
        assert_eq!((calls(), reactions().len()), (1, 1), "a replay neither plans nor enqueues");
    }

    #[pg_test]
    fn syncular_commit_plans_too() {
        setup_tasks();
        set_planner(ONE_PER_OPERATION);
        let out = Spi::get_one::<pgrx::JsonB>(&format!(
            "SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"t1\", \"project_id\": \"p1\", \"done\": false}}}}]'::jsonb, \
               client_commit_id => 'k1', allowed_scopes => '{{\"project_id\": [\"*\"]}}'::jsonb)"
        ))
        .unwrap()
        .unwrap()
        .0;
        assert_eq!(out["status"], json!("applied"), "{out}");
        let rows = reactions();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (&rows[0]["source_client_id"], &rows[0]["source_commit_seq"], &rows[0]["idempotency_key"]),
            (&json!("sql:svc"), &out["commitSeq"], &json!(format!("[\"{P}\",\"sql:svc\",\"k1\",\"op-0\"]")))
        );
    }

    #[pg_test]
    fn invalid_records_and_raises_fail_the_request_and_leave_nothing() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let before = log_rows();
        let attempt = |id: &str| {
            let req = request(2, "c1", 1, Some(&epoch), vec![commit(id, vec![upsert(&task("t1", "p1", "a", None), None)])], None);
            call("sync", P, "alice", &req, Some(&allowed_p1_p2()))
        };
        for (answer, fragment) in [
            ("'{\"key\": \"k\"}'", "expected NULL or a JSON array"),
            ("'[{\"key\": \"\", \"type\": \"t\", \"version\": 1, \"payload\": 1}]'", "key must be 1–256 bytes"),
            ("'[{\"key\": \"k\", \"type\": \"9t\", \"version\": 1, \"payload\": 1}]'", "must be code-like"),
            ("'[{\"key\": \"k\", \"type\": \"t\", \"version\": 0, \"payload\": 1}]'", "version must be"),
            ("'[{\"key\": \"k\", \"type\": \"t\", \"version\": 1, \"payload\": 1, \"maxAttempts\": 101}]'", "maxAttempts must be"),
            ("jsonb_build_array(jsonb_build_object('key', 'k', 'type', 't', 'version', 1, 'payload', repeat('x', 70000)))", "the limit is 65536"),
            ("'[{\"key\": \"k\", \"type\": \"t\", \"version\": 1, \"payload\": 1}, {\"key\": \"k\", \"type\": \"t\", \"version\": 1, \"payload\": 2}]'", "planned twice"),
            ("(SELECT jsonb_agg(jsonb_build_object('key', i::text, 'type', 't', 'version', 1, 'payload', i)) FROM generate_series(1, 101) i)", "at most 100"),
        ] {
            set_planner(&format!("RETURN {answer};"));
            expect_error(attempt("bad"), "39000", "syncular.reaction_planner_failed", fragment);
            assert_eq!(log_rows(), before, "nothing of the request stays ({fragment})");
        }
        set_planner("RAISE EXCEPTION 'secret detail';");
        let err = attempt("raises").expect_err("a raise fails the request");
        assert_eq!(err.sqlstate, "39000", "{err:?}");
        assert!(err.message.starts_with("syncular.reaction_planner_failed: the reaction planner public.test_planner raised an error (SQLSTATE P0001)"), "{err:?}");
        assert!(!err.message.contains("secret detail"));
        set_planner("RAISE EXCEPTION 'later' USING ERRCODE = '40001';");
        assert_eq!(attempt("transient").expect_err("fails").sqlstate, "40001", "a transient raise fails the request unchanged");
        // A planner must not write synced tables (its write would be logged ahead of the commit).
        set_planner("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('x', 'p1', 'x', false); RETURN NULL;");
        expect_error(attempt("writes"), "39000", "syncular.reaction_planner_failed", "raised an error");
        assert_eq!(log_rows(), before);
        // Nor call the sync API or register a schema from inside the commit it plans.
        set_planner(&format!(
            "PERFORM syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"inner\", \"project_id\": \"p1\", \"title\": \"i\", \"done\": false}}}}]', \
               allowed_scopes => '{{\"project_id\": [\"*\"]}}'); RETURN NULL;"
        ));
        expect_error(attempt("reenters"), "39000", "syncular.reaction_planner_failed", "SQLSTATE 0A000");
        set_planner("PERFORM syncular.register_schema((SELECT ir FROM syncular.sync_schema_versions ORDER BY version DESC LIMIT 1)); RETURN NULL;");
        expect_error(attempt("registers"), "39000", "syncular.reaction_planner_failed", "SQLSTATE 0A000");
        assert_eq!(log_rows(), before, "neither re-entry left anything");
        // Fixed, a later delivery of the same commit plans it.
        set_planner("RETURN '[]';");
        assert!(attempt("bad").is_ok());
        assert_eq!(reactions().len(), 0, "[] plans nothing");
    }
}
