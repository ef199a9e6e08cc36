//! `syncular.sync`, `syncular.push`, `syncular.pull` — one SSP2 request in,
//! one SSP2 response out, inside the caller's transaction (SPEC §1.5, §1.6,
//! §6, §4; docs/src/sql/sync.md).
//!
//! All three are `SECURITY DEFINER` with a pinned `search_path`
//! (`pg_catalog, pg_temp`): the gateway role needs EXECUTE only, never
//! privileges on the `sync_*` or app tables. Whoever may call them can claim
//! any actor and any allowed scopes — EXECUTE is granted to
//! `syncular_gateway` only (sql/privileges.sql).

use pgrx::prelude::*;
use super::json_arg::Jsonb;
use pgrx::JsonB;

use crate::api::errors::{raise, OrRaise};
use crate::engine::error::{EngineError, HostCode};
use crate::engine::auth::caller::Caller;
use crate::engine::round::{self, Halves};

pub(crate) fn required<'a, T: ?Sized>(value: Option<&'a T>, name: &str) -> &'a T {
    match value {
        Some(v) => v,
        None => raise(EngineError::host(
            HostCode::InvalidArgument,
            format!("argument {name} must not be NULL"),
        )),
    }
}

/// A required text argument that must also be non-empty (an empty
/// `partition` would, e.g., make the NOTIFY payload `":1"`).
/// Errors: `syncular.invalid_argument` (22023).
pub(crate) fn required_text<'a>(value: Option<&'a str>, name: &str) -> &'a str {
    let value = required(value, name);
    if value.is_empty() {
        raise(EngineError::host(
            HostCode::InvalidArgument,
            format!("argument {name} must not be empty"),
        ))
    }
    value
}

/// The caller of a download (blobs §5.9.5, segments §5.5): required,
/// non-empty `partition` and `actor_id`, the gateway's allowed map, no
/// realtime connection. Errors: `syncular.invalid_argument` (22023).
pub(crate) fn caller<'a>(
    partition: Option<&'a str>,
    actor_id: Option<&'a str>,
    allowed: Option<&'a serde_json::Value>,
) -> Caller<'a> {
    Caller {
        partition: required_text(partition, "partition"),
        actor_id: required_text(actor_id, "actor_id"),
        allowed_scopes: allowed,
        connection_client_id: None,
    }
}

fn round(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: Option<Jsonb>,
    connection_client_id: Option<&str>,
    halves: Halves,
    max_bytes: usize,
) -> Vec<u8> {
    let partition = required_text(partition, "partition");
    let actor_id = required_text(actor_id, "actor_id");
    let request = required(request, "request");
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = Caller {
        partition,
        actor_id,
        allowed_scopes: allowed.as_ref(),
        connection_client_id,
    };
    round::run(&caller, request, halves, max_bytes).or_raise()
}

/// `syncular.sync(partition text, actor_id text, request bytea,
/// allowed_scopes jsonb DEFAULT NULL, connection_client_id text DEFAULT NULL)
/// returns bytea`.
///
/// Runs one SSP2 request (wire version 1, 2 or 3) for `actor_id` in
/// `partition` — push half, then pull half — and returns the response in
/// the request's wire version. `allowed_scopes` is the §3.2 allowed map
/// (`{"variable": ["value", …]}`, `"*"` = any value); NULL calls the
/// registered scope resolver; with neither, every subscription is revoked
/// and every write is `sync.forbidden`. `connection_client_id` (a §8.7
/// socket round: the realtime connection's `clientId`) makes a different
/// `REQ_HEADER.clientId` fail with `sync.invalid_client_id` before anything
/// is written; NULL over HTTP.
///
/// Auth leases (§7.3, `crate::engine::auth::leases`): with `syncular.lease_ttl` >
/// 0, a round whose allowed map came from the argument or the resolver
/// stores the client's lease and answers one `LEASE` frame right after
/// `RESP_HEADER`; `allowed_scopes` = the JSON string `"resolver_outage"` (or
/// that resolver answer) serves the round from the stored lease instead:
/// `sync.auth_lease_required` / `sync.auth_lease_revoked` (28000) when it
/// cannot.
///
/// Request-level failures raise an ERROR whose message starts with the SSP2
/// code (`sync.invalid_request: …`); SQLSTATE per code class
/// (`crate::api::errors`): `sync.invalid_request`, `sync.empty_commit`,
/// `sync.invalid_client_id`, `sync.invalid_subscription`,
/// `sync.too_many_operations` → 22023; `sync.unknown_table`,
/// `sync.client_wire_unsupported` → 0A000; host errors `syncular.*`.
/// Commit-level failures are `rejected` results inside the response.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn sync(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
    connection_client_id: default!(Option<&str>, "NULL"),
) -> Vec<u8> {
    round(partition, actor_id, request, allowed_scopes, connection_client_id, Halves::Both, usize::MAX)
}

/// `syncular.push(partition text, actor_id text, request bytea,
/// allowed_scopes jsonb DEFAULT NULL, connection_client_id text DEFAULT NULL)
/// returns bytea` — [`sync`] restricted
/// to the push half: the response carries `RESP_HEADER`, one `PUSH_RESULT`
/// per `PUSH_COMMIT`, `END`. The request is validated exactly as by `sync`
/// (a pull half present is validated but not served), so a gateway can
/// commit the push before it runs [`pull`] with the same bytes.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn push(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
    connection_client_id: default!(Option<&str>, "NULL"),
) -> Vec<u8> {
    round(partition, actor_id, request, allowed_scopes, connection_client_id, Halves::PushOnly, usize::MAX)
}

