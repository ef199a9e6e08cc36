//! The persisted outcome of one push commit (SPEC §2.3, §6.3, §6.3.1) and
//! its replay.
//!
//! `sync_push_results.result` holds, per idempotency key, the JSON object
//! ```json
//! {"status":"applied"|"rejected", "commitSeq":7, "recordedAtMs":1700000000000,
//!  "results":[{"opIndex":0,"status":"applied"}
//!            |{"opIndex":0,"status":"conflict","code":"…","message":"…",
//!              "serverVersion":3,"serverRow":"<std base64>",
//!              "conflictColumns":"<std base64>"}
//!            |{"opIndex":0,"status":"error","code":"…","message":"…","retryable":false}],
//!  "details":[{"opIndex":0,"detailsJson":"{…}"}]}
//! ```
//! (`commitSeq` only for applied; `details` only when a rejection carries
//! §6.3.1 recovery metadata; `conflictColumns` only for a conflict decided
//! by the column-level rule of a sparse payload, wire version 3) — the
//! reference server's shape. A replay
//! rebuilds the identical `PUSH_RESULT` (+ `PUSH_RESULT_DETAILS`) frames from
//! it, with `applied` answered as `cached` (§2.3). Strings and integers
//! survive JSONB storage exactly, so the replay is byte-equivalent.

use serde::{Deserialize, Serialize};
use syncular_protocol::response::{
    OpResult, PushResult, PushResultDetail, PushResultDetails, PushStatus,
};
use syncular_protocol::row_codec::{base64_decode, base64_encode};
use syncular_protocol::ErrorCode;

/// The stored commit status (`cached` is never stored: it is how a stored
/// `applied` replays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoredStatus {
    /// Every operation applied; carries a `commitSeq`.
    Applied,
    /// Terminated by one operation's record; no `commitSeq`.
    Rejected,
}

/// One stored result record (§6.3 tagged union).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum StoredOpResult {
    /// The operation applied.
    Applied {
        /// Index into the commit's operations.
        #[serde(rename = "opIndex")]
        op_index: i32,
    },
    /// A `baseVersion` conflict (§6.2) disclosing the authorized stored row.
    Conflict {
        /// Index into the commit's operations.
        #[serde(rename = "opIndex")]
        op_index: i32,
        /// `sync.version_conflict`.
        code: String,
        /// Diagnostic text.
        message: String,
        /// The stored row's `server_version`.
        #[serde(rename = "serverVersion")]
        server_version: i64,
        /// Standard base64 of the row-codec bytes.
        #[serde(rename = "serverRow")]
        server_row: String,
        /// Standard base64 of the `conflictColumns` bitmap (wire version 3:
        /// LSB-first over the row's columns); absent for a row-level
        /// conflict (a full-row payload), answered as an empty bitmap.
        #[serde(rename = "conflictColumns", default, skip_serializing_if = "Option::is_none")]
        conflict_columns: Option<String>,
    },
    /// The operation failed with a §10 code.
    Error {
        /// Index into the commit's operations.
        #[serde(rename = "opIndex")]
        op_index: i32,
        /// The §10.2 code, e.g. `sync.forbidden`.
        code: String,
        /// Diagnostic text (never rendered to end users).
        message: String,
        /// §10.2 `retryable` of the code.
        retryable: bool,
    },
}

/// One stored §6.3.1 detail entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDetail {
    /// Index of the `error` record the details belong to.
    #[serde(rename = "opIndex")]
    pub op_index: i32,
    /// The §6.3.1 normalized details object, as text.
    #[serde(rename = "detailsJson")]
    pub details_json: String,
}

/// The persisted outcome of one commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPushResult {
    /// Applied or rejected.
    pub status: StoredStatus,
    /// The commit's `commitSeq` (applied only).
    #[serde(rename = "commitSeq", default, skip_serializing_if = "Option::is_none")]
    pub commit_seq: Option<i64>,
    /// Server clock when the outcome was recorded, Unix ms.
    #[serde(rename = "recordedAtMs")]
    pub recorded_at_ms: i64,
    /// One `applied` record per operation, or the terminating record.
    pub results: Vec<StoredOpResult>,
    /// §6.3.1 details of a rejection (empty when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<StoredDetail>,
}

