//! The client schema IR (§2.4, §3.1, §5.10.1, §5.11) — the JSON shape the
//! published `syncular-client` 0.15.48 reads (`SchemaIr`) — parsed with serde
//! and compiled into a validated [`Schema`] the engine serves from.
//!
//! JSON shape ([`SchemaIr`]):
//! ```json
//! {"version": 1, "tables": [{
//!    "name": "tasks", "primaryKey": "id",
//!    "columns": [{"name": "id", "type": "string", "nullable": false},
//!                {"name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"},
//!                {"name": "secret", "type": "bytes", "nullable": true,
//!                 "encrypted": true, "declaredType": "string"}],
//!    "scopes": [{"pattern": "ws:{workspace_id}", "column": "workspace_id"}],
//!    "indexes": [{"name": "tasks_by_title", "columns": ["title"], "unique": false}],
//!    "ftsIndexes": [{"name": "tasks_fts", "columns": ["title"], "tokenize": "unicode61"}]}]}
//! ```
//! (`schemaVersion` is accepted as an alias of `version`; a scope may also be
//! written as a bare pattern string; `indexes` / `ftsIndexes` default to
//! empty; unknown keys are ignored, as the client does.)
//!
//! [`Schema::compile`] enforces, with a message naming table and column:
//! - `version` ≥ 1; at least one table;
//! - identifiers (tables, columns, indexes, FTS projections) non-empty, at
//!   most 63 UTF-8 bytes, no NUL, not starting with `sync_` / `_sync` in any
//!   case (the reference server's portable-identifier rule); table, index and
//!   FTS names unique across the schema (one relational namespace); column
//!   names unique per table;
//! - column `type` one of the eight §2.4 names; `crdtType` present (non-empty)
//!   exactly on `crdt` columns; `encrypted: true` only with `type = bytes`
//!   and a valid `declaredType`; `declaredType` only on encrypted columns;
//! - the primary key names a column that is non-nullable, `string` or
//!   `integer` (it renders as the `rowId` string, §2.2), and not encrypted;
//! - ≥ 1 scope pattern per table (§3.1), each `prefix:{variable}` with exactly
//!   one variable (non-empty prefix, no braces, no `:` in the variable); the
//!   scope column (defaults to the variable) exists, is `string`, not
//!   `crdt`, not encrypted (§5.11); a variable never maps to two columns;
//! - indexes name ≥ 1 existing column, none twice; FTS projections name 1–32
//!   distinct string columns (encrypted ones only with `declaredType =
//!   string`) and an allowlisted tokenizer (§2.4).
//!
//! Every failure is `sync.invalid_request` (the IR is refused before serving).

use crate::errors::{ProtocolError, Result};
use crate::row_codec::{ColumnLayout, ColumnType, Row, RowValue, TableLayout};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Longest identifier in UTF-8 bytes (Postgres truncates beyond 63).
pub const MAX_IDENTIFIER_BYTES: usize = 63;
/// The FTS5 tokenizers a projection may name (§2.4 allowlist).
pub const FTS_TOKENIZERS: [&str; 6] = [
    "unicode61",
    "unicode61 remove_diacritics 0",
    "unicode61 remove_diacritics 1",
    "unicode61 remove_diacritics 2",
    "porter unicode61",
    "trigram",
];

/// Raw IR document, exactly as serialized (`camelCase` keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemaIr {
    /// Schema version (≥ 1); `schemaVersion` accepted as an alias.
    #[serde(alias = "schemaVersion")]
    pub version: i32,
    /// Tables in declaration (bootstrap) order.
    pub tables: Vec<TableIr>,
}

/// One table of the raw IR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableIr {
    /// Table name (portable identifier).
    pub name: String,
    /// `primaryKey`: the primary-key column name.
    pub primary_key: String,
    /// Columns in declaration (wire) order.
    pub columns: Vec<ColumnIr>,
    /// §3.1 scope patterns (≥ 1).
    pub scopes: Vec<ScopePatternIr>,
    /// Declared secondary indexes (default empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<IndexIr>,
    /// `ftsIndexes`: client-local FTS5 projections (default empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fts_indexes: Vec<FtsIndexIr>,
    /// Reference-server materialization flag (optional; unset = default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub materialize: Option<bool>,
}

