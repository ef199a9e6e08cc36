//! Reading the rows of an SPI result without per-value SPI calls, for the
//! pull path's result sets (up to ~1000 rows of up to 7 columns per
//! statement): each row is deformed once (`heap_deform_tuple`) and its
//! datums are converted directly, where pgrx's per-value accessor costs an
//! SPI lookup, a type lookup and a memory-context switch per value — more
//! than the query itself at that size. The column types are checked once
//! per result against the ones the caller expects.

use std::ffi::CStr;

use pgrx::datum::{FromDatum, IntoDatum};
use pgrx::pg_sys;
use pgrx::spi::SpiTupleTable;
use pgrx::varlena;

/// One deformed row of `N` columns.
pub struct Row<const N: usize> {
    types: [pg_sys::Oid; N],
    values: [pg_sys::Datum; N],
    nulls: [bool; N],
}

impl<const N: usize> Row<N> {
    /// Column `i` (0-based) as `T` (copied out of the SPI tuple), `None`
    /// when NULL. Panics when `T` is not the column's type.
    pub fn get<T: FromDatum + IntoDatum>(&self, i: usize) -> Option<T> {
        assert_eq!(
            T::type_oid(),
            self.types[i],
            "column {i} read as the wrong type"
        );
        // SAFETY: the datum comes from a live tuple of the current SPI result
        // (the caller's `SpiTupleTable` borrow keeps it alive) and has the
        // column's type, which is `T`'s (checked above).
        unsafe { T::from_datum(self.values[i], self.nulls[i]) }
    }

    /// Column `i`, a `jsonb`, as JSON text (`jsonb_out`), `None` when NULL.
    /// A value stored with the same bytes as the previous one converted
    /// through `cache` reuses its text: a change log repeats the same few
    /// scope objects row after row. Panics when the column is not `jsonb`.
    pub fn jsonb_text(&self, i: usize, cache: &mut JsonbTextCache) -> Option<String> {
        assert_eq!(self.types[i], pg_sys::JSONBOID, "column {i} is not jsonb");
        if self.nulls[i] {
            return None;
        }
        let datum = self.values[i];
        // SAFETY: a non-NULL jsonb datum of a live tuple (see `get`) is a
        // varlena; only an inline, uncompressed one is read as bytes, anything
        // else goes through the type's output function, which detoasts.
        unsafe {
            let ptr = datum.cast_mut_ptr::<pg_sys::varlena>();
            let plain = (varlena::varatt_is_1b(ptr) && !varlena::varatt_is_1b_e(ptr))
                || varlena::varatt_is_4b_u(ptr);
            let bytes = plain.then(|| {
                std::slice::from_raw_parts(
                    varlena::vardata_any(ptr).cast::<u8>(),
                    varlena::varsize_any_exhdr(ptr),
                )
            });
            if let Some(bytes) = bytes {
                if cache.valid && cache.bytes == bytes {
                    return Some(cache.text.clone());
                }
            }
            if cache.output_fn == pg_sys::Oid::INVALID {
                let mut varlena_type = false;
                pg_sys::getTypeOutputInfo(
                    pg_sys::JSONBOID,
                    &mut cache.output_fn,
                    &mut varlena_type,
                );
            }
            let text = pg_sys::OidOutputFunctionCall(cache.output_fn, datum);
            cache.text = CStr::from_ptr(text).to_string_lossy().into_owned();
            pg_sys::pfree(text.cast());
            cache.valid = bytes.is_some();
            cache.bytes.clear();
            cache.bytes.extend_from_slice(bytes.unwrap_or_default());
        }
        Some(cache.text.clone())
    }
}

/// The last `jsonb` value [`Row::jsonb_text`] converted: its stored bytes and
/// its text.
#[derive(Default)]
pub struct JsonbTextCache {
    output_fn: pg_sys::Oid,
    valid: bool,
    bytes: Vec<u8>,
    text: String,
}

/// Calls `f` with every row of `table` — the result of the SPI statement
/// just run on this connection, whose columns must be of `types` (a
/// mismatch panics: the statement is not the one the caller wrote).
pub fn for_each<const N: usize, E>(
    table: &SpiTupleTable<'_>,
    types: [pg_sys::Oid; N],
    mut f: impl FnMut(&Row<N>) -> Result<(), E>,
) -> Result<(), E> {
    if table.is_empty() {
        return Ok(());
    }
    // SAFETY: `SPI_tuptable` is the result of the statement that produced
    // `table` (no SPI call ran since: `table` borrows the connection); its
    // descriptor and tuples live until the connection finishes, which the
    // borrow of `table` outlives us. Each tuple has `natts` columns, checked
    // against `N` before deforming into arrays of `N`.
    unsafe {
        let tuptable = pg_sys::SPI_tuptable;
        assert!(
            !tuptable.is_null() && (*tuptable).numvals as usize == table.len(),
            "SPI_tuptable is not the result being read"
        );
        let tupdesc = (*tuptable).tupdesc;
        assert_eq!((*tupdesc).natts as usize, N, "result column count");
        for (i, expected) in types.iter().enumerate() {
            assert_eq!(
                pg_sys::SPI_gettypeid(tupdesc, i as i32 + 1),
                *expected,
                "type of result column {i}"
            );
        }
        let mut row = Row {
            types,
            values: [pg_sys::Datum::from(0usize); N],
            nulls: [true; N],
        };
        for i in 0..table.len() {
            let tuple = *(*tuptable).vals.add(i);
            pg_sys::heap_deform_tuple(
                tuple,
                tupdesc,
                row.values.as_mut_ptr(),
                row.nulls.as_mut_ptr(),
            );
            f(&row)?;
        }
    }
    Ok(())
}
