//! Write validators (§6.7): registration checks; what a validator sees for
//! inserts, updates and deletes; a rejection rolls back exactly its commit
//! with the host code, message and §6.3.1 details; a raise is
//! `sync.constraint_violation`, a transient raise fails the request, a
//! malformed answer is loud; `syncular.commit` and captured plain SQL writes
//! go through the same validator.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::response::ResponseFrame;
    use syncular_protocol::row_codec::RowValue;

    use crate::tests::support::*;
    use crate::tests::sync_support::*;

    const P: &str = "validators-p";

    /// A plpgsql validator `public.test_validator(write jsonb)` with `body`,
    /// registered for `tasks`.
    fn set_validator(body: &str) {
        run(&format!(
            "CREATE OR REPLACE FUNCTION public.test_validator(write jsonb) RETURNS jsonb \
             LANGUAGE plpgsql AS $fn$ BEGIN {body} END $fn$"
        ));
        run("SELECT syncular.set_write_validator('tasks', 'public.test_validator(jsonb)')");
    }

    /// Rejects a title `bad` with a host code, message and details.
    const REJECT_BAD_TITLE: &str = "IF write->'row'->>'title' = 'bad' THEN \
           RETURN jsonb_build_object('code', 'task.bad_title', 'message', 'title may not be bad', \
                                     'details', jsonb_build_object('reason', 'bad_title', 'fieldPaths', jsonb_build_array('title'))); \
         END IF; RETURN NULL;";

    fn epoch() -> String {
        acquire_epoch(P, "alice", "c1")
    }

    fn rows_of_tasks() -> String {
        text(&format!("SELECT coalesce(string_agg(id || ':' || coalesce(title, '-'), ',' ORDER BY id), '') FROM public.tasks WHERE _sync_partition = '{P}'"))
            .unwrap_or_default()
    }

    #[pg_test]
    fn registration_checks_the_schema_table_shape_and_owner() {
        run("CREATE FUNCTION public.good_validator(write jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        expect_error(
            try_run("SELECT syncular.set_write_validator('tasks', 'public.good_validator(jsonb)')"),
            "55000",
            "syncular.no_schema",
            "",
        );
        setup_tasks();
        run("CREATE FUNCTION public.text_arg(write text) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        expect_error(
            try_run("SELECT syncular.set_write_validator('tasks', 'public.text_arg(text)')"),
            "22023",
            "syncular.invalid_validator",
            "its arguments must be exactly (write jsonb)",
        );
        run("CREATE FUNCTION public.returns_text(write jsonb) RETURNS text LANGUAGE sql AS 'SELECT NULL::text'");
        expect_error(
            try_run("SELECT syncular.set_write_validator('tasks', 'public.returns_text(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "it must return jsonb",
        );
        expect_error(
            try_run("SELECT syncular.set_write_validator('nope', 'public.good_validator(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "table \"nope\" is not declared by the registered schema",
        );
        expect_error(
            try_run("SELECT syncular.set_write_validator(NULL, 'public.good_validator(jsonb)')"),
            "22023",
            "syncular.invalid_argument",
            "tbl",
        );
        run("CREATE ROLE syncular_test_validator_owner NOSUPERUSER");
        run("CREATE FUNCTION public.weak_owner(write jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        run("ALTER FUNCTION public.weak_owner(jsonb) OWNER TO syncular_test_validator_owner");
        expect_error(
            try_run("SELECT syncular.set_write_validator('tasks', 'public.weak_owner(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "not a superuser",
        );
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_write_validators"), Some(0), "refusals store nothing");
        run("SELECT syncular.set_write_validator('tasks', 'public.good_validator(jsonb)')");
        assert_eq!(
            text("SELECT tbl || '=' || validator::text FROM syncular.sync_write_validators"),
            Some("tasks=public.good_validator(jsonb)".into())
        );
        run("SELECT syncular.set_write_validator('tasks', NULL)");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_write_validators"), Some(0), "NULL removes it");
    }

    #[pg_test]
    fn retiring_a_table_removes_its_validator() {
        register(&ir_of(1, vec![small_table("items"), small_table("notes")])).unwrap();
        run("CREATE FUNCTION public.v(write jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        run("SELECT syncular.set_write_validator('notes', 'public.v(jsonb)')");
        run("SELECT syncular.set_write_validator('items', 'public.v(jsonb)')");
        register_with(&ir_of(2, vec![small_table("items")]), "public", true).unwrap();
        assert_eq!(text("SELECT string_agg(tbl, ',') FROM syncular.sync_write_validators"), Some("items".into()));
    }

    #[pg_test]
    fn a_validator_sees_inserts_updates_and_deletes_of_existing_rows() {
        setup_tasks();
        run("CREATE TABLE public.validator_log(n serial, input jsonb)");
        set_validator("INSERT INTO public.validator_log(input) VALUES (write); RETURN NULL;");
        let epoch = epoch();
        let first = task("t1", "p1", "first", None);
        let second = task("t1", "p1", "second", None);
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("insert", vec![upsert(&first, None)]),
                // The scope column is stripped back to its stored value before validation.
                commit("update", vec![upsert(&with(second.clone(), "project_id", Some(RowValue::String("p2".into()))), None)]),
                commit("delete", vec![delete("t1")]),
                commit("delete-absent", vec![delete("t9")]),
            ],
            Some(&allowed_p1_p2()),
        );
        assert!(results.iter().all(|r| r.status == syncular_protocol::response::PushStatus::Applied), "{results:?}");
        let log: Vec<Value> = Spi::get_one::<pgrx::JsonB>("SELECT jsonb_agg(input ORDER BY n) FROM public.validator_log")
            .unwrap()
            .and_then(|j| j.0.as_array().cloned())
            .unwrap_or_default();
        assert_eq!(log.len(), 3, "no call for the delete of an absent row: {log:#?}");
        let common = |v: &Value| (v["table"].clone(), v["rowId"].clone(), v["actorId"].clone(), v["partition"].clone());
        for entry in &log {
            assert_eq!(common(entry), (json!("tasks"), json!("t1"), json!("alice"), json!(P)));
        }
        assert_eq!((&log[0]["op"], &log[0]["row"]["title"], &log[0]["stored"]), (&json!("upsert"), &json!("first"), &Value::Null));
        assert_eq!(log[0]["row"]["project_id"], json!("p1"));
        assert_eq!((&log[1]["op"], &log[1]["row"]["title"], &log[1]["stored"]["title"]), (&json!("upsert"), &json!("second"), &json!("first")));
        assert_eq!(log[1]["row"]["project_id"], json!("p1"), "the row that will persist: scope column stripped");
        assert_eq!((&log[2]["op"], &log[2]["row"], &log[2]["stored"]["title"]), (&json!("delete"), &Value::Null, &json!("second")));
    }

    #[pg_test]
    fn a_rejection_rolls_back_exactly_its_commit_with_code_message_and_details() {
        setup_tasks();
        set_validator(REJECT_BAD_TITLE);
        let epoch = epoch();
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![
                commit("ok", vec![upsert(&task("t1", "p1", "fine", None), None)]),
                commit("mixed", vec![upsert(&task("t2", "p1", "fine too", None), None), upsert(&task("t3", "p1", "bad", None), None)]),
                commit("after", vec![upsert(&task("t4", "p1", "later", None), None)]),
            ],
            None,
        );
        let resp = sync(P, "alice", &req, Some(&allowed_p1_p2()));
        let results = push_results(&resp);
        assert_eq!(results.len(), 3);
        assert_eq!(results[0].status, syncular_protocol::response::PushStatus::Applied);
        assert_eq!(results[1].status, syncular_protocol::response::PushStatus::Rejected);
        assert_eq!(rejection(&results[1]), (1, "task.bad_title".to_string(), false));
        assert_eq!(results[2].status, syncular_protocol::response::PushStatus::Applied);
        let details: Vec<_> = resp
            .frames
            .iter()
            .filter_map(|f| match f {
                ResponseFrame::PushResultDetails(d) => Some(d.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(details.len(), 1, "{:?}", resp.frames);
        assert_eq!(details[0].client_commit_id, "mixed");
        assert_eq!(details[0].entries.len(), 1);
        assert_eq!(details[0].entries[0].op_index, 1);
        let d: Value = serde_json::from_str(&details[0].entries[0].details_json).unwrap();
        assert_eq!(d, json!({"reason": "bad_title", "fieldPaths": ["title"]}));
        // Nothing of the rejected commit survives; the commits around it do.
        assert_eq!(rows_of_tasks(), "t1:fine,t4:later");
        // The replay answers the stored rejection, details included.
        let again = sync(P, "alice", &req, Some(&allowed_p1_p2()));
        assert_eq!(rejection(&push_results(&again)[1]), (1, "task.bad_title".to_string(), false));
        assert!(again.frames.iter().any(|f| matches!(f, ResponseFrame::PushResultDetails(_))));
    }

    #[pg_test]
    fn a_raise_is_a_constraint_violation_and_a_transient_raise_fails_the_request() {
        setup_tasks();
        set_validator("IF write->'row'->>'title' = 'boom' THEN RAISE EXCEPTION 'secret internals'; END IF; \
                       IF write->'row'->>'title' = 'busy' THEN RAISE EXCEPTION 'try later' USING ERRCODE = '40001'; END IF; \
                       RETURN NULL;");
        let epoch = epoch();
        let results = push(P, "alice", "c1", &epoch, vec![commit("boom", vec![upsert(&task("t1", "p1", "boom", None), None)])], Some(&allowed_p1_p2()));
        assert_eq!(rejection(&results[0]), (0, "sync.constraint_violation".to_string(), false));
        let result = &results[0].results[0];
        assert!(!format!("{result:?}").contains("secret internals"), "the raised text is not replicated: {result:?}");
        let busy = request(2, "c1", 1, Some(&epoch), vec![commit("busy", vec![upsert(&task("t2", "p1", "busy", None), None)])], None);
        let err = call("sync", P, "alice", &busy, Some(&allowed_p1_p2())).expect_err("a transient raise fails the request");
        assert_eq!(err.sqlstate, "40001", "{err:?}");
        assert_eq!(rows_of_tasks(), "");
    }

    #[pg_test]
    fn a_malformed_answer_fails_the_request_loudly() {
        setup_tasks();
        let epoch = epoch();
        for (answer, fragment) in [
            ("'{\"code\": \"sync.forbidden\"}'::jsonb", "reserved for protocol codes"),
            ("'{\"code\": \"x\", \"details\": {\"bogus\": 1}}'::jsonb", "details outside §6.3.1"),
            ("'42'::jsonb", "returned 42"),
            ("'{\"code\": \"x\", \"details\": {\"n\": 1e400}}'::jsonb", "returned jsonb this extension cannot read: number out of range"),
        ] {
            set_validator(&format!("RETURN {answer};"));
            let req = request(2, "c1", 1, Some(&epoch), vec![commit("m", vec![upsert(&task("t1", "p1", "x", None), None)])], None);
            expect_error(call("sync", P, "alice", &req, Some(&allowed_p1_p2())), "39000", "syncular.validator_malformed", fragment);
        }
        assert_eq!(rows_of_tasks(), "");
    }

    #[pg_test]
    fn syncular_commit_reports_the_rejection_with_its_details() {
        setup_tasks();
        set_validator(REJECT_BAD_TITLE);
        let out = Spi::get_one::<pgrx::JsonB>(&format!(
            "SELECT syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"op\": \"upsert\", \"row\": {{\"id\": \"t1\", \"project_id\": \"p1\", \"title\": \"bad\", \"done\": false}}}}]'::jsonb, allowed_scopes => '{{\"project_id\": [\"*\"]}}'::jsonb)"
        ))
        .unwrap()
        .unwrap()
        .0;
        assert_eq!(out["status"], "rejected", "{out}");
        assert_eq!(out["results"][0]["code"], "task.bad_title");
        assert_eq!(out["results"][0]["message"], "title may not be bad");
        assert_eq!(out["results"][0]["details"], json!({"reason": "bad_title", "fieldPaths": ["title"]}));
        assert_eq!(rows_of_tasks(), "");
    }

    #[pg_test]
    fn captured_plain_sql_writes_are_validated() {
        setup_tasks();
        set_validator(&format!(
            "IF write->>'op' = 'delete' AND write->'stored'->>'code' = 'keep' THEN \
               RETURN jsonb_build_object('code', 'task.kept', 'message', 'kept rows stay'); END IF; \
             IF write->>'op' = 'upsert' AND write->>'actorId' IS DISTINCT FROM 'sql-writer' THEN \
               RETURN jsonb_build_object('code', 'task.actor', 'message', write->>'actorId'); END IF; \
             {REJECT_BAD_TITLE}"
        ));
        run(&format!("SET LOCAL syncular.partition = '{P}'"));
        run("SET LOCAL syncular.actor_id = 'sql-writer'");
        run("INSERT INTO public.tasks(id, project_id, title, done, code) VALUES ('t1', 'p1', 'fine', false, 'keep')");
        expect_error(
            try_run("INSERT INTO public.tasks(id, project_id, title, done) VALUES ('t2', 'p1', 'bad', false)"),
            "23514",
            "syncular.write_rejected",
            "task.bad_title: title may not be bad",
        );
        expect_error(
            try_run("UPDATE public.tasks SET title = 'bad' WHERE id = 't1'"),
            "23514",
            "syncular.write_rejected",
            "rejected row \"t1\": task.bad_title",
        );
        expect_error(try_run("DELETE FROM public.tasks WHERE id = 't1'"), "23514", "syncular.write_rejected", "task.kept");
        assert_eq!(rows_of_tasks(), "t1:fine");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}'")), 1, "only the accepted insert");
    }

    #[pg_test]
    fn an_owner_changed_after_registration_or_a_dropped_validator_fails_closed() {
        setup_tasks();
        set_validator("RETURN NULL;");
        let epoch = epoch();
        let push_one = |id: &str| {
            let req = request(2, "c1", 1, Some(&epoch), vec![commit(id, vec![upsert(&task(id, "p1", "x", None), None)])], None);
            call("sync", P, "alice", &req, Some(&allowed_p1_p2()))
        };
        assert!(push_one("t1").is_ok(), "the cache is loaded and the validator accepts");
        run("CREATE ROLE syncular_test_late_owner NOSUPERUSER");
        run("ALTER FUNCTION public.test_validator(jsonb) OWNER TO syncular_test_late_owner");
        expect_error(push_one("t2"), "22023", "syncular.invalid_validator", "not a superuser");
        run("ALTER FUNCTION public.test_validator(jsonb) OWNER TO CURRENT_USER");
        assert!(push_one("t3").is_ok(), "a superuser owner again");
        run("DROP FUNCTION public.test_validator(jsonb)");
        expect_error(push_one("t4"), "22023", "syncular.invalid_validator", "no longer exists");
        // A function re-created under the registered signature (by a weak
        // role here) is not called by a backend that loaded the old one…
        run("GRANT CREATE ON SCHEMA public TO syncular_test_late_owner");
        run("SET ROLE syncular_test_late_owner");
        run("CREATE FUNCTION public.test_validator(write jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'");
        run("RESET ROLE");
        expect_error(push_one("t5"), "22023", "syncular.invalid_validator", "no longer exists");
        // …registering it again checks its owner…
        expect_error(
            try_run("SELECT syncular.set_write_validator('tasks', 'public.test_validator(jsonb)')"),
            "22023",
            "syncular.invalid_validator",
            "not a superuser",
        );
        // …and once a superuser owns it, the registration by signature calls it.
        run("ALTER FUNCTION public.test_validator(jsonb) OWNER TO CURRENT_USER");
        run("SELECT syncular.set_write_validator('tasks', 'public.test_validator(jsonb)')");
        assert!(push_one("t6").is_ok(), "the signature names the re-created function");
        assert_eq!(rows_of_tasks(), "t1:x,t3:x,t6:x");
    }

    #[pg_test]
    fn a_validator_that_calls_the_sync_api_rejects_the_commit() {
        setup_tasks();
        set_validator(&format!(
            "IF write->>'rowId' = 't1' THEN \
               PERFORM syncular.commit('{P}', 'svc', '[{{\"table\": \"tasks\", \"row\": {{\"id\": \"inner\", \"project_id\": \"p1\", \"title\": \"i\", \"done\": false}}}}]', \
                 allowed_scopes => '{{\"project_id\": [\"*\"]}}'); END IF; RETURN NULL;"
        ));
        let epoch = epoch();
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("reenters", vec![upsert(&task("t1", "p1", "x", None), None)])],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(rejection(&results[0]), (0, "sync.constraint_violation".to_string(), false));
        assert_eq!(rows_of_tasks(), "", "neither the commit nor the validator's nested commit applied");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}'")), 0);
    }

    #[pg_test]
    fn a_validator_that_writes_a_synced_table_rejects_the_commit() {
        setup_tasks();
        set_validator(&format!(
            "IF write->>'rowId' = 't1' THEN \
               PERFORM set_config('syncular.partition', '{P}', true); \
               DELETE FROM public.tasks WHERE id = 't0'; END IF; RETURN NULL;"
        ));
        let epoch = epoch();
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("seed", vec![upsert(&task("t0", "p1", "seed", None), None)]),
                commit("mutating", vec![upsert(&task("t1", "p1", "x", None), None)]),
            ],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(results[0].status, syncular_protocol::response::PushStatus::Applied);
        assert_eq!(rejection(&results[1]), (0, "sync.constraint_violation".to_string(), false));
        assert_eq!(rows_of_tasks(), "t0:seed", "the validator's write did not happen");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}'")), 1);
    }
}
