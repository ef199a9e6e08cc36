//! Bad input (issue 4, §1.7, §4.2, §6.1, §10): random bytes, truncated
//! requests, unknown tables, corrupt row payloads, request-level violations
//! and maximal-clamp pulls. Each gives its `sync.*` error (message prefix,
//! non-internal SQLSTATE) or a `rejected` result; the backend stays alive
//! (the next query on the same connection works) and nothing else changes
//! (partition contents identical before and after).

use std::collections::BTreeMap;

use ssp2::model::{Frame, Op, PushStatus};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, fingerprint, partition_name, register_schema, Coverage,
};
use syncular_integration_tests::wire::{
    commit, decode_response, delivered, encode_task, pull_header, request, subscription, upsert,
    RawSession, Task,
};

/// Deterministic xorshift64* generator (reproducible failures).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 24) as u8).collect()
    }
}

fn session(label: &str, client: &str) -> RawSession {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name(label);
    let mut s = RawSession::new(
        connect(),
        &partition,
        "alice",
        client,
        Some(allow_projects(&["p1", "p2"])),
    );
    s.acquire_epoch().expect("acquire logEpoch");
    s
}

fn seed(s: &mut RawSession) {
    let out = s
        .push(vec![
            commit("seed-1", vec![upsert(&Task::new("a", "p1", "alpha"), None)]),
            commit("seed-2", vec![upsert(&Task::new("b", "p2", "beta"), None)]),
        ])
        .expect("seed");
    assert!(
        out.iter().all(|o| o.status == PushStatus::Applied),
        "{out:?}"
    );
}

/// Asserts the request fails with `code` (message prefix), a non-internal
/// SQLSTATE, and that the same connection still answers a query.
fn expect_request_error(s: &mut RawSession, bytes: &[u8], code: &str, what: &str) {
    let err = match s.send_bytes(bytes) {
        Ok(response) => panic!(
            "{what}: expected {code}, got a response {:?}",
            decode_response(&response)
        ),
        Err(e) => e,
    };
    let db = err
        .as_db_error()
        .unwrap_or_else(|| panic!("{what}: not a server error: {err}"));
    assert!(
        db.message().starts_with(&format!("{code}: ")),
        "{what}: message {:?} must start with {code:?}",
        db.message()
    );
    assert_ne!(
        db.code().code(),
        "XX000",
        "{what}: a {code} is not an internal error ({})",
        db.message()
    );
    let one: i32 = s
        .conn
        .query_one("SELECT 1", &[])
        .expect("backend alive")
        .get(0);
    assert_eq!(one, 1, "{what}: the backend answers the next query");
}

fn valid_push_and_pull(s: &RawSession) -> Vec<u8> {
    s.encode(vec![
        commit(
            "valid-1",
            vec![upsert(&Task::new("v", "p1", "valid"), None)],
        ),
        pull_header(0, 0, 0, 0b0011),
        subscription("sub-1", "tasks", &[("project_id", &["p1"])], 0, None),
    ])
}

#[test]
fn random_bytes_and_truncated_requests_are_invalid_requests_and_change_nothing() {
    let mut s = session("bad-random", "random-client");
    seed(&mut s);
    let before = fingerprint(&mut s.conn, &s.partition, Coverage::Everything).expect("fingerprint");

    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let header: &[u8] = &[b'S', b'S', b'P', b'2', 2, 0, 1, 0];
    for case in 0..48 {
        let len = (rng.next() % 300) as usize;
        let mut bytes = rng.bytes(len);
        if case % 2 == 1 {
            // A valid envelope header followed by random frames.
            let mut framed = header.to_vec();
            framed.append(&mut bytes);
            bytes = framed;
        }
        expect_request_error(
            &mut s,
            &bytes,
            "sync.invalid_request",
            &format!("random case {case} ({} bytes)", bytes.len()),
        );
    }
    // Wrong message kind, unknown wire version, non-zero flags, empty body.
    let valid = valid_push_and_pull(&s);
    for (what, patch) in [
        ("response kind", (6usize, 2u8)),
        ("wire version 9", (4, 9)),
        ("flags", (7, 1)),
    ] {
        let mut bytes = valid.clone();
        bytes[patch.0] = patch.1;
        expect_request_error(&mut s, &bytes, "sync.invalid_request", what);
    }
    expect_request_error(&mut s, &[], "sync.invalid_request", "empty body");

    // Every strict prefix of a valid request is truncated (no END frame).
    for cut in 0..valid.len() {
        expect_request_error(
            &mut s,
            &valid[..cut],
            "sync.invalid_request",
            &format!("truncated at {cut}/{}", valid.len()),
        );
    }
    // Bytes after END.
    let mut trailing = valid.clone();
    trailing.push(0);
    expect_request_error(
        &mut s,
        &trailing,
        "sync.invalid_request",
        "trailing byte after END",
    );
    // A request without push or pull (§1.5 no-content rule).
    let empty = request(&s.client_id, s.log_epoch.as_deref(), vec![]);
    expect_request_error(&mut s, &empty, "sync.invalid_request", "no-content request");

    let after = fingerprint(&mut s.conn, &s.partition, Coverage::Everything).expect("fingerprint");
    assert_eq!(before, after, "failed requests change nothing at all");
    // And the untouched valid request is still served afterwards.
    let response = s.send_bytes(&valid).expect("the valid request is served");
    let msg = decode_response(&response).expect("decodes");
    assert!(
        matches!(
            msg.frames.get(1),
            Some(Frame::PushResult {
                status: PushStatus::Applied,
                ..
            })
        ),
        "{msg:?}"
    );
}

