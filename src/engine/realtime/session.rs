//! The session rules of realtime (SPEC §8; docs/src/sql/realtime.md "Session rules"): every
//! decision about what a session receives, made here so that a gateway in any language only
//! moves bytes.
//!
//! A session's delivery state is a [`State`] value that this module produces and a gateway
//! keeps verbatim (opaque to it): the registrations, `schemaVersion`, `logEpoch`,
//! `wireVersion`, the delivered `cursor` and whether a wake-up is pending (`suppressed`).
//! Sessions whose states are equal (as JSON text) form one delta group and share one encoded
//! delta. Each answer tells the gateway, mechanically, what to send and which state to keep:
//!
//! - [`connect`]: the `hello` (§8.1) and the first state (cursor = `latestCursor`,
//!   suppressed while the client must sync first);
//! - [`reload`]: a re-resolution of the registrations — at connect when a scopes refresh
//!   raced the open, at a socket round's end (§8.7, the round's wire version), on a host
//!   refresh (`syncular_scopes`, fail-closed: a failed resolution empties the registrations);
//!   a change that the client must pull sends a wake-up;
//! - [`pass`]: one call per notification burst per partition: per distinct state, the new
//!   state and the `0x00`-tagged delta or the wake-up text (§8.2, §8.3);
//! - **resume**: a suppressed state comes with `resume` = the cursor an ack must reach and
//!   the state to adopt then (§8.2: deltas resume once the client caught up);
//!   **overflow**: a delta comes with the state and wake-up to use instead when the socket
//!   cannot take it (`catchup-required`).
//!
//! The gateway keeps: sockets, auth, the LISTEN connection and the order of notifications,
//! the acks' batching (`syncular.realtime_ack`, with the answers' `logEpoch`), rounds' framing
//! (a session's state is passed flagged `in_round` while its round is in flight: wake-ups, no
//! delta), presence.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use syncular_protocol::realtime::{control_text, ControlMessage, Hello, WakeReason};
use syncular_protocol::realtime_session::{Connected, Overflow, Reloaded, Resume};

use crate::engine::auth::caller::Caller;
use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::realtime::deltas::{self, Outcome};
use crate::engine::realtime::open::{self, Session};
use crate::engine::realtime::registrations;
use crate::store::pull::window::read_partition_bounds;

/// The `0x00` channel tag of a delta message (§8.7).
pub const TAG_DELTA: u8 = 0x00;

/// A session's delivery state (the delta group of `syncular.realtime_deltas`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct State {
    /// `[{"id","table","effective"}]` as [`open::open`] resolved them.
    pub registrations: Value,
    /// Served schema version the registrations were resolved under.
    pub schema_version: i64,
    /// The partition's `logEpoch` then.
    pub log_epoch: String,
    /// Wire version of the deltas (1, 2 or 3).
    pub wire_version: i64,
    /// Every commit ≤ it was delivered, woken for, or known not to match.
    pub cursor: i64,
    /// A wake-up is pending: no delta until an ack reaches `cursor`.
    pub suppressed: bool,
}

impl State {
    fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The resume rule of a suppressed state (`None` when not suppressed).
    fn resume(&self) -> Option<Resume> {
        self.suppressed.then(|| Resume { cursor: self.cursor, state: State { suppressed: false, ..self.clone() }.to_value() })
    }

    fn woken(&self, cursor: i64) -> State {
        State { cursor, suppressed: true, ..self.clone() }
    }
}

fn encode<T: serde::Serialize>(answer: &T) -> EngineResult<Value> {
    serde_json::to_value(answer).map_err(|e| EngineError::internal(format!("a session answer does not encode: {e}")))
}

fn invalid(message: String) -> EngineError {
    EngineError::host(HostCode::InvalidArgument, message)
}

/// Parses a state a gateway hands back. Errors: `syncular.invalid_argument`.
pub fn parse_state(value: &Value, what: &str) -> EngineResult<State> {
    let state: State =
        serde_json::from_value(value.clone()).map_err(|e| invalid(format!("{what} is not a realtime session state: {e}")))?;
    if !(1..=3).contains(&state.wire_version) {
        return Err(invalid(format!("{what}: wireVersion {} is not 1, 2 or 3", state.wire_version)));
    }
    Ok(state)
}

