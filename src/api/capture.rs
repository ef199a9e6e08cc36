//! The capture trigger functions on app tables (issue 9; docs/src/guide/plain-sql.md "Writing
//! with plain SQL"; DDL in [`crate::store::capture::triggers`]):
//! `syncular.capture_statement_start()`, `syncular.capture_row()`,
//! `syncular.capture_statement()`, `syncular.capture_truncate()`.
//!
//! They move tuples in and out of Postgres and hand values to
//! [`crate::engine::capture`], which decides. SECURITY DEFINER with a pinned
//! `search_path`: a role that may write the app table needs no privilege on
//! the `sync_*` tables. While the engine itself writes an app table
//! ([`crate::engine::commit::guard`]) the statement triggers do nothing and
//! the row trigger hands the engine what it must log: the rows its
//! statement caused, and its own row as stored when an app trigger ran first. Errors (raised, the
//! statement fails and changes nothing): `syncular.partition_required`
//! (55000), `syncular.write_refused` (0A000), `syncular.invalid_row` (22000),
//! `sync.crdt_merge_failed` (XX000), `syncular.no_schema` (55000),
//! `syncular.internal` (XX000, a trigger attached to a table it does not
//! belong to).

use std::cell::RefCell;
use std::collections::HashMap;
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::rc::Rc;

use pgrx::prelude::*;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::{pg_sys, AllocatedByPostgres, IntoDatum, JsonB, PgTupleDesc};

use syncular_protocol::frame_fields::Op;
use syncular_protocol::blob::row_blob_ids;
use syncular_protocol::row_codec::{ColumnType, Row, RowValue};

use crate::api::errors::{raise, OrRaise};
use crate::engine::capture::{self, CaptureTable, RowStorage};
use crate::engine::error::EngineError;
use crate::store::app_table_ddl::{
    COLUMN_VERSIONS_COLUMN, PARTITION_COLUMN, PAYLOAD_COLUMN, ROW_ID_COLUMN, SCOPES_COLUMN, VERSION_COLUMN,
};
use crate::engine::commit::guard::{self, Claim, Restamp, SideEffect};
use crate::store::capture::transition::CapturedOp;
use crate::store::capture::triggers::ROW_TRIGGER_NAME;

type TriggerResult<'a> = Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, Infallible>;

/// Attribute numbers (1-based) of one app table, for its current schema.
struct Attnos {
    /// The schema these were read for (held, so its address is never reused).
    schema: Rc<crate::engine::schema::RegisteredSchema>,
    projection: Vec<NonZeroUsize>,
    partition: NonZeroUsize,
    row_id: NonZeroUsize,
    version: NonZeroUsize,
    scopes: NonZeroUsize,
    payload: NonZeroUsize,
    column_versions: NonZeroUsize,
    /// Every attribute above with the type it must have.
    types: Vec<(NonZeroUsize, pg_sys::Oid)>,
}

thread_local! {
    static ATTNOS: RefCell<HashMap<u32, Rc<Attnos>>> = RefCell::new(HashMap::new());
}

fn relid(trigger: &PgTrigger<'_>) -> pg_sys::Oid {
    trigger.relid().unwrap_or_else(|e| raise(EngineError::internal(format!("capture trigger: {e}"))))
}

/// The IR table name the trigger was created with (its one argument),
/// borrowed from the relcache's trigger (no copy per row).
fn ir_table<'a>(trigger: &PgTrigger<'a>) -> &'a str {
    let t = trigger.trigger();
    if t.tgnargs < 1 || t.tgargs.is_null() {
        raise(EngineError::internal("capture trigger created without its table argument"));
    }
    // SAFETY: tgargs holds tgnargs NUL-terminated strings for the trigger's lifetime.
    unsafe { std::ffi::CStr::from_ptr(*t.tgargs) }
        .to_str()
        .unwrap_or_else(|_| raise(EngineError::internal("capture trigger argument is not UTF-8")))
}

