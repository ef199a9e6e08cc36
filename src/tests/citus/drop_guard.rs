//! The `DROP EXTENSION` event trigger (`src/api/drop_guard.rs`) without
//! Citus: installed with the extension, and a pass-through for any other
//! extension's drop; and the table lists it (and `distribute()`) walk.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::support::*;

    #[pg_test]
    fn the_drop_guard_is_an_enabled_member_event_trigger_on_drop_extension() {
        let row = text(
            "SELECT e.evtevent || '/' || array_to_string(e.evttags, ',') || '/' || e.evtenabled::text || '/' || e.evtfoid::regproc::text \
               FROM pg_catalog.pg_event_trigger e \
               JOIN pg_catalog.pg_depend d ON d.classid = 'pg_event_trigger'::regclass AND d.objid = e.oid AND d.deptype = 'e' \
               JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid AND x.extname = 'syncular' \
              WHERE e.evtname = 'syncular_drop_extension'",
        );
        assert_eq!(row.as_deref(), Some("ddl_command_start/DROP EXTENSION/O/syncular.drop_extension_guard"));
    }

    #[pg_test]
    fn dropping_another_extension_passes_through_the_guard() {
        run("DROP EXTENSION IF EXISTS syncular_no_such_extension");
        assert_eq!(text("SELECT count(*)::text FROM pg_catalog.pg_extension WHERE extname = 'syncular'").as_deref(), Some("1"));
    }

    #[pg_test]
    fn the_guard_cannot_be_called_as_a_function() {
        let err = try_run("SELECT syncular.drop_extension_guard()").unwrap_err();
        assert!(err.message.contains("trigger"), "{err:?}");
    }

    #[pg_test]
    fn the_distribution_lists_name_every_table_of_the_extension_once_by_its_partition_column() {
        use crate::engine::distribution::{DISTRIBUTED_TABLES, REFERENCE_TABLES};
        let of = |keyed: bool| {
            text(&format!(
                "SELECT string_agg('syncular.' || c.relname, ',' ORDER BY c.relname) FROM pg_catalog.pg_class c \
                  WHERE c.relnamespace = 'syncular'::regnamespace AND c.relkind = 'r' \
                    AND {} EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a \
                                   WHERE a.attrelid = c.oid AND a.attname = 'partition' AND NOT a.attisdropped)",
                if keyed { "" } else { "NOT" }
            ))
            .unwrap_or_default()
        };
        let sorted = |list: &[&str]| {
            let mut v = list.to_vec();
            v.sort_unstable();
            v.join(",")
        };
        assert_eq!(of(true), sorted(&DISTRIBUTED_TABLES));
        assert_eq!(of(false), sorted(&REFERENCE_TABLES));
    }
}
