//! Statements behind the registered host functions: the write validators
//! (SPEC §6.7) in `syncular.sync_write_validators`, the single-row
//! registrations ([`SingleFunction`]: the whole-commit validator, §6.8, and
//! the reaction planner, §6.9), and the call itself.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

use crate::store::error::{StoreError, StoreResult};
use crate::store::spi::host_json;
use crate::store::auth::resolver::{signature_of_param, ResolverName};

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
/// catalog look-up per validator call (the system caches, no SQL statement:
/// this runs for every write a validator checks): the owner, name and shape
/// are never taken from a registration-time copy (an owner or body changed
/// since registration must be seen at the next call; the caches follow
/// committed catalog changes as every statement's relation locks accept
/// invalidations).
pub fn function_now(function: pg_sys::Oid) -> StoreResult<Option<FunctionNow>> {
    let text = |ptr: *const std::os::raw::c_char| -> String {
        if ptr.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated C string from the catalog, valid for this call.
            unsafe { std::ffi::CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: inside a transaction (every caller runs in one); the tuple is
    // read, then released before anything else can invalidate it; `proargtypes`
    // holds `pronargs` OIDs.
    let (name, namespace, owner, shape_ok) = unsafe {
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::PROCOID as std::os::raw::c_int,
            pg_sys::Datum::from(u32::from(function)),
        );
        if tuple.is_null() {
            return Ok(None);
        }
        let form = &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
        let jsonb = pg_sys::JSONBOID;
        let nargs = usize::try_from(form.pronargs).unwrap_or(0);
        let args = form.proargtypes.values.as_slice(nargs);
        let shape_ok = form.prokind as u8 == b'f' && !form.proretset && form.prorettype == jsonb && args == [jsonb];
        let out = (text(form.proname.data.as_ptr()), form.pronamespace, form.proowner, shape_ok);
        pg_sys::ReleaseSysCache(tuple);
        out
    };
    // SAFETY: catalog look-ups by OID in a transaction; a missing row gives NULL / false.
    let (schema, owner_name, owner_is_superuser) = unsafe {
        (
            text(pg_sys::get_namespace_name(namespace)),
            text(pg_sys::GetUserNameFromId(owner, true)),
            pg_sys::superuser_arg(owner),
        )
    };
    Ok(Some(FunctionNow { name: ResolverName { schema, name, owner: owner_name, owner_is_superuser }, shape_ok }))
}

/// A host function registered at most once per database: a single-row
/// table (`id = 1`) holding its signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingleFunction {
    /// The whole-commit validator (§6.8), `syncular.sync_commit_validator`.
    CommitValidator,
    /// The reaction planner (§6.9), `syncular.sync_reaction_planner`.
    ReactionPlanner,
}

impl SingleFunction {
    /// Its table and signature column.
    fn table_and_column(self) -> (&'static str, &'static str) {
        match self {
            SingleFunction::CommitValidator => ("syncular.sync_commit_validator", "validator"),
            SingleFunction::ReactionPlanner => ("syncular.sync_reaction_planner", "planner"),
        }
    }
}

/// Stores `function` as the `which` function (replacing any).
pub fn upsert_single(which: SingleFunction, function: pg_sys::Oid) -> StoreResult<()> {
    let (table, column) = which.table_and_column();
    Spi::connect_mut(|client| {
        client
            .update(
                &format!(
                    "INSERT INTO {table}(id, {column}) VALUES (1, {}) \
                     ON CONFLICT (id) DO UPDATE SET {column} = EXCLUDED.{column}",
                    signature_of_param(1)
                ),
                None,
                &[function.into()],
            )
            .map(|_| ())
            .map_err(StoreError::spi("upsert_single_function"))
    })
}

/// Removes the `which` function (no-op when none).
pub fn delete_single(which: SingleFunction) -> StoreResult<()> {
    let (table, _) = which.table_and_column();
    Spi::connect_mut(|client| {
        client
            .update(&format!("DELETE FROM {table}"), None, &[])
            .map(|_| ())
            .map_err(StoreError::spi("delete_single_function"))
    })
}

/// The `which` function's OID, resolved from the stored signature
/// (`InvalidOid` when no such function exists now: it must fail closed);
/// `None` when none is set.
pub fn load_single(which: SingleFunction) -> StoreResult<Option<pg_sys::Oid>> {
    let (table, column) = which.table_and_column();
    Spi::get_one::<pg_sys::Oid>(&format!(
        "SELECT (SELECT COALESCE(pg_catalog.to_regprocedure({column})::pg_catalog.oid, 0::pg_catalog.oid) \
                   FROM {table} WHERE id = 1)"
    ))
    .map_err(StoreError::spi("load_single_function"))
}

/// Calls `validator(input)` and returns its jsonb result (`None` for SQL
/// NULL). A Postgres ERROR raised by the validator unwinds to the caller's
/// subtransaction (the push's per-commit one; a captured statement's own).
pub fn call_validator(validator: &ResolverName, input: &Value) -> StoreResult<Option<Value>> {
    const STATEMENT: &str = "call_validator";
    // Identifiers come from pg_proc and are quoted; the value is a parameter.
    let sql = format!(
        "SELECT ({}.{}($1::pg_catalog.jsonb)::pg_catalog.jsonb)::pg_catalog.text",
        pgrx::spi::quote_identifier(&validator.schema),
        pgrx::spi::quote_identifier(&validator.name),
    );
    Spi::connect_mut(|client| {
        let rows = crate::store::spi::plan_cache::execute(client, &sql, Some(1), &[DatumWithOid::from(JsonB(input.clone()))])
            .map_err(StoreError::spi(STATEMENT))?;
        host_json::parse(STATEMENT, rows.first().get(1).map_err(StoreError::spi(STATEMENT))?)
    })
}