/// The Postgres type a column of wire type `ty` has in an app table
/// ([`crate::store::app_table_ddl::projection_type`]).
fn projection_oid(ty: ColumnType) -> pg_sys::Oid {
    match ty {
        ColumnType::String | ColumnType::BlobRef => pg_sys::TEXTOID,
        ColumnType::Integer => pg_sys::INT8OID,
        ColumnType::Float => pg_sys::FLOAT8OID,
        ColumnType::Boolean => pg_sys::BOOLOID,
        ColumnType::Json => pg_sys::JSONBOID,
        ColumnType::Bytes | ColumnType::Crdt => pg_sys::BYTEAOID,
    }
}

/// Whether every attribute in `a` still has the type it was read with (an
/// `ALTER TABLE … TYPE` since would make the readers misinterpret datums).
fn types_match(desc: &PgTupleDesc<'_>, a: &Attnos) -> bool {
    a.types.iter().all(|(attno, oid)| desc.get(attno.get() - 1).is_some_and(|att| !att.is_dropped() && att.atttypid == *oid))
}

fn attnos(trigger: &PgTrigger<'_>, t: &CaptureTable) -> Rc<Attnos> {
    let key = u32::from(relid(trigger));
    let rel = trigger.relation().unwrap_or_else(|e| raise(EngineError::internal(format!("capture trigger: {e}"))));
    let desc = rel.tuple_desc();
    if let Some(hit) = ATTNOS.with(|m| m.borrow().get(&key).filter(|a| Rc::ptr_eq(&a.schema, &t.schema)).cloned()) {
        if types_match(&desc, &hit) {
            return hit;
        }
    }
    let table = &t.registered().qualified_name;
    let find = |name: &str, oid: pg_sys::Oid| -> NonZeroUsize {
        let (i, att) = desc
            .iter()
            .enumerate()
            .find(|(_, a)| !a.is_dropped() && a.name() == name)
            .unwrap_or_else(|| raise(EngineError::internal(format!("app table {table} has no column {name:?}"))));
        if att.atttypid != oid {
            raise(EngineError::internal(format!(
                "app table {table}: column {name:?} no longer has the type register_schema gave it (altered by hand?)"
            )));
        }
        NonZeroUsize::new(i + 1).unwrap_or(NonZeroUsize::MIN)
    };
    let mut types = Vec::new();
    let mut typed = |name: &str, oid: pg_sys::Oid| {
        let attno = find(name, oid);
        types.push((attno, oid));
        attno
    };
    let projection = t.registered().table.columns.iter().map(|c| typed(&c.name, projection_oid(c.ty))).collect();
    let partition = typed(PARTITION_COLUMN, pg_sys::TEXTOID);
    let row_id = typed(ROW_ID_COLUMN, pg_sys::TEXTOID);
    let version = typed(VERSION_COLUMN, pg_sys::INT8OID);
    let scopes = typed(SCOPES_COLUMN, pg_sys::JSONBOID);
    let payload = typed(PAYLOAD_COLUMN, pg_sys::BYTEAOID);
    let column_versions = typed(COLUMN_VERSIONS_COLUMN, pg_sys::BYTEAOID);
    let a = Rc::new(Attnos {
        schema: Rc::clone(&t.schema),
        projection,
        partition,
        row_id,
        version,
        scopes,
        payload,
        column_versions,
        types,
    });
    ATTNOS.with(|m| m.borrow_mut().insert(key, Rc::clone(&a)));
    a
}

/// One tuple of the firing trigger's relation, read in place.
#[derive(Clone, Copy)]
struct Tuple {
    ptr: pg_sys::HeapTuple,
    desc: pg_sys::TupleDesc,
}

impl Tuple {
    fn datum(&self, attno: NonZeroUsize) -> Option<pg_sys::Datum> {
        // SAFETY: tuple and descriptor of the firing trigger's relation; attno in range.
        unsafe { pgrx::heap_getattr_raw(self.ptr, attno, self.desc) }
    }