#[test]
fn request_level_violations_fail_the_whole_request_before_any_push() {
    let mut s = session("bad-request-level", "rl-client");
    seed(&mut s);
    let before = fingerprint(&mut s.conn, &s.partition, Coverage::Everything).expect("fingerprint");
    let push = || {
        commit(
            "would-apply",
            vec![upsert(&Task::new("w", "p1", "must not land"), None)],
        )
    };

    let cases: Vec<(&str, &str, Vec<Frame>)> = vec![
        (
            "subscription on an unknown table",
            "sync.unknown_table",
            vec![
                push(),
                pull_header(0, 0, 0, 0b0011),
                subscription("s", "no_such_table", &[("project_id", &["p1"])], 0, None),
            ],
        ),
        (
            "duplicate subscription ids",
            "sync.invalid_subscription",
            vec![
                push(),
                pull_header(0, 0, 0, 0b0011),
                subscription("dup", "tasks", &[("project_id", &["p1"])], 0, None),
                subscription("dup", "tasks", &[("project_id", &["p2"])], 0, None),
            ],
        ),
        (
            "requested '*'",
            "sync.invalid_subscription",
            vec![
                push(),
                pull_header(0, 0, 0, 0b0011),
                subscription("s", "tasks", &[("project_id", &["*"])], 0, None),
            ],
        ),
        (
            "undeclared requested key",
            "sync.invalid_subscription",
            vec![
                push(),
                pull_header(0, 0, 0, 0b0011),
                subscription("s", "tasks", &[("team_id", &["t1"])], 0, None),
            ],
        ),
        (
            "accept without rows bits",
            "sync.invalid_request",
            vec![
                push(),
                pull_header(0, 0, 0, 0b0100),
                subscription("s", "tasks", &[("project_id", &["p1"])], 0, None),
            ],
        ),
        (
            "more operations than the cap",
            "sync.too_many_operations",
            vec![commit(
                "huge",
                (0..501)
                    .map(|i| upsert(&Task::new(format!("h{i}"), "p1", "x"), None))
                    .collect(),
            )],
        ),
    ];
    for (what, code, frames) in cases {
        let bytes = s.encode(frames);
        expect_request_error(&mut s, &bytes, code, what);
    }
    // An upsert without a payload breaks a §1.7 presence tie: a decode error.
    let mut no_payload = upsert(&Task::new("w", "p1", "x"), None);
    no_payload.payload = None;
    let bytes = s.encode(vec![push(), commit("no-payload", vec![no_payload])]);
    expect_request_error(
        &mut s,
        &bytes,
        "sync.invalid_request",
        "upsert without payload",
    );
    // A clientId in the reserved server-command namespace, and one bound to another actor.
    let reserved = request(
        "[\"remote-command\",\"x\"]",
        s.log_epoch.as_deref(),
        vec![push()],
    );
    expect_request_error(
        &mut s,
        &reserved,
        "sync.invalid_client_id",
        "reserved clientId",
    );
    let stolen = s.encode(vec![push()]);
    let actor = std::mem::replace(&mut s.actor_id, "mallory".to_owned());
    expect_request_error(
        &mut s,
        &stolen,
        "sync.invalid_client_id",
        "clientId bound to another actor",
    );
    s.actor_id = actor;

    let after = fingerprint(&mut s.conn, &s.partition, Coverage::Everything).expect("fingerprint");
    assert_eq!(
        before, after,
        "request-level failures change nothing at all"
    );
}

