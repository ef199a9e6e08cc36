//! The caller of a sync call (SPEC §3.2, §8.7): the identity arguments the
//! gateway passes (partition, actor, its allowed map or none, the realtime
//! connection's client id), their checks, and the request's allowed map —
//! from the gateway argument, the host resolver or, under an outage, the
//! stored auth lease.

use serde_json::Value;
use syncular_protocol::ErrorCode;

use crate::engine::auth::allowed::{is_outage_signal, parse_allowed_map, Allowed};
use crate::engine::auth::leases;
use crate::engine::auth::resolver::{self, Resolution};
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::schema::RegisteredSchema;
use crate::store::auth::leases::LeaseContext;

/// Longest partition name accepted, in bytes. The partition leads every index
/// key of the sync tables (twice in a reaction's idempotency key) next to
/// client-chosen parts of up to [`crate::engine::storable::MAX_KEY_PART_BYTES`]
/// each, and a btree entry holds at most 2704 bytes: at 512 every key fits
/// whatever the bytes (its commit NOTIFY payload, `base64url(partition) + ":"
/// + commitSeq`, stays far under Postgres's 8000-byte limit too).
pub const MAX_PARTITION_BYTES: usize = 512;

/// Checks the caller's identity arguments: a partition of at most
/// [`MAX_PARTITION_BYTES`]. Errors: `syncular.invalid_argument`.
pub fn check_caller(caller: &Caller<'_>) -> EngineResult<()> {
    crate::engine::validators::refuse_reentry("a sync call")?;
    check_partition(caller.partition)
}

/// Refuses a partition longer than [`MAX_PARTITION_BYTES`] with
/// `syncular.invalid_argument` (22023) — for the sync functions and for
/// captured plain SQL writes alike.
pub fn check_partition(partition: &str) -> EngineResult<()> {
    if partition.len() > MAX_PARTITION_BYTES {
        return Err(EngineError::host(
            HostCode::InvalidArgument,
            format!(
                "partition is {} bytes long; at most {MAX_PARTITION_BYTES} bytes are accepted \
                 (it is part of every index key of the sync tables)",
                partition.len()
            ),
        ));
    }
    Ok(())
}

/// The caller-supplied identity and authorization of a request.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// Host partition (tenant); never on the wire.
    pub partition: &'a str,
    /// Authenticated actor.
    pub actor_id: &'a str,
    /// The gateway's §3.2 allowed map, or `None` to call the registered resolver.
    pub allowed_scopes: Option<&'a Value>,
    /// The realtime connection's `clientId` when the request is a §8.7
    /// socket round: `REQ_HEADER.clientId` must equal it. `None` over HTTP.
    pub connection_client_id: Option<&'a str>,
}

/// §8.7: a socket round's `REQ_HEADER.clientId` must equal the connection's
/// `clientId` (registration identity would otherwise be ambiguous).
/// Errors: `sync.invalid_client_id`.
pub fn check_connection_client_id(caller: &Caller<'_>, client_id: &str) -> EngineResult<()> {
    match caller.connection_client_id {
        Some(expected) if expected != client_id => Err(EngineError::protocol(
            ErrorCode::InvalidClientId,
            format!(
                "REQ_HEADER.clientId {client_id:?} differs from the realtime connection's clientId \
                 {expected:?}; a socket round must use the connection's clientId (§8.7)"
            ),
        )),
        _ => Ok(()),
    }
}

/// The allowed map of a request and where it came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The §3.2 allowed map (or denied).
    pub allowed: Allowed,
    /// `true` when a live source decided (the gateway's map, the resolver);
    /// `false` when the stored auth lease did (§7.3.3 outage service).
    pub live: bool,
    /// The serving lease's expiry (Unix ms) when the lease decided.
    pub lease_expires_at_ms: Option<i64>,
}

/// §3.2 rule 3: the allowed map, from the gateway argument or the resolver,
/// key-validated against the union of every table's declared variables.
/// When either signals an outage (§7.3.3, [`crate::engine::auth::allowed::OUTAGE_SIGNAL`]), the
/// stored auth lease of `(partition, client_id)` decides instead
/// ([`leases::authorize`]; `lease`: what the request already read, `None`:
/// read it). Errors: `sync.invalid_subscription` (undeclared key), a
/// malformed map argument (`syncular.invalid_argument`) or resolver result
/// (`syncular.resolver_malformed`), `sync.auth_lease_required` /
/// `sync.auth_lease_revoked` (28000) under an outage, resolver storage failures.
pub fn resolve_allowed(
    caller: &Caller<'_>,
    schema: &RegisteredSchema,
    client_id: &str,
    now_ms: i64,
    lease: Option<&LeaseContext>,
) -> EngineResult<Resolved> {
    let live = match caller.allowed_scopes {
        Some(value) if is_outage_signal(value) => None,
        Some(value) => Some(parse_allowed_map(value).map(Allowed::Map).map_err(|problem| {
            EngineError::host(HostCode::InvalidArgument, format!("allowed_scopes argument {problem}"))
        })?),
        None => match resolver::resolve(caller.partition, caller.actor_id)? {
            Resolution::Live(allowed) => Some(allowed),
            Resolution::Outage => None,
        },
    };
    let resolved = match live {
        Some(allowed) => Resolved { allowed, live: true, lease_expires_at_ms: None },
        None => {
            let leased = leases::authorize(caller.partition, client_id, caller.actor_id, now_ms, lease)?;
            Resolved { allowed: Allowed::Map(leased.allowed), live: false, lease_expires_at_ms: Some(leased.expires_at_ms) }
        }
    };
    if let Allowed::Map(map) = &resolved.allowed {
        let declared = schema.variables();
        let undeclared: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !declared.contains_key(k))
            .collect();
        if !undeclared.is_empty() {
            return Err(EngineError::protocol(
                ErrorCode::InvalidSubscription,
                format!("allowed scopes name variable(s) no table declares: {undeclared:?} (§3.2 rule 3)"),
            ));
        }
    }
    Ok(resolved)
}
