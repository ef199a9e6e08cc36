//! The log's lifecycle in SQL (SPEC §4.6, §2.1; docs/src/sql/lifecycle.md "The log's
//! lifecycle"): `syncular.advance_horizon`, `syncular.prune_batch`,
//! `syncular.rotate_log_epoch`, `syncular.drop_partition_batch`,
//! `syncular.partition_stats`, and the procedures `syncular.prune` and
//! `syncular.drop_partition` (sql/lifecycle.sql) that loop over the batches
//! and COMMIT between them.
//!
//! Administrative: `SECURITY DEFINER` with a pinned `search_path`, EXECUTE
//! revoked from PUBLIC and not granted to `syncular_gateway`
//! (sql/privileges.sql) — an owner may grant them to a maintenance role.
//! NULL or empty required text arguments and a `max_rows` below 1 fail with
//! `syncular.invalid_argument` (22023).

use pgrx::prelude::*;

use crate::api::errors::{raise, OrRaise};
use crate::api::sync::required_text;
use crate::engine::error::{EngineError, HostCode};
use crate::engine::lifecycle::{drop, horizon, prune, rotate, stats};

// The procedures `syncular.prune` and `syncular.drop_partition`, after the
// batch functions they call.
extension_sql_file!(
    "../../sql/lifecycle.sql",
    name = "lifecycle_procedures",
    requires = [advance_horizon, prune_batch, drop_partition_batch]
);

fn batch_size(max_rows: Option<i32>) -> i32 {
    match max_rows {
        Some(n) if n >= 1 => n,
        other => raise(EngineError::host(
            HostCode::InvalidArgument,
            format!("argument max_rows must be at least 1, got {}", other.map_or("NULL".into(), |n| n.to_string())),
        )),
    }
}

/// `syncular.advance_horizon(partition text) returns bigint` — raises the
/// partition's `horizonSeq` to the largest value the §4.6 floors allow now
/// (`syncular.prune_active_window`, `syncular.prune_age_limit`,
/// `syncular.prune_min_commits`) and returns it; never lowers it. NULL for
/// a partition without a counter row. Deletes nothing: pulls with a cursor
/// below the new horizon are answered `reset` (`sync.cursor_expired`) from
/// now on. Locks the partition's counter row (pushes wait) until the
/// transaction ends — commit right after. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn advance_horizon(partition: Option<&str>) -> Option<i64> {
    let partition = required_text(partition, "partition");
    horizon::advance(partition).or_raise().map(|(_, new)| new)
}

/// `syncular.prune_batch(partition text, max_rows integer DEFAULT 10000)
/// returns table(commits, changes, change_scopes, tombstones, push_results,
/// clients bigint, fence_busy boolean, done boolean)` — one bounded batch:
/// the oldest ≤ `max_rows` commits at or below the horizon with their
/// changes, change-scope entries and tombstones; else ≤ `max_rows` push
/// outcomes older than `syncular.push_result_retention`; else ≤ `max_rows`
/// client records older than `syncular.client_retention`. `fence_busy`: a
/// log reader held the pruning fence for 200 ms, nothing was deleted, call
/// again. `done`: nothing was left. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn prune_batch(
    partition: Option<&str>,
    max_rows: default!(Option<i32>, 10000),
) -> TableIterator<
    'static,
    (
        name!(commits, i64),
        name!(changes, i64),
        name!(change_scopes, i64),
        name!(tombstones, i64),
        name!(push_results, i64),
        name!(clients, i64),
        name!(fence_busy, bool),
        name!(done, bool),
    ),
> {
    let partition = required_text(partition, "partition");
    let b = prune::batch(partition, batch_size(max_rows)).or_raise();
    TableIterator::once((
        b.log.commits,
        b.log.changes,
        b.log.change_scopes,
        b.log.tombstones,
        b.push_results,
        b.clients,
        b.fence_busy,
        b.done(),
    ))
}