#[test]
fn unknown_tables_and_corrupt_payloads_reject_only_their_commit() {
    let mut s = session("bad-commit-level", "cl-client");
    seed(&mut s);
    let before = fingerprint(&mut s.conn, &s.partition, Coverage::LogAndData).expect("fingerprint");

    let good = encode_task(&Task::new("n", "p1", "new row"));
    let with_op = |table: &str, row_id: &str, payload: Option<Vec<u8>>| {
        let mut op = upsert(&Task::new(row_id, "p1", "x"), None);
        op.table = table.to_owned();
        op.payload = payload;
        op
    };
    let mut null_pk = good.clone();
    null_pk[0] |= 0b0000_0001; // null bit on the non-null primary key
    let mut padding = good.clone();
    padding[0] |= 0b1000_0000; // a set padding bit (5 columns, 8-bit bitmap)
    let mut trailing = good.clone();
    trailing.push(0);
    let cases: Vec<(&str, &str, ssp2::model::Operation)> = vec![
        (
            "operation on an unknown table",
            "sync.unknown_table",
            with_op("no_such_table", "n", Some(good.clone())),
        ),
        (
            "garbage payload",
            "sync.invalid_request",
            with_op("tasks", "n", Some(vec![0xde, 0xad, 0xbe, 0xef])),
        ),
        (
            "truncated payload",
            "sync.invalid_request",
            with_op("tasks", "n", Some(good[..good.len() - 1].to_vec())),
        ),
        (
            "payload with a trailing byte",
            "sync.invalid_request",
            with_op("tasks", "n", Some(trailing)),
        ),
        (
            "null bit on a non-null column",
            "sync.invalid_request",
            with_op("tasks", "n", Some(null_pk)),
        ),
        (
            "set padding bit",
            "sync.invalid_request",
            with_op("tasks", "n", Some(padding)),
        ),
        (
            "primary key differs from rowId",
            "sync.invalid_request",
            with_op("tasks", "other-id", Some(good.clone())),
        ),
    ];
    let mut commits = Vec::new();
    let mut expected = Vec::new();
    for (i, (what, code, op)) in cases.into_iter().enumerate() {
        commits.push(commit(format!("bad-{i}"), vec![op]));
        expected.push((what, code));
    }
    let frames = commits.clone();
    let out = s.push(frames).expect("the request itself is served");
    for (o, (what, code)) in out.iter().zip(&expected) {
        assert_eq!(
            o.status,
            PushStatus::Rejected,
            "{what}: rejected, got {o:?}"
        );
        assert_eq!(
            o.commit_seq, None,
            "{what}: a rejected commit has no commitSeq"
        );
        assert_eq!(o.error_codes(), [code.to_string()], "{what}: {o:?}");
    }
    let one: i32 = s
        .conn
        .query_one("SELECT 1", &[])
        .expect("backend alive")
        .get(0);
    assert_eq!(one, 1);
    let after = fingerprint(&mut s.conn, &s.partition, Coverage::LogAndData).expect("fingerprint");
    assert_eq!(
        before, after,
        "rejected commits leave no row, change or log entry"
    );

    // A replay of a rejected commit returns the stored rejection unchanged.
    let replay = s.push(commits).expect("replay");
    assert_eq!(replay, out, "rejections replay byte-equivalent");
    let again = fingerprint(&mut s.conn, &s.partition, Coverage::LogAndData).expect("fingerprint");
    assert_eq!(before, again);
}

/// The configured pull budget in bytes (`syncular.response_budget_bytes`).
fn response_budget(s: &mut RawSession) -> usize {
    let row = s
        .conn
        .query_one(
            "SELECT current_setting('syncular.response_budget_bytes', true)",
            &[],
        )
        .expect("read the budget setting");
    let raw: Option<String> = row.get(0);
    raw.and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(4 * 1024 * 1024)
}

