//! `syncular.register_schema`, `syncular.set_scope_resolver`,
//! `syncular.set_write_validator`, `syncular.set_commit_validator`,
//! `syncular.current_schema_version`
//! (docs/src/sql/schema.md).

use pgrx::prelude::*;
use super::json_arg::Jsonb;

use crate::api::errors::OrRaise;
use crate::engine::auth::resolver;
use crate::engine::schema;

/// `syncular.register_schema(ir jsonb, app_schema text DEFAULT 'public',
/// allow_drop boolean DEFAULT false) returns void`.
///
/// Registers or bumps the app schema IR (rules: `crate::engine::schema`) and
/// reports what happened in a NOTICE (`syncular: schema version N created |
/// unchanged | migrated (rewritten rows: N, retired tables: […])`).
/// Errors: `syncular.invalid_schema` (42P15), `syncular.schema_refused`
/// (55000), `syncular.invalid_argument` (22023) when an argument is NULL.
/// Admin only (EXECUTE not granted to `syncular_gateway`).
#[pg_extern(volatile)]
fn register_schema(
    ir: Option<Jsonb>,
    app_schema: default!(Option<String>, "'public'"),
    allow_drop: default!(Option<bool>, false),
) {
    let null = |name: &str| -> ! {
        crate::api::errors::raise(crate::engine::error::EngineError::host(
            crate::engine::error::HostCode::InvalidArgument,
            format!("argument {name} of register_schema must not be NULL"),
        ))
    };
    let ir = ir.unwrap_or_else(|| null("ir"));
    let app_schema = app_schema.unwrap_or_else(|| null("app_schema"));
    let allow_drop = allow_drop.unwrap_or_else(|| null("allow_drop"));
    let outcome = schema::register::register(&ir.0, &app_schema, allow_drop).or_raise();
    let version = ir.0.get("version").or_else(|| ir.0.get("schemaVersion")).cloned().unwrap_or_default();
    pgrx::notice!("syncular: schema version {version} {}", describe_outcome(&outcome));
}

/// The NOTICE text of a registration outcome: `created`, `unchanged`, or
/// `migrated (rewritten rows: N, retired tables: […])`.
pub fn describe_outcome(outcome: &schema::RegisterOutcome) -> String {
    match outcome {
        schema::RegisterOutcome::Created => "created".to_string(),
        schema::RegisterOutcome::Unchanged => "unchanged".to_string(),
        schema::RegisterOutcome::Migrated { rewritten_rows, retired } => {
            format!("migrated (rewritten rows: {rewritten_rows}, retired tables: {retired:?})")
        }
    }
}

/// `syncular.current_schema_version() returns integer` — the registered
/// `schemaVersion` the server serves (§1.6), NULL before the first
/// registration. Granted to `syncular_gateway`; SECURITY DEFINER with a
/// pinned `search_path`, so the gateway needs no grant on the marker tables.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn current_schema_version() -> Option<i32> {
    schema::load_registered_schema().or_raise().map(|s| s.version)
}

/// `syncular._set_scope_resolver_oid(fn oid) returns void` — the body of
/// `syncular.set_scope_resolver(fn regprocedure)` (SQL wrapper below).
/// NULL clears the resolver. Errors: `syncular.invalid_resolver` (22023)
/// for a wrong shape or an owner that is not a superuser.
#[pg_extern(name = "_set_scope_resolver_oid", volatile)]
fn set_scope_resolver_oid(function: Option<pg_sys::Oid>) {
    crate::engine::distribution::refuse_worker().or_raise();
    match function {
        None => crate::store::auth::resolver::delete_scope_resolver().or_raise(),
        Some(function) => {
            resolver::check_resolver_shape(function).or_raise();
            resolver::check_resolver_owner_of(function).or_raise();
            crate::store::auth::resolver::upsert_scope_resolver(function).or_raise();
        }
    }
}

extension_sql!(
    r#"
CREATE FUNCTION syncular.set_scope_resolver(fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_scope_resolver_oid($1::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_scope_resolver(pg_catalog.regprocedure) IS
  'Registers the host scope resolver (partition text, actor_id text) returns jsonb; NULL clears it.';
"#,
    name = "set_scope_resolver",
    requires = [set_scope_resolver_oid]
);

/// `syncular._set_write_validator_oid(tbl text, fn oid) returns void` — the
/// body of `syncular.set_write_validator(tbl text, fn regprocedure)` (SQL
/// wrapper below; rules: `crate::engine::validators`). NULL `fn` removes the
/// table's validator. Errors: `syncular.invalid_validator` (22023: wrong
/// shape, owner not a superuser, table not in the registered schema),
/// `syncular.no_schema` (55000), `syncular.invalid_argument` (22023) for a
/// NULL `tbl`. Admin only.
#[pg_extern(name = "_set_write_validator_oid", volatile)]
fn set_write_validator_oid(tbl: Option<String>, function: Option<pg_sys::Oid>) {
    let tbl = tbl.unwrap_or_else(|| {
        crate::api::errors::raise(crate::engine::error::EngineError::host(
            crate::engine::error::HostCode::InvalidArgument,
            "argument tbl of set_write_validator must not be NULL",
        ))
    });
    crate::engine::schema::hooks::set_write_validator(&tbl, function).or_raise();
}

extension_sql!(
    r#"
CREATE FUNCTION syncular.set_write_validator(tbl text, fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_write_validator_oid($1, $2::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_write_validator(text, pg_catalog.regprocedure) IS
  'Registers the write validator (write jsonb) returns jsonb of a synced table (SPEC 6.7); NULL removes it.';
"#,
    name = "set_write_validator",
    requires = [set_write_validator_oid]
);

/// `syncular._set_commit_validator_oid(fn oid) returns void` — the body of
/// `syncular.set_commit_validator(fn regprocedure)` (SQL wrapper below;
/// rules: `crate::engine::push::validator`). NULL removes it. Errors:
/// `syncular.invalid_validator` (22023: wrong shape, owner not a
/// superuser), `syncular.no_schema` (55000). Admin only.
#[pg_extern(name = "_set_commit_validator_oid", volatile)]
fn set_commit_validator_oid(function: Option<pg_sys::Oid>) {
    crate::engine::push::validator::set_commit_validator(function).or_raise();
}

extension_sql!(
    r#"
CREATE FUNCTION syncular.set_commit_validator(fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_commit_validator_oid($1::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_commit_validator(pg_catalog.regprocedure) IS
  'Registers the whole-commit validator (commit jsonb) returns jsonb (SPEC 6.8); NULL removes it.';
"#,
    name = "set_commit_validator",
    requires = [set_commit_validator_oid]
);
