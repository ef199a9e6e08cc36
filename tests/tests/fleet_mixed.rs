//! Both client generations in one partition through one gateway
//! ([`syncular_integration_tests::fleet`]): a 0.15.48 (wire 1/2) and a 0.49.2 (wire 3) client
//! writing, editing and deleting each other's rows over HTTP and over their sockets converge on
//! identical rows and see each other's presence; and what only wire 3 can say — a sparse
//! `patch` (one column on the wire) leaves every other column intact for every client, v2
//! included; two patches of one column from one base conflict with exactly that column in
//! `conflictColumns`; two patches of different columns from one base both apply.
//! Needs `SYNCULAR_TEST_DSN`, the gateway binary and both drivers (scripts/test builds them).

use serde_json::json;
use syncular_integration_tests::clients::task_values;
use syncular_integration_tests::fleet::{as_server_tasks, values, FleetClient, Generation, Stage};

/// Every client holds exactly the server's rows (ids, versions, values) and the same rows as
/// the others.
fn converged(s: &mut Stage, clients: &mut [&mut FleetClient]) {
    let server = s.server_tasks();
    let first = clients[0].tasks();
    for c in clients.iter_mut() {
        let rows = c.tasks();
        assert_eq!(as_server_tasks(&rows), server, "{} holds the server's rows", c.name());
        assert_eq!(rows, first, "{} holds what {} holds", c.name(), clients[0].name());
    }
}

/// Clients of `(generation, actor)`, each subscribed to p1 and synced, in a fresh partition
/// where every actor holds p1.
fn p1_clients(label: &str, who: &[(Generation, &str)]) -> (Stage, Vec<FleetClient>) {
    let grants: Vec<(&str, &[&str])> = who.iter().map(|(_, actor)| (*actor, &["p1"][..])).collect();
    let s = Stage::new(label, &grants, &[]);
    let clients = who
        .iter()
        .map(|(generation, actor)| {
            let mut c = s.client(*generation, actor, &format!("{actor}-{}", generation.label()));
            c.subscribe_projects("tasks", &["p1"]);
            c.synced(6);
            c
        })
        .collect();
    (s, clients)
}

mod mixed_partition {
    use super::*;

    #[test]
    fn fleet_v2_and_v3() {
        let (mut s, mut clients) = p1_clients("fleet-mixed", &[(Generation::V2, "alice"), (Generation::V3, "bob")]);
        let [old, new] = &mut clients[..] else { unreachable!() };
        old.write_task("a1", "p1", "from v2");
        old.write_task("a2", "p1", "from v2, deleted by v3");
        new.write_task("b1", "p1", "from v3");
        old.synced(6);
        new.synced(6);
        old.synced(6);

        // Each edits the other's rows: a full-row upsert from v2, a delete and a patch from v3.
        old.upsert(task_values("b1", "p1", "from v3, edited by v2", true, Some(2)), None);
        new.delete("a2", None);
        new.patch("a1", values(&[("priority", json!(9))]), None).expect("v3 patches a held row");
        old.synced(6);
        new.synced(6);
        old.synced(6);
        let server = s.server_tasks();
        assert_eq!(server.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), ["a1", "b1"]);
        assert_eq!((server[0].2.as_str(), server[0].4), ("from v2", Some(9)), "the patch kept the title");
        converged(&mut s, &mut [&mut *old, &mut *new]);

        // Connected, each receives the other's commit as a delta (no pull of its own).
        for c in [&mut *old, &mut *new] {
            c.connect();
            c.pump_until("hello", |c| c.hello().is_some());
        }
        old.write_task("a3", "p1", "live from v2");
        old.synced(6);
        new.pump_until("v3 holds a3", |c| c.holds("a3"));
        new.write_task("b3", "p1", "live from v3");
        new.synced(6);
        old.pump_until("v2 holds b3", |c| c.holds("b3"));
        converged(&mut s, &mut [&mut *old, &mut *new]);

        // Presence (§8.6) crosses generations too.
        let (key, from_old, from_new) = ("project:p1", json!({"cursor": 1}), json!({"cursor": 2}));
        old.set_presence(key, Some(from_old.clone()));
        new.pump_until("v2's presence", |c| c.presence(key).iter().any(|p| p["actorId"] == "alice" && p["doc"] == from_old));
        new.set_presence(key, Some(from_new.clone()));
        old.pump_until("v3's presence", |c| c.presence(key).iter().any(|p| p["actorId"] == "bob" && p["doc"] == from_new));
    }
}

