//! The log around the horizon, read with plain SQL: a per-commit digest of
//! the newest commits taken before pruning (so the ones that must survive
//! can be compared row for row afterwards), and the shape of the log after.

use std::collections::BTreeMap;

use postgres::Client;

use super::pg_text;

/// Digest of one commit: its header, its changes (in `idx` order) and its
/// change-scope entries, each as the md5 of the rows' text.
pub type CommitDigest = (String, String, String);

/// The newest commits of a partition before pruning.
#[derive(Clone, Debug, Default)]
pub struct Before {
    /// `max_commit_seq` when the digests were taken.
    pub max_commit_seq: i64,
    /// Digests of the commits `max_commit_seq − newest < seq ≤ max_commit_seq`.
    pub digests: BTreeMap<i64, CommitDigest>,
    /// Every tombstone: `(row id, commit_seq)`.
    pub tombstones: Vec<(String, i64)>,
}

const DIGESTS_SQL: &str = "\
SELECT c.commit_seq, md5(c::text),
       coalesce((SELECT md5(string_agg(d::text, '|' ORDER BY d.idx)) FROM syncular.sync_changes d
                  WHERE d.partition = $1 AND d.commit_seq = c.commit_seq), ''),
       coalesce(s.digest, '')
  FROM syncular.sync_commits c
  LEFT JOIN (SELECT x.commit_seq, md5(string_agg(x::text, '|' ORDER BY x.tbl, x.var, x.value)) AS digest
               FROM syncular.sync_change_scopes x
              WHERE x.partition = $1 AND x.commit_seq > $2 AND x.commit_seq <= $3
              GROUP BY x.commit_seq) s ON s.commit_seq = c.commit_seq
 WHERE c.partition = $1 AND c.commit_seq > $2 AND c.commit_seq <= $3
 ORDER BY c.commit_seq";

/// Digests of the commits `lo < seq ≤ hi` of `partition`.
///
/// Errors: the Postgres error.
pub fn digests(conn: &mut Client, partition: &str, lo: i64, hi: i64) -> Result<BTreeMap<i64, CommitDigest>, String> {
    let rows = conn.query(DIGESTS_SQL, &[&partition, &lo, &hi]).map_err(|e| pg_text(&e))?;
    Ok(rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3)))).collect())
}

/// Reads [`Before`]: the counter, then (in a REPEATABLE READ transaction, so
/// both see the same commits) the digests of the `newest` commits and the
/// tombstones. Call it while pushes run: every commit up to the counter
/// read is committed (the counter row serializes them).
///
/// Errors: the Postgres error.
pub fn before(conn: &mut Client, partition: &str, newest: i64) -> Result<Before, String> {
    let mut tx = conn
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(|e| pg_text(&e))?;
    let max: i64 = tx
        .query_one("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &[&partition])
        .map_err(|e| pg_text(&e))?
        .get(0);
    let rows = tx
        .query(DIGESTS_SQL, &[&partition, &(max - newest), &max])
        .map_err(|e| pg_text(&e))?;
    let digests = rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3)))).collect();
    let tombstones = tx
        .query(
            "SELECT row_id, commit_seq FROM syncular.sync_tombstones WHERE partition = $1 ORDER BY row_id",
            &[&partition],
        )
        .map_err(|e| pg_text(&e))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    tx.commit().map_err(|e| pg_text(&e))?;
    Ok(Before { max_commit_seq: max, digests, tombstones })
}

/// The log of a partition after pruning (read when nothing writes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct After {
    pub max_commit_seq: i64,
    pub horizon_seq: i64,
    /// Rows at or below the horizon (all must be 0).
    pub commits_below: i64,
    pub changes_below: i64,
    pub change_scopes_below: i64,
    pub tombstones_below: i64,
    /// Commits above the horizon: count, smallest, largest `commit_seq`.
    pub commits_above: i64,
    pub min_above: Option<i64>,
    pub max_above: Option<i64>,
    /// Changes whose commit header is gone, change-scope entries whose
    /// commit is gone, commits above the horizon without any change (all 0).
    pub orphan_changes: i64,
    pub orphan_change_scopes: i64,
    pub commits_without_changes: i64,
    /// Push outcomes and client records of the partition.
    pub push_results: i64,
    pub clients: i64,
}

