//! The §8.7 failure response of a socket round (docs/src/sql/realtime.md
//! `syncular.error_response`): what the HTTP binding reports as §10.1 JSON
//! becomes `RESP_HEADER`, `ERROR`, `END` on the socket. The gateway hands in
//! the §10.1 object it read from the failed call's DETAIL.

use serde_json::Value;
use syncular_protocol::constants::WIRE_VERSION_1;
use syncular_protocol::error_json::parse_error_object;
use syncular_protocol::response::{RespEpoch, RespHeader, ResponseWriter};

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::partitions::select_partition_registry;

/// Encodes the failure response in `wire_version` (1, 2 or 3); a v2/v3 header
/// carries the partition's current `logEpoch` (`""` for an unknown
/// partition) and `resetRequired = false`. Read-only.
/// Errors: `syncular.invalid_argument` (wire version, malformed object).
pub fn run(partition: &str, wire_version: i32, error: &Value) -> EngineResult<Vec<u8>> {
    let invalid = |m: String| EngineError::host(HostCode::InvalidArgument, m);
    let wire_version = match wire_version {
        1 => 1u16,
        2 => 2u16,
        3 => 3u16,
        other => return Err(invalid(format!("wire_version {other} is not 1, 2 or 3"))),
    };
    let frame = parse_error_object(error).map_err(|e| invalid(format!("error: {}", e.message)))?;
    let epoch = match wire_version {
        WIRE_VERSION_1 => None,
        _ => Some(RespEpoch {
            log_epoch: select_partition_registry(partition)?.map(|r| r.log_epoch).unwrap_or_default(),
            reset_required: false,
        }),
    };
    let header = RespHeader { required_schema_version: None, latest_schema_version: None, epoch };
    let encoding = |e: syncular_protocol::ProtocolError| invalid(format!("error cannot be encoded: {}", e.message));
    let mut writer = ResponseWriter::new(Vec::with_capacity(128), wire_version, &header).map_err(encoding)?;
    writer.error(&frame).map_err(encoding)?;
    writer.finish().map_err(encoding)
}
