//! [`Jsonb`]: how every `jsonb` argument of the SQL surface is read.
//!
//! pgrx's `JsonB` parses the argument's text into a `serde_json::Value` and
//! panics when the parser refuses it — a number beyond a 64-bit float
//! (`1e400`), nesting deeper than 127 levels — so such an argument became an
//! internal error (XX000, a Rust backtrace in DETAIL). [`Jsonb`] reads the
//! same way and raises `syncular.invalid_argument` (22023, the §10.1 DETAIL
//! of [`super::errors::raise`]) instead. The SQL type is `jsonb` either way:
//! the generated SQL does not change.

use std::ffi::CStr;

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::FromDatum;
use serde_json::Value;

use super::errors::raise;
use crate::engine::error::{EngineError, HostCode};

/// A `jsonb` argument as a `serde_json::Value` (the `.0`), like pgrx's
/// `JsonB`. Errors (while the arguments are read, before the function runs):
/// `syncular.invalid_argument` (22023) for a value `serde_json` cannot hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Jsonb(pub Value);

/// Parses the text `jsonb_out` printed; the error names what the parser
/// refused.
fn parse(text: &str) -> Result<Value, EngineError> {
    serde_json::from_str(text).map_err(|e| {
        EngineError::host(
            HostCode::InvalidArgument,
            format!(
                "a jsonb argument cannot be read: {e} (numbers must fit a 64-bit float, nesting at most 127 levels)"
            ),
        )
    })
}

impl FromDatum for Jsonb {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Jsonb> {
        if is_null {
            return None;
        }
        // SAFETY: a non-null datum of SQL type jsonb (the only type this
        // argument is declared with), detoasted before jsonb_out reads it.
        let text = unsafe {
            let varlena = datum.cast_mut_ptr();
            let detoasted = pg_sys::pg_detoast_datum_packed(varlena);
            let cstr = pgrx::direct_function_call::<&CStr>(pg_sys::jsonb_out, &[Some(detoasted.into())]);
            let text = cstr.map(|c| {
                let text = c.to_str().map(str::to_owned);
                pg_sys::pfree(c.as_ptr().cast_mut().cast());
                text
            });
            if detoasted != varlena {
                pg_sys::pfree(detoasted.cast());
            }
            text
        };
        let value = match text {
            Some(Ok(text)) => parse(&text),
            Some(Err(_)) => Err(EngineError::host(HostCode::InvalidArgument, "a jsonb argument is not valid UTF-8")),
            None => Ok(Value::Null),
        };
        Some(Jsonb(value.unwrap_or_else(|e| raise(e))))
    }
}

// SAFETY: the SQL type is jsonb, as for pgrx's JsonB.
unsafe impl SqlTranslatable for Jsonb {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Jsonb);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}

// SAFETY: unboxed through FromDatum, as pgrx unboxes its own JsonB.
unsafe impl<'fcx> ArgAbi<'fcx> for Jsonb {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: forwarded from the caller's contract.
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        // SAFETY: forwarded from the caller's contract.
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_beyond_f64_and_deep_nesting_are_invalid_arguments_the_rest_parses() {
        assert_eq!(parse(r#"{"a": [1, "x"]}"#).unwrap(), serde_json::json!({"a": [1, "x"]}));
        for bad in ["[1e400]".to_owned(), format!("{}{}", "[".repeat(200), "]".repeat(200))] {
            let e = parse(&bad).unwrap_err();
            assert_eq!(e.to_string().split(':').next(), Some("syncular.invalid_argument"), "{e}");
        }
    }
}