    fn get<T: pgrx::FromDatum>(&self, attno: NonZeroUsize) -> Option<T> {
        // SAFETY: the attribute's type is the one T reads (the app table's DDL).
        self.datum(attno).and_then(|d| unsafe { T::from_datum(d, false) })
    }

    /// Whether `attno` holds the same bytes here and in `other` (NULL = NULL).
    fn same(&self, other: &Tuple, attno: NonZeroUsize) -> bool {
        match (self.datum(attno), other.datum(attno)) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                // SAFETY: a live descriptor of the firing trigger's relation.
                let desc = unsafe { PgTupleDesc::from_pg_unchecked(self.desc) };
                let Some(att) = desc.get(attno.get() - 1) else { return false };
                if att.attbyval {
                    return a == b;
                }
                // SAFETY: both datums are values of this attribute: fixed-length
                // (attlen bytes) or varlena (compared as stored, like datumIsEqual).
                unsafe {
                    let (pa, pb) = (a.cast_mut_ptr::<u8>(), b.cast_mut_ptr::<u8>());
                    let (la, lb) = match usize::try_from(att.attlen) {
                        Ok(n) => (n, n),
                        Err(_) => (
                            pgrx::varlena::varsize_any(pa.cast()),
                            pgrx::varlena::varsize_any(pb.cast()),
                        ),
                    };
                    la == lb && std::slice::from_raw_parts(pa, la) == std::slice::from_raw_parts(pb, lb)
                }
            }
            _ => false,
        }
    }
}

/// The projection values of `tuple` as a codec row (layout order).
fn read_row(tuple: &Tuple, t: &CaptureTable, a: &Attnos) -> Row {
    t.registered()
        .table
        .layout()
        .columns
        .iter()
        .zip(&a.projection)
        .map(|(col, &attno)| match col.ty {
            ColumnType::String => tuple.get::<String>(attno).map(RowValue::String),
            ColumnType::BlobRef => tuple.get::<String>(attno).map(RowValue::BlobRef),
            ColumnType::Integer => tuple.get::<i64>(attno).map(RowValue::Integer),
            ColumnType::Float => tuple.get::<f64>(attno).map(RowValue::Float),
            ColumnType::Boolean => tuple.get::<bool>(attno).map(RowValue::Boolean),
            ColumnType::Json => tuple.datum(attno).map(|d| RowValue::Json(jsonb_text(d))),
            ColumnType::Bytes => tuple.get::<Vec<u8>>(attno).map(RowValue::Bytes),
            ColumnType::Crdt => tuple.get::<Vec<u8>>(attno).map(RowValue::Crdt),
        })
        .collect()
}

/// A `jsonb` value's text (`jsonb_out`, compacted as a client sends JSON):
/// numbers keep every digit, which a round trip through an `f64` would not.
fn jsonb_text(datum: pg_sys::Datum) -> String {
    // SAFETY: `datum` is a jsonb value; jsonb_out returns a palloc'd C string.
    unsafe {
        let out = pgrx::fcinfo::direct_function_call_as_datum(|f| pg_sys::jsonb_out(f), &[Some(datum)]);
        match out {
            Some(p) => syncular_protocol::json_compact::compact(&std::ffi::CStr::from_ptr(p.cast_mut_ptr::<std::ffi::c_char>()).to_string_lossy()),
            None => raise(EngineError::internal("jsonb_out returned NULL")),
        }
    }
}

fn storage(tuple: &Tuple, a: &Attnos) -> RowStorage {
    RowStorage {
        partition: tuple.get::<String>(a.partition),
        row_id: tuple.get::<String>(a.row_id),
        version: tuple.get::<i64>(a.version),
        scopes_set: tuple.datum(a.scopes).is_some(),
        payload_set: tuple.datum(a.payload).is_some(),
        column_versions: tuple.get::<Vec<u8>>(a.column_versions),
    }
}

