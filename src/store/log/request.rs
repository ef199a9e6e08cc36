//! The log of one push request (SPEC §2.1, §2.2, §2.3, §6.4; DESIGN §4):
//! the partition's `commitSeq`s are allocated and every log row that
//! carries them is written — commit headers, changes, their scope index,
//! tombstones and the stored outcomes (`applied` and `rejected`) of every
//! new commit of the request — together with the `sync_row_scopes` entries
//! of the rows the request inserted and left standing (§3.1).
//!
//! The inserted rows' `sync_row_scopes` entries first (each probed: one
//! already there is kept), then, the counter first:
//! 1. one statement ([`counter_sql`]) allocates the `commitSeq`s from the
//!    partition's counter row (the `UPDATE` locks it to the end of the
//!    caller's transaction) and, as data-modifying CTEs hanging off that
//!    allocation (so a missing counter row writes nothing), writes the new
//!    tombstones (an upsert) and clears the tombstones of inserted rows that
//!    have one (probed first) — a push that deletes nothing and inserts no
//!    tombstoned row runs the bare `UPDATE`;
//! 2. the commit headers, changes, change-scope entries and the outcomes are
//!    inserted without a statement ([`crate::store::direct`]: heap
//!    tuple and index entries, no plan, no executor start-up), the applied
//!    outcomes with their allocated `commitSeq`.
//!
//! Everything before the counter — decoding, authorization, app-row writes,
//! row-scope entries, tombstone probes — overlaps with concurrent pushers;
//! what follows it is these inserts, the response and the COMMIT. Commits
//! become visible in `commitSeq` order because the next allocation waits for
//! this transaction to end. Change-scope entries are inserted without a
//! conflict check: they carry the `commitSeq`s just allocated (no stored entry
//! can have one) and the engine de-duplicates them per commit.
//!
//! Under Citus (`syncular.router_statements`, or the `citus` library
//! loaded) the same rows are written by
//! [`crate::store::log::request_router`] instead: one single-shard statement
//! per table.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;
use pgrx::PgMemoryContexts;

use crate::store::direct::{self, Inserter};
use crate::store::log::{LogAuthor, RequestLog, MISSING_COUNTER};
use crate::store::spi::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// The allocation: `$1` partition, `$2` the number of applied commits.
const ALLOCATE: &str = "\
WITH s AS ( \
    UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + $2 \
    WHERE partition = $1 RETURNING max_commit_seq - $2 AS base)";

/// New tombstones: rows whose last change in the request deletes them.
const NEW_TOMBSTONES: &str = ", \
ts AS ( \
    INSERT INTO syncular.sync_tombstones (partition, tbl, row_id, commit_seq) \
    SELECT $1, u.tbl, u.row_id, s.base + u.n \
    FROM s, unnest($3::int4[], $4::text[], $5::text[]) AS u(n, tbl, row_id) \
    ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq)";

/// Rows the request inserted that had a tombstone (probed first: most have
/// none): the tombstone goes.
const CLEARED: &str = ", \
tc AS ( \
    DELETE FROM syncular.sync_tombstones t \
    USING s, unnest($6::text[], $7::text[]) AS u(tbl, row_id) \
    WHERE t.partition = $1 AND t.tbl = u.tbl AND t.row_id = u.row_id)";

/// The counter statement for a request that deletes rows (`deletes`) and/or
/// inserts rows that had a tombstone (`clears`); the parameter numbers are
/// the same in every variant. Run through [`pinned_plan`]: an index walk on
/// every table it probes however small the table was when it was planned.
fn counter_sql(deletes: bool, clears: bool) -> &'static str {
    static SQL: [std::sync::OnceLock<String>; 4] = [const { std::sync::OnceLock::new() }; 4];
    SQL[usize::from(deletes) * 2 + usize::from(clears)].get_or_init(|| {
        let mut sql = ALLOCATE.to_owned();
        if deletes {
            sql.push_str(NEW_TOMBSTONES);
        }
        if clears {
            sql.push_str(CLEARED);
        }
        sql.push_str(" SELECT base FROM s");
        sql
    })
}

fn unzip3<A: Clone, B: Clone, C: Clone>(v: &[(A, B, C)]) -> (Vec<A>, Vec<B>, Vec<C>) {
    (v.iter().map(|x| x.0.clone()).collect(), v.iter().map(|x| x.1.clone()).collect(), v.iter().map(|x| x.2.clone()).collect())
}