/// One column of the raw IR; `type` is the wire type name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColumnIr {
    /// Column name (portable identifier).
    pub name: String,
    /// `type`: one of the eight §2.4 names.
    #[serde(rename = "type")]
    pub column_type: String,
    /// May the column be NULL?
    pub nullable: bool,
    /// §5.11: ciphertext on the wire (`type` must be `bytes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypted: bool,
    /// `declaredType`: §5.11 app-side type of an encrypted column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_type: Option<String>,
    /// `crdtType`: §5.10.1 merger name, required on `crdt` columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crdt_type: Option<String>,
}

/// A scope declaration: `"prefix:{var}"` or `{"pattern", "column"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "ScopeSpec", into = "ScopeSpecOut")]
pub struct ScopePatternIr {
    /// `prefix:{variable}`.
    pub pattern: String,
    /// Scope column; `None` = the variable name.
    pub column: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScopeSpec {
    Bare(String),
    Full {
        pattern: String,
        #[serde(default)]
        column: Option<String>,
    },
}

#[derive(Serialize)]
struct ScopeSpecOut {
    pattern: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<String>,
}

impl From<ScopeSpec> for ScopePatternIr {
    fn from(s: ScopeSpec) -> Self {
        match s {
            ScopeSpec::Bare(pattern) => ScopePatternIr { pattern, column: None },
            ScopeSpec::Full { pattern, column } => ScopePatternIr { pattern, column },
        }
    }
}

impl From<ScopePatternIr> for ScopeSpecOut {
    fn from(s: ScopePatternIr) -> Self {
        ScopeSpecOut { pattern: s.pattern, column: s.column }
    }
}

/// A declared secondary index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexIr {
    /// Index name (portable identifier, unique across the schema).
    pub name: String,
    /// Indexed columns, in order (≥ 1, no repeats).
    pub columns: Vec<String>,
    /// UNIQUE index?
    #[serde(default)]
    pub unique: bool,
}

/// A client-local FTS5 projection (client-only metadata, §2.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FtsIndexIr {
    /// Projection name (portable identifier, unique across the schema).
    pub name: String,
    /// 1–32 distinct string columns.
    pub columns: Vec<String>,
    /// One of [`FTS_TOKENIZERS`].
    pub tokenize: String,
}

/// A validated column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSchema {
    /// Column name.
    pub name: String,
    /// Wire type (`bytes` for an encrypted column).
    pub ty: ColumnType,
    /// May the column be NULL?
    pub nullable: bool,
    /// §5.11: ciphertext envelope on the wire; the server never decrypts.
    pub encrypted: bool,
    /// §5.11: the app-side type of an encrypted column.
    pub declared_type: Option<ColumnType>,
    /// §5.10.1: merger name, present exactly on `crdt` columns.
    pub crdt_type: Option<String>,
}

/// A compiled §3.1 scope pattern: scope key = `prefix + ":" + value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopePattern {
    /// The declared pattern text, e.g. `"ws:{workspace_id}"`.
    pub pattern: String,
    /// Literal prefix before `:{`, e.g. `"ws"`.
    pub prefix: String,
    /// The variable, e.g. `"workspace_id"`.
    pub variable: String,
    /// The scope column (defaults to the variable).
    pub column: String,
    /// Position of the scope column in the table layout.
    pub column_index: usize,
}

impl ScopePattern {
    /// Splits `prefix:{variable}` (non-empty prefix without braces; variable
    /// non-empty without braces or `:`). Errors: `sync.invalid_request`.
    pub fn split(pattern: &str) -> Result<(&str, &str)> {
        let bad = || {
            ProtocolError::invalid(format!(
                "scope pattern {pattern:?} must be 'prefix:{{variable}}' with exactly one variable (§3.1)"
            ))
        };
        let body = pattern.strip_suffix('}').ok_or_else(bad)?;
        let (prefix, variable) = body.split_once(":{").ok_or_else(bad)?;
        if prefix.is_empty()
            || variable.is_empty()
            || prefix.contains(['{', '}'])
            || variable.contains(['{', '}', ':'])
        {
            return Err(bad());
        }
        Ok((prefix, variable))
    }

