//! The operator's view of each partition (docs/src/sql/lifecycle.md,
//! `syncular.partition_stats`). Counts scan the partition's rows: an
//! operator's query, not a hot path.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::{StoreError, StoreResult};

/// One partition's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRow {
    /// Host partition.
    pub partition: String,
    /// Registry `log_epoch` (`None`: no registry row).
    pub log_epoch: Option<String>,
    /// Registry `epoch_required`.
    pub epoch_required: bool,
    /// Registry last-seen time, Unix ms.
    pub last_seen_ms: Option<i64>,
    /// Counter row `max_commit_seq` (0 without one).
    pub max_commit_seq: i64,
    /// Counter row `horizon_seq` (0 without one).
    pub horizon_seq: i64,
    /// `sync_commits` rows.
    pub retained_commits: i64,
    /// `created_at_ms` of the oldest retained commit.
    pub oldest_commit_ms: Option<i64>,
    /// Bytes of the partition's commits, changes and change-scope entries
    /// (`pg_column_size` of each row: on-disk, after compression).
    pub log_bytes: i64,
    /// `sync_clients` rows.
    pub clients: i64,
    /// Client records updated at or after the active-window start.
    pub active_clients: i64,
    /// `sync_push_results` rows.
    pub push_results: i64,
}

/// The stored state of partition `$1`, one row when it is known; every
/// subquery names `partition = $1` (one shard under Citus).
const STATS_SQL: &str = "\
SELECT $1::text, r.log_epoch, COALESCE(r.epoch_required, false), r.last_authenticated_at_ms, \
       COALESCE(p.max_commit_seq, 0), COALESCE(p.horizon_seq, 0), \
       (SELECT count(*) FROM syncular.sync_commits c WHERE c.partition = $1), \
       (SELECT c.created_at_ms FROM syncular.sync_commits c WHERE c.partition = $1 \
        ORDER BY c.commit_seq LIMIT 1), \
       (SELECT COALESCE(sum(pg_column_size(c.*)), 0) FROM syncular.sync_commits c WHERE c.partition = $1) \
     + (SELECT COALESCE(sum(pg_column_size(c.*)), 0) FROM syncular.sync_changes c WHERE c.partition = $1) \
     + (SELECT COALESCE(sum(pg_column_size(c.*)), 0) FROM syncular.sync_change_scopes c WHERE c.partition = $1), \
       (SELECT count(*) FROM syncular.sync_clients c WHERE c.partition = $1), \
       (SELECT count(*) FROM syncular.sync_clients c WHERE c.partition = $1 AND c.updated_at_ms >= $2), \
       (SELECT count(*) FROM syncular.sync_push_results c WHERE c.partition = $1) \
FROM (SELECT 1) one \
LEFT JOIN syncular.sync_partition_registry r ON r.partition = $1 \
LEFT JOIN syncular.sync_partitions p ON p.partition = $1 \
WHERE r.partition IS NOT NULL OR p.partition IS NOT NULL";

/// Every known partition (registry or counter row), in order.
const PARTITIONS_SQL: &str = "\
SELECT partition FROM syncular.sync_partition_registry \
UNION SELECT partition FROM syncular.sync_partitions ORDER BY 1";

/// The stored state of every partition (or only `partition`); clients
/// updated at or after `active_since_ms` count as active. Errors: SPI failures.
pub fn partition_rows(partition: Option<&str>, active_since_ms: i64) -> StoreResult<Vec<PartitionRow>> {
    Spi::connect(|client| {
        let partitions: Vec<String> = match partition {
            Some(p) => vec![p.to_owned()],
            None => client
                .select(PARTITIONS_SQL, None, &[])?
                .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
        };
        let mut out = Vec::with_capacity(partitions.len());
        for p in &partitions {
            let table = client.select(
                STATS_SQL,
                None,
                &[DatumWithOid::from(p.as_str()), DatumWithOid::from(active_since_ms)],
            )?;
            for row in table {
                out.push(PartitionRow {
                    partition: row.get::<String>(1)?.unwrap_or_default(),
                    log_epoch: row.get::<String>(2)?,
                    epoch_required: row.get::<bool>(3)?.unwrap_or(false),
                    last_seen_ms: row.get::<i64>(4)?,
                    max_commit_seq: row.get::<i64>(5)?.unwrap_or(0),
                    horizon_seq: row.get::<i64>(6)?.unwrap_or(0),
                    retained_commits: row.get::<i64>(7)?.unwrap_or(0),
                    oldest_commit_ms: row.get::<i64>(8)?,
                    log_bytes: row.get::<i64>(9)?.unwrap_or(0),
                    clients: row.get::<i64>(10)?.unwrap_or(0),
                    active_clients: row.get::<i64>(11)?.unwrap_or(0),
                    push_results: row.get::<i64>(12)?.unwrap_or(0),
                });
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
    .map_err(StoreError::spi("partition_stats"))
}

/// Rows of `partition` in an app table given as its quoted qualified name.
/// Errors: SPI failures.
pub fn app_rows(qualified_table: &str, partition: &str) -> StoreResult<i64> {
    Spi::connect(|client| {
        let table = client.select(
            format!("SELECT count(*) FROM {qualified_table} WHERE _sync_partition = $1").as_str(),
            None,
            &[DatumWithOid::from(partition)],
        )?;
        Ok(table.first().get_one::<i64>()?.unwrap_or(0))
    })
    .map_err(StoreError::spi("partition_app_rows"))
}