impl After {
    /// Whether commits `horizon + 1 ..= max` are all present (and nothing else).
    pub fn dense_above(&self) -> bool {
        let expected = self.max_commit_seq - self.horizon_seq;
        self.commits_above == expected
            && (expected == 0
                || (self.min_above == Some(self.horizon_seq + 1) && self.max_above == Some(self.max_commit_seq)))
    }
}

/// Reads [`After`].
///
/// Errors: the Postgres error.
pub fn after(conn: &mut Client, partition: &str) -> Result<After, String> {
    let r = conn
        .query_one(
            "SELECT p.max_commit_seq, p.horizon_seq,
               (SELECT count(*) FROM syncular.sync_commits c WHERE c.partition = $1 AND c.commit_seq <= p.horizon_seq),
               (SELECT count(*) FROM syncular.sync_changes c WHERE c.partition = $1 AND c.commit_seq <= p.horizon_seq),
               (SELECT count(*) FROM syncular.sync_change_scopes c WHERE c.partition = $1 AND c.commit_seq <= p.horizon_seq),
               (SELECT count(*) FROM syncular.sync_tombstones c WHERE c.partition = $1 AND c.commit_seq <= p.horizon_seq),
               a.n, a.lo, a.hi,
               (SELECT count(*) FROM syncular.sync_changes d WHERE d.partition = $1 AND NOT EXISTS (
                  SELECT 1 FROM syncular.sync_commits c WHERE c.partition = $1 AND c.commit_seq = d.commit_seq)),
               (SELECT count(*) FROM syncular.sync_change_scopes s WHERE s.partition = $1 AND NOT EXISTS (
                  SELECT 1 FROM syncular.sync_commits c WHERE c.partition = $1 AND c.commit_seq = s.commit_seq)),
               (SELECT count(*) FROM syncular.sync_commits c WHERE c.partition = $1 AND NOT EXISTS (
                  SELECT 1 FROM syncular.sync_changes d WHERE d.partition = $1 AND d.commit_seq = c.commit_seq)),
               (SELECT count(*) FROM syncular.sync_push_results r WHERE r.partition = $1),
               (SELECT count(*) FROM syncular.sync_clients k WHERE k.partition = $1)
             FROM syncular.sync_partitions p
             CROSS JOIN LATERAL (SELECT count(*) AS n, min(c.commit_seq) AS lo, max(c.commit_seq) AS hi
                                   FROM syncular.sync_commits c
                                  WHERE c.partition = $1 AND c.commit_seq > p.horizon_seq) a
            WHERE p.partition = $1",
            &[&partition],
        )
        .map_err(|e| pg_text(&e))?;
    Ok(After {
        max_commit_seq: r.get(0),
        horizon_seq: r.get(1),
        commits_below: r.get(2),
        changes_below: r.get(3),
        change_scopes_below: r.get(4),
        tombstones_below: r.get(5),
        commits_above: r.get(6),
        min_above: r.get(7),
        max_above: r.get(8),
        orphan_changes: r.get(9),
        orphan_change_scopes: r.get(10),
        commits_without_changes: r.get(11),
        push_results: r.get(12),
        clients: r.get(13),
    })
}

/// `commit_seq → row ids` of every change above `above` (pushed commits are
/// looked up here).
///
/// Errors: the Postgres error.
pub fn changed_rows(conn: &mut Client, partition: &str, above: i64) -> Result<BTreeMap<i64, Vec<String>>, String> {
    let rows = conn
        .query(
            "SELECT commit_seq, row_id FROM syncular.sync_changes WHERE partition = $1 AND commit_seq > $2
              ORDER BY commit_seq, idx",
            &[&partition, &above],
        )
        .map_err(|e| pg_text(&e))?;
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for r in rows {
        out.entry(r.get(0)).or_default().push(r.get(1));
    }
    Ok(out)
}

/// Row ids of `public.tasks` in `partition` starting with `prefix`.
///
/// Errors: the Postgres error.
pub fn app_row_ids(conn: &mut Client, partition: &str, prefix: &str) -> Result<Vec<String>, String> {
    let rows = conn
        .query(
            "SELECT _sync_row_id FROM public.tasks WHERE _sync_partition = $1 AND starts_with(_sync_row_id, $2)
              ORDER BY 1",
            &[&partition, &prefix],
        )
        .map_err(|e| pg_text(&e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
