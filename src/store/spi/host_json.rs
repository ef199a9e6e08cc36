//! A `jsonb` a host function returned (scope resolver, validators, reaction
//! planner), read without trusting it. pgrx's `JsonB` panics — an internal
//! error — on a value `serde_json` refuses (a number beyond a 64-bit float,
//! nesting deeper than 127 levels); here the statement selects the value as
//! `text` and a refusal is a [`StoreError`] the engine recognizes
//! ([`StoreError::unreadable_json`]) and reports as the function's malformed
//! answer.

use serde_json::Value;

use crate::store::{StoreError, StoreResult};

/// The start of the detail of an unreadable answer.
pub const UNREADABLE: &str = "returned jsonb this extension cannot read";

/// Parses the text of a returned `jsonb` (`None` = SQL NULL).
pub fn parse(statement: &'static str, text: Option<String>) -> StoreResult<Option<Value>> {
    text.map(|text| {
        serde_json::from_str(&text).map_err(|e| {
            StoreError::new(
                statement,
                format!("{UNREADABLE}: {e} (numbers must fit a 64-bit float, nesting at most 127 levels)"),
            )
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_values_are_recognizable_store_errors() {
        assert_eq!(parse("s", None).unwrap(), None);
        assert_eq!(parse("s", Some("{\"a\": [1]}".into())).unwrap(), Some(serde_json::json!({"a": [1]})));
        for bad in ["[1e400]".to_owned(), format!("{}{}", "[".repeat(200), "]".repeat(200))] {
            let e = parse("s", Some(bad)).unwrap_err();
            assert!(e.unreadable_json().is_some_and(|d| d.starts_with(UNREADABLE)), "{e}");
        }
        assert_eq!(StoreError::new("s", "other").unreadable_json(), None);
    }
}
