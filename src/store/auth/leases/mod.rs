//! The auth lease store (SPEC §7.3; docs/src/sql/leases.md "Auth leases"): one row per
//! `(partition, clientId)` in `syncular.sync_auth_leases` and the signing key
//! in `syncular.sync_lease_key` (one row, readable by the extension owner
//! only). Every statement names one partition (the key table is a Citus
//! reference table). The signature is computed and checked by
//! [`crate::engine::auth::leases`]; this module only moves rows.

use pgrx::datum::DatumWithOid;
use pgrx::spi::{Spi, SpiTupleTable};

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// A stored lease as read (the signature unchecked).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRow {
    /// `REQ_HEADER.clientId` the lease is bound to.
    pub client_id: String,
    /// The stable revocation handle.
    pub lease_id: String,
    /// The actor it authorizes.
    pub actor_id: String,
    /// The allowed map captured at issuance (jsonb as stored).
    pub allowed_scopes: serde_json::Value,
    /// Issuance (or last slide), Unix ms.
    pub issued_at_ms: i64,
    /// Expiry, Unix ms (invalid at or after).
    pub expires_at_ms: i64,
    /// When it was revoked (`syncular.revoke_lease`), Unix ms.
    pub revoked_at_ms: Option<i64>,
    /// HMAC-SHA256 over the canonical record.
    pub signature: Vec<u8>,
}

/// What a request needs to serve or refresh a lease: the client's row and the key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeaseContext {
    /// The client's stored lease, if any.
    pub row: Option<LeaseRow>,
    /// The signing key, once created.
    pub key: Option<Vec<u8>>,
}

/// The columns a lease read returns, in [`row_at`] order, for a `sync_auth_leases l`.
pub const LEASE_COLUMNS: &str = "l.client_id, l.lease_id, l.actor_id, l.allowed_scopes, l.issued_at_ms, \
     l.expires_at_ms, l.revoked_at_ms, l.signature";

/// The signing key, as a scalar subquery.
pub const KEY_SUBQUERY: &str = "(SELECT k.key FROM syncular.sync_lease_key k WHERE k.id = 1)";

/// Reads a lease from the 8 columns starting at `$first` (1-based) of a row
/// (`SpiTupleTable` or `SpiHeapTupleData`: both have `get`); `None` when the
/// row is absent (outer join).
macro_rules! lease_at {
    ($row:expr, $first:expr) => {{
        let row = $row;
        let first: usize = $first;
        match row.get::<String>(first)? {
            None => None,
            Some(client_id) => Some(LeaseRow {
                client_id,
                lease_id: row.get::<String>(first + 1)?.unwrap_or_default(),
                actor_id: row.get::<String>(first + 2)?.unwrap_or_default(),
                allowed_scopes: row
                    .get::<pgrx::JsonB>(first + 3)?
                    .map(|j| j.0)
                    .unwrap_or(serde_json::Value::Null),
                issued_at_ms: row.get::<i64>(first + 4)?.unwrap_or_default(),
                expires_at_ms: row.get::<i64>(first + 5)?.unwrap_or_default(),
                revoked_at_ms: row.get::<i64>(first + 6)?,
                signature: row.get::<Vec<u8>>(first + 7)?.unwrap_or_default(),
            }),
        }
    }};
}

/// [`lease_at!`] for the current row of a tuple table.
pub fn row_at(row: &SpiTupleTable<'_>, first: usize) -> Result<Option<LeaseRow>, pgrx::spi::Error> {
    Ok(lease_at!(row, first))
}

/// The client's lease and the key, one statement (outside a sync round:
/// `syncular.realtime_open`, `syncular.commit` under the outage signal).
/// Errors: SPI failures.
pub fn load(partition: &str, client_id: &str) -> StoreResult<LeaseContext> {
    let sql = format!(
        "SELECT {LEASE_COLUMNS}, {KEY_SUBQUERY} FROM (SELECT 1) AS one \
         LEFT JOIN syncular.sync_auth_leases l ON l.partition = $1 AND l.client_id = $2"
    );
    Spi::connect_mut(|client| -> Result<LeaseContext, pgrx::spi::Error> {
        let table = client.select(&sql, Some(1), &[DatumWithOid::from(partition), DatumWithOid::from(client_id)])?;
        let row = table.first();
        Ok(LeaseContext { row: row_at(&row, 1)?, key: row.get::<Vec<u8>>(9)? })
    })
    .map_err(StoreError::spi("load_lease"))
}