/// `tuple` with some columns replaced (one `heap_modify_tuple`), as the
/// trigger's return value.
fn replace<'a>(tuple: &Tuple, values: &[(NonZeroUsize, Option<pg_sys::Datum>)]) -> PgHeapTuple<'a, AllocatedByPostgres> {
    // SAFETY: a live descriptor of the firing trigger's relation.
    let n = usize::try_from(unsafe { (*tuple.desc).natts }).unwrap_or(0);
    let mut datums = vec![pg_sys::Datum::from(0); n];
    let mut nulls = vec![false; n];
    let mut do_replace = vec![false; n];
    for (attno, v) in values {
        let i = attno.get() - 1;
        datums[i] = v.unwrap_or(pg_sys::Datum::from(0));
        nulls[i] = v.is_none();
        do_replace[i] = true;
    }
    // SAFETY: the tuple and descriptor belong to the firing trigger's relation; the
    // arrays have one slot per attribute; the result lives in the trigger's memory context.
    unsafe {
        let modified =
            pg_sys::heap_modify_tuple(tuple.ptr, tuple.desc, datums.as_mut_ptr(), nulls.as_mut_ptr(), do_replace.as_mut_ptr());
        PgHeapTuple::from_heap_tuple(PgTupleDesc::from_pg_unchecked(tuple.desc), modified)
    }
}

/// `tuple` returned unchanged.
fn unchanged<'a>(tuple: &Tuple) -> PgHeapTuple<'a, AllocatedByPostgres> {
    // SAFETY: the trigger's own tuple and its relation's descriptor.
    unsafe { PgHeapTuple::from_heap_tuple(PgTupleDesc::from_pg_unchecked(tuple.desc), tuple.ptr) }
}

/// Text column `column` (`_sync_row_id`, `_sync_partition`) of `tuple`, when
/// set (the engine's rows carry theirs; the attribute is found by name,
/// cached per relation and column).
fn stored_text(trigger: &PgTrigger<'_>, tuple: &Tuple, column: &'static str) -> Option<String> {
    thread_local! {
        static ATTNOS: RefCell<HashMap<(u32, &'static str), NonZeroUsize>> = RefCell::new(HashMap::new());
    }
    // SAFETY: a live descriptor of the firing trigger's relation.
    let desc = unsafe { PgTupleDesc::from_pg_unchecked(tuple.desc) };
    let named = |attno: NonZeroUsize| desc.get(attno.get() - 1).is_some_and(|a| !a.is_dropped() && a.name() == column);
    let key = (u32::from(relid(trigger)), column);
    let attno = match ATTNOS.with(|m| m.borrow().get(&key).copied()).filter(|a| named(*a)) {
        Some(attno) => attno,
        None => {
            let i = desc.iter().position(|a| !a.is_dropped() && a.name() == column)?;
            let attno = NonZeroUsize::new(i + 1)?;
            ATTNOS.with(|m| m.borrow_mut().insert(key, attno));
            attno
        }
    };
    tuple.get::<String>(attno)
}

/// Whether an enabled BEFORE ROW trigger of the firing event runs before the
/// capture's row trigger (an app's own trigger, which may rewrite the row).
fn user_before_row_trigger(trigger: &PgTrigger<'_>) -> bool {
    const ROW: i16 = 1 << 0;
    const BEFORE: i16 = 1 << 1;
    const INSERT: i16 = 1 << 2;
    const UPDATE: i16 = 1 << 4;
    let event = if matches!(trigger.op(), Ok(PgTriggerOperation::Insert)) { INSERT } else { UPDATE };
    let td = trigger.trigger_data();
    // SAFETY: the firing trigger's relation and its relcache trigger descriptor.
    unsafe {
        let desc = (*td.tg_relation).trigdesc;
        if desc.is_null() {
            return false;
        }
        let n = usize::try_from((*desc).numtriggers).unwrap_or(0);
        std::slice::from_raw_parts((*desc).triggers, n).iter().any(|t| {
            let name = std::ffi::CStr::from_ptr(t.tgname).to_string_lossy();
            t.tgenabled as u8 != b'D'
                && t.tgtype & ROW != 0
                && t.tgtype & BEFORE != 0
                && t.tgtype & event != 0
                && *name < *ROW_TRIGGER_NAME
        })
    }
}

/// A row the engine writes itself, after an app's BEFORE ROW trigger ran:
/// when the trigger rewrote a typed column, the payload (and, for an
/// insert, the scopes; for an update, the rewritten columns' versions)
/// become what the table holds and the engine logs that
/// ([`guard::restamp`]; docs/src/guide/plain-sql.md "What your own triggers may do").
fn engine_row<'a>(trigger: &PgTrigger<'_>, tbl: &str, new: &Tuple, old: Option<&Tuple>) -> PgHeapTuple<'a, AllocatedByPostgres> {
    let update = old.is_some();
    let t = capture::context(relid(trigger), tbl).or_raise();
    let a = attnos(trigger, &t);
    // The engine writes version 1 on insert and the stored version + 1 on update.
    let written_version = old.map_or(Some(1), |o| o.get::<i64>(a.version).map(|v| v + 1));
    if new.get::<i64>(a.version) != written_version {
        raise(capture::refused_rewrite(tbl, VERSION_COLUMN));
    }
    let actual = read_row(new, &t, &a);
    let written = new
        .get::<Vec<u8>>(a.payload)
        .unwrap_or_else(|| raise(EngineError::internal(format!("the engine wrote a row of {tbl:?} without its payload"))));
    let Some(capture::Rewritten { row, payload, changed }) = capture::stored_truth(&t, &actual, &written, &same_projection).or_raise()
    else {
        return unchanged(new);
    };
    let row_id = new.get::<String>(a.row_id).unwrap_or_default();
    let scopes = capture::restamped_scopes(&t, &row, &row_id, &stored_scopes(new, &a), update).or_raise();
    let scopes_json = serde_json::Value::Object(scopes.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect());
    guard::restamp(Restamp { table: tbl.to_owned(), row_id, scopes, payload: payload.clone() });
    let mut values = vec![(a.payload, payload.into_datum()), (a.scopes, JsonB(scopes_json).into_datum())];
    if update {
        let version = new.get::<i64>(a.version).unwrap_or(1);
        let versions = new.get::<Vec<u8>>(a.column_versions);
        values.push((a.column_versions, capture::restamped_column_versions(&t, versions.as_deref(), version, &changed).into_datum()));
    }
    replace(new, &values)
}

