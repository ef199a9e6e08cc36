//! `syncular.distribute()` (docs/src/operate/citus.md).

use pgrx::prelude::*;

use crate::api::errors::OrRaise;
use crate::engine::lifecycle::distribute;

/// `syncular.distribute() returns table(log_tables integer, reference_tables
/// integer, app_tables integer)` — makes this database's sync tables Citus
/// tables, on the coordinator: every `partition`-keyed log table distributed
/// on `partition`, colocated with `sync_partitions`; the four partition-less
/// tables (schema marker, table placements, resolver, NOTIFY key) reference
/// tables; every registered app table distributed on `_sync_partition` in the
/// same colocation group, without its capture triggers. Then
/// `syncular.router_statements` is set for the database (`ALTER DATABASE …
/// SET`, which Citus propagates to every node) and this session. Idempotent:
/// the counts are of tables newly distributed. Later `register_schema` calls
/// distribute the app tables they create. Errors: `syncular.citus_missing`
/// (55000) without the `citus` extension, `syncular.citus_worker` (55000) on
/// a worker; Citus's own errors (e.g. not a superuser). Admin only.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn distribute() -> TableIterator<'static, (name!(log_tables, i32), name!(reference_tables, i32), name!(app_tables, i32))> {
    let d = distribute::distribute().or_raise();
    TableIterator::once((d.log_tables, d.reference_tables, d.app_tables))
}
