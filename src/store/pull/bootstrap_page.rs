//! Bootstrap page reads (SPEC §4.7, §5.2): current rows of one app table for
//! one scope variable's values, keyset-paged by row id through the
//! row→scope inverted index `sync_row_scopes`.
//!
//! A page batch is read in up to three statements ([`PageReader::read`]):
//!
//! 1. **Candidates**: the row ids after the cursor, in row-id order, from
//!    `sync_row_scopes` — one ordered, LIMITed index range scan for a single
//!    effective value, or one per value (lateral) merged and de-duplicated
//!    for several.
//! 2. **Range**: the app rows whose primary key lies between the first and
//!    the last candidate, in one primary-key range scan LIMITed to twice the
//!    candidates. When the candidates are dense in the app table (one scope
//!    value per partition, or a few), this reads every candidate's row at
//!    the cost of a sequential walk of the index leaves instead of a
//!    descent per row — the descent, with its collation-aware text
//!    comparisons, was most of a page's cost. Rows of other scopes in the
//!    range are dropped.
//! 3. **Probe**: one primary-key probe per candidate the range did not
//!    return — those past a range cut by its limit (sparse candidates), and
//!    vanished rows — written as the one-key range `_sync_row_id >= id AND
//!    _sync_row_id <= id ORDER BY _sync_row_id` (why, below). A reader whose
//!    range read was cut once (sparse candidates) probes directly from then
//!    on, so a sparse walk pays at most one wasted range read.
//!
//! A candidate whose app row vanished comes back without data and still
//! advances the row cursor. The exact multi-variable scope match is the
//! engine's job. Row ids are matched between the statements by equality
//! only (byte equality: a database's default collation is deterministic),
//! and every candidate the range missed is probed, so what a batch returns
//! does not depend on the two indexes sorting alike — only its cost does.
//!
//! What fixes the plans: each statement runs through
//! [`crate::store::spi::pinned_plan`] (one generic plan per backend and app table,
//! planned with sequential and bitmap scans disabled — never a hash join over
//! the partition's rows, never a sequential scan kept from when the table was
//! small). The candidate walk is `sync_row_scopes_pkey` or
//! `sync_row_scopes_by_row`: both bound `row_id` after the cursor within
//! `(partition, tbl)` and deliver row-id order, so either stops after one
//! batch. The range asks for the primary key's order with both row-id
//! bounds, so only the primary key serves it without a sort. The probe:
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
//! `src/tests/sync_pull_explain.rs` asserts the three plans (with a declared
//! index on the app table) in the three statistics states.
//!
//! Pinning (§4.7): the page reads the rows as they are NOW, not as of
//! `asOfCommitSeq` — exactly what the reference server does. That is sound
//! because rows only move forward: every change after the pin is replayed by
//! the incremental pull that follows the bootstrap (`asOfCommitSeq <
//! commitSeq`), so a row served newer than the pin is re-applied to the same
//! final state, a row deleted after the pin is deleted again idempotently,
//! and nothing is ever served OLDER than the pin (the pin is read after the
//! push half, and pushes commit their log and rows atomically). The same
//! argument covers the statements of one batch seeing different snapshots:
//! a row inserted between them is not a candidate (it is replayed), one
//! deleted between them comes back without data (its delete is replayed).

use std::collections::{HashMap, HashSet};

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::{Spi, SpiClient};

use crate::store::{spi::pinned_plan, spi::result_rows};
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

/// App rows one range read may return per candidate before the reader
/// treats the candidates as sparse and probes them instead.
const RANGE_ROWS_PER_CANDIDATE: usize = 2;

/// One of the three statements of a page read, with its parameters (for
/// [`explain_page_statement`]; the reader builds the same ones).
#[derive(Debug, Clone, Copy)]
pub enum PageStatement<'a> {
    /// The candidates' row ids, in row-id order.
    Candidates(&'a PageQuery<'a>),
    /// The app rows with row ids in `[first, last]`, in row-id order, at most `limit`.
    Range {
        /// Host partition.
        partition: &'a str,
        /// Quoted, schema-qualified app table.
        app_table: &'a str,
        /// Lowest row id (inclusive).
        first: &'a str,
        /// Highest row id (inclusive).
        last: &'a str,
        /// Max rows.
        limit: i64,
    },
    /// The app rows of exactly these row ids (one primary-key probe each).
    Probe {
        /// Host partition.
        partition: &'a str,
        /// Quoted, schema-qualified app table.
        app_table: &'a str,
        /// Row ids to probe.
        ids: &'a [String],
    },
}

