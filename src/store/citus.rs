//! Citus's catalog and distribution functions (docs/src/operate/citus.md "Scaling out with
//! Citus"). Every statement here that names a Citus object runs only after
//! [`loaded`] said the `citus` extension exists: without it the names do
//! not resolve. Citus's functions live in `pg_catalog`.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::{StoreError, StoreResult};

/// Whether the `citus` extension is installed in this database.
/// Errors: SPI failures.
pub fn loaded() -> StoreResult<bool> {
    Spi::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')")
        .map(|b| b.unwrap_or(false))
        .map_err(StoreError::spi("citus_loaded"))
}

/// Whether this node is a Citus worker: its local group id is not 0 (the
/// coordinator's, and a single node's). Call only when [`loaded`].
/// Errors: SPI failures.
pub fn is_worker() -> StoreResult<bool> {
    Spi::get_one::<bool>("SELECT COALESCE((SELECT groupid <> 0 FROM pg_catalog.pg_dist_local_group), false)")
        .map(|b| b.unwrap_or(false))
        .map_err(StoreError::spi("citus_is_worker"))
}

/// Whether `relation` (a qualified, quoted name) is a Citus table
/// (distributed or reference). Call only when [`loaded`]. Errors: SPI failures.
pub fn is_citus_table(relation: &str) -> StoreResult<bool> {
    Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition \
                        WHERE logicalrelid = pg_catalog.to_regclass($1))",
        &[DatumWithOid::from(relation)],
    )
    .map(|b| b.unwrap_or(false))
    .map_err(StoreError::spi("citus_is_citus_table"))
}

/// Whether Citus delegates calls of `function` (a `regprocedure` text) to
/// the worker owning its distribution argument (`create_distributed_function`
/// with a distribution argument). Call only when [`loaded`]. Errors: SPI failures.
pub fn is_delegated(function: &str) -> StoreResult<bool> {
    Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_object \
                        WHERE classid = 'pg_catalog.pg_proc'::pg_catalog.regclass \
                          AND objid = pg_catalog.to_regprocedure($1) \
                          AND distribution_argument_index IS NOT NULL)",
        &[DatumWithOid::from(function)],
    )
    .map(|b| b.unwrap_or(false))
    .map_err(StoreError::spi("citus_is_delegated"))
}

/// `create_distributed_table(relation, column, colocate_with => colocate)`.
/// Existing rows are copied to the shards. Errors: Citus's ERRORs unwind.
pub fn distribute_table(relation: &str, column: &str, colocate: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.create_distributed_table(pg_catalog.to_regclass($1), $2, colocate_with => $3)",
            None,
            &[DatumWithOid::from(relation), DatumWithOid::from(column), DatumWithOid::from(colocate)],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("create_distributed_table"))
}

/// `create_reference_table(relation)`: a copy on every node.
/// Errors: Citus's ERRORs unwind.
pub fn reference_table(relation: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.create_reference_table(pg_catalog.to_regclass($1))",
            None,
            &[DatumWithOid::from(relation)],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("create_reference_table"))
}

/// Detaches `relations` (qualified names of the extension's tables) from the
/// extension and drops them; Citus drops their shards on every node.
/// Errors: SPI failures; Citus's ERRORs unwind.
pub fn drop_member_tables(relations: &[&str]) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        // Citus NOTICEs that it does not propagate member changes: true and
        // beside the point here (the whole extension goes).
        let previous = client
            .select("SELECT pg_catalog.current_setting('client_min_messages')", None, &[])?
            .first()
            .get_one::<String>()?
            .unwrap_or_else(|| "notice".to_owned());
        client.update("SELECT pg_catalog.set_config('client_min_messages', 'warning', true)", None, &[])?;
        for relation in relations {
            client.update(&format!("ALTER EXTENSION syncular DROP TABLE {relation}"), None, &[])?;
            client.update(&format!("DROP TABLE {relation}"), None, &[])?;
        }
        client.update(
            "SELECT pg_catalog.set_config('client_min_messages', $1, true)",
            None,
            &[DatumWithOid::from(previous.as_str())],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("drop_member_tables"))
}

/// `ALTER DATABASE <current> SET syncular.router_statements = on` and the
/// same for this session (`on`), or `ALTER DATABASE <current> RESET
/// syncular.router_statements` (`!on`, after the extension's Citus tables are
/// gone). Citus propagates `ALTER DATABASE` to every node. Errors: SPI failures.
pub fn set_router_statements(on: bool) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        let db = client
            .select("SELECT pg_catalog.quote_ident(pg_catalog.current_database())", None, &[])?
            .first()
            .get_one::<String>()?
            .unwrap_or_default();
        let action = if on { "SET syncular.router_statements = on" } else { "RESET syncular.router_statements" };
        client.update(&format!("ALTER DATABASE {db} {action}"), None, &[])?;
        if on {
            client.update("SELECT pg_catalog.set_config('syncular.router_statements', 'on', false)", None, &[])?;
        }
        Ok(())
    })
    .map_err(StoreError::spi("set_router_statements"))
}
