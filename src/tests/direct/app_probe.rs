//! The app-row absence probe (`crate::store::direct::app_probe`): a pushed
//! row the index probe does not find is inserted without the read before
//! it; a row it finds is read and updated as before — also a row written by
//! plain SQL earlier in the same transaction, and after the key index was
//! replaced.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::capture::support::set_partition;
    use crate::tests::support::{int8, run, text};
    use crate::tests::sync_pull_support::*;

    const P: &str = "probe-p";

    fn version(id: &str) -> i64 {
        int8(&format!("SELECT _sync_version FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = '{id}'")).unwrap_or(0)
    }

    /// Pushed inserts of new rows are rows of version 1; pushing the same
    /// ids again updates them (version 2), so the probe found them.
    #[pg_test]
    fn a_new_row_is_inserted_and_a_standing_one_updated() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("t1", "w1", "one"), task("t2", "w1", "two")]);
        assert_eq!((version("t1"), version("t2")), (1, 1));
        a.push_ok(vec![task("t1", "w1", "one again")]);
        assert_eq!((version("t1"), version("t2")), (2, 1));
        assert_eq!(text("SELECT title FROM public.tasks WHERE _sync_row_id = 't1'").as_deref(), Some("one again"));
    }

    /// A row plain SQL inserted earlier in the same transaction is found by
    /// the probe (it sees the transaction's own writes): the push updates it.
    #[pg_test]
    fn a_row_written_earlier_in_the_transaction_is_found() {
        setup();
        set_partition(P);
        run("INSERT INTO public.tasks (id, ws, title) VALUES ('t7', 'w1', 'by sql')");
        assert_eq!(version("t7"), 1);
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("t7", "w1", "by push")]);
        assert_eq!(version("t7"), 2);
        assert_eq!(text("SELECT title FROM public.tasks WHERE _sync_row_id = 't7'").as_deref(), Some("by push"));
    }

    /// The key index replaced (a new Oid) after a push kept the old one: the
    /// next push probes the new index (or reads), never a dropped one, and
    /// still finds the standing row.
    #[pg_test]
    fn a_replaced_key_index_is_found_again() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("t1", "w1", "one")]);
        let old = int8("SELECT i.indexrelid::int8 FROM pg_index i WHERE i.indrelid = 'public.tasks'::regclass AND i.indisprimary").unwrap();
        let name = text("SELECT c.conname::text FROM pg_constraint c WHERE c.conrelid = 'public.tasks'::regclass AND c.contype = 'p'").unwrap();
        run(&format!("ALTER TABLE public.tasks DROP CONSTRAINT \"{name}\", ADD PRIMARY KEY (_sync_partition, _sync_row_id)"));
        let new = int8("SELECT i.indexrelid::int8 FROM pg_index i WHERE i.indrelid = 'public.tasks'::regclass AND i.indisprimary").unwrap();
        assert_ne!(old, new);
        a.push_ok(vec![task("t1", "w1", "one again")]);
        assert_eq!(version("t1"), 2);
        a.push_ok(vec![task("t2", "w1", "two")]);
        assert_eq!(version("t2"), 1);
    }
}
