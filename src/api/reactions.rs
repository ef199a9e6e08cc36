//! Durable reactions in SQL (SPEC §6.9; docs/src/sql/reactions.md):
//! `syncular.set_reaction_planner` (admin), the worker functions
//! `claim_reactions`, `extend_reaction_lease`, `complete_reaction`,
//! `fail_reaction` (granted to `syncular_gateway`: a reaction runner is part
//! of the trusted server host), and the operator functions
//! `retry_dead_letter_reaction`, `prune_reactions`, `list_reactions`
//! (admin: not granted to `syncular_gateway`, sql/privileges.sql).
//!
//! The worker and operator functions are `SECURITY DEFINER` with a pinned
//! `search_path`, so their callers need no privilege on `sync_reactions`.
//! NULL or empty required text arguments fail with
//! `syncular.invalid_argument` (22023).

use pgrx::prelude::*;
use super::json_arg::Jsonb;
use pgrx::JsonB;

use crate::api::errors::{raise, OrRaise};
use crate::api::sync::required_text;
use crate::engine::error::{EngineError, HostCode};
use crate::engine::reactions::{planner, worker};
use crate::store::reactions::worker::ReactionRow;

/// `syncular._set_reaction_planner_oid(fn oid) returns void` — the body of
/// `syncular.set_reaction_planner(fn regprocedure)` (SQL wrapper below;
/// rules: `crate::engine::reactions::planner`). NULL removes it. Errors:
/// `syncular.invalid_validator` (22023: wrong shape, owner not a
/// superuser), `syncular.no_schema` (55000). Admin only.
#[pg_extern(name = "_set_reaction_planner_oid", volatile)]
fn set_reaction_planner_oid(function: Option<pg_sys::Oid>) {
    planner::set_reaction_planner(function).or_raise();
}

extension_sql!(
    r#"
CREATE FUNCTION syncular.set_reaction_planner(fn pg_catalog.regprocedure) RETURNS void
LANGUAGE sql VOLATILE
AS $$ SELECT syncular._set_reaction_planner_oid($1::pg_catalog.oid) $$;
COMMENT ON FUNCTION syncular.set_reaction_planner(pg_catalog.regprocedure) IS
  'Registers the reaction planner (commit jsonb) returns jsonb (SPEC 6.9); NULL removes it.';
"#,
    name = "set_reaction_planner",
    requires = [set_reaction_planner_oid]
);

/// The row shape `claim_reactions` and `list_reactions` return.
type Row = (
    String, String, i32, JsonB, String, String, i64, i64, i64, String, i32, i32,
    Option<String>, Option<i64>, Option<i64>, Option<JsonB>,
);

fn row(r: ReactionRow) -> Row {
    (
        r.idempotency_key,
        r.kind,
        r.version,
        JsonB(r.payload),
        r.source_client_id,
        r.source_client_commit_id,
        r.source_commit_seq,
        r.created_at_ms,
        r.available_at_ms,
        r.status,
        r.attempts,
        r.max_attempts,
        r.lease_owner,
        r.lease_expires_at_ms,
        r.completed_at_ms,
        r.last_failure.map(JsonB),
    )
}

fn required<T>(value: Option<T>, name: &str) -> T {
    value.unwrap_or_else(|| raise(EngineError::host(HostCode::InvalidArgument, format!("argument {name} must not be NULL"))))
}

