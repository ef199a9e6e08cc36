//! `#[pg_test]`s, one file per concern.
