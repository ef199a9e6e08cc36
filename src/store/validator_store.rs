//! Statements behind the validators: the write validators (SPEC §6.7) in
//! `syncular.sync_write_validators`, the whole-commit validator (§6.8) in
//! `syncular.sync_commit_validator`, and the call itself.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

use crate::store::error::{StoreError, StoreResult};
use crate::store::resolver_store::ResolverName;

/// Stores `function` as the validator of IR table `tbl` (replacing any).
pub fn upsert_write_validator(tbl: &str, function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_write_validators(tbl, validator) \
                 VALUES ($1, $2::pg_catalog.oid::pg_catalog.regprocedure) \
                 ON CONFLICT (tbl) DO UPDATE SET validator = EXCLUDED.validator",
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

/// Every registration: IR table name → the function's schema, name and owner.
pub fn load_write_validators() -> StoreResult<Vec<(String, ResolverName)>> {
    const STATEMENT: &str = "load_write_validators";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT v.tbl, n.nspname::text, p.proname::text, o.rolname::text, o.rolsuper \
                   FROM syncular.sync_write_validators v \
                   JOIN pg_catalog.pg_proc p ON p.oid = v.validator \
                   JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
                   JOIN pg_catalog.pg_roles o ON o.oid = p.proowner \
                  ORDER BY v.tbl",
                None,
                &[],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::new();
        for row in rows {
            let tbl: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
            let schema: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
            let name: Option<String> = row.get(3).map_err(StoreError::spi(STATEMENT))?;
            let owner: String = row.get(4).map_err(StoreError::spi(STATEMENT))?.unwrap_or_default();
            let owner_is_superuser: bool = row.get(5).map_err(StoreError::spi(STATEMENT))?.unwrap_or(false);
            match (tbl, schema, name) {
                (Some(tbl), Some(schema), Some(name)) => {
                    out.push((tbl, ResolverName { schema, name, owner, owner_is_superuser }));
                }
                _ => return Err(StoreError::new(STATEMENT, "validator row without a name")),
            }
        }
        Ok(out)
    })
}

/// Stores `function` as the whole-commit validator (§6.8; replacing any).
pub fn upsert_commit_validator(function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_commit_validator(id, validator) \
                 VALUES (1, $1::pg_catalog.oid::pg_catalog.regprocedure) \
                 ON CONFLICT (id) DO UPDATE SET validator = EXCLUDED.validator",
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

/// The whole-commit validator's schema, name and owner; `None` when none is set.
pub fn load_commit_validator() -> StoreResult<Option<ResolverName>> {
    crate::store::resolver_store::load_registered_function(
        "load_commit_validator",
        "SELECT n.nspname::text, p.proname::text, o.rolname::text, o.rolsuper \
           FROM syncular.sync_commit_validator v \
           JOIN pg_catalog.pg_proc p ON p.oid = v.validator \
           JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
           JOIN pg_catalog.pg_roles o ON o.oid = p.proowner \
          WHERE v.id = 1",
    )
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
