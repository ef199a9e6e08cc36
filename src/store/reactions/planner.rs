//! The reaction planner's registration (SPEC §6.9):
//! `syncular.sync_reaction_planner`, at most one row.

use pgrx::prelude::*;

use crate::store::error::{StoreError, StoreResult};
use crate::store::resolver_store::signature_of_param;

/// Stores `function` as the reaction planner (replacing any).
pub fn upsert_reaction_planner(function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                &format!(
                    "INSERT INTO syncular.sync_reaction_planner(id, planner) VALUES (1, {}) \
                     ON CONFLICT (id) DO UPDATE SET planner = EXCLUDED.planner",
                    signature_of_param(1)
                ),
                None,
                &[function.into()],
            )
            .map(|_| ())
            .map_err(StoreError::spi("upsert_reaction_planner"))
    })
}

/// Removes the reaction planner (no-op when none).
pub fn delete_reaction_planner() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_reaction_planner", None, &[])
            .map(|_| ())
            .map_err(StoreError::spi("delete_reaction_planner"))
    })
}

/// The planner's function OID, resolved from the stored signature
/// (`InvalidOid` when no such function exists now: it must fail closed);
/// `None` when none is set.
pub fn load_reaction_planner() -> StoreResult<Option<pg_sys::Oid>> {
    Spi::get_one::<pg_sys::Oid>(
        "SELECT (SELECT COALESCE(pg_catalog.to_regprocedure(planner)::pg_catalog.oid, 0::pg_catalog.oid) \
                   FROM syncular.sync_reaction_planner WHERE id = 1)",
    )
        .map_err(StoreError::spi("load_reaction_planner"))
}
