//! Declared UNIQUE indexes lead with the partition column: the same unique
//! value is fine in two partitions, refused twice in one.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::support::*;

    fn insert(partition: &str, row_id: &str, code: &str) -> Result<(), crate::store::spi::subtransaction::SubtransactionError> {
        // Raw stored state, not a client-visible write: bypass the capture triggers.
        try_run(&format!(
            "SET LOCAL session_replication_role = replica; \
             INSERT INTO public.tasks(_sync_partition, _sync_row_id, id, project_id, done, code, _sync_version, _sync_scopes, _sync_payload) \
             VALUES ('{partition}', '{row_id}', '{row_id}', 'p1', false, '{code}', 1, '{{\"project_id\":\"p1\"}}', '\\x00'); \
             RESET session_replication_role"
        ))
    }

    #[pg_test]
    fn unique_index_is_per_partition() {
        register(&tasks_ir(1)).unwrap();
        insert("partition-a", "r1", "X-1").unwrap();
        insert("partition-b", "r1", "X-1").unwrap();
        insert("partition-b", "r2", "X-2").unwrap();
        let err = insert("partition-a", "r2", "X-1").unwrap_err();
        assert_eq!(err.sqlstate, "23505", "{err:?}");
        assert!(err.message.contains("sync_ix_tasks_code"), "{err:?}");
        assert_eq!(int8("SELECT count(*) FROM public.tasks WHERE code = 'X-1'"), Some(2));
    }
}
