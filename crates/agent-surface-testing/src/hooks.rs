//! Hooks for tests of the pipeline: hooks that misbehave ([`Misbehaving`]), a slow policy
//! ([`Slow`]) and a confirmation gate from a closure ([`FnGate`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_policy::{
    AuthorityDecision, AuthorityPolicy, CallInfo, Clock, ConfirmationDecision, ConfirmationGate, PolicyError,
    RateDecision, RateLimiter,
};
use futures_util::future::BoxFuture;

/// How a [`Misbehaving`] hook misbehaves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misbehaviour {
    /// Panics with this text as soon as it is asked (before returning a future).
    PanicsAtOnce(String),
    /// Panics with this text once its future has been polled and yielded once (a panic inside
    /// the task, not in the call).
    PanicsLater(String),
    /// Never answers: its future stays pending.
    Hangs,
    /// An authority policy returns `Err(PolicyError(cause))`. A rate limiter or a confirmation
    /// gate has no error to return: it panics with the cause instead.
    Fails(String),
}

/// An authority policy, rate limiter and confirmation gate that misbehaves on every call, for
/// testing that the pipeline fails closed and that nothing of the failure reaches the agent:
/// put a secret in the text ([`Misbehaving::panics`], [`Misbehaving::fails`]) and assert that
/// no agent-facing payload contains it.
///
/// ```
/// use std::sync::Arc;
/// use agent_surface_core::{Effect, ErrorCode, Phase};
/// use agent_surface_registry::{Ctx, Registry, RegistryConfig};
/// use agent_surface_testing::{Misbehaving, Secrets, ScriptedConsumer, assert_no_leak, expect_error};
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let broken = Misbehaving::fails("ldap", "ldap://10.0.0.7 refused the bind");
/// let registry = Registry::new(RegistryConfig { authority: Some(Arc::new(broken)), ..Default::default() });
/// registry.define("notes", |t| {
///     t.capability("list", "List notes.").effect(Effect::Read).idempotent()
///         .handler(|_ctx: Ctx, _: serde_json::Value| async move { Ok::<_, agent_surface_core::AgentSurfaceError>(json!([])) });
/// })?;
/// let _mounted = registry.mount("notes", "main")?;
/// let results = ScriptedConsumer::new("session-1").call("notes.list", json!({})).run(&registry).await;
/// expect_error(&results[0], ErrorCode::NotAuthorized);
/// assert_no_leak(&results[0], &Secrets::new().url("ldap://10.0.0.7"));
/// # Ok::<_, agent_surface_core::DefinitionError>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Misbehaving {
    name: String,
    how: Misbehaviour,
}

impl Misbehaving {
    /// A hook named `name` that misbehaves as `how` says.
    pub fn new(name: impl Into<String>, how: Misbehaviour) -> Misbehaving {
        Misbehaving { name: name.into(), how }
    }

    /// Panics with `text` as soon as it is asked.
    pub fn panics(name: impl Into<String>, text: impl Into<String>) -> Misbehaving {
        Misbehaving::new(name, Misbehaviour::PanicsAtOnce(text.into()))
    }

    /// Panics with `text` after its future yielded once.
    pub fn panics_later(name: impl Into<String>, text: impl Into<String>) -> Misbehaving {
        Misbehaving::new(name, Misbehaviour::PanicsLater(text.into()))
    }

    /// Never answers.
    pub fn hangs(name: impl Into<String>) -> Misbehaving {
        Misbehaving::new(name, Misbehaviour::Hangs)
    }

    /// A policy error with `cause` (a panic with it, for a limiter or a gate).
    pub fn fails(name: impl Into<String>, cause: impl Into<String>) -> Misbehaving {
        Misbehaving::new(name, Misbehaviour::Fails(cause.into()))
    }

    /// How it misbehaves.
    pub fn misbehaviour(&self) -> &Misbehaviour {
        &self.how
    }

    /// The future every hook returns: `Err(cause)` for [`Misbehaviour::Fails`] when `fails` is
    /// given, otherwise a panic or a future that never ends.
    fn misbehave<'a, T: Send + 'a>(&self, fails: Option<fn(String) -> T>) -> BoxFuture<'a, T> {
        match self.how.clone() {
            Misbehaviour::PanicsAtOnce(text) => panic!("{text}"),
            Misbehaviour::PanicsLater(text) => Box::pin(async move {
                tokio::task::yield_now().await;
                panic!("{text}")
            }),
            Misbehaviour::Hangs => Box::pin(std::future::pending()),
            Misbehaviour::Fails(cause) => match fails {
                Some(fails) => Box::pin(std::future::ready(fails(cause))),
                None => panic!("{cause}"),
            },
        }
    }
}