/// `syncular.pull(partition text, actor_id text, request bytea,
/// allowed_scopes jsonb DEFAULT NULL, connection_client_id text DEFAULT NULL)
/// returns bytea` — [`sync`] restricted
/// to the pull half: `RESP_HEADER`, the subscription sections, `END`. Push
/// commits in the request are validated but not applied.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn pull(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
    connection_client_id: default!(Option<&str>, "NULL"),
) -> Vec<u8> {
    round(partition, actor_id, request, allowed_scopes, connection_client_id, Halves::PullOnly, usize::MAX)
}

/// `syncular.gateway_round(partition text, actor_id text, request bytea,
/// allowed_scopes jsonb DEFAULT NULL, connection_client_id text DEFAULT NULL,
/// max_response_bytes integer DEFAULT NULL)
/// returns bytea` — a gateway's whole round as ONE statement: [`sync`]'s
/// response and errors, byte for byte. `max_response_bytes` (NULL: no limit)
/// lets a gateway that can stream hold only small responses: a response that
/// grows past it raises `syncular.response_too_large` (54000) as soon as it
/// does (checked after each step of the round), the transaction aborts and
/// nothing of the round persists — run it again streamed (`syncular.push`,
/// then `syncular.pull_stream`); < 1 is `syncular.invalid_argument` (22023).
/// When the request carries no
/// `PUSH_COMMIT` frame, the call's writes are its transaction's only ones — a
/// statement in its own implicit transaction (not inside `BEGIN`), nothing
/// written before it (e.g. by a statement pipelined before the same `Sync`),
/// no WAL written after it — and `synchronous_commit` is `on` (the default) at
/// the call and at the COMMIT, that transaction commits with
/// `synchronous_commit = off`, decided at its PRE_COMMIT (nothing is changed
/// before; any other level, set by anyone, is left in force): its only writes are the pull's
/// bookkeeping (the client's cursor and subscriptions, the partition's
/// last-seen time, a lease), which a crash may lose without a client relying
/// on it, while a durable flush would double the WAL flushes of every pull.
/// Anything else commits as the caller's settings say: a round with pushes
/// durably (§2.3, §6.4: persisted before it is acknowledged — the statement
/// returns after its COMMIT). So a gateway needs no frame scan and no
/// transaction of its own (docs/src/sql/sync.md).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn gateway_round(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
    connection_client_id: default!(Option<&str>, "NULL"),
    max_response_bytes: default!(Option<i32>, "NULL"),
) -> Vec<u8> {
    let max_bytes = match max_response_bytes {
        None => usize::MAX,
        Some(n) => usize::try_from(n).ok().filter(|n| *n >= 1).unwrap_or_else(|| {
            raise(EngineError::host(HostCode::InvalidArgument, format!("max_response_bytes must be at least 1 (got {n})")))
        }),
    };
    let fresh = crate::store::round::transaction_is_fresh();
    let response = round(partition, actor_id, request, allowed_scopes, connection_client_id, Halves::Both, max_bytes);
    if fresh && !request.is_some_and(syncular_protocol::request::carries_push_commit) {
        crate::store::round::commit_asynchronously_if_alone();
    }
    response
}

/// `syncular.commit_notification_payload(partition text, commit_seq bigint)
/// returns text` — the signed `syncular_commit` NOTIFY payload of a commit,
/// `<base64url(partition)>:<commitSeq>:<tag>`, for gateways and tests
/// (`SECURITY DEFINER`: it reads — or, the first time, creates — the
/// notification key).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn commit_notification_payload(partition: &str, commit_seq: i64) -> String {
    crate::engine::notify::commit_payload(partition, commit_seq).or_raise()
}

/// `syncular.commit(partition text, actor_id text, operations jsonb,
/// client_id text DEFAULT NULL, client_commit_id text DEFAULT NULL,
/// allowed_scopes jsonb DEFAULT NULL) returns jsonb` — a server-authored
/// commit (SPEC §6.10) through the push path: same authorization (the
/// `allowed_scopes` map, else the resolver), conflicts, atomicity,
/// idempotency by `(partition, client_id, client_commit_id)`, commit log and
/// NOTIFY. `operations` / result shapes: `crate::engine::push::server_commit`.
/// `client_id` defaults to `'sql:' || actor_id`; `client_commit_id` to a
/// fresh UUID (pass a stable one to make retries idempotent).
/// Errors: as [`sync`] (`sync.invalid_request` for malformed operations,
/// `sync.empty_commit`, `sync.invalid_client_id`, `sync.too_many_operations`).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn commit(
    partition: Option<&str>,
    actor_id: Option<&str>,
    operations: Option<Jsonb>,
    client_id: default!(Option<&str>, "NULL"),
    client_commit_id: default!(Option<&str>, "NULL"),
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> JsonB {
    let partition = required_text(partition, "partition");
    let actor_id = required_text(actor_id, "actor_id");
    let Some(operations) = operations else {
        raise(EngineError::host(
            HostCode::InvalidArgument,
            "argument operations must not be NULL",
        ))
    };
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = Caller {
        partition,
        actor_id,
        allowed_scopes: allowed.as_ref(),
        connection_client_id: None,
    };
    JsonB(
        crate::engine::push::server_commit::run(&caller, client_id, client_commit_id, &operations.0)
            .or_raise(),
    )
}
