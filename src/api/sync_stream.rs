//! `syncular.sync_stream`, `syncular.pull_stream` — the streaming forms of
//! `syncular.sync` / `syncular.pull` (SPEC §1.4; docs/src/sql/sync.md "Streaming rounds").
//!
//! Value-per-call set-returning functions: called in the SELECT list behind
//! a cursor (`DECLARE … CURSOR FOR SELECT syncular.pull_stream(…)`, then
//! `FETCH`), or through a protocol-level portal with a row limit, each row is
//! produced only when it is fetched — one step of the round
//! ([`crate::engine::round::RoundStream`]) per row. Called in `FROM`,
//! Postgres materializes the whole set first (a tuplestore): correct, but no
//! streaming.
//!
//! `SECURITY DEFINER` with a pinned `search_path`, EXECUTE for
//! `syncular_gateway` only, like the functions they stream.

use pgrx::prelude::*;
use super::json_arg::Jsonb;

use crate::api::errors::OrRaise;
use crate::api::sync::{required, required_text};
use crate::engine::round::{Halves, OwnedCaller, RoundStream};

fn stream(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: Option<Jsonb>,
    connection_client_id: Option<&str>,
    halves: Halves,
) -> SetOfIterator<'static, Vec<u8>> {
    // Only the arguments are copied here (this part runs in the function's
    // multi-call memory context); every step runs in `next`, in the
    // executor's per-row context.
    let caller = OwnedCaller {
        partition: required_text(partition, "partition").to_owned(),
        actor_id: required_text(actor_id, "actor_id").to_owned(),
        allowed_scopes: allowed_scopes.map(|j| j.0),
        connection_client_id: connection_client_id.map(str::to_owned),
    };
    let request = required(request, "request").to_vec();
    let mut round = RoundStream::new(caller, request, halves);
    SetOfIterator::new(std::iter::from_fn(move || round.next_chunk().or_raise()))
}

/// `syncular.sync_stream(partition text, actor_id text, request bytea,
/// allowed_scopes jsonb DEFAULT NULL, connection_client_id text DEFAULT NULL)
/// returns SETOF bytea` — [`crate::api::sync`]'s `syncular.sync` produced in
/// chunks (§1.4): the rows, in order, concatenate to exactly the bytes
/// `syncular.sync` returns for the same request and database state. Row 1:
/// `RESP_HEADER`, `LEASE`, every `PUSH_RESULT` (or the whole response when
/// the round has no pull half, or ends at the schema floor / a reset);
/// then one row per incremental/revoked/reset section and one per bootstrap
/// segment (image or page); the last row is `END` (5 bytes).
///
/// Durability: row 1 reports the push half's results before the caller's
/// transaction has committed — a caller relaying rows to a client as they
/// come must not use this form for a request with `PUSH_COMMIT` frames
/// (commit `syncular.push` first, then stream `syncular.pull_stream`, as the
/// gateway does). Errors: those of `syncular.sync`, raised by the fetch that
/// meets them (every request-level check by the first one).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn sync_stream(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
    connection_client_id: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, Vec<u8>> {
    stream(partition, actor_id, request, allowed_scopes, connection_client_id, Halves::Both)
}

/// `syncular.pull_stream(partition text, actor_id text, request bytea,
/// allowed_scopes jsonb DEFAULT NULL, connection_client_id text DEFAULT NULL)
/// returns SETOF bytea` — `syncular.pull` produced in chunks, as
/// [`sync_stream`]: the rows concatenate to exactly `syncular.pull`'s bytes.
/// Push commits in the request are validated but not applied, so nothing
/// a row reports waits on this transaction's COMMIT except the pull's own
/// bookkeeping (and, for a request without `PUSH_COMMIT` frames, the `LEASE`
/// it issues — docs/src/sql/sync.md "Streaming rounds"). Errors: those of `syncular.pull`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn pull_stream(
    partition: Option<&str>,
    actor_id: Option<&str>,
    request: Option<&[u8]>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
    connection_client_id: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, Vec<u8>> {
    stream(partition, actor_id, request, allowed_scopes, connection_client_id, Halves::PullOnly)
}
