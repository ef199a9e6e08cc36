//! The session rules of realtime as SQL (SPEC §8; docs/src/sql/realtime.md "Session rules"):
//! `syncular.realtime_connect`, `syncular.realtime_reload`, `syncular.realtime_pass`. With
//! `syncular.realtime_ack` and `syncular.error_response` they are everything a gateway calls
//! to serve realtime: it keeps each session's state verbatim, groups sessions by equal state,
//! and sends what the answers say.
//!
//! All are `SECURITY DEFINER` with a pinned `search_path`; EXECUTE is granted to
//! `syncular_gateway` (sql/privileges.sql). NULL or empty required text arguments fail with
//! `syncular.invalid_argument` (22023).

use pgrx::prelude::*;
use super::json_arg::Jsonb;
use pgrx::JsonB;

use crate::api::errors::OrRaise;
use crate::api::sync::{required, required_text};
use crate::engine::auth::caller::Caller;
use crate::engine::error::{EngineError, HostCode};
use crate::engine::realtime::session;

/// `syncular.realtime_connect(partition text, actor_id text, client_id text, allowed_scopes
/// jsonb DEFAULT NULL) returns jsonb` — opens the realtime session of `client_id` (§8.1) as
/// `syncular.realtime_open` does, and answers what the gateway sends and keeps:
/// `{"state","resume","hello","sessionId","scopeKeys","latestCursor","logEpoch"
/// [,"leaseExpiresAtMs"]}` — `logEpoch` what its acks carry (`syncular.realtime_ack`);
/// `hello` the text message to send first; `state` the session's state (keep it verbatim);
/// `resume` null or `{"cursor","state"}` (once an ack reaches `cursor`, keep `state`);
/// `scopeKeys` the presence grant (§8.6.3); `leaseExpiresAtMs` when the registrations came
/// from an auth lease (close the session then).
/// Errors: those of `syncular.realtime_open` (`sync.invalid_client_id`, `sync.invalid_request`
/// 22023, `syncular.no_schema` 55000, `sync.auth_lease_required` / `sync.auth_lease_revoked`
/// 28000 under the outage signal, …).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn realtime_connect(
    partition: Option<&str>,
    actor_id: Option<&str>,
    client_id: Option<&str>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> JsonB {
    let partition = required_text(partition, "partition");
    let actor_id = required_text(actor_id, "actor_id");
    let client_id = required_text(client_id, "client_id");
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = Caller { partition, actor_id, allowed_scopes: allowed.as_ref(), connection_client_id: None };
    JsonB(session::connect(&caller, client_id).or_raise())
}

/// `syncular.realtime_reload(partition text, actor_id text, client_id text, allowed_scopes
/// jsonb, state jsonb, reason text, wire_version integer DEFAULT NULL) returns jsonb` —
/// re-resolves a session's registrations: `reason` = `'connect'` (a scopes refresh raced the
/// open), `'round-end'` (a §8.7 socket round ended; `wire_version` = the round request's),
/// `'host'` (a `syncular_scopes` notification or LISTEN recovery: fail-closed). Answers
/// `{"state","resume","send","scopeKeys","latestCursor","logEpoch","changed","emptied"}`: keep `state`
/// (and `resume`), send each text of `send` in order; `emptied` when the resolution failed
/// and the registrations were emptied (host only).
/// Errors: `syncular.invalid_argument` (22023: malformed state, unknown reason, wire version
/// not 1–3); for `'connect'` / `'round-end'` the errors of `syncular.realtime_open` (keep the
/// previous state).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn realtime_reload(
    partition: Option<&str>,
    actor_id: Option<&str>,
    client_id: Option<&str>,
    allowed_scopes: Option<Jsonb>,
    state: Option<Jsonb>,
    reason: Option<&str>,
    wire_version: default!(Option<i32>, "NULL"),
) -> JsonB {
    let partition = required_text(partition, "partition");
    let actor_id = required_text(actor_id, "actor_id");
    let client_id = required_text(client_id, "client_id");
    let state = required(state.as_ref(), "state");
    let reason = session::Reason::parse(required_text(reason, "reason")).or_raise();
    let previous = session::parse_state(&state.0, "state").or_raise();
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = Caller { partition, actor_id, allowed_scopes: allowed.as_ref(), connection_client_id: None };
    JsonB(session::reload(&caller, client_id, &previous, reason, wire_version.map(i64::from)).or_raise())
}

/// `syncular.realtime_pass(partition text, states jsonb, max_delta_bytes integer DEFAULT
/// 1048576, through_seq bigint DEFAULT NULL, in_round boolean[] DEFAULT NULL) returns
/// table(state_index integer, state jsonb, message bytea, control text, resume jsonb, overflow
/// jsonb)` — one delta pass per notification burst of a partition (§8.2, §8.3): `states` = the
/// distinct states of the partition's sessions; `in_round[i]` true when the sessions holding
/// `states[i]` have a socket round in flight (§8.7: wake-ups, never a delta — a state held by
/// both kinds of sessions appears twice); `through_seq` = the highest `commitSeq` notified so
/// far (NULL: the partition's `max_commit_seq`). One row per
/// state, in input order: every session holding `states[state_index]` keeps `state` (and
/// `resume`), and is sent `message` (a binary message: the `0x00`-tagged delta) and/or
/// `control` (a text message: a wake-up); `overflow` (with a message) = `{"state","control",
/// "resume"}` to keep and send instead when the socket cannot take the message. Read-only.
/// Errors: `syncular.invalid_argument` (22023: malformed states, `in_round` of another length
/// or with a NULL, `max_delta_bytes` < 64, negative `through_seq`), `syncular.no_schema` (55000).
#[pg_extern(stable, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn realtime_pass(
    partition: Option<&str>,
    states: Option<Jsonb>,
    max_delta_bytes: default!(Option<i32>, 1048576),
    through_seq: default!(Option<i64>, "NULL"),
    in_round: default!(Option<Vec<Option<bool>>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(state_index, i32),
        name!(state, JsonB),
        name!(message, Option<Vec<u8>>),
        name!(control, Option<String>),
        name!(resume, Option<JsonB>),
        name!(overflow, Option<JsonB>),
    ),
> {
    let partition = required_text(partition, "partition");
    let states = required(states.as_ref(), "states");
    let max = *required(max_delta_bytes.as_ref(), "max_delta_bytes");
    let in_round = in_round
        .map(|flags| flags.into_iter().collect::<Option<Vec<bool>>>())
        .map(|flags| flags.ok_or_else(|| EngineError::host(HostCode::InvalidArgument, "in_round must not contain NULL")).or_raise());
    let rows = session::pass(partition, &states.0, max, through_seq, in_round.as_deref()).or_raise();
    let json = |v: Option<serde_json::Value>| v.filter(|v| !v.is_null()).map(JsonB);
    TableIterator::new(rows.into_iter().map(move |d| {
        let resume = json(d.resume.and_then(|r| serde_json::to_value(r).ok()));
        let overflow = json(d.overflow.and_then(|o| serde_json::to_value(o).ok()));
        (i32::try_from(d.index).unwrap_or(i32::MAX), JsonB(d.state), d.message, d.control, resume, overflow)
    }))
}
