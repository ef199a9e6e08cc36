//! Scaling out with Citus (docs/src/operate/citus.md): which tables
//! are distributed how, and the guards that keep admin functions on the
//! coordinator.
//!
//! Every log table is keyed by `partition` and distributed on it, all
//! colocated with `sync_partitions`, so one partition's counter, log,
//! scopes, clients and outcomes live on one node and every statement of a
//! sync round is routed to that node's shard (the single-shard rule in
//! [`crate::store`]). App tables are
//! distributed on `_sync_partition` in the same colocation group. The
//! partition-less tables (schema marker, table placements, resolver,
//! NOTIFY key) become reference tables: a copy on every node, which the
//! router joins locally.
//!
//! A distributed app table carries no capture triggers: Citus runs a
//! table's triggers on its shards, on the workers, where neither the
//! caller's `syncular.partition` nor the engine's own-write guard exists.
//! Writes reach clients only through `syncular.sync` and `syncular.commit`.
//!
//! This module holds the table lists and the guards every layer asks;
//! distributing everything (`syncular.distribute`) is the operator's
//! [`crate::engine::lifecycle::distribute`].

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::app_table_ddl::PARTITION_COLUMN;
use crate::store::{capture, citus};

/// The log tables distributed on `partition`, the colocation anchor first.
pub const DISTRIBUTED_TABLES: [&str; 20] = [
    "syncular.sync_partitions",
    "syncular.sync_partition_registry",
    "syncular.sync_row_scopes",
    "syncular.sync_commits",
    "syncular.sync_changes",
    "syncular.sync_change_scopes",
    "syncular.sync_push_results",
    "syncular.sync_reactions",
    "syncular.sync_clients",
    "syncular.sync_blob_refs",
    "syncular.sync_tombstones",
    "syncular.sync_auth_leases",
    "syncular.sync_blobs",
    "syncular.sync_blob_chunks",
    "syncular.sync_segments",
    "syncular.sync_segment_chunks",
    "syncular.sync_segment_publications",
    "syncular.sync_round_failures",
    "syncular.sync_blob_objects",
    "syncular.sync_blob_grants",
];

/// The partition-less tables, made reference tables.
pub const REFERENCE_TABLES: [&str; 12] = [
    "syncular.sync_schema_versions",
    "syncular.sync_schema_tables",
    "syncular.sync_scope_resolver",
    "syncular.sync_write_validators",
    "syncular.sync_commit_validator",
    "syncular.sync_reaction_planner",
    "syncular.sync_notification_key",
    "syncular.sync_lease_key",
    "syncular.sync_segment_url_keys",
    "syncular.sync_object_store",
    "syncular.sync_object_store_keys",
    "syncular.sync_segment_objects",
];

/// The colocation group every distributed table joins.
pub const ANCHOR: &str = "syncular.sync_partitions";

/// `syncular.citus_missing` unless Citus is installed here;
/// `syncular.citus_worker` on a Citus worker.
pub fn require_coordinator() -> EngineResult<()> {
    if !citus::loaded()? {
        return Err(EngineError::host(
            HostCode::CitusMissing,
            "the citus extension is not installed in this database (CREATE EXTENSION citus first)",
        ));
    }
    refuse_worker()
}

/// `syncular.citus_worker` when this node is a Citus worker: the schema,
/// its tables and their distribution are managed from the coordinator only.
pub fn refuse_worker() -> EngineResult<()> {
    if citus::loaded()? && citus::is_worker()? {
        return Err(EngineError::host(
            HostCode::CitusWorker,
            "this node is a Citus worker: run syncular's admin functions on the coordinator",
        ));
    }
    Ok(())
}

/// The functions that take the pruning fence shared (log readers).
const FENCE_READERS: [&str; 4] = [
    "syncular.sync(text,text,bytea,jsonb,text)",
    "syncular.pull(text,text,bytea,jsonb,text)",
    "syncular.realtime_deltas(text,jsonb,integer,bigint)",
    "syncular.realtime_pass(text,jsonb,integer,bigint,boolean[])",
];

/// The pruning fence is an advisory lock: it excludes only on one node. Log
/// readers take it where they run — on the coordinator, or on the
/// partition's worker when Citus delegates them — so a pruning batch must
/// run on the same side: `syncular.citus_worker` when the readers are
/// delegated and this batch runs on the coordinator (delegate
/// `prune_batch` too), when this batch runs on a worker and they are not,
/// or when only some of them are delegated. Nothing without Citus.
pub fn check_fence_placement() -> EngineResult<()> {
    if !citus::loaded()? {
        return Ok(());
    }
    let mut delegated = Vec::with_capacity(FENCE_READERS.len());
    for f in FENCE_READERS {
        delegated.push(citus::is_delegated(f)?);
    }
    let on_worker = citus::is_worker()?;
    if delegated.iter().all(|d| *d == on_worker) {
        return Ok(());
    }
    let batch_delegated = citus::is_delegated("syncular.prune_batch(text,integer)")?;
    Err(EngineError::host(
        HostCode::CitusWorker,
        if !on_worker && batch_delegated && delegated.iter().all(|d| *d) {
            "syncular.prune_batch is delegated, but this call ran on the coordinator: Citus delegates only a top-level SELECT * FROM syncular.prune_batch(…) outside a transaction block (CALL syncular.prune nests it); call advance_horizon and prune_batch that way (docs/src/operate/citus.md)"
        } else if on_worker {
            "this pruning batch runs on a Citus worker but syncular.sync, syncular.pull, syncular.realtime_deltas and syncular.realtime_pass are not all delegated to workers: the pruning fence would not exclude them (docs/src/operate/citus.md)"
        } else {
            "syncular.sync, syncular.pull, syncular.realtime_deltas or syncular.realtime_pass is delegated to the workers: delegate all four and syncular.prune_batch (distribution argument $1), so the pruning fence is taken on the partition's worker (docs/src/operate/citus.md)"
        },
    ))
}

/// Whether the log tables are distributed (then `register_schema`
/// distributes the app tables it creates).
pub fn is_distributed() -> EngineResult<bool> {
    Ok(citus::loaded()? && citus::is_citus_table(ANCHOR)?)
}

/// Whether app table `table` of `app_schema` is a Citus table (false
/// without Citus).
pub fn is_citus_app_table(app_schema: &str, table: &str) -> EngineResult<bool> {
    Ok(citus::loaded()? && citus::is_citus_table(&crate::store::app_table_ddl::qualified_name(app_schema, table))?)
}

/// Distributes one app table on `_sync_partition`, colocated with the log,
/// after removing its capture triggers. `false` when it already was.
pub fn distribute_app_table(app_schema: &str, table: &str, qualified: &str) -> EngineResult<bool> {
    if citus::is_citus_table(qualified)? {
        return Ok(false);
    }
    capture::triggers::remove(app_schema, table)?;
    citus::distribute_table(qualified, PARTITION_COLUMN, ANCHOR)?;
    Ok(true)
}

/// Before `DROP EXTENSION syncular` ([`crate::api::drop_guard`]): drops
/// every Citus table of schema `syncular` (Citus removes their shards on
/// every node), which the command drops anyway; nothing without Citus.
pub fn release_for_drop() -> EngineResult<()> {
    if !citus::loaded()? {
        return Ok(());
    }
    let mut tables = Vec::new();
    for table in DISTRIBUTED_TABLES.iter().chain(REFERENCE_TABLES.iter()) {
        if citus::is_citus_table(table)? {
            tables.push(*table);
        }
    }
    if !tables.is_empty() {
        citus::drop_member_tables(&tables)?;
        citus::set_router_statements(false)?;
    }
    Ok(())
}
