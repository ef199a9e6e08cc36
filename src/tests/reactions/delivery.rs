//! The reaction delivery state machine (§6.9), time driven by
//! `syncular.now_ms`: claims lease due rows of the worker's types, oldest
//! first, incrementing attempts; a lease holds until it expires and is then
//! reclaimed; every transition compares the lease owner; failures back off
//! exponentially and dead-letter at max attempts or when permanent; the
//! operator resets dead letters; cleanup is bounded, per status, strictly
//! older than its cutoffs, and never touches pending or leased rows.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};

    use crate::tests::support::*;

    const P: &str = "delivery-p";
    const T0: i64 = 1_700_000_000_000;

    fn at(ms: i64) {
        run(&format!("SET syncular.now_ms = '{ms}'"));
    }

    /// Inserts a pending row `key` of `kind` created and due at `created`.
    fn enqueue(key: &str, kind: &str, created: i64, max_attempts: i32) {
        run(&format!(
            "INSERT INTO syncular.sync_reactions (partition, idempotency_key, type, version, payload, \
               source_client_id, source_client_commit_id, source_commit_seq, created_at_ms, available_at_ms, \
               status, attempts, max_attempts) \
             VALUES ('{P}', '{key}', '{kind}', 1, '{{\"k\": \"{key}\"}}', 'c', 'cc', 1, {created}, {created}, 'pending', 0, {max_attempts})"
        ));
    }

    fn claim(owner: &str, types: &str, n: i32, lease_ms: i64) -> Vec<(String, i32, i64)> {
        let mut out = Vec::new();
        Spi::connect(|client| {
            let rows = client
                .select(
                    &format!("SELECT idempotency_key, attempts, lease_expires_at_ms FROM syncular.claim_reactions('{P}', '{owner}', {types}, {n}, {lease_ms})"),
                    None,
                    &[],
                )
                .unwrap();
            for r in rows {
                out.push((r.get::<String>(1).unwrap().unwrap(), r.get::<i32>(2).unwrap().unwrap(), r.get::<i64>(3).unwrap().unwrap()));
            }
        });
        out
    }

    fn keys(claimed: &[(String, i32, i64)]) -> Vec<&str> {
        claimed.iter().map(|c| c.0.as_str()).collect()
    }

    fn row(key: &str) -> Value {
        Spi::get_one::<pgrx::JsonB>(&format!(
            "SELECT (SELECT to_jsonb(r) FROM syncular.sync_reactions r WHERE partition = '{P}' AND idempotency_key = '{key}')"
        ))
        .unwrap()
        .map_or(Value::Null, |j| j.0)
    }

    fn boolean(sql: &str) -> Option<bool> {
        Spi::get_one::<bool>(sql).unwrap()
    }

    #[pg_test]
    fn claims_lease_due_rows_of_the_workers_types_oldest_first() {
        at(T0);
        enqueue("b", "mail", T0 - 10, 10);
        enqueue("a", "mail", T0 - 20, 10);
        enqueue("c", "hook", T0 - 30, 10);
        enqueue("later", "mail", T0 + 1000, 10);
        let got = claim("w1", "ARRAY['mail']", 10, 30_000);
        assert_eq!(keys(&got), vec!["a", "b"], "types filtered, oldest first, not-yet-due skipped");
        assert!(got.iter().all(|(_, attempts, exp)| *attempts == 1 && *exp == T0 + 30_000));
        assert_eq!((&row("a")["status"], &row("a")["lease_owner"]), (&json!("leased"), &json!("w1")));
        assert!(claim("w2", "ARRAY['mail']", 10, 30_000).is_empty(), "a live lease is not claimed again");
        assert_eq!(keys(&claim("w2", "ARRAY['mail', 'hook']", 1, 30_000)), vec!["c"], "max_rows bounds a claim");
        assert!(claim("w3", "ARRAY[]::text[]", 10, 30_000).is_empty());
        at(T0 + 1000);
        assert_eq!(keys(&claim("w3", "ARRAY['mail']", 10, 30_000)), vec!["later"], "due now");
        expect_error(try_run(&format!("SELECT * FROM syncular.claim_reactions('{P}', '', ARRAY['x'])")), "22023", "syncular.invalid_argument", "lease_owner");
        expect_error(try_run(&format!("SELECT * FROM syncular.claim_reactions('{P}', 'w', ARRAY['x'], 0)")), "22023", "syncular.invalid_argument", "max_rows");
        expect_error(try_run(&format!("SELECT * FROM syncular.claim_reactions('{P}', 'w', ARRAY['x'], 1, 0)")), "22023", "syncular.invalid_argument", "lease_ms");
        expect_error(try_run(&format!("SELECT * FROM syncular.claim_reactions('{P}', 'w', NULL)")), "22023", "syncular.invalid_argument", "types");
    }

    #[pg_test]
    fn a_lease_that_expires_on_its_last_attempt_dead_letters_instead_of_looping() {
        at(T0);
        enqueue("crashes", "mail", T0, 2);
        assert_eq!(claim("w1", "ARRAY['mail']", 1, 100).len(), 1, "attempt 1");
        at(T0 + 100);
        let second = claim("w2", "ARRAY['mail']", 1, 100);
        assert_eq!((second[0].0.as_str(), second[0].1), ("crashes", 2), "attempt 2 after the first worker died");
        at(T0 + 200);
        assert!(claim("w3", "ARRAY['mail']", 1, 100).is_empty(), "no third attempt of a 2-attempt reaction");
        let r = row("crashes");
        assert_eq!((&r["status"], &r["attempts"], &r["lease_owner"]), (&json!("dead-letter"), &json!(2), &Value::Null));
        assert_eq!(r["last_failure"], json!({"code": "reaction.lease_expired", "atMs": T0 + 200}));
        at(T0 + 10_000_000);
        assert!(claim("w4", "ARRAY['mail']", 1, 100).is_empty(), "a dead letter is never claimed");
    }

    #[pg_test]
    fn an_expired_lease_is_reclaimed_and_the_stale_owner_can_change_nothing() {
        at(T0);
        enqueue("r", "mail", T0, 10);
        assert_eq!(claim("w1", "ARRAY['mail']", 1, 200).len(), 1);
        assert_eq!(int8(&format!("SELECT syncular.extend_reaction_lease('{P}', 'r', 'w1', 300)")), Some(T0 + 300));
        assert_eq!(int8(&format!("SELECT syncular.extend_reaction_lease('{P}', 'r', 'w2', 300)")), None, "not w2's lease");
        at(T0 + 299);
        assert!(claim("w2", "ARRAY['mail']", 1, 1000).is_empty(), "the lease still holds");
        at(T0 + 300);
        let got = claim("w2", "ARRAY['mail']", 1, 1000);
        assert_eq!((got[0].0.as_str(), got[0].1), ("r", 2), "reclaimed at expiry with attempts + 1");
        assert_eq!(int8(&format!("SELECT syncular.extend_reaction_lease('{P}', 'r', 'w1', 300)")), None, "renewal fails for the stale owner");
        assert_eq!(boolean(&format!("SELECT syncular.complete_reaction('{P}', 'r', 'w1')")), Some(false));
        assert_eq!(text(&format!("SELECT syncular.fail_reaction('{P}', 'r', 'w1', 'boom')")), None);
        assert_eq!(row("r")["lease_owner"], json!("w2"));
        assert_eq!(boolean(&format!("SELECT syncular.complete_reaction('{P}', 'r', 'w2')")), Some(true));
        let r = row("r");
        assert_eq!((&r["status"], &r["completed_at_ms"], &r["lease_owner"]), (&json!("completed"), &json!(T0 + 300), &Value::Null));
        assert_eq!(boolean(&format!("SELECT syncular.complete_reaction('{P}', 'r', 'w2')")), Some(false), "completed once");
        at(T0 + 10_000_000);
        assert!(claim("w3", "ARRAY['mail']", 1, 1000).is_empty(), "a completed row is never claimed");
    }

    #[pg_test]
    fn failures_back_off_then_dead_letter_and_the_operator_resets_them() {
        at(T0);
        enqueue("r", "mail", T0, 3);
        let mut now = T0;
        for (attempt, delay) in [(1, 1000), (2, 2000)] {
            assert_eq!(claim("w", "ARRAY['mail']", 1, 1000)[0].1, attempt);
            assert_eq!(
                text(&format!("SELECT syncular.fail_reaction('{P}', 'r', 'w', 'smtp.down', '{{\"try\": {attempt}}}')")),
                Some("pending".into())
            );
            let r = row("r");
            assert_eq!((&r["available_at_ms"], &r["lease_owner"]), (&json!(now + delay), &Value::Null), "{r}");
            assert_eq!(r["last_failure"], json!({"code": "smtp.down", "atMs": now, "details": {"try": attempt}}));
            at(now + delay - 1);
            assert!(claim("w", "ARRAY['mail']", 1, 1000).is_empty(), "not due before its backoff");
            now += delay;
            at(now);
        }
        assert_eq!(claim("w", "ARRAY['mail']", 1, 1000)[0].1, 3);
        assert_eq!(text(&format!("SELECT syncular.fail_reaction('{P}', 'r', 'w', 'smtp.down')")), Some("dead-letter".into()), "attempts reached max");
        let r = row("r");
        assert_eq!((&r["status"], &r["available_at_ms"], &r["attempts"]), (&json!("dead-letter"), &json!(now), &json!(3)));
        at(now + 10_000_000);
        assert!(claim("w", "ARRAY['mail']", 1, 1000).is_empty(), "dead letters are not claimed");
        assert_eq!(boolean(&format!("SELECT syncular.retry_dead_letter_reaction('{P}', 'r')")), Some(true));
        let r = row("r");
        assert_eq!((&r["status"], &r["attempts"], &r["last_failure"]), (&json!("pending"), &json!(0), &Value::Null));
        assert_eq!(boolean(&format!("SELECT syncular.retry_dead_letter_reaction('{P}', 'r')")), Some(false), "not dead-lettered any more");
        // Permanent failures dead-letter at once; custom backoff is capped.
        assert_eq!(claim("w", "ARRAY['mail']", 1, 1000)[0].1, 1);
        assert_eq!(text(&format!("SELECT syncular.fail_reaction('{P}', 'r', 'w', 'bad.version', permanent => true)")), Some("dead-letter".into()));
        enqueue("s", "mail", T0, 10);
        let now = now + 10_000_000;
        claim("w", "ARRAY['mail']", 5, 1000);
        let custom = "initial_backoff_ms => 2500, max_backoff_ms => 4000";
        run(&format!("SELECT syncular.fail_reaction('{P}', 's', 'w', 'x', {custom})"));
        assert_eq!(row("s")["available_at_ms"], json!(now + 2500));
        at(now + 2500);
        assert_eq!(claim("w", "ARRAY['mail']", 5, 1000)[0].1, 2);
        run(&format!("SELECT syncular.fail_reaction('{P}', 's', 'w', 'x', {custom})"));
        assert_eq!(row("s")["available_at_ms"], json!(now + 2500 + 4000), "min(4000, 2500 × 2)");
        expect_error(
            try_run(&format!("SELECT syncular.fail_reaction('{P}', 's', 'w', 'x', initial_backoff_ms => 5000, max_backoff_ms => 3000)")),
            "22023",
            "syncular.invalid_argument",
            "backoff",
        );
        expect_error(try_run(&format!("SELECT syncular.fail_reaction('{P}', 's', 'w', '')")), "22023", "syncular.invalid_argument", "code");
        expect_error(
            try_run(&format!("SELECT syncular.fail_reaction('{P}', 's', 'w', 'x', jsonb_build_object('big', repeat('x', 9000)))")),
            "22023",
            "syncular.invalid_argument",
            "8192",
        );
    }

    #[pg_test]
    fn cleanup_is_bounded_per_status_and_spares_pending_and_leased_rows() {
        at(T0);
        for (key, status, completed, available) in [
            ("c-old", "completed", Some(T0 - 200), T0 - 300),
            ("c-edge", "completed", Some(T0 - 100), T0 - 300),
            ("d-old", "dead-letter", None, T0 - 200),
            ("d-edge", "dead-letter", None, T0 - 100),
            ("pending-old", "pending", None, T0 - 10_000),
            ("leased-expired", "leased", None, T0 - 10_000),
        ] {
            enqueue(key, "mail", T0 - 10_000, 10);
            run(&format!(
                "UPDATE syncular.sync_reactions SET status = '{status}', completed_at_ms = {}, available_at_ms = {available}, \
                   lease_owner = CASE WHEN '{status}' = 'leased' THEN 'w' END, \
                   lease_expires_at_ms = CASE WHEN '{status}' = 'leased' THEN {} END \
                 WHERE partition = '{P}' AND idempotency_key = '{key}'",
                completed.map_or("NULL".into(), |c| c.to_string()),
                T0 - 5000
            ));
        }
        let prune = |max: i32| -> (i64, i64, bool) {
            let mut out = (0, 0, false);
            Spi::connect(|c| {
                let r = c.select(&format!("SELECT * FROM syncular.prune_reactions('{P}', 100, 100, {max})"), None, &[]).unwrap().first();
                out = (r.get::<i64>(1).unwrap().unwrap(), r.get::<i64>(2).unwrap().unwrap(), r.get::<bool>(3).unwrap().unwrap());
            });
            out
        };
        assert_eq!(prune(1), (1, 0, true), "limit 1: the old completed row only");
        assert_eq!(row("c-old"), Value::Null);
        assert_eq!(prune(1), (0, 1, true), "then the old dead letter");
        assert_eq!(prune(10), (0, 0, false), "rows exactly at a cutoff stay");
        let left = text(&format!("SELECT string_agg(idempotency_key, ',' ORDER BY idempotency_key) FROM syncular.sync_reactions WHERE partition = '{P}'"));
        assert_eq!(left.as_deref(), Some("c-edge,d-edge,leased-expired,pending-old"));
        // The defaults (30 d / 90 d) keep everything this young.
        assert_eq!(int8(&format!("SELECT completed + dead_lettered FROM syncular.prune_reactions('{P}')")), Some(0));
        let listed = int8(&format!("SELECT count(*) FROM syncular.list_reactions('{P}', 'dead-letter')"));
        assert_eq!(listed, Some(1));
        expect_error(try_run(&format!("SELECT * FROM syncular.list_reactions('{P}', 'done')")), "22023", "syncular.invalid_argument", "status");
    }
}
