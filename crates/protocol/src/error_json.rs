//! The §10.1 error object as JSON — the shape of an HTTP-level error body
//! (§1.1) and of the DETAIL the extension attaches to every ERROR it raises —
//! converted to and from the `ERROR` frame record ([`ErrorFrame`]).
//!
//! Shape: `{"code","message","category","retryable","recommendedAction"}` plus
//! an optional `"details"` object (keys in that order when rendered).
//! [`parse_error_object`] accepts host codes (any non-empty `code`) but only
//! the closed §10.1 spellings for `category` and `recommendedAction`.

use serde_json::{Map, Value};

use crate::errors::{Category, ProtocolError, RecommendedAction, Result};
use crate::response::ErrorFrame;

/// Renders `frame` as the §10.1 JSON object. `details` (raw JSON text) is
/// embedded as a JSON value when it parses, else dropped.
pub fn error_object(frame: &ErrorFrame) -> Value {
    let mut out = Map::new();
    out.insert("code".into(), Value::String(frame.code.clone()));
    out.insert("message".into(), Value::String(frame.message.clone()));
    out.insert("category".into(), Value::String(frame.category.clone()));
    out.insert("retryable".into(), Value::Bool(frame.retryable));
    out.insert("recommendedAction".into(), Value::String(frame.recommended_action.clone()));
    if let Some(details) = frame.details.as_deref().and_then(|d| serde_json::from_str::<Value>(d).ok()) {
        out.insert("details".into(), details);
    }
    Value::Object(out)
}

/// Parses a §10.1 JSON object into an `ERROR` frame record: `code` a
/// non-empty string, `message` a string, `category` / `recommendedAction` one
/// of the §10.1 spellings, `retryable` a boolean, `details` (optional) an
/// object or null. Unknown keys are ignored.
/// Errors: `sync.invalid_request` naming the offending key.
pub fn parse_error_object(value: &Value) -> Result<ErrorFrame> {
    let obj = value
        .as_object()
        .ok_or_else(|| ProtocolError::invalid("a §10.1 error must be a JSON object"))?;
    let text = |key: &str| -> Result<String> {
        obj.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ProtocolError::invalid(format!("§10.1 error key {key:?} must be a string")))
    };
    let code = text("code")?;
    if code.is_empty() {
        return Err(ProtocolError::invalid("§10.1 error key \"code\" must not be empty"));
    }
    let category = text("category")?;
    if Category::parse(&category).is_none() {
        return Err(ProtocolError::invalid(format!("§10.1 error category {category:?} is not a §10.1 category")));
    }
    let recommended_action = text("recommendedAction")?;
    if RecommendedAction::parse(&recommended_action).is_none() {
        return Err(ProtocolError::invalid(format!(
            "§10.1 error recommendedAction {recommended_action:?} is not a §10.1 action"
        )));
    }
    let retryable = obj
        .get("retryable")
        .and_then(Value::as_bool)
        .ok_or_else(|| ProtocolError::invalid("§10.1 error key \"retryable\" must be a boolean"))?;
    let details = match obj.get("details") {
        None | Some(Value::Null) => None,
        Some(d @ Value::Object(_)) => Some(d.to_string()),
        Some(_) => return Err(ProtocolError::invalid("§10.1 error key \"details\" must be an object")),
    };
    Ok(ErrorFrame { code, message: text("message")?, category, retryable, recommended_action, details })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::ErrorCode;
    use serde_json::json;

    #[test]
    fn catalog_error_round_trips() {
        let frame = ErrorFrame::from_code(ErrorCode::TooManyOperations, "600 > 500", Some("{\"limit\":500}".into()));
        let v = error_object(&frame);
        assert_eq!(
            v.to_string(),
            r#"{"code":"sync.too_many_operations","message":"600 > 500","category":"invalid-request","retryable":false,"recommendedAction":"splitBatch","details":{"limit":500}}"#
        );
        assert_eq!(parse_error_object(&v).unwrap(), frame);
    }

    #[test]
    fn host_codes_pass_closed_sets_do_not() {
        let ok = json!({"code":"syncular.internal","message":"m","category":"internal","retryable":false,"recommendedAction":"inspectServer"});
        assert_eq!(parse_error_object(&ok).unwrap().code, "syncular.internal");
        for (key, bad) in [
            ("category", json!("teapot")),
            ("recommendedAction", json!("panic")),
            ("retryable", json!("no")),
            ("code", json!("")),
            ("message", json!(3)),
            ("details", json!([1])),
        ] {
            let mut v = ok.clone();
            v[key] = bad;
            let err = parse_error_object(&v).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidRequest, "{key}");
            assert!(err.message.contains(key), "{key}: {}", err.message);
        }
        assert!(parse_error_object(&json!([])).is_err());
    }
}
