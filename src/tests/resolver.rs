//! The scope resolver: registration checks and the three outcomes (map,
//! raise → denied with its writes rolled back, malformed → loud error).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::engine::error::{EngineError, HostCode};
    use crate::engine::auth::allowed::Allowed;
    use crate::engine::auth::resolver::resolve_allowed;
    use crate::tests::support::*;

    fn set_resolver(body: &str) {
        run(&format!(
            "CREATE OR REPLACE FUNCTION public.test_resolver(partition text, actor_id text) RETURNS jsonb \
             LANGUAGE plpgsql AS $fn$ BEGIN {body} END $fn$"
        ));
        run("SELECT syncular.set_scope_resolver('public.test_resolver(text,text)')");
    }

    fn malformed(result: Result<Allowed, EngineError>) -> String {
        match result {
            Err(EngineError::Host { code: HostCode::ResolverMalformed, message }) => message,
            other => panic!("expected syncular.resolver_malformed, got {other:?}"),
        }
    }

    #[pg_test]
    fn no_resolver_means_denied() {
        assert!(matches!(resolve_allowed("p", "alice").unwrap(), Allowed::Denied { .. }));
    }

    #[pg_test]
    fn a_map_is_returned_with_its_arguments() {
        set_resolver(
            "RETURN jsonb_build_object('project_id', jsonb_build_array(partition || '/' || actor_id, '*'), 'org', '[]'::jsonb);",
        );
        let Allowed::Map(map) = resolve_allowed("part-1", "alice").unwrap() else { panic!("expected a map") };
        assert_eq!(map["project_id"], vec!["part-1/alice".to_string(), "*".to_string()]);
        assert!(map["org"].is_empty());
        assert_eq!(map.len(), 2);
    }

    #[pg_test]
    fn a_raising_resolver_means_denied_and_its_writes_roll_back() {
        run("CREATE TABLE public.resolver_log(actor text)");
        set_resolver("INSERT INTO public.resolver_log VALUES (actor_id); RAISE EXCEPTION 'actor % is revoked', actor_id;");
        run("INSERT INTO public.resolver_log VALUES ('before')");
        match resolve_allowed("p", "mallory").unwrap() {
            Allowed::Denied { reason } => assert!(reason.contains("actor mallory is revoked"), "{reason}"),
            other => panic!("expected denied, got {other:?}"),
        }
        // The caller's transaction is intact and the resolver's write is gone.
        assert_eq!(text("SELECT string_agg(actor, ',') FROM public.resolver_log"), Some("before".into()));
        run("INSERT INTO public.resolver_log VALUES ('after')");
        assert_eq!(int8("SELECT count(*) FROM public.resolver_log"), Some(2));
    }

    #[pg_test]
    fn a_malformed_value_names_the_key_and_type() {
        set_resolver("RETURN '{\"project_id\": 7}'::jsonb;");
        let message = malformed(resolve_allowed("p", "a"));
        assert!(message.contains("\"project_id\"") && message.contains("number"), "{message}");
        set_resolver("RETURN '{\"project_id\": [\"a\", null]}'::jsonb;");
        let message = malformed(resolve_allowed("p", "a"));
        assert!(message.contains("\"project_id\"") && message.contains("element 1") && message.contains("null"), "{message}");
        set_resolver("RETURN '[\"a\"]'::jsonb;");
        assert!(malformed(resolve_allowed("p", "a")).contains("array"));
        set_resolver("RETURN NULL;");
        assert!(malformed(resolve_allowed("p", "a")).contains("NULL"));
    }

    #[pg_test]
    fn an_answer_serde_cannot_hold_is_malformed_not_an_internal_error() {
        for answer in ["'{\"project_id\": [1e400]}'::jsonb", "(repeat('[', 300) || repeat(']', 300))::jsonb"] {
            set_resolver(&format!("RETURN {answer};"));
            let message = malformed(resolve_allowed("p", "a"));
            assert!(message.starts_with("scope resolver public.test_resolver returned jsonb this extension cannot read"), "{message}");
        }
    }

    #[pg_test]
    fn malformed_surfaces_as_sqlstate_39000() {
        set_resolver("RETURN '\"x\"'::jsonb;");
        let err = crate::store::spi::subtransaction::run(|| {
            crate::api::errors::raise(resolve_allowed("p", "a").unwrap_err())
        })
        .unwrap_err();
        assert_eq!(err.sqlstate, "39000", "{err:?}");
        assert!(err.message.starts_with("syncular.resolver_malformed: scope resolver public.test_resolver returned a JSON string"), "{err:?}");
    }

    #[pg_test]
    fn set_scope_resolver_checks_the_signature() {
        run("CREATE FUNCTION public.bad_args(a text) RETURNS jsonb LANGUAGE sql AS 'SELECT ''{}''::jsonb'");
        run("CREATE FUNCTION public.bad_ret(a text, b text) RETURNS json LANGUAGE sql AS 'SELECT ''{}''::json'");
        run("CREATE FUNCTION public.bad_set(a text, b text) RETURNS SETOF jsonb LANGUAGE sql AS 'SELECT ''{}''::jsonb'");
        for (sig, fragment) in [
            ("public.bad_args(text)", "exactly (partition text, actor_id text)"),
            ("public.bad_ret(text,text)", "must return jsonb"),
            ("public.bad_set(text,text)", "must not return a set"),
        ] {
            expect_error(
                try_run(&format!("SELECT syncular.set_scope_resolver('{sig}')")),
                "22023",
                "syncular.invalid_resolver",
                fragment,
            );
        }
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_scope_resolver"), Some(0));
        // NULL clears.
        set_resolver("RETURN '{}'::jsonb;");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_scope_resolver"), Some(1));
        run("SELECT syncular.set_scope_resolver(NULL)");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_scope_resolver"), Some(0));
    }
}
