//! Privileges seen from real logins: a role without the grant cannot call
//! any syncular function; a login holding `syncular_gateway` can call the
//! gateway functions but not the admin ones.

use syncular_integration_tests::{connect_to, dsn};

fn dsn_as(dsn: &str, user: &str) -> String {
    let mut parts: Vec<String> = dsn.split_whitespace().filter(|p| !p.starts_with("user=")).map(str::to_string).collect();
    parts.push(format!("user={user}"));
    parts.join(" ")
}

fn sqlstate(e: &postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

#[test]
fn only_the_gateway_role_may_call_and_admin_stays_admin() {
    let base = dsn();
    let mut admin = connect_to(&base);
    let suffix = std::process::id();
    let nobody = format!("syncular_it_nobody_{suffix}");
    let gateway = format!("syncular_it_gateway_{suffix}");
    admin
        .batch_execute(&format!(
            "CREATE ROLE {nobody} LOGIN; CREATE ROLE {gateway} LOGIN IN ROLE syncular_gateway;"
        ))
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut as_nobody = connect_to(&dsn_as(&base, &nobody));
        let err = as_nobody.query_one("SELECT syncular.current_schema_version()", &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{err}");
        let err = as_nobody.query_one("SELECT syncular.register_schema('{}'::jsonb)", &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{err}");

        let err = as_nobody.query_one("SELECT syncular.sync('p', 'a', '\\x00'::bytea)", &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{err}");

        let mut as_gateway = connect_to(&dsn_as(&base, &gateway));
        as_gateway.query_one("SELECT syncular.current_schema_version()", &[]).unwrap();
        // The gateway reaches the sync round itself (SECURITY DEFINER, no table
        // grants needed): garbage bytes are a request-level decode error.
        let err = as_gateway.query_one("SELECT syncular.sync('p', 'a', '\\x00'::bytea)", &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "22023", "{err}");
        let message = err.as_db_error().map(|e| e.message().to_string()).unwrap_or_default();
        assert!(message.starts_with("sync.invalid_request: "), "{message}");
        let err = as_gateway.query_one("SELECT syncular.register_schema('{}'::jsonb)", &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{err}");
        let err = as_gateway.query_one("SELECT syncular.set_scope_resolver(NULL)", &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{err}");

        // Every function of schema syncular: PUBLIC has no EXECUTE.
        let public_exec: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a \
                  WHERE p.pronamespace = 'syncular'::regnamespace AND a.grantee = 0 AND a.privilege_type = 'EXECUTE'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(public_exec, 0);
    }));
    admin.batch_execute(&format!("DROP ROLE {nobody}; DROP ROLE {gateway};")).unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