#[test]
fn maximal_clamp_pulls_stay_within_the_byte_budget_and_page_to_completion() {
    const ROWS: usize = 1200;
    const PER_COMMIT: usize = 400;
    const TITLE_BYTES: usize = 8 * 1024;
    let mut s = session("bad-max-clamp", "clamp-client");
    let budget = response_budget(&mut s);
    for c in 0..ROWS / PER_COMMIT {
        let ops = (0..PER_COMMIT)
            .map(|i| {
                let n = c * PER_COMMIT + i;
                let title = format!("{n:08}").repeat(TITLE_BYTES / 8);
                upsert(&Task::new(format!("row-{n:05}"), "p1", title), None)
            })
            .collect();
        let out = s
            .push(vec![commit(format!("load-{c}"), ops)])
            .expect("load");
        assert_eq!(out[0].status, PushStatus::Applied, "{:?}", out[0]);
    }
    let commits = (ROWS / PER_COMMIT) as i64;
    let data = ROWS * TITLE_BYTES;
    assert!(
        data > budget,
        "the data ({data} B) must exceed the budget ({budget} B) for this test to bite"
    );
    let before = fingerprint(&mut s.conn, &s.partition, Coverage::LogAndData).expect("fingerprint");
    let row_bytes = encode_task(&Task::new("row-00000", "p1", "x".repeat(TITLE_BYTES))).len();
    let slack = 64 * 1024;

    // Bootstrap at the maximal clamps, paged by resume tokens until done.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut token: Option<String> = None;
    let mut cursor = -1i64;
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 200, "bootstrap did not finish in 200 rounds");
        let bytes = s.encode(vec![
            pull_header(i32::MAX, i32::MAX, i32::MAX, 0b0001),
            subscription(
                "boot",
                "tasks",
                &[("project_id", &["p1"])],
                cursor,
                token.clone(),
            ),
        ]);
        let response = s.send_bytes(&bytes).expect("maximal-clamp bootstrap pull");
        assert!(
            response.len() <= budget + row_bytes + slack,
            "round {rounds}: response of {} B exceeds budget {budget} B + one row {row_bytes} B",
            response.len()
        );
        let msg = decode_response(&response).expect("decodes");
        for t in delivered(&msg).expect("rows decode").rows {
            *seen.entry(t.id).or_default() += 1;
        }
        let end = msg
            .frames
            .iter()
            .find_map(|f| match f {
                Frame::SubEnd {
                    next_cursor,
                    bootstrap_state,
                } => Some((*next_cursor, bootstrap_state.clone())),
                _ => None,
            })
            .expect("SUB_END");
        assert_eq!(
            end.0, commits,
            "every bootstrap response sets nextCursor = asOfCommitSeq (§4.7)"
        );
        cursor = end.0;
        match end.1 {
            Some(state) => token = Some(state.0),
            None => break,
        }
    }
    assert!(
        rounds > 1,
        "a {data} B bootstrap cannot fit one {budget} B response"
    );
    assert_eq!(seen.len(), ROWS, "every row delivered");
    assert!(seen.values().all(|n| *n == 1), "no row delivered twice");

    // Incremental from cursor 0 at the maximal clamp: commits whole, budgeted.
    let commit_bytes = PER_COMMIT * (row_bytes + 64);
    let mut cursor = 0i64;
    let mut seqs = Vec::new();
    let mut rounds = 0;
    while cursor < commits {
        rounds += 1;
        assert!(rounds <= 20, "incremental pull did not reach the head");
        let bytes = s.encode(vec![
            pull_header(i32::MAX, i32::MAX, i32::MAX, 0b0011),
            subscription("inc", "tasks", &[("project_id", &["p1"])], cursor, None),
        ]);
        let response = s
            .send_bytes(&bytes)
            .expect("maximal-clamp incremental pull");
        assert!(
            response.len() <= budget + commit_bytes + slack,
            "incremental response of {} B exceeds budget + one commit",
            response.len()
        );
        let msg = decode_response(&response).expect("decodes");
        let got = delivered(&msg).expect("rows decode");
        assert!(!got.commit_seqs.is_empty(), "each round makes progress");
        for frame in &msg.frames {
            if let Frame::Commit { changes, .. } = frame {
                assert_eq!(changes.len(), PER_COMMIT, "a commit is never split");
                assert!(changes.iter().all(|c| c.op == Op::Upsert));
            }
        }
        seqs.extend(got.commit_seqs);
        cursor = msg
            .frames
            .iter()
            .find_map(|f| match f {
                Frame::SubEnd { next_cursor, .. } => Some(*next_cursor),
                _ => None,
            })
            .expect("SUB_END");
    }
    assert_eq!(
        seqs,
        (1..=commits).collect::<Vec<_>>(),
        "commits 1..{commits} each exactly once"
    );

    // Many fresh bootstraps in one request at the maximal clamps: the budget
    // bounds the whole response (each subscription adds at most one row and
    // its framing once the budget is spent).
    const SUBS: usize = 24;
    let ids: Vec<String> = (0..SUBS).map(|i| format!("many-{i}")).collect();
    let mut frames = vec![pull_header(i32::MAX, i32::MAX, i32::MAX, 0b0001)];
    for id in &ids {
        frames.push(subscription(
            id,
            "tasks",
            &[("project_id", &["p1"])],
            -1,
            None,
        ));
    }
    let response = s
        .send_bytes(&s.encode(frames))
        .expect("many-subscription pull");
    assert!(
        response.len() <= budget + SUBS * (row_bytes + 1024) + slack,
        "{SUBS} bootstraps built a {} B response (budget {budget} B)",
        response.len()
    );
    let msg = decode_response(&response).expect("decodes");
    let ends = msg
        .frames
        .iter()
        .filter(|f| matches!(f, Frame::SubEnd { .. }))
        .count();
    assert_eq!(ends, SUBS, "every subscription is answered, in order");

    // Negative limits clamp to 1 (silently): one row per page, still valid.
    let bytes = s.encode(vec![
        pull_header(i32::MIN, i32::MIN, i32::MIN, 0b0011),
        subscription("tiny", "tasks", &[("project_id", &["p1"])], -1, None),
    ]);
    let msg =
        decode_response(&s.send_bytes(&bytes).expect("negative-clamp pull")).expect("decodes");
    assert_eq!(
        delivered(&msg).expect("rows").rows.len(),
        1,
        "limitSnapshotRows clamps to 1, pages to 1"
    );

    let after = fingerprint(&mut s.conn, &s.partition, Coverage::LogAndData).expect("fingerprint");
    assert_eq!(before, after, "pulls change no data");
}

