//! Who may write through the sync round: the resolver path of §3.4 (map,
//! raising resolver → forbidden with the request still served, resolver
//! called once per request) and the gateway role calling the SECURITY
//! DEFINER functions without any table privilege.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::response::PushStatus;

    use crate::tests::support::{run, try_run};
    use crate::tests::sync_support::*;

    const P: &str = "tenant-a";

    fn set_resolver(body: &str) {
        run(&format!(
            "CREATE OR REPLACE FUNCTION public.push_resolver(partition text, actor_id text) RETURNS jsonb \
             LANGUAGE plpgsql AS $fn$ BEGIN {body} END $fn$"
        ));
        run("SELECT syncular.set_scope_resolver('public.push_resolver(text,text)')");
    }

    #[pg_test]
    fn resolver_map_authorizes_and_is_called_once_per_request() {
        setup_tasks();
        run("CREATE TABLE public.resolver_calls(n int)");
        set_resolver(
            "INSERT INTO public.resolver_calls VALUES (1); \
             RETURN CASE WHEN actor_id = 'alice' THEN '{\"project_id\": [\"p1\"]}'::jsonb ELSE '{}'::jsonb END;",
        );
        let epoch = acquire_epoch(P, "alice", "c1");
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)]),
                commit("k2", vec![upsert(&task("t2", "p2", "b", None), None)]),
                commit("k3", vec![upsert(&task("t3", "p1", "c", None), None)]),
            ],
            None,
        );
        assert_eq!(
            r.iter().map(|x| x.status).collect::<Vec<_>>(),
            vec![
                PushStatus::Applied,
                PushStatus::Rejected,
                PushStatus::Applied
            ]
        );
        assert_eq!(rejection(&r[1]).1, "sync.forbidden");
        assert_eq!(
            count("SELECT count(*) FROM public.resolver_calls"),
            1,
            "resolved at most once per request"
        );
        // An actor the resolver grants nothing is forbidden.
        let r = push(
            P,
            "bob",
            "c2",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t9", "p1", "x", None), None)],
            )],
            None,
        );
        assert_eq!(rejection(&r[0]).1, "sync.forbidden");
    }

    #[pg_test]
    fn raising_resolver_forbids_writes_but_serves_the_request() {
        setup_tasks();
        set_resolver("RAISE EXCEPTION 'directory unavailable';");
        let epoch = acquire_epoch(P, "alice", "c1");
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            None,
        );
        assert_eq!(rejection(&r[0]), (0, "sync.forbidden".into(), false));
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
        // The gateway's argument wins over the resolver.
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k2",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
    }

    #[pg_test]
    fn the_gateway_role_needs_only_execute() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        run("CREATE ROLE syncular_test_gw2 NOLOGIN IN ROLE syncular_gateway");
        run("CREATE ROLE syncular_test_nobody2 NOLOGIN");
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            None,
        );
        run("SET LOCAL ROLE syncular_test_gw2");
        // The role itself cannot touch the tables...
        assert_eq!(
            try_run("SELECT count(*) FROM syncular.sync_commits")
                .unwrap_err()
                .sqlstate,
            "42501"
        );
        let bytes = call("sync", P, "alice", &req, Some(&allowed_p1_p2()))
            .expect("gateway may call syncular.sync");
        run("RESET ROLE");
        let resp = syncular_protocol::response::decode_response(&bytes).unwrap();
        assert_eq!(push_results(&resp)[0].status, PushStatus::Applied);
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't1'"),
            1
        );
        run("SET LOCAL ROLE syncular_test_nobody2");
        let denied = call("sync", P, "alice", &req, Some(&allowed_p1_p2())).unwrap_err();
        run("RESET ROLE");
        assert_eq!(denied.sqlstate, "42501", "{denied:?}");
    }
}
