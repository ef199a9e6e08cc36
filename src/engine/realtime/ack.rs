//! Batched realtime acks (SPEC §8.2; docs/src/sql/realtime.md `syncular.realtime_ack`): a
//! client's acknowledged cursor updates its `sync_clients` record without a
//! pull, with `MAX` semantics so acks applied in any order never move a
//! cursor back, clamped to the partition's `max_commit_seq` so a client
//! cannot claim commits that do not exist (the cursor is the §4.6 retention
//! watermark). An ack made under another `logEpoch` is ignored (it counts
//! positions of a rotated log).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::auth::allowed::json_type_name;
use crate::store::partitions::select_partition_registry;
use crate::store::realtime::apply_acks;

/// One acknowledged cursor of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The acknowledging client.
    pub client_id: String,
    /// The actor its connection authenticated as (must match the binding).
    pub actor_id: String,
    /// The highest contiguously applied `commitSeq` it reported.
    pub cursor: i64,
    /// The `logEpoch` its session was opened under.
    pub log_epoch: String,
}

/// Parses the `acks` argument: an array of
/// `{"clientId","actorId","cursor","logEpoch"}`. Errors:
/// `syncular.invalid_argument` naming the offending entry.
pub fn parse_acks(value: &Value) -> EngineResult<Vec<Ack>> {
    let invalid = |m: String| EngineError::host(HostCode::InvalidArgument, m);
    let Value::Array(items) = value else {
        return Err(invalid(format!("acks must be a JSON array, got {}", json_type_name(value))));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = |key: &str| {
                item.get(key)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(format!("ack {i}: {key:?} must be a string")))
            };
            Ok(Ack {
                client_id: text("clientId")?,
                actor_id: text("actorId")?,
                cursor: item
                    .get("cursor")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| invalid(format!("ack {i}: \"cursor\" must be an integer")))?,
                log_epoch: text("logEpoch")?,
            })
        })
        .collect()
}

/// Applies `acks` to `partition`; returns how many client records moved
/// (or were touched). Acks with a negative cursor, a NUL character, or
/// another epoch are dropped; several acks of one client fold to their
/// maximum first. Errors: `syncular.invalid_argument`, store failures.
pub fn run(partition: &str, acks: &Value) -> EngineResult<usize> {
    let acks = parse_acks(acks)?;
    // Cursor writes wait for a drop batch of the partition (store::lifecycle::fence).
    crate::store::lifecycle::fence::share_writes(partition);
    let Some(registry) = select_partition_registry(partition)? else {
        return Ok(0);
    };
    let mut best: BTreeMap<(String, String), i64> = BTreeMap::new();
    for ack in acks {
        let storable = !ack.client_id.contains('\0') && !ack.actor_id.contains('\0');
        if ack.cursor < 0 || ack.log_epoch != registry.log_epoch || !storable {
            continue;
        }
        let slot = best.entry((ack.client_id, ack.actor_id)).or_insert(ack.cursor);
        *slot = (*slot).max(ack.cursor);
    }
    if best.is_empty() {
        return Ok(0);
    }
    let mut client_ids = Vec::with_capacity(best.len());
    let mut actor_ids = Vec::with_capacity(best.len());
    let mut cursors = Vec::with_capacity(best.len());
    for ((client_id, actor_id), cursor) in best {
        client_ids.push(client_id);
        actor_ids.push(actor_id);
        cursors.push(cursor);
    }
    Ok(apply_acks(partition, client_ids, actor_ids, cursors, clock::now_ms()?)?)
}
