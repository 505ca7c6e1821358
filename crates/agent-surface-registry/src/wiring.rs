//! Wiring that fails closed: every type and capability the registry's hooks name — the authority
//! policies, the rate budgets, the confirmation rules ([`Scope`]s) — must exist.
//!
//! The names of one type are checked when that type is defined; all of them when the registry is
//! assembled, i.e. on every mount (a call needs a live instance, so nothing is served before the
//! first). An unknown name is an `INVALID_DEFINITION` naming the closest existing name, instead of
//! a rule that silently applies to nothing (a policy for `ticket.create` that lets everyone call
//! `tickets.create`). A confirmation rule that can never hold (a quorum of 3 among 2 named
//! approvers) is refused the same way. The same checks hold the handlers' extractors to what they need: shared
//! state the registry provides, state on each mounted instance.
//!
//! A type the application defines after its first mount is declared in
//! `RegistryConfig::late_types`: until it is defined, mounts skip the names under it; its
//! definition checks them; and `Registry::check_wiring` reports a declared type that is still not
//! defined.

use std::any::Any;

use agent_surface_core::{DefinitionError, DefinitionErrorCode as Code};
use agent_surface_policy::{AuthorityPolicy, ConfirmationGate, RateLimiter, Scope};

use crate::ctx::StateMap;
use crate::extract::Requirement;
use crate::id;

/// Which hook names a scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    Authority,
    Rate,
    Confirmation,
}

impl Hook {
    fn what(self) -> &'static str {
        match self {
            Hook::Authority => "an authority policy",
            Hook::Rate => "a rate budget",
            Hook::Confirmation => "a confirmation rule",
        }
    }
}

/// The names the registry's hooks are configured for, read once when the registry is created.
#[derive(Debug, Default)]
pub(crate) struct Wiring {
    scopes: Vec<(Hook, Scope)>,
    /// What is wrong with the confirmation gate's rules (e.g. a quorum that cannot be met), by
    /// the scope of the rule.
    problems: Vec<(Scope, String)>,
    /// The types declared to be defined late (`RegistryConfig::late_types`), sorted.
    late: Vec<String>,
}

impl Wiring {
    /// The scopes of the registry's hooks, in a fixed order (authority, rate, confirmation; each
    /// hook's scopes sorted), and the types declared to be defined `late`.
    pub(crate) fn of(
        authority: Option<&dyn AuthorityPolicy>,
        rate: Option<&dyn RateLimiter>,
        confirmation: Option<&dyn ConfirmationGate>,
        late: &[String],
    ) -> Wiring {
        let mut scopes = Vec::new();
        let mut add = |hook: Hook, mut named: Vec<Scope>| {
            named.sort();
            named.dedup();
            scopes.extend(named.into_iter().map(|s| (hook, s)));
        };
        add(Hook::Authority, authority.map(|p| p.scopes()).unwrap_or_default());
        add(Hook::Rate, rate.map(|l| l.scopes()).unwrap_or_default());
        add(Hook::Confirmation, confirmation.map(|g| g.scopes()).unwrap_or_default());
        let problems = confirmation.map(|g| g.rule_problems()).unwrap_or_default();
        let mut late = late.to_vec();
        late.sort();
        late.dedup();
        Wiring { scopes, problems, late }
    }