    /// The stored-scope index key for a value: `prefix:value` (§3.1).
    pub fn scope_key(&self, value: &str) -> String {
        format!("{}:{}", self.prefix, value)
    }
}

/// A validated table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    /// Table name.
    pub name: String,
    /// Validated columns in declaration order.
    pub columns: Vec<ColumnSchema>,
    /// Primary-key column name.
    pub primary_key: String,
    /// Position of the primary key in the layout.
    pub primary_key_index: usize,
    /// Scope patterns in declaration order.
    pub scopes: Vec<ScopePattern>,
    /// Declared secondary indexes (validated).
    pub indexes: Vec<IndexIr>,
    /// Client-local FTS5 projections (validated; never server tables).
    pub fts_indexes: Vec<FtsIndexIr>,
    /// Reference-server materialization flag, as declared.
    pub materialize: Option<bool>,
    layout: TableLayout,
}

impl TableSchema {
    /// The wire layout (declaration order, wire tag, nullable) the row codec
    /// and the SSG2 column table use.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }

    /// Position of a column by name.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.layout.index_of(name)
    }

    /// Declared scope variables, sorted and unique.
    pub fn variables(&self) -> BTreeSet<&str> {
        self.scopes.iter().map(|s| s.variable.as_str()).collect()
    }

    /// The pattern declaring `variable` (the first, if several share it).
    pub fn scope(&self, variable: &str) -> Option<&ScopePattern> {
        self.scopes.iter().find(|s| s.variable == variable)
    }

    /// `rowId` rendering of the primary key (§2.2): a `string` as itself, an
    /// `integer` in decimal; `None` when the slot is NULL or mistyped.
    pub fn row_id(&self, row: &Row) -> Option<String> {
        match row.get(self.primary_key_index)? {
            Some(RowValue::String(s)) => Some(s.clone()),
            Some(RowValue::Integer(n)) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The stored scopes of a row (§3.1): variable → value for every
    /// declared variable, sorted by variable. `None` for a variable whose
    /// column is NULL (the caller decides: `sync.forbidden` on the write path
    /// §3.4, `sync.missing_scopes` when emitting a change §3.1).
    pub fn stored_scopes<'r>(&self, row: &'r Row) -> BTreeMap<&str, Option<&'r str>> {
        self.scopes
            .iter()
            .map(|s| {
                let v = row.get(s.column_index).and_then(|v| v.as_ref()).and_then(RowValue::as_str);
                (s.variable.as_str(), v)
            })
            .collect()
    }
}

/// A validated schema: what the engine serves for one `schemaVersion`.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    /// The schema version this IR describes (≥ 1).
    pub version: i32,
    /// Tables in declaration (bootstrap) order.
    pub tables: Vec<TableSchema>,
    /// The raw IR it was compiled from (for storage / re-serialization).
    pub ir: SchemaIr,
}

impl Schema {
    /// Parses and compiles IR JSON text. Errors: `sync.invalid_request`.
    pub fn parse(json: &str) -> Result<Schema> {
        let ir: SchemaIr = serde_json::from_str(json)
            .map_err(|e| ProtocolError::invalid(format!("schema IR: {e}")))?;
        Schema::compile(ir)
    }

    /// Parses and compiles an IR JSON value. Errors: `sync.invalid_request`.
    pub fn from_value(v: &serde_json::Value) -> Result<Schema> {
        let ir = SchemaIr::deserialize(v)
            .map_err(|e| ProtocolError::invalid(format!("schema IR: {e}")))?;
        Schema::compile(ir)
    }

