//! `sync_round_failures`: the `ROUND_FAILURE` reports of wire-version-3
//! clients (SPEC §1.5 of that generation; `crates/protocol/WIRE_V3.md`), per
//! client and code — how many reports, and the server clock of the last one.
//! Written only by a request that carries a report; read by operators
//! (`syncular.round_failures`); deleted with their client record (pruning,
//! an epoch rotation) and with the partition.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Distinct codes kept per client; reports of further codes are counted
/// under [`OTHER_CODES`] (a client choosing its codes cannot grow the table
/// without bound).
pub const MAX_CODES_PER_CLIENT: i64 = 16;

/// The code further codes of a client are counted under.
pub const OTHER_CODES: &str = "syncular.other_codes";

/// Counts one report of `code` by `client_id` in `partition` at `now_ms`
/// (inserted with `reports = 1`, or incremented); once the client has
/// [`MAX_CODES_PER_CLIENT`] codes, a new one counts as [`OTHER_CODES`]. Two
/// plain statements (a read of the client's codes, an upsert), each naming
/// the partition: router-shaped under Citus, and a request carrying a report
/// is rare. Errors: SPI failures.
pub fn record(partition: &str, client_id: &str, code: &str, now_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        let (known, codes) = {
            let t = plan_cache::execute(
                client,
                "SELECT bool_or(code = $3), count(*) FROM syncular.sync_round_failures \
                  WHERE partition = $1 AND client_id = $2",
                Some(1),
                &[DatumWithOid::from(partition), DatumWithOid::from(client_id), DatumWithOid::from(code)],
            )?;
            let row = t.first();
            (row.get::<bool>(1)?.unwrap_or(false), row.get::<i64>(2)?.unwrap_or(0))
        };
        let kept = if known || codes < MAX_CODES_PER_CLIENT { code } else { OTHER_CODES };
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_round_failures AS f \
               (partition, client_id, code, reports, last_reported_at_ms) \
             VALUES ($1, $2, $3, 1, $4) \
             ON CONFLICT (partition, client_id, code) DO UPDATE \
               SET reports = f.reports + 1, \
                   last_reported_at_ms = GREATEST(f.last_reported_at_ms, EXCLUDED.last_reported_at_ms)",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_id),
                DatumWithOid::from(kept),
                DatumWithOid::from(now_ms),
            ],
        )
        .map(|_| ())
    })
    .map_err(StoreError::spi("record_round_failure"))
}

/// One row of [`list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundFailureRow {
    /// The reporting client.
    pub client_id: String,
    /// The reported code.
    pub code: String,
    /// How many reports.
    pub reports: i64,
    /// Server clock of the last report, Unix ms.
    pub last_reported_at_ms: i64,
}

/// Every report of `partition`, newest first (then client, code).
/// Errors: SPI failures.
pub fn list(partition: &str) -> StoreResult<Vec<RoundFailureRow>> {
    Spi::connect_mut(|client| {
        let rows = client.update(
            "SELECT client_id, code, reports, last_reported_at_ms FROM syncular.sync_round_failures \
              WHERE partition = $1 ORDER BY last_reported_at_ms DESC, client_id, code",
            None,
            &[DatumWithOid::from(partition)],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(RoundFailureRow {
                client_id: row.get::<String>(1)?.unwrap_or_default(),
                code: row.get::<String>(2)?.unwrap_or_default(),
                reports: row.get::<i64>(3)?.unwrap_or(0),
                last_reported_at_ms: row.get::<i64>(4)?.unwrap_or(0),
            });
        }
        Ok(out)
    })
    .map_err(StoreError::spi("list_round_failures"))
}

/// Deletes at most `max_rows` reports of `partition` whose client has no
/// record any more (pruned); returns how many. Errors: SPI failures.
pub fn delete_orphans(partition: &str, max_rows: i32) -> StoreResult<i64> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = client.update(
            "DELETE FROM syncular.sync_round_failures WHERE partition = $1 AND ctid = ANY(ARRAY( \
               SELECT f.ctid FROM syncular.sync_round_failures f \
                WHERE f.partition = $1 AND NOT EXISTS (SELECT 1 FROM syncular.sync_clients c \
                                                        WHERE c.partition = $1 AND c.client_id = f.client_id) \
                LIMIT $2))",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(i64::from(max_rows))],
        )?;
        Ok(table.len() as i64)
    })
    .map_err(StoreError::spi("delete_orphan_round_failures"))
}
