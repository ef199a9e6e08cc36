//! The auth lease administration surface (SPEC §7.3.4; docs/src/sql/leases.md "Auth
//! leases"): `syncular.revoke_lease`, `syncular.clear_lease_revocation`,
//! `syncular.leases`, `syncular.rotate_lease_key`. Issuance and the outage
//! seam live in the sync functions (`crate::engine::auth::leases`).
//!
//! All are `SECURITY DEFINER` with a pinned `search_path` and admin-only:
//! EXECUTE stays with the extension owner and superusers, never
//! `syncular_gateway` (sql/privileges.sql). NULL or empty required text
//! arguments fail with `syncular.invalid_argument` (22023).

use pgrx::prelude::*;
use pgrx::JsonB;

use crate::api::errors::OrRaise;
use crate::api::sync::required_text;
use crate::engine::auth::leases;
use crate::engine::clock;

/// `syncular.revoke_lease(partition text, lease_id text) returns boolean`
/// (§7.3.4 `revokeLease`): marks the lease revoked, durably. From then on an
/// outage-served round of its client fails with `sync.auth_lease_revoked`
/// (28000) until its next live round, which replaces it by a lease under a
/// fresh id (§7.3.4 recovery). Local data is not touched. `false` when
/// `partition` has no lease with that id; revoking twice keeps the first
/// instant. Errors: `syncular.invalid_argument` (22023).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn revoke_lease(partition: Option<&str>, lease_id: Option<&str>) -> bool {
    let partition = required_text(partition, "partition");
    let lease_id = required_text(lease_id, "lease_id");
    let now_ms = clock::now_ms().or_raise();
    leases::revoke(partition, lease_id, now_ms).or_raise()
}

/// `syncular.clear_lease_revocation(partition text, lease_id text) returns
/// boolean`: forgets the revoked lease `lease_id` before its client's next
/// live round replaces it (outage rounds then get `sync.auth_lease_required`;
/// the revoked id never comes back either way). `false` when `partition`
/// has no revoked lease with that id.
/// Errors: `syncular.invalid_argument` (22023).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn clear_lease_revocation(partition: Option<&str>, lease_id: Option<&str>) -> bool {
    let partition = required_text(partition, "partition");
    let lease_id = required_text(lease_id, "lease_id");
    leases::clear_revocation(partition, lease_id).or_raise()
}

/// `syncular.leases(partition text) returns table(client_id text, lease_id
/// text, actor_id text, allowed_scopes jsonb, issued_at_ms bigint,
/// expires_at_ms bigint, revoked_at_ms bigint, signature_valid boolean)` —
/// the stored leases of `partition` by `client_id`; `signature_valid` false
/// for a row that no longer verifies (edited, or signed under a rotated key:
/// it serves no outage). Read-only. Errors: `syncular.invalid_argument` (22023).
#[pg_extern(stable, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn leases(
    partition: Option<&str>,
) -> TableIterator<
    'static,
    (
        name!(client_id, String),
        name!(lease_id, String),
        name!(actor_id, String),
        name!(allowed_scopes, JsonB),
        name!(issued_at_ms, i64),
        name!(expires_at_ms, i64),
        name!(revoked_at_ms, Option<i64>),
        name!(signature_valid, bool),
    ),
> {
    let partition = required_text(partition, "partition");
    let rows = leases::list(partition).or_raise();
    TableIterator::new(rows.into_iter().map(|(row, valid)| {
        (
            row.client_id,
            row.lease_id,
            row.actor_id,
            JsonB(row.allowed_scopes),
            row.issued_at_ms,
            row.expires_at_ms,
            row.revoked_at_ms,
            valid,
        )
    }))
}

/// `syncular.rotate_lease_key() returns void`: replaces the lease signing
/// key (`syncular.sync_lease_key`) with 32 fresh random bytes. Every stored
/// lease stops verifying at once: an outage-served round fails with
/// `sync.auth_lease_required` until its client's next live round re-issues
/// the lease under a fresh id. Use it when the key may have leaked.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn rotate_lease_key() {
    leases::rotate_key().or_raise()
}
