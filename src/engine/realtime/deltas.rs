//! Realtime deltas for a notification burst (SPEC §8.2, §8.3; docs/src/sql/realtime.md
//! `syncular.realtime_deltas`).
//!
//! One call answers every session group of one partition. The window of a
//! group is `(cursor, through]`, `through` being the partition's
//! `max_commit_seq` read once by the call, capped by the caller's
//! `through_seq`: a gateway passes the highest `commitSeq` it has seen
//! notified so far, so a commit notified after a `syncular_scopes` refresh it
//! has not processed yet is never served under the registrations that
//! refresh replaces (Postgres delivers both channels in commit order). Each
//! registration's commits are
//! read exactly as an incremental pull reads them ([`run_window`]: the
//! `sync_change_scopes` index, only changes of the table whose stored scopes
//! match the effective scopes, commits never split). Per group, in order:
//! 1. `logEpoch` ≠ the partition's epoch, or `schemaVersion` ≠ the served
//!    version → `reset-required`;
//! 2. an empty window (`cursor ≥ through`) or no registration → `none`;
//! 3. `cursor < horizon_seq` (pruned past) → `catchup-required`;
//! 4. suppressed → `catchup-required` when anything matches, else `none`;
//! 5. otherwise the delta: `RESP_HEADER`, per registration with a match
//!    `SUB_START` / `COMMIT`s / `SUB_END(nextCursor = through)`, `END` — or
//!    `delta-too-large` past `max_delta_bytes`, or `none` when nothing
//!    matched.
//!
//! Contiguity (§8.2) holds by construction: every window starts at the
//! cursor the gateway says it delivered. Read-only.

use serde_json::Value;
use syncular_protocol::constants::WIRE_VERSION_1;
use syncular_protocol::realtime::WakeReason;
use syncular_protocol::response::{RespEpoch, RespHeader, ResponseWriter, SubEnd, SubStart, SubStatus};

use crate::engine::budget::Budget;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::pull::wire_scope_map;
use crate::engine::pull::window::{run_window, WindowRequest};
use crate::engine::realtime::registrations::{self, Registration};
use crate::engine::auth::allowed::json_type_name;
use crate::engine::schema;
use crate::store::partitions::select_partition_registry;
use crate::store::pull::window::read_partition_bounds;

/// The smallest `max_delta_bytes` accepted (a delta's envelope and one
/// section's framing alone take tens of bytes).
pub const MIN_DELTA_BYTES: i32 = 64;

/// One group of sessions with identical delivery state (docs/src/sql/realtime.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The sessions' registrations as `realtime_open` returned them; checked against the
    /// served schema only when `schemaVersion` and `logEpoch` are current (a group opened
    /// under an older schema is `reset-required` whatever its registrations name).
    pub registrations: Value,
    /// Schema version the registrations were resolved under.
    pub schema_version: i64,
    /// Log epoch the sessions were opened under.
    pub log_epoch: String,
    /// Wire version of the deltas (1, 2 or 3).
    pub wire_version: u16,
    /// Delivered cursor: every commit ≤ it was delivered, woken for, or known not to match.
    pub cursor: i64,
    /// A wake is pending (or a socket round is in flight): never a delta.
    pub suppressed: bool,
}

/// What one group gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing in the window matches.
    None,
    /// A complete SSP2 response message.
    Delta(Vec<u8>),
    /// A §8.3 wake-up instead of data.
    Wake(WakeReason),
}

impl Outcome {
    /// The `kind` column: `none`, `delta`, or the wake reason's spelling.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::None => "none",
            Outcome::Delta(_) => "delta",
            Outcome::Wake(reason) => reason.as_str(),
        }
    }
}

/// The answer of one call: `through` and one outcome per group, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deltas {
    /// The partition's `max_commit_seq` read by this call: every group's new cursor.
    pub through: i64,
    /// Per input group, same order.
    pub outcomes: Vec<Outcome>,
}

fn invalid(message: String) -> EngineError {
    EngineError::host(HostCode::InvalidArgument, message)
}

/// Parses the `groups` argument (shapes only; registrations are checked per group by
/// [`run`]). Errors: `syncular.invalid_argument` naming the offending group / key.
pub fn parse_groups(value: &Value) -> EngineResult<Vec<Group>> {
    let Value::Array(items) = value else {
        return Err(invalid(format!("groups must be a JSON array, got {}", json_type_name(value))));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let obj = item.as_object().ok_or_else(|| invalid(format!("group {i} must be an object")))?;
            let field = |key: &str| {
                obj.get(key).ok_or_else(|| invalid(format!("group {i}: {key:?} is missing")))
            };
            let int = |key: &str| {
                field(key)?.as_i64().ok_or_else(|| invalid(format!("group {i}: {key:?} must be an integer")))
            };
            let wire_version = match int("wireVersion")? {
                1 => 1,
                2 => 2,
                3 => 3,
                other => return Err(invalid(format!("group {i}: wireVersion {other} is not 1, 2 or 3"))),
            };
            Ok(Group {
                registrations: field("registrations")?.clone(),
                schema_version: int("schemaVersion")?,
                log_epoch: field("logEpoch")?
                    .as_str()
                    .ok_or_else(|| invalid(format!("group {i}: \"logEpoch\" must be a string")))?
                    .to_owned(),
                wire_version,
                cursor: int("cursor")?,
                suppressed: field("suppressed")?
                    .as_bool()
                    .ok_or_else(|| invalid(format!("group {i}: \"suppressed\" must be a boolean")))?,
            })
        })
        .collect()
}

