//! `syncular.partition_stats`: what an operator needs to see why a
//! partition's horizon does or does not move.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::lifecycle::support::*;
    use crate::tests::sync_pull_support::setup;

    const P: &str = "stats-a";

    #[pg_test]
    fn stats_show_the_log_the_rows_and_the_laggard() {
        setup();
        insert_commits(P, "s", "w1", 1500, T0);
        client_record(P, "laggard", 200, T0 + 10 * DAY);
        client_record(P, "gone", 1, T0);
        set_now(T0 + 20 * DAY);
        let row = |sql: &str| {
            Spi::connect(|c| {
                let t = c.select(sql, None, &[P.into()]).unwrap();
                let r = t.first();
                (
                    r.get::<i64>(1).unwrap().unwrap(),
                    r.get::<i64>(2).unwrap().unwrap(),
                    r.get::<i64>(3).unwrap().unwrap(),
                    r.get::<i64>(4).unwrap().unwrap(),
                    r.get::<i64>(5).unwrap().unwrap(),
                    r.get::<i64>(6).unwrap().unwrap(),
                    r.get::<i64>(7).unwrap().unwrap(),
                    r.get::<String>(8).unwrap(),
                    r.get::<i64>(9).unwrap(),
                    r.get::<i64>(10).unwrap(),
                    r.get::<i64>(11).unwrap().unwrap(),
                )
            })
        };
        let sql = "SELECT max_commit_seq, horizon_seq, prune_target, retained_commits, app_rows, clients, \
                          active_clients, laggard_client_id, laggard_cursor, oldest_commit_age_ms, log_bytes \
                   FROM syncular.partition_stats($1)";
        let (max, horizon, target, retained, app_rows, clients, active, laggard, cursor, age, bytes) = row(sql);
        assert_eq!((max, horizon, target, retained), (1500, 0, 200, 1500));
        assert_eq!((app_rows, clients, active), (1500, 2, 1));
        assert_eq!((laggard.as_deref(), cursor), (Some("laggard"), Some(200)));
        assert_eq!(age, Some(20 * DAY));
        assert!(bytes > 1500 * 50, "log bytes counted: {bytes}");

        // After advancing and pruning: the horizon moved to the laggard.
        assert_eq!(advance(P), 200);
        prune_all(P, 1000);
        let (_, horizon, target, retained, ..) = row(sql);
        assert_eq!((horizon, target, retained), (200, 200, 1300));
        // Every partition is listed without an argument.
        let n = crate::tests::support::int8("SELECT count(*) FROM syncular.partition_stats() WHERE partition = 'stats-a'");
        assert_eq!(n, Some(1));
    }
}
