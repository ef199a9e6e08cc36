//! EXECUTE is revoked from PUBLIC on every function of schema syncular and
//! granted to `syncular_gateway`, except the admin functions.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::support::*;

    const ADMIN: &[&str] = &[
        "register_schema",
        "set_scope_resolver",
        "_set_scope_resolver_oid",
        "set_write_validator",
        "_set_write_validator_oid",
        "set_commit_validator",
        "_set_commit_validator_oid",
        "set_reaction_planner",
        "_set_reaction_planner_oid",
        "retry_dead_letter_reaction",
        "prune_reactions",
        "list_reactions",
        "install_capture_triggers",
        "capture_statement_start",
        "capture_row",
        "capture_statement",
        "capture_truncate",
        "advance_horizon",
        "prune_batch",
        "prune",
        "rotate_log_epoch",
        "drop_partition_batch",
        "drop_partition",
        "partition_stats",
        "distribute",
        "drop_extension_guard",
        "revoke_lease",
        "clear_lease_revocation",
        "leases",
        "round_failures",
        "rotate_lease_key",
        "blob_sweep_orphans",
        "rotate_segment_url_key",
        "segment_sweep",
        "segment_signed_url",
    ];

    #[pg_test]
    fn public_cannot_execute_and_the_gateway_can_except_admin() {
        run("CREATE ROLE syncular_test_nobody NOLOGIN");
        let rows = text(
            "SELECT string_agg(p.proname || '=' || has_function_privilege('syncular_test_nobody', p.oid, 'EXECUTE') \
                    || '/' || has_function_privilege('syncular_gateway', p.oid, 'EXECUTE'), ',' ORDER BY p.proname) \
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'syncular'::regnamespace",
        )
        .unwrap();
        let mut checked = 0;
        for entry in rows.split(',') {
            let (name, privs) = entry.split_once('=').unwrap();
            let want = if ADMIN.contains(&name) { "false/false" } else { "false/true" };
            assert_eq!(privs, want, "{name}");
            checked += 1;
        }
        assert!(checked >= 4, "{rows}");
    }

    #[pg_test]
    fn a_role_without_the_grant_is_refused_and_the_gateway_is_served() {
        run("CREATE ROLE syncular_test_nobody NOLOGIN");
        run("CREATE ROLE syncular_test_gw NOLOGIN IN ROLE syncular_gateway");
        run("SET LOCAL ROLE syncular_test_nobody");
        let denied = try_run("SELECT syncular.current_schema_version()").unwrap_err();
        assert_eq!(denied.sqlstate, "42501", "{denied:?}");
        // No USAGE on schema syncular either: the first refusal is the schema's.
        assert!(denied.message.contains("permission denied for schema syncular"), "{denied:?}");
        run("RESET ROLE");
        run("SET LOCAL ROLE syncular_test_gw");
        try_run("SELECT syncular.current_schema_version()").unwrap();
        let denied = try_run("SELECT syncular.register_schema('{}'::jsonb)").unwrap_err();
        assert_eq!(denied.sqlstate, "42501", "{denied:?}");
        run("RESET ROLE");
    }
}