impl StoredOpResult {
    /// The operation the record belongs to.
    pub fn op_index(&self) -> i32 {
        match self {
            StoredOpResult::Applied { op_index }
            | StoredOpResult::Conflict { op_index, .. }
            | StoredOpResult::Error { op_index, .. } => *op_index,
        }
    }

    /// An `error` record with `code`'s §10.2 `retryable` flag. A NUL
    /// character in `message` (it may quote client input) becomes U+FFFD:
    /// `jsonb` cannot store `\u0000`, and the record must always persist.
    pub fn error(op_index: i32, code: ErrorCode, message: impl Into<String>) -> Self {
        StoredOpResult::Error {
            op_index,
            code: code.as_str().to_owned(),
            message: message.into().replace('\0', "\u{FFFD}"),
            retryable: code.retryable(),
        }
    }

    /// A `conflict` record (`sync.version_conflict`) carrying the stored row
    /// and, for the column-level rule (wire version 3), the
    /// `conflictColumns` bitmap.
    pub fn conflict(op_index: i32, server_version: i64, server_row: &[u8], conflict_columns: Option<&[u8]>) -> Self {
        StoredOpResult::Conflict {
            op_index,
            code: ErrorCode::VersionConflict.as_str().to_owned(),
            message: match conflict_columns {
                None => "baseVersion does not match the server row version (§6.2)",
                Some(_) => "present columns moved past baseVersion (§6.2)",
            }
            .to_owned(),
            server_version,
            server_row: base64_encode(server_row),
            conflict_columns: conflict_columns.map(base64_encode),
        }
    }

    fn to_wire(&self) -> Option<OpResult> {
        Some(match self {
            StoredOpResult::Applied { op_index } => OpResult::Applied {
                op_index: *op_index,
            },
            StoredOpResult::Conflict {
                op_index,
                code,
                message,
                server_version,
                server_row,
                conflict_columns,
            } => OpResult::Conflict {
                op_index: *op_index,
                code: code.clone(),
                message: message.clone(),
                server_version: *server_version,
                server_row: base64_decode(server_row)?,
                conflict_columns: match conflict_columns {
                    Some(text) => base64_decode(text)?,
                    None => Vec::new(),
                },
            },
            StoredOpResult::Error {
                op_index,
                code,
                message,
                retryable,
            } => OpResult::Error {
                op_index: *op_index,
                code: code.clone(),
                message: message.clone(),
                retryable: *retryable,
            },
        })
    }
}