/// Whether payload value `v` projects to typed value `typed` (module docs of
/// [`capture::stored_truth`]): `json` compares as `jsonb` text.
fn same_projection(v: &RowValue, typed: &RowValue) -> bool {
    match (v, typed) {
        (RowValue::Json(text), RowValue::Json(stored)) => {
            !crate::store::app_rows::projects_as_null(v) && jsonb_normalized(text).as_deref() == Some(stored.as_str())
        }
        _ => v.identical(typed),
    }
}

/// `text` as `jsonb` stores and prints it ([`jsonb_text`]). Only for text
/// `jsonb` accepts ([`crate::store::app_rows::projects_as_null`] is false).
fn jsonb_normalized(text: &str) -> Option<String> {
    let c = std::ffi::CString::new(text).ok()?;
    // SAFETY: jsonb_in reads a NUL-terminated string and returns a palloc'd jsonb.
    let datum = unsafe {
        pgrx::fcinfo::direct_function_call_as_datum(|f| pg_sys::jsonb_in(f), &[Some(pg_sys::Datum::from(c.as_ptr()))])
    }?;
    Some(jsonb_text(datum))
}

/// `_sync_scopes` of a stored row as variable → value.
fn stored_scopes(tuple: &Tuple, a: &Attnos) -> std::collections::BTreeMap<String, String> {
    tuple.get::<JsonB>(a.scopes).map(|JsonB(v)| scope_map(&v)).unwrap_or_default()
}

/// A `{"variable": "value"}` object as variable → value.
fn scope_map(v: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    v.as_object()
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned()))).collect())
        .unwrap_or_default()
}