/// Writes `log` and returns the allocated base: the applied commit at
/// position `n` (1-based) has `commitSeq = base + n`. `None` when nothing was
/// applied (only rejections were stored; no sequence allocated). Errors:
/// SPI failures; a missing counter row (`touch` creates it) is a
/// [`MISSING_COUNTER`] error, with nothing written but the row-scope entries
/// (which a call after the counter row was created finds and keeps); a stored outcome for the
/// same key (only possible when the caller's snapshot predates a concurrent
/// delivery: REPEATABLE READ) raises 23505.
pub fn write_request_log(author: &LogAuthor<'_>, log: &RequestLog) -> StoreResult<Option<i64>> {
    if !direct::available() {
        return crate::store::log::request_router::write_request_log(author, log);
    }
    // The inserted rows' scope entries need no `commitSeq`: written before the counter row is
    // taken (a retry after a missing counter row finds and keeps them).
    in_scratch_context("syncular row scopes", || write_row_scopes(author, log));
    let base = if log.applied.is_empty() { None } else { Some(allocate(author, log)?) };
    let seq = |commit: i32| base.unwrap_or(0) + i64::from(commit);
    let outcomes = log
        .outcomes
        .iter()
        .map(|(id, commit, result)| Ok((id, if *commit > 0 { with_commit_seq(result, seq(*commit))? } else { result.clone() })))
        .collect::<StoreResult<Vec<_>>>()?;
    in_scratch_context("syncular log rows", || {
        if base.is_some() {
            write_commits(author, log, &seq);
        }
        write_outcomes(author, &outcomes);
    });
    Ok(base)
}

/// Runs `f` in a memory context of its own, deleted afterwards (the datums
/// and executor state of direct rows).
fn in_scratch_context(name: &'static str, f: impl FnOnce()) {
    // SAFETY: nothing allocated inside outlives the closure (the relations are
    // closed in it); an ERROR inside aborts the (sub)transaction, whose cleanup
    // resets the memory contexts and releases the relations.
    unsafe { PgMemoryContexts::new(name).switch_to(|_| f()) }
}

/// The `sync_row_scopes` entries of the rows the request inserted; one
/// already there (left by a write that bypassed the capture) is kept, as
/// `ON CONFLICT DO NOTHING` would.
fn write_row_scopes(author: &LogAuthor<'_>, log: &RequestLog) {
    let fresh: Vec<_> = log
        .row_scopes
        .iter()
        .filter(|(tbl, var, value, row_id)| {
            !direct::exists(c"sync_row_scopes", c"sync_row_scopes_pkey", &[author.partition, tbl, var, value, row_id])
        })
        .collect();
    if fresh.is_empty() {
        return;
    }
    let mut entries = Inserter::open(c"sync_row_scopes");
    for (tbl, var, value, row_id) in fresh {
        entries.insert(&[
            Some(direct::text(author.partition)),
            Some(direct::text(tbl)),
            Some(direct::text(var)),
            Some(direct::text(value)),
            Some(direct::text(row_id)),
        ]);
    }
    entries.close();
}

/// The applied commits' headers, changes and change-scope entries, at their
/// allocated `commitSeq`s.
fn write_commits(author: &LogAuthor<'_>, log: &RequestLog, seq: &dyn Fn(i32) -> i64) {
    let mut commits = Inserter::open(c"sync_commits");
    for (i, id) in (1..).zip(&log.applied) {
        commits.insert(&[
            Some(direct::text(author.partition)),
            Some(direct::int(seq(i))),
            Some(direct::text(author.client_id)),
            Some(direct::text(id)),
            Some(direct::text(author.actor_id)),
            Some(direct::int(author.created_at_ms)),
        ]);
    }
    commits.close();
    let mut changes = Inserter::open(c"sync_changes");
    for c in &log.changes {
        changes.insert(&[
            Some(direct::text(author.partition)),
            Some(direct::int(seq(c.commit))),
            Some(direct::int(i64::from(c.idx))),
            Some(direct::text(&c.table)),
            Some(direct::text(&c.row_id)),
            Some(direct::int(i64::from(c.op))),
            c.row_version.map(direct::int),
            Some(direct::jsonb(&c.scopes_json)),
            c.payload.as_deref().map(direct::bytea),
        ]);
    }
    changes.close();
    if log.change_scopes.is_empty() {
        return;
    }
    let mut scopes = Inserter::open(c"sync_change_scopes");
    for (commit, tbl, var, value) in &log.change_scopes {
        scopes.insert(&[
            Some(direct::text(author.partition)),
            Some(direct::text(tbl)),
            Some(direct::text(var)),
            Some(direct::text(value)),
            Some(direct::int(seq(*commit))),
        ]);
    }
    scopes.close();
}

