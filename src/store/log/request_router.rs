//! The log of one push request in single-shard statements (SPEC §2.1, §2.3,
//! §6.4; docs/src/operate/citus.md): what
//! [`crate::store::log::request::write_request_log`] writes in one statement,
//! written as one router-plannable statement per table when
//! `syncular.router_statements` is on.
//!
//! Order: the counter `UPDATE` first — it allocates the `commitSeq`s and
//! takes the partition's counter row, exactly where the one-statement form
//! takes it, so everything the module docs of [`super::request`] argue (commits
//! visible in `commitSeq` order, the lock held only to COMMIT) holds
//! unchanged. When it finds no counter row nothing has been written and the
//! caller gets the same [`MISSING_COUNTER`] error. Then the commit headers,
//! changes, change-scope entries, the row-scope entries of inserted rows, the cleared tombstones (rows the request
//! inserted; disjoint from the new tombstones, which are rows whose last
//! change deletes them), the new tombstones and every new outcome. Each is an
//! `INSERT … VALUES` ([`crate::store::values_insert`]) or a `DELETE` keyed on
//! the partition; each names `partition = $1`.

use pgrx::datum::DatumWithOid;
use pgrx::spi::{Spi, SpiClient};

use crate::store::log::{LogAuthor, RequestLog, MISSING_COUNTER};
use crate::store::values_insert::ValuesInsert;
use crate::store::{spi::pinned_plan, spi::plan_cache};
use crate::store::{StoreError, StoreResult};

const ALLOCATE_SQL: &str = "\
UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + $2 \
WHERE partition = $1 RETURNING max_commit_seq - $2";

const COMMITS: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_commits \
           (partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms)",
    row: "($1, {}, $2, {}, $3, $4)",
    tail: "",
};

const CHANGES: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_changes \
           (partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)",
    row: "($1, {}, {}, {}, {}, {}, {}, {}::jsonb, {})",
    tail: "",
};

const CHANGE_SCOPES: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq)",
    row: "($1, {}, {}, {}, {})",
    tail: " ON CONFLICT DO NOTHING",
};

const ROW_SCOPES: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id)",
    row: "($1, {}, {}, {}, {})",
    tail: " ON CONFLICT DO NOTHING",
};

const TOMBSTONES: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_tombstones (partition, tbl, row_id, commit_seq)",
    row: "($1, {}, {}, {})",
    tail: " ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq",
};

const CLEAR_TOMBSTONES_SQL: &str = "\
DELETE FROM syncular.sync_tombstones t USING unnest($2::text[], $3::text[]) AS u(tbl, row_id) \
WHERE t.partition = $1 AND t.tbl = u.tbl AND t.row_id = u.row_id";

/// An outcome row: the stored JSON merged with `{"commitSeq": n}` for an
/// applied commit (`{}` for a rejection), as `jsonb_set` does in the
/// one-statement form.
const OUTCOMES: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_push_results (partition, client_id, client_commit_id, result)",
    row: "($1, $2, {}, {}::jsonb || {}::jsonb)",
    tail: "",
};

/// Writes `log` in single-shard statements; same contract as
/// [`crate::store::log::request::write_request_log`].
pub fn write_request_log(author: &LogAuthor<'_>, log: &RequestLog) -> StoreResult<Option<i64>> {
    let base = allocate(author.partition, log.applied.len())?;
    let seq = |commit: i32| base.unwrap_or(0) + i64::from(commit);
    Spi::connect_mut(|client| -> pgrx::spi::SpiResult<()> {
        if base.is_some() {
            write_commits(client, author, log, &seq)?;
            write_scope_index(client, author.partition, log, &seq)?;
            write_tombstones(client, author.partition, log, &seq)?;
        }
        write_outcomes(client, author, log, &seq)
    })
    .map_err(StoreError::spi("write_request_log"))?;
    Ok(base)
}

/// Allocates `n` `commitSeq`s from the partition's counter row (locked
/// from here to the transaction's end); returns the base (`None` for 0).
fn allocate(partition: &str, n: usize) -> StoreResult<Option<i64>> {
    let n = i64::try_from(n).map_err(|_| StoreError::new("write_request_log", "too many commits"))?;
    if n == 0 {
        return Ok(None);
    }
    let base = Spi::connect_mut(|client| {
        let table = pinned_plan::execute(client, ALLOCATE_SQL, None, &[DatumWithOid::from(partition), DatumWithOid::from(n)])?;
        if table.is_empty() {
            return Ok(None);
        }
        table.first().get_one::<i64>()
    })
    .map_err(StoreError::spi("write_request_log"))?;
    Ok(Some(base.ok_or_else(|| StoreError::new("write_request_log", MISSING_COUNTER))?))
}