/// The name of an enabled BEFORE ROW trigger on the table that runs after the
/// capture's row trigger (Postgres runs them in name order), if any: what it
/// changes would be stored but not in the payload clients get.
fn before_row_trigger_after_capture(trigger: &PgTrigger<'_>) -> Option<String> {
    const ROW: i16 = 1 << 0;
    const BEFORE: i16 = 1 << 1;
    let td = trigger.trigger_data();
    // SAFETY: the firing trigger's relation and its relcache trigger descriptor.
    unsafe {
        let desc = (*td.tg_relation).trigdesc;
        if desc.is_null() {
            return None;
        }
        let n = usize::try_from((*desc).numtriggers).unwrap_or(0);
        std::slice::from_raw_parts((*desc).triggers, n).iter().find_map(|t| {
            let name = std::ffi::CStr::from_ptr(t.tgname).to_string_lossy();
            let enabled = t.tgenabled as u8 != b'D';
            (enabled && t.tgtype & ROW != 0 && t.tgtype & BEFORE != 0 && *name > *ROW_TRIGGER_NAME)
                .then(|| name.into_owned())
        })
    }
}

/// `syncular.capture_statement_start()` — BEFORE INSERT OR UPDATE OR DELETE,
/// per statement: takes the partition from `syncular.partition` and locks its
/// counter row (the same order as a push: partition first, then rows).
#[pg_trigger(sql = "CREATE FUNCTION capture_statement_start() RETURNS trigger LANGUAGE c SECURITY DEFINER \
                    SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_statement_start_wrapper';")]
fn capture_statement_start<'a>(trigger: &'a PgTrigger<'a>) -> TriggerResult<'a> {
    let tbl = ir_table(trigger);
    if !guard::table_write(tbl) {
        if let Some(name) = before_row_trigger_after_capture(trigger) {
            raise(capture::trigger_after_capture(tbl, &name));
        }
    }
    // Under an engine write every row is handled by the row trigger (module docs), which
    // sets the statement up on its first side effect.
    if !guard::engine_writing() {
        capture::statement_start(relid(trigger), tbl).or_raise();
        capture::statement_opened();
    }
    Ok(None)
}

/// `syncular.capture_row()` — BEFORE INSERT OR UPDATE OR DELETE, per row:
/// computes `_sync_partition`, `_sync_row_id`, `_sync_version`,
/// `_sync_scopes`, `_sync_payload` and `_sync_column_versions` from the
/// typed columns, refusing what clients could not hold (module docs).
#[pg_trigger(sql = "CREATE FUNCTION capture_row() RETURNS trigger LANGUAGE c SECURITY DEFINER \
                    SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_row_wrapper';")]
