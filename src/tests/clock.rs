//! The engine clock and its `syncular.now_ms` override.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::engine::clock::now_ms;
    use crate::tests::support::run;

    #[pg_test]
    fn guc_pins_now_and_empty_restores_the_system_clock() {
        run("SET LOCAL syncular.now_ms = '1700000000123'");
        assert_eq!(now_ms().unwrap(), 1_700_000_000_123);
        run("SET LOCAL syncular.now_ms = ''");
        let now = now_ms().unwrap();
        assert!(now > 1_700_000_000_000 && now < 4_102_444_800_000, "{now}");
        run("SET LOCAL syncular.now_ms = 'soon'");
        let err = now_ms().unwrap_err();
        assert_eq!(err.code_str(), "syncular.internal");
        assert!(err.message().contains("\"soon\""));
    }
}