    /// Checks the scopes of `type_id` against the capabilities it defines (when it is defined).
    pub(crate) fn check_type<'n>(
        &self,
        type_id: &'n str,
        capabilities: impl Iterator<Item = &'n str> + Clone,
    ) -> Result<(), DefinitionError> {
        let names = Names {
            is_type: &|t| t == type_id,
            is_capability: &|c| capabilities.clone().any(|k| k == c),
            types: std::iter::once(type_id),
            capabilities: capabilities.clone(),
        };
        self.check(|scope| scope.type_id() == type_id, names)
    }

    /// Checks every scope against the defined types and capabilities (at assembly), but those
    /// under a type declared late that is not defined yet (its definition checks them):
    /// `is_type` and `is_capability` look a name up; `types` and `capabilities` list them, for
    /// suggestions. A declared type that could never be defined (an invalid type id) is an error
    /// here already.
    pub(crate) fn check_all<'n>(
        &self,
        is_type: &dyn Fn(&str) -> bool,
        is_capability: &dyn Fn(&str) -> bool,
        types: impl Iterator<Item = &'n str> + Clone,
        capabilities: impl Iterator<Item = &'n str> + Clone,
    ) -> Result<(), DefinitionError> {
        for late in &self.late {
            id::check_type_id(late)?;
        }
        let pending = |scope: &Scope| {
            let type_id = scope.type_id();
            !is_type(type_id) && self.late.binary_search_by(|l| (**l).cmp(type_id)).is_ok()
        };
        self.check(|scope| !pending(scope), Names { is_type, is_capability, types, capabilities })
    }

    /// Checks that every type declared late is defined: what an application checks once its
    /// start-up is over ([`Registry::check_wiring`](crate::Registry::check_wiring)).
    pub(crate) fn check_late<'n>(
        &self,
        is_type: &dyn Fn(&str) -> bool,
        types: impl Iterator<Item = &'n str>,
    ) -> Result<(), DefinitionError> {
        let Some(missing) = self.late.iter().find(|l| !is_type(l)) else { return Ok(()) };
        let mut problem = format!("`RegistryConfig::late_types` declares type `{missing}`, which is not defined");
        // The scopes are grouped by hook: one mention of each hook that names the type.
        let mut named: Vec<&str> =
            self.scopes.iter().filter(|(_, s)| s.type_id() == missing).map(|(hook, _)| hook.what()).collect();
        named.dedup();
        if !named.is_empty() {
            problem.push_str(&format!(" ({} name{} it)", named.join(" and "), if named.len() == 1 { "s" } else { "" }));
        }
        if let Some(closest) = id::closest(missing, types) {
            problem.push_str(&format!("; did you mean `{closest}`?"));
        }
        Err(DefinitionError::new(Code::InvalidDefinition, missing.as_str(), problem))
    }

    fn check<'n, T, C>(&self, applies: impl Fn(&Scope) -> bool, names: Names<'_, T, C>) -> Result<(), DefinitionError>
    where
        T: Iterator<Item = &'n str> + Clone,
        C: Iterator<Item = &'n str> + Clone,
    {
        for (hook, scope) in self.scopes.iter().filter(|(_, s)| applies(s)) {
            let known = match scope {
                Scope::Type(name) => (names.is_type)(name),
                Scope::Capability(name) => (names.is_capability)(name),
                // A kind of scope this registry does not know names nothing it could check:
                // refuse it rather than let it apply to nothing.
                _ => {
                    return Err(DefinitionError::new(
                        Code::InvalidDefinition,
                        scope.name(),
                        format!("{} names {scope}, a kind of name this registry cannot check", hook.what()),
                    ));
                }
            };
            if !known {
                return Err(unknown(*hook, scope, names.types, names.capabilities));
            }
        }
        if let Some((scope, problem)) = self.problems.iter().find(|(s, _)| applies(s)) {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                scope.name(),
                format!("a confirmation rule for {scope} cannot hold: {problem}"),
            ));
        }
        Ok(())
    }
}

/// The defined names a check looks scopes up in.
struct Names<'f, T, C> {
    is_type: &'f dyn Fn(&str) -> bool,
    is_capability: &'f dyn Fn(&str) -> bool,
    /// Every type id, for suggestions.
    types: T,
    /// Every capability name, for suggestions.
    capabilities: C,
}

/// The definition error for a scope that names nothing, with the closest existing name.
fn unknown<'n>(
    hook: Hook,
    scope: &Scope,
    types: impl Iterator<Item = &'n str>,
    capabilities: impl Iterator<Item = &'n str> + Clone,
) -> DefinitionError {
    let name = scope.name();
    let mut problem = format!("{} names {scope}, which is not defined", hook.what());
    let suggestion = match scope {
        Scope::Type(_) => id::closest(name, types),
        _ => {
            // A tool name (`tickets-create`) where the capability name belongs.
            let as_tool = id::capability_from_tool_name(name);
            if let Some(capability) = as_tool.as_deref().and_then(|c| capabilities.clone().find(|k| *k == c)) {
                problem.push_str(&format!(
                    " (`{name}` is the tool name adapters derive from `{capability}`; scopes use capability names)"
                ));
            }
            id::closest(name, capabilities)
        }
    };
    if let Some(closest) = suggestion {
        problem.push_str(&format!("; did you mean `{closest}`?"));
    }
    DefinitionError::new(Code::InvalidDefinition, name, problem)
}

