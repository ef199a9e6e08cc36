//! Wire-version-3 pushes (`crates/protocol/WIRE_V3.md` §4.3): sparse upserts
//! merge into the stored row, the full merged row is what is stored, logged
//! and served; a partial payload of an absent row, an unversioned re-insert
//! of a deleted row, a changed scope column and a `baseVersion` above the
//! stored version are refused as the 0.49.2 generation refuses them; a
//! malformed sparse payload rejects its commit with `sync.invalid_request`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::response::{PushStatus, ResponseFrame};
    use syncular_protocol::row_codec::{decode_row, RowValue};

    use crate::tests::support::int8;
    use crate::tests::sync_support::*;
    use crate::tests::wire_v3::support::*;

    const P: &str = "v3-sparse";

    #[pg_test]
    fn a_v3_request_is_answered_in_v3_and_recorded_as_such() {
        let epoch = seeded(P, "c1");
        let resp = sync(P, "alice", &request3("c1", Some(&epoch), None, vec![], Some(empty_pull())), Some(&allowed_p1_p2()));
        assert_eq!(resp.wire_version, 3);
        let header = resp.header.epoch.expect("a v3 header carries the epoch");
        assert_eq!((header.log_epoch.as_str(), header.reset_required), (epoch.as_str(), false));
        assert_eq!(int8(&format!("SELECT wire_version::bigint FROM syncular.sync_clients WHERE partition = '{P}' AND client_id = 'c1'")), Some(3));
        // The same partition still answers v2 in v2.
        let v2 = sync(P, "alice", &request(2, "c2", 1, Some(&epoch), vec![], Some(empty_pull())), Some(&allowed_p1_p2()));
        assert_eq!(v2.wire_version, 2);
    }

    #[pg_test]
    fn a_patch_changes_only_its_columns_and_logs_the_merged_row() {
        let epoch = seeded(P, "c1");
        let before = stored(P, "t1");
        assert_eq!(before.0, 1);
        assert!(before.2.is_none(), "an insert stores NULL column versions (all at the row version)");
        let r = push3(P, "c1", &epoch, vec![commit("k1", vec![upsert3(&sparse("t1", &[("n", Some(RowValue::Integer(7)))]), Some(1))])]);
        assert_eq!((r[0].status, r[0].commit_seq.is_some()), (PushStatus::Applied, true), "{r:?}");
        let after = stored(P, "t1");
        assert_eq!(after.0, 2);
        assert_eq!(value(&after.1, "n"), Some(RowValue::Integer(7)));
        for kept in ["project_id", "title", "done"] {
            assert_eq!(value(&after.1, kept), value(&before.1, kept), "{kept} keeps its stored value");
        }
        assert_eq!((version_of(&after, "n"), version_of(&after, "title"), version_of(&after, "done")), (2, 1, 1));
        // The typed projection column follows, and the log carries the whole merged row.
        assert_eq!(int8(&format!("SELECT n FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = 't1'")), Some(7));
        let logged = crate::tests::support::bytea(&format!(
            "SELECT payload FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = {} AND row_id = 't1'",
            r[0].commit_seq.unwrap()
        ));
        assert_eq!(decode_row(&tasks_layout(), &logged).unwrap(), after.1, "the log holds the full merged row");
        // A present NULL writes NULL.
        let r = push3(P, "c1", &epoch, vec![commit("k2", vec![upsert3(&sparse("t1", &[("title", None)]), None)])]);
        assert_eq!(r[0].status, PushStatus::Applied);
        let nulled = stored(P, "t1");
        assert_eq!((value(&nulled.1, "title"), value(&nulled.1, "n")), (None, Some(RowValue::Integer(7))));
    }

    #[pg_test]
    fn pulled_changes_of_a_patch_are_full_rows() {
        let epoch = seeded(P, "c1");
        push3(P, "c1", &epoch, vec![commit("k1", vec![upsert3(&sparse("t1", &[("title", s("second"))]), None)])]);
        let pull = syncular_protocol::request::PullRequest {
            header: crate::tests::sync_pull_support::header(0, 0, 0, syncular_protocol::constants::ACCEPT_INLINE_ROWS),
            subscriptions: vec![crate::tests::sync_pull_support::sub("s", "tasks", &[("project_id", &["p1"])], 1, None)],
        };
        let resp = sync(P, "alice", &request3("c2", Some(&epoch), None, vec![], Some(pull)), Some(&allowed_p1_p2()));
        let rows: Vec<_> = resp
            .frames
            .iter()
            .filter_map(|f| match f {
                ResponseFrame::Commit(c) => Some(c.changes.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(rows.len(), 1, "{:?}", resp.frames);
        let row = decode_row(&tasks_layout(), rows[0].row.as_deref().expect("an upsert carries its row")).expect("full row codec");
        assert_eq!((value(&row, "title"), value(&row, "project_id")), (s("second"), s("p1")));
    }

    #[pg_test]
    fn a_partial_payload_of_an_absent_row_is_row_missing() {
        let epoch = seeded(P, "c1");
        for (commit_id, row, base) in [
            ("m1", sparse("ghost", &[("title", s("x"))]), None),
            ("m2", sparse("ghost", &[("title", s("x"))]), Some(0)),
            ("m3", sparse("ghost", &[("project_id", s("p1")), ("title", s("x"))]), Some(3)),
        ] {
            let r = push3(P, "c1", &epoch, vec![commit(commit_id, vec![upsert3(&row, base)])]);
            assert_eq!(rejection(&r[0]).1, "sync.row_missing", "{commit_id}: {r:?}");
        }
        // Without scope values a versioned write of an absent row cannot be authorized.
        let r = push3(P, "c1", &epoch, vec![commit("m4", vec![upsert3(&sparse("ghost", &[("title", s("x"))]), Some(3))])]);
        assert_eq!(rejection(&r[0]).1, "sync.forbidden");
        // A scope value outside the allowed map is forbidden before absence is disclosed.
        let r = push3(P, "c1", &epoch, vec![commit("m5", vec![upsert3(&sparse("ghost", &[("project_id", s("p9"))]), Some(3))])]);
        assert_eq!(rejection(&r[0]).1, "sync.forbidden");
        assert_eq!(int8(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = 'ghost'")), Some(0));
    }

    #[pg_test]
    fn an_unversioned_upsert_does_not_recreate_a_deleted_row() {
        let epoch = seeded(P, "c1");
        let r = push3(P, "c1", &epoch, vec![commit("d1", vec![delete("t1")])]);
        assert_eq!(r[0].status, PushStatus::Applied);
        let r = push3(P, "c1", &epoch, vec![commit("u1", vec![upsert3(&full("t1", "p1", "again"), None)])]);
        assert_eq!(rejection(&r[0]).1, "sync.row_deleted", "{r:?}");
        // baseVersion 0 is a deliberate re-create: applied, the tombstone cleared.
        let r = push3(P, "c1", &epoch, vec![commit("u2", vec![upsert3(&full("t1", "p1", "again"), Some(0))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.sync_tombstones WHERE partition = '{P}' AND row_id = 't1'")), Some(0));
        // Inside one request: a delete, then an unversioned upsert in a later commit.
        let r = push3(
            P,
            "c1",
            &epoch,
            vec![commit("d2", vec![delete("t1")]), commit("u3", vec![upsert3(&full("t1", "p1", "third"), None)])],
        );
        assert_eq!((r[0].status, rejection(&r[1]).1.as_str()), (PushStatus::Applied, "sync.row_deleted"), "{r:?}");
        // A v2 (full-row) push keeps SPEC 0.15.48's rule: it recreates the row.
        let v2 = push(P, "alice", "c2", &epoch, vec![commit("v2", vec![upsert(&task("t1", "p1", "v2", None), None)])], Some(&allowed_p1_p2()));
        assert_eq!(v2[0].status, PushStatus::Applied);
    }

    #[pg_test]
    fn scope_columns_are_immutable_and_base_above_the_row_is_invalid() {
        let epoch = seeded(P, "c1");
        let r = push3(P, "c1", &epoch, vec![commit("s1", vec![upsert3(&sparse("t1", &[("project_id", s("p2"))]), None)])]);
        let (_, code, _) = rejection(&r[0]);
        assert_eq!(code, "sync.invalid_request");
        assert!(format!("{r:?}").contains("immutable"), "{r:?}");
        let r = push3(P, "c1", &epoch, vec![commit("s2", vec![upsert3(&sparse("t1", &[("project_id", s("p1")), ("n", Some(RowValue::Integer(1)))]), None)])]);
        assert_eq!(r[0].status, PushStatus::Applied, "an equal scope value is accepted: {r:?}");
        let r = push3(P, "c1", &epoch, vec![commit("s3", vec![upsert3(&sparse("t1", &[("n", Some(RowValue::Integer(2)))]), Some(9))])]);
        assert_eq!(rejection(&r[0]).1, "sync.invalid_request");
        assert!(format!("{r:?}").contains("exceeds the stored server version"), "{r:?}");
        assert_eq!(stored(P, "t1").0, 2, "nothing of the refused commits applied");
    }

    #[pg_test]
    fn malformed_sparse_payloads_reject_their_commit_only() {
        let epoch = seeded(P, "c1");
        let good = upsert3(&full("t2", "p1", "ok"), None);
        let layout = tasks_layout();
        let mut no_pk = syncular_protocol::sparse_row::encode_sparse_row(&layout, 0, &full("t3", "p1", "x")).unwrap();
        no_pk[0] &= !1; // clear the primary key's presence bit
        let mut padding = syncular_protocol::sparse_row::encode_sparse_row(&layout, 0, &full("t3", "p1", "x")).unwrap();
        padding[1] |= 0x80; // presence bit 15: past the 12 columns
        let mut trailing = syncular_protocol::sparse_row::encode_sparse_row(&layout, 0, &full("t3", "p1", "x")).unwrap();
        trailing.push(0);
        for (name, bytes, fragment) in [
            ("no-pk", no_pk, "primary-key"),
            ("padding", padding, "padding"),
            ("trailing", trailing, "trailing"),
            ("empty", vec![], "presence bitmap"),
        ] {
            let r = push3(P, "c1", &epoch, vec![commit(name, vec![raw_upsert("t3", bytes)]), commit(&format!("{name}-ok"), vec![good.clone()])]);
            let (_, code, _) = rejection(&r[0]);
            assert_eq!(code, "sync.invalid_request", "{name}");
            assert!(format!("{:?}", r[0]).contains(fragment), "{name}: {r:?}");
            assert_eq!(r[1].status, PushStatus::Applied, "{name}: the next commit of the request still applies");
        }
        assert_eq!(int8(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = 't3'")), Some(0));
    }

    #[pg_test]
    fn crdt_columns_merge_only_when_present() {
        let epoch = seeded(P, "c1");
        let doc = syncular_crdt::text::insert(&[], 7, "t", 0, "hello").expect("a yjs update");
        let r = push3(P, "c1", &epoch, vec![commit("c1", vec![upsert3(&sparse("t1", &[("doc", Some(RowValue::Crdt(doc.clone())))]), None)])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        let with_doc = stored(P, "t1");
        let Some(RowValue::Crdt(merged)) = value(&with_doc.1, "doc") else { panic!("doc stored") };
        assert_eq!(syncular_crdt::text::read(&merged, "t").unwrap(), "hello");
        // Present again: merged with the stored document (§5.10.3), not replaced.
        let more = syncular_crdt::text::insert(&merged, 8, "t", 5, " world").expect("a yjs update");
        push3(P, "c1", &epoch, vec![commit("c1b", vec![upsert3(&sparse("t1", &[("doc", Some(RowValue::Crdt(more)))]), None)])]);
        let with_doc = stored(P, "t1");
        let Some(RowValue::Crdt(merged)) = value(&with_doc.1, "doc") else { panic!("doc stored") };
        assert_eq!(syncular_crdt::text::read(&merged, "t").unwrap(), "hello world");
        // A patch of another column keeps the stored document as it is.
        push3(P, "c1", &epoch, vec![commit("c2", vec![upsert3(&sparse("t1", &[("title", s("x"))]), None)])]);
        assert_eq!(value(&stored(P, "t1").1, "doc"), value(&with_doc.1, "doc"));
    }
}
