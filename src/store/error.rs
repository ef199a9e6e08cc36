//! The store layer's error type: a statement that pgrx's SPI layer could not
//! run or whose result had an unexpected shape. Errors Postgres raises while
//! executing a statement (constraint violations, …) are Postgres ERRORs and
//! unwind; callers that must survive them run inside
//! [`crate::store::spi::subtransaction::run`].

use std::fmt;

/// A failed statement: which store function, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreError {
    /// The store function (statement name), e.g. `"load_schema_tables"`.
    pub statement: &'static str,
    /// What went wrong.
    pub detail: String,
}

impl StoreError {
    /// A failure of `statement` with `detail`.
    pub fn new(statement: &'static str, detail: impl Into<String>) -> Self {
        StoreError { statement, detail: detail.into() }
    }

    /// Whether this is a log write to a partition without a counter row
    /// ([`crate::store::log::MISSING_COUNTER`]): nothing was written.
    pub fn is_missing_counter(&self) -> bool {
        matches!(self.statement, "write_request_log" | "allocate_commit") && self.detail == crate::store::log::MISSING_COUNTER
    }

    /// The detail when a host function's answer was `jsonb` this extension
    /// cannot read ([`crate::store::spi::host_json`]); `None` otherwise.
    pub fn unreadable_json(&self) -> Option<&str> {
        self.detail.starts_with(crate::store::spi::host_json::UNREADABLE).then_some(self.detail.as_str())
    }

    /// Adapts a `pgrx::spi::Error` (for use with `map_err`).
    pub fn spi(statement: &'static str) -> impl FnOnce(pgrx::spi::Error) -> StoreError {
        move |e| StoreError::new(statement, e.to_string())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store statement {} failed: {}", self.statement, self.detail)
    }
}

impl std::error::Error for StoreError {}

/// Result alias of the store layer.
pub type StoreResult<T> = Result<T, StoreError>;
