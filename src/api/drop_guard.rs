//! `syncular.drop_extension_guard()`, an event trigger on `ddl_command_start`
//! for `DROP EXTENSION` (docs/src/operate/citus.md).
//!
//! Once the sync tables are Citus tables, Citus keeps shard tables (the
//! coordinator's copy of each reference table; a distributed table's shards
//! when the coordinator holds some) in schema `syncular`. They are not
//! members of the extension but depend on its schema, so a plain
//! `DROP EXTENSION syncular` would fail unless `CASCADE`. When the command
//! names `syncular`, the guard drops every Citus table of schema `syncular`
//! first — Citus removes their shards on every node — exactly the tables the
//! command would drop anyway. Any other `DROP EXTENSION`, and any database
//! without Citus, is left alone (one parse-tree look).

use pgrx::pg_sys;
use pgrx::PgList;

use crate::api::errors::OrRaise;

/// Whether the `DROP EXTENSION` parse tree names `syncular`.
///
/// # Safety
/// `tree` is the `parsetree` of the firing event trigger's `EventTriggerData`.
unsafe fn drops_syncular(tree: *mut pg_sys::Node) -> bool {
    if tree.is_null() || (*tree).type_ != pg_sys::NodeTag::T_DropStmt {
        return false;
    }
    let drop = tree.cast::<pg_sys::DropStmt>();
    if (*drop).removeType != pg_sys::ObjectType::OBJECT_EXTENSION {
        return false;
    }
    PgList::<pg_sys::Node>::from_pg((*drop).objects).iter_ptr().any(|node| {
        let name = node_str(node);
        !name.is_null() && std::ffi::CStr::from_ptr(name).to_bytes() == b"syncular"
    })
}

/// The C string of a `String` (Postgres 15+) / `Value` (13) node.
#[cfg(feature = "pg13")]
unsafe fn node_str(node: *mut pg_sys::Node) -> *const std::ffi::c_char {
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_String {
        return std::ptr::null();
    }
    (*node.cast::<pg_sys::Value>()).val.str_
}

/// The C string of a `String` (Postgres 15+) / `Value` (13) node.
#[cfg(not(feature = "pg13"))]
unsafe fn node_str(node: *mut pg_sys::Node) -> *const std::ffi::c_char {
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_String {
        return std::ptr::null();
    }
    (*node.cast::<pg_sys::String>()).sval
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_syncular_drop_extension_guard_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1_API
}

/// The event trigger function (`RETURNS event_trigger`).
///
/// # Safety
/// Called by Postgres's function manager with a valid `fcinfo`.
#[unsafe(no_mangle)]
#[doc(hidden)]
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn syncular_drop_extension_guard_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let context = if fcinfo.is_null() { std::ptr::null_mut() } else { (*fcinfo).context };
    if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_EventTriggerData {
        pgrx::error!("syncular.drop_extension_guard() runs only as an event trigger");
    }
    let data = context.cast::<pg_sys::EventTriggerData>();
    if drops_syncular((*data).parsetree) {
        crate::engine::distribution::release_for_drop().or_raise();
    }
    pg_sys::Datum::from(0)
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION syncular.drop_extension_guard() RETURNS event_trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'syncular_drop_extension_guard_wrapper';
CREATE EVENT TRIGGER syncular_drop_extension ON ddl_command_start
  WHEN TAG IN ('DROP EXTENSION') EXECUTE FUNCTION syncular.drop_extension_guard();
"#,
    name = "drop_extension_guard",
);
