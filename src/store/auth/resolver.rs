//! Statements behind the scope resolver (§3.2): the stored setting in
//! `syncular.sync_scope_resolver`, the catalog check of a candidate
//! function, and the call itself.

use pgrx::prelude::*;
use pgrx::PgBuiltInOids;

use crate::store::error::{StoreError, StoreResult};
use crate::store::spi::host_json;

/// A function as the catalog describes it (for `set_scope_resolver`'s check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionShape {
    /// `schema.name(argtypes)` as `regprocedure` text.
    pub signature: String,
    /// Argument type OIDs in order.
    pub arg_types: Vec<pg_sys::Oid>,
    /// Declared return type OID.
    pub return_type: pg_sys::Oid,
    /// `true` for a set-returning function.
    pub returns_set: bool,
    /// `pg_proc.prokind` (`f` function, `p` procedure, `a`/`w` aggregate/window).
    pub kind: String,
}

/// The resolver to call: its schema and name, both unquoted (quoted when
/// the call statement is built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverName {
    /// `pg_namespace.nspname` of the function.
    pub schema: String,
    /// `pg_proc.proname`.
    pub name: String,
    /// The function owner's role name (`pg_roles.rolname`).
    pub owner: String,
    /// `true` when the owner is a superuser (`pg_roles.rolsuper`).
    pub owner_is_superuser: bool,
}

/// The stored form of a registered function (resolver, validators): its
/// schema-qualified signature as text, `schema.name(argtypes)` with quoted
/// identifiers, for the function whose OID is the statement's parameter
/// `$N`. Read back with `to_regprocedure`. Text rather than a `regprocedure`
/// column: pg_upgrade refuses a cluster with a reg* column in a user table.
pub fn signature_of_param(n: usize) -> String {
    format!(
        "(SELECT pg_catalog.format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.replace(pg_catalog.oidvectortypes(p.proargtypes), ', ', ',')) \
            FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
           WHERE p.oid = ${n})"
    )
}

/// Who owns a function: role name and whether it is a superuser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionOwner {
    /// `pg_roles.rolname` of `pg_proc.proowner`.
    pub role: String,
    /// `pg_roles.rolsuper`.
    pub is_superuser: bool,
}

/// The owner of `function`; `None` when no such function exists.
pub fn function_owner(function: pg_sys::Oid) -> StoreResult<Option<FunctionOwner>> {
    const STATEMENT: &str = "function_owner";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT r.rolname::pg_catalog.text, r.rolsuper \
                   FROM pg_catalog.pg_proc p \
                   JOIN pg_catalog.pg_roles r ON r.oid = p.proowner \
                  WHERE p.oid = $1",
                Some(1),
                &[function.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        let role: String = row.get(1).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let is_superuser: bool = row.get(2).map_err(StoreError::spi(STATEMENT))?.unwrap_or(false);
        Ok(Some(FunctionOwner { role, is_superuser }))
    })
}

/// Reads `pg_proc` for `function`; `None` when no such function exists.
pub fn describe_function(function: pg_sys::Oid) -> StoreResult<Option<FunctionShape>> {
    const STATEMENT: &str = "describe_function";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT p.oid::pg_catalog.regprocedure::text, \
                        pg_catalog.array_to_string(p.proargtypes::pg_catalog.oid[], ','), \
                        p.prorettype, p.proretset, p.prokind::text \
                   FROM pg_catalog.pg_proc p WHERE p.oid = $1",
                Some(1),
                &[function.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        let signature: String = row.get(1).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let args: String = row.get(2).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let return_type: pg_sys::Oid =
            row.get(3).map_err(StoreError::spi(STATEMENT))?.unwrap_or(pg_sys::InvalidOid);
        let returns_set: bool = row.get(4).map_err(StoreError::spi(STATEMENT))?.unwrap_or(false);
        let kind: String = row.get(5).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let mut arg_types = Vec::new();
        for part in args.split(',').filter(|p| !p.is_empty()) {
            let raw: u32 = part
                .parse()
                .map_err(|_| StoreError::new(STATEMENT, format!("bad proargtypes entry {part:?}")))?;
            arg_types.push(pg_sys::Oid::from(raw));
        }
        Ok(Some(FunctionShape { signature, arg_types, return_type, returns_set, kind }))
    })
}