impl AuthorityPolicy for Misbehaving {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide<'a>(&'a self, _call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        self.misbehave(Some(|cause| Err(PolicyError::new(cause))))
    }
}

impl RateLimiter for Misbehaving {
    fn acquire<'a>(&'a self, _call: CallInfo<'a>, _now: Timestamp) -> BoxFuture<'a, RateDecision> {
        self.misbehave(None)
    }
}

impl ConfirmationGate for Misbehaving {
    fn check<'a>(
        &'a self,
        _call: CallInfo<'a>,
        _confirmation_id: Option<&'a str>,
        _now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        self.misbehave(None)
    }
}

/// An authority policy that waits before asking another: a window between admission and
/// execution, or a policy slow per decision but within its budget.
///
/// It waits on the clock it is given ([`Slow::on`]: a `TestClock`'s, moved by the test) or, by
/// default, on the Tokio timer (`tokio::time::sleep`, which a paused Tokio runtime advances).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use agent_surface_policy::AllowAll;
/// use agent_surface_testing::{Slow, TestClock};
///
/// let clock = TestClock::new();
/// let slow = Slow::new(Duration::from_millis(50), AllowAll).on(clock.shared());
/// # let _ = slow;
/// ```
pub struct Slow<P> {
    delay: Duration,
    clock: Option<Arc<dyn Clock>>,
    inner: P,
}

impl<P: AuthorityPolicy> Slow<P> {
    /// Waits `delay`, then decides as `inner` does.
    pub fn new(delay: Duration, inner: P) -> Slow<P> {
        Slow { delay, clock: None, inner }
    }

    /// Waits on `clock` instead of the Tokio timer.
    pub fn on(mut self, clock: Arc<dyn Clock>) -> Slow<P> {
        self.clock = Some(clock);
        self
    }
}

impl<P: AuthorityPolicy> fmt::Debug for Slow<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slow").field("delay", &self.delay).field("inner", &self.inner.name()).finish_non_exhaustive()
    }
}

impl<P: AuthorityPolicy> AuthorityPolicy for Slow<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(async move {
            match &self.clock {
                Some(clock) => clock.sleep(self.delay).await,
                None => tokio::time::sleep(self.delay).await,
            }
            self.inner.decide(call).await
        })
    }

    fn scopes(&self) -> Vec<agent_surface_policy::Scope> {
        self.inner.scopes()
    }
}

/// A confirmation gate from a closure over the call, the confirmation id it carries (if any)
/// and the pipeline's `now`: the gate a test writes in a few lines, as `FnPolicy` is for
/// policies.
///
/// ```
/// use std::time::Duration;
/// use agent_surface_core::SafeText;
/// use agent_surface_core::details::{ConfirmationInvalidReason, Origin};
/// use agent_surface_policy::ConfirmationDecision;
/// use agent_surface_testing::FnGate;
///
/// // Every gated call needs `conf-1`; any other id is denied.
/// let gate = FnGate::new(|call, evidence, now| match (call.declared_gate, evidence) {
///     (None, _) | (_, Some("conf-1")) => ConfirmationDecision::Proceed,
///     (Some(_), None) => ConfirmationDecision::Required {
///         confirmation_id: "conf-1".into(),
///         summary: SafeText::from("Delete a note."),
///         expires_at: now.saturating_add(Duration::from_secs(60)),
///         origin: Origin::Client,
///     },
///     (Some(_), Some(_)) => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Denied),
/// });
/// # let _ = gate;
/// ```
pub struct FnGate<F> {
    check: F,
}

impl<F> FnGate<F>
where
    F: Fn(&CallInfo<'_>, Option<&str>, Timestamp) -> ConfirmationDecision + Send + Sync + 'static,
{
    /// A gate that decides with `check`.
    pub fn new(check: F) -> FnGate<F> {
        FnGate { check }
    }
}

impl<F> fmt::Debug for FnGate<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnGate").finish_non_exhaustive()
    }
}

impl<F> ConfirmationGate for FnGate<F>
where
    F: Fn(&CallInfo<'_>, Option<&str>, Timestamp) -> ConfirmationDecision + Send + Sync + 'static,
{
    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        Box::pin(std::future::ready((self.check)(&call, confirmation_id, now)))
    }
}
