//! The one place mapping an engine error to a Postgres ERROR.
//!
//! Message: `"<code>: <message>"`, where `<code>` is the SSP2 code (§10.2,
//! e.g. `sync.invalid_request`) or a host code (`syncular.*`). SQLSTATE is
//! stable per code class, so a gateway can branch on SQLSTATE first and read
//! the exact code from the message prefix (§10.1 `code`):
//!
//! | code class (§10.2 category / host code) | SQLSTATE | condition name |
//! |---|---|---|
//! | `invalid-request` | 22023 | invalid_parameter_value |
//! | `forbidden`, `scope-revoked` | 42501 | insufficient_privilege |
//! | `auth-required` | 28000 | invalid_authorization_specification |
//! | `not-found` | 42704 | undefined_object |
//! | `schema-mismatch` | 0A000 | feature_not_supported |
//! | `conflict` | 55000 | object_not_in_prerequisite_state |
//! | `reset-required` | 34000 | invalid_cursor_name |
//! | `rate-limited` | 53000 | insufficient_resources |
//! | `internal` | XX000 | internal_error |
//! | `syncular.invalid_schema` | 42P15 | invalid_schema_definition |
//! | `syncular.schema_refused`, `syncular.no_schema` | 55000 | object_not_in_prerequisite_state |
//! | `syncular.invalid_resolver`, `syncular.invalid_argument` | 22023 | invalid_parameter_value |
//! | `syncular.resolver_malformed`, `syncular.validator_malformed`, `syncular.reaction_planner_failed` | 39000 | external_routine_invocation_exception |
//! | `syncular.partition_required` | 55000 | object_not_in_prerequisite_state |
//! | `syncular.write_refused` | 0A000 | feature_not_supported |
//! | `syncular.invalid_row` | 22000 | data_exception |
//! | `syncular.response_too_large` | 54000 | program_limit_exceeded |
//! | `syncular.internal` | XX000 | internal_error |
//!
//! Every ERROR also carries the §10.1 object as JSON in its DETAIL
//! ([`detail_json`]). The same table is in docs/src/reference/errors.md.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use syncular_protocol::{Category, ErrorCode};

use crate::engine::error::{EngineError, HostCode};

/// SQLSTATE for a §10.2 category (table above).
pub fn sqlstate_for_category(category: Category) -> PgSqlErrorCode {
    match category {
        Category::InvalidRequest => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        Category::Forbidden | Category::ScopeRevoked => {
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE
        }
        Category::AuthRequired => PgSqlErrorCode::ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION,
        Category::NotFound => PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        Category::SchemaMismatch => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        Category::Conflict => PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        Category::ResetRequired => PgSqlErrorCode::ERRCODE_INVALID_CURSOR_NAME,
        Category::RateLimited => PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
        Category::Internal => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    }
}

/// SQLSTATE for a host code (table above).
pub fn sqlstate_for_host(code: HostCode) -> PgSqlErrorCode {
    match code {
        HostCode::InvalidSchema => PgSqlErrorCode::ERRCODE_INVALID_SCHEMA_DEFINITION,
        HostCode::SchemaRefused | HostCode::NoSchema => {
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
        }
        HostCode::InvalidResolver | HostCode::InvalidValidator | HostCode::InvalidArgument => {
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
        }
        HostCode::ResolverMalformed | HostCode::ValidatorMalformed | HostCode::ReactionPlannerFailed => {
            PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION
        }
        HostCode::WriteRejected => PgSqlErrorCode::ERRCODE_CHECK_VIOLATION,
        HostCode::PartitionRequired | HostCode::CitusMissing | HostCode::CitusWorker | HostCode::ObjectStoreConflict => {
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
        }
        HostCode::WriteRefused => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        HostCode::InvalidRow => PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
        HostCode::BlobPending => PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
        HostCode::ObjectStoreUnavailable => PgSqlErrorCode::ERRCODE_CANNOT_CONNECT_NOW,
        HostCode::ResponseTooLarge => PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        HostCode::Internal => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    }
}

/// SQLSTATE for an SSP2 code (its category's).
pub fn sqlstate_for_code(code: ErrorCode) -> PgSqlErrorCode {
    sqlstate_for_category(code.category())
}

/// SQLSTATE for any engine error.
pub fn sqlstate(err: &EngineError) -> PgSqlErrorCode {
    match err {
        EngineError::Protocol(e) => sqlstate_for_code(e.code),
        EngineError::Host { code, .. } => sqlstate_for_host(*code),
    }
}

/// The DETAIL of every ERROR the extension raises: the §10.1 object as JSON
/// text, `{"code","message","category","retryable","recommendedAction"}`
/// (host codes carry [`HostCode::metadata`]), so a gateway maps an error to
/// its HTTP JSON body without a copy of the §10.2 table.
pub fn detail_json(err: &EngineError) -> String {
    syncular_protocol::error_json::error_object(&err.error_frame()).to_string()
}

/// Raises `err` as a Postgres ERROR (message `"<code>: <message>"`, SQLSTATE
/// per the table above, DETAIL [`detail_json`]). Never returns: the current
/// (sub)transaction aborts, so nothing half-applied survives.
pub fn raise(err: EngineError) -> ! {
    let state = sqlstate(&err);
    let message = err.to_string();
    let detail = detail_json(&err);
    ereport!(ERROR, state, message, detail);
}

/// `result.or_raise()`: the value, or a Postgres ERROR via [`raise`].
pub trait OrRaise<T> {
    /// Unwraps or raises.
    fn or_raise(self) -> T;
}

impl<T, E: Into<EngineError>> OrRaise<T> for Result<T, E> {
    fn or_raise(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => raise(e.into()),
        }
    }
}
