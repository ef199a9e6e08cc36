//! Review hardening: the resolver must be superuser-owned (set time and call
//! time), transient resolver errors fail the request instead of storing a
//! `sync.forbidden`, and NULL/empty arguments are refused loudly.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;

    use crate::tests::support::{expect_error, int8, register_sql, run, tasks_ir, try_run};
    use crate::tests::sync_support::*;

    const P: &str = "tenant-h";

    fn set_resolver(body: &str) {
        run(&format!(
            "CREATE OR REPLACE FUNCTION public.hard_resolver(partition text, actor_id text) RETURNS jsonb \
             LANGUAGE plpgsql AS $fn$ BEGIN {body} END $fn$"
        ));
        run("SELECT syncular.set_scope_resolver('public.hard_resolver(text,text)')");
    }

    fn push_request(epoch: &str, commit_id: &str) -> Vec<u8> {
        request(
            2,
            "c1",
            1,
            Some(epoch),
            vec![commit(commit_id, vec![upsert(&task("t1", "p1", "a", None), None)])],
            None,
        )
    }

    fn stored_results() -> i64 {
        count("SELECT count(*) FROM syncular.sync_push_results") + count("SELECT count(*) FROM syncular.sync_commits")
    }

    #[pg_test]
    fn a_resolver_owned_by_a_plain_role_is_refused_at_set_time() {
        run("CREATE ROLE hard_plain_owner NOLOGIN");
        run(
            "CREATE FUNCTION public.plain_resolver(partition text, actor_id text) RETURNS jsonb \
             LANGUAGE sql AS 'SELECT ''{}''::jsonb'",
        );
        run("ALTER FUNCTION public.plain_resolver(text, text) OWNER TO hard_plain_owner");
        expect_error(
            try_run("SELECT syncular.set_scope_resolver('public.plain_resolver(text,text)')"),
            "22023",
            "syncular.invalid_resolver",
            "owned by role \"hard_plain_owner\", which is not a superuser",
        );
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_scope_resolver"), Some(0));
    }

    #[pg_test]
    fn a_resolver_whose_owner_is_demoted_later_fails_the_request() {
        setup_tasks();
        set_resolver("RETURN '{\"project_id\": [\"p1\"]}'::jsonb;");
        let epoch = acquire_epoch(P, "alice", "c1");
        run("CREATE ROLE hard_later_owner NOLOGIN");
        run("ALTER FUNCTION public.hard_resolver(text, text) OWNER TO hard_later_owner");
        expect_error(
            call("sync", P, "alice", &push_request(&epoch, "k1"), None),
            "22023",
            "syncular.invalid_resolver",
            "\"hard_later_owner\", which is not a superuser",
        );
        assert_eq!(stored_results(), 0);
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
    }

    #[pg_test]
    fn a_cancelled_resolver_fails_the_request_and_stores_nothing() {
        setup_tasks();
        set_resolver("RETURN '{\"project_id\": [\"p1\"]}'::jsonb;");
        let epoch = acquire_epoch(P, "alice", "c1");
        for (errcode, sqlstate) in [("query_canceled", "57014"), ("deadlock_detected", "40P01"), ("out_of_memory", "53200")] {
            set_resolver(&format!("RAISE EXCEPTION 'resolver gave up' USING ERRCODE = '{errcode}';"));
            let err = call("sync", P, "alice", &push_request(&epoch, "k1"), None).unwrap_err();
            assert_eq!(err.sqlstate, sqlstate, "{err:?}");
            assert_eq!(err.message, "resolver gave up");
            assert_eq!(stored_results(), 0, "{errcode}");
        }
        // A plain exception still means revoked → a stored sync.forbidden.
        set_resolver("RAISE EXCEPTION 'actor % is revoked', actor_id;");
        let bytes = call("sync", P, "alice", &push_request(&epoch, "k1"), None).expect("served");
        let resp = syncular_protocol::response::decode_response(&bytes).unwrap();
        assert_eq!(rejection(&push_results(&resp)[0]).1, "sync.forbidden");
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results"), 1);
    }

    #[pg_test]
    fn register_schema_refuses_null_arguments() {
        let ir = tasks_ir(1).to_string().replace('\'', "''");
        for (sql, argument) in [
            ("SELECT syncular.register_schema(NULL)".to_string(), "ir"),
            (format!("SELECT syncular.register_schema('{ir}'::jsonb, NULL)"), "app_schema"),
            (format!("SELECT syncular.register_schema('{ir}'::jsonb, 'public', NULL)"), "allow_drop"),
        ] {
            expect_error(
                try_run(&sql),
                "22023",
                "syncular.invalid_argument",
                &format!("argument {argument} of register_schema must not be NULL"),
            );
        }
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_schema_versions"), Some(0));
        register_sql(&tasks_ir(1), "public", false).expect("non-NULL arguments register");
    }

    #[pg_test]
    fn empty_partition_or_actor_is_refused() {
        setup_tasks();
        let req = request(2, "c1", 1, None, vec![], Some(empty_pull()));
        let allowed = json!({"project_id": ["p1"]});
        for function in ["sync", "push", "pull"] {
            for (partition, actor, argument) in [("", "alice", "partition"), (P, "", "actor_id")] {
                expect_error(
                    call(function, partition, actor, &req, Some(&allowed)),
                    "22023",
                    "syncular.invalid_argument",
                    &format!("argument {argument} must not be empty"),
                );
            }
        }
        for (partition, actor, argument) in [("", "alice", "partition"), (P, "", "actor_id")] {
            expect_error(
                try_run(&format!(
                    "SELECT syncular.commit('{partition}', '{actor}', '[]'::jsonb, allowed_scopes => '{{}}'::jsonb)"
                )),
                "22023",
                "syncular.invalid_argument",
                &format!("argument {argument} must not be empty"),
            );
        }
        assert_eq!(stored_results(), 0);
    }

    /// Every jsonb argument is read by `api::json_arg::Jsonb`: a value serde
    /// cannot hold is `syncular.invalid_argument` (22023), never XX000.
    #[pg_test]
    fn jsonb_arguments_serde_cannot_hold_are_invalid_arguments() {
        setup_tasks();
        let huge = "'{\"project_id\": [1e400]}'::jsonb";
        let deep = "(repeat('[', 300) || repeat(']', 300))::jsonb";
        for sql in [
            format!("SELECT syncular.sync('{P}', 'alice', '\\x00'::bytea, {huge})"),
            format!("SELECT syncular.pull('{P}', 'alice', '\\x00'::bytea, {deep})"),
            format!("SELECT syncular.commit('{P}', 'alice', '[{{\"n\": 1e400}}]'::jsonb)"),
            format!("SELECT syncular.realtime_connect('{P}', 'alice', 'c1', {deep})"),
            format!("SELECT syncular.realtime_ack('{P}', '[{{\"cursor\": 1e400}}]'::jsonb)"),
            format!("SELECT syncular.error_response('{P}', 2, {huge})"),
            format!("SELECT syncular.register_schema({deep})"),
            format!("SELECT syncular.segment_open('{P}', 'alice', 'sha256:00', '{{}}', {huge})"),
        ] {
            expect_error(try_run(&sql), "22023", "syncular.invalid_argument", "a jsonb argument cannot be read");
        }
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits"), 0);
    }
}
