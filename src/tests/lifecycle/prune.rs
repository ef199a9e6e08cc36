//! The §4.6 floors and bounded pruning: the newest 1,000 commits stay, an
//! active laggard holds the horizon, an inactive one does not, commits past
//! the age limit go regardless, the horizon never moves back, and a batch
//! deletes at most `max_rows` commits with everything derived from them.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::lifecycle::support::*;
    use crate::tests::support::int8;
    use crate::tests::sync_pull_support::setup;

    const P: &str = "prune-a";

    #[pg_test]
    fn the_newest_commits_stay_and_the_rest_goes_in_bounded_batches() {
        setup();
        // seq 1..=10 insert t1..t10, 11..=20 delete them (tombstones), then
        // 21..=1500 insert u1..u1480.
        insert_commits(P, "t", "w1", 10, T0);
        delete_commits(P, "t", 10, T0);
        insert_commits(P, "u", "w1", 1480, T0);
        // Another partition, untouched by pruning P.
        insert_commits("prune-other", "x", "w1", 1200, T0);
        assert_eq!(rows("sync_tombstones", P, "true"), 10);
        let scopes_kept = rows("sync_change_scopes", P, "commit_seq > 500");
        let changes_kept = rows("sync_changes", P, "commit_seq > 500");
        let row_scopes = rows("sync_row_scopes", P, "true");

        set_now(T0 + DAY);
        assert_eq!(advance(P), 500, "no client: only the newest 1,000 stay");
        let pruned = prune_all(P, 120);
        assert_eq!(pruned.commits, 500);
        assert_eq!(pruned.changes, 500);
        assert_eq!(pruned.change_scopes, 500, "one ws entry per change");
        assert_eq!(pruned.tombstones, 10, "the deletes' tombstones are at or below the horizon");
        assert_eq!(pruned.largest_batch, 120, "a call deletes at most max_rows commits");
        assert_eq!(pruned.calls, 6, "5 log batches (120 × 4 + 20), then done");

        assert_eq!(rows("sync_commits", P, "true"), 1000);
        assert_eq!(int8(&format!("SELECT min(commit_seq) FROM syncular.sync_commits WHERE partition = '{P}'")), Some(501));
        assert_eq!(rows("sync_changes", P, "commit_seq <= 500"), 0);
        assert_eq!(rows("sync_change_scopes", P, "commit_seq <= 500"), 0, "no scope entry outlives its change");
        assert_eq!(rows("sync_changes", P, "commit_seq > 500"), changes_kept);
        assert_eq!(rows("sync_change_scopes", P, "commit_seq > 500"), scopes_kept);
        assert_eq!(rows("sync_tombstones", P, "true"), 0);
        assert_eq!(rows("sync_row_scopes", P, "true"), row_scopes, "the current rows' index is not the log");
        assert_eq!(rows("sync_commits", "prune-other", "true"), 1200, "other partitions untouched");

        // Again: nothing moves, nothing to delete.
        assert_eq!(advance(P), 500);
        assert_eq!(prune_all(P, 120), Pruned { calls: 1, ..Pruned::default() });
    }

    #[pg_test]
    fn an_active_laggard_holds_the_horizon_until_the_age_limit_or_until_it_goes_inactive() {
        setup();
        // 1..=600 at T0, 601..=2500 twenty days later: the newest 1,000 start at 1501.
        insert_commits(P, "old", "w1", 600, T0);
        insert_commits(P, "new", "w1", 1900, T0 + 20 * DAY);
        client_record(P, "laggard", 100, T0 + 20 * DAY);
        client_record(P, "current", 2400, T0 + 20 * DAY);
        client_record(P, "bootstrapping", -1, T0 + 20 * DAY);

        // Day 21: both clients active; the laggard's cursor is the floor (a
        // negative cursor holds nothing).
        set_now(T0 + 21 * DAY);
        assert_eq!(advance(P), 100);
        // A cursor equal to the horizon still pulls incrementally: 100 stays the floor.
        assert_eq!(prune_all(P, 1000).commits, 100);

        // Day 35: the laggard is still active (it was seen on day 34), but
        // commits 1..=600 are past the 30-day age limit: forced past it.
        client_record(P, "laggard", 100, T0 + 34 * DAY);
        set_now(T0 + 35 * DAY);
        assert_eq!(advance(P), 600);

        // Day 49: the laggard was last seen 15 days ago (inactive), the
        // other client 29 days ago: only the newest-1,000 floor remains.
        set_now(T0 + 49 * DAY);
        assert_eq!(advance(P), 1500);

        // A laggard that becomes active again does not move the horizon back.
        client_record(P, "laggard", 100, T0 + 49 * DAY);
        assert_eq!(advance(P), 1500);
        assert_eq!(prune_all(P, 1000).commits, 1400);
        assert_eq!(rows("sync_commits", P, "true"), 1000);
    }

    #[pg_test]
    fn the_floors_can_be_raised_but_not_lowered() {
        setup();
        insert_commits(P, "r", "w1", 1300, T0);
        crate::tests::support::run("SET LOCAL syncular.prune_min_commits = 1200");
        set_now(T0 + DAY);
        assert_eq!(advance(P), 100);
        let lowered = crate::tests::support::try_run("SET LOCAL syncular.prune_min_commits = 999").unwrap_err();
        assert_eq!(lowered.sqlstate, "22023", "{lowered:?}");
        let lowered = crate::tests::support::try_run("SET LOCAL syncular.prune_active_window = '13d'").unwrap_err();
        assert_eq!(lowered.sqlstate, "22023", "{lowered:?}");
        crate::tests::support::run("SET LOCAL syncular.prune_active_window = '20d'");
        client_record(P, "c", 50, T0);
        set_now(T0 + 15 * DAY);
        assert_eq!(advance(P), 100, "a 15-day-old client is active under a 20-day window; the horizon never moves back");
    }

    #[pg_test]
    fn expired_push_outcomes_and_client_records_are_removed_after_the_log() {
        setup();
        insert_commits(P, "e", "w1", 5, T0);
        // Outcomes recorded at T0 and T0 + 100 days; records last seen then too.
        for (i, at) in [(1, T0), (2, T0), (3, T0 + 100 * DAY)] {
            crate::tests::support::run(&format!(
                "INSERT INTO syncular.sync_push_results VALUES ('{P}', 'c{i}', 'k{i}', \
                 '{{\"status\":\"applied\",\"commitSeq\":{i},\"recordedAtMs\":{at},\"results\":[]}}')"
            ));
            client_record(P, &format!("c{i}"), 5, at);
        }
        // Day 40: clients c1/c2 (40 days) are past the 30-day client
        // retention; no outcome is past the 180-day one.
        set_now(T0 + 40 * DAY);
        let p = prune_all(P, 1);
        assert_eq!((p.push_results, p.clients, p.commits), (0, 2, 0));
        assert_eq!(p.calls, 3, "one row per call, then done");
        assert_eq!(rows("sync_clients", P, "true"), 1);
        // Day 181: the T0 outcomes go, the day-100 one stays.
        set_now(T0 + 181 * DAY);
        let p = prune_all(P, 10);
        assert_eq!(p.push_results, 2);
        assert_eq!(rows("sync_push_results", P, "true"), 1);
    }

    #[pg_test]
    fn bad_arguments_are_refused() {
        let e = crate::tests::support::try_run("SELECT syncular.prune_batch('p', 0)").unwrap_err();
        assert_eq!(e.sqlstate, "22023");
        assert!(e.message.starts_with("syncular.invalid_argument"), "{e:?}");
        let e = crate::tests::support::try_run("SELECT syncular.advance_horizon(NULL)").unwrap_err();
        assert!(e.message.starts_with("syncular.invalid_argument"), "{e:?}");
        assert_eq!(int8("SELECT syncular.advance_horizon('never-seen')"), None);
        let e = crate::tests::support::try_run("SELECT syncular.drop_partition_batch('', 10)").unwrap_err();
        assert!(e.message.starts_with("syncular.invalid_argument"), "{e:?}");
    }
}
