//! DDL of the capture triggers on one app table (docs/src/guide/plain-sql.md "Writing with plain
//! SQL"). Per app table:
//!
//! | trigger | when | function |
//! |---|---|---|
//! | `syncular_capture_start` | BEFORE INSERT OR UPDATE OR DELETE, per statement | `syncular.capture_statement_start()` — partition from `syncular.partition`, its registry row created on first sight (the counter row is taken by the log write at the statement's end) |
//! | `zz_syncular_capture_row` | BEFORE INSERT OR UPDATE OR DELETE, per row | `syncular.capture_row()` — computes `_sync_*`, refuses what clients could not hold |
//! | `syncular_capture_insert` / `_update` / `_delete` | AFTER …, per statement, with the transition table | `syncular.capture_statement()` — one commit per statement and event |
//! | `syncular_capture_truncate` | BEFORE TRUNCATE | `syncular.capture_truncate()` — refused |
//!
//! Postgres runs same-kind triggers in name order: the row trigger's `zz_`
//! name makes it run after the app's own BEFORE ROW triggers, so the payload
//! it encodes is the row that is stored. Every trigger gets the IR table name
//! as its argument and `DEPENDS ON EXTENSION syncular`, so `DROP EXTENSION`
//! removes the triggers and keeps the app table.

use pgrx::spi::{quote_identifier, quote_literal, Spi};

use crate::store::app_table_ddl::qualified_name;
use crate::store::capture::transition::{NEW_TABLE, OLD_TABLE};
use crate::store::{StoreError, StoreResult};

/// The capture's BEFORE ROW trigger; it must run last of its kind.
pub const ROW_TRIGGER_NAME: &str = "zz_syncular_capture_row";

/// Names of every capture trigger, for drop and install.
pub const TRIGGER_NAMES: [&str; 6] = [
    "syncular_capture_start",
    "zz_syncular_capture_row",
    "syncular_capture_insert",
    "syncular_capture_update",
    "syncular_capture_delete",
    "syncular_capture_truncate",
];

/// Whether the capture trigger functions exist: not while the catalog is
/// still at 0.1.0 under a newer library (before `ALTER EXTENSION syncular
/// UPDATE`). Errors: SPI failures.
pub fn functions_installed() -> StoreResult<bool> {
    Spi::get_one::<bool>(
        "SELECT pg_catalog.to_regprocedure('syncular.capture_row()') IS NOT NULL \
            AND pg_catalog.to_regprocedure('syncular.capture_statement()') IS NOT NULL \
            AND pg_catalog.to_regprocedure('syncular.capture_statement_start()') IS NOT NULL \
            AND pg_catalog.to_regprocedure('syncular.capture_truncate()') IS NOT NULL",
    )
    .map(|b| b.unwrap_or(false))
    .map_err(StoreError::spi("capture_functions_installed"))
}

/// (Re)creates the capture triggers on app table `table` of `app_schema`
/// (idempotent: existing ones are dropped first). Errors: SPI failures.
pub fn install(app_schema: &str, table: &str) -> StoreResult<()> {
    let t = qualified_name(app_schema, table);
    let arg = quote_literal(table);
    let mut sql = drop_statements(&t)?;
    let create = format!(
        "CREATE TRIGGER syncular_capture_start BEFORE INSERT OR UPDATE OR DELETE ON {t} \
           FOR EACH STATEMENT EXECUTE FUNCTION syncular.capture_statement_start({arg});\n\
         CREATE TRIGGER zz_syncular_capture_row BEFORE INSERT OR UPDATE OR DELETE ON {t} \
           FOR EACH ROW EXECUTE FUNCTION syncular.capture_row({arg});\n\
         CREATE TRIGGER syncular_capture_insert AFTER INSERT ON {t} REFERENCING NEW TABLE AS {NEW_TABLE} \
           FOR EACH STATEMENT EXECUTE FUNCTION syncular.capture_statement({arg});\n\
         CREATE TRIGGER syncular_capture_update AFTER UPDATE ON {t} REFERENCING NEW TABLE AS {NEW_TABLE} \
           FOR EACH STATEMENT EXECUTE FUNCTION syncular.capture_statement({arg});\n\
         CREATE TRIGGER syncular_capture_delete AFTER DELETE ON {t} REFERENCING OLD TABLE AS {OLD_TABLE} \
           FOR EACH STATEMENT EXECUTE FUNCTION syncular.capture_statement({arg});\n\
         CREATE TRIGGER syncular_capture_truncate BEFORE TRUNCATE ON {t} \
           FOR EACH STATEMENT EXECUTE FUNCTION syncular.capture_truncate({arg})"
    );
    sql.extend(create.split(";\n").map(str::to_owned));
    for name in TRIGGER_NAMES {
        sql.push(format!("ALTER TRIGGER {} ON {t} DEPENDS ON EXTENSION syncular", quote_identifier(name)));
    }
    Spi::connect_mut(|client| {
        for statement in &sql {
            client.update(statement, None, &[])?;
        }
        Ok(())
    })
    .map_err(StoreError::spi("install_capture_triggers"))
}

/// Drops the capture triggers of app table `table` of `app_schema` (those
/// that exist): a table distributed by Citus carries none (docs/src/operate/citus.md "Scaling
/// out with Citus"). Errors: SPI failures.
pub fn remove(app_schema: &str, table: &str) -> StoreResult<()> {
    let statements = drop_statements(&qualified_name(app_schema, table))?;
    Spi::connect_mut(|client| {
        for statement in &statements {
            client.update(statement, None, &[])?;
        }
        Ok(())
    })
    .map_err(StoreError::spi("remove_capture_triggers"))
}

/// `DROP TRIGGER` for each capture trigger that exists on `t` (a quoted,
/// qualified name): only the existing ones, since `DROP TRIGGER IF EXISTS`
/// would NOTICE for each missing one.
fn drop_statements(t: &str) -> StoreResult<Vec<String>> {
    let existing: Vec<String> = Spi::connect(|client| {
        client
            .select(
                "SELECT tgname::text FROM pg_catalog.pg_trigger WHERE tgrelid = pg_catalog.to_regclass($1) AND tgname::text = ANY($2)",
                None,
                &[t.into(), TRIGGER_NAMES.iter().map(|n| (*n).to_owned()).collect::<Vec<String>>().into()],
            )?
            .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<String>, _>>()
    })
    .map_err(StoreError::spi("list_capture_triggers"))?;
    Ok(existing.iter().map(|name| format!("DROP TRIGGER {} ON {t}", quote_identifier(name))).collect())
}

/// The OID of app table `table` of `app_schema`, when it exists.
/// Errors: SPI failures.
pub fn table_oid(app_schema: &str, table: &str) -> StoreResult<Option<pgrx::pg_sys::Oid>> {
    Spi::get_one_with_args::<pgrx::pg_sys::Oid>(
        "SELECT pg_catalog.to_regclass($1)::oid",
        &[pgrx::datum::DatumWithOid::from(qualified_name(app_schema, table).as_str())],
    )
    .map_err(StoreError::spi("capture_table_oid"))
}
