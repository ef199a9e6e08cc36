//! Issue 14 ("Scale out on Citus"): every SQL statement the extension issues during sync rounds
//! is router-shaped — each distributed table pinned to one partition, no INSERT … SELECT, no
//! INSERT CTE (the rules: `syncular_integration_tests::router_check`) — checked without Citus.
//!
//! With `syncular.router_statements = on` on every connection, after the sample schema is
//! registered and `pg_stat_statements` reset, it runs a representative set of sync rounds:
//! pushes (insert, update, delete, a rejected commit, a replay, several commits in one
//! request; wire version 3: a sparse insert, a patch, a column-level conflict, a `ROUND_FAILURE`
//! report), a bootstrap pull of several pages, an incremental pull, `realtime_open` /
//! `realtime_deltas` / `realtime_ack`, `syncular.commit` (1,005 times), `advance_horizon` and one
//! `prune_batch`; auth leases on for the sessions (issue, refresh, a round on a lease, revoke,
//! list, clear). Not plain SQL writes: the capture triggers are not available on Citus. Then every recorded text
//! (nested statements only where the server tells; never the harness's own, tagged
//! `/* router-check-harness */`, nor the top-level calls of the extension's functions) that
//! names a `sync_` or app table goes through the checker; the test fails listing each
//! violating statement with its violations, and also when the set is trivial.
//!
//! Needs `pg_stat_statements` preloaded with `track = all` (`scripts/test` does it when the
//! major ships the module and then exports `SYNCULAR_STATEMENT_LOG_REQUIRED=1`); without it the
//! test prints "skipped: …" — or fails when that variable is set.
//! `SYNCULAR_ROUTER_CHECK_VERBOSE=1` (with `--nocapture`) lists every recorded statement with
//! its verdict.

use serde_json::{json, Value};
use ssp2::model::{Frame, PushStatus};
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::gateway::sql_commit_task;
use syncular_integration_tests::router_check::report::{
    catalog_use, check_all, format_verdicts, format_violations, one_line, Checked, HARNESS_TAG,
};
use syncular_integration_tests::statement_log::{self, router_connection};
use syncular_integration_tests::bench_wire::requests::{push_request, summary, task_slots, Slot, Upsert};
use syncular_integration_tests::bench_wire::Wire;
use syncular_integration_tests::wire::{commit, delete, delivered, pull_header, subscription, upsert, RawSession, Task};

const TABLE: &str = "tasks";

fn session(partition: &str, actor: &str, client_id: &str) -> RawSession {
    // Auth leases on (§7.3): every live round also writes the client's lease.
    let mut conn = router_connection();
    conn.batch_execute(&format!("SET {HARNESS_TAG} syncular.lease_ttl = '1h'")).expect("leases on");
    let mut s = RawSession::new(conn, partition, actor, client_id, Some(allow_projects(&["p1", "p2"])));
    s.acquire_epoch().expect("logEpoch");
    s
}

fn sub(cursor: i64, token: Option<String>) -> Frame {
    subscription("s", TABLE, &[("project_id", &["p1", "p2"])], cursor, token)
}