/// `syncular.rotate_log_epoch(partition text DEFAULT NULL) returns
/// table(partition text, log_epoch text, clients_deleted bigint)` — the
/// §2.1 backup-restore rotation of `partition` (created rotated when
/// unknown) or, with NULL, of every registered partition: a new
/// unpredictable `logEpoch`, wire version 1 refused from now on
/// (`sync.client_wire_unsupported`), the partition's client records
/// deleted, and a `syncular_scopes` notification so gateways reset their
/// realtime sessions. Push outcomes are kept (outbox replays answer
/// `cached`). Errors: `syncular.invalid_argument` (empty partition).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn rotate_log_epoch(
    partition: default!(Option<&str>, "NULL"),
) -> TableIterator<'static, (name!(partition, String), name!(log_epoch, String), name!(clients_deleted, i64))> {
    let partition = partition.map(|p| required_text(Some(p), "partition"));
    let rotated = rotate::rotate(partition).or_raise();
    TableIterator::new(rotated.into_iter().map(|r| (r.partition, r.log_epoch, r.clients_deleted)))
}

/// `syncular.drop_partition_batch(partition text, max_rows integer DEFAULT
/// 10000) returns table(rows_deleted bigint, done boolean)` — deletes up to
/// `max_rows` rows of `partition` (app tables, children first, without
/// capturing them; then every `sync_*` table, the registry row last):
/// `rows_deleted` of them; `done` once the batch reached the registry row
/// (the partition is gone — call no further batch: it would delete the
/// partition created anew by a later request). Errors:
/// `syncular.invalid_argument` (22023).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn drop_partition_batch(
    partition: Option<&str>,
    max_rows: default!(Option<i32>, 10000),
) -> TableIterator<'static, (name!(rows_deleted, i64), name!(done, bool))> {
    let partition = required_text(partition, "partition");
    let b = drop::batch(partition, i64::from(batch_size(max_rows))).or_raise();
    TableIterator::once((b.deleted, b.done))
}

/// `syncular.partition_stats(partition text DEFAULT NULL) returns table(…)`
/// — one row per partition (or only `partition`): `log_epoch`,
/// `epoch_required`, `last_seen_ms`, `max_commit_seq`, `horizon_seq`,
/// `prune_target` (the horizon `advance_horizon` would set now),
/// `retained_commits`, `log_bytes` (commits, changes and change-scope
/// entries, on-disk row sizes), `oldest_commit_age_ms`, `app_rows`,
/// `clients`, `active_clients` (updated within the active window),
/// `laggard_client_id` / `laggard_cursor` / `laggard_last_seen_ms` (the
/// active client with the smallest cursor: what holds the horizon),
/// `push_results`. Counts scan the partition's rows.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn partition_stats(
    partition: default!(Option<&str>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(partition, String),
        name!(log_epoch, Option<String>),
        name!(epoch_required, bool),
        name!(last_seen_ms, Option<i64>),
        name!(max_commit_seq, i64),
        name!(horizon_seq, i64),
        name!(prune_target, i64),
        name!(retained_commits, i64),
        name!(log_bytes, i64),
        name!(oldest_commit_age_ms, Option<i64>),
        name!(app_rows, i64),
        name!(clients, i64),
        name!(active_clients, i64),
        name!(laggard_client_id, Option<String>),
        name!(laggard_cursor, Option<i64>),
        name!(laggard_last_seen_ms, Option<i64>),
        name!(push_results, i64),
    ),
> {
    let rows = stats::stats(partition).or_raise();
    TableIterator::new(rows.into_iter().map(|s| {
        let (laggard_id, laggard_cursor, laggard_seen) = match s.laggard {
            Some((id, cursor, seen)) => (Some(id), Some(cursor), Some(seen)),
            None => (None, None, None),
        };
        (
            s.row.partition,
            s.row.log_epoch,
            s.row.epoch_required,
            s.row.last_seen_ms,
            s.row.max_commit_seq,
            s.row.horizon_seq,
            s.prune_target,
            s.row.retained_commits,
            s.row.log_bytes,
            s.oldest_commit_age_ms,
            s.app_rows,
            s.row.clients,
            s.row.active_clients,
            laggard_id,
            laggard_cursor,
            laggard_seen,
            s.row.push_results,
        )
    }))
}