/// Checks what the handler of `capability` and its asynchronous precondition need from their
/// extractors (each requirement with who takes it): shared state in `shared` and, when `instance`
/// is given (at its mount: its id and its state), state of the right type on the instance.
pub(crate) fn check_requirements(
    capability: &str,
    requirements: &[(Requirement, &'static str)],
    shared: &StateMap,
    instance: Option<(&str, Option<&(dyn Any + Send + Sync)>)>,
) -> Result<(), DefinitionError> {
    for (requirement, who) in requirements {
        let problem = match (*requirement, instance) {
            (Requirement::State { type_id, type_name }, _) if !shared.contains_key(&type_id) => format!(
                "{who} takes `State<{type_name}>`, but the registry provides no `{type_name}`; call \
                 `Registry::provide` before mounting"
            ),
            (Requirement::Instance { type_id, type_name }, Some((instance_id, state)))
                if state.is_none_or(|s| s.type_id() != type_id) =>
            {
                format!(
                    "{who} takes `InstanceState<{type_name}>`, but instance `{instance_id}` is mounted without \
                     a `{type_name}`; mount it with `Instance::new().state(..)`"
                )
            }
            _ => continue,
        };
        return Err(DefinitionError::new(Code::InvalidDefinition, capability, problem));
    }
    Ok(())
}

/// Wiring that works but whose guarantees do not hold: state shared by some parts of a registry
/// and kept per process by others, parts that read different clocks or audit trails, a binary
/// that cannot catch a panic. `Registry::new` logs each at WARN on the operator channel
/// (`agent_surface::wiring`); `Registry::wiring_warnings` lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WiringWarning {
    /// The confirmation gate's store is shared, the idempotency store is per process: a retry
    /// of an approved call that reaches another replica under the same invocation id runs again
    /// instead of replaying the first run's result.
    SharedConfirmationsLocalIdempotency,
    /// The confirmation gate's store is shared, the rate limiter counts per process: every
    /// replica grants the whole budget, so "5 per minute per user" becomes 5 per replica.
    SharedConfirmationsLocalRates,
    /// The idempotency store is shared, the rate limiter counts per process (as above).
    SharedIdempotencyLocalRates,
    /// A part reads another clock than the registry's (`RegistryConfig::clock`): expiries,
    /// windows and budgets disagree between them (a test that moves one clock moves only part
    /// of the service). `part` names it: `authority policy`, `rate limiter` or `confirmation
    /// engine`.
    ClockDiffers {
        /// The part whose clock differs.
        part: &'static str,
    },
    /// The registry's audit trail (`RegistryConfig::audit`) and the confirmation engine's
    /// (`ConfirmationConfig::audit`) are not one sink: the confirmation events and the
    /// executions they allowed are recorded apart, or one of them not at all (the approval inbox's
    /// recent decisions stay empty).
    AuditNotShared,
    /// The binary is built with `panic = "abort"` (a Cargo profile's `panic` setting, or
    /// `-C panic=abort`): any panic (a handler's, a hook's, a store's) ends the process, with
    /// every call in flight and whatever the memory stores hold, instead of failing one call (a
    /// handler's panic is that call's `EXECUTION_FAILED`, `handler-error`; a hook's takes its
    /// documented fallback). Build with `panic = "unwind"`, the default.
    ///
    /// Read from how the registry crate itself was compiled, which under Cargo is how the whole
    /// binary is. A panic hook that aborts the process defeats the catch the same way and is not
    /// seen here.
    PanicAborts,
}

impl std::fmt::Display for WiringWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WiringWarning::SharedConfirmationsLocalIdempotency => {
                "confirmations are shared between replicas but idempotency records are kept per process: \
                 a retry that reaches another replica runs again; give RegistryConfig::idempotency the \
                 shared store too (e.g. RedisStores::idempotency)"
            }
            WiringWarning::SharedConfirmationsLocalRates => {
                "confirmations are shared between replicas but the rate limiter counts per process: \
                 each replica grants the whole budget; give RegistryConfig::rate_limiter a shared \
                 limiter too (e.g. RedisStores::rate_limiter)"
            }
            WiringWarning::SharedIdempotencyLocalRates => {
                "idempotency records are shared between replicas but the rate limiter counts per \
                 process: each replica grants the whole budget; give RegistryConfig::rate_limiter a \
                 shared limiter too (e.g. RedisStores::rate_limiter)"
            }
            WiringWarning::ClockDiffers { part } => {
                return write!(
                    f,
                    "the {part} reads another clock than the registry: give it RegistryConfig::clock \
                     (the same Arc, or a clone of the same ManualClock)"
                );
            }
            WiringWarning::AuditNotShared => {
                "the registry's audit trail and the confirmation engine's are not one sink: give \
                 RegistryConfig::audit and ConfirmationConfig::audit the same Arc<dyn AuditSink>"
            }
            WiringWarning::PanicAborts => {
                "this binary is built with panic = \"abort\": a panic in a handler, hook or store ends \
                 the process and every call in flight instead of failing one call (EXECUTION_FAILED); \
                 build with panic = \"unwind\" (the default) in the profile that builds the service"
            }
        })
    }
}