/// Stores `function` as the resolver (replacing any previous one).
pub fn upsert_scope_resolver(function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                &format!(
                    "INSERT INTO syncular.sync_scope_resolver(id, resolver) VALUES (1, {}) \
                     ON CONFLICT (id) DO UPDATE SET resolver = EXCLUDED.resolver",
                    signature_of_param(1)
                ),
                None,
                &[function.into()],
            )
            .map(|_| ())
            .map_err(StoreError::spi("upsert_scope_resolver"))
    })
}

/// Removes the stored resolver (no-op when none).
pub fn delete_scope_resolver() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_scope_resolver", None, &[])
            .map(|_| ())
            .map_err(StoreError::spi("delete_scope_resolver"))
    })
}

/// The stored resolver's schema, name and owner; `None` when none is set.
pub fn load_scope_resolver() -> StoreResult<Option<ResolverName>> {
    load_registered_function(
        "load_scope_resolver",
        "SELECT n.nspname::text, p.proname::text, o.rolname::text, o.rolsuper \
           FROM syncular.sync_scope_resolver r \
           JOIN pg_catalog.pg_proc p ON p.oid = pg_catalog.to_regprocedure(r.resolver::pg_catalog.text) \
           JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
           JOIN pg_catalog.pg_roles o ON o.oid = p.proowner \
          WHERE r.id = 1",
    )
}

/// The function `sql` names — one row `(schema, name, owner, owner is
/// superuser)` or none. Errors: SPI failures, a row without a name.
fn load_registered_function(statement: &'static str, sql: &str) -> StoreResult<Option<ResolverName>> {
    Spi::connect_mut(|client| {
        let rows = client.update(sql, Some(1), &[]).map_err(StoreError::spi(statement))?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        let schema: Option<String> = row.get(1).map_err(StoreError::spi(statement))?;
        let name: Option<String> = row.get(2).map_err(StoreError::spi(statement))?;
        let owner: String = row.get(3).map_err(StoreError::spi(statement))?.unwrap_or_default();
        let owner_is_superuser: bool = row.get(4).map_err(StoreError::spi(statement))?.unwrap_or(false);
        match (schema, name) {
            (Some(schema), Some(name)) => Ok(Some(ResolverName { schema, name, owner, owner_is_superuser })),
            _ => Err(StoreError::new(statement, "registered function row without a name")),
        }
    })
}

/// Calls `resolver(partition, actor_id)` and returns its jsonb result
/// (`None` for SQL NULL). A Postgres ERROR raised by the resolver unwinds:
/// call this inside [`crate::store::spi::subtransaction::run`].
pub fn call_scope_resolver(
    resolver: &ResolverName,
    partition: &str,
    actor_id: &str,
) -> StoreResult<Option<serde_json::Value>> {
    const STATEMENT: &str = "call_scope_resolver";
    // Identifiers come from pg_proc and are quoted; values are parameters.
    // The explicit casts select the (text, text) overload that
    // set_scope_resolver checked.
    let sql = format!(
        "SELECT ({}.{}($1::pg_catalog.text, $2::pg_catalog.text)::pg_catalog.jsonb)::pg_catalog.text",
        pgrx::spi::quote_identifier(&resolver.schema),
        pgrx::spi::quote_identifier(&resolver.name),
    );
    Spi::connect_mut(|client| {
        let rows = client
            .update(sql.as_str(), Some(1), &[partition.into(), actor_id.into()])
            .map_err(StoreError::spi(STATEMENT))?;
        host_json::parse(STATEMENT, rows.first().get(1).map_err(StoreError::spi(STATEMENT))?)
    })
}

/// The OID of type `jsonb`, for resolver-shape checks.
pub fn jsonb_type_oid() -> pg_sys::Oid {
    PgBuiltInOids::JSONBOID.value()
}

/// The OID of type `text`, for resolver-shape checks.
pub fn text_type_oid() -> pg_sys::Oid {
    PgBuiltInOids::TEXTOID.value()
}
