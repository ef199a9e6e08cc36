//! Rows read without a statement: the first row of a `sync_*` table whose
//! leading index columns equal the given keys ([`first`], [`exists`]), in
//! index order or backward — one descent of the index, the heap tuple under
//! a statement snapshot.
//!
//! The snapshot is the one the next statement of the transaction would run
//! under (the command counter is advanced first, then
//! `GetTransactionSnapshot()`): under READ COMMITTED it sees every commit
//! made so far and this transaction's own earlier writes, under REPEATABLE
//! READ the transaction's snapshot — what an SPI statement in its place reads.

use std::ffi::CStr;

use pgrx::{pg_sys, FromDatum};

use super::{open_relation, text};

/// One key value of an index probe, typed as its index column.
#[derive(Debug, Clone, Copy)]
pub enum Key<'a> {
    /// A `text` column.
    Text(&'a str),
    /// An `integer` column.
    Int4(i32),
}

impl Key<'_> {
    /// The equality function of the column type and the key as a datum.
    fn proc_and_datum(&self) -> (u32, pg_sys::Datum) {
        match self {
            Key::Text(s) => (pg_sys::F_TEXTEQ, text(s)),
            Key::Int4(v) => (pg_sys::F_INT4EQ, pg_sys::Datum::from(*v)),
        }
    }
}

/// The row a probe found, while its scan is open: columns by name.
pub struct Row {
    slot: *mut pg_sys::TupleTableSlot,
    desc: pg_sys::TupleDesc,
}

impl Row {
    /// The datum of column `name` (`None` for NULL). Errors (Postgres ERROR):
    /// no such column (`syncular.internal`).
    fn datum(&self, name: &str) -> Option<pg_sys::Datum> {
        // SAFETY: the descriptor of the relation the slot belongs to, read
        // within its `natts`; the slot holds a stored tuple.
        unsafe {
            let attno = pgrx::PgTupleDesc::from_pg_unchecked(self.desc)
                .iter()
                .position(|a| !a.attisdropped && a.name() == name)
                .unwrap_or_else(|| pgrx::error!("syncular.internal: no column {name:?} in a sync_* table"));
            let mut isnull = false;
            let datum = pg_sys::slot_getattr(self.slot, i32::try_from(attno + 1).unwrap_or(0), &mut isnull);
            (!isnull).then_some(datum)
        }
    }

    /// A `text` column.
    pub fn text(&self, name: &str) -> Option<String> {
        // SAFETY: a text datum of this row (copied out).
        self.datum(name).and_then(|d| unsafe { String::from_datum(d, false) })
    }

    /// A `bigint` column.
    pub fn int8(&self, name: &str) -> Option<i64> {
        // SAFETY: a by-value int8 datum.
        self.datum(name).and_then(|d| unsafe { i64::from_datum(d, false) })
    }

    /// An `integer` column.
    pub fn int4(&self, name: &str) -> Option<i32> {
        // SAFETY: a by-value int4 datum.
        self.datum(name).and_then(|d| unsafe { i32::from_datum(d, false) })
    }

    /// A `boolean` column.
    pub fn bool(&self, name: &str) -> Option<bool> {
        // SAFETY: a by-value bool datum.
        self.datum(name).and_then(|d| unsafe { bool::from_datum(d, false) })
    }

    /// A `bytea` column.
    pub fn bytes(&self, name: &str) -> Option<Vec<u8>> {
        // SAFETY: a bytea datum of this row (copied out).
        self.datum(name).and_then(|d| unsafe { Vec::<u8>::from_datum(d, false) })
    }

    /// A `jsonb` column as `jsonb::text` prints it.
    pub fn jsonb_text(&self, name: &str) -> Option<String> {
        let datum = self.datum(name)?;
        // SAFETY: jsonb_out takes a jsonb datum and returns a palloc'd C string.
        let out = unsafe { pgrx::fcinfo::direct_function_call_as_datum(|f| pg_sys::jsonb_out(f), &[Some(datum)]) }?;
        // SAFETY: the C string jsonb_out returned.
        Some(unsafe { CStr::from_ptr(out.cast_mut_ptr::<std::os::raw::c_char>()) }.to_string_lossy().into_owned())
    }

    /// The row's `xmin` as `xmin::text` prints it.
    pub fn xmin_text(&self) -> String {
        let mut isnull = false;
        // SAFETY: a system attribute of the stored tuple the slot holds.
        let datum = unsafe { pg_sys::slot_getsysattr(self.slot, pg_sys::MinTransactionIdAttributeNumber, &mut isnull) };
        // A TransactionId datum: the low 32 bits.
        (datum.value() as u32).to_string()
    }
}

/// A statement snapshot for one or more probes ([`first_in`]): the command
/// counter advanced, then `GetTransactionSnapshot()`, registered until drop.
pub struct Snapshot(pg_sys::Snapshot);