/// The fields a lease write stores.
#[derive(Debug, Clone, Copy)]
pub struct LeaseWrite<'a> {
    /// Partition.
    pub partition: &'a str,
    /// Client.
    pub client_id: &'a str,
    /// The id after the write.
    pub lease_id: &'a str,
    /// Actor.
    pub actor_id: &'a str,
    /// The allowed map, canonical JSON text.
    pub allowed_scopes: &'a str,
    /// Issuance, Unix ms.
    pub issued_at_ms: i64,
    /// Expiry, Unix ms.
    pub expires_at_ms: i64,
    /// HMAC-SHA256 over the canonical record.
    pub signature: &'a [u8],
}

/// The stored row an issued lease replaces (what the request read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacing<'a> {
    /// No row: INSERT, yielding to a concurrent issuance.
    Nothing,
    /// A live (unrevoked) row with this id: slid or re-issued.
    Live(&'a str),
    /// A revoked row with this id: replaced by a fresh lease (§7.3.4 recovery, Appendix B
    /// 15 (c)), revocation cleared on the new record only.
    Revoked(&'a str),
}

/// Writes an issued or slid lease, one statement: replacing a row read earlier, an UPDATE
/// of that row only while it still carries that id and the same revocation state (a
/// concurrent `revoke_lease`, clear or issuance wins); without, an INSERT that yields to a
/// concurrent one. Returns whether a row was written (the round emits `LEASE` only then).
/// Errors: SPI failures.
pub fn write(lease: &LeaseWrite<'_>, replacing: Replacing<'_>) -> StoreResult<bool> {
    const UPDATE_LIVE: &str = "UPDATE syncular.sync_auth_leases SET lease_id = $3, actor_id = $4, \
            allowed_scopes = $5::jsonb, issued_at_ms = $6, expires_at_ms = $7, signature = $8 \
          WHERE partition = $1 AND client_id = $2 AND lease_id = $9 AND revoked_at_ms IS NULL RETURNING 1";
    const UPDATE_REVOKED: &str = "UPDATE syncular.sync_auth_leases SET lease_id = $3, actor_id = $4, \
            allowed_scopes = $5::jsonb, issued_at_ms = $6, expires_at_ms = $7, signature = $8, revoked_at_ms = NULL \
          WHERE partition = $1 AND client_id = $2 AND lease_id = $9 AND revoked_at_ms IS NOT NULL RETURNING 1";
    const INSERT: &str = "INSERT INTO syncular.sync_auth_leases \
            (partition, client_id, lease_id, actor_id, allowed_scopes, issued_at_ms, expires_at_ms, signature) \
          VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8) ON CONFLICT (partition, client_id) DO NOTHING RETURNING 1";
    let mut args = vec![
        DatumWithOid::from(lease.partition),
        DatumWithOid::from(lease.client_id),
        DatumWithOid::from(lease.lease_id),
        DatumWithOid::from(lease.actor_id),
        DatumWithOid::from(lease.allowed_scopes),
        DatumWithOid::from(lease.issued_at_ms),
        DatumWithOid::from(lease.expires_at_ms),
        DatumWithOid::from(lease.signature),
    ];
    let sql = match replacing {
        Replacing::Live(id) => {
            args.push(DatumWithOid::from(id));
            UPDATE_LIVE
        }
        Replacing::Revoked(id) => {
            args.push(DatumWithOid::from(id));
            UPDATE_REVOKED
        }
        Replacing::Nothing => INSERT,
    };
    Spi::connect_mut(|client| plan_cache::execute(client, sql, None, &args).map(|t| t.len() == 1))
        .map_err(StoreError::spi("write_lease"))
}

/// The lease with `lease_id` in `partition`, row-locked (`FOR UPDATE`), and
/// the key. Errors: SPI failures.
pub fn lock_by_id(partition: &str, lease_id: &str) -> StoreResult<LeaseContext> {
    let sql = format!(
        "SELECT {LEASE_COLUMNS}, {KEY_SUBQUERY} FROM syncular.sync_auth_leases l \
         WHERE l.partition = $1 AND l.lease_id = $2 FOR UPDATE"
    );
    Spi::connect_mut(|client| -> Result<LeaseContext, pgrx::spi::Error> {
        let table = client.update(&sql, Some(1), &[DatumWithOid::from(partition), DatumWithOid::from(lease_id)])?;
        if table.is_empty() {
            return Ok(LeaseContext::default());
        }
        let row = table.first();
        Ok(LeaseContext { row: row_at(&row, 1)?, key: row.get::<Vec<u8>>(9)? })
    })
    .map_err(StoreError::spi("lock_lease"))
}

/// Marks the (locked) lease revoked at `revoked_at_ms` with its new
/// `signature` (`None`: keep the stored one — it did not verify, and
/// re-signing would launder it). Errors: SPI failures.
pub fn mark_revoked(partition: &str, lease_id: &str, revoked_at_ms: i64, signature: Option<&[u8]>) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client.update(
            "UPDATE syncular.sync_auth_leases SET revoked_at_ms = $3, signature = coalesce($4, signature) \
             WHERE partition = $1 AND lease_id = $2",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(lease_id),
                DatumWithOid::from(revoked_at_ms),
                DatumWithOid::from(signature),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("revoke_lease"))
}

