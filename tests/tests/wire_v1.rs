//! Wire version 1 (§1.5, §1.6, §9): a version-1 request on a partition that
//! does not require epochs is served, and the response is in version 1 (as
//! decoded by the reference codec); version-2 clients of the same partition
//! see the same log.

use ssp2::model::{Frame, PushStatus};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::transport::call_sync;
use syncular_integration_tests::wire::{
    commit, decode_response, delivered, pull_header, push_outcomes, subscription, upsert,
    RawSession, Task, v1_request,
};

#[test]
fn a_version_1_client_is_answered_in_version_1_and_shares_the_log() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("wire-v1");
    let allowed = allow_projects(&["p1"]);

    let bytes = v1_request(
        "v1-client",
        vec![
            commit(
                "v1-c1",
                vec![upsert(&Task::new("old", "p1", "from a v1 client"), None)],
            ),
            pull_header(0, 0, 0, 0b0011),
            subscription("s", "tasks", &[("project_id", &["p1"])], 0, None),
        ],
    );
    let response = call_sync(&mut admin, &partition, "vera", &bytes, Some(&allowed))
        .expect("v1 request served");
    let msg = decode_response(&response).expect("decodes");
    assert_eq!(
        msg.wire_version, 1,
        "answered in the request's wire version"
    );
    match msg.frames.first() {
        Some(Frame::RespHeader {
            log_epoch,
            reset_required,
            required_schema_version,
            ..
        }) => {
            assert_eq!(
                (log_epoch, reset_required),
                (&None, &None),
                "v1 RESP_HEADER ends after latestSchemaVersion"
            );
            assert_eq!(*required_schema_version, None);
        }
        other => panic!("expected RESP_HEADER, got {other:?}"),
    }
    let out = push_outcomes(&msg);
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(1)),
        "{out:?}"
    );
    let got = delivered(&msg).expect("rows decode");
    assert_eq!(got.commit_seqs, [1], "the v1 client pulls its own commit");
    assert_eq!(got.rows[0].title, "from a v1 client");

    // A v2 client on the same partition acquires the epoch and reads the same log.
    let mut v2 = RawSession::new(connect(), &partition, "walt", "v2-client", Some(allowed));
    v2.acquire_epoch().expect("epoch");
    let msg = v2
        .round(vec![
            pull_header(0, 0, 0, 0b0011),
            subscription("s", "tasks", &[("project_id", &["p1"])], 0, None),
        ])
        .expect("v2 pull");
    assert_eq!(msg.wire_version, 2);
    let got = delivered(&msg).expect("rows decode");
    assert_eq!(got.commit_seqs, [1]);
    assert_eq!(got.rows[0].id, "old");
}
