//! UNSAFE development authentication: the actor comes from `x-syncular-actor`, the partition
//! from `x-syncular-partition` (default: `--default-partition`), allowed scopes from the
//! database resolver. Anyone can claim any actor — never expose a dev-mode gateway.

use axum::http::HeaderMap;

use super::Identity;
use crate::db::ApiError;

/// Header naming the actor (required, non-empty).
pub const ACTOR_HEADER: &str = "x-syncular-actor";
/// Header naming the partition (optional).
pub const PARTITION_HEADER: &str = "x-syncular-partition";

/// The development authenticator.
#[derive(Debug, Clone)]
pub struct DevAuth {
    default_partition: String,
}

impl DevAuth {
    /// Uses `default_partition` when a request names none.
    pub fn new(default_partition: String) -> Self {
        DevAuth { default_partition }
    }

    /// Reads the two headers.
    ///
    /// Errors: `sync.auth_required` (401) when `x-syncular-actor` is missing, empty or not
    /// UTF-8, or `x-syncular-partition` is empty or not UTF-8.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let header = |name: &str| -> Result<Option<String>, ApiError> {
            match headers.get(name) {
                None => Ok(None),
                // UTF-8, not only the visible ASCII `to_str` takes: "jörg" is an actor too.
                Some(v) => match std::str::from_utf8(v.as_bytes()) {
                    Ok(s) if !s.is_empty() => Ok(Some(s.to_owned())),
                    _ => Err(ApiError::auth_required(format!("dev auth: header {name} is empty or not UTF-8"))),
                },
            }
        };
        let actor_id = header(ACTOR_HEADER)?
            .ok_or_else(|| ApiError::auth_required(format!("dev auth: header {ACTOR_HEADER} is required")))?;
        let partition = header(PARTITION_HEADER)?.unwrap_or_else(|| self.default_partition.clone());
        Ok(Identity { actor_id, partition, allowed_scopes: None, expires_at_ms: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn reads_actor_and_partition() {
        let auth = DevAuth::new("dflt".into());
        let mut h = HeaderMap::new();
        assert_eq!(auth.authenticate(&h).unwrap_err().status.as_u16(), 401);
        h.insert(ACTOR_HEADER, "u1".parse().unwrap());
        let id = auth.authenticate(&h).unwrap();
        assert_eq!((id.actor_id.as_str(), id.partition.as_str(), id.allowed_scopes), ("u1", "dflt", None));
        h.insert(ACTOR_HEADER, HeaderValue::from_bytes("jörg".as_bytes()).unwrap());
        assert_eq!(auth.authenticate(&h).unwrap().actor_id, "jörg", "UTF-8, not only ASCII");
        h.insert(ACTOR_HEADER, HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        assert_eq!(auth.authenticate(&h).unwrap_err().status.as_u16(), 401, "not UTF-8");
        h.insert(ACTOR_HEADER, "u1".parse().unwrap());
        h.insert(PARTITION_HEADER, "t1".parse().unwrap());
        assert_eq!(auth.authenticate(&h).unwrap().partition, "t1");
        h.insert(ACTOR_HEADER, "".parse().unwrap());
        assert_eq!(auth.authenticate(&h).unwrap_err().code_str(), "sync.auth_required");
    }
}
