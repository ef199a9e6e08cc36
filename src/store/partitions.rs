//! `sync_partition_registry` and `sync_partitions` statements (SPEC §2.1,
//! §6.3 serialization): the registry row that carries a partition's
//! `logEpoch`, and the counter row whose lock serializes pushes and whose
//! `max_commit_seq` allocates dense `commitSeq` values (never a SEQUENCE).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// One `sync_partition_registry` row (§2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRow {
    /// The partition's current, non-empty, opaque log identity.
    pub log_epoch: String,
    /// True after an epoch rotation: wire-version-1 requests are refused.
    pub epoch_required: bool,
    /// Last request that named the partition, Unix ms.
    pub last_authenticated_at_ms: i64,
}

fn registry_row(
    table: pgrx::spi::SpiTupleTable<'_>,
) -> Result<Option<RegistryRow>, pgrx::spi::Error> {
    if table.is_empty() {
        return Ok(None);
    }
    let (epoch, required, seen) = table.first().get_three::<String, bool, i64>()?;
    Ok(Some(RegistryRow {
        log_epoch: epoch.unwrap_or_default(),
        epoch_required: required.unwrap_or(false),
        last_authenticated_at_ms: seen.unwrap_or(0),
    }))
}

/// Reads the registry row of `partition` (plain MVCC read, takes no lock).
/// Errors: SPI failures.
pub fn select_partition_registry(partition: &str) -> StoreResult<Option<RegistryRow>> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            "SELECT log_epoch, epoch_required, last_authenticated_at_ms \
             FROM syncular.sync_partition_registry WHERE partition = $1",
            Some(1),
            &[DatumWithOid::from(partition)],
        )?;
        registry_row(table)
    })
    .map_err(StoreError::spi("select_partition_registry"))
}

/// Creates the registry row of a partition seen for the first time, with a
/// fresh unpredictable `log_epoch` (`gen_random_uuid()`, 122 random bits) and
/// `epoch_required = false`. Returns the new row, or `None` when a
/// concurrent request created it first (`ON CONFLICT DO NOTHING`).
/// Errors: SPI failures.
pub fn insert_partition_registry(partition: &str, now_ms: i64) -> StoreResult<Option<RegistryRow>> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_partition_registry \
               (partition, log_epoch, epoch_required, last_authenticated_at_ms) \
             VALUES ($1, gen_random_uuid()::text, false, $2) \
             ON CONFLICT (partition) DO NOTHING \
             RETURNING log_epoch, epoch_required, last_authenticated_at_ms",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(now_ms)],
        )?;
        registry_row(table)
    })
    .map_err(StoreError::spi("insert_partition_registry"))
}

/// Refreshes `last_authenticated_at_ms` to `now_ms` (never backwards) without
/// waiting: when another open transaction holds the registry row (it is
/// refreshing it too), this request's refresh is skipped (`SKIP LOCKED`), so
/// concurrent requests of one partition never queue on the registry row.
/// Returns whether the row was updated. Errors: SPI failures.
pub fn refresh_partition_last_seen(partition: &str, now_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            "UPDATE syncular.sync_partition_registry r \
             SET last_authenticated_at_ms = $2 \
             WHERE r.partition = $1 AND r.last_authenticated_at_ms < $2 \
               AND r.ctid = (SELECT l.ctid FROM syncular.sync_partition_registry l \
                             WHERE l.partition = $1 FOR UPDATE SKIP LOCKED) \
             RETURNING 1",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(now_ms)],
        )?;
        Ok(!table.is_empty())
    })
    .map_err(StoreError::spi("refresh_partition_last_seen"))
}

/// Creates the `sync_partitions` counter row (`max_commit_seq = 0`) when it
/// does not exist yet; a no-op otherwise. Errors: SPI failures.
pub fn insert_partition_counter(partition: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_partitions (partition, max_commit_seq) VALUES ($1, 0) \
             ON CONFLICT (partition) DO NOTHING",
            None,
            &[DatumWithOid::from(partition)],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_partition_counter"))
}
