//! JWT bearer authentication: `Authorization: Bearer <token>` (a WebSocket upgrade may pass
//! `?access_token=<token>` instead — browsers cannot set headers there). HS256 with a secret
//! file, or RS256/ES256 with a PEM public key file. `exp` is required (leeway configurable);
//! `iss`/`aud` are checked when configured. Claims map to the actor (default `sub`), the
//! partition (a configured claim, which a token must then carry; else the default) and, when configured, the allowed scopes (a claim
//! holding a JSON object of string arrays; otherwise the database resolver decides).
//! Every failure is `sync.auth_required` (401); messages never contain the token.

use std::collections::HashSet;

use axum::http::{header::AUTHORIZATION, HeaderMap};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::{is_allowed_map, Identity};
use crate::config::{Config, JwtAlgorithm};
use crate::db::ApiError;

/// The JWT authenticator.
pub struct JwtAuth {
    key: DecodingKey,
    validation: Validation,
    actor_claim: String,
    partition_claim: Option<String>,
    scopes_claim: Option<String>,
    default_partition: String,
}

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("JwtAuth").field("algorithms", &self.validation.algorithms).finish_non_exhaustive()
    }
}

/// Settings of [`JwtAuth::new`].
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// Signature algorithm.
    pub algorithm: JwtAlgorithm,
    /// HS256: the secret; RS256/ES256: the PEM public key.
    pub key: Vec<u8>,
    /// Leeway for `exp`/`nbf`, seconds.
    pub leeway_secs: u64,
    /// Required `iss`.
    pub issuer: Option<String>,
    /// Required `aud`.
    pub audience: Option<String>,
    /// Claim holding the actor id.
    pub actor_claim: String,
    /// Claim holding the partition.
    pub partition_claim: Option<String>,
    /// Claim holding the allowed scopes.
    pub scopes_claim: Option<String>,
    /// Partition when no partition claim is configured (a configured claim must be present).
    pub default_partition: String,
}

