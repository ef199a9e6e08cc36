//! Auth leases (SPEC §7.3; docs/src/sql/leases.md "Auth leases"): issuance and sliding
//! refresh on resolved rounds, the outage seam, revocation.
//!
//! - **Off unless configured.** `syncular.lease_ttl` = 0 (the default) is the
//!   spec's "`leases` absent": no `LEASE` frame, no lease row, no key; the
//!   outage signal then fails with `sync.auth_lease_required`.
//! - **Issuance and refresh** ([`issue`]): a round whose allowed map came
//!   from a live source (the gateway's `allowed_scopes` map or the resolver's
//!   map — not a raising resolver, not a lease) stores the record keyed by
//!   `(partition, clientId)` with the just-resolved map, `issuedAtMs` = now,
//!   `expiresAtMs` = now + TTL, and the round emits one `LEASE` frame right
//!   after `RESP_HEADER`. The id is stable across refreshes; a fresh id is
//!   minted for a new record, when the actor changed, when the stored
//!   record does not verify, or when it was revoked: a live round after a
//!   revocation is the recovery of §7.3.4 / Appendix B 15 (c) — the revoked
//!   row is replaced by a fresh lease, and the revoked id never comes back.
//! - **The outage seam** ([`crate::engine::auth::allowed::OUTAGE_SIGNAL`], [`authorize`]): the host says
//!   "live authority unavailable" by passing the JSON string
//!   `"resolver_outage"` as `allowed_scopes`, or by returning it from the
//!   registered resolver (a raising resolver still means denied, §3.2 rule
//!   5). The stored lease, when it verifies, names the same actor, is not
//!   revoked and has not expired, is then the allowed map and the request
//!   runs exactly as if the resolver had returned it; it is not refreshed.
//!   Otherwise the request fails: revoked → `sync.auth_lease_revoked`,
//!   anything else → `sync.auth_lease_required` (both 28000).
//! - **Revocation** ([`revoke`], [`clear_revocation`]): durable, by id.

mod record;

pub use record::{scopes_json, LeaseRecord};

use syncular_protocol::response::Lease;
use syncular_protocol::ErrorCode;

use crate::engine::clock::MAX_NOW_MS;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::auth::allowed::{parse_allowed_map, AllowedMap};
use crate::store::auth::leases::{self as store, LeaseContext, LeaseRow, LeaseWrite, Replacing};

/// Bytes of a generated lease key.
const KEY_BYTES: usize = 32;

fn lease_required(message: impl Into<String>) -> EngineError {
    EngineError::protocol(ErrorCode::AuthLeaseRequired, message)
}

/// The record a stored row claims to be, when its scopes parse.
fn parsed_scopes(row: &LeaseRow) -> Option<AllowedMap> {
    parse_allowed_map(&row.allowed_scopes).ok()
}

/// The record `row` of `partition` stores, its scopes parsed as `allowed`.
fn record_of<'a>(partition: &'a str, row: &'a LeaseRow, allowed: &'a AllowedMap) -> LeaseRecord<'a> {
    LeaseRecord {
        partition,
        client_id: &row.client_id,
        lease_id: &row.lease_id,
        actor_id: &row.actor_id,
        allowed,
        issued_at_ms: row.issued_at_ms,
        expires_at_ms: row.expires_at_ms,
        revoked_at_ms: row.revoked_at_ms,
    }
}

/// Whether `row` of `partition` carries a valid signature under `key`.
pub fn verifies(partition: &str, row: &LeaseRow, key: Option<&[u8]>) -> bool {
    let (Some(key), Some(allowed)) = (key, parsed_scopes(row)) else { return false };
    record_of(partition, row, &allowed).verify(key, &row.signature)
}

/// What a valid lease grants: its allowed map until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leased {
    /// The allowed map captured at issuance.
    pub allowed: AllowedMap,
    /// The lease's expiry, Unix ms.
    pub expires_at_ms: i64,
}

