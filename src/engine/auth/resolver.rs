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


use crate::engine::auth::allowed::{is_outage_signal, parse_allowed_map, Allowed};
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::auth::resolver as store;
use crate::store::spi::subtransaction;

/// Checks that `function` can serve as a resolver: a plain function (not a
/// procedure/aggregate), arguments exactly `(text, text)`, returning a
/// single `jsonb`. Errors: `syncular.invalid_resolver`.
pub fn check_resolver_shape(function: pgrx::pg_sys::Oid) -> EngineResult<()> {
    let shape = store::describe_function(function)?.ok_or_else(|| {
        EngineError::host(HostCode::InvalidResolver, format!("no function with OID {}", u32::from(function)))
    })?;
    let text = store::text_type_oid();
    let problems = [
        (shape.kind != "f").then(|| format!("it is not a plain function (prokind {:?})", shape.kind)),
        (shape.arg_types != [text, text])
            .then(|| "its arguments must be exactly (partition text, actor_id text)".to_string()),
        (shape.return_type != store::jsonb_type_oid()).then(|| "it must return jsonb".to_string()),
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
    let signature = store::describe_function(function)?
        .map(|shape| shape.signature)
        .unwrap_or_else(|| format!("function {}", u32::from(function)));
    let owner = store::function_owner(function)?.ok_or_else(|| {
        EngineError::host(HostCode::InvalidResolver, format!("no function with OID {}", u32::from(function)))
    })?;
    check_resolver_owner(&signature, &owner.role, owner.is_superuser)
}

/// What the resolver step answered: a live decision, or the §7.3.3 outage
/// signal (the JSON string [`crate::engine::auth::allowed::OUTAGE_SIGNAL`]).
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
    let Some(resolver) = store::load_scope_resolver()? else {
        return Ok(Resolution::Live(Allowed::Denied { reason: "no scope resolver is registered".into() }));
    };
    let name = format!("{}.{}", resolver.schema, resolver.name);
    check_resolver_owner(&name, &resolver.owner, resolver.owner_is_superuser)?;
    let outcome = subtransaction::run_rethrowing(
        || store::call_scope_resolver(&resolver, partition, actor_id),
        is_transient_sqlstate,
    );
    let returned = match outcome {
        Err(raised) => {
            return Ok(Resolution::Live(Allowed::Denied {
                reason: format!("scope resolver raised [{}]: {}", raised.sqlstate, raised.message),
            }))
        }
        Ok(result) => result.map_err(|e| match e.unreadable_json() {
            Some(problem) => EngineError::host(HostCode::ResolverMalformed, format!("scope resolver {name} {problem}")),
            None => e.into(),
        })?,
    };
    match returned {
        None => Err(EngineError::host(
            HostCode::ResolverMalformed,
            format!("scope resolver {name} returned NULL; expected a jsonb object of string arrays"),
        )),
        Some(value) if is_outage_signal(&value) => Ok(Resolution::Outage),
        Some(value) => parse_allowed_map(&value)
            .map(|map| Resolution::Live(Allowed::Map(map)))
            .map_err(|problem| {
                EngineError::host(HostCode::ResolverMalformed, format!("scope resolver {name} {problem}"))
            }),
    }
}

#[cfg(test)]
mod unit {
    use super::*;

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
}