fn wake_text(reason: WakeReason, cursor: i64, now_ms: i64) -> String {
    control_text(&ControlMessage::Wake { cursor, reason, timestamp: now_ms })
}

fn initial(session: &Session) -> State {
    State {
        registrations: registrations::to_json(&session.registrations),
        schema_version: i64::from(session.schema_version),
        log_epoch: session.log_epoch.clone(),
        wire_version: i64::from(session.wire_version),
        cursor: session.latest_cursor,
        suppressed: session.requires_sync,
    }
}

/// `syncular.realtime_connect`: opens the session of `client_id` ([`open::open`]) and answers
/// `{"state","resume","hello","sessionId","scopeKeys","latestCursor","logEpoch"
/// [,"leaseExpiresAtMs"]}`; `hello` is the §8.1 text message to send first, `logEpoch` what the
/// session's acks carry (`syncular.realtime_ack`). Errors: those of [`open::open`].
pub fn connect(caller: &Caller<'_>, client_id: &str) -> EngineResult<Value> {
    let session = open::open(caller, client_id)?;
    let now_ms = clock::now_ms()?;
    let state = initial(&session);
    let hello = control_text(&ControlMessage::Hello(Hello {
        protocol_version: 1,
        session_id: session.session_id.clone(),
        actor_id: caller.actor_id.to_owned(),
        client_id: client_id.to_owned(),
        cursor: session.cursor,
        latest_cursor: session.latest_cursor,
        requires_sync: session.requires_sync,
        timestamp: now_ms,
    }));
    encode(&Connected {
        state: state.to_value(),
        resume: state.resume(),
        hello,
        session_id: session.session_id,
        scope_keys: session.scope_keys,
        latest_cursor: session.latest_cursor,
        log_epoch: session.log_epoch,
        lease_expires_at_ms: session.lease_expires_at_ms,
    })
}

/// Why a gateway reloads a session's registrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A scopes refresh raced the open: the state `hello` described is replaced.
    Connect,
    /// A §8.7 socket round ended (the session takes the round's wire version).
    RoundEnd,
    /// A host refresh (`syncular_scopes`, LISTEN recovery): fail-closed.
    Host,
}

impl Reason {
    /// Parses `connect` | `round-end` | `host`. Errors: `syncular.invalid_argument`.
    pub fn parse(text: &str) -> EngineResult<Reason> {
        match text {
            "connect" => Ok(Reason::Connect),
            "round-end" => Ok(Reason::RoundEnd),
            "host" => Ok(Reason::Host),
            other => Err(invalid(format!("reason must be 'connect', 'round-end' or 'host', got {other:?}"))),
        }
    }
}