/// `(nextCursor, bootstrapState)` of the response's SUB_END.
fn sub_end(msg: &ssp2::model::Message) -> (i64, Option<String>) {
    msg.frames
        .iter()
        .find_map(|f| match f {
            Frame::SubEnd { next_cursor, bootstrap_state } => Some((*next_cursor, bootstrap_state.clone().map(|s| s.0))),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no SUB_END: {msg:?}"))
}

fn statuses(out: &[syncular_integration_tests::wire::PushOutcome]) -> Vec<PushStatus> {
    out.iter().map(|o| o.status).collect()
}

/// Wire version 3 (syncular-client 0.49; requests by the 0.49.2 reference codec): an unversioned
/// sparse insert (its tombstone probe), a one-column patch (the masked UPDATE), a stale patch (a
/// column-level conflict) and a request carrying a `ROUND_FAILURE` report.
fn v3_rounds(p: &str) {
    let mut s = session(p, "alice", "router-v3");
    let epoch = s.log_epoch.clone().expect("epoch");
    let push = |s: &mut RawSession, id: &str, base: Option<i64>, slots: Vec<Slot>| {
        let bytes = push_request(Wire::V3, "router-v3", &epoch, id, &[Upsert { table: TABLE, row_id: "v3a", base_version: base, slots }]);
        summary(Wire::V3, &s.send_bytes(&bytes).expect("v3 push")).expect("v3 response").0
    };
    assert_eq!(push(&mut s, "v3-insert", None, task_slots("v3a", "p1", "from v3")), ["Applied"]);
    let title = |t: &str| vec![Some(Some("v3a".to_owned())), None, Some(Some(t.to_owned())), None, None];
    assert_eq!(push(&mut s, "v3-patch", Some(1), title("patched")), ["Applied"]);
    assert_eq!(push(&mut s, "v3-stale", Some(1), title("stale")), ["Rejected"]);
    let report = ssp2_v3::encode_message(&ssp2_v3::Message {
        wire_version: 3,
        msg_kind: ssp2_v3::MsgKind::Request,
        frames: vec![
            ssp2_v3::Frame::ReqHeader { client_id: "router-v3".into(), schema_version: 1, log_epoch: Some(epoch.clone()) },
            ssp2_v3::Frame::RoundFailure { code: "transport.timeout".into() },
            ssp2_v3::Frame::PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept: 0b0011 },
        ],
    });
    s.send_bytes(&report).expect("a round carrying a report");
}

/// Pushes of every kind, a paged bootstrap, an incremental pull, the realtime calls and a
/// server-authored commit, all in `p`.
fn sync_rounds(p: &str) {
    let mut w = session(p, "alice", "router-writer");
    let rows: Vec<_> = (1..=6).map(|i| upsert(&Task::new(format!("t{i}"), "p1", format!("task {i}")), None)).collect();
    let c1 = commit("c1", rows);
    assert_eq!(statuses(&w.push(vec![c1.clone()]).expect("insert")), [PushStatus::Applied]);
    let mut t1 = Task::new("t1", "p1", "renamed");
    t1.priority = Some(3);
    let c2 = commit("c2", vec![upsert(&t1, Some(1)), delete("t2", Some(1))]);
    assert_eq!(statuses(&w.push(vec![c2]).expect("update + delete")), [PushStatus::Applied]);
    let several = vec![
        commit("c3", vec![upsert(&Task::new("t7", "p2", "seven"), None)]),
        commit("c4", vec![upsert(&Task::new("t3", "p1", "stale"), Some(99))]),
        commit("c5", vec![upsert(&Task::new("t8", "p1", "eight"), None), delete("t4", Some(1))]),
    ];
    let out = w.push(several).expect("three commits in one request");
    assert_eq!(statuses(&out), [PushStatus::Applied, PushStatus::Rejected, PushStatus::Applied], "{out:?}");
    assert_eq!(statuses(&w.push(vec![c1]).expect("replay")), [PushStatus::Cached]);

    // Bootstrap, 2 rows a page, 2 pages a response, resumed until done.
    let mut r = session(p, "bob", "router-reader");
    let (mut cursor, mut token, mut responses, mut rows) = (-1i64, None, 0, 0);
    loop {
        responses += 1;
        assert!(responses <= 20, "bootstrap did not finish");
        let msg = r.round(vec![pull_header(100, 2, 2, 0b0011), sub(cursor, token.clone())]).expect("bootstrap pull");
        rows += delivered(&msg).expect("rows decode").rows.len();
        (cursor, token) = sub_end(&msg);
        if token.is_none() {
            break;
        }
    }
    assert!(responses >= 2 && rows == 6, "{responses} responses, {rows} rows");

    // A new commit, then the reader's incremental pull.
    let c6 = commit("c6", vec![upsert(&Task::new("t9", "p2", "nine"), None)]);
    assert_eq!(statuses(&w.push(vec![c6]).expect("push")), [PushStatus::Applied]);
    let msg = r.round(vec![pull_header(100, 100, 1, 0b0011), sub(cursor, None)]).expect("incremental pull");
    let got = delivered(&msg).expect("rows decode");
    assert_eq!(got.commit_seqs.len(), 1, "{got:?}");
    let head = sub_end(&msg).0;

    // The gateway's realtime calls for the reader, from the cursor before that commit.
    let mut gw = router_connection();
    let open: Value = gw
        .query_one("SELECT syncular.realtime_open($1, $2, $3, $4)", &[&p, &"bob", &"router-reader", &allow_projects(&["p1", "p2"])])
        .expect("realtime_open")
        .get(0);
    let group = json!([{
        "registrations": open["registrations"], "schemaVersion": open["schemaVersion"], "logEpoch": open["logEpoch"],
        "wireVersion": open["wireVersion"], "cursor": cursor, "suppressed": false,
    }]);
    let kind: String = gw
        .query_one("SELECT kind FROM syncular.realtime_deltas($1, $2)", &[&p, &group])
        .expect("realtime_deltas")
        .get(0);
    assert_eq!(kind, "delta", "{open}");
    let acks = json!([{"clientId": "router-reader", "actorId": "bob", "cursor": head, "logEpoch": open["logEpoch"]}]);
    gw.query_one("SELECT syncular.realtime_ack($1, $2)", &[&p, &acks]).expect("realtime_ack");

    // A server-authored commit.
    sql_commit_task(&mut gw, p, "server", "t10", "p1", "from SQL");

    // Auth leases: a round served from the reader's lease (the outage signal), the writer's
    // lease listed, revoked (its next leased round fails) and cleared.
    r.allowed = Some(json!("resolver_outage"));
    r.round(vec![pull_header(100, 100, 1, 0b0011), sub(head, None)]).expect("a round on the lease");
    let lease: String = gw
        .query_one("SELECT lease_id FROM syncular.leases($1) WHERE client_id = 'router-writer'", &[&p])
        .expect("syncular.leases")
        .get(0);
    let revoked: bool = gw.query_one("SELECT syncular.revoke_lease($1, $2)", &[&p, &lease]).expect("revoke_lease").get(0);
    assert!(revoked);
    let writer_allowed = w.allowed.clone();
    w.allowed = Some(json!("resolver_outage"));
    let err = w.push(vec![commit("c7", vec![upsert(&Task::new("t11", "p1", "eleven"), None)])]).expect_err("revoked");
    assert!(format!("{err:?}").contains("sync.auth_lease_revoked"), "{err:?}");
    // Recovery: a live round replaces the revoked lease under a fresh id; that one is revoked
    // and cleared.
    w.allowed = writer_allowed.clone();
    w.round(vec![pull_header(100, 100, 1, 0b0011), sub(head, None)]).expect("a live round after the revocation");
    let fresh: String = gw
        .query_one("SELECT lease_id FROM syncular.leases($1) WHERE client_id = 'router-writer'", &[&p])
        .expect("syncular.leases")
        .get(0);
    assert_ne!(fresh, lease, "recovery mints a fresh lease id");
    let revoked: bool = gw.query_one("SELECT syncular.revoke_lease($1, $2)", &[&p, &fresh]).expect("revoke_lease").get(0);
    assert!(revoked);
    let cleared: bool =
        gw.query_one("SELECT syncular.clear_lease_revocation($1, $2)", &[&p, &fresh]).expect("clear_lease_revocation").get(0);
    assert!(cleared);

    // Last: its row would change what the reads above count.
    v3_rounds(p);
}

/// 1,005 server-authored commits in `q` (`syncular.commit`, one transaction) and one pruning
/// batch (the horizon keeps the newest 1,000: the batch deletes 5 commits). Plain SQL writes
/// captured by triggers are not part of the check: Citus runs triggers on the shards, so a
/// distributed app table carries none (docs/src/operate/citus.md).
fn server_commits_and_prune(q: &str) {
    let mut writer = router_connection();
    let tag = HARNESS_TAG;
    writer
        .batch_execute(&format!(
            "DO {tag} $$ BEGIN FOR i IN 1..1005 LOOP \
               PERFORM syncular.commit('{q}', 'ops', \
                 jsonb_build_array(jsonb_build_object('table', 'tasks', 'op', 'upsert', \
                   'row', jsonb_build_object('id', 't' || i, 'project_id', 'p1', 'title', 'x', 'done', false))), \
                 allowed_scopes => '{{\"project_id\": [\"*\"]}}'); \
             END LOOP; END $$"
        ))
        .expect("1,005 server-authored commits");
    let mut admin = router_connection();
    let horizon: i64 = admin.query_one("SELECT syncular.advance_horizon($1)", &[&q]).expect("advance_horizon").get(0);
    assert_eq!(horizon, 5);
    let pruned: i64 = admin
        .query_one("SELECT commits FROM syncular.prune_batch($1, 10000)", &[&q])
        .expect("prune_batch")
        .get(0);
    assert_eq!(pruned, 5);
}

/// Reactions (§6.9) in `r`: a planner registered for this test's partitions only plans one
/// reaction per operation of two server-authored commits (the enqueue statement), then a worker
/// claims, renews, completes and fails them, and an operator resets, lists and prunes.
fn reactions_round(r: &str) {
    let mut admin = router_connection();
    let tag = HARNESS_TAG;
    admin
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION public.router_check_planner(commit jsonb) RETURNS jsonb LANGUAGE sql AS {tag} $$ \
               SELECT CASE WHEN commit->>'partition' LIKE '%router-rx%' THEN \
                 (SELECT jsonb_agg(jsonb_build_object('key', o->>'rowId', 'type', 'rx', 'version', 1, 'payload', o->'row')) \
                    FROM jsonb_array_elements(commit->'operations') o) END $$; \
             SELECT syncular.set_reaction_planner('public.router_check_planner(jsonb)')"
        ))
        .expect("register the planner");
    let mut gw = router_connection();
    sql_commit_task(&mut gw, r, "server", "t1", "p1", "one");
    sql_commit_task(&mut gw, r, "server", "t2", "p1", "two");
    let mut worker = router_connection();
    let keys: Vec<String> = worker
        .query("SELECT idempotency_key FROM syncular.claim_reactions($1, 'w:1', ARRAY['rx'], 10, 30000)", &[&r])
        .expect("claim")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(keys.len(), 2, "both commits planned a reaction");
    worker.execute("SELECT syncular.extend_reaction_lease($1, $2, 'w:1')", &[&r, &keys[0]]).expect("extend");
    worker.execute("SELECT syncular.complete_reaction($1, $2, 'w:1')", &[&r, &keys[0]]).expect("complete");
    worker
        .execute("SELECT syncular.fail_reaction($1, $2, 'w:1', 'x', permanent => true)", &[&r, &keys[1]])
        .expect("fail");
    admin.execute("SELECT syncular.retry_dead_letter_reaction($1, $2)", &[&r, &keys[1]]).expect("retry");
    admin.query("SELECT * FROM syncular.list_reactions($1)", &[&r]).expect("list");
    admin.query("SELECT * FROM syncular.prune_reactions($1, 0, 0)", &[&r]).expect("prune");
    admin
        .batch_execute(&format!("SELECT syncular.set_reaction_planner(NULL) /* {tag} */"))
        .expect("remove the planner");
}