/// `r` = (p1, "base", not done, priority 3), written by the first client and held by all.
fn with_row_r(s: &mut Stage, clients: &mut [FleetClient]) -> i64 {
    clients[0].upsert(task_values("r", "p1", "base", false, Some(3)), None);
    for c in clients.iter_mut() {
        c.synced(6);
    }
    let base = clients[0].task("r").expect("r").version;
    assert_eq!(as_server_tasks(&clients[1].tasks()), s.server_tasks());
    base
}

mod same_column_conflict {
    use super::*;

    #[test]
    fn fleet_v3() {
        let (mut s, mut clients) =
            p1_clients("fleet-conflict", &[(Generation::V3, "ann"), (Generation::V3, "ben"), (Generation::V2, "old")]);
        let base = with_row_r(&mut s, &mut clients);
        let [ann, ben, old] = &mut clients[..] else { unreachable!() };
        ann.patch("r", values(&[("title", json!("ann's title"))]), Some(base)).expect("ann patches");
        assert_eq!(ann.synced(6).rejected, Vec::<String>::new());
        let ann_version = ann.task("r").expect("r").version;

        let cid = ben.patch("r", values(&[("title", json!("ben's title"))]), Some(base)).expect("ben patches");
        let report = ben.synced(6);
        assert_eq!((report.rejected.clone(), report.conflicts), (vec![cid.clone()], 1), "{report:?}");
        let conflicts = ben.conflicts();
        assert_eq!(conflicts.len(), 1, "{conflicts:?}");
        let c = &conflicts[0];
        assert_eq!((c.code.as_str(), c.row_id.as_str(), c.op_index), ("sync.version_conflict", "r", 0));
        assert_eq!(c.client_commit_id, cid);
        assert_eq!(c.conflict_columns, Some(vec!["title".to_owned()]), "exactly the column both wrote");
        assert_eq!(c.server_version, ann_version);
        assert_eq!(c.server_row["title"], "ann's title");

        old.synced(6);
        converged(&mut s, &mut [&mut *ann, &mut *ben, &mut *old]);
        assert_eq!(s.server_tasks()[0].2, "ann's title");
    }
}

mod different_columns_merge {
    use super::*;

    #[test]
    fn fleet_v3() {
        let (mut s, mut clients) =
            p1_clients("fleet-merge", &[(Generation::V3, "ann"), (Generation::V3, "ben"), (Generation::V2, "old")]);
        let base = with_row_r(&mut s, &mut clients);
        let [ann, ben, old] = &mut clients[..] else { unreachable!() };
        ann.patch("r", values(&[("title", json!("ann's title"))]), Some(base)).expect("ann patches");
        ann.synced(6);
        let cid = ben.patch("r", values(&[("done", json!(true))]), Some(base)).expect("ben patches");
        let report = ben.synced(6);
        assert!(report.applied.contains(&cid) && report.rejected.is_empty(), "{report:?}");
        assert!(ben.conflicts().is_empty());

        ann.synced(6);
        old.synced(6);
        let server = s.server_tasks();
        assert_eq!((server[0].2.as_str(), server[0].3, server[0].4), ("ann's title", true, Some(3)), "both edits");
        converged(&mut s, &mut [&mut *ann, &mut *ben, &mut *old]);
    }
}

mod partial_update {
    use super::*;

    #[test]
    fn fleet_v3() {
        let (mut s, mut clients) =
            p1_clients("fleet-partial", &[(Generation::V2, "old"), (Generation::V3, "new"), (Generation::V3, "wendy")]);
        let [old, new, wendy] = &mut clients[..] else { unreachable!() };
        old.upsert(task_values("r", "p1", "original", true, Some(7)), None);
        old.synced(6);
        wendy.synced(6);
        wendy.patch("r", values(&[("title", json!("patched"))]), None).expect("wendy patches");
        wendy.synced(6);
        old.synced(6);
        new.synced(6);
        let expected = task_values("r", "p1", "patched", true, Some(7));
        for c in [&mut *old, &mut *new, &mut *wendy] {
            let row = c.task("r").unwrap_or_else(|| panic!("{} holds r", c.name()));
            assert_eq!(row.values, expected, "{}: one column changed, the others intact", c.name());
        }
        converged(&mut s, &mut [&mut *old, &mut *new, &mut *wendy]);
    }
}