/// What the wiring report reads of a registry's parts.
pub(crate) struct Parts {
    pub(crate) idempotency: agent_surface_policy::Reach,
    pub(crate) rates: Option<agent_surface_policy::Reach>,
    pub(crate) confirmations: Option<agent_surface_policy::Reach>,
    /// The registry's clock and the clocks its parts say they read, by part name.
    pub(crate) clock: std::sync::Arc<dyn agent_surface_policy::Clock>,
    pub(crate) clocks: Vec<(&'static str, std::sync::Arc<dyn agent_surface_policy::Clock>)>,
    /// The registry's audit sink, and the confirmation gate's when the gate keeps confirmations.
    pub(crate) audit: Option<std::sync::Arc<dyn agent_surface_policy::AuditSink>>,
    pub(crate) gate_audit: Option<Option<std::sync::Arc<dyn agent_surface_policy::AuditSink>>>,
    /// Whether a panic aborts the process (`cfg!(panic = "abort")` where the registry is built).
    pub(crate) aborts: bool,
}

/// What the wiring report finds in `parts` (see [`WiringWarning`]).
pub(crate) fn report(parts: &Parts) -> Vec<WiringWarning> {
    let mut out = warnings(parts.idempotency, parts.rates, parts.confirmations);
    for (part, clock) in &parts.clocks {
        if !agent_surface_policy::clock::same_time(&parts.clock, clock) {
            out.push(WiringWarning::ClockDiffers { part });
        }
    }
    if let Some(gate) = &parts.gate_audit {
        let shared = match (&parts.audit, gate) {
            (None, None) => true,
            (Some(a), Some(b)) => std::ptr::addr_eq(std::sync::Arc::as_ptr(a), std::sync::Arc::as_ptr(b)),
            _ => false,
        };
        if !shared {
            out.push(WiringWarning::AuditNotShared);
        }
    }
    if parts.aborts {
        out.push(WiringWarning::PanicAborts);
    }
    out
}

/// What is mixed in this wiring (see [`WiringWarning`]).
pub(crate) fn warnings(
    idempotency: agent_surface_policy::Reach,
    rates: Option<agent_surface_policy::Reach>,
    confirmations: Option<agent_surface_policy::Reach>,
) -> Vec<WiringWarning> {
    let shared = |r: Option<agent_surface_policy::Reach>| r.is_some_and(|r| r.is_shared());
    let local = |r: Option<agent_surface_policy::Reach>| r.is_some_and(|r| !r.is_shared());
    let mut out = Vec::new();
    if shared(confirmations) && !idempotency.is_shared() {
        out.push(WiringWarning::SharedConfirmationsLocalIdempotency);
    }
    if shared(confirmations) && local(rates) {
        out.push(WiringWarning::SharedConfirmationsLocalRates);
    } else if idempotency.is_shared() && local(rates) {
        out.push(WiringWarning::SharedIdempotencyLocalRates);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn parts(aborts: bool) -> Parts {
        Parts {
            idempotency: agent_surface_policy::Reach::Process,
            rates: None,
            confirmations: None,
            clock: Arc::new(agent_surface_policy::SystemClock),
            clocks: Vec::new(),
            audit: None,
            gate_audit: None,
            aborts,
        }
    }

    /// A build that cannot catch a panic is reported, and only that build (a test binary
    /// unwinds, so `Registry::new` cannot be made to see one: the report is checked directly).
    #[test]
    fn a_binary_that_aborts_on_a_panic_is_reported() {
        assert_eq!(report(&parts(true)), [WiringWarning::PanicAborts]);
        assert_eq!(report(&parts(false)), []);
        let text = WiringWarning::PanicAborts.to_string();
        assert!(text.contains("panic = \"abort\"") && text.contains("panic = \"unwind\""), "{text}");
    }
}