/// The grant of a lease-authorized request (§7.3.3): the stored lease of
/// `(partition, client_id)` from `lease` (`None`: read it now).
///
/// Errors: `sync.auth_lease_required` (28000) when leases are off, or the
/// lease is missing, does not verify, names another actor, or expired
/// (`now_ms ≥ expiresAtMs`); `sync.auth_lease_revoked` (28000) when revoked;
/// store failures.
pub fn authorize(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    now_ms: i64,
    lease: Option<&LeaseContext>,
) -> EngineResult<Leased> {
    if crate::settings::lease_ttl_ms().is_none() {
        return Err(lease_required(
            "the host signalled a scope resolver outage, but auth leases are off on this server \
             (syncular.lease_ttl = 0) (§7.3.3)",
        ));
    }
    let loaded;
    let lease = match lease {
        Some(lease) => lease,
        None => {
            loaded = store::load(partition, client_id)?;
            &loaded
        }
    };
    let Some(row) = &lease.row else {
        return Err(lease_required("the scope resolver is unavailable and this client holds no auth lease (§7.3.3)"));
    };
    let allowed = match parsed_scopes(row) {
        Some(allowed) if verifies(partition, row, lease.key.as_deref()) => allowed,
        _ => {
            return Err(lease_required(
                "the scope resolver is unavailable and this client's stored auth lease does not verify (§7.3.1)",
            ))
        }
    };
    if row.actor_id != actor_id {
        return Err(lease_required(
            "the scope resolver is unavailable and this client's auth lease was issued to another actor (§7.3.3)",
        ));
    }
    if row.revoked_at_ms.is_some() {
        return Err(EngineError::protocol(
            ErrorCode::AuthLeaseRevoked,
            "the scope resolver is unavailable and this client's auth lease was revoked; \
             a live authorization is required (§7.3.4)",
        ));
    }
    if now_ms >= row.expires_at_ms {
        return Err(lease_required(format!(
            "the scope resolver is unavailable and this client's auth lease expired at {} ms (§7.3.3)",
            row.expires_at_ms
        )));
    }
    Ok(Leased { allowed, expires_at_ms: row.expires_at_ms })
}