/// `syncular.realtime_reload`: re-resolves the registrations of a session whose state is
/// `previous` and answers `{"state","resume","send","scopeKeys","latestCursor","logEpoch",
/// "changed","emptied"}` (`send`: text messages to send, in order). Rules:
/// - a new `logEpoch` or schema version is a discontinuity: `reset-required`, cursor =
///   the reload's `latestCursor`;
/// - `connect`: any change from `previous` → a fresh state and `catchup-required`;
/// - `host`: changed registrations → cursor = max(previous, `latestCursor`) and
///   `catchup-required` (the client pulls what the new registrations add); when the
///   resolution fails (an auth-lease error, a denied client, a resolver fault) the
///   registrations are emptied (`emptied`: fail-closed) and a non-empty → empty change wakes
///   the session (an error that aborts the call — a lost connection — reaches the gateway,
///   which then closes the session: fail-closed too);
/// - `round-end`: the session takes `wire_version` and the new registrations; its round's pull
///   delivered up to the client record's cursor (the floor): when the state is behind it, was
///   suppressed (wake-ups during the round deliver nothing) or the registrations changed, the
///   cursor becomes the floor and the suppression lifts, so the commits past it — those made
///   during the round too — reach the session as deltas; a discontinuity wakes it.
///
/// Errors: `syncular.invalid_argument` (malformed state or reason, `wire_version` not 1–3);
/// for `connect` and `round-end` the errors of [`open::open`] (the gateway keeps the
/// previous state); for `host` only `syncular.invalid_argument` (a partition or an allowed map
/// the gateway should never pass) and errors that abort the call (lost connection, cancel,
/// transient SQLSTATEs of the resolver).
pub fn reload(
    caller: &Caller<'_>,
    client_id: &str,
    previous: &State,
    reason: Reason,
    wire_version: Option<i64>,
) -> EngineResult<Value> {
    if let Some(w) = wire_version.filter(|w| !(1..=3).contains(w)) {
        return Err(invalid(format!("wire_version {w} is not 1, 2 or 3")));
    }
    let now_ms = clock::now_ms()?;
    let opened = match (open::open(caller, client_id), reason) {
        (Ok(session), _) => Some(session),
        // A bad argument is the gateway's bug: raised (the gateway then ends the session).
        (Err(e), Reason::Host) if e.code_str() != HostCode::InvalidArgument.as_str() => None,
        (Err(e), _) => return Err(e),
    };
    let (next, latest, scope_keys, wake) = match &opened {
        Some(session) => {
            let fresh = initial(session);
            let discontinuity =
                fresh.log_epoch != previous.log_epoch || fresh.schema_version != previous.schema_version;
            let changed = fresh.registrations != previous.registrations || discontinuity;
            let wire = wire_version.unwrap_or(previous.wire_version);
            let (state, wake) = match reason {
                _ if discontinuity => (State { wire_version: wire, ..fresh.woken(session.latest_cursor) }, Some(WakeReason::ResetRequired)),
                Reason::Connect if fresh != *previous => (fresh.woken(fresh.cursor), Some(WakeReason::CatchupRequired)),
                Reason::Connect => (previous.clone(), None),
                Reason::Host if changed => {
                    let cursor = previous.cursor.max(session.latest_cursor);
                    (State { wire_version: wire, ..fresh.woken(cursor) }, Some(WakeReason::CatchupRequired))
                }
                Reason::Host => (previous.clone(), None),
                Reason::RoundEnd => {
                    // The floor: the client record's cursor after the round — what its pull
                    // delivered (the minimum nextCursor of its active subscriptions, §4.5).
                    // The session resumes from it whenever it is behind it, was suppressed (a
                    // wake-up during the round announced commits, it delivered none) or its
                    // registrations changed (commits past it were evaluated under the old
                    // ones): the commits past the floor — those made during the round too —
                    // then go out as deltas, no gap and no repeat of the round's pull.
                    // Otherwise every commit up to the cursor already went out as a delta.
                    let floor = session.cursor;
                    let resumes = floor >= 0 && (floor >= previous.cursor || previous.suppressed || changed);
                    let (cursor, suppressed) = if resumes { (floor, false) } else { (previous.cursor, previous.suppressed) };
                    (State { registrations: fresh.registrations.clone(), wire_version: wire, cursor, suppressed, ..previous.clone() }, None)
                }
            };
            (state, session.latest_cursor, session.scope_keys.clone(), wake)
        }
        None => {
            // Fail-closed: nothing is delivered until a later refresh resolves again.
            let emptied = State { registrations: Value::Array(Vec::new()), ..previous.clone() };
            let had_any = previous.registrations.as_array().is_some_and(|a| !a.is_empty());
            let latest = read_partition_bounds(caller.partition)?.max_commit_seq;
            let cursor = previous.cursor.max(latest);
            if had_any {
                (emptied.woken(cursor), latest, Vec::new(), Some(WakeReason::CatchupRequired))
            } else {
                (emptied, latest, Vec::new(), None)
            }
        }
    };
    let send: Vec<String> = wake.map(|reason| wake_text(reason, next.cursor, now_ms)).into_iter().collect();
    encode(&Reloaded {
        state: next.to_value(),
        resume: next.resume(),
        send,
        scope_keys,
        latest_cursor: latest,
        log_epoch: next.log_epoch.clone(),
        changed: next != *previous,
        emptied: opened.is_none(),
    })
}

