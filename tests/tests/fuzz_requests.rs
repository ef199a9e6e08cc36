//! Structured fuzzing of `syncular.sync` (house rules: no decoder panics,
//! request-level faults start with their SSP2 code): well-framed requests
//! whose fields are drawn from hostile value pools — odd strings (NUL,
//! quotes, unicode, long), unknown tables and keys, random payload bytes,
//! extreme cursors, limits and versions, random resume tokens and accept
//! bits. Every call must either return a response the reference codec
//! decodes, or raise an error whose message starts with `sync.`/`syncular.`
//! and whose SQLSTATE is not internal (XX000) and after which the partition
//! is byte-identical (nothing half-applied); the backend must answer the
//! next query on the same connection. Deterministic (seeded), bounded.

use ssp2::model::{Frame, Op, Operation};
use ssp2::primitives::RawJson;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, fingerprint, partition_name, register_schema, Coverage,
};
use syncular_integration_tests::wire::{decode_response, encode_task, RawSession, Task};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const STRINGS: &[&str] = &[
    "a",
    "p1",
    "p2",
    "*",
    "",
    "x\u{0}y",
    "\u{0}",
    "'; DROP TABLE tasks; --",
    "\"quoted\"",
    "ünïcödé ✓ 🚀",
    "\u{feff}bom",
    "line\nbreak",
    "back\\slash",
    "%_like_",
    "tasks",
    "syncular.sync_commits",
    "[\"remote-command\",",
];

fn odd_string(rng: &mut Rng) -> String {
    if rng.chance(5) {
        return "L".repeat(70_000);
    }
    let mut s = (*rng.pick(STRINGS)).to_owned();
    if rng.chance(30) {
        let extra: &&str = rng.pick(STRINGS);
        s.push_str(extra);
    }
    s
}

fn table(rng: &mut Rng) -> String {
    if rng.chance(70) {
        "tasks".to_owned()
    } else {
        odd_string(rng)
    }
}

fn i64_value(rng: &mut Rng) -> i64 {
    *rng.pick(&[
        -1,
        0,
        1,
        2,
        7,
        1_000,
        i64::from(i32::MAX),
        9_007_199_254_740_991,
        9_007_199_254_740_992,
        -9_007_199_254_740_991,
        i64::MAX,
        i64::MIN,
    ])
}

fn payload(rng: &mut Rng) -> Option<Vec<u8>> {
    match rng.below(4) {
        0 => None,
        1 => Some((0..rng.below(40)).map(|_| rng.next() as u8).collect()),
        _ => {
            let mut t = Task::new(odd_string(rng), odd_string(rng), odd_string(rng));
            t.priority = rng.chance(50).then(|| i64_value(rng));
            Some(encode_task(&t))
        }
    }
}

fn operation(rng: &mut Rng) -> Operation {
    let op = if rng.chance(75) {
        Op::Upsert
    } else {
        Op::Delete
    };
    let payload = match op {
        Op::Upsert => payload(rng).or_else(|| Some(vec![0])),
        Op::Delete => None,
    };
    Operation {
        table: table(rng),
        row_id: odd_string(rng),
        op,
        base_version: rng.chance(40).then(|| i64_value(rng)),
        payload,
    }
}

fn scopes(rng: &mut Rng) -> Vec<(String, Vec<String>)> {
    let key = if rng.chance(75) {
        "project_id".to_owned()
    } else {
        odd_string(rng)
    };
    let mut values: Vec<String> = (0..1 + rng.below(3)).map(|_| odd_string(rng)).collect();
    values.sort();
    values.dedup();
    vec![(key, values)]
}

fn token(rng: &mut Rng) -> Option<RawJson> {
    let pool = [
        "{}",
        "null",
        "[]",
        "{\"asOfCommitSeq\": 1, \"tables\": [\"tasks\"], \"tableIndex\": 0, \"rowCursor\": null}",
        "{\"asOfCommitSeq\": -5, \"tables\": [\"tasks\"], \"tableIndex\": 99, \"rowCursor\": \"zz\"}",
        "{\"asOfCommitSeq\": 9007199254740991, \"tables\": [\"nope\"], \"tableIndex\": 0, \"rowCursor\": 7}",
        "\"\\u0000\"",
        "{\"rowCursor\": \"\\u0000\"}",
    ];
    rng.chance(30)
        .then(|| RawJson((*rng.pick(&pool)).to_owned()))
}

