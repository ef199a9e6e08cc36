//! Helpers for the realtime `#[pg_test]`s (`realtime_*`): the SQL calls a
//! gateway makes, each in a subtransaction so an ERROR comes back as data.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{json, Value};

use crate::store::spi::subtransaction::{self, SubtransactionError};

/// `syncular.realtime_open(partition, actor, client_id, allowed)`.
pub fn open(partition: &str, actor: &str, client_id: &str, allowed: Option<Value>) -> Result<Value, SubtransactionError> {
    let (partition, actor, client_id) = (partition.to_owned(), actor.to_owned(), client_id.to_owned());
    subtransaction::run(move || {
        Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.realtime_open($1, $2, $3, $4)",
            &[partition.as_str().into(), actor.as_str().into(), client_id.as_str().into(), allowed.map(JsonB).into()],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("realtime_open returns jsonb")
        .0
    })
}

/// [`open`] that must succeed.
pub fn open_ok(partition: &str, actor: &str, client_id: &str, allowed: Option<Value>) -> Value {
    open(partition, actor, client_id, allowed).unwrap_or_else(|e| panic!("realtime_open: {} {}", e.sqlstate, e.message))
}

/// One row of `syncular.realtime_deltas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaRow {
    pub group_index: i32,
    pub kind: String,
    pub cursor: i64,
    pub delta: Option<Vec<u8>>,
}

/// `SELECT * FROM syncular.realtime_deltas(partition, groups, max_bytes)`.
pub fn deltas(partition: &str, groups: Value, max_bytes: i32) -> Result<Vec<DeltaRow>, SubtransactionError> {
    deltas_through(partition, groups, max_bytes, None)
}

/// [`deltas`] with `through_seq`.
pub fn deltas_through(
    partition: &str,
    groups: Value,
    max_bytes: i32,
    through_seq: Option<i64>,
) -> Result<Vec<DeltaRow>, SubtransactionError> {
    let partition = partition.to_owned();
    subtransaction::run(move || {
        Spi::connect(|c| {
            let table = c
                .select(
                    "SELECT group_index, kind, cursor, delta FROM syncular.realtime_deltas($1, $2, $3, $4)",
                    None,
                    &[partition.as_str().into(), JsonB(groups).into(), max_bytes.into(), through_seq.into()],
                )
                .unwrap_or_else(|e| panic!("SPI: {e}"));
            table
                .map(|row| DeltaRow {
                    group_index: row.get::<i32>(1).unwrap().unwrap(),
                    kind: row.get::<String>(2).unwrap().unwrap(),
                    cursor: row.get::<i64>(3).unwrap().unwrap(),
                    delta: row.get::<Vec<u8>>(4).unwrap(),
                })
                .collect()
        })
    })
}

/// [`deltas`] that must succeed.
pub fn deltas_ok(partition: &str, groups: Value, max_bytes: i32) -> Vec<DeltaRow> {
    deltas(partition, groups, max_bytes).unwrap_or_else(|e| panic!("realtime_deltas: {} {}", e.sqlstate, e.message))
}

/// The group a gateway builds for one session opened as `session`.
pub fn group(session: &Value, cursor: i64, suppressed: bool) -> Value {
    json!({
        "registrations": session["registrations"],
        "schemaVersion": session["schemaVersion"],
        "logEpoch": session["logEpoch"],
        "wireVersion": session["wireVersion"],
        "cursor": cursor,
        "suppressed": suppressed,
    })
}

