//! `syncular.round_failures(partition)`: the `ROUND_FAILURE` reports of a
//! partition's clients (wire version 3; [`crate::engine::round::failures`]).
//! Administrative: EXECUTE revoked from PUBLIC and not granted to
//! `syncular_gateway` (sql/privileges.sql).

use pgrx::prelude::*;

use crate::api::errors::OrRaise;
use crate::api::sync::required_text;
use crate::engine::round::failures as round_failures;

/// `syncular.round_failures(partition text) returns table(client_id text,
/// code text, reports bigint, last_reported_at_ms bigint)` — per client and
/// reported code: how many requests carried the report and the server clock
/// (Unix ms) of the last one, newest first. Read-only. Errors:
/// `syncular.invalid_argument` (22023) for a NULL or empty partition.
#[pg_extern(stable, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::type_complexity)]
fn round_failures(
    partition: Option<&str>,
) -> TableIterator<
    'static,
    (name!(client_id, String), name!(code, String), name!(reports, i64), name!(last_reported_at_ms, i64)),
> {
    let partition = required_text(partition, "partition");
    let rows = round_failures::list(partition).or_raise();
    TableIterator::new(rows.into_iter().map(|r| (r.client_id, r.code, r.reports, r.last_reported_at_ms)))
}
