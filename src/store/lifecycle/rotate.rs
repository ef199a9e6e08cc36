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
/// client records of those partitions are deleted. One partition at a time,
/// in partition order, each with statements keyed on it (so Citus routes
/// each to one shard, and evaluates the random epoch once, on the node the
/// call runs on). Errors: SPI failures.
pub fn rotate(partition: Option<&str>, now_ms: i64) -> StoreResult<Vec<Rotated>> {
    Spi::connect_mut(|client| {
        let partitions: Vec<String> = match partition {
            Some(p) => vec![p.to_owned()],
            None => client
                .select("SELECT partition FROM syncular.sync_partition_registry ORDER BY partition", None, &[])?
                .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
        };
        let mut out = Vec::with_capacity(partitions.len());
        for p in partitions {
            let log_epoch = client
                .update(
                    "INSERT INTO syncular.sync_partition_registry AS r \
                       (partition, log_epoch, epoch_required, last_authenticated_at_ms) \
                     VALUES ($1, pg_catalog.gen_random_uuid()::text, true, $2) \
                     ON CONFLICT (partition) DO UPDATE SET log_epoch = EXCLUDED.log_epoch, epoch_required = true \
                     RETURNING r.log_epoch",
                    None,
                    &[DatumWithOid::from(p.as_str()), DatumWithOid::from(now_ms)],
                )?
                .first()
                .get_one::<String>()?
                .unwrap_or_default();
            let clients_deleted = client
                .update(
                    "DELETE FROM syncular.sync_clients WHERE partition = $1",
                    None,
                    &[DatumWithOid::from(p.as_str())],
                )?
                .len() as i64;
            // Their ROUND_FAILURE reports go with them: a client id bound anew starts clean.
            client.update(
                "DELETE FROM syncular.sync_round_failures WHERE partition = $1",
                None,
                &[DatumWithOid::from(p.as_str())],
            )?;
            out.push(Rotated { partition: p, log_epoch, clients_deleted });
        }
        Ok(out)
    })
    .map_err(StoreError::spi("rotate_log_epoch"))
}
