//! Helpers for the lifecycle `#[pg_test]`s: the pull schema's `tasks`
//! written with plain SQL (one commit per statement), the clock, client
//! records, and running the batch functions until they are done.

use pgrx::spi::quote_literal;

use crate::tests::support::{int8, run};

/// One day in ms.
pub const DAY: i64 = 86_400_000;
/// The tests' base instant (2023-11-14T22:13:20Z).
pub const T0: i64 = 1_700_000_000_000;

/// `SET LOCAL syncular.now_ms = ms`.
pub fn set_now(ms: i64) {
    run(&format!("SET LOCAL syncular.now_ms = '{ms}'"));
}

/// Writes `n` commits to partition `p` at instant `at_ms` with plain SQL
/// (one `INSERT` of `tasks` row `{prefix}{i}` in workspace `ws` per
/// commit, `i` in `1..=n`).
pub fn insert_commits(p: &str, prefix: &str, ws: &str, n: i64, at_ms: i64) {
    set_now(at_ms);
    run(&format!("SET LOCAL syncular.partition = {}", quote_literal(p)));
    run(&format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP \
           INSERT INTO public.tasks (id, ws, title) VALUES ({} || i, {}, 'row ' || i); \
         END LOOP; END $$",
        quote_literal(prefix),
        quote_literal(ws)
    ));
}

/// Deletes `tasks` rows `{prefix}{i}`, `i` in `1..=n`, one commit each.
pub fn delete_commits(p: &str, prefix: &str, n: i64, at_ms: i64) {
    set_now(at_ms);
    run(&format!("SET LOCAL syncular.partition = {}", quote_literal(p)));
    run(&format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP \
           DELETE FROM public.tasks WHERE _sync_partition = {} AND id = {} || i; \
         END LOOP; END $$",
        quote_literal(p),
        quote_literal(prefix)
    ));
}

/// A client record with `cursor`, last updated at `updated_at_ms`.
pub fn client_record(p: &str, client_id: &str, cursor: i64, updated_at_ms: i64) {
    run(&format!(
        "INSERT INTO syncular.sync_clients (partition, client_id, actor_id, cursor, subscriptions, updated_at_ms) \
         VALUES ({}, {}, 'actor', {cursor}, '[]', {updated_at_ms}) \
         ON CONFLICT (partition, client_id) DO UPDATE SET cursor = EXCLUDED.cursor, updated_at_ms = EXCLUDED.updated_at_ms",
        quote_literal(p),
        quote_literal(client_id)
    ));
}

/// `count(*)` of `table` rows of partition `p` matching `filter` (SQL).
pub fn rows(table: &str, p: &str, filter: &str) -> i64 {
    int8(&format!("SELECT count(*) FROM syncular.{table} WHERE partition = {} AND ({filter})", quote_literal(p)))
        .unwrap_or(0)
}

/// `syncular.advance_horizon(p)`.
pub fn advance(p: &str) -> i64 {
    int8(&format!("SELECT syncular.advance_horizon({})", quote_literal(p))).expect("a counter row")
}

/// Totals of `syncular.prune_batch` calls until one reports `done`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub calls: i64,
    pub commits: i64,
    pub changes: i64,
    pub change_scopes: i64,
    pub tombstones: i64,
    pub push_results: i64,
    pub clients: i64,
    /// The most commits one call deleted.
    pub largest_batch: i64,
}

/// Calls `syncular.prune_batch(p, max_rows)` until it reports `done`.
pub fn prune_all(p: &str, max_rows: i32) -> Pruned {
    let mut total = Pruned::default();
    loop {
        let (c, ch, cs, ts, pr, cl, busy, done) = pgrx::spi::Spi::connect(|client| {
            let t = client
                .select(
                    "SELECT commits, changes, change_scopes, tombstones, push_results, clients, fence_busy, done \
                     FROM syncular.prune_batch($1, $2)",
                    None,
                    &[p.into(), max_rows.into()],
                )
                .unwrap();
            let r = t.first();
            let g = |i: usize| r.get::<i64>(i).unwrap().unwrap();
            (g(1), g(2), g(3), g(4), g(5), g(6), r.get::<bool>(7).unwrap().unwrap(), r.get::<bool>(8).unwrap().unwrap())
        });
        assert!(!busy, "no other transaction reads the log in a #[pg_test]");
        total.calls += 1;
        total.commits += c;
        total.changes += ch;
        total.change_scopes += cs;
        total.tombstones += ts;
        total.push_results += pr;
        total.clients += cl;
        total.largest_batch = total.largest_batch.max(c).max(pr).max(cl);
        if done {
            return total;
        }
        assert!(total.calls < 10_000, "prune_batch never reports done");
    }
}