/// `syncular.claim_reactions(partition text, lease_owner text, types
/// text[], max_rows integer DEFAULT 10, lease_ms bigint DEFAULT 30000)
/// returns table(idempotency_key, type, version, payload, source_client_id,
/// source_client_commit_id, source_commit_seq, created_at_ms,
/// available_at_ms, status, attempts, max_attempts, lease_owner,
/// lease_expires_at_ms, completed_at_ms, last_failure)` — leases at most
/// `max_rows` due rows of the worker's handler `types` (pending and due, or
/// leased with an expired lease; `FOR UPDATE SKIP LOCKED`, so concurrent
/// claimers get disjoint rows) to the fresh token `lease_owner` for
/// `lease_ms` ms, `attempts + 1`. Errors: `syncular.invalid_argument`
/// (22023: NULL/empty partition or owner, owner over 256 bytes, `max_rows`
/// outside 1 … 1000, `lease_ms` outside 1 … 86,400,000).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn claim_reactions(
    partition: Option<&str>,
    lease_owner: Option<&str>,
    types: Option<Vec<Option<String>>>,
    max_rows: default!(Option<i32>, 10),
    lease_ms: default!(Option<i64>, 30000),
) -> TableIterator<'static, (
    name!(idempotency_key, String),
    name!(type, String),
    name!(version, i32),
    name!(payload, JsonB),
    name!(source_client_id, String),
    name!(source_client_commit_id, String),
    name!(source_commit_seq, i64),
    name!(created_at_ms, i64),
    name!(available_at_ms, i64),
    name!(status, String),
    name!(attempts, i32),
    name!(max_attempts, i32),
    name!(lease_owner, Option<String>),
    name!(lease_expires_at_ms, Option<i64>),
    name!(completed_at_ms, Option<i64>),
    name!(last_failure, Option<JsonB>),
)> {
    let partition = required_text(partition, "partition");
    let owner = required_text(lease_owner, "lease_owner");
    let types: Vec<String> = required(types, "types").into_iter().flatten().collect();
    let rows = worker::claim(partition, owner, &types, required(max_rows, "max_rows"), required(lease_ms, "lease_ms")).or_raise();
    TableIterator::new(rows.into_iter().map(row))
}

/// `syncular.extend_reaction_lease(partition text, idempotency_key text,
/// lease_owner text, lease_ms bigint DEFAULT 30000) returns bigint` — moves
/// the lease's expiry to now + `lease_ms` and returns it; NULL when the row
/// is not leased to `lease_owner` (another worker reclaimed it after it
/// expired: skip the handler). A runner calls it before each handler and
/// during long ones. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn extend_reaction_lease(
    partition: Option<&str>,
    idempotency_key: Option<&str>,
    lease_owner: Option<&str>,
    lease_ms: default!(Option<i64>, 30000),
) -> Option<i64> {
    let partition = required_text(partition, "partition");
    let key = required_text(idempotency_key, "idempotency_key");
    let owner = required_text(lease_owner, "lease_owner");
    worker::extend_lease(partition, key, owner, required(lease_ms, "lease_ms")).or_raise()
}

/// `syncular.complete_reaction(partition text, idempotency_key text,
/// lease_owner text) returns boolean` — marks the row `completed` if
/// `lease_owner` holds its lease (`false` otherwise: a stale worker cannot
/// acknowledge another's lease). Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn complete_reaction(partition: Option<&str>, idempotency_key: Option<&str>, lease_owner: Option<&str>) -> bool {
    let partition = required_text(partition, "partition");
    let key = required_text(idempotency_key, "idempotency_key");
    let owner = required_text(lease_owner, "lease_owner");
    worker::complete(partition, key, owner).or_raise()
}

/// `syncular.fail_reaction(partition text, idempotency_key text,
/// lease_owner text, code text, details jsonb DEFAULT NULL, permanent
/// boolean DEFAULT false, initial_backoff_ms bigint DEFAULT 1000,
/// max_backoff_ms bigint DEFAULT 300000) returns text` — records a failed
/// attempt of `lease_owner`'s lease and returns the row's new status:
/// `dead-letter` when `permanent` or attempts ≥ max attempts (failure time
/// in `available_at_ms`), else `pending`, due after `min(max_backoff_ms,
/// initial_backoff_ms × 2^(attempts − 1))`. `last_failure` = `{"code",
/// "atMs", "details"?}` (store a stable code, never raw exception text).
/// NULL when the row is not leased to `lease_owner`. Errors:
/// `syncular.invalid_argument` (code empty or over 256 bytes, details over
/// 8,192 bytes, backoffs negative or max below initial).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn fail_reaction(
    partition: Option<&str>,
    idempotency_key: Option<&str>,
    lease_owner: Option<&str>,
    code: Option<&str>,
    details: default!(Option<Jsonb>, "NULL"),
    permanent: default!(Option<bool>, false),
    initial_backoff_ms: default!(Option<i64>, 1000),
    max_backoff_ms: default!(Option<i64>, 300000),
) -> Option<String> {
    let partition = required_text(partition, "partition");
    let key = required_text(idempotency_key, "idempotency_key");
    let owner = required_text(lease_owner, "lease_owner");
    let code = required_text(code, "code");
    let backoff = worker::Backoff {
        initial_ms: required(initial_backoff_ms, "initial_backoff_ms"),
        max_ms: required(max_backoff_ms, "max_backoff_ms"),
    };
    worker::fail(partition, key, owner, code, details.as_ref().map(|d| &d.0), required(permanent, "permanent"), backoff)
        .or_raise()
        .map(str::to_owned)
}

