//! Hooks for tests of the pipeline: hooks that misbehave ([`Misbehaving`]), a slow policy
//! ([`Slow`]), a confirmation gate from a closure ([`FnGate`]), one that records what it issued
//! ([`RecordingGate`]) and a rate limiter from a closure ([`FnLimiter`]).

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
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

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

    fn wants(&self) -> Option<String> {
        self.inner.wants()
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

/// A rate limiter from a closure over the call and the pipeline's `now`: the one-off limiter a
/// test writes in a line (always limited, limited after the first call, …), as [`FnGate`] is for
/// gates. Keep state the closure needs in what it captures.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use agent_surface_core::details::RateLimitReason;
/// use agent_surface_policy::RateDecision;
/// use agent_surface_testing::FnLimiter;
///
/// // The first call passes; every later one waits 1.5 s.
/// let calls = AtomicUsize::new(0);
/// let limiter = FnLimiter::new(move |_call, _now| match calls.fetch_add(1, Ordering::SeqCst) {
///     0 => RateDecision::Allow(None),
///     _ => RateDecision::Limited { reason: RateLimitReason::Rate, retry_after: Duration::from_millis(1500) },
/// });
/// # let _ = limiter;
/// ```
pub struct FnLimiter<F> {
    acquire: F,
}

impl<F> FnLimiter<F>
where
    F: Fn(&CallInfo<'_>, Timestamp) -> RateDecision + Send + Sync + 'static,
{
    /// A limiter that decides with `acquire`.
    pub fn new(acquire: F) -> FnLimiter<F> {
        FnLimiter { acquire }
    }
}

impl<F> fmt::Debug for FnLimiter<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnLimiter").finish_non_exhaustive()
    }
}

impl<F> RateLimiter for FnLimiter<F>
where
    F: Fn(&CallInfo<'_>, Timestamp) -> RateDecision + Send + Sync + 'static,
{
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(std::future::ready((self.acquire)(&call, now)))
    }
}

/// How a confirmation issued by a [`RecordingGate`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Issued {
    /// Issued, not yet answered.
    Pending,
    /// Approved (out of band, with [`RecordingGate::answer`]).
    Approved,
    /// Denied.
    Denied,
    /// Presented and spent: the call it confirmed went ahead.
    Used,
}

/// A [`RecordingGate::answer`] for a confirmation id that was never issued or is answered already.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlreadyAnswered(pub String);

impl fmt::Display for AlreadyAnswered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "confirmation {} is unknown or answered", self.0)
    }
}

impl std::error::Error for AlreadyAnswered {}

/// One confirmation a [`RecordingGate`] issued: the call it is bound to and how it stands.
struct Record {
    id: String,
    capability: String,
    input: serde_json::Value,
    state: Issued,
}

