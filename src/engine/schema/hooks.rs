//! Registering the host functions a schema carries (SPEC §6.7): write
//! validators per table, the whole-commit validator and the reaction
//! planner. Each registration takes the schema fence and rewrites the
//! marker, so every backend reloads the served schema; running them is
//! [`crate::engine::validators`]'.

use crate::engine::error::EngineResult;
use crate::engine::validators::{check_owner, invalid};
use crate::store::auth::resolver;
use crate::store::{schema_store, validator_store};

/// `syncular.set_write_validator(tbl, fn)`: registers `function` as the
/// validator of IR table `tbl`, or removes it (`None`). The function must be
/// a plain function `(jsonb) returns jsonb` owned by a superuser (it runs
/// with the extension owner's privileges, as the resolver). Takes the schema
/// fence (the set of validators is part of the served schema: requests in
/// flight finish with the old set, later ones load the new one).
/// Errors: `syncular.no_schema`, `syncular.invalid_validator` (22023).
pub fn set_write_validator(tbl: &str, function: Option<pgrx::pg_sys::Oid>) -> EngineResult<()> {
    crate::engine::distribution::refuse_worker()?;
    schema_store::take_schema_fence()?;
    let registered = super::require_registered_schema()?;
    if registered.table(tbl).is_none() {
        return Err(invalid(format!(
            "table {tbl:?} is not declared by the registered schema (version {})",
            registered.version
        )));
    }
    match function {
        None => validator_store::delete_write_validator(tbl)?,
        Some(function) => {
            check_function(function, "write", "a write validator")?;
            validator_store::upsert_write_validator(tbl, function)?;
        }
    }
    schema_store::touch_current_version()?;
    super::invalidate_cache();
    Ok(())
}

/// Registers `function` as the single-row host function `which` (the
/// whole-commit validator, the reaction planner), or removes it (`None`):
/// a plain non-set function `(commit jsonb) returns jsonb` owned by a
/// superuser (`what` names it in errors, e.g. "a commit validator"). Takes
/// the schema fence and rewrites the marker, so every backend reloads.
/// Errors: `syncular.no_schema` (55000), `syncular.invalid_validator` (22023).
pub fn set_single(which: validator_store::SingleFunction, function: Option<pgrx::pg_sys::Oid>, what: &str) -> EngineResult<()> {
    crate::engine::distribution::refuse_worker()?;
    schema_store::take_schema_fence()?;
    super::require_registered_schema()?;
    match function {
        None => validator_store::delete_single(which)?,
        Some(function) => {
            check_function(function, "commit", what)?;
            validator_store::upsert_single(which, function)?;
        }
    }
    schema_store::touch_current_version()?;
    super::invalidate_cache();
    Ok(())
}

/// Checks that `function` can be a validator (`what`, e.g. "a write
/// validator"): a plain non-set function `(<arg> jsonb) returns jsonb`
/// owned by a superuser. Errors: `syncular.invalid_validator` (22023).
pub fn check_function(function: pgrx::pg_sys::Oid, arg: &str, what: &str) -> EngineResult<()> {
    check_shape(function, arg, what)?;
    check_owner_of(function, what)
}

fn check_shape(function: pgrx::pg_sys::Oid, arg: &str, what: &str) -> EngineResult<()> {
    let shape = resolver::describe_function(function)?
        .ok_or_else(|| invalid(format!("no function with OID {}", u32::from(function))))?;
    let jsonb = resolver::jsonb_type_oid();
    let problems = [
        (shape.kind != "f").then(|| format!("it is not a plain function (prokind {:?})", shape.kind)),
        (shape.arg_types != [jsonb]).then(|| format!("its arguments must be exactly ({arg} jsonb)")),
        (shape.return_type != jsonb).then(|| "it must return jsonb".to_string()),
        shape.returns_set.then(|| "it must not return a set".to_string()),
    ];
    match problems.into_iter().flatten().next() {
        None => Ok(()),
        Some(problem) => Err(invalid(format!("{} cannot be {what}: {problem}", shape.signature))),
    }
}

fn check_owner_of(function: pgrx::pg_sys::Oid, what: &str) -> EngineResult<()> {
    let signature = resolver::describe_function(function)?
        .map(|shape| shape.signature)
        .unwrap_or_else(|| format!("function {}", u32::from(function)));
    let owner = resolver::function_owner(function)?
        .ok_or_else(|| invalid(format!("no function with OID {}", u32::from(function))))?;
    check_owner(&signature, what, &owner.role, owner.is_superuser)
}
