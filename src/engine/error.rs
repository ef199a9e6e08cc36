//! The engine's one error type.
//!
//! Request-level faults of the sync round are SSP2 catalog errors
//! ([`ProtocolError`], §10); faults of the administrative surface
//! (`register_schema`, `set_scope_resolver`, the resolver's return value) are
//! host errors with a `syncular.*` code, because §10.2 has no code for them.
//! `crate::api::errors` is the one place turning either into a Postgres ERROR.
//! Commit-level faults are never an `EngineError`: they are `rejected` results.

use std::fmt;

use syncular_protocol::response::ErrorFrame;
use syncular_protocol::{Category, ErrorCode, ProtocolError, RecommendedAction};

/// A host (non-§10.2) error code, spelled `syncular.<name>` in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostCode {
    /// The schema IR given to `register_schema` is invalid (shape, names,
    /// scopes, types). SQLSTATE 42P15 (`invalid_schema_definition`).
    InvalidSchema,
    /// `register_schema` refuses a version/layout change it cannot serve
    /// (lower version, same version with another layout, non-append-only
    /// change, missing physical column, dropped table without `allow_drop`).
    /// SQLSTATE 55000 (`object_not_in_prerequisite_state`).
    SchemaRefused,
    /// No schema has been registered yet, or the stored marker is unreadable.
    /// SQLSTATE 55000.
    NoSchema,
    /// `set_scope_resolver` got a function of the wrong shape.
    /// SQLSTATE 22023 (`invalid_parameter_value`).
    InvalidResolver,
    /// The scope resolver returned something that is not a map of string
    /// lists. SQLSTATE 39000 (`external_routine_invocation_exception`).
    ResolverMalformed,
    /// `set_write_validator` got a function of the wrong shape or owner, or
    /// a table the registered schema does not declare.
    /// SQLSTATE 22023 (`invalid_parameter_value`).
    InvalidValidator,
    /// A write validator (§6.7) returned something that is not NULL or a
    /// well-formed rejection (`{"code", "message"?, "details"?}`, a code
    /// outside the reserved protocol prefixes, §6.3.1 details).
    /// SQLSTATE 39000 (`external_routine_invocation_exception`).
    ValidatorMalformed,
    /// The reaction planner (§6.9) returned something that is not NULL or a
    /// JSON array of valid reaction records, or raised a (non-transient)
    /// ERROR: the request fails and nothing of it persists.
    /// SQLSTATE 39000 (`external_routine_invocation_exception`).
    ReactionPlannerFailed,
    /// A captured plain SQL write that the table's write validator rejected
    /// (§6.7); the message carries the validator's code and message.
    /// SQLSTATE 23514 (`check_violation`).
    WriteRejected,
    /// A SQL function argument is unusable: NULL where a value is required,
    /// or a malformed `allowed_scopes` map given to `syncular.sync` & co.
    /// SQLSTATE 22023 (`invalid_parameter_value`).
    InvalidArgument,
    /// A plain SQL write to an app table with no `syncular.partition` set
    /// (docs/src/guide/plain-sql.md "Writing with plain SQL"). SQLSTATE 55000.
    PartitionRequired,
    /// A plain SQL write the capture refuses: a computed `_sync_*` column
    /// written, a scope or primary-key column changed by an UPDATE, a row of
    /// another partition, a TRUNCATE. SQLSTATE 0A000 (`feature_not_supported`).
    WriteRefused,
    /// A plain SQL write whose values the row codec cannot carry (a NULL in
    /// a non-nullable IR column, an integer beyond ±(2^53−1), a NULL primary
    /// key or scope column). SQLSTATE 22000 (`data_exception`).
    InvalidRow,
    /// `syncular.distribute()` without the `citus` extension installed.
    /// SQLSTATE 55000 (`object_not_in_prerequisite_state`).
    CitusMissing,
    /// An admin function (`register_schema`, `set_scope_resolver`,
    /// `distribute`, `install_capture_triggers`) called on a Citus worker:
    /// they run on the coordinator; or a pruning batch whose pruning fence
    /// would not be on the node where the log readers take it (some of the
    /// sync functions delegated to workers, and not the batch, or the other
    /// way round).
    /// SQLSTATE 55000.
    CitusWorker,
    /// A push references a blob whose presigned upload (§5.9.3) was granted and is not verified
    /// yet (the mover checks it within ~100 ms of the upload): retry the request shortly; it is
    /// `blob.not_found` once the grant lapsed unverified. SQLSTATE 55006 (`object_in_use`).
    BlobPending,
    /// A blob held only by the object store while the store (or its mover) is unhealthy: no
    /// presigned URL can be minted and Postgres holds no copy. Retry later. SQLSTATE 57P03
    /// (`cannot_connect_now`).
    ObjectStoreUnavailable,
    /// A mover whose configuration (bucket, credentials: its fingerprint) is not the one that
    /// configured the object store last: it is refused until restarted with the same settings.
    /// SQLSTATE 55000 (`object_not_in_prerequisite_state`).
    ObjectStoreConflict,
    /// A round's response grew past the `max_response_bytes` its caller set
    /// (`syncular.gateway_round`): the caller runs it again streamed. Raised as soon as the
    /// response passes the limit; the transaction aborts, so nothing of the round persists.
    /// SQLSTATE 54000 (`program_limit_exceeded`).
    ResponseTooLarge,
    /// An invariant of the extension's own storage broke (a bug or a
    /// hand-edited catalog). SQLSTATE XX000 (`internal_error`).
    Internal,
}

