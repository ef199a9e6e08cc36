//! The realtime SQL surface a gateway calls (SPEC §8; docs/src/sql/realtime.md):
//! `syncular.realtime_open`, `syncular.realtime_deltas`,
//! `syncular.realtime_ack`, `syncular.refresh_scopes`,
//! `syncular.realtime_scopes_payload`, `syncular.notification_key`,
//! `syncular.error_response`.
//!
//! All are `SECURITY DEFINER` with a pinned `search_path`; EXECUTE is granted
//! to `syncular_gateway` (sql/privileges.sql). NULL or empty required text
//! arguments fail with `syncular.invalid_argument` (22023).

use pgrx::prelude::*;
use super::json_arg::Jsonb;
use pgrx::JsonB;

use crate::api::errors::{raise, OrRaise};
use crate::api::sync::{required, required_text};
use crate::engine::error::{EngineError, HostCode};
use crate::engine::notify;
use crate::engine::realtime::{ack, deltas, error_response, open};
use crate::engine::auth::caller::{check_caller, Caller};

/// `syncular.realtime_open(partition text, actor_id text, client_id text,
/// allowed_scopes jsonb DEFAULT NULL) returns jsonb` — open (or reload the
/// registrations of) the realtime session of `client_id` (§8.1, §8.7).
///
/// Returns `{"sessionId","actorId","clientId","cursor","latestCursor",
/// "requiresSync","wireVersion","logEpoch","schemaVersion","registrations",
/// "scopeKeys"}`: `cursor` −1 without a client record; `registrations`
/// `[{"id","table","effective":{var:[values]}}]` = the last pull's
/// subscriptions re-resolved against `allowed_scopes` (NULL: the resolver);
/// revoked ones omitted; `scopeKeys` their sorted `prefix:value` keys.
/// Under the auth-lease outage signal (§7.3.3) the client's lease resolves
/// them and the answer adds `"leaseExpiresAtMs"` (the gateway ends the
/// session then). Touches the partition registry; creates no client record.
/// Errors: `syncular.invalid_argument` (22023), `sync.invalid_request`
/// (22023, NUL in `client_id`), `sync.invalid_client_id` (22023, reserved
/// prefix or bound to another actor), `sync.invalid_subscription` (22023),
/// `syncular.no_schema` (55000), resolver errors, `sync.auth_lease_required`
/// / `sync.auth_lease_revoked` (28000) under the outage signal.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn realtime_open(
    partition: Option<&str>,
    actor_id: Option<&str>,
    client_id: Option<&str>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> JsonB {
    let partition = required_text(partition, "partition");
    let actor_id = required_text(actor_id, "actor_id");
    let client_id = required_text(client_id, "client_id");
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = Caller {
        partition,
        actor_id,
        allowed_scopes: allowed.as_ref(),
        connection_client_id: None,
    };
    JsonB(open::open(&caller, client_id).and_then(|session| session.to_json(&caller, client_id)).or_raise())
}

/// `syncular.realtime_deltas(partition text, groups jsonb, max_delta_bytes
/// integer DEFAULT 1048576, through_seq bigint DEFAULT NULL) returns
/// table(group_index integer, kind text, cursor bigint, delta bytea)` — one
/// call per notification burst of a partition (§8.2, §8.3). `through_seq`
/// caps the window at the highest `commitSeq` the gateway has seen notified
/// (NULL: the partition's `max_commit_seq`).
///
/// `groups`: `[{"registrations","schemaVersion","logEpoch","wireVersion",
/// "cursor","suppressed"}]`. One row per group in input order; `cursor` is
/// the window's end — the partition's `max_commit_seq` read by the call,
/// capped by `through_seq` (every group's new delivered cursor); `kind` is `none`, `delta` (then `delta` holds a
/// complete SSP2 response in the group's wire version), `delta-too-large`,
/// `catchup-required` or `reset-required` (rules: docs/src/sql/realtime.md, module
/// `engine::realtime::deltas`). Read-only.
/// Errors: `syncular.invalid_argument` (22023) for malformed groups,
/// `max_delta_bytes < 64` or a negative `through_seq`; `syncular.no_schema`
/// (55000).
#[pg_extern(stable, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn realtime_deltas(
    partition: Option<&str>,
    groups: Option<Jsonb>,
    max_delta_bytes: default!(Option<i32>, 1048576),
    through_seq: default!(Option<i64>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(group_index, i32),
        name!(kind, String),
        name!(cursor, i64),
        name!(delta, Option<Vec<u8>>),
    ),
