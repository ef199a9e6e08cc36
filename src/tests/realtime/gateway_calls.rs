//! The rest of the gateway's SQL surface (SPEC §8.7, §10.1): the DETAIL
//! JSON every error carries, `syncular.error_response`, the socket round's
//! `connection_client_id`, `syncular.refresh_scopes`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::{json, Value};
    use syncular_protocol::response::{decode_response, ResponseFrame};

    use crate::store::spi::subtransaction::{self, SubtransactionError};
    use crate::tests::realtime::support::*;
    use crate::tests::support::{expect_error, int8, try_run};
    use crate::tests::sync_pull_support::*;

    fn error_response(partition: &str, wire: i32, error: Value) -> Result<Vec<u8>, SubtransactionError> {
        let partition = partition.to_owned();
        subtransaction::run(move || {
            Spi::get_one_with_args::<Vec<u8>>(
                "SELECT syncular.error_response($1, $2, $3)",
                &[partition.as_str().into(), wire.into(), JsonB(error).into()],
            )
            .unwrap_or_else(|e| panic!("SPI: {e}"))
            .expect("bytes")
        })
    }

    #[pg_test]
    fn every_error_carries_its_10_1_object_in_detail() {
        setup();
        let c = Client::new("rt-e", "alice", "ca");
        let err = c.sync_bytes(b"not ssp2".to_vec()).unwrap_err();
        let detail = detail_object(&err);
        assert_eq!(detail["code"], json!("sync.invalid_request"));
        assert_eq!(detail["category"], json!("invalid-request"));
        assert_eq!(detail["retryable"], json!(false));
        assert_eq!(detail["recommendedAction"], json!("fixRequest"));
        assert_eq!(format!("sync.invalid_request: {}", detail["message"].as_str().unwrap()), err.message);
        // A host code carries the fixed host metadata.
        let err = subtransaction::run(|| Spi::run("SELECT syncular.sync(NULL, 'a', '\\x00'::bytea)").unwrap()).unwrap_err();
        assert_eq!(
            detail_object(&err),
            json!({"code": "syncular.invalid_argument", "message": "argument partition must not be NULL",
                   "category": "invalid-request", "retryable": false, "recommendedAction": "fixRequest"})
        );
        let err = try_run("SELECT syncular.current_schema_version() / 0").unwrap_err();
        assert_eq!(err.detail, None, "Postgres' own errors carry no §10.1 DETAIL");
    }

    #[pg_test]
    fn error_response_is_the_socket_rounds_failure_stream() {
        setup();
        let epoch = open_ok("rt-f", "alice", "ca", None)["logEpoch"].as_str().unwrap().to_owned();
        let object = json!({"code": "sync.invalid_client_id", "message": "socket round clientId differs",
                            "category": "invalid-request", "retryable": false, "recommendedAction": "resetClientId",
                            "details": {"expected": "ca"}});
        let v2 = decode_response(&error_response("rt-f", 2, object.clone()).unwrap()).unwrap();
        let header_epoch = v2.header.epoch.expect("v2 header");
        assert_eq!((header_epoch.log_epoch, header_epoch.reset_required), (epoch, false));
        let [ResponseFrame::Error(frame)] = v2.frames.as_slice() else { panic!("one ERROR frame: {:?}", v2.frames) };
        assert_eq!(syncular_protocol::error_json::error_object(frame), object, "the frame carries the object verbatim");
        let v1 = decode_response(&error_response("rt-f", 1, object.clone()).unwrap()).unwrap();
        assert_eq!((v1.wire_version, v1.header.epoch.is_none(), v1.frames.len()), (1, true, 1));
        let unknown = decode_response(&error_response("rt-unknown", 2, object.clone()).unwrap()).unwrap();
        assert_eq!(unknown.header.epoch.unwrap().log_epoch, "", "no epoch for a partition never seen");
        // Wire version 3 (syncular-client 0.49): the v2 header layout, answered in 3.
        let v3 = decode_response(&error_response("rt-f", 3, object.clone()).unwrap()).unwrap();
        assert_eq!((v3.wire_version, v3.header.epoch.is_some(), v3.frames.len()), (3, true, 1));
        expect_error(error_response("rt-f", 4, object.clone()), "22023", "syncular.invalid_argument", "wire_version 4");
        expect_error(error_response("rt-f", 0, object.clone()), "22023", "syncular.invalid_argument", "wire_version 0");
        let mut bad = object;
        bad["category"] = json!("oops");
        expect_error(error_response("rt-f", 2, bad), "22023", "syncular.invalid_argument", "category");
    }

    #[pg_test]
    fn a_socket_round_must_use_the_connections_client_id() {
        setup();
        let mut c = Client::new("rt-c", "alice", "ca");
        let bytes = c.request(vec![], Some(syncular_protocol::request::PullRequest { header: header(0, 0, 0, ACCEPT_ROWS), subscriptions: vec![] }));
        let before = int8("SELECT count(*) FROM syncular.sync_clients WHERE partition = 'rt-c'");
        for (function, expected) in [("sync", "other"), ("push", "other"), ("pull", "other")] {
            let b = bytes.clone();
            let sql = format!("SELECT syncular.{function}('rt-c', 'alice', $1, connection_client_id => '{expected}')");
            let r = subtransaction::run(move || Spi::get_one_with_args::<Vec<u8>>(&sql, &[b.into()]).unwrap());
            expect_error(r, "22023", "sync.invalid_client_id", "realtime connection's clientId");
        }
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_clients WHERE partition = 'rt-c'"), before, "nothing written");
        let ok = subtransaction::run(move || {
            Spi::get_one_with_args::<Vec<u8>>("SELECT syncular.sync('rt-c', 'alice', $1, NULL, 'ca')", &[bytes.into()]).unwrap()
        });
        assert!(ok.is_ok(), "the connection's own clientId is served: {ok:?}");
    }

    #[pg_test]
    fn refresh_scopes_validates_and_names_its_payload() {
        setup();
        crate::tests::support::run("SELECT syncular.refresh_scopes('tenant-1', 'alice')");
        crate::tests::support::run("SELECT syncular.refresh_scopes('tenant-1')");
        expect_error(try_run("SELECT syncular.refresh_scopes('', 'alice')"), "22023", "syncular.invalid_argument", "partition");
        expect_error(try_run("SELECT syncular.refresh_scopes('t', '')"), "22023", "syncular.invalid_argument", "actor_id");
        expect_error(
            try_run(&format!("SELECT syncular.refresh_scopes('{}')", "p".repeat(5000))),
            "22023",
            "syncular.invalid_argument",
            "at most 512 bytes",
        );
        let key = crate::tests::support::bytea("SELECT syncular.notification_key()");
        assert_eq!(key.len(), 32, "a 32-byte key");
        assert_eq!(crate::tests::support::bytea("SELECT syncular.notification_key()"), key, "stable");
        let actor = crate::tests::support::text("SELECT syncular.realtime_scopes_payload('tenant-1', 'alice')").unwrap();
        assert!(actor.starts_with("dGVuYW50LTE:YWxpY2U:"), "{actor}");
        assert_eq!(
            syncular_protocol::notification::parse_scopes_payload(&key, &actor),
            Some(("tenant-1".to_owned(), Some("alice".to_owned())))
        );
        let all = crate::tests::support::text("SELECT syncular.realtime_scopes_payload('tenant-1')").unwrap();
        assert_eq!(syncular_protocol::notification::parse_scopes_payload(&key, &all), Some(("tenant-1".to_owned(), None)));
        assert_eq!(syncular_protocol::notification::parse_scopes_payload(b"forger", &all), None);
    }
}
