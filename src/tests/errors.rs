//! The error mapping: message `"<code>: …"`, SQLSTATE per code class.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::{Category, ErrorCode, ProtocolError};

    use crate::api::errors::raise;
    use crate::engine::error::EngineError;
    use crate::store::subtransaction;

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
}