> {
    let partition = required_text(partition, "partition");
    let groups = required(groups.as_ref(), "groups");
    let max = *required(max_delta_bytes.as_ref(), "max_delta_bytes");
    let answer = deltas::run(partition, &groups.0, max, through_seq).or_raise();
    let through = answer.through;
    TableIterator::new(answer.outcomes.into_iter().enumerate().map(move |(i, outcome)| {
        let kind = outcome.kind().to_owned();
        let bytes = match outcome {
            deltas::Outcome::Delta(bytes) => Some(bytes),
            _ => None,
        };
        (i32::try_from(i).unwrap_or(i32::MAX), kind, through, bytes)
    }))
}

/// `syncular.realtime_ack(partition text, acks jsonb) returns integer` —
/// batched §8.2 acks: `acks` = `[{"clientId","actorId","cursor","logEpoch"}]`;
/// each moves its client record's cursor to `GREATEST(cursor, LEAST(ack,
/// max_commit_seq))` (never back) when the record is bound to that actor and
/// the epoch is current. Returns the number of records updated.
/// Errors: `syncular.invalid_argument` (22023) for malformed `acks`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn realtime_ack(partition: Option<&str>, acks: Option<Jsonb>) -> i32 {
    let partition = required_text(partition, "partition");
    let acks = required(acks.as_ref(), "acks");
    let updated = ack::run(partition, &acks.0).or_raise();
    i32::try_from(updated).unwrap_or(i32::MAX)
}

/// `syncular.refresh_scopes(partition text, actor_id text DEFAULT NULL)
/// returns void` — a host-initiated, fail-closed registration refresh
/// (§8.7): call it in the transaction that changes an actor's membership; at
/// COMMIT every gateway re-resolves that actor's connected sessions (every
/// session of the partition when `actor_id` is NULL) before serving later
/// commits. Raises `NOTIFY syncular_scopes` (payload:
/// `syncular.realtime_scopes_payload`). Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn refresh_scopes(partition: Option<&str>, actor_id: default!(Option<&str>, "NULL")) {
    let partition = required_text(partition, "partition");
    if actor_id == Some("") {
        raise(EngineError::host(HostCode::InvalidArgument, "argument actor_id must not be empty"));
    }
    let caller = Caller { partition, actor_id: actor_id.unwrap_or("*"), allowed_scopes: None, connection_client_id: None };
    check_caller(&caller).or_raise();
    notify::notify_scopes(partition, actor_id).or_raise();
}

/// `syncular.realtime_scopes_payload(partition text, actor_id text DEFAULT
/// NULL) returns text` — the signed `syncular_scopes` payload `refresh_scopes`
/// raises: `<base64url(partition)>[:<base64url(actor_id)>]:<tag>`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn realtime_scopes_payload(partition: Option<&str>, actor_id: default!(Option<&str>, "NULL")) -> String {
    let partition = required_text(partition, "partition");
    notify::scopes_payload(partition, actor_id).or_raise()
}

/// `syncular.notification_key() returns bytea` — the 32-byte key that signs
/// the `syncular_commit` and `syncular_scopes` payloads (created on first
/// use). Any database role can NOTIFY any channel, so a gateway verifies
/// every payload's tag with this key (`syncular_protocol::notification`) and
/// drops forgeries; our gateway also seals its presence relay with it.
/// Granted to `syncular_gateway` only.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn notification_key() -> Vec<u8> {
    crate::store::notifications::notification_key().or_raise()
}

/// `syncular.error_response(partition text, wire_version integer, error
/// jsonb) returns bytea` — the §8.7 failure response of a socket round:
/// `RESP_HEADER` (v2: the partition's `logEpoch`, `resetRequired = false`),
/// `ERROR` built from the §10.1 object (`code`, `message`, `category`,
/// `retryable`, `recommendedAction`, optional `details`), `END`. Read-only.
/// Errors: `syncular.invalid_argument` (22023): wire version not 1–3, a
/// malformed object.
#[pg_extern(stable, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn error_response(partition: Option<&str>, wire_version: Option<i32>, error: Option<Jsonb>) -> Vec<u8> {
    let partition = required_text(partition, "partition");
    let wire_version = *required(wire_version.as_ref(), "wire_version");
    let error = required(error.as_ref(), "error");
    error_response::run(partition, wire_version, &error.0).or_raise()
}
