//! The session rules' SQL calls (docs/src/sql/realtime.md "Session rules"):
//! `syncular.realtime_connect`, `syncular.realtime_reload`, `syncular.realtime_pass`. A session's
//! state comes back as the JSON text Postgres prints for it (`jsonb::text`: equal states, equal
//! texts) and is handed back verbatim; the gateway never looks into it. Transient failures are
//! retried ([`super::with_retry`]).

use std::sync::Arc;

use bytes::Bytes;
use deadpool_postgres::Pool;
use serde_json::Value;
use syncular_protocol::realtime_session::{Connected, Reloaded};

use super::{checkout, with_retry, ApiError};

/// A session state as the rules answered it (JSON text, opaque) — shared by every session
/// that holds it.
pub type StateText = Arc<str>;

/// What to keep once the client's highest ack reaches `.0`.
pub type Resume = Option<(i64, StateText)>;

/// The state, resume rule and answer of a connect or reload.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    /// The decoded answer (its `state` / `resume` fields are not used: see the texts).
    pub answer: T,
    /// The state to keep.
    pub state: StateText,
    /// Its resume rule.
    pub resume: Resume,
}

/// The columns that select an answer `a` with its state and resume texts.
const ANSWER_COLUMNS: &str = "a, (a->'state')::text, (a->'resume'->>'cursor')::bigint, (a->'resume'->'state')::text";

fn resume_of(cursor: Option<i64>, state: Option<String>) -> Resume {
    cursor.zip(state).map(|(c, s)| (c, Arc::from(s)))
}

async fn answer<T: serde::de::DeserializeOwned>(pool: &Pool, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) -> Result<Answer<T>, ApiError> {
    let row = with_retry(|| async {
        let client = checkout(pool).await?;
        client.query_one(sql, params).await.map_err(|e| ApiError::from_pg(&e))
    })
    .await?;
    let pg = |e: tokio_postgres::Error| ApiError::from_pg(&e);
    let value: Value = row.try_get(0).map_err(pg)?;
    let state: String = row.try_get(1).map_err(pg)?;
    let resume = resume_of(row.try_get(2).map_err(pg)?, row.try_get(3).map_err(pg)?);
    let answer = serde_json::from_value(value).map_err(|e| ApiError::internal(format!("the session rules answered an unexpected shape: {e}")))?;
    Ok(Answer { answer, state: Arc::from(state), resume })
}

/// `syncular.realtime_connect(partition, actor_id, client_id, allowed_scopes)`.
///
/// Errors: §10.1 errors of the call (`sync.invalid_client_id` 400, `sync.invalid_request` 400,
/// `syncular.no_schema` 500, the auth-lease codes 401, …); `syncular.internal` for an answer
/// that does not decode.
pub async fn connect(pool: &Pool, partition: &str, actor_id: &str, client_id: &str, allowed: Option<&Value>) -> Result<Answer<Connected>, ApiError> {
    let sql = format!("SELECT {ANSWER_COLUMNS} FROM syncular.realtime_connect($1::text, $2::text, $3::text, $4::jsonb) a");
    answer(pool, &sql, &[&partition, &actor_id, &client_id, &allowed]).await
}

/// Why a session is reloaded (the `reason` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A scopes refresh raced the open.
    Connect,
    /// A socket round ended (with the round request's wire version).
    RoundEnd(u16),
    /// A host refresh (fail-closed).
    Host,
}

impl Reason {
    /// The `reason` argument (and metrics label): `connect`, `round-end` or `host`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Connect => "connect",
            Reason::RoundEnd(_) => "round-end",
            Reason::Host => "host",
        }
    }
}

