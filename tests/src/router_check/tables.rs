//! Which relations are distributed, reference, catalog or something else —
//! the Citus layout of issue 14.

/// The `syncular` tables distributed on column `partition`.
pub const DISTRIBUTED: &[&str] = &[
    "sync_partitions",
    "sync_partition_registry",
    "sync_row_scopes",
    "sync_commits",
    "sync_changes",
    "sync_change_scopes",
    "sync_push_results",
    "sync_reactions",
    "sync_clients",
    "sync_blob_refs",
    "sync_tombstones",
    "sync_auth_leases",
    "sync_blobs",
    "sync_blob_chunks",
    "sync_segments",
    "sync_segment_chunks",
    "sync_segment_publications",
    "sync_round_failures",
];

/// The `syncular` reference tables (replicated to every node: no predicate needed).
pub const REFERENCE: &[&str] = &[
    "sync_schema_versions",
    "sync_schema_tables",
    "sync_scope_resolver",
    "sync_write_validators",
    "sync_commit_validator",
    "sync_reaction_planner",
    "sync_notification_key",
    "sync_lease_key",
    "sync_segment_url_keys",
];

/// Distribution column of the `sync_*` tables.
pub const SYNC_PARTITION_COLUMN: &str = "partition";
/// Distribution column of the app tables.
pub const APP_PARTITION_COLUMN: &str = "_sync_partition";

/// What a relation named in a statement is under Citus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// Hash-distributed on `column`: every reference must be pinned to one partition.
    Distributed { column: String },
    /// Reference table: replicated, allowed anywhere.
    Reference,
    /// `pg_catalog.*` / `information_schema.*`: coordinator-local metadata, allowed anywhere.
    Catalog,
    /// A `sync_*` name in schema `syncular` that the layout does not know (a new table must be
    /// classified here before it can be checked).
    UnknownSync,
    /// Anything else (a local table, a temp table).
    Other,
}

/// The layout the checker classifies relation names against: the fixed `syncular` tables
/// plus the registered app tables (`syncular.sync_schema_tables.app_schema/app_table`).
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// `(schema, table)` of every registered app table.
    pub app_tables: Vec<(String, String)>,
}

impl Layout {
    /// The layout with the given app tables.
    pub fn new(app_tables: Vec<(String, String)>) -> Self {
        Layout { app_tables }
    }

    /// Classifies `schema.relname` (`schema` empty when unqualified: resolved as the extension
    /// does, `syncular` for `sync_*` names and any app schema for app tables).
    pub fn classify(&self, schema: &str, relname: &str) -> TableKind {
        let in_schema = |s: &str| schema.is_empty() || schema == s;
        if schema == "pg_catalog" || schema == "information_schema" || (schema.is_empty() && relname.starts_with("pg_")) {
            return TableKind::Catalog;
        }
        if in_schema("syncular") {
            if DISTRIBUTED.contains(&relname) {
                return TableKind::Distributed { column: SYNC_PARTITION_COLUMN.to_owned() };
            }
            if REFERENCE.contains(&relname) {
                return TableKind::Reference;
            }
        }
        if self.app_tables.iter().any(|(s, t)| t == relname && in_schema(s)) {
            return TableKind::Distributed { column: APP_PARTITION_COLUMN.to_owned() };
        }
        if (schema == "syncular" || schema.is_empty()) && relname.starts_with("sync_") {
            return TableKind::UnknownSync;
        }
        TableKind::Other
    }
}