impl<'a> PageStatement<'a> {
    fn sql(&self) -> String {
        match self {
            PageStatement::Candidates(q) if q.values.len() == 1 => {
                let (after, limit) = if q.after_row_id.is_some() { (" AND rs.row_id > $5", "$6") } else { ("", "$5") };
                format!(
                    "SELECT rs.row_id FROM syncular.sync_row_scopes rs \
                     WHERE rs.partition = $1 AND rs.tbl = $2 AND rs.var = $3 AND rs.value = $4{after} \
                     ORDER BY rs.row_id LIMIT {limit}"
                )
            }
            PageStatement::Candidates(q) => {
                let (after, limit) = if q.after_row_id.is_some() { (" AND rs.row_id > $5", "$6") } else { ("", "$5") };
                format!(
                    "SELECT DISTINCT s.row_id \
                     FROM unnest($4::text[]) AS v(value) \
                     CROSS JOIN LATERAL ( \
                         SELECT rs.row_id FROM syncular.sync_row_scopes rs \
                         WHERE rs.partition = $1 AND rs.tbl = $2 AND rs.var = $3 AND rs.value = v.value{after} \
                         ORDER BY rs.row_id LIMIT {limit}) s \
                     ORDER BY s.row_id LIMIT {limit}"
                )
            }
            PageStatement::Range { app_table, .. } => format!(
                "SELECT a._sync_row_id, a._sync_version, a._sync_scopes, a._sync_payload FROM {app_table} a \
                 WHERE a._sync_partition = $1 AND a._sync_row_id >= $2 AND a._sync_row_id <= $3 \
                 ORDER BY a._sync_row_id LIMIT $4"
            ),
            PageStatement::Probe { app_table, .. } => format!(
                "SELECT c.row_id, r._sync_version, r._sync_scopes, r._sync_payload \
                 FROM unnest($2::text[]) AS c(row_id) \
                 CROSS JOIN LATERAL ( \
                     SELECT a._sync_version, a._sync_scopes, a._sync_payload FROM {app_table} a \
                     WHERE a._sync_partition = $1 \
                       AND a._sync_row_id >= c.row_id AND a._sync_row_id <= c.row_id \
                     ORDER BY a._sync_row_id) r"
            ),
        }
    }

    fn args(&self) -> Vec<DatumWithOid<'a>> {
        match *self {
            PageStatement::Candidates(q) => {
                let mut args = vec![
                    DatumWithOid::from(q.partition),
                    DatumWithOid::from(q.table),
                    DatumWithOid::from(q.variable),
                ];
                if q.values.len() == 1 {
                    args.push(DatumWithOid::from(q.values[0].as_str()));
                } else {
                    args.push(DatumWithOid::from(q.values.to_vec()));
                }
                if let Some(after) = q.after_row_id {
                    args.push(DatumWithOid::from(after));
                }
                args.push(DatumWithOid::from(q.candidate_limit));
                args
            }
            PageStatement::Range { partition, first, last, limit, .. } => vec![
                DatumWithOid::from(partition),
                DatumWithOid::from(first),
                DatumWithOid::from(last),
                DatumWithOid::from(limit),
            ],
            PageStatement::Probe { partition, ids, .. } => {
                vec![DatumWithOid::from(partition), DatumWithOid::from(ids.to_vec())]
            }
        }
    }
}

/// Reads the pages of one bootstrap walk. It remembers across calls whether
/// the candidates turned out sparse in the app table (a range read was cut
/// before reaching the last candidate): from then on it probes only.
#[derive(Debug, Default)]
pub struct PageReader {
    sparse: bool,
}

impl PageReader {
    /// A reader that starts with range reads.
    pub fn new() -> Self {
        PageReader::default()
    }

