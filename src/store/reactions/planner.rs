//! The reaction planner's registration (SPEC §6.9):
//! `syncular.sync_reaction_planner`, at most one row.

use pgrx::prelude::*;

use crate::store::error::{StoreError, StoreResult};

/// Stores `function` as the reaction planner (replacing any).
pub fn upsert_reaction_planner(function: pg_sys::Oid) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_reaction_planner(id, planner) \
                 VALUES (1, $1::pg_catalog.oid::pg_catalog.regprocedure) \
                 ON CONFLICT (id) DO UPDATE SET planner = EXCLUDED.planner",
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

/// The planner's function OID (kept when the function was dropped: it must
/// fail closed); `None` when none is set.
pub fn load_reaction_planner() -> StoreResult<Option<pg_sys::Oid>> {
    Spi::get_one::<pg_sys::Oid>("SELECT (SELECT planner::pg_catalog.oid FROM syncular.sync_reaction_planner WHERE id = 1)")
        .map_err(StoreError::spi("load_reaction_planner"))
}
