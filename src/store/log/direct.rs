//! Log rows inserted without a statement (DESIGN §4): the heap tuple and its
//! index entries through the executor's own routines — `simple_table_tuple_insert`
//! and `ExecInsertIndexTuples`, as logical replication's apply worker does —
//! so a push's log costs no plan look-up, no executor start-up and no
//! set-returning functions over parameter arrays (issue 29: executor
//! start-up and `unnest` were a third of the one-statement log's time).
//!
//! Only for `sync_*` tables that the extension owns and that carry no
//! triggers, rules, CHECK constraints, generated columns or partitions
//! (the seed's DDL): what the executor would add for those is nothing here.
//! Every unique index is checked as an `INSERT` checks it (a duplicate raises
//! 23505 and the transaction aborts); NOT NULL is checked by [`Inserter::insert`]
//! itself (23502). The rows are written with the transaction's current
//! command id, so every later statement of the transaction sees them.
//!
//! Never used under Citus (`syncular.router_statements`, or the `citus`
//! library loaded): a distributed table's rows live on its shards, not in
//! the coordinator's relation ([`available`]).

use std::ffi::CStr;

use pgrx::pg_sys;

/// Whether log rows may be inserted directly in this backend: not under
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

/// One log table open for inserts: the relation (`RowExclusiveLock`, held to
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
        // SAFETY: catalog look-ups and the executor's own set-up for one
        // result relation (`InitResultRelInfo` zeroes and tags the node);
        // every pointer comes from Postgres and is used in this backend only.
        unsafe {
            let nsp = pg_sys::get_namespace_oid(c"syncular".as_ptr(), false);
            let relid = pg_sys::get_relname_relid(table.as_ptr(), nsp);
            if relid == pg_sys::InvalidOid {
                pgrx::error!("syncular.internal: log table syncular.{} does not exist", table.to_string_lossy());
            }
            let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
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

/// `text` as a `text` datum (palloc'd in the current memory context).
pub fn text(value: &str) -> pg_sys::Datum {
    // SAFETY: copies `len` bytes from a live &str into a new text value.
    unsafe {
        let len = i32::try_from(value.len()).unwrap_or_else(|_| pgrx::error!("syncular.internal: a log value over 1 GB"));
        pg_sys::Datum::from(pg_sys::cstring_to_text_with_len(value.as_ptr().cast(), len))
    }
}

/// `bytes` as a `bytea` datum (palloc'd in the current memory context).
pub fn bytea(bytes: &[u8]) -> pg_sys::Datum {
    // SAFETY: as `text`: a varlena of the bytes' length (text and bytea share the layout).
    unsafe {
        let len = i32::try_from(bytes.len()).unwrap_or_else(|_| pgrx::error!("syncular.internal: a log value over 1 GB"));
        pg_sys::Datum::from(pg_sys::cstring_to_text_with_len(bytes.as_ptr().cast(), len))
    }
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

/// Whether `syncular.<table>` holds a row whose leading key columns equal
/// `keys` (all `text`), through its index `syncular.<index>` — an index probe
/// without a statement, under a fresh snapshot (what the next statement of
/// the transaction would see: rows committed meanwhile count, as in the
/// `DELETE … USING` / `ON CONFLICT` it replaces). Errors (Postgres ERROR):
/// the table or index does not exist.
pub fn exists(table: &'static CStr, index: &'static CStr, keys: &[&str]) -> bool {
    // SAFETY: catalog look-ups, then an index scan set up and ended here on
    // relations opened and closed here (AccessShareLock, kept to the
    // transaction's end); the snapshot is registered for the scan's life.
    unsafe {
        let nsp = pg_sys::get_namespace_oid(c"syncular".as_ptr(), false);
        let relid = pg_sys::get_relname_relid(table.as_ptr(), nsp);
        let indexid = pg_sys::get_relname_relid(index.as_ptr(), nsp);
        if relid == pg_sys::InvalidOid || indexid == pg_sys::InvalidOid {
            pgrx::error!("syncular.internal: log table syncular.{} or its index is missing", table.to_string_lossy());
        }
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(relid, lock);
        let idx = pg_sys::index_open(indexid, lock);
        let mut scankeys: Vec<pg_sys::ScanKeyData> = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            let mut entry = std::mem::zeroed::<pg_sys::ScanKeyData>();
            let collation = *(*idx).rd_indcollation.add(i);
            pg_sys::ScanKeyEntryInitialize(
                &mut entry,
                0,
                pg_sys::AttrNumber::try_from(i + 1).unwrap_or(1),
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::InvalidOid,
                collation,
                pg_sys::RegProcedure::from(pg_sys::F_TEXTEQ),
                text(key),
            );
            scankeys.push(entry);
        }
        let nkeys = std::os::raw::c_int::try_from(keys.len()).unwrap_or(0);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        #[cfg(not(feature = "pg18"))]
        let scan = pg_sys::index_beginscan(rel, idx, snapshot, nkeys, 0);
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(rel, idx, snapshot, std::ptr::null_mut(), nkeys, 0);
        pg_sys::index_rescan(scan, scankeys.as_mut_ptr(), nkeys, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let found = pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::index_close(idx, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        found
    }
}