/// One row of [`pass`]: what the sessions holding state `index` get.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// 0-based index into the input states.
    pub index: usize,
    /// The state to keep from now on.
    pub state: Value,
    /// A `0x00`-tagged delta to send (binary message), or `None`.
    pub message: Option<Vec<u8>>,
    /// A text message (a wake-up) to send, or `None`.
    pub control: Option<String>,
    /// Once an ack reaches its cursor, keep its state.
    pub resume: Option<Resume>,
    /// What to keep and send instead of `message` when the socket cannot take it.
    pub overflow: Option<Overflow>,
}

/// `syncular.realtime_pass`: one delta pass over the distinct `states` of `partition`,
/// capped at `through_seq` (docs/src/sql/realtime.md; [`deltas::run`] decides each group's
/// outcome). `in_round[i]`: the sessions holding `states[i]` have a socket round in flight —
/// never a delta, a wake-up when something matches (§8.7 interleaving). Every state's cursor
/// moves to max(cursor, window end); a wake-up suppresses it.
/// Errors: `syncular.invalid_argument` (malformed states, `in_round` of another length,
/// `max_delta_bytes` < 64, negative `through_seq`), `syncular.no_schema`, store failures.
pub fn pass(
    partition: &str,
    states: &Value,
    max_delta_bytes: i32,
    through_seq: Option<i64>,
    in_round: Option<&[bool]>,
) -> EngineResult<Vec<Delivery>> {
    let Value::Array(items) = states else {
        return Err(invalid("states must be a JSON array".to_owned()));
    };
    let parsed =
        items.iter().enumerate().map(|(i, v)| parse_state(v, &format!("state {i}"))).collect::<EngineResult<Vec<_>>>()?;
    let in_round = match in_round {
        Some(flags) if flags.len() != parsed.len() => {
            return Err(invalid(format!("in_round has {} entries for {} states", flags.len(), parsed.len())))
        }
        Some(flags) => flags.to_vec(),
        None => vec![false; parsed.len()],
    };
    // §8.7 interleaving: a session whose socket round is in flight gets no delta — it takes the
    // §8.2 suppression path (a wake-up when something matches).
    let groups: Vec<Value> = parsed
        .iter()
        .zip(&in_round)
        .map(|(state, round)| State { suppressed: state.suppressed || *round, ..state.clone() }.to_value())
        .collect();
    let answer = deltas::run(partition, &Value::Array(groups), max_delta_bytes, through_seq)?;
    let now_ms = clock::now_ms()?;
    Ok(parsed
        .iter()
        .zip(answer.outcomes)
        .enumerate()
        .map(|(index, (state, outcome))| {
            let cursor = state.cursor.max(answer.through);
            let moved = State { cursor, ..state.clone() };
            match outcome {
                Outcome::None => Delivery {
                    index,
                    resume: moved.resume(),
                    state: moved.to_value(),
                    message: None,
                    control: None,
                    overflow: None,
                },
                Outcome::Delta(bytes) => {
                    let mut tagged = Vec::with_capacity(bytes.len() + 1);
                    tagged.push(TAG_DELTA);
                    tagged.extend_from_slice(&bytes);
                    let woken = moved.woken(cursor);
                    Delivery {
                        index,
                        resume: moved.resume(),
                        state: moved.to_value(),
                        message: Some(tagged),
                        control: None,
                        overflow: Some(Overflow {
                            state: woken.to_value(),
                            control: wake_text(WakeReason::CatchupRequired, cursor, now_ms),
                            resume: woken.resume(),
                        }),
                    }
                }
                Outcome::Wake(reason) => {
                    let woken = moved.woken(cursor);
                    Delivery {
                        index,
                        resume: woken.resume(),
                        state: woken.to_value(),
                        message: None,
                        control: Some(wake_text(reason, cursor, now_ms)),
                        overflow: None,
                    }
                }
            }
        })
        .collect())
}
