//! Bootstrap page reads (SPEC §4.7, §5.2): current rows of one app table for
//! one scope variable's values, keyset-paged by row id through the
//! row→scope inverted index `sync_row_scopes`.
//!
//! Candidates come from one lateral, ordered, LIMITed index range scan of
//! `sync_row_scopes` per effective value (`row_id > cursor ORDER BY row_id
//! LIMIT n`), merged and de-duplicated, then joined to the app table by its
//! primary key `(_sync_partition, _sync_row_id)`: one LATERAL probe per
//! candidate, written as the one-key range `_sync_row_id >= c.row_id AND
//! _sync_row_id <= c.row_id ORDER BY _sync_row_id` rather than as an
//! equality. A candidate whose app row vanished comes back without data and
//! still advances the row cursor. The exact multi-variable scope match is the
//! engine's job.
//!
//! What fixes the plan: the statement runs through
//! [`crate::store::pinned_plan`] (one generic plan per backend and app table,
//! planned with sequential and bitmap scans disabled — never a hash join over
//! the partition's rows, never a sequential scan kept from when the table was
//! small). The candidate walk is `sync_row_scopes_pkey` or
//! `sync_row_scopes_by_row`: both bound `row_id` after the cursor within
//! `(partition, tbl)` and deliver row-id order, so either stops after one page
//! (the latter reads the other values' entries on the way). The probe:
//! every declared index of an app table leads with `_sync_partition` too,
//! and an equality probe would cost exactly as much through such an index
//! (index condition on the partition, the row id as a filter) whenever the
//! estimates say one row — a tie the planner resolves towards the newer
//! index, i.e. a scan of the partition's rows per candidate. Written as a
//! range with its order asked for, a declared index also needs a sort, so the
//! primary key wins; the one remaining way to lose is a plan built while the
//! estimates put at most about one row of the table in a partition (a
//! generic plan estimates a partition as rows ÷ distinct partitions) *and*
//! the declared index's tree is shallower than the primary key's.
//! `src/tests/sync_pull_explain.rs` asserts the plan (with a declared index
//! on the app table) in the three statistics states.
//!
//! Pinning (§4.7): the page reads the rows as they are NOW, not as of
//! `asOfCommitSeq` — exactly what the reference server does. That is sound
//! because rows only move forward: every change after the pin is replayed by
//! the incremental pull that follows the bootstrap (`asOfCommitSeq <
//! commitSeq`), so a row served newer than the pin is re-applied to the same
//! final state, a row deleted after the pin is deleted again idempotently,
//! and nothing is ever served OLDER than the pin (the pin is read after the
//! push half, and pushes commit their log and rows atomically).

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::Spi;

use crate::store::{pinned_plan, spi_rows};
use crate::store::{StoreError, StoreResult};

/// One candidate of a bootstrap page.
#[derive(Debug, Clone)]
pub struct PageRow {
    /// Row id of the candidate (the keyset cursor advances over it).
    pub row_id: String,
    /// `None` when the app row vanished between index and table (cursor still advances).
    pub data: Option<PageRowData>,
}

/// The stored state of one app row.
#[derive(Debug, Clone)]
pub struct PageRowData {
    /// `_sync_version` (§2.2), ≥ 1.
    pub server_version: i64,
    /// `_sync_scopes` as JSON text `{"variable":"value",…}`.
    pub scopes_json: String,
    /// `_sync_payload`: the verbatim row-codec payload.
    pub payload: Vec<u8>,
}

/// Parameters of one bootstrap page read.
#[derive(Debug, Clone, Copy)]
pub struct PageQuery<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// The app table, schema-qualified and already quoted
    /// (`RegisteredTable::qualified_name`).
    pub app_table: &'a str,
    /// The table name as registered (the `tbl` key of the scope index).
    pub table: &'a str,
    /// The scope variable whose index entries select candidates.
    pub variable: &'a str,
    /// Effective values of `variable` (non-empty).
    pub values: &'a [String],
    /// Exclusive lower bound on row id; `None` = from the table's first row.
    pub after_row_id: Option<&'a str>,
    /// Max candidates (≥ 1).
    pub candidate_limit: i64,
}

fn page_sql(q: &PageQuery<'_>) -> String {
    let after = if q.after_row_id.is_some() { " AND rs.row_id > $6" } else { "" };
    let limit = if q.after_row_id.is_some() { "$7" } else { "$6" };
    format!(
        "SELECT c.row_id, r._sync_version, r._sync_scopes, r._sync_payload \
         FROM (SELECT DISTINCT s.row_id \
               FROM unnest($4::text[]) AS v(value) \
               CROSS JOIN LATERAL ( \
                   SELECT rs.row_id FROM syncular.sync_row_scopes rs \
                   WHERE rs.partition = $1 AND rs.tbl = $2 AND rs.var = $3 AND rs.value = v.value{after} \
                   ORDER BY rs.row_id LIMIT {limit}) s \
               ORDER BY s.row_id LIMIT {limit}) c \
         LEFT JOIN LATERAL ( \
             SELECT a._sync_version, a._sync_scopes, a._sync_payload FROM {app_table} a \
             WHERE a._sync_partition = $5 \
               AND a._sync_row_id >= c.row_id AND a._sync_row_id <= c.row_id \
             ORDER BY a._sync_row_id) r ON true \
         ORDER BY c.row_id",
        app_table = q.app_table,
    )
}

fn page_args<'a>(q: &PageQuery<'a>) -> Vec<DatumWithOid<'a>> {
    let mut args = vec![
        DatumWithOid::from(q.partition),
        DatumWithOid::from(q.table),
        DatumWithOid::from(q.variable),
        DatumWithOid::from(q.values.to_vec()),
        DatumWithOid::from(q.partition),
    ];
    if let Some(after) = q.after_row_id {
        args.push(DatumWithOid::from(after));
    }
    args.push(DatumWithOid::from(q.candidate_limit));
    args
}

/// Reads up to `candidate_limit` candidates of the page after `after_row_id`,
/// ascending by row id, with each row's version, stored scopes and payload.
/// Errors: SPI failures (an unknown app table is an SPI error).
pub fn read_bootstrap_page(q: &PageQuery<'_>) -> StoreResult<Vec<PageRow>> {
    let sql = page_sql(q);
    let args = page_args(q);
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(client, &sql, None, &args)?;
        let mut out = Vec::with_capacity(table.len());
        let types = [pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::JSONBOID, pg_sys::BYTEAOID];
        let mut scopes = spi_rows::JsonbTextCache::default();
        spi_rows::for_each(&table, types, |row| {
            let row_id = row.get::<String>(0).unwrap_or_default();
            let data = match (row.get::<i64>(1), row.jsonb_text(2, &mut scopes), row.get::<Vec<u8>>(3)) {
                (Some(server_version), Some(scopes_json), Some(payload)) => {
                    Some(PageRowData { server_version, scopes_json, payload })
                }
                _ => None,
            };
            out.push(PageRow { row_id, data });
            Ok::<_, pgrx::spi::Error>(())
        })?;
        Ok(out)
    })
    .map_err(StoreError::spi("read_bootstrap_page"))
}

/// `EXPLAIN ([ANALYZE,] FORMAT JSON)` of the plan the page statement runs
/// (the pinned generic plan, see [`crate::store::pinned_plan::explain`]) —
/// for the plan tests only.
pub fn explain_bootstrap_page(q: &PageQuery<'_>, analyze: bool) -> StoreResult<String> {
    let sql = page_sql(q);
    let args = page_args(q);
    pinned_plan::explain(&sql, &args, analyze).map_err(StoreError::spi("explain_bootstrap_page"))
}