impl JwtAuth {
    /// Reads the key file named by the flags and builds the authenticator.
    ///
    /// Errors: no algorithm, no/unreadable key file for it, a key that does not parse.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        let algorithm = match (config.jwt_algorithm, &config.jwt_secret_file, &config.jwt_public_key_file) {
            (Some(a), _, _) => a,
            (None, Some(_), None) => JwtAlgorithm::Hs256,
            _ => return Err("--auth jwt needs --jwt-algorithm (HS256, RS256 or ES256)".into()),
        };
        let (flag, path) = match algorithm {
            JwtAlgorithm::Hs256 => ("--jwt-secret-file", &config.jwt_secret_file),
            JwtAlgorithm::Rs256 | JwtAlgorithm::Es256 => ("--jwt-public-key-file", &config.jwt_public_key_file),
        };
        let path = path.as_ref().ok_or_else(|| format!("--auth jwt with {algorithm:?} needs {flag}"))?;
        let mut key = std::fs::read(path).map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))?;
        if algorithm == JwtAlgorithm::Hs256 {
            if key.last() == Some(&b'\n') {
                key.pop();
            }
            if key.len() < 32 {
                return Err(format!("{flag}: an HS256 secret must be at least 32 bytes"));
            }
        }
        JwtAuth::new(JwtSettings {
            algorithm,
            key,
            leeway_secs: config.jwt_leeway_secs,
            issuer: config.jwt_issuer.clone(),
            audience: config.jwt_audience.clone(),
            actor_claim: config.jwt_actor_claim.clone(),
            partition_claim: config.jwt_partition_claim.clone(),
            scopes_claim: config.jwt_scopes_claim.clone(),
            default_partition: config.default_partition.clone(),
        })
    }

    /// Builds the authenticator from settings.
    ///
    /// Errors: a key that does not parse for the algorithm.
    pub fn new(s: JwtSettings) -> Result<Self, String> {
        let (alg, key) = match s.algorithm {
            JwtAlgorithm::Hs256 => (
                Algorithm::HS256,
                DecodingKey::from_secret(&s.key).map_err(|e| format!("HS256 secret not usable: {e}"))?,
            ),
            JwtAlgorithm::Rs256 => (
                Algorithm::RS256,
                DecodingKey::from_rsa_pem(&s.key).map_err(|e| format!("RS256 public key does not parse: {e}"))?,
            ),
            JwtAlgorithm::Es256 => (
                Algorithm::ES256,
                DecodingKey::from_ec_pem(&s.key).map_err(|e| format!("ES256 public key does not parse: {e}"))?,
            ),
        };
        let mut validation = Validation::new(alg);
        validation.leeway = s.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.required_spec_claims = HashSet::from(["exp".to_owned()]);
        if let Some(iss) = &s.issuer {
            validation.set_issuer(&[iss]);
            validation.required_spec_claims.insert("iss".into());
        }
        match &s.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                validation.required_spec_claims.insert("aud".into());
            }
            None => validation.validate_aud = false,
        }
        Ok(JwtAuth {
            key,
            validation,
            actor_claim: s.actor_claim,
            partition_claim: s.partition_claim,
            scopes_claim: s.scopes_claim,
            default_partition: s.default_partition,
        })
    }

    /// Verifies the token and maps its claims.
    ///
    /// Errors: `sync.auth_required` (401): no token, a malformed or expired token, a bad
    /// signature, wrong `iss`/`aud`, a missing/empty actor claim, a partition claim (when
    /// configured) that is missing, empty or not a string, a scopes claim that is missing or not an object of string arrays.
    pub fn authenticate(&self, headers: &HeaderMap, query_token: Option<&str>) -> Result<Identity, ApiError> {
        let token = bearer(headers)?.or(query_token.filter(|t| !t.is_empty())).ok_or_else(|| {
            ApiError::auth_required("a bearer token is required (Authorization: Bearer …)")
        })?;
        let claims = decode::<Map<String, Value>>(token, &self.key, &self.validation)
            .map_err(|e| ApiError::auth_required(describe(e.kind())))?
            .claims;
        let actor_id = match claims.get(&self.actor_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(ApiError::auth_required(format!(
                    "token claim {:?} (the actor) is missing or not a non-empty string",
                    self.actor_claim
                )))
            }
        };
        let partition = match &self.partition_claim {
            None => self.default_partition.clone(),
            // A configured partition claim is the tenant boundary: a token without it is
            // refused, never routed to the default partition (fail closed).
            Some(c) => match claims.get(c) {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => {
                    return Err(ApiError::auth_required(format!(
                        "token claim {c:?} (the partition) is missing or not a non-empty string"
                    )))
                }
            },
        };
        let allowed_scopes = match &self.scopes_claim {
            None => None,
            Some(c) => match claims.get(c) {
                Some(v) if is_allowed_map(v) => Some(v.clone()),
                _ => {
                    return Err(ApiError::auth_required(format!(
                        "token claim {c:?} (allowed scopes) is missing or not an object of string arrays"
                    )))
                }
            },
        };
        let expires_at_ms = claims.get("exp").and_then(Value::as_i64).map(|exp| exp.saturating_mul(1000));
        Ok(Identity { actor_id, partition, allowed_scopes, expires_at_ms })
    }
}

/// The token of an `Authorization: Bearer` header (`None` without the header).
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(AUTHORIZATION) else { return Ok(None) };
    let value = value.to_str().map_err(|_| ApiError::auth_required("Authorization header is not ASCII"))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => {
            Ok(Some(token.trim()))
        }
        _ => Err(ApiError::auth_required("Authorization header is not `Bearer <token>`")),
    }
}