/// Deletes the revoked lease `lease_id` of `partition`; whether one was
/// deleted (an unrevoked or unknown id deletes nothing). Errors: SPI failures.
pub fn delete_revoked(partition: &str, lease_id: &str) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update(
                "DELETE FROM syncular.sync_auth_leases \
                 WHERE partition = $1 AND lease_id = $2 AND revoked_at_ms IS NOT NULL RETURNING 1",
                None,
                &[DatumWithOid::from(partition), DatumWithOid::from(lease_id)],
            )
            .map(|t| t.len() == 1)
    })
    .map_err(StoreError::spi("clear_lease_revocation"))
}

/// Every lease of `partition` ordered by `client_id`, and the key.
/// Errors: SPI failures.
pub fn list(partition: &str) -> StoreResult<(Vec<LeaseRow>, Option<Vec<u8>>)> {
    let sql = format!(
        "SELECT {LEASE_COLUMNS}, {KEY_SUBQUERY} FROM syncular.sync_auth_leases l \
         WHERE l.partition = $1 ORDER BY l.client_id"
    );
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let mut rows = Vec::new();
        let mut key = None;
        for row in client.select(&sql, None, &[DatumWithOid::from(partition)])? {
            if let Some(lease) = lease_at!(&row, 1) {
                rows.push(lease);
            }
            key = row.get::<Vec<u8>>(9)?;
        }
        if key.is_none() {
            key = client.select(&format!("SELECT {KEY_SUBQUERY}"), Some(1), &[])?.first().get::<Vec<u8>>(1)?;
        }
        Ok((rows, key))
    })
    .map_err(StoreError::spi("list_leases"))
}

/// Stores `key` as the signing key unless one exists (`replace`: always),
/// then returns the stored key — concurrent creators agree.
/// Errors: SPI failures, or no key after writing one.
pub fn store_key(key: &[u8], replace: bool) -> StoreResult<Vec<u8>> {
    let sql = if replace {
        "INSERT INTO syncular.sync_lease_key (id, key) VALUES (1, $1) \
         ON CONFLICT (id) DO UPDATE SET key = EXCLUDED.key"
    } else {
        "INSERT INTO syncular.sync_lease_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING"
    };
    Spi::connect_mut(|client| -> Result<Option<Vec<u8>>, pgrx::spi::Error> {
        client.update(sql, None, &[DatumWithOid::from(key)])?;
        client.select(&format!("SELECT {KEY_SUBQUERY}"), Some(1), &[])?.first().get::<Vec<u8>>(1)
    })
    .map_err(StoreError::spi("store_lease_key"))?
    .ok_or_else(|| StoreError::new("store_lease_key", "no key after writing one"))
}
