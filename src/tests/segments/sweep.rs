//! `syncular.segment_sweep`: expired publications go `grace_ms` after
//! their expiry, then the bytes no publication references, in batches of
//! `max_rows`; live publications, their bytes, and fresh bytes stay. (The
//! races with publishers are `tests/tests/segment_sweep_races.rs`.)

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;

    use crate::tests::segments::url_support::*;
    use crate::tests::support::{expect_error, int8, text, try_run};

    const P: &str = "seg-sweep";
    const NOW: i64 = 1_700_000_000_000;
    const HOUR: i64 = 3_600_000;

    fn seg(i: u32) -> String {
        format!("sha256:{i:064x}")
    }

    fn sweep(max_rows: i32) -> serde_json::Value {
        let out = text(&format!("SELECT syncular.segment_sweep({max_rows})::text")).expect("sweep result");
        serde_json::from_str(&out).unwrap()
    }

    fn count(table: &str) -> i64 {
        int8(&format!("SELECT count(*) FROM syncular.{table} WHERE partition = '{P}'")).unwrap()
    }

    #[pg_test]
    fn expired_publications_then_unreferenced_bytes_in_batches() {
        set_now(NOW);
        register_partition(P);
        // Segments 0..5: each published once, expired 2 h ago (past the 1 h grace).
        for i in 0..5 {
            store_segment(P, &seg(i), NOW - 10 * HOUR);
            publish(P, EPOCH, "tasks", i as i32, "d", &seg(i), NOW - 2 * HOUR);
        }
        // Segment 5: expired 30 min ago (within the grace): kept, bytes too.
        store_segment(P, &seg(5), NOW - 10 * HOUR);
        publish(P, EPOCH, "tasks", 5, "d", &seg(5), NOW - HOUR / 2);
        // Segment 6 (its expired publication sorts after 0..5's): one expired and one live publication: the live one keeps the bytes.
        store_segment(P, &seg(6), NOW - 10 * HOUR);
        publish(P, EPOCH, "tasks", 6, "d", &seg(6), NOW - 3 * HOUR / 2);
        publish(P, EPOCH, "tasks", 7, "e", &seg(6), NOW + HOUR);
        // Segment 7: never published, stored 10 min ago (within the grace): kept.
        store_segment(P, &seg(7), NOW - HOUR / 6);

        assert_eq!(sweep(2), json!({"publications": 2, "segments": 2, "urlKeys": 0}));
        assert_eq!(sweep(2), json!({"publications": 2, "segments": 2, "urlKeys": 0}));
        assert_eq!(sweep(2), json!({"publications": 2, "segments": 1, "urlKeys": 0}));
        assert_eq!(sweep(2), json!({"publications": 0, "segments": 0, "urlKeys": 0}));
        let kept = text(&format!(
            "SELECT string_agg(right(segment_id, 1), ',' ORDER BY segment_id) FROM syncular.sync_segments WHERE partition = '{P}'"
        ));
        assert_eq!(kept.as_deref(), Some("5,6,7"));
        assert_eq!(count("sync_segment_chunks"), 3);
        assert_eq!(count("sync_segment_publications"), 2);
        // An hour later: 5 goes, 7 (unpublished, now old enough) goes; 6 is still live.
        set_now(NOW + HOUR);
        assert_eq!(sweep(1000), json!({"publications": 1, "segments": 2, "urlKeys": 0}));
        assert_eq!(count("sync_segments"), 1);
        // grace_ms => 0: the expiry alone counts.
        set_now(NOW + HOUR + 1);
        let out: serde_json::Value = serde_json::from_str(&text("SELECT syncular.segment_sweep(grace_ms => 0)::text").unwrap()).unwrap();
        assert_eq!(out, json!({"publications": 1, "segments": 1, "urlKeys": 0}));
        assert_eq!(count("sync_segment_chunks"), 0);
    }

    #[pg_test]
    fn bad_arguments() {
        expect_error(try_run("SELECT syncular.segment_sweep(0)"), "22023", "syncular.invalid_argument", "max_rows");
        expect_error(try_run("SELECT syncular.segment_sweep(10, -1)"), "22023", "syncular.invalid_argument", "grace_ms");
        // NULL is an error, never a silent NULL result.
        expect_error(try_run("SELECT syncular.segment_sweep(NULL)"), "22023", "syncular.invalid_argument", "max_rows");
        expect_error(try_run("SELECT syncular.segment_sweep(10, NULL)"), "22023", "syncular.invalid_argument", "grace_ms");
        expect_error(
            try_run("SELECT syncular.rotate_segment_url_key(NULL)"),
            "22023",
            "syncular.invalid_argument",
            "drop_previous",
        );
    }

    #[pg_test]
    fn retired_url_keys_go() {
        set_now(NOW);
        crate::engine::segments::signed_url::ensure_key().unwrap();
        assert_eq!(int8("SELECT syncular.rotate_segment_url_key()"), Some(2));
        set_now(NOW + 960_000);
        assert_eq!(sweep(10)["urlKeys"], 1);
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_segment_url_keys"), Some(1));
    }
}