/// A token-free description of a validation failure.
fn describe(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "token expired".into(),
        ErrorKind::ImmatureSignature => "token not valid yet (nbf)".into(),
        ErrorKind::InvalidSignature => "token signature does not verify".into(),
        ErrorKind::InvalidIssuer => "token issuer (iss) not accepted".into(),
        ErrorKind::InvalidAudience => "token audience (aud) not accepted".into(),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => "token algorithm not accepted".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("token lacks the required claim {c:?}"),
        ErrorKind::InvalidClaimFormat(c) => format!("token claim {c:?} is malformed"),
        _ => "token is malformed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;
    use std::sync::OnceLock;

    fn now() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
    }

    fn settings(algorithm: JwtAlgorithm, key: Vec<u8>) -> JwtSettings {
        JwtSettings {
            algorithm,
            key,
            leeway_secs: 5,
            issuer: None,
            audience: None,
            actor_claim: "sub".into(),
            partition_claim: Some("tenant".into()),
            scopes_claim: None,
            default_partition: "dflt".into(),
        }
    }

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        h
    }

    /// (private PKCS#8 PEM, public SPKI PEM), generated once per test run.
    fn rsa_keys() -> &'static (String, String) {
        static KEYS: OnceLock<(String, String)> = OnceLock::new();
        KEYS.get_or_init(|| {
            use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
            let private = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap();
            let public = rsa::RsaPublicKey::from(&private);
            (
                private.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
                public.to_public_key_pem(LineEnding::LF).unwrap(),
            )
        })
    }

    fn ec_keys() -> (String, String) {
        use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
        let secret = p256::SecretKey::random(&mut rand::thread_rng());
        (
            secret.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
            secret.public_key().to_public_key_pem(LineEnding::LF).unwrap(),
        )
    }

    #[test]
    fn hs256_maps_claims() {
        let secret = b"0123456789abcdef0123456789abcdef".to_vec();
        let auth = JwtAuth::new(settings(JwtAlgorithm::Hs256, secret.clone())).unwrap();
        let key = EncodingKey::from_secret(&secret).unwrap();
        let token = encode(&Header::default(), &json!({"sub": "u1", "tenant": "t1", "exp": now() + 60}), &key).unwrap();
        let id = auth.authenticate(&headers(&token), None).unwrap();
        assert_eq!((id.actor_id.as_str(), id.partition.as_str()), ("u1", "t1"));
        assert_eq!(id.allowed_scopes, None);
        // Query token (WebSocket) works when no header is present.
        assert_eq!(auth.authenticate(&HeaderMap::new(), Some(&token)).unwrap().actor_id, "u1");
        // Partition claim configured but absent (or empty, or not a string) → 401, never the
        // default partition.
        for claims in [json!({"sub": "u1", "exp": now() + 60}), json!({"sub": "u1", "tenant": "", "exp": now() + 60}), json!({"sub": "u1", "tenant": 7, "exp": now() + 60})] {
            let token = encode(&Header::default(), &claims, &key).unwrap();
            let e = auth.authenticate(&headers(&token), None).unwrap_err();
            assert_eq!((e.status.as_u16(), e.code_str()), (401, "sync.auth_required"), "{claims}");
            assert!(e.body["message"].as_str().unwrap().contains("\"tenant\""), "{}", e.body["message"]);
        }
        // No partition claim configured → the default partition.
        let auth_nc = JwtAuth::new(JwtSettings { partition_claim: None, ..settings(JwtAlgorithm::Hs256, secret.clone()) }).unwrap();
        assert_eq!(auth_nc.authenticate(&headers(&token), None).unwrap().partition, "dflt");
        // Wrong secret.
        let other = EncodingKey::from_secret(b"another-secret-another-secret-xx").unwrap();
        let forged = encode(&Header::default(), &json!({"sub": "u1", "exp": now() + 60}), &other).unwrap();
        let e = auth.authenticate(&headers(&forged), None).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code_str()), (401, "sync.auth_required"));
        assert!(!e.body["message"].as_str().unwrap().contains(&forged));
    }

    #[test]
    fn expired_missing_exp_and_garbage_are_401() {
        let secret = b"0123456789abcdef0123456789abcdef".to_vec();
        let auth = JwtAuth::new(settings(JwtAlgorithm::Hs256, secret.clone())).unwrap();
        let key = EncodingKey::from_secret(&secret).unwrap();
        let expired = encode(&Header::default(), &json!({"sub": "u1", "exp": now() - 60}), &key).unwrap();
        let e = auth.authenticate(&headers(&expired), None).unwrap_err();
        assert_eq!(e.body["message"], "token expired");
        // Within the leeway it still passes.
        let fresh = encode(&Header::default(), &json!({"sub": "u1", "tenant": "t1", "exp": now() - 2}), &key).unwrap();
        assert!(auth.authenticate(&headers(&fresh), None).is_ok());
        let no_exp = encode(&Header::default(), &json!({"sub": "u1"}), &key).unwrap();
        assert!(auth.authenticate(&headers(&no_exp), None).unwrap_err().body["message"].as_str().unwrap().contains("exp"));
        assert_eq!(auth.authenticate(&headers("not.a.jwt"), None).unwrap_err().status.as_u16(), 401);
        assert_eq!(auth.authenticate(&HeaderMap::new(), None).unwrap_err().status.as_u16(), 401);
        let mut basic = HeaderMap::new();
        basic.insert(AUTHORIZATION, "Basic dXNlcjpwYXNz".parse().unwrap());
        assert_eq!(auth.authenticate(&basic, None).unwrap_err().status.as_u16(), 401);
        // No actor claim.
        let anon = encode(&Header::default(), &json!({"exp": now() + 60}), &key).unwrap();
        assert!(auth.authenticate(&headers(&anon), None).is_err());
    }

    #[test]
    fn rs256_accepts_its_key_and_refuses_hs256_confusion() {
        let (private, public) = rsa_keys();
        let auth = JwtAuth::new(settings(JwtAlgorithm::Rs256, public.as_bytes().to_vec())).unwrap();
        let key = EncodingKey::from_rsa_pem(private.as_bytes()).unwrap();
        let token = encode(&Header::new(Algorithm::RS256), &json!({"sub": "u2", "tenant": "t2", "exp": now() + 60}), &key).unwrap();
        assert_eq!(auth.authenticate(&headers(&token), None).unwrap().actor_id, "u2");
        // Algorithm confusion: an HS256 token signed with the public key text is refused.
        let confused = encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "u2", "exp": now() + 60}),
            &EncodingKey::from_secret(public.as_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(auth.authenticate(&headers(&confused), None).unwrap_err().body["message"], "token algorithm not accepted");
    }

    #[test]
    fn es256_issuer_audience_and_scopes_claim() {
        let (private, public) = ec_keys();
        let mut s = settings(JwtAlgorithm::Es256, public.into_bytes());
        s.issuer = Some("https://issuer.example".into());
        s.audience = Some("syncular".into());
        s.scopes_claim = Some("scopes".into());
        let auth = JwtAuth::new(s).unwrap();
        let key = EncodingKey::from_ec_pem(private.as_bytes()).unwrap();
        let sign = |claims: Value| encode(&Header::new(Algorithm::ES256), &claims, &key).unwrap();
        let good = json!({"sub": "u3", "tenant": "t3", "exp": now() + 60, "iss": "https://issuer.example", "aud": "syncular",
                          "scopes": {"project_id": ["p1", "p2"]}});
        let id = auth.authenticate(&headers(&sign(good.clone())), None).unwrap();
        assert_eq!(id.allowed_scopes, Some(json!({"project_id": ["p1", "p2"]})));
        let mut wrong_iss = good.clone();
        wrong_iss["iss"] = json!("https://evil.example");
        assert!(auth.authenticate(&headers(&sign(wrong_iss)), None).is_err());
        let mut wrong_aud = good.clone();
        wrong_aud["aud"] = json!("other");
        assert!(auth.authenticate(&headers(&sign(wrong_aud)), None).is_err());
        let mut bad_scopes = good.clone();
        bad_scopes["scopes"] = json!({"project_id": "p1"});
        assert!(auth.authenticate(&headers(&sign(bad_scopes)), None).is_err());
        let mut no_scopes = good;
        no_scopes.as_object_mut().unwrap().remove("scopes");
        assert!(auth.authenticate(&headers(&sign(no_scopes)), None).is_err());
    }

    #[test]
    fn bad_key_files_fail_at_startup() {
        assert!(JwtAuth::new(settings(JwtAlgorithm::Rs256, b"not a pem".to_vec())).is_err());
        assert!(JwtAuth::new(settings(JwtAlgorithm::Es256, b"-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n".to_vec())).is_err());
    }
}