    /// Validates the IR (rules in the module docs) and compiles it.
    /// Errors: `sync.invalid_request` naming the offending table / column.
    pub fn compile(ir: SchemaIr) -> Result<Schema> {
        if ir.version < 1 {
            return Err(ProtocolError::invalid(format!(
                "schema IR: version must be >= 1, got {}",
                ir.version
            )));
        }
        if ir.tables.is_empty() {
            return Err(ProtocolError::invalid("schema IR: no tables"));
        }
        let mut objects: BTreeSet<&str> = BTreeSet::new();
        for t in &ir.tables {
            identifier("table", &t.name)?;
            if !objects.insert(&t.name) {
                return Err(ProtocolError::invalid(format!(
                    "schema IR: duplicate table or schema object {:?}",
                    t.name
                )));
            }
        }
        let mut tables = Vec::with_capacity(ir.tables.len());
        for t in &ir.tables {
            tables.push(compile_table(t, &mut objects)?);
        }
        Ok(Schema { version: ir.version, tables, ir })
    }

    /// The table called `name`.
    pub fn table(&self, name: &str) -> Option<&TableSchema> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Union of the variables declared by any table — the key set allowed
    /// scopes are validated against (§3.2 rule 3).
    pub fn declared_variables(&self) -> BTreeSet<&str> {
        self.tables.iter().flat_map(|t| t.scopes.iter().map(|s| s.variable.as_str())).collect()
    }