fn capture_row<'a>(trigger: &'a PgTrigger<'a>) -> TriggerResult<'a> {
    let td = trigger.trigger_data();
    // SAFETY: the firing trigger's relation.
    let desc = unsafe { (*td.tg_relation).rd_att };
    let tuple = |ptr: pg_sys::HeapTuple| (!ptr.is_null()).then_some(Tuple { ptr, desc });
    let (old, new) = match trigger.op() {
        Ok(PgTriggerOperation::Insert) => (None, tuple(td.tg_trigtuple)),
        Ok(PgTriggerOperation::Update) => (tuple(td.tg_trigtuple), tuple(td.tg_newtuple)),
        Ok(PgTriggerOperation::Delete) => (tuple(td.tg_trigtuple), None),
        _ => raise(EngineError::internal("capture_row fired for an unexpected event")),
    };
    let tbl = ir_table(trigger);
    let claim = if guard::engine_writing() {
        // The row id the engine named (an update's stored one), the partition the row is
        // stored in after the app's BEFORE triggers (one they moved is not the engine's row).
        let row_id = old.or(new).and_then(|t| stored_text(trigger, &t, ROW_ID_COLUMN));
        let partition = new.or(old).and_then(|t| stored_text(trigger, &t, PARTITION_COLUMN));
        guard::claim(tbl, partition.as_deref(), row_id.as_deref())
    } else {
        Claim::None
    };
    match (claim, new) {
        (Claim::EngineTable, _) | (Claim::Engine, None) => return Ok(new.or(old).map(|t| unchanged(&t))),
        (Claim::Engine, Some(new)) if !user_before_row_trigger(trigger) => return Ok(Some(unchanged(&new))),
        (Claim::Engine, Some(new)) => return Ok(Some(engine_row(trigger, tbl, &new, old.as_ref()))),
        (Claim::SideEffect | Claim::None, _) => {}
    }
    let side = claim == Claim::SideEffect;
    let t = capture::context(relid(trigger), tbl).or_raise();
    let a = attnos(trigger, &t);
    match (old, new) {
        (None, Some(new)) => {
            let row = read_row(&new, &t, &a);
            let computed = capture::insert_row(&t, row, &storage(&new, &a)).or_raise();
            capture::validate::validate(&t, Op::Upsert, &computed.row_id, Some(&computed.row), None).or_raise();
            if side {
                guard::record_side_effect(SideEffect {
                    table: tbl.to_owned(),
                    row_id: computed.row_id.clone(),
                    op: Op::Upsert,
                    inserted: true,
                    row_version: Some(computed.version),
                    scopes: scope_map(&computed.scopes),
                    payload: Some(computed.payload.clone()),
                    blob_ids: (Vec::new(), row_blob_ids(t.registered().table.layout(), &computed.row)),
                });
            }
            let mut values = vec![
                (a.partition, t.partition.as_str().into_datum()),
                (a.row_id, computed.row_id.into_datum()),
                (a.version, computed.version.into_datum()),
                (a.scopes, JsonB(computed.scopes).into_datum()),
                (a.payload, computed.payload.into_datum()),
            ];
            values.extend(computed.merged.into_iter().map(|(i, b)| (a.projection[i], b.into_datum())));
            Ok(Some(replace(&new, &values)))
        }
        (Some(old), Some(new)) => {
            let old_row = read_row(&old, &t, &a);
            let new_row = read_row(&new, &t, &a);
            let changed: Vec<&str> = [
                (PARTITION_COLUMN, a.partition),
                (ROW_ID_COLUMN, a.row_id),
                (VERSION_COLUMN, a.version),
                (SCOPES_COLUMN, a.scopes),
                (PAYLOAD_COLUMN, a.payload),
                (COLUMN_VERSIONS_COLUMN, a.column_versions),
            ]
            .into_iter()
            .filter(|&(_, attno)| !old.same(&new, attno))
            .map(|(name, _)| name)
            .collect();
            // A value only the payload holds (json or text Postgres cannot store projects as
            // NULL) survives an update of other columns: read the stored payload when some
            // column is NULL before and after.
            let old_payload = old_row
                .iter()
                .zip(&new_row)
                .any(|(o, n)| o.is_none() && n.is_none())
                .then(|| old.get::<Vec<u8>>(a.payload))
                .flatten();
            let stored = storage(&old, &a);
            let computed =
                capture::update_row(&t, &old_row, new_row, &stored, &changed, old_payload.as_deref()).or_raise();
            if capture::validate::has_validator(&t) {
                let stored_payload = old.get::<Vec<u8>>(a.payload);
                let row_id = stored.row_id.clone().unwrap_or_default();
                capture::validate::validate(&t, Op::Upsert, &row_id, Some(&computed.row), stored_payload.as_deref())
                    .or_raise();
            }
            if side {
                let layout = t.registered().table.layout();
                guard::record_side_effect(SideEffect {
                    table: tbl.to_owned(),
                    row_id: stored.row_id.clone().unwrap_or_default(),
                    op: Op::Upsert,
                    inserted: false,
                    row_version: Some(computed.version),
                    scopes: stored_scopes(&old, &a),
                    payload: Some(computed.payload.clone()),
                    blob_ids: (row_blob_ids(layout, &old_row), row_blob_ids(layout, &computed.row)),
                });
            }
            let mut values = vec![
                (a.version, computed.version.into_datum()),
                (a.payload, computed.payload.into_datum()),
                (a.column_versions, computed.column_versions.into_datum()),
            ];
            values.extend(computed.merged.into_iter().map(|(i, b)| (a.projection[i], b.into_datum())));
            Ok(Some(replace(&new, &values)))
        }
        (Some(old), None) => {
            let stored = storage(&old, &a);
            capture::delete_row(&t, &stored).or_raise();
            if capture::validate::has_validator(&t) {
                let stored_payload = old.get::<Vec<u8>>(a.payload);
                let row_id = stored.row_id.clone().unwrap_or_default();
                capture::validate::validate(&t, Op::Delete, &row_id, None, stored_payload.as_deref()).or_raise();
            }
            if side {
                guard::record_side_effect(SideEffect {
                    table: tbl.to_owned(),
                    row_id: stored.row_id.clone().unwrap_or_default(),
                    op: Op::Delete,
                    inserted: false,
                    row_version: None,
                    scopes: stored_scopes(&old, &a),
                    payload: None,
                    blob_ids: (Vec::new(), Vec::new()),
                });
            }
            Ok(Some(unchanged(&old)))
        }
        (None, None) => Ok(None),
    }
}

