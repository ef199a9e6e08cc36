//! Segment expiry and garbage collection (docs/src/sql/segments.md "Segment expiry and
//! garbage collection"): `syncular.segment_sweep` (admin).

use pgrx::prelude::*;
use pgrx::JsonB;

use crate::api::errors::OrRaise;
use crate::api::sync::required;
use crate::engine::segments::sweep;

/// `syncular.segment_sweep(max_rows integer DEFAULT 1000, grace_ms bigint
/// DEFAULT 3600000) returns jsonb` — deletes up to `max_rows` publications
/// expired more than `grace_ms` ago, then the bytes of up to `max_rows`
/// segments stored more than `grace_ms` ago that no publication references
/// (skipping any a publisher holds), then the signed-URL keys retired long
/// enough; returns `{"publications", "segments", "urlKeys"}` (counts
/// deleted). Run it in its own READ COMMITTED transaction, repeated until
/// both counts are 0. Admin only. Errors: `syncular.invalid_argument`
/// (22023: a NULL argument, `max_rows` < 1, negative grace, REPEATABLE READ
/// or stricter).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn segment_sweep(max_rows: default!(Option<i32>, 1000), grace_ms: default!(Option<i64>, 3600000)) -> JsonB {
    debug_assert_eq!(sweep::DEFAULT_GRACE_MS, 3_600_000);
    let max_rows = *required(max_rows.as_ref(), "max_rows");
    let grace_ms = *required(grace_ms.as_ref(), "grace_ms");
    JsonB(sweep::sweep(i64::from(max_rows), grace_ms).or_raise().to_json())
}
