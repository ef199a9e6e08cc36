//! Whether an app row is absent, without a statement (issue 29): a push that
//! inserts a new row otherwise reads it first (`SELECT … FOR NO KEY UPDATE`,
//! [`crate::store::app_rows::select_app_row`]) only to learn it is not there.
//!
//! One descent of the app table's unique index on `(_sync_partition,
//! _sync_row_id)` under a statement snapshot ([`super::read::Snapshot`]):
//! - not found: the row is absent — the read would have returned nothing
//!   (it sees no more than this snapshot, and locks nothing when it finds
//!   nothing), so it is skipped;
//! - found, or no probe possible (Citus, a partitioned or unusual app table,
//!   no such index): the read runs as before. A row a row-level security
//!   policy hides from the read is found here and read (and hidden) there,
//!   as before.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

use pgrx::pg_sys;

use super::read::{probe_open, Key, Snapshot};
use crate::store::app_table_ddl::{PARTITION_COLUMN, ROW_ID_COLUMN};

/// A probed app table as found: its Oid and namespace, its key index and
/// the attribute numbers of `_sync_partition` and `_sync_row_id`.
#[derive(Debug, Clone, Copy)]
struct Target {
    relid: pg_sys::Oid,
    nsp: pg_sys::Oid,
    indexid: pg_sys::Oid,
    keys: [i16; 2],
}

thread_local! {
    static TARGETS: RefCell<HashMap<(String, String), Target>> = RefCell::new(HashMap::new());
}

/// `true` only when the row `(partition, row_id)` of app table
/// `app_schema.table` is certainly absent (see the module docs); `false`
/// when it is there or the table cannot be probed. Errors (Postgres ERROR):
/// catalog failures only.
pub fn row_absent(app_schema: &str, table: &str, partition: &str, row_id: &str) -> bool {
    if !super::available() {
        return false;
    }
    let key = (app_schema.to_owned(), table.to_owned());
    let kept = TARGETS.with(|t| t.borrow().get(&key).copied());
    let target = match kept {
        Some(t) => t,
        None => match find_target(app_schema, table) {
            Some(t) => {
                TARGETS.with(|m| m.borrow_mut().insert(key.clone(), t));
                t
            }
            None => return false,
        },
    };
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let Some(rel) = super::reopen(target.relid, target.nsp, table.as_bytes(), lock) else {
        TARGETS.with(|m| m.borrow_mut().remove(&key));
        return false;
    };
    // SAFETY: try_relation_open returns NULL for an Oid that no longer
    // exists; the index is checked on the open relations before the probe
    // uses them; both are closed here or by the probe.
    unsafe {
        let idx = pg_sys::try_relation_open(target.indexid, lock);
        if idx.is_null() || !still_target(rel, idx, &target) {
            if !idx.is_null() {
                pg_sys::relation_close(idx, pg_sys::NoLock as pg_sys::LOCKMODE);
            }
            pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            TARGETS.with(|m| m.borrow_mut().remove(&key));
            return false;
        }
        let keys = [Key::Text(partition), Key::Text(row_id)];
        !probe_open(&Snapshot::take(), rel, idx, &keys, |row| row.is_some())
    }
}

/// Whether the open `rel` (the table `target` names: [`super::reopen`] or
/// the name look-up checked that) and `idx` are still what `target`
/// recorded: an ordinary table and its valid unique index on the same two
/// columns.
///
/// # Safety
/// `rel` and `idx` are open.
unsafe fn still_target(rel: pg_sys::Relation, idx: pg_sys::Relation, target: &Target) -> bool {
    unsafe {
        let index = (*idx).rd_index;
        (*(*rel).rd_rel).relkind as u8 == b'r'
            && !index.is_null()
            && (*index).indrelid == target.relid
            && (*index).indisunique
            && (*index).indisvalid
            && (*index).indnkeyatts == 2
            && (*index).indkey.values.as_slice(2) == target.keys
    }
}

/// Resolves `app_schema.table` and finds its unique index whose key is
/// exactly `(_sync_partition, _sync_row_id)`, both `text`; `None` for
/// anything else (not an ordinary table, no such index).
fn find_target(app_schema: &str, table: &str) -> Option<Target> {
    let (schema_c, table_c) = (CString::new(app_schema).ok()?, CString::new(table).ok()?);
    // SAFETY: catalog look-ups by name (missing_ok = true), then the
    // relation's relcache entry and index list, read while it is open.
    unsafe {
        let nsp = pg_sys::get_namespace_oid(schema_c.as_ptr(), true);
        if nsp == pg_sys::InvalidOid {
            return None;
        }
        let relid = pg_sys::get_relname_relid(table_c.as_ptr(), nsp);
        if relid == pg_sys::InvalidOid {
            return None;
        }
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::try_relation_open(relid, lock);
        if rel.is_null() {
            return None;
        }
        let attno = |name: &str| {
            pgrx::PgTupleDesc::from_pg_unchecked((*rel).rd_att)
                .iter()
                .position(|a| !a.attisdropped && a.name() == name && a.atttypid == pg_sys::TEXTOID)
                .and_then(|p| i16::try_from(p + 1).ok())
        };
        let mut found = None;
        if let (b'r', Some(p), Some(r)) = ((*(*rel).rd_rel).relkind as u8, attno(PARTITION_COLUMN), attno(ROW_ID_COLUMN)) {
            let indexes = pgrx::PgList::<pg_sys::Oid>::from_pg(pg_sys::RelationGetIndexList(rel));
            for i in 0..indexes.len() {
                let Some(indexid) = indexes.get_oid(i) else { continue };
                let target = Target { relid, nsp, indexid, keys: [p, r] };
                if key_index(rel, &target) {
                    found = Some(target);
                    break;
                }
            }
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        found
    }
}

/// Whether `target.indexid` is a valid, non-partial unique B-tree index of
/// `rel` on exactly `target.keys` (an expression column has no attribute
/// number, so it never matches).
///
/// # Safety
/// `rel` is open.
unsafe fn key_index(rel: pg_sys::Relation, target: &Target) -> bool {
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let idx = pg_sys::try_relation_open(target.indexid, lock);
        if idx.is_null() {
            return false;
        }
        let ok = still_target(rel, idx, target)
            && (*(*idx).rd_rel).relam == pg_sys::BTREE_AM_OID
            && pg_sys::heap_attisnull((*idx).rd_indextuple, pg_sys::Anum_pg_index_indpred as i32, std::ptr::null_mut());
        pg_sys::relation_close(idx, pg_sys::NoLock as pg_sys::LOCKMODE);
        ok
    }
}