/// `syncular.realtime_ack(partition, acks)`.
pub fn ack(partition: &str, acks: Value) -> Result<i32, SubtransactionError> {
    let partition = partition.to_owned();
    subtransaction::run(move || {
        Spi::get_one_with_args::<i32>(
            "SELECT syncular.realtime_ack($1, $2)",
            &[partition.as_str().into(), JsonB(acks).into()],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("realtime_ack returns an integer")
    })
}

/// The §10.1 object an error carried in its DETAIL.
pub fn detail_object(err: &SubtransactionError) -> Value {
    let detail = err.detail.as_deref().unwrap_or_else(|| panic!("{} has no DETAIL", err.message));
    serde_json::from_str(detail).unwrap_or_else(|e| panic!("DETAIL {detail:?} is not JSON: {e}"))
}

/// `syncular.realtime_connect(partition, actor, client_id, allowed)`.
pub fn connect(partition: &str, actor: &str, client_id: &str, allowed: Option<Value>) -> Result<Value, SubtransactionError> {
    let (partition, actor, client_id) = (partition.to_owned(), actor.to_owned(), client_id.to_owned());
    subtransaction::run(move || {
        Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.realtime_connect($1, $2, $3, $4)",
            &[partition.as_str().into(), actor.as_str().into(), client_id.as_str().into(), allowed.map(JsonB).into()],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("realtime_connect returns jsonb")
        .0
    })
}

/// `syncular.realtime_reload(partition, actor, client_id, allowed, state, reason, wire_version)`.
pub fn reload(
    partition: &str,
    actor: &str,
    client_id: &str,
    allowed: Option<Value>,
    state: &Value,
    reason: &str,
    wire_version: Option<i32>,
) -> Result<Value, SubtransactionError> {
    let (partition, actor, client_id, state, reason) =
        (partition.to_owned(), actor.to_owned(), client_id.to_owned(), state.clone(), reason.to_owned());
    subtransaction::run(move || {
        Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.realtime_reload($1, $2, $3, $4, $5, $6, $7)",
            &[
                partition.as_str().into(),
                actor.as_str().into(),
                client_id.as_str().into(),
                allowed.map(JsonB).into(),
                JsonB(state).into(),
                reason.as_str().into(),
                wire_version.into(),
            ],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("realtime_reload returns jsonb")
        .0
    })
}

/// One row of `syncular.realtime_pass`.
#[derive(Debug, Clone, PartialEq)]
pub struct PassRow {
    pub state_index: i32,
    pub state: Value,
    pub message: Option<Vec<u8>>,
    pub control: Option<String>,
    pub resume: Option<Value>,
    pub overflow: Option<Value>,
}

/// `SELECT * FROM syncular.realtime_pass(partition, states, max_bytes, through_seq)`.
pub fn pass(partition: &str, states: Value, max_bytes: i32, through_seq: Option<i64>) -> Result<Vec<PassRow>, SubtransactionError> {
    pass_in_round(partition, states, max_bytes, through_seq, None)
}

/// [`pass`] with `in_round`.
pub fn pass_in_round(
    partition: &str,
    states: Value,
    max_bytes: i32,
    through_seq: Option<i64>,
    in_round: Option<Vec<Option<bool>>>,
) -> Result<Vec<PassRow>, SubtransactionError> {
    let partition = partition.to_owned();
    subtransaction::run(move || {
        Spi::connect(|c| {
            let table = c
                .select(
                    "SELECT state_index, state, message, control, resume, overflow \
                       FROM syncular.realtime_pass($1, $2, $3, $4, $5)",
                    None,
                    &[partition.as_str().into(), JsonB(states).into(), max_bytes.into(), through_seq.into(), in_round.into()],
                )
                .unwrap_or_else(|e| panic!("SPI: {e}"));
            table
                .map(|row| PassRow {
                    state_index: row.get::<i32>(1).unwrap().unwrap(),
                    state: row.get::<JsonB>(2).unwrap().unwrap().0,
                    message: row.get::<Vec<u8>>(3).unwrap(),
                    control: row.get::<String>(4).unwrap(),
                    resume: row.get::<JsonB>(5).unwrap().map(|j| j.0),
                    overflow: row.get::<JsonB>(6).unwrap().map(|j| j.0),
                })
                .collect()
        })
    })
}