    /// Reads up to `candidate_limit` candidates of the page after
    /// `after_row_id`, ascending by row id, with each row's version, stored
    /// scopes and payload (module docs: candidates, then one range read,
    /// then probes for what the range did not cover). Errors: SPI failures
    /// (an unknown app table is an SPI error).
    pub fn read(&mut self, q: &PageQuery<'_>) -> StoreResult<Vec<PageRow>> {
        Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
            let ids = read_candidates(client, q)?;
            let (Some(first), Some(last)) = (ids.first(), ids.last()) else { return Ok(Vec::new()) };
            let mut found: HashMap<String, PageRowData> = HashMap::with_capacity(ids.len());
            if !self.sparse {
                let limit = ids.len() * RANGE_ROWS_PER_CANDIDATE;
                let range = PageStatement::Range {
                    partition: q.partition,
                    app_table: q.app_table,
                    first,
                    last,
                    limit: i64::try_from(limit).unwrap_or(i64::MAX),
                };
                let mut wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
                let (read, reached_last) = read_rows(client, &range, |id| wanted.remove(id), &mut found)?;
                // The read walked the whole range unless its limit cut it
                // before the last candidate: then the candidates are sparse.
                self.sparse = read >= limit && !reached_last;
            }
            // Whatever the range did not return is probed: candidates past a
            // cut, and vanished rows (which the probe confirms absent).
            let missing: Vec<String> = ids.iter().filter(|id| !found.contains_key(id.as_str())).cloned().collect();
            if !missing.is_empty() {
                let probe = PageStatement::Probe { partition: q.partition, app_table: q.app_table, ids: &missing };
                read_rows(client, &probe, |_| true, &mut found)?;
            }
            Ok(ids
                .into_iter()
                .map(|row_id| {
                    let data = found.remove(&row_id);
                    PageRow { row_id, data }
                })
                .collect())
        })
        .map_err(StoreError::spi("read_bootstrap_page"))
    }
}

fn read_candidates(client: &mut SpiClient<'_>, q: &PageQuery<'_>) -> Result<Vec<String>, pgrx::spi::Error> {
    let statement = PageStatement::Candidates(q);
    let table = pinned_plan::execute(client, &statement.sql(), None, &statement.args())?;
    let mut ids = Vec::with_capacity(table.len());
    result_rows::for_each(&table, [pg_sys::TEXTOID], |row| {
        ids.push(row.get::<String>(0).unwrap_or_default());
        Ok::<_, pgrx::spi::Error>(())
    })?;
    Ok(ids)
}

/// Runs a range or probe statement; keeps the rows whose id `keep` accepts
/// in `found`. Returns the number of rows read and whether the last one was
/// the statement's `last` bound (always `false` for a probe).
fn read_rows(
    client: &mut SpiClient<'_>,
    statement: &PageStatement<'_>,
    mut keep: impl FnMut(&str) -> bool,
    found: &mut HashMap<String, PageRowData>,
) -> Result<(usize, bool), pgrx::spi::Error> {
    let table = pinned_plan::execute(client, &statement.sql(), None, &statement.args())?;
    let types = [pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::JSONBOID, pg_sys::BYTEAOID];
    let mut scopes = result_rows::JsonbTextCache::default();
    let mut read = 0usize;
    let mut last_id = None;
    result_rows::for_each(&table, types, |row| {
        read += 1;
        let row_id = row.get::<String>(0).unwrap_or_default();
        if keep(&row_id) {
            if let (Some(server_version), Some(scopes_json), Some(payload)) =
                (row.get::<i64>(1), row.jsonb_text(2, &mut scopes), row.get::<Vec<u8>>(3))
            {
                found.insert(row_id.clone(), PageRowData { server_version, scopes_json, payload });
            }
        }
        last_id = Some(row_id);
        Ok::<_, pgrx::spi::Error>(())
    })?;
    let reached_last = match statement {
        PageStatement::Range { last, .. } => last_id.as_deref() == Some(*last),
        _ => false,
    };
    Ok((read, reached_last))
}

/// `EXPLAIN ([ANALYZE,] FORMAT JSON)` of the plan one page statement runs
/// (the pinned generic plan, see [`crate::store::spi::pinned_plan::explain`]) —
/// for the plan tests only.
pub fn explain_page_statement(statement: &PageStatement<'_>, analyze: bool) -> StoreResult<String> {
    pinned_plan::explain(&statement.sql(), &statement.args(), analyze)
        .map_err(StoreError::spi("explain_bootstrap_page"))
}
