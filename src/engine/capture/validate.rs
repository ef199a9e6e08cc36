//! The write validator (§6.7) on captured plain SQL writes: per row, after
//! the row's checks ([`super::row`]) and before it is stored. A rejection
//! fails the statement with `syncular.write_rejected` (23514) naming the
//! validator's code and message; an ERROR the validator raises fails it as
//! is. The validator sees the same input as for a push, with `actorId` the
//! captured commit's actor and rows decoded from payloads (so values only
//! the payload holds are there).

use syncular_protocol::frame_fields::Op;
use syncular_protocol::row_codec::{decode_row, Row};

use super::CaptureTable;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::validators;

/// `true` when the table has a validator (the caller then reads what
/// [`validate`] needs).
pub fn has_validator(t: &CaptureTable) -> bool {
    t.registered().validator.is_some()
}

/// Runs the table's validator on one captured row write: `row` the row that
/// will persist (`None` for a delete), `stored_payload` the stored row's
/// payload (`None` for an insert). Errors: `syncular.write_rejected`,
/// `syncular.validator_malformed`, `syncular.invalid_validator`,
/// `syncular.internal` (a stored payload that does not decode).
pub fn validate(t: &CaptureTable, op: Op, row_id: &str, row: Option<&Row>, stored_payload: Option<&[u8]>) -> EngineResult<()> {
    let registered = t.registered();
    let Some(validator) = registered.validator else { return Ok(()) };
    let table = &registered.table;
    let stored = stored_payload
        .map(|p| decode_row(table.layout(), p))
        .transpose()
        .map_err(|e| EngineError::internal(format!("stored payload of {:?}/{row_id:?} does not decode: {}", t.name(), e.message)))?;
    let actor = super::statement::actor_id()?;
    let write = validators::Write {
        partition: &t.partition,
        actor_id: &actor,
        table,
        op,
        row_id,
        row,
        stored: stored.as_ref(),
    };
    match validators::validate(validator, &write)? {
        None => Ok(()),
        Some(r) => Err(EngineError::host(
            HostCode::WriteRejected,
            format!("the write validator of table {:?} rejected row {row_id:?}: {}: {}", t.name(), r.code, r.message),
        )),
    }
}
