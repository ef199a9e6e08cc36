//! How the store talks to SPI, below every statement module: cached
//! prepared plans ([`plan_cache`]), statistics-independent generic plans for
//! the pull path ([`pinned_plan`]), reading result rows without per-value
//! SPI calls ([`result_rows`]), internal subtransactions
//! ([`subtransaction`]) and the `jsonb` host functions return ([`host_json`]).

pub mod host_json;
pub mod pinned_plan;
pub mod plan_cache;
pub mod result_rows;
pub mod subtransaction;
