//! The bootstrap resume token (§4.7): the `SUB_END.bootstrapState` JSON
//! document `{"asOfCommitSeq": i, "tables": [..], "tableIndex": i,
//! "rowCursor": string|null}`. Clients round-trip it opaquely; only the
//! server interprets it. An unusable token is never a request error — the
//! engine silently restarts the bootstrap with a fresh pin — so
//! [`ResumeToken::parse`] returns `None` rather than an error.

use crate::canonical_json::write_json_string;
use crate::primitives::MAX_SAFE_INTEGER;
use serde_json::Value;

/// A parsed resume token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeToken {
    /// The pinned snapshot point (commit seq, 0..=2^53−1).
    pub as_of_commit_seq: i64,
    /// The subscription's bootstrap table list, in bootstrap order (≥ 1).
    pub tables: Vec<String>,
    /// Index into `tables` of the table being served (< `tables.len()`).
    pub table_index: usize,
    /// Opaque position inside that table; `None` = table start.
    pub row_cursor: Option<String>,
}

fn safe_int(v: &Value) -> Option<i64> {
    v.as_i64().filter(|n| (0..=MAX_SAFE_INTEGER).contains(n))
}

impl ResumeToken {
    /// Parses a token; `None` (restart the bootstrap) when the text is not
    /// JSON, not an object, misses a field, has a field of the wrong type,
    /// a negative / fractional / unsafe integer, an empty `tables`, or a
    /// `tableIndex` outside `tables`. Unknown extra keys are ignored.
    pub fn parse(text: &str) -> Option<ResumeToken> {
        let v: Value = serde_json::from_str(text).ok()?;
        let o = v.as_object()?;
        let as_of_commit_seq = safe_int(o.get("asOfCommitSeq")?)?;
        let tables = o
            .get("tables")?
            .as_array()?
            .iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()?;
        let table_index = usize::try_from(safe_int(o.get("tableIndex")?)?).ok()?;
        if tables.is_empty() || table_index >= tables.len() {
            return None;
        }
        let row_cursor = match o.get("rowCursor")? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            _ => return None,
        };
        Some(ResumeToken { as_of_commit_seq, tables, table_index, row_cursor })
    }

    /// The canonical text: compact, keys in the §4.7 order (what the
    /// reference server's `JSON.stringify` emits).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push_str("{\"asOfCommitSeq\":");
        out.push_str(&self.as_of_commit_seq.to_string());
        out.push_str(",\"tables\":[");
        for (i, t) in self.tables.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_json_string(&mut out, t);
        }
        out.push_str("],\"tableIndex\":");
        out.push_str(&self.table_index.to_string());
        out.push_str(",\"rowCursor\":");
        match &self.row_cursor {
            Some(c) => write_json_string(&mut out, c),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }

    /// §4.7: does the token's table list correspond to the subscription's
    /// bootstrap table list? (A mismatch also restarts the bootstrap.)
    pub fn matches_tables<S: AsRef<str>>(&self, tables: &[S]) -> bool {
        self.tables.len() == tables.len()
            && self.tables.iter().zip(tables).all(|(a, b)| a == b.as_ref())
    }

    /// The table currently being served.
    pub fn current_table(&self) -> &str {
        &self.tables[self.table_index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parse_round_trip() {
        let t = ResumeToken {
            as_of_commit_seq: 42,
            tables: vec!["tasks".into(), "notes \"q\"".into()],
            table_index: 1,
            row_cursor: Some("row-7".into()),
        };
        let text = t.render();
        assert_eq!(
            text,
            r#"{"asOfCommitSeq":42,"tables":["tasks","notes \"q\""],"tableIndex":1,"rowCursor":"row-7"}"#
        );
        assert_eq!(ResumeToken::parse(&text), Some(t.clone()));
        assert_eq!(t.current_table(), "notes \"q\"");
        assert!(t.matches_tables(&["tasks", "notes \"q\""]));
        assert!(!t.matches_tables(&["tasks"]));
        let start = ResumeToken { row_cursor: None, table_index: 0, ..t };
        assert!(start.render().ends_with(",\"tableIndex\":0,\"rowCursor\":null}"));
        assert_eq!(ResumeToken::parse(&start.render()), Some(start));
    }

    #[test]
    fn unusable_tokens_are_none() {
        for bad in [
            "not json",
            "7",
            r#"{"tables":["t"],"tableIndex":0,"rowCursor":null}"#,
            r#"{"asOfCommitSeq":-1,"tables":["t"],"tableIndex":0,"rowCursor":null}"#,
            r#"{"asOfCommitSeq":1.5,"tables":["t"],"tableIndex":0,"rowCursor":null}"#,
            r#"{"asOfCommitSeq":1,"tables":[],"tableIndex":0,"rowCursor":null}"#,
            r#"{"asOfCommitSeq":1,"tables":["t"],"tableIndex":1,"rowCursor":null}"#,
            r#"{"asOfCommitSeq":1,"tables":["t"],"tableIndex":0}"#,
            r#"{"asOfCommitSeq":1,"tables":["t"],"tableIndex":0,"rowCursor":5}"#,
            r#"{"asOfCommitSeq":1,"tables":[5],"tableIndex":0,"rowCursor":null}"#,
            r#"{"asOfCommitSeq":9007199254740992,"tables":["t"],"tableIndex":0,"rowCursor":null}"#,
        ] {
            assert_eq!(ResumeToken::parse(bad), None, "{bad}");
        }
    }
}
