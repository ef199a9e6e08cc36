//! Tests of the rows a push writes and reads without a statement
//! (`crate::store::direct`): the log rows and context probes ([`rows`]),
//! the app row's absence probe ([`app_probe`]).

mod app_probe;
mod rows;