impl Snapshot {
    /// The snapshot the next statement of the transaction would run under.
    pub fn take() -> Snapshot {
        // SAFETY: what SPI does before a read-write statement; the snapshot
        // is registered with the current resource owner until `drop`.
        unsafe {
            pg_sys::CommandCounterIncrement();
            Snapshot(pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot()))
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: registered in `take`, unregistered once — also while a
        // Postgres ERROR unwinds through it (pgrx turns the ERROR into a Rust
        // panic; the snapshot is still registered then, the abort follows).
        unsafe { pg_sys::UnregisterSnapshot(self.0) }
    }
}

/// Hands `f` the first row of `syncular.<table>` whose leading columns of
/// index `syncular.<index>` equal `keys` (in index order, or the last one
/// with `backward`), or `None`, under a fresh [`Snapshot`]; the relations
/// stay locked (AccessShareLock) to the transaction's end, as a statement's
/// would. Errors (Postgres ERROR): the table or index does not exist or is
/// not the extension's ([`super::check_plain`]).
pub fn first<T>(table: &'static CStr, index: &'static CStr, keys: &[Key<'_>], backward: bool, f: impl FnOnce(Option<&Row>) -> T) -> T {
    first_in(&Snapshot::take(), table, index, keys, backward, f)
}

/// [`first`] under `snapshot` (several probes that must see one state).
pub fn first_in<T>(
    snapshot: &Snapshot,
    table: &'static CStr,
    index: &'static CStr,
    keys: &[Key<'_>],
    backward: bool,
    f: impl FnOnce(Option<&Row>) -> T,
) -> T {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let (rel, idx) = (open_relation(table, lock), open_relation(index, lock));
    // SAFETY: both just opened (and checked) by name.
    unsafe { probe(snapshot, rel, idx, keys, backward, f) }
}

/// One probe of open `rel` through open `idx` (forward); closes both
/// (keeping their locks). For app tables, which [`super::app_probe`] checked.
///
/// # Safety
/// `rel` is an open table and `idx` an open B-tree index of it whose leading
/// columns have the types of `keys`.
pub unsafe fn probe_open<T>(snapshot: &Snapshot, rel: pg_sys::Relation, idx: pg_sys::Relation, keys: &[Key<'_>], f: impl FnOnce(Option<&Row>) -> T) -> T {
    unsafe { probe(snapshot, rel, idx, keys, false, f) }
}

/// One probe of open `rel` through open `idx`; closes both (keeping their locks).
///
/// # Safety
/// `rel` is an open table and `idx` an open B-tree index of it whose leading
/// columns have the types of `keys`.
unsafe fn probe<T>(
    snapshot: &Snapshot,
    rel: pg_sys::Relation,
    idx: pg_sys::Relation,
    keys: &[Key<'_>],
    backward: bool,
    f: impl FnOnce(Option<&Row>) -> T,
) -> T {
    // SAFETY: an index scan begun, read and ended here under a registered
    // snapshot; the slot is dropped after `f` used the row. An ERROR inside
    // aborts the (sub)transaction, whose cleanup releases all of them.
    unsafe {
        let mut scankeys: Vec<pg_sys::ScanKeyData> = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            let (procedure, argument) = key.proc_and_datum();
            let mut entry = std::mem::zeroed::<pg_sys::ScanKeyData>();
            pg_sys::ScanKeyEntryInitialize(
                &mut entry,
                0,
                pg_sys::AttrNumber::try_from(i + 1).unwrap_or(1),
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::InvalidOid,
                *(*idx).rd_indcollation.add(i),
                pg_sys::RegProcedure::from(procedure),
                argument,
            );
            scankeys.push(entry);
        }
        let nkeys = std::os::raw::c_int::try_from(keys.len()).unwrap_or(0);
        #[cfg(not(feature = "pg18"))]
        let scan = pg_sys::index_beginscan(rel, idx, snapshot.0, nkeys, 0);
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(rel, idx, snapshot.0, std::ptr::null_mut(), nkeys, 0);
        pg_sys::index_rescan(scan, scankeys.as_mut_ptr(), nkeys, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let direction =
            if backward { pg_sys::ScanDirection::BackwardScanDirection } else { pg_sys::ScanDirection::ForwardScanDirection };
        let found = pg_sys::index_getnext_slot(scan, direction, slot);
        let row = found.then(|| Row { slot, desc: (*rel).rd_att });
        let out = f(row.as_ref());
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::relation_close(idx, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        out
    }
}

/// Whether `syncular.<table>` holds a row whose leading key columns of
/// `syncular.<index>` equal `keys` (all `text`) — what the `DELETE … USING`
/// or `ON CONFLICT` it replaces would find. Errors: as [`first`].
pub fn exists(table: &'static CStr, index: &'static CStr, keys: &[&str]) -> bool {
    let keys: Vec<Key<'_>> = keys.iter().map(|k| Key::Text(k)).collect();
    first(table, index, &keys, false, |row| row.is_some())
}