impl HostCode {
    /// The message prefix, e.g. `"syncular.invalid_schema"`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostCode::InvalidSchema => "syncular.invalid_schema",
            HostCode::SchemaRefused => "syncular.schema_refused",
            HostCode::NoSchema => "syncular.no_schema",
            HostCode::InvalidResolver => "syncular.invalid_resolver",
            HostCode::ResolverMalformed => "syncular.resolver_malformed",
            HostCode::InvalidValidator => "syncular.invalid_validator",
            HostCode::ValidatorMalformed => "syncular.validator_malformed",
            HostCode::ReactionPlannerFailed => "syncular.reaction_planner_failed",
            HostCode::WriteRejected => "syncular.write_rejected",
            HostCode::InvalidArgument => "syncular.invalid_argument",
            HostCode::PartitionRequired => "syncular.partition_required",
            HostCode::WriteRefused => "syncular.write_refused",
            HostCode::InvalidRow => "syncular.invalid_row",
            HostCode::CitusMissing => "syncular.citus_missing",
            HostCode::CitusWorker => "syncular.citus_worker",
            HostCode::BlobPending => "syncular.blob_pending",
            HostCode::ObjectStoreUnavailable => "syncular.object_store_unavailable",
            HostCode::ObjectStoreConflict => "syncular.object_store_conflict",
            HostCode::ResponseTooLarge => "syncular.response_too_large",
            HostCode::Internal => "syncular.internal",
        }
    }

    /// The §10.1 metadata a host code carries in an error's DETAIL JSON
    /// (docs/src/reference/errors.md): `(category, retryable, recommendedAction)`.
    /// Argument and schema faults are the caller's to fix; a missing schema
    /// may appear later (retry); resolver and storage faults are the
    /// operator's.
    pub fn metadata(self) -> (Category, bool, RecommendedAction) {
        match self {
            HostCode::InvalidArgument
            | HostCode::InvalidSchema
            | HostCode::SchemaRefused
            | HostCode::PartitionRequired
            | HostCode::WriteRefused
            | HostCode::WriteRejected
            | HostCode::InvalidRow => {
                (Category::InvalidRequest, false, RecommendedAction::FixRequest)
            }
            HostCode::NoSchema | HostCode::BlobPending | HostCode::ObjectStoreUnavailable => {
                (Category::Internal, true, RecommendedAction::RetryLater)
            }
            HostCode::InvalidResolver
            | HostCode::ResolverMalformed
            | HostCode::InvalidValidator
            | HostCode::ValidatorMalformed
            | HostCode::ReactionPlannerFailed
            | HostCode::CitusMissing
            | HostCode::CitusWorker
            | HostCode::ObjectStoreConflict
            | HostCode::ResponseTooLarge
            | HostCode::Internal => {
                (Category::Internal, false, RecommendedAction::InspectServer)
            }
        }
    }
}

/// Every failure the engine (and the store under it) reports upward.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineError {
    /// An SSP2 request-level error (§10.2 code + message).
    Protocol(ProtocolError),
    /// A host error (`syncular.*`).
    Host { code: HostCode, message: String },
}

impl EngineError {
    /// An SSP2 error with `code`.
    pub fn protocol(code: ErrorCode, message: impl Into<String>) -> Self {
        EngineError::Protocol(ProtocolError::new(code, message))
    }

    /// A host error with `code`.
    pub fn host(code: HostCode, message: impl Into<String>) -> Self {
        EngineError::Host { code, message: message.into() }
    }

    /// Shorthand for [`HostCode::InvalidSchema`].
    pub fn invalid_schema(message: impl Into<String>) -> Self {
        Self::host(HostCode::InvalidSchema, message)
    }

    /// Shorthand for [`HostCode::SchemaRefused`].
    pub fn schema_refused(message: impl Into<String>) -> Self {
        Self::host(HostCode::SchemaRefused, message)
    }

    /// Shorthand for [`HostCode::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::host(HostCode::Internal, message)
    }

    /// The code spelled as it starts the Postgres message.
    pub fn code_str(&self) -> &'static str {
        match self {
            EngineError::Protocol(e) => e.code.as_str(),
            EngineError::Host { code, .. } => code.as_str(),
        }
    }

    /// The human-readable part of the message (after `"<code>: "`).
    pub fn message(&self) -> &str {
        match self {
            EngineError::Protocol(e) => &e.message,
            EngineError::Host { message, .. } => message,
        }
    }

    /// The §10.1 record of this error (code, message, category, retryable,
    /// recommendedAction): the `ERROR` frame of §1.6 and, as JSON
    /// (`syncular_protocol::error_json`), the DETAIL of the Postgres ERROR.
    pub fn error_frame(&self) -> ErrorFrame {
        match self {
            EngineError::Protocol(e) => ErrorFrame::from_error(e),
            EngineError::Host { code, message } => {
                let (category, retryable, action) = code.metadata();
                ErrorFrame {
                    code: code.as_str().to_owned(),
                    message: message.clone(),
                    category: category.as_str().to_owned(),
                    retryable,
                    recommended_action: action.as_str().to_owned(),
                    details: None,
                }
            }
        }
    }
}

impl fmt::Display for EngineError {
    /// `"<code>: <message>"`, the exact Postgres error message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code_str(), self.message())
    }
}

impl std::error::Error for EngineError {}

impl From<ProtocolError> for EngineError {
    fn from(e: ProtocolError) -> Self {
        EngineError::Protocol(e)
    }
}

impl From<crate::store::StoreError> for EngineError {
    /// A store failure the store could not classify is an internal error;
    /// Postgres errors raised by a statement (unique violations, …) do not
    /// come through here — they abort the statement as Postgres ERRORs.
    fn from(e: crate::store::StoreError) -> Self {
        EngineError::internal(e.to_string())
    }
}

/// Result alias of the engine layer.
pub type EngineResult<T> = Result<T, EngineError>;
