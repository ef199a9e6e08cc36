//! The host scope resolver (§3.2 "allowed"): a SQL function
//! `(partition text, actor_id text) returns jsonb` registered with
//! `syncular.set_scope_resolver`, answering the allowed map
//! `{"<variable>": ["<value>", …]}` (`"*"` = any value).
//!
//! The sync round calls it at most once per request, when the gateway passed
//! no allowed map, inside a subtransaction: a resolver that raises means
//! [`Allowed::Denied`] — every subscription revoked, every write forbidden
//! (§3.2 rule 5, §3.4 step 4) — and leaves the caller's transaction usable.
//! A value that is not a map of string lists is a loud error
//! (`syncular.resolver_malformed`) naming the key and the type received.
//!
//! Errors that say nothing about the actor — SQLSTATE classes 40
//! (serialization failure, deadlock), 53 (insufficient resources), 54
//! (program limit), 57 (query canceled, statement timeout, shutdown), 58
//! (system error) and XX (internal) — are re-raised unchanged: the whole
//! request fails and nothing (no `sync.forbidden` result) is stored.
//!
//! The resolver runs inside the SECURITY DEFINER sync functions, i.e. with
//! the extension owner's (a superuser's) privileges; so it must be owned by
//! a superuser — checked when it is registered and again before every call
//! (`syncular.invalid_resolver`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::resolver_store;
use crate::store::subtransaction;

/// The allowed map (§3.2): variable → allowed values, `"*"` = any.
pub type AllowedMap = BTreeMap<String, Vec<String>>;

/// What the resolver step produced for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// The resolver returned this map.
    Map(AllowedMap),
    /// No map: no resolver is registered, or it raised. Every subscription
    /// revokes and every write is `sync.forbidden`. `reason` is for logs
    /// (the resolver's error message), never sent to clients.
    Denied { reason: String },
}

impl Allowed {
    /// The map, or `None` when denied (the shape the protocol crate's
    /// `effective` and `authorize_write` take).
    pub fn map(&self) -> Option<&AllowedMap> {
        match self {
            Allowed::Map(map) => Some(map),
            Allowed::Denied { .. } => None,
        }
    }
}

/// Checks that `function` can serve as a resolver: a plain function (not a
/// procedure/aggregate), arguments exactly `(text, text)`, returning a
/// single `jsonb`. Errors: `syncular.invalid_resolver`.
pub fn check_resolver_shape(function: pgrx::pg_sys::Oid) -> EngineResult<()> {
    let shape = resolver_store::describe_function(function)?.ok_or_else(|| {
        EngineError::host(HostCode::InvalidResolver, format!("no function with OID {}", u32::from(function)))
    })?;
    let text = resolver_store::text_type_oid();
    let problems = [
        (shape.kind != "f").then(|| format!("it is not a plain function (prokind {:?})", shape.kind)),
        (shape.arg_types != [text, text])
            .then(|| "its arguments must be exactly (partition text, actor_id text)".to_string()),
        (shape.return_type != resolver_store::jsonb_type_oid()).then(|| "it must return jsonb".to_string()),
        shape.returns_set.then(|| "it must not return a set".to_string()),
    ];
    match problems.into_iter().flatten().next() {
        None => Ok(()),
        Some(problem) => Err(EngineError::host(
            HostCode::InvalidResolver,
            format!("{} cannot be the scope resolver: {problem}", shape.signature),
        )),
    }
}

/// `true` for SQLSTATEs that mean "the resolver could not answer" rather
/// than "the resolver refused": classes 40, 53, 54, 57, 58 and XX.
pub fn is_transient_sqlstate(sqlstate: &str) -> bool {
    matches!(sqlstate.get(..2), Some("40" | "53" | "54" | "57" | "58" | "XX"))
}

/// Refuses a resolver whose owner is not a superuser: it would run with the
/// extension owner's privileges while its owner can replace its body.
/// `signature` names the function in the message.
/// Errors: `syncular.invalid_resolver` (22023).
pub fn check_resolver_owner(signature: &str, owner: &str, owner_is_superuser: bool) -> EngineResult<()> {
    if owner_is_superuser {
        return Ok(());
    }
    Err(EngineError::host(
        HostCode::InvalidResolver,
        format!(
            "{signature} cannot be the scope resolver: it is owned by role {owner:?}, which is not a superuser \
             (the resolver runs with the extension owner's privileges, so only a superuser may own it)"
        ),
    ))
}

/// [`check_resolver_owner`] for a function by OID (at registration).
/// Errors: `syncular.invalid_resolver` (22023).
pub fn check_resolver_owner_of(function: pgrx::pg_sys::Oid) -> EngineResult<()> {
    let signature = resolver_store::describe_function(function)?
        .map(|shape| shape.signature)
        .unwrap_or_else(|| format!("function {}", u32::from(function)));
    let owner = resolver_store::function_owner(function)?.ok_or_else(|| {
        EngineError::host(HostCode::InvalidResolver, format!("no function with OID {}", u32::from(function)))
    })?;
    check_resolver_owner(&signature, &owner.role, owner.is_superuser)
}

/// What the resolver step answered: a live decision, or the §7.3.3 outage
/// signal (the JSON string [`crate::engine::leases::OUTAGE_SIGNAL`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The live authority decided (a map, or denied).
    Live(Allowed),
    /// The resolver signalled that the live authority is unavailable.
    Outage,
}

