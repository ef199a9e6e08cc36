//! Rows inserted without a statement ([`Inserter`]): the heap tuple and its
//! index entries. Every unique index is checked as an `INSERT` checks it (a
//! duplicate raises 23505 and the transaction aborts); NOT NULL is checked by
//! [`Inserter::insert`] itself (23502). The rows are written with the
//! transaction's current command id, so every later statement of the
//! transaction sees them.

use std::ffi::CStr;

use pgrx::pg_sys;

use super::open_relation;

/// One `sync_*` table open for inserts: the relation (`RowExclusiveLock`, held to
/// the transaction's end as a statement's would be), its indexes, and a
/// virtual slot. Open it, [`Inserter::insert`] rows, [`Inserter::close`] it —
/// inside a memory context the caller drops afterwards (the executor state,
/// the slot and every datum are palloc'd there). On a Postgres ERROR the
/// transaction's abort releases the relation, its indexes and their locks.
pub struct Inserter {
    rel: pg_sys::Relation,
    estate: *mut pg_sys::EState,
    rri: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    /// Per column: its name when it is NOT NULL.
    not_null: Vec<Option<String>>,
    table: &'static CStr,
}

impl Inserter {
    /// Opens `syncular.<table>`. Errors (Postgres ERROR): the table does not
    /// exist (an extension whose catalog is older than its library).
    pub fn open(table: &'static CStr) -> Inserter {
        // What the executor checks before an INSERT (`ExecCheckXactReadOnly`):
        // no write in a read-only transaction (25006) or in parallel mode.
        // SAFETY: both only read backend state and raise a Postgres ERROR.
        unsafe {
            pg_sys::PreventCommandIfReadOnly(c"INSERT".as_ptr());
            pg_sys::PreventCommandIfParallelMode(c"INSERT".as_ptr());
        }
        let rel = open_relation(table, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        // SAFETY: the executor's own set-up for one result relation
        // (`InitResultRelInfo` zeroes and tags the node); every pointer comes
        // from Postgres and is used in this backend only.
        unsafe {
            let estate = pg_sys::CreateExecutorState();
            let rri = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>()).cast::<pg_sys::ResultRelInfo>();
            pg_sys::InitResultRelInfo(rri, rel, 1, std::ptr::null_mut(), 0);
            #[cfg(feature = "pg13")]
            {
                (*estate).es_result_relations = rri;
                (*estate).es_num_result_relations = 1;
                (*estate).es_result_relation_info = rri;
            }
            pg_sys::ExecOpenIndices(rri, false);
            let desc = (*rel).rd_att;
            let slot = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
            let not_null = pgrx::PgTupleDesc::from_pg_unchecked(desc)
                .iter()
                .map(|a| a.attnotnull.then(|| a.name().to_owned()))
                .collect();
            Inserter { rel, estate, rri, slot, not_null, table }
        }
    }

    /// Inserts one row: `values` in the table's column order (`None` = NULL;
    /// by-reference datums palloc'd in the caller's context). Errors
    /// (Postgres ERROR): a wrong column count (`syncular.internal`), NULL in
    /// a NOT NULL column (23502), a duplicate key (23505).
    pub fn insert(&mut self, values: &[Option<pg_sys::Datum>]) {
        if values.len() != self.not_null.len() {
            pgrx::error!(
                "syncular.internal: {} value(s) for the {} column(s) of syncular.{}",
                values.len(),
                self.not_null.len(),
                self.table.to_string_lossy()
            );
        }
        if let Some(column) = values.iter().zip(&self.not_null).find_map(|(v, n)| n.as_ref().filter(|_| v.is_none())) {
            pgrx::ereport!(
                ERROR,
                pgrx::PgSqlErrorCode::ERRCODE_NOT_NULL_VIOLATION,
                format!("null value in column \"{column}\" of relation \"{}\" violates not-null constraint", self.table.to_string_lossy())
            );
        }
        // SAFETY: the slot was made for this relation's descriptor, whose
        // entries `tts_values`/`tts_isnull` hold (as many as `values`).
        unsafe {
            let slot = self.slot;
            pg_sys::ExecClearTuple(slot);
            for (i, v) in values.iter().enumerate() {
                *(*slot).tts_values.add(i) = v.unwrap_or(pg_sys::Datum::from(0usize));
                *(*slot).tts_isnull.add(i) = v.is_none();
            }
            pg_sys::ExecStoreVirtualTuple(slot);
            pg_sys::simple_table_tuple_insert(self.rel, slot);
            insert_index_entries(self.rri, slot, self.estate);
        }
    }

    /// Closes the indexes and the relation (its lock stays to the
    /// transaction's end) and frees the executor state.
    pub fn close(self) {
        // SAFETY: what `open` opened, closed once.
        unsafe {
            pg_sys::ExecDropSingleTupleTableSlot(self.slot);
            pg_sys::ExecCloseIndices(self.rri);
            pg_sys::FreeExecutorState(self.estate);
            pg_sys::table_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }
}

/// The index entries of the tuple just stored from `slot` (its `tts_tid` set).
///
/// # Safety
/// `rri` has its indexes open (`ExecOpenIndices`), `slot` holds the stored
/// tuple, `estate` is the executor state they were set up in.
unsafe fn insert_index_entries(rri: *mut pg_sys::ResultRelInfo, slot: *mut pg_sys::TupleTableSlot, estate: *mut pg_sys::EState) {
    if (*rri).ri_NumIndices == 0 {
        return;
    }
    #[cfg(feature = "pg13")]
    let recheck = pg_sys::ExecInsertIndexTuples(slot, estate, false, std::ptr::null_mut(), std::ptr::null_mut());
    #[cfg(feature = "pg15")]
    let recheck = pg_sys::ExecInsertIndexTuples(rri, slot, estate, false, false, std::ptr::null_mut(), std::ptr::null_mut());
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    let recheck = pg_sys::ExecInsertIndexTuples(rri, slot, estate, false, false, std::ptr::null_mut(), std::ptr::null_mut(), false);
    pg_sys::list_free(recheck);
    // The per-tuple context FormIndexDatum used.
    if !(*estate).es_per_tuple_exprcontext.is_null() {
        pg_sys::MemoryContextReset((*(*estate).es_per_tuple_exprcontext).ecxt_per_tuple_memory);
    }
}

