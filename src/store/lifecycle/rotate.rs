//! Log-epoch rotation (SPEC §2.1 backup-restore rule).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::{StoreError, StoreResult};

/// One rotated partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// Host partition.
    pub partition: String,
    /// Its new `logEpoch`.
    pub log_epoch: String,
    /// Client records deleted.
    pub clients_deleted: i64,
}

/// Every partition's registry row (or only `partition`'s, created when it
/// does not exist yet) gets a fresh unpredictable `log_epoch`
/// (`gen_random_uuid()`, 122 random bits) and `epoch_required = true`; the
/// client records of those partitions are deleted. Errors: SPI failures.
pub fn rotate(partition: Option<&str>, now_ms: i64) -> StoreResult<Vec<Rotated>> {
    Spi::connect_mut(|client| {
        let table = client.update(
            "WITH named AS ( \
                 INSERT INTO syncular.sync_partition_registry AS r \
                   (partition, log_epoch, epoch_required, last_authenticated_at_ms) \
                 SELECT $1, gen_random_uuid()::text, true, $2 WHERE $1 IS NOT NULL \
                 ON CONFLICT (partition) DO UPDATE \
                   SET log_epoch = gen_random_uuid()::text, epoch_required = true \
                 RETURNING r.partition, r.log_epoch), \
             every AS ( \
                 UPDATE syncular.sync_partition_registry r \
                 SET log_epoch = gen_random_uuid()::text, epoch_required = true \
                 WHERE $1 IS NULL RETURNING r.partition, r.log_epoch), \
             rotated AS (SELECT * FROM named UNION ALL SELECT * FROM every), \
             gone AS ( \
                 DELETE FROM syncular.sync_clients c USING rotated \
                 WHERE c.partition = rotated.partition RETURNING c.partition) \
             SELECT r.partition, r.log_epoch, \
                    (SELECT count(*) FROM gone WHERE gone.partition = r.partition) \
             FROM rotated r ORDER BY r.partition",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(now_ms)],
        )?;
        table
            .map(|row| {
                Ok(Rotated {
                    partition: row.get::<String>(1)?.unwrap_or_default(),
                    log_epoch: row.get::<String>(2)?.unwrap_or_default(),
                    clients_deleted: row.get::<i64>(3)?.unwrap_or(0),
                })
            })
            .collect::<Result<Vec<Rotated>, pgrx::spi::Error>>()
    })
    .map_err(StoreError::spi("rotate_log_epoch"))
}
