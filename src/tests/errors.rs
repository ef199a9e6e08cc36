//! The error mapping: message `"<code>: …"`, SQLSTATE per code class.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::{Category, ErrorCode, ProtocolError};

    use crate::api::errors::raise;
    use crate::engine::error::{EngineError, HostCode};
    use crate::store::spi::subtransaction;

    fn raised(err: EngineError) -> (String, String) {
        let e = subtransaction::run(|| raise(err.clone())).unwrap_err();
        (e.sqlstate, e.message)
    }

    #[pg_test]
    fn protocol_errors_carry_code_prefix_and_class_sqlstate() {
        let (state, message) = raised(ProtocolError::invalid("bad magic").into());
        assert_eq!((state.as_str(), message.as_str()), ("22023", "sync.invalid_request: bad magic"));
        let expected = [
            (Category::InvalidRequest, "22023"),
            (Category::Forbidden, "42501"),
            (Category::ScopeRevoked, "42501"),
            (Category::AuthRequired, "28000"),
            (Category::NotFound, "42704"),
            (Category::SchemaMismatch, "0A000"),
            (Category::Conflict, "55000"),
            (Category::ResetRequired, "34000"),
            (Category::RateLimited, "53000"),
            (Category::Internal, "XX000"),
        ];
        let mut seen = 0;
        for &code in ErrorCode::ALL {
            let want = expected.iter().find(|(c, _)| *c == code.category()).map(|(_, s)| *s).unwrap();
            let (state, message) = raised(EngineError::protocol(code, "m"));
            assert_eq!(state, want, "{code}");
            assert_eq!(message, format!("{}: m", code.as_str()));
            seen += 1;
        }
        assert_eq!(seen, ErrorCode::ALL.len());
    }

    #[pg_test]
    fn host_errors_carry_their_code_and_sqlstate() {
        for (code, prefix, state) in [
            (HostCode::InvalidSchema, "syncular.invalid_schema", "42P15"),
            (HostCode::SchemaRefused, "syncular.schema_refused", "55000"),
            (HostCode::NoSchema, "syncular.no_schema", "55000"),
            (HostCode::InvalidResolver, "syncular.invalid_resolver", "22023"),
            (HostCode::InvalidArgument, "syncular.invalid_argument", "22023"),
            (HostCode::ResolverMalformed, "syncular.resolver_malformed", "39000"),
            (HostCode::InvalidValidator, "syncular.invalid_validator", "22023"),
            (HostCode::ValidatorMalformed, "syncular.validator_malformed", "39000"),
            (HostCode::ReactionPlannerFailed, "syncular.reaction_planner_failed", "39000"),
            (HostCode::WriteRejected, "syncular.write_rejected", "23514"),
            (HostCode::ResponseTooLarge, "syncular.response_too_large", "54000"),
            (HostCode::Internal, "syncular.internal", "XX000"),
        ] {
            let (got_state, message) = raised(EngineError::host(code, "why"));
            assert_eq!((got_state.as_str(), message.as_str()), (state, format!("{prefix}: why").as_str()));
        }
    }
}
