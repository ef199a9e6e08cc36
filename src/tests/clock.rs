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
        for bad in ["soon", "-1", "9007199254740992"] {
            run(&format!("SET LOCAL syncular.now_ms = '{bad}'"));
            let err = now_ms().unwrap_err();
            assert_eq!(err.code_str(), "syncular.invalid_argument");
            assert!(err.message().contains(&format!("\"{bad}\"")), "{err}");
        }
        run("SET LOCAL syncular.now_ms = '9007199254740991'");
        assert_eq!(now_ms().unwrap(), 9_007_199_254_740_991);
    }

    #[pg_test]
    fn now_ms_is_superuser_only() {
        run("CREATE ROLE clock_plain NOLOGIN");
        run("SET LOCAL ROLE clock_plain");
        let err = crate::tests::support::try_run("SET LOCAL syncular.now_ms = '1'").unwrap_err();
        run("RESET ROLE");
        assert_eq!(err.sqlstate, "42501", "{err:?}");
        assert!(err.message.contains("syncular.now_ms"), "{err:?}");
    }
}
