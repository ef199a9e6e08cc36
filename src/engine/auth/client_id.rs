//! The client record's identity (SPEC §1.5): a `clientId` is bound to one
//! actor per partition; the reserved server-command prefix and a NUL are
//! refused.

use syncular_protocol::ErrorCode;

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::storable::{preview, unstorable};
use crate::store::clients::binding;
use crate::store::round::context::ClientRow;

/// The reserved server-command client id prefix (§1.5).
pub const REMOTE_COMMAND_PREFIX: &str = "[\"remote-command\",";

/// §1.5 client record: refuses the reserved server-command prefix and a
/// `clientId` bound to another actor in the partition
/// (`sync.invalid_client_id`), else binds it and stores `wire_version`.
pub fn bind_client_id(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    wire_version: u16,
    now_ms: i64,
) -> EngineResult<()> {
    check_client_id(client_id)?;
    write_binding(partition, client_id, actor_id, wire_version, now_ms)
}

/// The client record's upsert; `sync.invalid_client_id` when it is bound to another actor.
fn write_binding(partition: &str, client_id: &str, actor_id: &str, wire_version: u16, now_ms: i64) -> EngineResult<()> {
    if !binding::bind_client(partition, client_id, actor_id, i32::from(wire_version), now_ms)? {
        return Err(client_bound_elsewhere());
    }
    Ok(())
}

/// [`bind_client_id`] with the client's record already read by the caller
/// (`existing`, `None` when absent): nothing is written when the record is
/// bound to `actor_id`, has this `wire_version` and was written less than
/// `syncular.activity_refresh_ms` ago. Errors: as [`bind_client_id`].
pub fn bind_client_read(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    wire_version: u16,
    now_ms: i64,
    existing: Option<&ClientRow>,
) -> EngineResult<()> {
    check_client_id(client_id)?;
    if let Some(row) = existing {
        if row.actor_id != actor_id {
            return Err(client_bound_elsewhere());
        }
        let due = row.updated_at_ms > now_ms || clock::activity_refresh_due(row.updated_at_ms, now_ms);
        if row.wire_version == i32::from(wire_version) && !due {
            return Ok(());
        }
    }
    write_binding(partition, client_id, actor_id, wire_version, now_ms)
}

/// `sync.invalid_client_id` for a `clientId` bound to another actor (§1.5).
pub fn client_bound_elsewhere() -> EngineError {
    EngineError::protocol(
        ErrorCode::InvalidClientId,
        "clientId is already bound to a different actor in this partition (§1.5)",
    )
}

/// The §1.5 checks of a `clientId` that need no storage: a NUL character
/// (`sync.invalid_request`: Postgres `text` cannot hold it), more than
/// [`crate::engine::storable::MAX_KEY_PART_BYTES`] bytes and the reserved server-command prefix
/// (`sync.invalid_client_id`: the client starts over with a fresh id).
pub fn check_client_id(client_id: &str) -> EngineResult<()> {
    if client_id.contains('\0') {
        return Err(EngineError::protocol(
            ErrorCode::InvalidRequest,
            "clientId contains a NUL character, which this server cannot store",
        ));
    }
    if let Some(why) = unstorable(client_id) {
        return Err(EngineError::protocol(ErrorCode::InvalidClientId, format!("clientId {} {why}", preview(client_id))));
    }
    if client_id.starts_with(REMOTE_COMMAND_PREFIX) {
        return Err(EngineError::protocol(
            ErrorCode::InvalidClientId,
            format!("clientId may not start with the reserved server-command prefix {REMOTE_COMMAND_PREFIX} (§1.5)"),
        ));
    }
    Ok(())
}