/// Every new commit's stored outcome (applied ones with their `commitSeq`).
fn write_outcomes(author: &LogAuthor<'_>, outcomes: &[(&String, String)]) {
    if outcomes.is_empty() {
        return;
    }
    let mut results = Inserter::open(c"sync_push_results");
    for (id, result) in outcomes {
        results.insert(&[
            Some(direct::text(author.partition)),
            Some(direct::text(author.client_id)),
            Some(direct::text(id)),
            Some(direct::jsonb(result)),
        ]);
    }
    results.close();
}

/// An applied outcome's stored JSON with its allocated `commitSeq` (what
/// `jsonb_set(result, '{commitSeq}', to_jsonb(seq))` stores): the engine's
/// placeholder `"commitSeq":0` replaced when it occurs exactly once (the
/// engine's own serialization), else the JSON rewritten through a parse.
fn with_commit_seq(result: &str, commit_seq: i64) -> StoreResult<String> {
    const PLACEHOLDER: &str = "\"commitSeq\":0";
    if let Some(at) = result.find(PLACEHOLDER) {
        let end = at + PLACEHOLDER.len();
        let next = result[end..].chars().next();
        if result[end..].find(PLACEHOLDER).is_none() && matches!(next, Some(',' | '}')) {
            return Ok(format!("{}\"commitSeq\":{commit_seq}{}", &result[..at], &result[end..]));
        }
    }
    let mut value: serde_json::Value =
        serde_json::from_str(result).map_err(|e| StoreError::new("write_request_log", format!("an outcome is not JSON: {e}")))?;
    let Some(object) = value.as_object_mut() else {
        return Err(StoreError::new("write_request_log", "an outcome is not a JSON object"));
    };
    object.insert("commitSeq".to_owned(), serde_json::Value::from(commit_seq));
    Ok(value.to_string())
}

/// Allocates the request's `commitSeq`s (taking the counter row) and writes
/// its new tombstones and clears those of the rows it inserted
/// ([`counter_sql`]; a row whose tombstone the probe does not find has none
/// to clear — only a delete of that row writes one, and the row is this
/// transaction's insert); returns the base. Errors: SPI failures;
/// [`MISSING_COUNTER`].
fn allocate(author: &LogAuthor<'_>, log: &RequestLog) -> StoreResult<i64> {
    let n = i64::try_from(log.applied.len()).map_err(|_| StoreError::new("write_request_log", "too many commits"))?;
    let (ts_n, ts_tbl, ts_row) = unzip3(&log.tombstones);
    let (tc_tbl, tc_row): (Vec<String>, Vec<String>) = log
        .cleared_tombstones
        .iter()
        .filter(|(tbl, row_id)| direct::exists(c"sync_tombstones", c"sync_tombstones_pkey", &[author.partition, tbl, row_id]))
        .cloned()
        .unzip();
    let clears = !tc_tbl.is_empty();
    let args = [
        DatumWithOid::from(author.partition),
        DatumWithOid::from(n),
        DatumWithOid::from(ts_n),
        DatumWithOid::from(ts_tbl),
        DatumWithOid::from(ts_row),
        DatumWithOid::from(tc_tbl),
        DatumWithOid::from(tc_row),
    ];
    let base = Spi::connect_mut(|client| {
        let sql = counter_sql(!log.tombstones.is_empty(), clears);
        let table = pinned_plan::execute(client, sql, None, &args)?;
        if table.is_empty() {
            return Ok(None);
        }
        table.first().get_one::<i64>()
    })
    .map_err(StoreError::spi("write_request_log"))?;
    base.ok_or_else(|| StoreError::new("write_request_log", MISSING_COUNTER))
}

#[cfg(test)]
mod unit {
    use super::with_commit_seq;

    #[test]
    fn the_placeholder_and_the_parse_agree() {
        let parse = |s: &str, seq: i64| {
            let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
            v["commitSeq"] = seq.into();
            v
        };
        for (text, seq) in [
            (r#"{"status":"applied","commitSeq":0,"recordedAtMs":5,"results":[]}"#, 42),
            (r#"{"status":"applied","recordedAtMs":5,"commitSeq":0}"#, 7),
            (r#"{"status":"applied","commitSeq":0,"x":{"commitSeq":0}}"#, 9),
            (r#"{"status":"applied","commitSeq":01}"#, 3),
            (r#"{"status":"applied"}"#, 11),
        ] {
            let got: serde_json::Value = serde_json::from_str(&with_commit_seq(text, seq).unwrap_or_else(|_| text.to_owned()))
                .unwrap_or(serde_json::Value::Null);
            if serde_json::from_str::<serde_json::Value>(text).is_ok() {
                assert_eq!(got, parse(text, seq), "{text}");
            }
        }
        assert!(with_commit_seq("not json", 1).is_err());
    }
}
