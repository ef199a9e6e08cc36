//! Multi-row `INSERT … VALUES` statements (DESIGN §4; docs/src/operate/citus.md "Scaling out
//! with Citus"): the shape a Citus router planner sends to one shard.
//!
//! The default log write inserts its rows with `INSERT … SELECT … FROM
//! unnest($arrays)` inside data-modifying CTEs — one statement per request
//! on a single Postgres. Citus plans neither an `INSERT … SELECT` whose
//! source is not a colocated distributed table (the coordinator evaluates
//! the `SELECT` and copies the rows, which forces a two-phase commit) nor an
//! `INSERT` CTE on one shard. With `syncular.router_statements` on, the
//! store writes each table's rows with the statements built here instead:
//! one `INSERT INTO t (…) VALUES (…), (…) [tail]` per chunk, where every
//! row repeats the shared leading parameters (the partition is always `$1`)
//! and binds its own values to the following ones.
//!
//! Chunks have power-of-two sizes (at most [`MAX_CHUNK_ROWS`] rows): a
//! request of `n` rows runs one statement per set bit of `n` (beyond the
//! largest chunk, one per full chunk), and a backend keeps at most
//! `log2(MAX_CHUNK_ROWS) + 1` plans per statement head however the row
//! counts vary ([`crate::store::spi::plan_cache`] keys plans by SQL text).

use pgrx::datum::DatumWithOid;
use pgrx::spi::{SpiClient, SpiResult};

use crate::store::spi::plan_cache;

/// The largest chunk one statement inserts (a power of two; 128 rows × the
/// widest row of 9 values stays far below Postgres's 65,535 parameters).
pub const MAX_CHUNK_ROWS: usize = 128;

/// One multi-row insert: `head VALUES row, row, … tail`.
#[derive(Debug, Clone, Copy)]
pub struct ValuesInsert {
    /// `INSERT INTO syncular.t (c1, c2, …)`.
    pub head: &'static str,
    /// One row's expression list; each `{}` is replaced by the next per-row
    /// parameter, `$1`…`$k` name the shared leading parameters:
    /// `"($1, {}, {}::jsonb)"`.
    pub row: &'static str,
    /// What follows the rows: `""`, `" ON CONFLICT DO NOTHING"`, ….
    pub tail: &'static str,
}

impl ValuesInsert {
    /// Number of per-row parameters of one row.
    fn per_row(&self) -> usize {
        self.row.matches("{}").count()
    }

    /// The statement text for `rows` rows after `shared` leading parameters.
    pub fn sql(&self, shared: usize, rows: usize) -> String {
        let per_row = self.per_row();
        let mut sql = String::with_capacity(self.head.len() + self.tail.len() + 8 + rows * (self.row.len() + 8));
        sql.push_str(self.head);
        sql.push_str(" VALUES ");
        let mut next = shared + 1;
        for r in 0..rows {
            if r > 0 {
                sql.push_str(", ");
            }
            let mut parts = self.row.split("{}");
            if let Some(first) = parts.next() {
                sql.push_str(first);
            }
            for part in parts {
                sql.push('$');
                sql.push_str(&next.to_string());
                next += 1;
                sql.push_str(part);
            }
        }
        debug_assert_eq!(next, shared + 1 + rows * per_row);
        sql.push_str(self.tail);
        sql
    }

    /// Inserts `rows` (each exactly [`Self::per_row`] values) after the
    /// `shared` parameters, in power-of-two chunks. Returns the rows the
    /// statements processed (`ON CONFLICT DO NOTHING` skips are not counted).
    /// Errors: SPI failures; a row of the wrong width is an SPI argument error.
    pub fn execute<'a>(
        &self,
        client: &mut SpiClient<'_>,
        shared: &[DatumWithOid<'a>],
        rows: Vec<Vec<DatumWithOid<'a>>>,
    ) -> SpiResult<u64> {
        let per_row = self.per_row();
        if rows.iter().any(|r| r.len() != per_row) {
            return Err(pgrx::spi::Error::PreparedStatementArgumentMismatch {
                expected: per_row,
                got: rows.iter().map(Vec::len).find(|l| *l != per_row).unwrap_or(0),
            });
        }
        let mut done = 0u64;
        let mut rows = rows.into_iter();
        let mut left = rows.len();
        while left > 0 {
            let n = chunk_rows(left);
            let mut args: Vec<DatumWithOid<'a>> = Vec::with_capacity(shared.len() + n * per_row);
            // SAFETY: the same datum and type Oid the caller bound, valid for
            // as long as `shared` borrows them (this call).
            args.extend(shared.iter().map(|a| unsafe { DatumWithOid::new_from_datum(a.datum(), a.oid()) }));
            for row in rows.by_ref().take(n) {
                args.extend(row);
            }
            let table = plan_cache::execute(client, &self.sql(shared.len(), n), None, &args)?;
            done += table.len() as u64;
            left -= n;
        }
        Ok(done)
    }
}

/// The next chunk for `left` remaining rows: the largest power of two not
/// above `left`, capped at [`MAX_CHUNK_ROWS`].
pub fn chunk_rows(left: usize) -> usize {
    if left >= MAX_CHUNK_ROWS {
        MAX_CHUNK_ROWS
    } else {
        1usize << (usize::BITS - 1 - left.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: ValuesInsert = ValuesInsert { head: "INSERT INTO t (a, b, c)", row: "($1, {}, {}::jsonb)", tail: " ON CONFLICT DO NOTHING" };

    #[test]
    fn numbers_per_row_parameters_after_the_shared_ones() {
        assert_eq!(T.sql(1, 1), "INSERT INTO t (a, b, c) VALUES ($1, $2, $3::jsonb) ON CONFLICT DO NOTHING");
        assert_eq!(T.sql(2, 2), "INSERT INTO t (a, b, c) VALUES ($1, $3, $4::jsonb), ($1, $5, $6::jsonb) ON CONFLICT DO NOTHING");
    }

    #[test]
    fn chunks_are_powers_of_two_that_sum_to_the_rows() {
        for n in 1..1000usize {
            let (mut left, mut sizes) = (n, Vec::new());
            while left > 0 {
                let c = chunk_rows(left);
                assert!(c.is_power_of_two() && c <= MAX_CHUNK_ROWS && c <= left, "{n}: {c}");
                sizes.push(c);
                left -= c;
            }
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert!(sizes.len() <= n / MAX_CHUNK_ROWS + 8, "{n}: {sizes:?}");
        }
    }
}