/// `syncular.retry_dead_letter_reaction(partition text, idempotency_key
/// text) returns boolean` — the operator's reset of a dead-lettered row:
/// `pending`, due now, attempts 0, failure cleared; `false` when the row is
/// not dead-lettered. Serializes with [`prune_reactions`] on the row lock:
/// exactly one of them wins. Admin only. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn retry_dead_letter_reaction(partition: Option<&str>, idempotency_key: Option<&str>) -> bool {
    let partition = required_text(partition, "partition");
    let key = required_text(idempotency_key, "idempotency_key");
    worker::retry_dead_letter(partition, key).or_raise()
}

/// `syncular.prune_reactions(partition text, completed_retention_ms bigint
/// DEFAULT 2592000000, dead_letter_retention_ms bigint DEFAULT 7776000000,
/// max_rows integer DEFAULT 1000) returns table(completed bigint,
/// dead_lettered bigint, may_have_more boolean)` — one bounded cleanup pass:
/// completed rows completed strictly before now − 30 days (default) and
/// dead-lettered rows failed strictly before now − 90 days, at most
/// `max_rows` in all; never pending or leased rows. Call again while
/// `may_have_more`. Admin only. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn prune_reactions(
    partition: Option<&str>,
    completed_retention_ms: default!(Option<i64>, 2592000000i64),
    dead_letter_retention_ms: default!(Option<i64>, 7776000000i64),
    max_rows: default!(Option<i32>, 1000),
) -> TableIterator<'static, (name!(completed, i64), name!(dead_lettered, i64), name!(may_have_more, bool))> {
    let partition = required_text(partition, "partition");
    let p = worker::prune(
        partition,
        required(completed_retention_ms, "completed_retention_ms"),
        required(dead_letter_retention_ms, "dead_letter_retention_ms"),
        required(max_rows, "max_rows"),
    )
    .or_raise();
    TableIterator::once((p.completed, p.dead_lettered, p.may_have_more))
}

/// `syncular.list_reactions(partition text, status text DEFAULT NULL,
/// max_rows integer DEFAULT 100) returns table(…)` — the partition's
/// reactions (of `status` when given), oldest first, columns as
/// [`claim_reactions`]. Admin only. Errors: `syncular.invalid_argument`
/// (unknown status, `max_rows` outside 1 … 10,000).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn list_reactions(
    partition: Option<&str>,
    status: default!(Option<&str>, "NULL"),
    max_rows: default!(Option<i32>, 100),
) -> TableIterator<'static, (
    name!(idempotency_key, String),
    name!(type, String),
    name!(version, i32),
    name!(payload, JsonB),
    name!(source_client_id, String),
    name!(source_client_commit_id, String),
    name!(source_commit_seq, i64),
    name!(created_at_ms, i64),
    name!(available_at_ms, i64),
    name!(status, String),
    name!(attempts, i32),
    name!(max_attempts, i32),
    name!(lease_owner, Option<String>),
    name!(lease_expires_at_ms, Option<i64>),
    name!(completed_at_ms, Option<i64>),
    name!(last_failure, Option<JsonB>),
)> {
    let partition = required_text(partition, "partition");
    let rows = worker::list(partition, status, required(max_rows, "max_rows")).or_raise();
    TableIterator::new(rows.into_iter().map(row))
}