/// `syncular.realtime_reload(partition, actor_id, client_id, allowed_scopes, state, reason,
/// wire_version)`.
///
/// Errors: §10.1 errors of the call (for `Connect` / `RoundEnd`: those of the open; keep the
/// previous state).
pub async fn reload(
    pool: &Pool,
    (partition, actor_id, client_id): (&str, &str, &str),
    allowed: Option<&Value>,
    state: &str,
    reason: Reason,
) -> Result<Answer<Reloaded>, ApiError> {
    let wire = if let Reason::RoundEnd(w) = reason { Some(i32::from(w)) } else { None };
    let sql = format!(
        "SELECT {ANSWER_COLUMNS} FROM syncular.realtime_reload($1::text, $2::text, $3::text, $4::jsonb, $5::text::jsonb, $6::text, $7::integer) a"
    );
    answer(pool, &sql, &[&partition, &actor_id, &client_id, &allowed, &state, &reason.as_str(), &wire]).await
}

/// What a socket that cannot take a row's message keeps and sends instead.
#[derive(Debug, Clone)]
pub struct Overflow {
    /// The state to keep.
    pub state: StateText,
    /// The text message to send.
    pub control: String,
    /// Its resume rule.
    pub resume: Resume,
}

/// One row of `syncular.realtime_pass`.
#[derive(Debug, Clone)]
pub struct PassRow {
    /// Index into the states handed in.
    pub index: usize,
    /// The state to keep.
    pub state: StateText,
    /// The binary message (`0x00`-tagged delta), shared by every session of the row.
    pub message: Option<Bytes>,
    /// The text message (a wake-up).
    pub control: Option<String>,
    /// The resume rule of `state`.
    pub resume: Resume,
    /// With a message: what to do when the socket cannot take it.
    pub overflow: Option<Arc<Overflow>>,
}

/// `syncular.realtime_pass(partition, states, max_delta_bytes, through_seq, in_round)` with
/// `states` the distinct state texts and `in_round[i]` whether their sessions have a socket
/// round in flight.
///
/// Errors: §10.1 errors of the call (`syncular.invalid_argument` for malformed states).
pub async fn pass(
    pool: &Pool,
    partition: &str,
    (states, in_round): (&[StateText], &[bool]),
    max_delta_bytes: i32,
    through_seq: i64,
) -> Result<Vec<PassRow>, ApiError> {
    let mut array = String::with_capacity(states.iter().map(|s| s.len() + 1).sum::<usize>() + 2);
    array.push('[');
    for (i, s) in states.iter().enumerate() {
        if i > 0 {
            array.push(',');
        }
        array.push_str(s);
    }
    array.push(']');
    let rows = with_retry(|| async {
        let client = checkout(pool).await?;
        let statement = client
            .prepare_cached(
                "SELECT state_index, state::text, message, control, \
                        (resume->>'cursor')::bigint, (resume->'state')::text, \
                        (overflow->'state')::text, overflow->>'control', \
                        (overflow->'resume'->>'cursor')::bigint, (overflow->'resume'->'state')::text \
                   FROM syncular.realtime_pass($1::text, $2::text::jsonb, $3::integer, $4::bigint, $5::boolean[])",
            )
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        client.query(&statement, &[&partition, &array, &max_delta_bytes, &through_seq, &in_round]).await.map_err(|e| ApiError::from_pg(&e))
    })
    .await?;
    rows.iter()
        .map(|r| {
            let index: i32 = r.try_get(0)?;
            let overflow = match (r.try_get::<_, Option<String>>(6)?, r.try_get::<_, Option<String>>(7)?) {
                (Some(state), Some(control)) => Some(Arc::new(Overflow {
                    state: Arc::from(state),
                    control,
                    resume: resume_of(r.try_get(8)?, r.try_get(9)?),
                })),
                _ => None,
            };
            Ok(PassRow {
                index: usize::try_from(index).unwrap_or(usize::MAX),
                state: Arc::from(r.try_get::<_, String>(1)?),
                message: r.try_get::<_, Option<Vec<u8>>>(2)?.map(Bytes::from),
                control: r.try_get(3)?,
                resume: resume_of(r.try_get(4)?, r.try_get(5)?),
                overflow,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        .map_err(|e| ApiError::from_pg(&e))
}
