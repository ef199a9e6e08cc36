//! Column-level conflicts (wire version 3; `crates/protocol/WIRE_V3.md`
//! §4.3, `syncular-authority` 0.49.2): a stale `baseVersion` conflicts only
//! when a column the payload carries moved past it, and the conflict names
//! those columns (`conflictColumns`); two writers editing different columns
//! from the same base both apply. A full-row (wire 2) push keeps SPEC
//! 0.15.48's row-level rule, and moves only the columns whose value it
//! changed — so a v3 edit is never lost to an old client's stale write.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::response::{OpResult, PushStatus};
    use syncular_protocol::row_codec::{decode_row, RowValue};

    use crate::tests::sync_support::*;
    use crate::tests::wire_v3::support::*;

    const P: &str = "v3-conflicts";

    #[pg_test]
    fn different_columns_from_one_base_both_apply_the_same_column_conflicts() {
        let epoch = seeded(P, "a");
        // A and B both hold version 1.
        let a = push3(P, "a", &epoch, vec![commit("a1", vec![upsert3(&sparse("t1", &[("title", s("by a"))]), Some(1))])]);
        assert_eq!(a[0].status, PushStatus::Applied, "{a:?}");
        let b = push3(P, "b", &epoch, vec![commit("b1", vec![upsert3(&sparse("t1", &[("n", Some(RowValue::Integer(5)))]), Some(1))])]);
        assert_eq!(b[0].status, PushStatus::Applied, "a stale base on an untouched column applies: {b:?}");
        let state = stored(P, "t1");
        assert_eq!((state.0, value(&state.1, "title"), value(&state.1, "n")), (3, s("by a"), Some(RowValue::Integer(5))));
        assert_eq!((version_of(&state, "title"), version_of(&state, "n"), version_of(&state, "done")), (2, 3, 1));
        // C, also at version 1, edits the title and the done flag: the title moved past its base.
        let c = push3(
            P,
            "c",
            &epoch,
            vec![commit("c1", vec![upsert3(&sparse("t1", &[("title", s("by c")), ("done", Some(RowValue::Boolean(true)))]), Some(1))])],
        );
        assert_eq!(c[0].status, PushStatus::Rejected);
        let (server_version, server_row, columns) = conflict(&c[0]);
        assert_eq!(server_version, 3);
        assert_eq!(marked(&columns), vec!["title".to_owned()], "exactly the moved present column");
        assert_eq!(columns.len(), tasks_layout().len().div_ceil(8), "one bit per column");
        assert_eq!(decode_row(&tasks_layout(), &server_row).unwrap(), state.1, "serverRow is the stored row");
        assert_eq!(stored(P, "t1").0, 3, "the conflicting commit changed nothing");
        // A base at the title's version applies.
        let c = push3(P, "c", &epoch, vec![commit("c2", vec![upsert3(&sparse("t1", &[("title", s("by c"))]), Some(2))])]);
        assert_eq!(c[0].status, PushStatus::Applied, "{c:?}");
    }

    #[pg_test]
    fn base_zero_on_an_existing_row_marks_every_present_comparable_column() {
        let epoch = seeded(P, "a");
        let row = sparse("t1", &[("project_id", s("p1")), ("title", s("x")), ("doc", None)]);
        let r = push3(P, "b", &epoch, vec![commit("z", vec![upsert3(&row, Some(0))])]);
        let (_, _, columns) = conflict(&r[0]);
        // The primary key and crdt columns never conflict; the scope column does.
        assert_eq!(marked(&columns), vec!["project_id".to_owned(), "title".to_owned()]);
        // A primary-key-only payload at base 0: a conflict with no column marked.
        let r = push3(P, "b", &epoch, vec![commit("z2", vec![upsert3(&sparse("t1", &[]), Some(0))])]);
        let (_, _, columns) = conflict(&r[0]);
        assert!(marked(&columns).is_empty() && columns.len() == 2, "{columns:?}");
    }

    #[pg_test]
    fn a_conflict_replays_with_its_columns() {
        let epoch = seeded(P, "a");
        push3(P, "a", &epoch, vec![commit("a1", vec![upsert3(&sparse("t1", &[("title", s("a"))]), Some(1))])]);
        let commits = || vec![commit("b1", vec![upsert3(&sparse("t1", &[("title", s("b"))]), Some(1))])];
        let first = push3(P, "b", &epoch, commits());
        let again = push3(P, "b", &epoch, commits());
        assert_eq!(first[0].results, again[0].results, "a redelivery replays the stored conflict");
        assert_eq!(marked(&conflict(&again[0]).2), vec!["title".to_owned()]);
        // The stored outcome carries the bitmap; a v2 replay of it drops the field (v2 frames have none).
        let v2 = push(P, "alice", "b", &epoch, commits(), Some(&allowed_p1_p2()));
        assert!(matches!(&v2[0].results[..], [OpResult::Conflict { .. }]), "{v2:?}");
    }

    #[pg_test]
    fn a_primary_key_only_update_does_not_make_every_column_new() {
        let epoch = seeded(P, "a");
        let r = push3(P, "a", &epoch, vec![commit("pk", vec![upsert3(&sparse("t1", &[]), None)])]);
        assert_eq!(r[0].status, PushStatus::Applied);
        let state = stored(P, "t1");
        assert_eq!((state.0, version_of(&state, "title")), (2, 1), "no column moved");
        // So a writer at base 1 editing the title is not in conflict (the reference authority
        // stores NULL here and would conflict on every column).
        let r = push3(P, "b", &epoch, vec![commit("b", vec![upsert3(&sparse("t1", &[("title", s("b"))]), Some(1))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
    }

    #[pg_test]
    fn full_row_pushes_keep_the_row_level_rule_and_move_changed_columns_only() {
        let epoch = seeded(P, "a");
        // A v3 client edits the title (version 2).
        push3(P, "a", &epoch, vec![commit("a1", vec![upsert3(&sparse("t1", &[("title", s("v3 edit"))]), Some(1))])]);
        // A v2 client that still holds version 1 pushes its whole row: row-level conflict, no loss.
        let stale = with(task("t1", "p1", "first", None), "n", Some(RowValue::Integer(1)));
        let r = push(P, "alice", "old", &epoch, vec![commit("o1", vec![upsert(&stale, Some(1))])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Rejected);
        assert!(matches!(&r[0].results[..], [OpResult::Conflict { server_version: 2, conflict_columns, .. }] if conflict_columns.is_empty()), "{r:?}");
        assert_eq!(value(&stored(P, "t1").1, "title"), s("v3 edit"));
        // At the current version it applies; only the column whose value changed moves.
        let current = with(task("t1", "p1", "v3 edit", None), "n", Some(RowValue::Integer(1)));
        let r = push(P, "alice", "old", &epoch, vec![commit("o2", vec![upsert(&current, Some(2))])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        let state = stored(P, "t1");
        assert_eq!((state.0, version_of(&state, "n"), version_of(&state, "title"), version_of(&state, "done")), (3, 3, 2, 1));
        // A v3 writer at version 2 editing the title is therefore not in conflict with the v2 write.
        let r = push3(P, "a", &epoch, vec![commit("a2", vec![upsert3(&sparse("t1", &[("title", s("again"))]), Some(2))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        // …but one editing n is.
        let r = push3(P, "a", &epoch, vec![commit("a3", vec![upsert3(&sparse("t1", &[("n", Some(RowValue::Integer(9)))]), Some(2))])]);
        assert_eq!(marked(&conflict(&r[0]).2), vec!["n".to_owned()]);
    }
}
