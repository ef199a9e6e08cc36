//! EXPLAIN test for the push's row-scope replace (SPEC §3.1, §4.7): the
//! `DELETE … WHERE partition, tbl, row_id` runs through
//! `sync_row_scopes_by_row`, with enough rows that a sequential scan would
//! otherwise be chosen.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::store::row_scopes;

    #[pg_test]
    fn row_scope_replace_uses_the_by_row_index() {
        // 20 000 entries over 2 partitions × 2 tables × 4 values × 1 250 rows.
        Spi::run(
            "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
             SELECT 'p' || (g % 2), 't' || (g % 4 / 2), 'project_id', 'v' || (g % 8 / 4), 'r' || (g / 8) \
             FROM generate_series(0, 19999) AS g",
        )
        .unwrap();
        Spi::run("ANALYZE syncular.sync_row_scopes").unwrap();
        let plan = row_scopes::explain_delete_row_scopes("p0", "t0", "r77").unwrap();
        assert!(
            plan.contains("sync_row_scopes_by_row"),
            "plan should use sync_row_scopes_by_row: {plan}"
        );
        assert!(!plan.contains("Seq Scan"), "no sequential scan: {plan}");
        // And the statement really removes exactly that row's entries.
        let before = Spi::get_one::<i64>("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = 'p0' AND tbl = 't0' AND row_id = 'r77'")
            .unwrap()
            .unwrap();
        assert!(before > 0);
        row_scopes::delete_row_scopes("p0", "t0", "r77").unwrap();
        let after = Spi::get_one::<i64>(
            "SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 'r77'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(after, Spi::get_one::<i64>("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 'r77' AND NOT (partition = 'p0' AND tbl = 't0')").unwrap().unwrap());
    }
}