impl StoredPushResult {
    /// JSON text for `sync_push_results.result`.
    pub fn to_json(&self) -> String {
        // Serializing plain strings/integers cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Parses a stored result; `None` when unreadable (→ `sync.idempotency_cache_miss`).
    pub fn from_json(text: &str) -> Option<StoredPushResult> {
        let parsed: StoredPushResult = serde_json::from_str(text).ok()?;
        let consistent = match parsed.status {
            StoredStatus::Applied => parsed.commit_seq.is_some(),
            StoredStatus::Rejected => parsed.commit_seq.is_none() && !parsed.results.is_empty(),
        };
        consistent.then_some(parsed)
    }

    /// The frames answering this outcome. `replay = true` answers a stored
    /// `applied` as `cached` (§2.3); a rejection replays as itself. `None`
    /// when a stored field is unreadable (a corrupt `serverRow`).
    pub fn to_frames(
        &self,
        client_commit_id: &str,
        replay: bool,
    ) -> Option<(PushResult, Option<PushResultDetails>)> {
        let status = match (self.status, replay) {
            (StoredStatus::Applied, false) => PushStatus::Applied,
            (StoredStatus::Applied, true) => PushStatus::Cached,
            (StoredStatus::Rejected, _) => PushStatus::Rejected,
        };
        let results = self
            .results
            .iter()
            .map(StoredOpResult::to_wire)
            .collect::<Option<Vec<_>>>()?;
        let result = PushResult {
            client_commit_id: client_commit_id.to_owned(),
            status,
            commit_seq: if status == PushStatus::Rejected {
                None
            } else {
                self.commit_seq
            },
            results,
        };
        let details = (!self.details.is_empty() && status == PushStatus::Rejected).then(|| {
            PushResultDetails {
                client_commit_id: client_commit_id.to_owned(),
                entries: self
                    .details
                    .iter()
                    .map(|d| PushResultDetail {
                        op_index: d.op_index,
                        details_json: d.details_json.clone(),
                    })
                    .collect(),
            }
        });
        Some((result, details))
    }
}

/// §6.3 `sync.idempotency_cache_miss` answer for a stored result that cannot
/// be read: rejected, no `commitSeq`, one retryable error at `opIndex 0`.
/// Never persisted.
pub fn cache_miss(client_commit_id: &str) -> PushResult {
    PushResult {
        client_commit_id: client_commit_id.to_owned(),
        status: PushStatus::Rejected,
        commit_seq: None,
        results: vec![OpResult::Error {
            op_index: 0,
            code: ErrorCode::IdempotencyCacheMiss.as_str().to_owned(),
            message: "the persisted push result could not be read (§6.3)".to_owned(),
            retryable: true,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_round_trips_and_replays_as_cached() {
        let stored = StoredPushResult {
            status: StoredStatus::Applied,
            commit_seq: Some(7),
            recorded_at_ms: 1_700_000_000_000,
            results: vec![
                StoredOpResult::Applied { op_index: 0 },
                StoredOpResult::Applied { op_index: 1 },
            ],
            details: vec![],
        };
        let back = StoredPushResult::from_json(&stored.to_json()).expect("readable");
        assert_eq!(back, stored);
        let (first, _) = stored.to_frames("c1", false).unwrap();
        let (replayed, _) = back.to_frames("c1", true).unwrap();
        assert_eq!(first.status, PushStatus::Applied);
        assert_eq!(replayed.status, PushStatus::Cached);
        assert_eq!(replayed.commit_seq, Some(7));
        assert_eq!(replayed.results, first.results);
    }

    #[test]
    fn conflict_keeps_server_row_bytes() {
        let stored = StoredPushResult {
            status: StoredStatus::Rejected,
            commit_seq: None,
            recorded_at_ms: 1,
            results: vec![StoredOpResult::conflict(2, 5, &[0, 1, 2, 255], Some(&[0b0000_0100]))],
            details: vec![],
        };
        let back = StoredPushResult::from_json(&stored.to_json()).unwrap();
        let (frame, details) = back.to_frames("c", true).unwrap();
        assert_eq!(frame.status, PushStatus::Rejected);
        assert_eq!(frame.commit_seq, None);
        assert!(details.is_none());
        match &frame.results[0] {
            OpResult::Conflict {
                op_index,
                server_version,
                server_row,
                code,
                conflict_columns,
                ..
            } => {
                assert_eq!((*op_index, *server_version), (2, 5));
                assert_eq!(server_row, &vec![0u8, 1, 2, 255]);
                assert_eq!(conflict_columns, &vec![0b0000_0100u8]);
                assert_eq!(code, "sync.version_conflict");
            }
            other => panic!("expected conflict, got {other:?}"),
        }
    }

    #[test]
    fn unreadable_or_inconsistent_json_is_none() {
        assert!(StoredPushResult::from_json("not json").is_none());
        assert!(StoredPushResult::from_json(
            r#"{"status":"applied","recordedAtMs":1,"results":[]}"#
        )
        .is_none());
        assert!(StoredPushResult::from_json(
            r#"{"status":"rejected","recordedAtMs":1,"results":[]}"#
        )
        .is_none());
        let miss = cache_miss("x");
        assert_eq!(miss.status, PushStatus::Rejected);
        assert!(
            matches!(&miss.results[0], OpResult::Error { retryable: true, code, .. } if code == "sync.idempotency_cache_miss")
        );
    }
}
