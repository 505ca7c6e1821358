//! Which calls need a confirmation beyond the ones their capability declares: the
//! [`ConfirmationPolicy`] trait, its answer [`Gate`], and [`FnConfirmationPolicy`] from a closure.

use std::fmt;
use std::sync::Arc;

use agent_surface_core::SafeText;
use futures_util::future::BoxFuture;

use crate::hooks::{CallInfo, PolicyError, Scope};

/// Whether a call must be confirmed, as a [`ConfirmationPolicy`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Gate {
    /// No confirmation needed.
    Open,
    /// A person must approve; `summary` tells them what will happen.
    Confirm {
        /// One sentence for the approver (and the `summary` of `CONFIRMATION_REQUIRED`).
        summary: SafeText,
    },
}

/// Decides per call whether a confirmation is needed (for capabilities that do not declare a
/// gate themselves).
pub trait ConfirmationPolicy: Send + Sync + 'static {
    /// A name for the operator channel.
    fn name(&self) -> &str;

    /// Decides on one call; [`CallInfo::input`] holds the validated input.
    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<Gate, PolicyError>>;

    /// The answer [`decide`](Self::decide) would give about `call`, when the policy can give it
    /// without awaiting; `None` when it answers only by awaiting (the default), having done
    /// nothing. The engine asks this first and, on `Some`, does not ask `decide` about the call:
    /// a call every policy lets through at once costs no boxed future and no timer.
    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<Gate, PolicyError>> {
        let _ = call;
        None
    }

    /// The types and capabilities this rule is about, which the registry checks exist when it is
    /// assembled (see [`Scope`]). The default: none.
    fn scopes(&self) -> Vec<Scope> {
        Vec::new()
    }
}

impl<P: ConfirmationPolicy + ?Sized> ConfirmationPolicy for Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<Gate, PolicyError>> {
        (**self).decide(call)
    }

    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<Gate, PolicyError>> {
        (**self).decide_at_once(call)
    }

    fn scopes(&self) -> Vec<Scope> {
        (**self).scopes()
    }
}

/// A named synchronous [`ConfirmationPolicy`] from a closure.
///
/// ```
/// use agent_surface_core::SafeText;
/// use agent_surface_policy::{FnConfirmationPolicy, Gate};
///
/// let large_refunds = FnConfirmationPolicy::new("large-refunds", |call| {
///     let cents = call.input.and_then(|i| i["amount_cents"].as_u64()).unwrap_or(0);
///     Ok(if call.capability == "orders.refund" && cents > 50_000 {
///         Gate::Confirm { summary: SafeText::trusted(format!("Refund {}.{:02} EUR.", cents / 100, cents % 100)) }
///     } else {
///         Gate::Open
///     })
/// });
/// # let _ = large_refunds;
/// ```
///
/// Scoped to capabilities or types with [`for_capability`](Self::for_capability) and
/// [`for_type`](Self::for_type), the rule is asked only about their calls (all others are
/// [`Gate::Open`] for it), and the registry checks that the names exist:
///
/// ```
/// use agent_surface_core::SafeText;
/// use agent_surface_policy::{FnConfirmationPolicy, Gate, Scope};
///
/// let refunds = FnConfirmationPolicy::new("refunds", |_call| {
///     Ok(Gate::Confirm { summary: SafeText::from("Refund the order.") })
/// })
/// .for_capability("orders.refund");
/// # use agent_surface_policy::ConfirmationPolicy;
/// assert_eq!(refunds.scopes(), vec![Scope::capability("orders.refund")]);
/// ```
pub struct FnConfirmationPolicy<F> {
    name: String,
    decide: F,
    scopes: Vec<Scope>,
}

impl<F> FnConfirmationPolicy<F>
where
    F: Fn(&CallInfo<'_>) -> Result<Gate, PolicyError> + Send + Sync + 'static,
{
    /// A policy named `name` that decides with `decide`, about every call.
    pub fn new(name: impl Into<String>, decide: F) -> FnConfirmationPolicy<F> {
        FnConfirmationPolicy { name: name.into(), decide, scopes: Vec::new() }
    }

    /// The same rule, asked about calls of `capability` (`type.capability`) — and of the other
    /// capabilities and types it is scoped to — only.
    pub fn for_capability(mut self, capability: &str) -> FnConfirmationPolicy<F> {
        self.scopes.push(Scope::capability(capability));
        self
    }

    /// The same rule, asked about calls of the capabilities of `type_id` — and of the other
    /// capabilities and types it is scoped to — only.
    pub fn for_type(mut self, type_id: &str) -> FnConfirmationPolicy<F> {
        self.scopes.push(Scope::capability_type(type_id));
        self
    }
}

impl<F> FnConfirmationPolicy<F>
where
    F: Fn(&CallInfo<'_>) -> Result<Gate, PolicyError> + Send + Sync + 'static,
{
    /// The closure's answer for a call in scope, [`Gate::Open`] for any other.
    fn decide_now(&self, call: &CallInfo<'_>) -> Result<Gate, PolicyError> {
        let applies = self.scopes.is_empty() || self.scopes.iter().any(|s| s.covers(call.capability, call.type_id));
        if applies { (self.decide)(call) } else { Ok(Gate::Open) }
    }
}

impl<F> fmt::Debug for FnConfirmationPolicy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnConfirmationPolicy")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl<F> ConfirmationPolicy for FnConfirmationPolicy<F>
where
    F: Fn(&CallInfo<'_>) -> Result<Gate, PolicyError> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<Gate, PolicyError>> {
        Box::pin(std::future::ready(self.decide_now(&call)))
    }

    /// Always: the closure is synchronous.
    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<Gate, PolicyError>> {
        Some(self.decide_now(call))
    }

    fn scopes(&self) -> Vec<Scope> {
        self.scopes.clone()
    }
}
