//! `sync_*` rows written and read without a statement (DESIGN §4; issue 29):
//! on a single-row push, plan look-ups and executor start-up cost more than
//! the rows themselves.
//!
//! - [`insert`]: a heap tuple and its index entries through the executor's
//!   own routines — `simple_table_tuple_insert` and `ExecInsertIndexTuples`,
//!   as logical replication's apply worker does (the push's log rows);
//! - [`read`]: primary-key probes through the index access method (the
//!   request's context, the log's "is it already there" checks);
//! - [`app_probe`]: whether a pushed row is absent from its app table (the
//!   only read of an app table made without a statement).
//!
//! Writes and the [`read`] probes only for `sync_*` tables the extension owns, which carry no triggers,
//! rules, CHECK constraints, generated columns, partitions or row-level
//! security (the seed's DDL): what the executor would add for those is
//! nothing here. Never under Citus (`syncular.router_statements`, or the
//! `citus` library loaded): a distributed table's rows live on its shards,
//! not in the coordinator's relation ([`available`]); the statement forms
//! are used there.

pub mod app_probe;
pub mod insert;
pub mod read;

use std::ffi::CStr;

use pgrx::pg_sys;

pub use insert::Inserter;
pub use read::{exists, first, first_in, Key, Row, Snapshot};

/// Whether `sync_*` rows may be written and read directly in this backend: not under
/// `syncular.router_statements`, and not when the `citus` library is in
/// `shared_preload_libraries` (its tables may be distributed even before
/// `syncular.distribute()` turned the setting on).
pub fn available() -> bool {
    !crate::settings::router_statements() && !citus_preloaded()
}

fn citus_preloaded() -> bool {
    thread_local! {
        static CITUS: bool = {
            // SAFETY: reads a GUC's current value by name (a static string
            // or NULL); missing_ok = true.
            let value = unsafe { pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false) };
            !value.is_null() && unsafe { CStr::from_ptr(value) }.to_string_lossy().to_ascii_lowercase().contains("citus")
        };
    }
    CITUS.with(|c| *c)
}

/// `text` as a `text` datum (palloc'd in the current memory context).
pub fn text(value: &str) -> pg_sys::Datum {
    bytea(value.as_bytes())
}

/// `bytes` as a `bytea` datum (palloc'd in the current memory context; a
/// `text` datum has the same layout).
pub fn bytea(bytes: &[u8]) -> pg_sys::Datum {
    let len = i32::try_from(bytes.len()).unwrap_or_else(|_| pgrx::error!("syncular.internal: a log value over 1 GB"));
    // SAFETY: copies `len` bytes from a live slice into a new varlena.
    unsafe { pg_sys::Datum::from(pg_sys::cstring_to_text_with_len(bytes.as_ptr().cast(), len)) }
}

/// JSON text as a `jsonb` datum, through `jsonb_in` (what a `::jsonb` cast
/// runs; its errors are the cast's: 22P02 for text that is not JSON).
pub fn jsonb(json: &str) -> pg_sys::Datum {
    let c = std::ffi::CString::new(json).unwrap_or_else(|_| pgrx::error!("syncular.internal: JSON text with a NUL byte"));
    // SAFETY: jsonb_in reads a NUL-terminated string and returns a palloc'd jsonb.
    unsafe { pgrx::fcinfo::direct_function_call_as_datum(|f| pg_sys::jsonb_in(f), &[Some(pg_sys::Datum::from(c.as_ptr()))]) }
        .unwrap_or_else(|| pgrx::error!("syncular.internal: jsonb_in returned NULL"))
}

/// An `int8`, `int4` or `int2` value as its by-value datum.
pub fn int(value: i64) -> pg_sys::Datum {
    pg_sys::Datum::from(value)
}


/// Opens `syncular.<name>` (a table or an index, checked: [`check_plain`])
/// with `lock`, held to the transaction's end as a statement's would be. The Oid is resolved once per
/// backend and kept; a kept one is used only when the relation it opens is
/// still `syncular.<name>` (after `DROP EXTENSION`/`CREATE EXTENSION` the
/// name is resolved again). Errors (Postgres ERROR): it does not exist (a
/// catalog older than the library).
fn open_relation(name: &'static CStr, lock: pg_sys::LOCKMODE) -> pg_sys::Relation {
    let rel = open_by_name(name, lock);
    check_plain(name, rel);
    rel
}

/// Refuses (Postgres ERROR, `syncular.internal`) a `syncular.<name>` that is
/// not what the extension created — an ordinary table without triggers,
/// rules or row security, or a B-tree index: rows written or read without a
/// statement would skip what those add (or, for another relation kind, not
/// be stored at all).
fn check_plain(name: &CStr, rel: pg_sys::Relation) {
    // SAFETY: the relcache entry of a relation this backend holds open.
    let (kind, triggers, rules, security) = unsafe {
        let form = (*rel).rd_rel;
        ((*form).relkind as u8, (*form).relhastriggers, (*form).relhasrules, (*form).relrowsecurity)
    };
    let plain = match kind {
        b'r' => !triggers && !rules && !security,
        b'i' => true,
        _ => false,
    };
    if !plain {
        pgrx::error!(
            "syncular.internal: syncular.{} is not the plain table or index the extension created \
             (another relation kind, or triggers, rules or row security were added): the push writes \
             and reads its rows without statements — remove them",
            name.to_string_lossy()
        );
    }
}

fn open_by_name(name: &'static CStr, lock: pg_sys::LOCKMODE) -> pg_sys::Relation {
    thread_local! {
        static OIDS: std::cell::RefCell<std::collections::HashMap<&'static CStr, (pg_sys::Oid, pg_sys::Oid)>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    if let Some((oid, nsp)) = OIDS.with(|o| o.borrow().get(name).copied()) {
        if let Some(rel) = reopen(oid, nsp, name.to_bytes(), lock) {
            return rel;
        }
    }
    // SAFETY: catalog look-ups by name (missing_ok = false raises for the schema).
    let (oid, nsp) = unsafe {
        let nsp = pg_sys::get_namespace_oid(c"syncular".as_ptr(), false);
        (pg_sys::get_relname_relid(name.as_ptr(), nsp), nsp)
    };
    if oid == pg_sys::InvalidOid {
        pgrx::error!("syncular.internal: relation syncular.{} does not exist", name.to_string_lossy());
    }
    OIDS.with(|o| o.borrow_mut().insert(name, (oid, nsp)));
    // SAFETY: an Oid the catalog just named.
    unsafe { pg_sys::relation_open(oid, lock) }
}

/// Opens the kept Oid `oid` with `lock` when it still is relation `name` in
/// namespace `nsp` (a relation dropped and recreated has a new Oid, and an
/// Oid may be reused by another relation); `None` otherwise, with nothing
/// left open. For the Oids kept per backend here and in [`app_probe`].
fn reopen(oid: pg_sys::Oid, nsp: pg_sys::Oid, name: &[u8], lock: pg_sys::LOCKMODE) -> Option<pg_sys::Relation> {
    // SAFETY: try_relation_open returns NULL for an Oid that no longer
    // exists; the name and namespace are read from the open relation's
    // relcache entry, and a relation that does not match is closed.
    unsafe {
        let rel = pg_sys::try_relation_open(oid, lock);
        if rel.is_null() {
            return None;
        }
        let form = (*rel).rd_rel;
        if (*form).relnamespace == nsp && CStr::from_ptr((*form).relname.data.as_ptr()).to_bytes() == name {
            return Some(rel);
        }
        pg_sys::relation_close(rel, lock);
        None
    }
}