type Predicate = Box<dyn Fn(&CallInfo<'_>) -> bool + Send + Sync>;
type Summary = Box<dyn Fn(&CallInfo<'_>) -> agent_surface_core::SafeText + Send + Sync>;

/// A stateful confirmation gate that records what it issued, for tests of a confirmation's round
/// trip (two-phase through the model, approval out of band, single use).
///
/// A call the predicate names and that carries no confirmation id gets a new one (`conf-1`,
/// `conf-2`, …) bound to its capability and input. Presented again, the id lets the call proceed
/// once: for the same capability and input only (else `mismatch`), and, when the gate
/// [waits for answers](RecordingGate::waiting_for_answers), only once [`RecordingGate::answer`]
/// approved it (unanswered: `mismatch`; denied: `denied`). A spent id is `consumed`.
///
/// ```
/// use agent_surface_core::{Effect, SafeText};
/// use agent_surface_testing::RecordingGate;
///
/// let gate = RecordingGate::new(|call| call.effect == Effect::Destructive)
///     .summary(|_call| SafeText::from("Delete everything."))
///     .waiting_for_answers();
/// // … a destructive call is answered CONFIRMATION_REQUIRED with `conf-1`; then, out of band:
/// assert!(gate.answer("conf-1", true).is_err(), "nothing issued yet");
/// assert!(gate.issued().is_empty());
/// ```
pub struct RecordingGate {
    gates: Predicate,
    summary: Summary,
    valid_for: Duration,
    waits: bool,
    issued: std::sync::Mutex<Vec<Record>>,
}

impl RecordingGate {
    /// A gate for the calls `gates` names (every other call proceeds), with the summary
    /// "Confirm the action.", confirmations valid 5 minutes and presented without an answer.
    pub fn new(gates: impl Fn(&CallInfo<'_>) -> bool + Send + Sync + 'static) -> RecordingGate {
        RecordingGate {
            gates: Box::new(gates),
            summary: Box::new(|_| agent_surface_core::SafeText::from("Confirm the action.")),
            valid_for: Duration::from_secs(300),
            waits: false,
            issued: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The summary shown for a gated call.
    pub fn summary(
        mut self,
        summary: impl Fn(&CallInfo<'_>) -> agent_surface_core::SafeText + Send + Sync + 'static,
    ) -> RecordingGate {
        self.summary = Box::new(summary);
        self
    }

    /// How long an issued confirmation is valid (its `expiresAt`).
    pub fn valid_for(mut self, valid_for: Duration) -> RecordingGate {
        self.valid_for = valid_for;
        self
    }

    /// Issued confirmations let the call proceed only once approved with [`RecordingGate::answer`]
    /// (a person answering out of band, or an adapter's resolver calling it).
    pub fn waiting_for_answers(mut self) -> RecordingGate {
        self.waits = true;
        self
    }

    /// Answers the pending confirmation `id`: approved or denied.
    ///
    /// # Errors
    ///
    /// [`AlreadyAnswered`] when `id` was never issued or is no longer pending.
    pub fn answer(&self, id: &str, approved: bool) -> Result<(), AlreadyAnswered> {
        let mut issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match issued.iter_mut().find(|r| r.id == id) {
            Some(record) if record.state == Issued::Pending => {
                record.state = if approved { Issued::Approved } else { Issued::Denied };
                Ok(())
            }
            _ => Err(AlreadyAnswered(id.to_string())),
        }
    }

    /// The confirmations issued so far, in order, with how each stands.
    pub fn issued(&self) -> Vec<(String, Issued)> {
        let issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        issued.iter().map(|r| (r.id.clone(), r.state)).collect()
    }

    fn decide(&self, call: &CallInfo<'_>, confirmation_id: Option<&str>, now: Timestamp) -> ConfirmationDecision {
        use agent_surface_core::details::{ConfirmationInvalidReason as Invalid, Origin};
        if !(self.gates)(call) {
            return ConfirmationDecision::Proceed;
        }
        let input = call.input.cloned().unwrap_or(serde_json::Value::Null);
        let mut issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(id) = confirmation_id else {
            let id = format!("conf-{}", issued.len() + 1);
            let capability = call.capability.to_string();
            issued.push(Record { id: id.clone(), capability, input, state: Issued::Pending });
            return ConfirmationDecision::Required {
                confirmation_id: id,
                summary: (self.summary)(call),
                expires_at: now.saturating_add(self.valid_for),
                origin: Origin::Client,
            };
        };
        let Some(record) = issued.iter_mut().find(|r| r.id == id) else {
            return ConfirmationDecision::Invalid(Invalid::Mismatch);
        };
        if record.capability != call.capability || record.input != input {
            return ConfirmationDecision::Invalid(Invalid::Mismatch);
        }
        match record.state {
            Issued::Used => ConfirmationDecision::Invalid(Invalid::Consumed),
            Issued::Denied => ConfirmationDecision::Invalid(Invalid::Denied),
            Issued::Pending if self.waits => ConfirmationDecision::Invalid(Invalid::Mismatch),
            Issued::Pending | Issued::Approved => {
                record.state = Issued::Used;
                ConfirmationDecision::Proceed
            }
        }
    }
}

impl fmt::Debug for RecordingGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingGate").field("issued", &self.issued()).finish_non_exhaustive()
    }
}

impl ConfirmationGate for RecordingGate {
    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        Box::pin(std::future::ready(self.decide(&call, confirmation_id, now)))
    }
}
