//! The whole-commit validator (§6.8): registration checks; one call per new
//! commit with every operation's evidence (the delete of an absent row
//! included) and the candidate state readable by SQL; a rejection names an
//! operation and rolls back exactly its commit; a replay does not call it;
//! a bad index or a raise is `sync.constraint_violation`, a transient raise
//! fails the request; `syncular.commit` runs it too.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::response::{PushStatus, ResponseFrame};

    use crate::tests::support::*;
    use crate::tests::sync_support::*;

    const P: &str = "commit-validator-p";

    /// A plpgsql commit validator `public.test_commit_validator(commit jsonb)`
    /// with `body`, registered; every call bumps `public.commit_validator_calls`.
    fn set_commit_validator(body: &str) {
        run("CREATE SEQUENCE IF NOT EXISTS public.commit_validator_calls");
        run(&format!(
            "CREATE OR REPLACE FUNCTION public.test_commit_validator(commit jsonb) RETURNS jsonb \
             LANGUAGE plpgsql AS $fn$ BEGIN PERFORM nextval('public.commit_validator_calls'); {body} END $fn$"
        ));
        run("SELECT syncular.set_commit_validator('public.test_commit_validator(jsonb)')");
    }

    fn calls() -> i64 {
        int8("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.commit_validator_calls").unwrap_or(0)
    }

    fn rows_of_tasks() -> String {
        text(&format!(
            "SELECT coalesce(string_agg(id, ',' ORDER BY id), '') FROM public.tasks WHERE _sync_partition = '{P}'"
        ))
        .unwrap_or_default()
    }

    /// Rejects a commit that leaves more than two tasks in project p1,
    /// naming its last operation.
    const AT_MOST_TWO_IN_P1: &str = "IF (SELECT count(*) FROM public.tasks \
              WHERE _sync_partition = commit->>'partition' AND project_id = 'p1') > 2 THEN \
           RETURN jsonb_build_object('opIndex', jsonb_array_length(commit->'operations') - 1, \
             'code', 'project.full', 'message', 'p1 holds at most two tasks', \
             'details', jsonb_build_object('reason', 'project_full')); \
         END IF; RETURN NULL;";

    #[pg_test]
    fn registration_checks_shape_and_owner() {
        run("CREATE FUNCTION public.whole(commit jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        expect_error(try_run("SELECT syncular.set_commit_validator('public.whole(jsonb)')"), "55000", "syncular.no_schema", "");
        setup_tasks();
        run("CREATE FUNCTION public.whole_text(commit text) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        expect_error(
            try_run("SELECT syncular.set_commit_validator('public.whole_text(text)')"),
            "22023",
            "syncular.invalid_validator",
            "cannot be a commit validator: its arguments must be exactly (commit jsonb)",
        );
        run("CREATE ROLE syncular_test_commit_validator_owner NOSUPERUSER");
        run("CREATE FUNCTION public.whole_weak(commit jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        run("ALTER FUNCTION public.whole_weak(jsonb) OWNER TO syncular_test_commit_validator_owner");
        expect_error(
            try_run("SELECT syncular.set_commit_validator('public.whole_weak(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "not a superuser",
        );
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_commit_validator"), Some(0));
        run("SELECT syncular.set_commit_validator('public.whole(jsonb)')");
        assert_eq!(text("SELECT validator::text FROM syncular.sync_commit_validator"), Some("public.whole(jsonb)".into()));
        run("SELECT syncular.set_commit_validator(NULL)");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_commit_validator"), Some(0));
    }

    #[pg_test]
    fn one_call_per_commit_with_every_operations_evidence_and_the_candidate_state() {
        setup_tasks();
        run("CREATE TABLE public.commit_validator_log(input jsonb, candidate_rows bigint)");
        set_commit_validator(
            "INSERT INTO public.commit_validator_log VALUES (commit, \
               (SELECT count(*) FROM public.tasks WHERE _sync_partition = commit->>'partition')); RETURN NULL;",
        );
        let epoch = acquire_epoch(P, "alice", "c1");
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("first", vec![upsert(&task("t1", "p1", "one", None), None)]),
                commit(
                    "second",
                    vec![upsert(&task("t1", "p1", "one again", None), None), upsert(&task("t2", "p2", "two", None), None), delete("t9")],
                ),
            ],
            Some(&allowed_p1_p2()),
        );
        assert!(results.iter().all(|r| r.status == PushStatus::Applied), "{results:?}");
        assert_eq!(calls(), 2, "one call per commit");
        let second: Value = Spi::get_one::<pgrx::JsonB>(
            "SELECT input FROM public.commit_validator_log WHERE input->>'clientCommitId' = 'second'",
        )
        .unwrap()
        .unwrap()
        .0;
        assert_eq!((&second["clientId"], &second["actorId"], &second["partition"]), (&json!("c1"), &json!("alice"), &json!(P)));
        let ops = second["operations"].as_array().unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (&ops[0]["opIndex"], &ops[0]["row"]["title"], &ops[0]["stored"]["title"], &ops[0]["storedServerVersion"], &ops[0]["nextServerVersion"]),
            (&json!(0), &json!("one again"), &json!("one"), &json!(1), &json!(2))
        );
        assert_eq!((&ops[1]["stored"], &ops[1]["storedServerVersion"], &ops[1]["nextServerVersion"]), (&Value::Null, &Value::Null, &json!(1)));
        assert_eq!(
            (&ops[2]["op"], &ops[2]["rowId"], &ops[2]["row"], &ops[2]["stored"], &ops[2]["nextServerVersion"]),
            (&json!("delete"), &json!("t9"), &Value::Null, &Value::Null, &Value::Null),
            "the delete of an absent row is evidence too"
        );
        // The candidate state holds the commit's own writes.
        assert_eq!(int8("SELECT candidate_rows FROM public.commit_validator_log WHERE input->>'clientCommitId' = 'second'"), Some(2));
    }

    #[pg_test]
    fn a_rejection_names_its_operation_rolls_back_exactly_its_commit_and_replays_without_a_call() {
        setup_tasks();
        set_commit_validator(AT_MOST_TWO_IN_P1);
        let epoch = acquire_epoch(P, "alice", "c1");
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![
                commit("fill", vec![upsert(&task("t1", "p1", "a", None), None), upsert(&task("t2", "p1", "b", None), None)]),
                commit("overflow", vec![upsert(&task("t3", "p2", "elsewhere", None), None), upsert(&task("t4", "p1", "c", None), None)]),
            ],
            None,
        );
        let resp = sync(P, "alice", &req, Some(&allowed_p1_p2()));
        let results = push_results(&resp);
        assert_eq!(results[0].status, PushStatus::Applied);
        assert_eq!(rejection(&results[1]), (1, "project.full".to_string(), false));
        let details = resp.frames.iter().find_map(|f| match f {
            ResponseFrame::PushResultDetails(d) => Some(d.clone()),
            _ => None,
        });
        let details = details.expect("details frame");
        assert_eq!((details.client_commit_id.as_str(), details.entries[0].op_index), ("overflow", 1));
        assert_eq!(rows_of_tasks(), "t1,t2", "nothing of the rejected commit stays");
        assert_eq!(calls(), 2);
        let again = sync(P, "alice", &req, Some(&allowed_p1_p2()));
        assert_eq!(rejection(&push_results(&again)[1]), (1, "project.full".to_string(), false));
        assert_eq!(calls(), 2, "a replay does not call the validator");
    }

    #[pg_test]
    fn a_bad_index_or_a_raise_is_a_constraint_violation_and_a_transient_raise_fails_the_request() {
        setup_tasks();
        set_commit_validator(
            "IF commit->>'clientCommitId' = 'bad-index' THEN RETURN '{\"opIndex\": 5, \"code\": \"x.y\"}'::jsonb; END IF; \
             IF commit->>'clientCommitId' = 'raise' THEN RAISE EXCEPTION 'internal detail'; END IF; \
             IF commit->>'clientCommitId' = 'busy' THEN RAISE EXCEPTION 'later' USING ERRCODE = '40P01'; END IF; \
             RETURN NULL;",
        );
        let epoch = acquire_epoch(P, "alice", "c1");
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("bad-index", vec![upsert(&task("t1", "p1", "a", None), None)]),
                commit("raise", vec![upsert(&task("t2", "p1", "b", None), None)]),
                commit("fine", vec![upsert(&task("t3", "p1", "c", None), None)]),
            ],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(rejection(&results[0]), (0, "sync.constraint_violation".to_string(), false));
        assert_eq!(rejection(&results[1]), (0, "sync.constraint_violation".to_string(), false));
        assert!(!format!("{:?}", results[1]).contains("internal detail"));
        assert_eq!(results[2].status, PushStatus::Applied);
        let busy = request(2, "c1", 1, Some(&epoch), vec![commit("busy", vec![upsert(&task("t4", "p1", "d", None), None)])], None);
        let err = call("sync", P, "alice", &busy, Some(&allowed_p1_p2())).expect_err("a transient raise fails the request");
        assert_eq!(err.sqlstate, "40P01", "{err:?}");
        assert_eq!(rows_of_tasks(), "t3");
    }

    #[pg_test]
    fn syncular_commit_runs_the_commit_validator() {
        setup_tasks();
        set_commit_validator(AT_MOST_TWO_IN_P1);
        let commit_sql = |ops: &str| {
            Spi::get_one::<pgrx::JsonB>(&format!(
                "SELECT syncular.commit('{P}', 'svc', '{ops}'::jsonb, allowed_scopes => '{{\"project_id\": [\"*\"]}}'::jsonb)"
            ))
            .unwrap()
            .unwrap()
            .0
        };
        let row = |id: &str| format!("{{\"table\": \"tasks\", \"op\": \"upsert\", \"row\": {{\"id\": \"{id}\", \"project_id\": \"p1\", \"done\": false}}}}");
        assert_eq!(commit_sql(&format!("[{}, {}]", row("t1"), row("t2")))["status"], "applied");
        let out = commit_sql(&format!("[{}]", row("t3")));
        assert_eq!((&out["status"], &out["results"][0]["code"]), (&json!("rejected"), &json!("project.full")), "{out}");
        assert_eq!(out["results"][0]["details"], json!({"reason": "project_full"}));
        assert_eq!(rows_of_tasks(), "t1,t2");
    }
}