/// `syncular.capture_statement()` — AFTER INSERT / UPDATE / DELETE, per
/// statement, with the transition table: writes the statement's rows as one
/// commit (header, changes, scope indexes, tombstones) and queues its NOTIFY.
#[pg_trigger(sql = "CREATE FUNCTION capture_statement() RETURNS trigger LANGUAGE c SECURITY DEFINER \
                    SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_statement_wrapper';")]
fn capture_statement<'a>(trigger: &'a PgTrigger<'a>) -> TriggerResult<'a> {
    let tbl = ir_table(trigger);
    // Under an engine write the row trigger handled every row (module docs).
    if guard::engine_writing() {
        return Ok(None);
    }
    let nested = capture::statement_closed();
    let td = trigger.trigger_data();
    let (op, table) = match trigger.op() {
        Ok(PgTriggerOperation::Insert) => (CapturedOp::Insert, td.tg_newtable),
        Ok(PgTriggerOperation::Update) => (CapturedOp::Update, td.tg_newtable),
        Ok(PgTriggerOperation::Delete) => (CapturedOp::Delete, td.tg_oldtable),
        _ => raise(EngineError::internal("capture_statement fired for an unexpected event")),
    };
    if table.is_null() {
        raise(EngineError::internal("capture_statement fired without its transition table"));
    }
    // SAFETY: the transition table of the firing trigger.
    let rows = unsafe { pg_sys::tuplestore_tuple_count(table) };
    if rows > 0 {
        let data = std::ptr::from_ref(td).cast_mut();
        // SAFETY: the TriggerData of this firing trigger.
        unsafe { capture::statement_end(relid(trigger), tbl, op, data, nested) }.or_raise();
    }
    Ok(None)
}

/// `syncular.capture_truncate()` — BEFORE TRUNCATE: refused
/// (`syncular.write_refused`); a truncation cannot be expressed as commits.
#[pg_trigger(sql = "CREATE FUNCTION capture_truncate() RETURNS trigger LANGUAGE c SECURITY DEFINER \
                    SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'capture_truncate_wrapper';")]
fn capture_truncate<'a>(trigger: &'a PgTrigger<'a>) -> TriggerResult<'a> {
    raise(capture::truncate_refused(ir_table(trigger)))
}

/// `syncular.install_capture_triggers() returns integer` — (re)creates the
/// capture triggers on every app table of the registered schema; returns how
/// many tables. `register_schema` installs them itself; this repairs a
/// dropped trigger and upgrades tables registered before 0.2.0. Admin only.
/// Errors: `syncular.no_schema` (55000).
#[pg_extern(volatile)]
fn install_capture_triggers() -> i32 {
    capture::install_all().or_raise()
}