fn names(c: &Checked, table: &str) -> bool {
    c.analysis.relations.iter().any(|(n, _)| n.rsplit('.').next() == Some(table))
}

fn starts_with(c: &Checked, words: &str) -> bool {
    one_line(&c.sql).to_lowercase().starts_with(words)
}

#[test]
fn every_statement_of_the_sync_rounds_is_router_shaped() {
    let mut admin = router_connection();
    if let Err(why) = statement_log::ensure(&mut admin) {
        if statement_log::required() {
            panic!("{} is set but the statement log is unavailable: {why}", statement_log::REQUIRED_ENV);
        }
        println!("skipped: {why} (start the server with -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all)");
        return;
    }
    register_schema(&mut admin).expect("register the sample schema");
    let layout = statement_log::layout(&mut admin);
    assert!(layout.app_tables.iter().any(|(s, t)| s == "public" && t == TABLE), "{layout:?}");

    statement_log::reset(&mut admin);
    sync_rounds(&partition_name("router"));
    server_commits_and_prune(&partition_name("router-prune"));
    reactions_round(&partition_name("router-rx"));
    let texts = statement_log::recorded(&mut admin);
    let checked = check_all(texts.iter().map(String::as_str), &layout);
    if std::env::var_os("SYNCULAR_ROUTER_CHECK_VERBOSE").is_some() {
        println!("{}", format_verdicts(texts.iter().map(String::as_str), &layout));
    }

    // Allowed but reported: which recorded (non-harness) statements read catalogs, and the
    // notes on checked ones (different pinned values, local relations next to distributed ones).
    let catalog: Vec<(Vec<String>, String)> = texts
        .iter()
        .filter(|t| !t.contains(HARNESS_TAG))
        .map(|t| (catalog_use(t, &layout), one_line(t)))
        .filter(|(uses, _)| !uses.is_empty())
        .collect();
    println!("{} statements recorded, {} checked; {} read catalogs:", texts.len(), checked.len(), catalog.len());
    for (uses, t) in &catalog {
        println!("  catalog ({}): {t}", uses.join(", "));
    }
    for c in checked.iter().filter(|c| !c.analysis.notes.is_empty()) {
        println!("  note ({}): {}", c.analysis.notes.join("; "), one_line(&c.sql));
    }
    if checked.iter().any(|c| !c.analysis.violations.is_empty()) {
        panic!("{}", format_violations(&checked));
    }
    // Not vacuous: the log saw the writes and the reads.
    assert!(
        checked.iter().any(|c| (starts_with(c, "insert") || starts_with(c, "with")) && one_line(&c.sql).to_lowercase().contains("insert into syncular.sync_commits")),
        "no INSERT into sync_commits among the {} checked of {} recorded statements: is track = all?",
        checked.len(),
        texts.len()
    );
    assert!(
        checked.iter().any(|c| starts_with(c, "insert into syncular.sync_reactions")),
        "no INSERT into sync_reactions among the {} checked statements",
        checked.len()
    );
    assert!(
        checked.iter().any(|c| (starts_with(c, "select") || starts_with(c, "with")) && names(c, "sync_changes")),
        "no SELECT of sync_changes among the {} checked statements",
        checked.len()
    );
    for (words, what) in [("insert", "lease issue"), ("update", "lease refresh or revocation"), ("select", "lease read")] {
        assert!(
            checked.iter().any(|c| starts_with(c, words) && names(c, "sync_auth_leases")),
            "no {what} ({words} naming sync_auth_leases) among the {} checked statements",
            checked.len()
        );
    }
}