fn frames(rng: &mut Rng) -> Vec<Frame> {
    let mut frames = Vec::new();
    for i in 0..rng.below(3) {
        let ops = (0..1 + rng.below(3)).map(|_| operation(rng)).collect();
        let id = if rng.chance(80) {
            format!("c{i}-{}", rng.below(1000))
        } else {
            odd_string(rng)
        };
        frames.push(Frame::PushCommit {
            client_commit_id: id,
            operations: ops,
        });
    }
    if frames.is_empty() || rng.chance(60) {
        frames.push(Frame::PullHeader {
            limit_commits: *rng.pick(&[0, 1, -1, 5, i32::MAX, i32::MIN]),
            limit_snapshot_rows: *rng.pick(&[0, 1, -1, 3, i32::MAX, i32::MIN]),
            max_snapshot_pages: *rng.pick(&[0, 1, -1, 2, i32::MAX, i32::MIN]),
            accept: rng.below(16) as u8,
        });
        for j in 0..rng.below(3) {
            let id = if rng.chance(80) {
                format!("s{j}")
            } else {
                odd_string(rng)
            };
            frames.push(Frame::Subscription {
                id,
                table: table(rng),
                scopes: scopes(rng),
                params: rng
                    .chance(10)
                    .then(|| RawJson(r#"{"p":"\u0000"}"#.to_owned())),
                cursor: i64_value(rng),
                bootstrap_state: token(rng),
            });
        }
    }
    frames
}

#[test]
fn hostile_field_values_never_escape_as_raw_or_internal_errors() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("fuzz");
    let mut s = RawSession::new(
        connect(),
        &partition,
        "alice",
        "fuzz-client",
        Some(allow_projects(&["p1", "p2", "*"])),
    );
    s.acquire_epoch().expect("epoch");
    let mut rng = Rng(0x0dd_f00d_1234_5678);
    let mut failures = Vec::new();
    let (mut served, mut refused) = (0, 0);
    for case in 0..400 {
        let frames = frames(&mut rng);
        let client_id = if rng.chance(85) {
            "fuzz-client".to_owned()
        } else {
            odd_string(&mut rng)
        };
        let client_id = if client_id.is_empty() {
            "e".to_owned()
        } else {
            client_id
        };
        let bytes = syncular_integration_tests::wire::request(
            &client_id,
            s.log_epoch.as_deref(),
            frames.clone(),
        );
        let before =
            fingerprint(&mut admin, &partition, Coverage::Everything).expect("fingerprint");
        match s.send_bytes(&bytes) {
            Ok(response) => {
                served += 1;
                if let Err(e) = decode_response(&response) {
                    failures.push(format!(
                        "case {case}: undecodable response ({e}) to {frames:?}"
                    ));
                }
            }
            Err(e) => {
                refused += 1;
                match e.as_db_error() {
                    Some(db) => {
                        let prefixed = db.message().starts_with("sync.")
                            || db.message().starts_with("syncular.");
                        if !prefixed || db.code().code() == "XX000" {
                            failures.push(format!(
                                "case {case}: {} {:?} for {}",
                                db.code().code(),
                                db.message(),
                                summarize(&frames)
                            ));
                        }
                    }
                    None => failures.push(format!("case {case}: connection-level error {e}")),
                }
                let after =
                    fingerprint(&mut admin, &partition, Coverage::Everything).expect("fingerprint");
                if after != before {
                    failures.push(format!(
                        "case {case}: a refused request changed the partition: {}",
                        summarize(&frames)
                    ));
                }
            }
        }
        match s.conn.query_one("SELECT 1", &[]) {
            Ok(_) => {}
            Err(e) => {
                failures.push(format!(
                    "case {case}: backend gone after {}: {e}",
                    summarize(&frames)
                ));
                s.conn = connect();
            }
        }
    }
    eprintln!(
        "fuzz: {served} served, {refused} refused, {} failures",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of 400 cases misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn summarize(frames: &[Frame]) -> String {
    let parts: Vec<String> = frames
        .iter()
        .map(|f| match f {
            Frame::PushCommit { client_commit_id, operations } => format!(
                "PUSH_COMMIT {:?} [{}]",
                truncate(client_commit_id),
                operations
                    .iter()
                    .map(|o| format!(
                        "{} {:?}/{:?} base={:?} payload={:?}B",
                        o.op.name(),
                        truncate(&o.table),
                        truncate(&o.row_id),
                        o.base_version,
                        o.payload.as_ref().map(Vec::len)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Frame::PullHeader { limit_commits, limit_snapshot_rows, max_snapshot_pages, accept } => {
                format!("PULL_HEADER {limit_commits}/{limit_snapshot_rows}/{max_snapshot_pages} accept={accept:#06b}")
            }
            Frame::Subscription { id, table, scopes, params, cursor, bootstrap_state } => format!(
                "SUBSCRIPTION {:?} {:?} {:?} cursor={cursor} params={:?} token={:?}",
                truncate(id),
                truncate(table),
                scopes.iter().map(|(k, v)| (truncate(k), v.iter().map(|x| truncate(x)).collect::<Vec<_>>())).collect::<Vec<_>>(),
                params.as_ref().map(|p| &p.0),
                bootstrap_state.as_ref().map(|t| &t.0)
            ),
            other => format!("{other:?}"),
        })
        .collect();
    parts.join(" | ")
}

fn truncate(s: &str) -> String {
    if s.len() > 24 {
        format!(
            "{}…({} B)",
            &s[..s.char_indices().nth(12).map_or(s.len(), |(i, _)| i)],
            s.len()
        )
    } else {
        s.to_owned()
    }
}
