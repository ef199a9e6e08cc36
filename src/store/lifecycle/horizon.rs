//! The inputs of a partition's §4.6 horizon and its advance.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// What the §4.6 floors are computed from, read in one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HorizonInputs {
    /// `sync_partitions.horizon_seq` now.
    pub horizon_seq: i64,
    /// `sync_partitions.max_commit_seq` now.
    pub max_commit_seq: i64,
    /// The smallest cursor (≥ 0) of the clients whose record was updated at
    /// or after the active-window start, with that client: `(cursor,
    /// client_id, updated_at_ms)`. `None`: no active client holds the log.
    pub laggard: Option<(i64, String, i64)>,
    /// The largest `commitSeq` among the retained commits created before
    /// the age limit; 0 when none. (Reads the retained commits past the
    /// limit: exactly the ones the next batches delete.)
    pub age_forced_seq: i64,
}

const INPUTS_SQL: &str = "\
SELECT p.horizon_seq, p.max_commit_seq, l.cursor, l.client_id, l.updated_at_ms, \
       COALESCE((SELECT max(m.commit_seq) FROM syncular.sync_commits m \
                 WHERE m.partition = $1 AND m.created_at_ms < $3), 0) \
FROM syncular.sync_partitions p \
LEFT JOIN LATERAL (SELECT c.cursor, c.client_id, c.updated_at_ms FROM syncular.sync_clients c \
                   WHERE c.partition = $1 AND c.updated_at_ms >= $2 AND c.cursor >= 0 \
                   ORDER BY c.cursor, c.client_id LIMIT 1) l ON true \
WHERE p.partition = $1";

/// Reads the horizon inputs of `partition`: clients updated at or after
/// `active_since_ms` are active; commits created before `forced_before_ms`
/// are past the age limit. `None` when the partition has no counter row.
/// Errors: SPI failures.
pub fn read_inputs(partition: &str, active_since_ms: i64, forced_before_ms: i64) -> StoreResult<Option<HorizonInputs>> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(
            client,
            INPUTS_SQL,
            Some(1),
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(active_since_ms),
                DatumWithOid::from(forced_before_ms),
            ],
        )?;
        if table.is_empty() {
            return Ok(None);
        }
        let row = table.first();
        let laggard = match (row.get::<i64>(3)?, row.get::<String>(4)?, row.get::<i64>(5)?) {
            (Some(cursor), Some(client_id), Some(seen)) => Some((cursor, client_id, seen)),
            _ => None,
        };
        Ok(Some(HorizonInputs {
            horizon_seq: row.get::<i64>(1)?.unwrap_or(0),
            max_commit_seq: row.get::<i64>(2)?.unwrap_or(0),
            laggard,
            age_forced_seq: row.get::<i64>(6)?.unwrap_or(0),
        }))
    })
    .map_err(StoreError::spi("read_horizon_inputs"))
}

/// Raises `horizon_seq` of `partition` to `target` (never lowers it) and
/// returns the stored value (`None`: no counter row). Locks the counter row
/// until the end of the transaction — callers commit right after.
/// Errors: SPI failures.
pub fn raise_horizon(partition: &str, target: i64) -> StoreResult<Option<i64>> {
    Spi::connect_mut(|client| {
        let table = client.update(
            "UPDATE syncular.sync_partitions SET horizon_seq = $2 \
             WHERE partition = $1 AND horizon_seq < $2 RETURNING horizon_seq",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(target)],
        )?;
        if !table.is_empty() {
            return table.first().get_one::<i64>();
        }
        let current = client.update(
            "SELECT horizon_seq FROM syncular.sync_partitions WHERE partition = $1",
            None,
            &[DatumWithOid::from(partition)],
        )?;
        if current.is_empty() {
            return Ok(None);
        }
        current.first().get_one::<i64>()
    })
    .map_err(StoreError::spi("raise_horizon"))
}

/// Every partition with a counter row, in name order.
/// Errors: SPI failures.
pub fn partitions() -> StoreResult<Vec<String>> {
    Spi::connect(|client| {
        let table = client.select("SELECT partition FROM syncular.sync_partitions ORDER BY partition", None, &[])?;
        table.map(|row| row.get::<String>(1).map(Option::unwrap_or_default)).collect::<Result<Vec<_>, _>>()
    })
    .map_err(StoreError::spi("list_partitions"))
}