    /// The IR as JSON (camelCase keys, the shape [`Schema::parse`] reads).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.ir).unwrap_or(serde_json::Value::Null)
    }

    /// Checks every `crdtType` against the mergers the server has (§5.10.1:
    /// an unknown one is a compile-time server bug). Errors:
    /// `sync.invalid_request` naming the column.
    pub fn check_crdt_types(&self, known: &[&str]) -> Result<()> {
        for t in &self.tables {
            for c in &t.columns {
                if let Some(ct) = &c.crdt_type {
                    if !known.contains(&ct.as_str()) {
                        return Err(ProtocolError::invalid(format!(
                            "schema IR: table {:?}: crdt column {:?} names unknown crdtType {ct:?} (known: {known:?})",
                            t.name, c.name
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The portable identifier rule: non-empty, ≤ 63 UTF-8 bytes, no NUL, no
/// `sync_` / `_sync` prefix in any case. Errors: `sync.invalid_request`.
pub fn identifier(kind: &str, name: &str) -> Result<()> {
    let why = if name.is_empty() {
        Some("is empty")
    } else if name.len() > MAX_IDENTIFIER_BYTES {
        Some("exceeds 63 UTF-8 bytes")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else {
        let lower = name.to_ascii_lowercase();
        (lower.starts_with("sync_") || lower.starts_with("_sync"))
            .then_some("uses the reserved sync_/_sync prefix")
    };
    match why {
        Some(w) => Err(ProtocolError::invalid(format!("schema IR: {kind} name {name:?} {w}"))),
        None => Ok(()),
    }
}

fn compile_table<'a>(t: &'a TableIr, objects: &mut BTreeSet<&'a str>) -> Result<TableSchema> {
    let err = |m: String| ProtocolError::invalid(format!("schema IR: table {:?}: {m}", t.name));
    if t.columns.is_empty() {
        return Err(err("has no columns".into()));
    }
    let mut columns = Vec::with_capacity(t.columns.len());
    let mut seen = BTreeSet::new();
    for c in &t.columns {
        identifier(&format!("table {:?}: column", t.name), &c.name)?;
        if !seen.insert(c.name.as_str()) {
            return Err(err(format!("duplicate column {:?}", c.name)));
        }
        let ty = ColumnType::from_name(&c.column_type).ok_or_else(|| {
            err(format!(
                "column {:?} has unknown type {:?} (one of string, integer, float, boolean, json, bytes, blob_ref, crdt)",
                c.name, c.column_type
            ))
        })?;
        let crdt_type = match (&c.crdt_type, ty) {
            (Some(ct), ColumnType::Crdt) if !ct.is_empty() => Some(ct.clone()),
            (_, ColumnType::Crdt) => {
                return Err(err(format!("crdt column {:?} must declare a crdtType (§5.10.1)", c.name)))
            }
            (Some(_), _) => {
                return Err(err(format!("column {:?}: crdtType is only valid on crdt columns", c.name)))
            }
            (None, _) => None,
        };
        let declared_type = match (&c.declared_type, c.encrypted) {
            (Some(d), true) => {
                if ty != ColumnType::Bytes {
                    return Err(err(format!(
                        "encrypted column {:?} must have wire type bytes (§5.11)",
                        c.name
                    )));
                }
                let d = ColumnType::from_name(d).ok_or_else(|| {
                    err(format!("encrypted column {:?} has unknown declaredType {d:?}", c.name))
                })?;
                if d == ColumnType::Crdt {
                    return Err(err(format!("encrypted column {:?} cannot be crdt (§5.11)", c.name)));
                }
                Some(d)
            }
            (None, true) => {
                return Err(err(format!("encrypted column {:?} has no declaredType (§5.11)", c.name)))
            }
            (Some(_), false) => {
                return Err(err(format!(
                    "column {:?}: declaredType is only valid with encrypted: true",
                    c.name
                )))
            }
            (None, false) => None,
        };
        columns.push(ColumnSchema {
            name: c.name.clone(),
            ty,
            nullable: c.nullable,
            encrypted: c.encrypted,
            declared_type,
            crdt_type,
        });
    }
    let layout = TableLayout::new(
        columns.iter().map(|c| ColumnLayout::new(c.name.clone(), c.ty, c.nullable)).collect(),
    );
    let pk = layout
        .index_of(&t.primary_key)
        .ok_or_else(|| err(format!("primary key {:?} is not a column", t.primary_key)))?;
    let pkc = &columns[pk];
    if pkc.encrypted {
        return Err(err(format!("primary key {:?} cannot be encrypted (§5.11)", pkc.name)));
    }
    if !matches!(pkc.ty, ColumnType::String | ColumnType::Integer) {
        return Err(err(format!(
            "primary key {:?} must be string or integer (it renders as rowId, §2.2), not {}",
            pkc.name,
            pkc.ty.name()
        )));
    }
    if pkc.nullable {
        return Err(err(format!("primary key {:?} must not be nullable", pkc.name)));
    }

    if t.scopes.is_empty() {
        return Err(err("every synced table declares at least one scope pattern (§3.1)".into()));
    }
    let mut scopes: Vec<ScopePattern> = Vec::with_capacity(t.scopes.len());
    for s in &t.scopes {
        let (prefix, variable) = ScopePattern::split(&s.pattern).map_err(|e| err(e.message))?;
        let column = s.column.clone().unwrap_or_else(|| variable.to_owned());
        let ci = layout.index_of(&column).ok_or_else(|| {
            err(format!("scope pattern {:?} names unknown column {column:?}", s.pattern))
        })?;
        let c = &columns[ci];
        if c.encrypted {
            return Err(err(format!("scope column {column:?} cannot be encrypted (§5.11)")));
        }
        if c.ty != ColumnType::String {
            return Err(err(format!(
                "scope column {column:?} must be a string column, not {} (§3.1)",
                c.ty.name()
            )));
        }
        if let Some(other) = scopes.iter().find(|o| o.variable == variable && o.column != column) {
            return Err(err(format!(
                "variable {variable:?} maps to two different columns ({:?} and {column:?}) (§3.1)",
                other.column
            )));
        }
        scopes.push(ScopePattern {
            pattern: s.pattern.clone(),
            prefix: prefix.to_owned(),
            variable: variable.to_owned(),
            column,
            column_index: ci,
        });
    }

    for ix in &t.indexes {
        identifier(&format!("table {:?}: index", t.name), &ix.name)?;
        if !objects.insert(&ix.name) {
            return Err(err(format!("index {:?} conflicts with another schema object", ix.name)));
        }
        if ix.columns.is_empty() {
            return Err(err(format!("index {:?} must name at least one column", ix.name)));
        }
        let mut cs = BTreeSet::new();
        for c in &ix.columns {
            if layout.index_of(c).is_none() {
                return Err(err(format!("index {:?} names unknown column {c:?}", ix.name)));
            }
            if !cs.insert(c) {
                return Err(err(format!("index {:?} repeats column {c:?}", ix.name)));
            }
        }
    }
    for fx in &t.fts_indexes {
        identifier(&format!("table {:?}: FTS projection", t.name), &fx.name)?;
        if !objects.insert(&fx.name) {
            return Err(err(format!("FTS projection {:?} conflicts with another schema object", fx.name)));
        }
        if fx.columns.is_empty() || fx.columns.len() > 32 {
            return Err(err(format!("FTS projection {:?} needs between 1 and 32 columns", fx.name)));
        }
        let mut cs = BTreeSet::new();
        for c in &fx.columns {
            if !cs.insert(c) {
                return Err(err(format!("FTS projection {:?} repeats column {c:?}", fx.name)));
            }
            let col = layout
                .index_of(c)
                .map(|i| &columns[i])
                .ok_or_else(|| err(format!("FTS projection {:?} names unknown column {c:?}", fx.name)))?;
            let app_ty = col.declared_type.unwrap_or(col.ty);
            if app_ty != ColumnType::String {
                return Err(err(format!(
                    "FTS projection {:?} column {c:?} must have string type",
                    fx.name
                )));
            }
        }
        if !FTS_TOKENIZERS.contains(&fx.tokenize.as_str()) {
            return Err(err(format!(
                "FTS projection {:?} tokenizer {:?} is not allowlisted",
                fx.name, fx.tokenize
            )));
        }
    }

    Ok(TableSchema {
        name: t.name.clone(),
        columns,
        primary_key: t.primary_key.clone(),
        primary_key_index: pk,
        scopes,
        indexes: t.indexes.clone(),
        fts_indexes: t.fts_indexes.clone(),
        materialize: t.materialize,
        layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> serde_json::Value {
        json!({"version": 1, "tables": [{
            "name": "tasks", "primaryKey": "id",
            "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "workspace_id", "type": "string", "nullable": false},
                {"name": "title", "type": "string", "nullable": true},
                {"name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"},
                {"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "string"}
            ],
            "scopes": [{"pattern": "ws:{workspace_id}"}],
            "indexes": [{"name": "tasks_title", "columns": ["title"], "unique": false}]
        }]})
    }

    fn err_of(v: serde_json::Value) -> String {
        Schema::from_value(&v).unwrap_err().message
    }

    #[test]
    fn compiles_layout_scopes_and_defaults() {
        let s = Schema::from_value(&base()).unwrap();
        let t = s.table("tasks").unwrap();
        assert_eq!(t.primary_key_index, 0);
        assert_eq!(t.scopes[0].column, "workspace_id");
        assert_eq!(t.scopes[0].prefix, "ws");
        assert_eq!(t.scopes[0].column_index, 1);
        assert_eq!(t.scopes[0].scope_key("w1"), "ws:w1");
        let l = t.layout();
        assert_eq!(l.columns[3].ty, ColumnType::Crdt);
        assert_eq!(l.columns[4].ty, ColumnType::Bytes);
        assert_eq!(t.columns[4].declared_type, Some(ColumnType::String));
        assert_eq!(s.declared_variables().into_iter().collect::<Vec<_>>(), vec!["workspace_id"]);
        // Round trip through JSON keeps the IR.
        let again = Schema::from_value(&s.to_json()).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn accepts_bare_pattern_and_schema_version_alias() {
        let mut v = base();
        v["schemaVersion"] = v["version"].take();
        v.as_object_mut().unwrap().remove("version");
        v["tables"][0]["scopes"] = json!(["ws:{workspace_id}"]);
        let s = Schema::from_value(&v).unwrap();
        assert_eq!(s.version, 1);
        assert_eq!(s.tables[0].scopes[0].variable, "workspace_id");
    }

    #[test]
    fn rejects_each_rule_with_a_clear_message() {
        type Mutate = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(Mutate, &str)> = vec![
            (Box::new(|v| v["tables"][0]["scopes"] = json!([])), "at least one scope pattern"),
            (Box::new(|v| v["tables"][0]["scopes"] = json!(["ws:{a}{b}"])), "exactly one variable"),
            (Box::new(|v| v["tables"][0]["scopes"] = json!(["ws:workspace_id"])), "exactly one variable"),
            (Box::new(|v| v["tables"][0]["scopes"] = json!(["{workspace_id}"])), "exactly one variable"),
            (Box::new(|v| v["tables"][0]["scopes"] = json!(["ws:{nope}"])), "unknown column \"nope\""),
            (
                Box::new(|v| {
                    v["tables"][0]["scopes"] = json!(["ws:{workspace_id}", {"pattern": "x:{workspace_id}", "column": "title"}])
                }),
                "maps to two different columns",
            ),
            (
                Box::new(|v| v["tables"][0]["scopes"] = json!([{"pattern": "d:{d}", "column": "doc"}])),
                "must be a string column",
            ),
            (
                Box::new(|v| v["tables"][0]["scopes"] = json!([{"pattern": "s:{s}", "column": "secret"}])),
                "cannot be encrypted",
            ),
            (Box::new(|v| v["tables"][0]["primaryKey"] = json!("missing")), "primary key \"missing\" is not a column"),
            (Box::new(|v| v["tables"][0]["primaryKey"] = json!("title")), "must not be nullable"),
            (Box::new(|v| v["tables"][0]["columns"][2]["type"] = json!("text")), "unknown type \"text\""),
            (Box::new(|v| v["tables"][0]["columns"][2]["name"] = json!("id")), "duplicate column"),
            (Box::new(|v| v["tables"][0]["columns"][2]["name"] = json!("_sync_x")), "reserved"),
            (Box::new(|v| v["tables"][0]["name"] = json!("Sync_log")), "reserved"),
            (Box::new(|v| v["tables"][0]["columns"][2]["name"] = json!("x".repeat(64))), "63"),
            (Box::new(|v| v["tables"][0]["columns"][2]["name"] = json!("")), "is empty"),
            (Box::new(|v| { v["tables"][0]["columns"][3].as_object_mut().unwrap().remove("crdtType"); }), "crdtType"),
            (Box::new(|v| v["tables"][0]["columns"][2]["crdtType"] = json!("yjs-doc")), "only valid on crdt"),
            (Box::new(|v| v["tables"][0]["columns"][4]["type"] = json!("string")), "wire type bytes"),
            (Box::new(|v| { v["tables"][0]["columns"][4].as_object_mut().unwrap().remove("declaredType"); }), "no declaredType"),
            (Box::new(|v| v["tables"][0]["indexes"][0]["columns"] = json!(["zzz"])), "unknown column \"zzz\""),
            (Box::new(|v| v["tables"][0]["indexes"][0]["name"] = json!("tasks")), "conflicts"),
            (Box::new(|v| v["tables"][0]["indexes"][0]["columns"] = json!([])), "at least one column"),
            (Box::new(|v| v["version"] = json!(0)), "version must be >= 1"),
        ];
        for (mutate, needle) in cases {
            let mut v = base();
            mutate(&mut v);
            let msg = err_of(v.clone());
            assert!(msg.contains(needle), "expected {needle:?} in {msg:?} for {v}");
        }
    }

    #[test]
    fn row_helpers_extract_row_id_and_stored_scopes() {
        let s = Schema::from_value(&base()).unwrap();
        let t = &s.tables[0];
        let row: Row = vec![
            Some(RowValue::String("t1".into())),
            Some(RowValue::String("w1".into())),
            None,
            None,
            None,
        ];
        assert_eq!(t.row_id(&row).as_deref(), Some("t1"));
        let sc = t.stored_scopes(&row);
        assert_eq!(sc.get("workspace_id"), Some(&Some("w1")));
    }

    #[test]
    fn crdt_type_check_names_unknown_merger() {
        let s = Schema::from_value(&base()).unwrap();
        assert!(s.check_crdt_types(&["yjs-doc"]).is_ok());
        let e = s.check_crdt_types(&["other"]).unwrap_err();
        assert!(e.message.contains("unknown crdtType \"yjs-doc\""));
    }
}
