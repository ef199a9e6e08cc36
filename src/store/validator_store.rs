//! Statements behind the validators: the write validators (SPEC §6.7) in
//! `syncular.sync_write_validators`, the whole-commit validator (§6.8) in
//! `syncular.sync_commit_validator`, and the call itself.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

use crate::store::error::{StoreError, StoreResult};
use crate::store::resolver_store::{signature_of_param, ResolverName};

/// Stores `function` as the validator of IR table `tbl` (replacing any).
pub fn upsert_write_validator(tbl: &str, function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                &format!(
                    "INSERT INTO syncular.sync_write_validators(tbl, validator) VALUES ($1, {}) \
                     ON CONFLICT (tbl) DO UPDATE SET validator = EXCLUDED.validator",
                    signature_of_param(2)
                ),
                None,
                &[DatumWithOid::from(tbl), function.into()],
            )
            .map(|_| ())
            .map_err(StoreError::spi("upsert_write_validator"))
    })
}

/// Removes the validator of `tbl` (no-op when none).
pub fn delete_write_validator(tbl: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_write_validators WHERE tbl = $1", None, &[DatumWithOid::from(tbl)])
            .map(|_| ())
            .map_err(StoreError::spi("delete_write_validator"))
    })
}

/// Every registration: IR table name → the function's OID, resolved from the
/// stored signature; `InvalidOid` when no such function exists now (a dropped
/// one must fail closed, not vanish).
pub fn load_write_validators() -> StoreResult<Vec<(String, pg_sys::Oid)>> {
    const STATEMENT: &str = "load_write_validators";
    Spi::connect_mut(|client| {
        let rows = client
            .update("SELECT tbl, COALESCE(pg_catalog.to_regprocedure(validator)::pg_catalog.oid, 0::pg_catalog.oid) \
                   FROM syncular.sync_write_validators ORDER BY tbl", None, &[])
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::new();
        for row in rows {
            let tbl: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
            let oid: Option<pg_sys::Oid> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
            match (tbl, oid) {
                (Some(tbl), Some(oid)) => out.push((tbl, oid)),
                _ => return Err(StoreError::new(STATEMENT, "validator row without a table or function")),
            }
        }
        Ok(out)
    })
}

/// A validator function as the catalog describes it at the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionNow {
    /// Schema, name and owner (the call names it schema-qualified).
    pub name: ResolverName,
    /// `(jsonb) returns jsonb`, a plain non-set function.
    pub shape_ok: bool,
}

/// The function with OID `function` now — `None` when it was dropped. One
/// catalog probe per validator call: the owner, name and shape are never
/// taken from a cache (an owner or body changed since registration must be
/// seen at the next call).
pub fn function_now(function: pg_sys::Oid) -> StoreResult<Option<FunctionNow>> {
    const STATEMENT: &str = "validator_function_now";
    Spi::connect_mut(|client| {
        let rows = crate::store::plan_cache::execute(
            client,
            "SELECT n.nspname::text, p.proname::text, o.rolname::text, o.rolsuper, \
                    p.prokind = 'f' AND NOT p.proretset AND p.prorettype = 'pg_catalog.jsonb'::pg_catalog.regtype \
                    AND p.pronargs = 1 AND p.proargtypes[0] = 'pg_catalog.jsonb'::pg_catalog.regtype \
               FROM pg_catalog.pg_proc p \
               JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
               JOIN pg_catalog.pg_roles o ON o.oid = p.proowner \
              WHERE p.oid = $1",
            Some(1),
            &[function.into()],
        )
        .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else { return Ok(None) };
        let schema: String = row.get(1).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let name: String = row.get(2).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let owner: String = row.get(3).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
        let owner_is_superuser: bool = row.get(4).map_err(StoreError::spi(STATEMENT))?.unwrap_or(false);
        let shape_ok: bool = row.get(5).map_err(StoreError::spi(STATEMENT))?.unwrap_or(false);
        Ok(Some(FunctionNow { name: ResolverName { schema, name, owner, owner_is_superuser }, shape_ok }))
    })
}

/// Stores `function` as the whole-commit validator (§6.8; replacing any).
pub fn upsert_commit_validator(function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                &format!(
                    "INSERT INTO syncular.sync_commit_validator(id, validator) VALUES (1, {}) \
                     ON CONFLICT (id) DO UPDATE SET validator = EXCLUDED.validator",
                    signature_of_param(1)
                ),
                None,
                &[function.into()],
            )
            .map(|_| ())
            .map_err(StoreError::spi("upsert_commit_validator"))
    })
}

/// Removes the whole-commit validator (no-op when none).
pub fn delete_commit_validator() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_commit_validator", None, &[])
            .map(|_| ())
            .map_err(StoreError::spi("delete_commit_validator"))
    })
}

/// The whole-commit validator's function OID, resolved from the stored
/// signature (`InvalidOid` when no such function exists now: it must fail
/// closed); `None` when none is set.
pub fn load_commit_validator() -> StoreResult<Option<pg_sys::Oid>> {
    Spi::get_one::<pg_sys::Oid>(
        "SELECT (SELECT COALESCE(pg_catalog.to_regprocedure(validator)::pg_catalog.oid, 0::pg_catalog.oid) \
                   FROM syncular.sync_commit_validator WHERE id = 1)",
    )
        .map_err(StoreError::spi("load_commit_validator"))
}

/// Calls `validator(input)` and returns its jsonb result (`None` for SQL
/// NULL). A Postgres ERROR raised by the validator unwinds to the caller's
/// subtransaction (the push's per-commit one; a captured statement's own).
pub fn call_validator(validator: &ResolverName, input: &Value) -> StoreResult<Option<Value>> {
    const STATEMENT: &str = "call_validator";
    // Identifiers come from pg_proc and are quoted; the value is a parameter.
    let sql = format!(
        "SELECT {}.{}($1::pg_catalog.jsonb)::pg_catalog.jsonb",
        pgrx::spi::quote_identifier(&validator.schema),
        pgrx::spi::quote_identifier(&validator.name),
    );
    Spi::connect_mut(|client| {
        let rows = crate::store::plan_cache::execute(client, &sql, Some(1), &[DatumWithOid::from(JsonB(input.clone()))])
            .map_err(StoreError::spi(STATEMENT))?;
        let value: Option<JsonB> = rows.first().get(1).map_err(StoreError::spi(STATEMENT))?;
        Ok(value.map(|j| j.0))
    })
}
