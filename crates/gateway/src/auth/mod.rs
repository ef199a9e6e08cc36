//! Authentication (§1.1: host-provided, out of protocol scope): turns an HTTP request or a
//! WebSocket upgrade into an [`Identity`] — actor, partition, allowed scopes — or
//! `sync.auth_required` (401). Pluggable: [`dev`] (UNSAFE header trust) and [`jwt`] (bearer
//! tokens). Tokens and headers never reach a log or an error message.

pub mod dev;
pub mod jwt;

use axum::http::HeaderMap;
use serde_json::Value;

use crate::config::{AuthMode, Config};
use crate::db::ApiError;

/// Who is calling.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The authenticated actor (`actor_id` of every SQL call).
    pub actor_id: String,
    /// The host partition (tenant).
    pub partition: String,
    /// §3.2 allowed map `{"<variable>": ["<value>", …]}`; `None` = the database resolver.
    pub allowed_scopes: Option<Value>,
    /// When the credential stops being valid (a JWT's `exp`), Unix ms; a realtime session is
    /// closed then. `None` = no expiry (dev mode).
    pub expires_at_ms: Option<i64>,
}

/// The configured authenticator.
#[derive(Debug)]
pub enum Authenticator {
    /// [`dev::DevAuth`] — UNSAFE.
    Dev(dev::DevAuth),
    /// [`jwt::JwtAuth`].
    Jwt(Box<jwt::JwtAuth>),
}

impl Authenticator {
    /// Builds the authenticator of `config` (reads key files).
    ///
    /// Errors: a missing or unreadable key file, a key that does not parse, a flag
    /// combination that does not fit the algorithm.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        match config.auth {
            AuthMode::Dev => Ok(Authenticator::Dev(dev::DevAuth::new(config.default_partition.clone()))),
            AuthMode::Jwt => jwt::JwtAuth::from_config(config).map(|j| Authenticator::Jwt(Box::new(j))),
        }
    }

    /// True for the UNSAFE development mode.
    pub fn is_unsafe(&self) -> bool {
        matches!(self, Authenticator::Dev(_))
    }

    /// Authenticates a request. `query_token` is the WebSocket `?access_token=` value (JWT
    /// only; the `Authorization` header wins when both are present).
    ///
    /// Errors: `sync.auth_required` (401) with a message that names what is wrong but never
    /// echoes a credential.
    pub fn authenticate(&self, headers: &HeaderMap, query_token: Option<&str>) -> Result<Identity, ApiError> {
        match self {
            Authenticator::Dev(d) => d.authenticate(headers),
            Authenticator::Jwt(j) => j.authenticate(headers, query_token),
        }
    }
}

/// Checks that `v` is a §3.2 allowed map: a JSON object whose values are arrays of strings.
pub fn is_allowed_map(v: &Value) -> bool {
    v.as_object().is_some_and(|m| {
        m.values().all(|vals| vals.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
    })
}