#[test]
fn nul_characters_in_identifiers_are_refused_with_a_sync_code() {
    // SSP2 strings may carry U+0000; Postgres text and jsonb cannot. Every
    // such identifier must be refused with an SSP2 code — never truncated
    // (two ids colliding) and never a raw Postgres error.
    let mut s = session("bad-nul", "nul-client");
    seed(&mut s);
    let before = fingerprint(&mut s.conn, &s.partition, Coverage::Everything).expect("fingerprint");
    let ok_pull = || pull_header(0, 0, 0, 0b0011);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "clientId",
            request(
                "nul-client\u{0}x",
                s.log_epoch.as_deref(),
                vec![commit("n1", vec![upsert(&Task::new("n", "p1", "x"), None)])],
            ),
        ),
        (
            "clientCommitId",
            s.encode(vec![commit(
                "seed-1\u{0}other",
                vec![upsert(&Task::new("n", "p1", "x"), None)],
            )]),
        ),
        (
            "subscription id",
            s.encode(vec![
                ok_pull(),
                subscription("s\u{0}x", "tasks", &[("project_id", &["p1"])], 0, None),
            ]),
        ),
        (
            "requested scope value",
            s.encode(vec![
                ok_pull(),
                subscription("s", "tasks", &[("project_id", &["p1\u{0}x"])], 0, None),
            ]),
        ),
    ];
    for (what, bytes) in cases {
        expect_request_error(
            &mut s,
            &bytes,
            "sync.invalid_request",
            &format!("NUL in {what}"),
        );
    }
    let after = fingerprint(&mut s.conn, &s.partition, Coverage::Everything).expect("fingerprint");
    assert_eq!(before, after, "refused requests change nothing");

    // A rowId with a NUL is a commit-level rejection; the prefix row "a" is untouched.
    let out = s
        .push(vec![commit(
            "nul-row",
            vec![upsert(
                &Task::new("a\u{0}b", "p1", "would overwrite a"),
                None,
            )],
        )])
        .expect("served");
    assert_eq!(out[0].status, PushStatus::Rejected, "{:?}", out[0]);
    assert_eq!(
        out[0].error_codes(),
        ["sync.invalid_request"],
        "{:?}",
        out[0]
    );
    let after = fingerprint(&mut s.conn, &s.partition, Coverage::LogAndData).expect("fingerprint");
    let before_data: Vec<_> = before
        .into_iter()
        .filter(|(t, _, _)| after.iter().any(|(u, _, _)| u == t))
        .collect();
    assert_eq!(before_data, after, "row \"a\" and the log are unchanged");
}