/// [`resolve`] for callers with no lease to fall back on: the outage
/// signal fails with `sync.auth_lease_required`. Errors: as [`resolve`].
pub fn resolve_allowed(partition: &str, actor_id: &str) -> EngineResult<Allowed> {
    match resolve(partition, actor_id)? {
        Resolution::Live(allowed) => Ok(allowed),
        Resolution::Outage => Err(EngineError::protocol(
            syncular_protocol::ErrorCode::AuthLeaseRequired,
            "the scope resolver signalled an outage and no lease applies here (§7.3.3)",
        )),
    }
}

/// Runs the registered resolver once for (`partition`, `actor_id`).
///
/// `Ok(Live(Allowed::Map))` for a well-formed map; `Ok(Live(Allowed::Denied))`
/// when no resolver is registered or it raised (its writes rolled back);
/// `Ok(Outage)` when it returned the JSON string `"resolver_outage"`
/// (§7.3.3); `Err(syncular.resolver_malformed)` for any other return value
/// (including SQL NULL); `Err(syncular.invalid_resolver)` when its owner is
/// no longer a superuser. A transient error ([`is_transient_sqlstate`])
/// raised by the resolver is re-raised as is (the request fails).
pub fn resolve(partition: &str, actor_id: &str) -> EngineResult<Resolution> {
    let Some(resolver) = resolver_store::load_scope_resolver()? else {
        return Ok(Resolution::Live(Allowed::Denied { reason: "no scope resolver is registered".into() }));
    };
    let name = format!("{}.{}", resolver.schema, resolver.name);
    check_resolver_owner(&name, &resolver.owner, resolver.owner_is_superuser)?;
    let outcome = subtransaction::run_rethrowing(
        || resolver_store::call_scope_resolver(&resolver, partition, actor_id),
        is_transient_sqlstate,
    );
    let returned = match outcome {
        Err(raised) => {
            return Ok(Resolution::Live(Allowed::Denied {
                reason: format!("scope resolver raised [{}]: {}", raised.sqlstate, raised.message),
            }))
        }
        Ok(result) => result?,
    };
    match returned {
        None => Err(EngineError::host(
            HostCode::ResolverMalformed,
            format!("scope resolver {name} returned NULL; expected a jsonb object of string arrays"),
        )),
        Some(value) if crate::engine::leases::is_outage_signal(&value) => Ok(Resolution::Outage),
        Some(value) => parse_allowed_map(&value)
            .map(|map| Resolution::Live(Allowed::Map(map)))
            .map_err(|problem| {
                EngineError::host(HostCode::ResolverMalformed, format!("scope resolver {name} {problem}"))
            }),
    }
}

/// The JSON type name used in error messages.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses an allowed map `{"var": ["v", …]}`. On failure the `Err` text
/// completes the sentence "… returned …", naming the offending key and the
/// JSON type received, e.g. `returned key "project_id" as number; expected
/// an array of strings`. Shared with the gateway's `allowed_scopes`
/// argument, whose caller picks the error code.
pub fn parse_allowed_map(value: &Value) -> Result<AllowedMap, String> {
    let Value::Object(entries) = value else {
        return Err(format!(
            "returned a JSON {}; expected an object mapping each scope variable to an array of strings",
            json_type_name(value)
        ));
    };
    let mut map = AllowedMap::new();
    for (key, values) in entries {
        let Value::Array(items) = values else {
            return Err(format!(
                "returned key {key:?} as {}; expected an array of strings",
                json_type_name(values)
            ));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push(s.clone()),
                other => {
                    return Err(format!(
                        "returned key {key:?} element {i} as {}; expected a string",
                        json_type_name(other)
                    ))
                }
            }
        }
        map.insert(key.clone(), out);
    }
    Ok(map)
}

#[cfg(test)]
mod unit {
    use super::*;
    use serde_json::json;

    #[test]
    fn transient_sqlstates_are_classes_40_53_54_57_58_xx() {
        for code in ["40001", "40P01", "53200", "54001", "57014", "57P01", "58030", "XX000"] {
            assert!(is_transient_sqlstate(code), "{code}");
        }
        for code in ["P0001", "42501", "22023", "23505", "39000", ""] {
            assert!(!is_transient_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn a_non_superuser_owner_is_refused_by_name() {
        assert!(check_resolver_owner("public.f(text,text)", "postgres", true).is_ok());
        let err = check_resolver_owner("public.f(text,text)", "app_owner", false).unwrap_err();
        assert_eq!(err.code_str(), "syncular.invalid_resolver");
        assert!(err.message().contains("\"app_owner\"") && err.message().contains("superuser"), "{err}");
    }

    #[test]
    fn parses_a_map_of_string_lists() {
        let map = parse_allowed_map(&json!({"project_id": ["p1", "*"], "org": []})).unwrap();
        assert_eq!(map["project_id"], vec!["p1".to_string(), "*".to_string()]);
        assert!(map["org"].is_empty());
    }

    #[test]
    fn names_key_and_type_of_a_malformed_value() {
        let err = parse_allowed_map(&json!({"project_id": 7})).unwrap_err();
        assert!(err.contains("\"project_id\"") && err.contains("number"), "{err}");
        let err = parse_allowed_map(&json!({"a": ["x", true]})).unwrap_err();
        assert!(err.contains("\"a\"") && err.contains("element 1") && err.contains("boolean"), "{err}");
        let err = parse_allowed_map(&json!(["x"])).unwrap_err();
        assert!(err.contains("array"), "{err}");
    }
}