/// Answers every group of `partition` (docs/src/sql/realtime.md `syncular.realtime_deltas`).
/// `through_seq` (the highest `commitSeq` the gateway has seen notified, in
/// notification order) caps the window; `None` = the partition's
/// `max_commit_seq`. Errors: `syncular.invalid_argument` (malformed groups,
/// `max_delta_bytes` below [`MIN_DELTA_BYTES`], a negative `through_seq`),
/// `syncular.no_schema`, store failures.
pub fn run(partition: &str, groups: &Value, max_delta_bytes: i32, through_seq: Option<i64>) -> EngineResult<Deltas> {
    if max_delta_bytes < MIN_DELTA_BYTES {
        return Err(invalid(format!("max_delta_bytes must be at least {MIN_DELTA_BYTES}, got {max_delta_bytes}")));
    }
    if let Some(t) = through_seq.filter(|t| *t < 0) {
        return Err(invalid(format!("through_seq must not be negative, got {t}")));
    }
    // Behind the schema fence: a bump never lands between this read and the log reads
    // (a group of the old version would be served a commit of the new one).
    let schema = schema::require_fenced_schema()?;
    let groups = parse_groups(groups)?;
    // The log is read after the bounds: hold the pruning fence first (§4.6).
    crate::store::lifecycle::fence::share(partition)?;
    let epoch = select_partition_registry(partition)?.map(|r| r.log_epoch).unwrap_or_default();
    let bounds = read_partition_bounds(partition)?;
    let through = through_seq.map_or(bounds.max_commit_seq, |t| t.min(bounds.max_commit_seq));
    let max_bytes = usize::try_from(max_delta_bytes).unwrap_or(usize::MAX);
    let outcomes = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            if g.log_epoch != epoch || g.schema_version != i64::from(schema.version) {
                return Ok(Outcome::Wake(WakeReason::ResetRequired));
            }
            let regs = registrations::from_json(&g.registrations, &schema)
                .map_err(|e| invalid(format!("group {i}: {e}")))?;
            if g.cursor >= through || regs.is_empty() {
                return Ok(Outcome::None);
            }
            if g.cursor < bounds.horizon_seq {
                return Ok(Outcome::Wake(WakeReason::CatchupRequired));
            }
            if g.suppressed {
                return Ok(if any_match(partition, &regs, g.cursor, through)? {
                    Outcome::Wake(WakeReason::CatchupRequired)
                } else {
                    Outcome::None
                });
            }
            encode(partition, &regs, g, through, max_bytes)
        })
        .collect::<EngineResult<Vec<_>>>()?;
    Ok(Deltas { through, outcomes })
}

fn window<'a>(partition: &'a str, reg: &'a Registration, cursor: i64, through: i64) -> WindowRequest<'a> {
    WindowRequest {
        partition,
        table: &reg.table,
        effective: &reg.effective,
        cursor,
        max_commit_seq: through,
        limit_changes: i32::MAX,
    }
}

/// Whether any commit in `(cursor, through]` matches a registration; stops
/// at the first match (a one-byte budget defers everything after it).
fn any_match(partition: &str, regs: &[Registration], cursor: i64, through: i64) -> EngineResult<bool> {
    for reg in regs {
        let mut budget = Budget::new(1);
        let mut found = false;
        run_window(&window(partition, reg, cursor, through), &mut budget, 0, |_| {
            found = true;
            Ok(1)
        })?;
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}

fn encode(partition: &str, regs: &[Registration], g: &Group, through: i64, max_bytes: usize) -> EngineResult<Outcome> {
    let header = RespHeader {
        required_schema_version: None,
        latest_schema_version: None,
        epoch: (g.wire_version != WIRE_VERSION_1)
            .then(|| RespEpoch { log_epoch: g.log_epoch.clone(), reset_required: false }),
    };
    let mut writer = ResponseWriter::new(Vec::with_capacity(512), g.wire_version, &header).map_err(encoder)?;
    let mut sections = 0usize;
    for reg in regs {
        let written = bytes_written(&writer);
        let mut budget = Budget::new(max_bytes);
        let mut started = false;
        let outcome = run_window(&window(partition, reg, g.cursor, through), &mut budget, written, |commit| {
            if !started {
                writer.sub_start(&sub_start(reg)?).map_err(encoder)?;
                started = true;
            }
            writer.commit(commit.frame()).map_err(encoder)?;
            Ok(bytes_written(&writer))
        })?;
        if outcome.deferred || bytes_written(&writer) > max_bytes {
            return Ok(Outcome::Wake(WakeReason::DeltaTooLarge));
        }
        if started {
            writer.sub_end(&SubEnd { next_cursor: through, bootstrap_state: None }).map_err(encoder)?;
            sections += 1;
        }
    }
    if sections == 0 {
        return Ok(Outcome::None);
    }
    let bytes = writer.finish().map_err(encoder)?;
    if bytes.len() > max_bytes {
        return Ok(Outcome::Wake(WakeReason::DeltaTooLarge));
    }
    Ok(Outcome::Delta(bytes))
}

fn sub_start(reg: &Registration) -> EngineResult<SubStart> {
    Ok(SubStart {
        id: reg.id.clone(),
        status: SubStatus::Active,
        reason_code: String::new(),
        effective_scopes: wire_scope_map(&reg.effective)?,
        bootstrap: false,
    })
}

fn encoder(e: syncular_protocol::ProtocolError) -> EngineError {
    EngineError::internal(format!("delta encoding failed: {}", e.message))
}

fn bytes_written(writer: &ResponseWriter<Vec<u8>>) -> usize {
    usize::try_from(writer.bytes_written()).unwrap_or(usize::MAX)
}