/// The commit headers and their changes.
fn write_commits(client: &mut SpiClient<'_>, author: &LogAuthor<'_>, log: &RequestLog, seq: &dyn Fn(i32) -> i64) -> pgrx::spi::SpiResult<()> {
    let rows = (1..=log.applied.len())
        .zip(&log.applied)
        .map(|(i, id)| vec![DatumWithOid::from(seq(i32::try_from(i).unwrap_or(i32::MAX))), DatumWithOid::from(id.as_str())])
        .collect();
    let shared = [
        DatumWithOid::from(author.partition),
        DatumWithOid::from(author.client_id),
        DatumWithOid::from(author.actor_id),
        DatumWithOid::from(author.created_at_ms),
    ];
    COMMITS.execute(client, &shared, rows)?;
    let rows = log
        .changes
        .iter()
        .map(|c| {
            vec![
                DatumWithOid::from(seq(c.commit)),
                DatumWithOid::from(c.idx),
                DatumWithOid::from(c.table.as_str()),
                DatumWithOid::from(c.row_id.as_str()),
                DatumWithOid::from(c.op),
                DatumWithOid::from(c.row_version),
                DatumWithOid::from(c.scopes_json.as_str()),
                DatumWithOid::from(c.payload.as_deref()),
            ]
        })
        .collect();
    CHANGES.execute(client, &[DatumWithOid::from(author.partition)], rows).map(|_| ())
}

/// The commit→scope index and the inserted rows' row-scope entries.
fn write_scope_index(client: &mut SpiClient<'_>, partition: &str, log: &RequestLog, seq: &dyn Fn(i32) -> i64) -> pgrx::spi::SpiResult<()> {
    let text = |v: &String| DatumWithOid::from(v.as_str());
    let rows = log.change_scopes.iter().map(|(c, t, v, x)| vec![text(t), text(v), text(x), DatumWithOid::from(seq(*c))]).collect();
    CHANGE_SCOPES.execute(client, &[DatumWithOid::from(partition)], rows)?;
    let rows = log.row_scopes.iter().map(|(t, v, x, r)| vec![text(t), text(v), text(x), text(r)]).collect();
    ROW_SCOPES.execute(client, &[DatumWithOid::from(partition)], rows).map(|_| ())
}

/// The inserted rows' tombstones cleared, the deleted rows' written.
fn write_tombstones(client: &mut SpiClient<'_>, partition: &str, log: &RequestLog, seq: &dyn Fn(i32) -> i64) -> pgrx::spi::SpiResult<()> {
    if !log.cleared_tombstones.is_empty() {
        let (tbl, row): (Vec<String>, Vec<String>) = log.cleared_tombstones.iter().cloned().unzip();
        plan_cache::execute(
            client,
            CLEAR_TOMBSTONES_SQL,
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(tbl), DatumWithOid::from(row)],
        )?;
    }
    let rows = log
        .tombstones
        .iter()
        .map(|(c, t, r)| vec![DatumWithOid::from(t.as_str()), DatumWithOid::from(r.as_str()), DatumWithOid::from(seq(*c))])
        .collect();
    TOMBSTONES.execute(client, &[DatumWithOid::from(partition)], rows).map(|_| ())
}

/// Every new commit's stored outcome (applied ones with their `commitSeq`).
fn write_outcomes(client: &mut SpiClient<'_>, author: &LogAuthor<'_>, log: &RequestLog, seq: &dyn Fn(i32) -> i64) -> pgrx::spi::SpiResult<()> {
    let rows = log
        .outcomes
        .iter()
        .map(|(id, c, result)| {
            let merge = if *c > 0 { format!("{{\"commitSeq\":{}}}", seq(*c)) } else { "{}".to_owned() };
            vec![DatumWithOid::from(id.as_str()), DatumWithOid::from(result.as_str()), DatumWithOid::from(merge)]
        })
        .collect();
    OUTCOMES.execute(client, &[DatumWithOid::from(author.partition), DatumWithOid::from(author.client_id)], rows).map(|_| ())
}