/// A fresh random key, [`KEY_BYTES`] long. Errors: `syncular.internal`
/// when the operating system has no randomness to give.
fn random_key() -> EngineResult<Vec<u8>> {
    let mut key = vec![0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(|e| EngineError::internal(format!("no randomness for the lease key: {e}")))?;
    Ok(key)
}

/// The signing key from `lease`, else the stored one (created on first use).
fn signing_key(lease: &LeaseContext) -> EngineResult<Vec<u8>> {
    match &lease.key {
        Some(key) => Ok(key.clone()),
        None => Ok(store::store_key(&random_key()?, false)?),
    }
}

/// Creates the signing key unless it exists (`syncular.distribute()`: while
/// the key table is still local). Errors: store failures, no randomness.
pub fn ensure_key() -> EngineResult<()> {
    store::store_key(&random_key()?, false)?;
    Ok(())
}

/// Issues or slides the lease of `(partition, client_id)` for a round whose
/// allowed map `allowed` came from a live source (§7.3.3), `lease` being
/// what the request read. `ttl_ms` is `syncular.lease_ttl`. A revoked
/// stored lease is replaced by one under a fresh id (the recovery of
/// §7.3.4; Appendix B 15 (c)). Returns the `LEASE` frame to emit, or `None`
/// when a concurrent revocation, clear or issuance won the row. One statement (plus two, once, to create the key).
/// Errors: store failures.
pub fn issue(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    allowed: &AllowedMap,
    now_ms: i64,
    ttl_ms: i64,
    lease: &LeaseContext,
) -> EngineResult<Option<Lease>> {
    let key = signing_key(lease)?;
    let existing = lease.row.as_ref();
    let revoked = existing.is_some_and(|row| row.revoked_at_ms.is_some());
    let keeps_id = existing
        .filter(|row| !revoked && row.actor_id == actor_id && verifies(partition, row, Some(&key)));
    let lease_id = match keeps_id {
        Some(row) => row.lease_id.clone(),
        None => format!("lease_{}", uuid::Uuid::new_v4()),
    };
    let expires_at_ms = now_ms.saturating_add(ttl_ms).min(MAX_NOW_MS);
    let record = LeaseRecord {
        partition,
        client_id,
        lease_id: &lease_id,
        actor_id,
        allowed,
        issued_at_ms: now_ms,
        expires_at_ms,
        revoked_at_ms: None,
    };
    let signature = record.sign(&key);
    let scopes = scopes_json(allowed);
    let written = store::write(
        &LeaseWrite {
            partition,
            client_id,
            lease_id: &lease_id,
            actor_id,
            allowed_scopes: &scopes,
            issued_at_ms: now_ms,
            expires_at_ms,
            signature: &signature,
        },
        match existing {
            None => Replacing::Nothing,
            Some(row) if revoked => Replacing::Revoked(&row.lease_id),
            Some(row) => Replacing::Live(&row.lease_id),
        },
    )?;
    Ok(written.then_some(Lease { lease_id, expires_at_ms }))
}

/// `syncular.revoke_lease`: marks the lease `lease_id` of `partition`
/// revoked at `now_ms` (re-signed when its signature verified; kept as is
/// otherwise) and queues a `syncular_scopes` notification for its actor, so
/// gateways re-resolve that actor's realtime sessions (a session opened on
/// the lease loses its registrations while the outage lasts). Returns
/// `false` for an unknown id; revoking twice keeps the first instant.
/// Errors: store failures.
pub fn revoke(partition: &str, lease_id: &str, now_ms: i64) -> EngineResult<bool> {
    let locked = store::lock_by_id(partition, lease_id)?;
    let Some(row) = &locked.row else { return Ok(false) };
    if row.revoked_at_ms.is_some() {
        return Ok(true);
    }
    let signature = match (parsed_scopes(row), &locked.key) {
        (Some(allowed), Some(key)) if record_of(partition, row, &allowed).verify(key, &row.signature) => {
            Some(LeaseRecord { revoked_at_ms: Some(now_ms), ..record_of(partition, row, &allowed) }.sign(key))
        }
        _ => None,
    };
    store::mark_revoked(partition, lease_id, now_ms, signature.as_deref())?;
    crate::engine::notify::notify_scopes(partition, Some(&row.actor_id))?;
    Ok(true)
}

/// `syncular.clear_lease_revocation`: deletes the revoked lease `lease_id`
/// of `partition` (an extra beside the recovery in [`issue`], which replaces
/// it on the client's next live round anyway): until that round, outage
/// rounds get `sync.auth_lease_required` instead of `sync.auth_lease_revoked`. `false` when no revoked lease has that id.
/// Errors: store failures.
pub fn clear_revocation(partition: &str, lease_id: &str) -> EngineResult<bool> {
    Ok(store::delete_revoked(partition, lease_id)?)
}

/// `syncular.leases`: every stored lease of `partition` with whether it verifies.
/// Errors: store failures.
pub fn list(partition: &str) -> EngineResult<Vec<(LeaseRow, bool)>> {
    let (rows, key) = store::list(partition)?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let valid = verifies(partition, &row, key.as_deref());
            (row, valid)
        })
        .collect())
}

/// `syncular.rotate_lease_key`: replaces the signing key with fresh random
/// bytes. Every stored lease stops verifying: none serves an outage until
/// its client's next live round re-issues it (under a fresh id).
/// Errors: store failures, no randomness.
pub fn rotate_key() -> EngineResult<()> {
    store::store_key(&random_key()?, true)?;
    Ok(())
}
