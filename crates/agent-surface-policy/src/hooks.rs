//! The extension points the pipeline consults in phases 4 (authority), 6 (rate) and 7
//! (confirmation). With none configured, every call is allowed.
//!
//! Each hook is a small object-safe trait. This crate ships one engine per hook —
//! [`Policies`](crate::Policies), [`MemoryRateLimiter`](crate::MemoryRateLimiter) and
//! [`ConfirmationEngine`](crate::ConfirmationEngine) — and a host may plug in its own.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin, RateLimitReason};
use agent_surface_core::{SafeText, Timestamp};
use futures_util::future::BoxFuture;

pub use crate::call::{CallDetails, CallInfo, ConsumedEvidence, DeclaredGate};
pub use crate::guard::PolicyError;

/// An authority decision. Deliberately exhaustive: the pipeline must handle every outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum AuthorityDecision {
    /// Go on.
    Allow,
    /// Authenticated but not permitted: `NOT_AUTHORIZED {origin}`.
    Deny {
        /// Who denied.
        origin: Origin,
    },
    /// A signed-in identity is required: `NOT_AUTHENTICATED`.
    Unauthenticated,
    /// The capability does not exist for this consumer: absent from its snapshot, and
    /// `CAPABILITY_NOT_FOUND` when invoked.
    Hide,
    /// Visible but disabled for this consumer: `CAPABILITY_NOT_AVAILABLE {reason}`.
    Disable {
        /// The reason shown as `unavailableReason` and in the error.
        reason: SafeText,
    },
}

/// A name a hook's configuration refers to: a capability type or a capability.
///
/// Hooks report the names they are configured for ([`AuthorityPolicy::scopes`],
/// [`RateLimiter::scopes`], [`ConfirmationGate::scopes`]) so that the registry can check, when
/// it is assembled, that each one exists: a misspelled name is a definition error naming the
/// closest existing one, never a rule that silently applies to nothing.
///
/// A capability is always named by its capability name, `type.capability` (e.g.
/// `tickets.create`); the tool names adapters derive from it (`tickets-create`) are not scopes.
///
/// ```
/// use agent_surface_policy::Scope;
///
/// let t = Scope::capability("tickets.create");
/// assert_eq!(t.name(), "tickets.create");
/// assert_eq!(t.type_id(), "tickets");
/// assert_eq!(t.to_string(), "capability `tickets.create`");
/// assert_eq!(Scope::capability_type("tickets").to_string(), "type `tickets`");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Scope {
    /// A capability type, by its type id (e.g. `tickets`).
    Type(String),
    /// A capability, by its capability name (e.g. `tickets.create`).
    Capability(String),
}

impl Scope {
    /// The capability named `name` (`type.capability`).
    pub fn capability(name: impl Into<String>) -> Scope {
        Scope::Capability(name.into())
    }

    /// The capability type `type_id`.
    pub fn capability_type(type_id: impl Into<String>) -> Scope {
        Scope::Type(type_id.into())
    }

    /// The name as written.
    pub fn name(&self) -> &str {
        match self {
            Scope::Type(name) | Scope::Capability(name) => name,
        }
    }

    /// The type the name belongs to: the type itself, or the part of a capability name before
    /// its first `.` (all of it when there is none).
    pub fn type_id(&self) -> &str {
        match self {
            Scope::Type(name) => name,
            Scope::Capability(name) => name.split_once('.').map_or(name.as_str(), |(t, _)| t),
        }
    }

    /// Whether a call of `capability` (of type `type_id`) is one this scope names.
    pub fn covers(&self, capability: &str, type_id: &str) -> bool {
        match self {
            Scope::Type(name) => name == type_id,
            Scope::Capability(name) => name == capability,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Type(name) => write!(f, "type `{name}`"),
            Scope::Capability(name) => write!(f, "capability `{name}`"),
        }
    }
}

/// Decides who may see and call what (phase 4, and discovery).
///
/// A policy answers for one consumer and one capability. Compose several with
/// [`Policies`](crate::Policies), which evaluates them in order (global, per type, per
/// capability), stops at the first decision that is not [`AuthorityDecision::Allow`], and turns a
/// failure, a panic or an overrun of the time budget into a denial.
///
/// Every policy is [`Any`](std::any::Any), so code that holds a `dyn AuthorityPolicy` (the
/// registry's configuration, say) can ask whether it is a [`Policies`](crate::Policies) engine
/// and query its rules (`(policy as &dyn Any).downcast_ref::<Policies>()`, as the testing kit's
/// service lint does).
pub trait AuthorityPolicy: std::any::Any + Send + Sync + 'static {
    /// A name for the operator channel.
    fn name(&self) -> &str;

    /// Decides on one call or capability.
    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>>;

    /// What a caller must have for this policy to allow a call, for the operator channel only
    /// (e.g. `role "agent"`): the pipeline's event of a denial names it. The default: nothing
    /// said (the event still names the policy).
    fn wants(&self) -> Option<String> {
        None
    }

    /// [`decide`](AuthorityPolicy::decide), with the policy that decided and what it wanted when
    /// the decision is not [`AuthorityDecision::Allow`] (the pipeline's operator event of a
    /// denial says `policy require-role denied: wants role "agent"`). The default names this
    /// policy and its [`wants`](AuthorityPolicy::wants); an engine that holds other policies
    /// ([`Policies`](crate::Policies)) names the one among them that decided. A policy that
    /// overrides this and decides at once overrides
    /// [`decide_noted_at_once`](AuthorityPolicy::decide_noted_at_once) too, or its decisions at
    /// once are noted as the default notes them.
    fn decide_noted<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<NotedDecision, PolicyError>> {
        Box::pin(async move { Ok(NotedDecision::of(self, self.decide(call).await?)) })
    }

    /// Decides without awaiting, when the policy can: `Some` with what [`decide`](Self::decide)
    /// would answer, `None` when the decision needs an await (a directory, a database). The
    /// registry asks this first, and [`decide`](Self::decide) only on `None`, so a call that
    /// policies decide at once costs no boxed future and no timer (an ambiguous call, asked about
    /// per instance, still awaits). A decision here is a decision
    /// only, with no effect of its own: when another policy of the same
    /// [`Policies`](crate::Policies) engine needs an await, the engine's whole evaluation runs
    /// again through `decide`, which asks this policy again. A panic is caught as in `decide`.
    /// The default: `None`.
    ///
    /// A policy that decides from the call alone answers both ways from one function:
    ///
    /// ```
    /// use agent_surface_core::details::Origin;
    /// use agent_surface_core::Effect;
    /// use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Consumer, Identity, PolicyError};
    /// use futures_util::future::BoxFuture;
    ///
    /// /// Writes only by callers of the `acme` tenant (a claim their sign-in carries).
    /// struct AcmeWrites;
    ///
    /// impl AcmeWrites {
    ///     fn decision(call: &CallInfo<'_>) -> AuthorityDecision {
    ///         let tenant = call.consumer.identity().and_then(|i| i.claims.get("tenant")).and_then(|t| t.as_str());
    ///         match (call.effect, tenant) {
    ///             (Effect::Read, _) | (_, Some("acme")) => AuthorityDecision::Allow,
    ///             _ => AuthorityDecision::Deny { origin: Origin::Client },
    ///         }
    ///     }
    /// }
    ///
    /// impl AuthorityPolicy for AcmeWrites {
    ///     fn name(&self) -> &str {
    ///         "acme-writes"
    ///     }
    ///
    ///     fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
    ///         Box::pin(std::future::ready(Ok(AcmeWrites::decision(&call))))
    ///     }
    ///
    ///     fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
    ///         Some(Ok(AcmeWrites::decision(call)))
    ///     }
    /// }
    ///
    /// let guest = Consumer::authenticated("s-1", Identity::new("u-1"));
    /// let write = CallInfo::new(&guest, "orders.cancel", "orders", Effect::Write, false);
    /// assert_eq!(AcmeWrites.decide_at_once(&write).unwrap().unwrap(), AuthorityDecision::Deny { origin: Origin::Client });
    /// ```
    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        let _ = call;
        None
    }

    /// [`decide_noted`](Self::decide_noted) without awaiting: `None` when
    /// [`decide_at_once`](Self::decide_at_once) is. The default notes `decide_at_once`'s
    /// decision as the default `decide_noted` notes `decide`'s.
    fn decide_noted_at_once(&self, call: &CallInfo<'_>) -> Option<Result<NotedDecision, PolicyError>> {
        Some(self.decide_at_once(call)?.map(|decision| NotedDecision::of(self, decision)))
    }

    /// The types and capabilities this policy is configured for, which the registry checks
    /// exist when it is assembled (see [`Scope`]). The default: none (a policy that decides by
    /// looking at the call names nothing in advance).
    fn scopes(&self) -> Vec<Scope> {
        Vec::new()
    }

    /// The clock it reads (for the registry's wiring report, `Registry::wiring_warnings`, which
    /// says so when it differs from the registry's); `None` (the default) for one that reads
    /// none or does not say.
    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        None
    }
}

impl<P: AuthorityPolicy + ?Sized> AuthorityPolicy for Arc<P> {
    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        (**self).clock()
    }

    fn name(&self) -> &str {
        (**self).name()
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        (**self).decide(call)
    }

    fn wants(&self) -> Option<String> {
        (**self).wants()
    }

    fn decide_noted<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<NotedDecision, PolicyError>> {
        (**self).decide_noted(call)
    }

    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        (**self).decide_at_once(call)
    }

    fn decide_noted_at_once(&self, call: &CallInfo<'_>) -> Option<Result<NotedDecision, PolicyError>> {
        (**self).decide_noted_at_once(call)
    }

    fn scopes(&self) -> Vec<Scope> {
        (**self).scopes()
    }
}

/// An authority decision with, when it is not [`AuthorityDecision::Allow`], the policy that made
/// it and what that policy wanted: for the operator channel only, never the agent's payload.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NotedDecision {
    /// The decision.
    pub decision: AuthorityDecision,
    /// The name of the policy that decided; empty for `Allow`.
    pub by: String,
    /// What it wanted ([`AuthorityPolicy::wants`]); `None` for `Allow`.
    pub wants: Option<String>,
}

impl NotedDecision {
    /// `decision`, made by the policy named `by`, which wanted `wants`.
    pub fn new(decision: AuthorityDecision, by: &str, wants: Option<String>) -> NotedDecision {
        NotedDecision { decision, by: by.to_string(), wants }
    }

    /// `Allow`, which names nobody (and allocates nothing).
    pub fn allow() -> NotedDecision {
        NotedDecision { decision: AuthorityDecision::Allow, by: String::new(), wants: None }
    }

    /// `decision`, made by `policy` itself: named by its name and what it wants, unless it allows.
    pub(crate) fn of<P: AuthorityPolicy + ?Sized>(policy: &P, decision: AuthorityDecision) -> NotedDecision {
        if decision == AuthorityDecision::Allow {
            NotedDecision::allow()
        } else {
            NotedDecision::new(decision, policy.name(), policy.wants())
        }
    }
}

/// A rate decision.
#[non_exhaustive]
pub enum RateDecision {
    /// Go on; the permit (if any) is held until the call ends (a queue slot, say).
    Allow(Option<Box<dyn Send>>),
    /// `RATE_LIMITED {reason, retryAfterMs}`.
    Limited {
        /// Which limit.
        reason: RateLimitReason,
        /// An honest estimate of when a retry can pass.
        retry_after: Duration,
    },
    /// The limiter could not decide because its store failed (a shared store that does not
    /// answer, say): the call does not run and is answered as any other store failure,
    /// `EXECUTION_FAILED {reason: transport, transient: true}` after
    /// [`STORE_RETRY_AFTER`](crate::confirmation::STORE_RETRY_AFTER) — never `RATE_LIMITED`, which would
    /// tell the caller it called too often. The text is the cause, for the operator channel
    /// only.
    Unavailable(String),
}

impl std::fmt::Debug for RateDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RateDecision::Allow(permit) => f.debug_tuple("Allow").field(&permit.as_ref().map(|_| "permit")).finish(),
            RateDecision::Limited { reason, retry_after } => {
                f.debug_struct("Limited").field("reason", reason).field("retry_after", retry_after).finish()
            }
            RateDecision::Unavailable(cause) => f.debug_tuple("Unavailable").field(cause).finish(),
        }
    }
}

/// Rate limits and the action queue (phase 6).
///
/// A limiter decides which of its budgets ("buckets") a call needs — the shipped limiters use
/// [`RateBudgets`](crate::RateBudgets): per consumer, per capability, and per consumer for one
/// capability or one type — and takes one unit from **every** one of them or from **none**: a
/// refused call costs nothing, and `retry_after` is the time until every bucket involved would
/// let the call pass. The store kit of `agent-surface-testing` holds a limiter to these rules.
pub trait RateLimiter: Send + Sync + 'static {
    /// Who shares the budgets: [`Reach::Shared`](crate::Reach::Shared) when replicas take from
    /// the same buckets, [`Reach::Process`](crate::Reach::Process) when each process counts
    /// alone (then a "per user" budget is per user and replica), [`Reach::Durable`](crate::Reach::Durable)
    /// when it counts alone but keeps its buckets across restarts.
    fn reach(&self) -> crate::Reach;

    /// The clock it reads (for the registry's wiring report, `Registry::wiring_warnings`, which
    /// says so when it differs from the registry's); `None` (the default) for one that reads
    /// none or does not say.
    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        None
    }

    /// Takes a unit of budget for the call, or says how long to wait.
    ///
    /// `now` is the pipeline's clock reading for this call.
    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision>;

    /// Decides about the call without awaiting, when the limiter can: `Some` with the decision
    /// [`acquire`](Self::acquire) would give (a unit taken, or how long to wait), or `None`,
    /// having taken nothing (no unit of budget, no queue slot, no place in a waiting room), when
    /// the decision needs an await — a shared store's round trip, a wait for a slot. The registry
    /// asks this first and calls `acquire` only on `None`, so a call a limiter in memory decides
    /// at once costs no boxed future and no timer (unless it grants a permit the call must hold,
    /// a queue slot). A panic here is caught as one in `acquire` is.
    /// The default: `None`.
    fn acquire_at_once(&self, call: &CallInfo<'_>, now: Timestamp) -> Option<RateDecision> {
        let _ = (call, now);
        None
    }

    /// The types and capabilities this limiter has budgets for, which the registry checks exist
    /// when it is assembled (see [`Scope`]). The default: none.
    fn scopes(&self) -> Vec<Scope> {
        Vec::new()
    }
}

impl<L: RateLimiter + ?Sized> RateLimiter for Arc<L> {
    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        (**self).clock()
    }

    fn reach(&self) -> crate::Reach {
        (**self).reach()
    }

    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision> {
        (**self).acquire(call, now)
    }

    fn acquire_at_once(&self, call: &CallInfo<'_>, now: Timestamp) -> Option<RateDecision> {
        (**self).acquire_at_once(call, now)
    }

    fn scopes(&self) -> Vec<Scope> {
        (**self).scopes()
    }
}

/// What a confirmation gate found about a call without awaiting
/// ([`ConfirmationGate::check_at_once`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum AtOnce {
    /// The call proceeds: the answer [`ConfirmationGate::check`] would give, reached without
    /// reading the clock or touching a store, with no evidence consumed and nothing recorded or
    /// remembered.
    Proceed,
    /// The gate must be asked through [`ConfirmationGate::check_after`], which is handed back
    /// what it found so far, so that nothing it asked is asked again.
    Ask(Found),
}

/// What a confirmation gate found about a call before it had to await: for the
/// [`ConfirmationEngine`](crate::ConfirmationEngine), which of its confirmation policies it asked
/// and whether one of them gated the call. Opaque; [`Found::default`] is "nothing asked yet".
#[derive(Debug, Default)]
pub struct Found {
    /// How many of the engine's policies answered without gating the call.
    pub(crate) open: usize,
    /// The summary of the policy that gated the call (a failed policy's generic one), once one did.
    pub(crate) gated: Option<SafeText>,
}

/// A confirmation decision.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfirmationDecision {
    /// No gate, or valid evidence (now consumed): go on.
    Proceed,
    /// `CONFIRMATION_REQUIRED`.
    Required {
        /// The id to retry with.
        confirmation_id: String,
        /// What will happen.
        summary: SafeText,
        /// When the pending confirmation expires.
        expires_at: Timestamp,
        /// Who requires it.
        origin: Origin,
    },
    /// `CONFIRMATION_INVALID {reason}`.
    Invalid(ConfirmationInvalidReason),
    /// The gate could not decide because its store failed. The call does not run (fail closed):
    /// `EXECUTION_FAILED {reason: transport, transient: true, retryAfterMs}`.
    Unavailable {
        /// How long to wait before retrying.
        retry_after: Duration,
    },
}

/// Confirmation gates (phase 7).
pub trait ConfirmationGate: Send + Sync + 'static {
    /// Checks the call and the evidence it carries.
    ///
    /// `now` is the pipeline's clock reading for this call.
    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision>;

    /// Decides about `call` without awaiting, when the gate can: [`AtOnce::Proceed`] when it lets
    /// the call through without reading the clock or touching a store, whatever evidence it
    /// carries (`confirmation_id`); otherwise [`AtOnce::Ask`] with what it found so far. `call`
    /// is what [`check`](Self::check) would be given. The registry asks this first, for a gate
    /// that [consults the call's details](Self::consults_call_details), and calls
    /// [`check_after`](Self::check_after) only on `Ask`, so a call the gate lets through costs
    /// no boxed future, no timer and no clock reading. The default: `Ask`, having asked nothing.
    fn check_at_once(&self, call: &CallInfo<'_>, confirmation_id: Option<&str>) -> AtOnce {
        let _ = (call, confirmation_id);
        AtOnce::Ask(Found::default())
    }

    /// [`check`](Self::check), continuing from what [`check_at_once`](Self::check_at_once)
    /// `found`. The default: `check` (the default `check_at_once` finds nothing).
    fn check_after<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
        found: Found,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        let _ = found;
        self.check(call, confirmation_id, now)
    }

    /// What the gate's store holds, for the operator's gauges; `None` (the default): it does
    /// not say.
    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        let _ = now;
        None
    }

    /// The types and capabilities this gate has rules for, which the registry checks exist when
    /// it is assembled (see [`Scope`]). The default: none.
    fn scopes(&self) -> Vec<Scope> {
        Vec::new()
    }

    /// Who shares the confirmations this gate keeps ([`Reach`](crate::Reach)), for the
    /// registry's wiring report; `None` (the default) for a gate that keeps none of its own.
    fn reach(&self) -> Option<crate::Reach> {
        None
    }

    /// The clock it reads (for the registry's wiring report, `Registry::wiring_warnings`, which
    /// says so when it differs from the registry's); `None` (the default) for one that reads
    /// none or does not say.
    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        None
    }

    /// The audit sink it writes the confirmation events to, for the wiring report (which says
    /// so when the registry's `AuditConfig` and the gate do not share one); `None` (the default)
    /// for none, or a gate that does not say.
    fn audit_sink(&self) -> Option<Arc<dyn crate::AuditSink>> {
        None
    }

    /// What is wrong with the gate's rules, each with the scope of the rule: e.g. a quorum that
    /// can never be met. The registry refuses each as an `INVALID_DEFINITION` when it checks the
    /// scopes (at the definition of the scope's type and on every mount). The default: nothing.
    fn rule_problems(&self) -> Vec<(Scope, String)> {
        Vec::new()
    }

    /// Whether this gate asks [`CallInfo::details`] for what it needs of a call it gates (the
    /// input preview) instead of reading it from the `CallInfo`, **and** remembers the
    /// confirmations it relays itself, presenting one when the same consumer repeats the same
    /// call without evidence (the `ConfirmationEngine` does both, the memory in its store, which
    /// replicas may share). The default, `false`: the registry computes the preview for every
    /// call it asks about, keeps a memory of relayed confirmations of its own (per process,
    /// `RegistryConfig::relayed_confirmations`) and presents a remembered id as the call's
    /// evidence itself.
    fn consults_call_details(&self) -> bool {
        false
    }

    /// Where a person approves the confirmation `confirmation_id` (its approval page), when the
    /// gate knows one; it becomes `details.approvalUrl` of `CONFIRMATION_REQUIRED`. The default:
    /// none.
    fn approval_url(&self, confirmation_id: &str) -> Option<String> {
        let _ = confirmation_id;
        None
    }

    /// Gives back `evidence`, which this gate consumed for `call` (and told the call about
    /// through [`CallDetails::consumed`]), because the call's handler never started (strict
    /// audit refused the call after the confirmation phase; its caller went away first) or
    /// answered that the same call should be made again (retry `yes` or `after-delay`: nothing
    /// took effect), so that its retry — with the same id, or the same call repeated — can use
    /// the approval. `true` when
    /// the approval is usable again. The default: `false` (nothing to give back).
    fn reinstate<'a>(
        &'a self,
        call: CallInfo<'a>,
        evidence: &'a ConsumedEvidence,
        now: Timestamp,
    ) -> BoxFuture<'a, bool> {
        let _ = (call, evidence, now);
        Box::pin(std::future::ready(false))
    }

    /// Runs the gate's periodic work until `stop` completes: for the
    /// [`ConfirmationEngine`](crate::ConfirmationEngine), its expiry sweep
    /// ([`run_sweeps`](crate::ConfirmationEngine::run_sweeps)). The library's `serve` helpers run
    /// it for their registry's gate while they serve. The default: nothing (it waits for `stop`).
    fn run_periodic<'a>(&'a self, stop: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        stop
    }
}

impl<G: ConfirmationGate + ?Sized> ConfirmationGate for Arc<G> {
    fn approval_url(&self, confirmation_id: &str) -> Option<String> {
        (**self).approval_url(confirmation_id)
    }

    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        (**self).check(call, confirmation_id, now)
    }

    fn check_at_once(&self, call: &CallInfo<'_>, confirmation_id: Option<&str>) -> AtOnce {
        (**self).check_at_once(call, confirmation_id)
    }

    fn check_after<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
        found: Found,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        (**self).check_after(call, confirmation_id, now, found)
    }

    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        (**self).usage(now)
    }

    fn consults_call_details(&self) -> bool {
        (**self).consults_call_details()
    }

    fn reach(&self) -> Option<crate::Reach> {
        (**self).reach()
    }

    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        (**self).clock()
    }

    fn audit_sink(&self) -> Option<Arc<dyn crate::AuditSink>> {
        (**self).audit_sink()
    }

    fn scopes(&self) -> Vec<Scope> {
        (**self).scopes()
    }

    fn reinstate<'a>(
        &'a self,
        call: CallInfo<'a>,
        evidence: &'a ConsumedEvidence,
        now: Timestamp,
    ) -> BoxFuture<'a, bool> {
        (**self).reinstate(call, evidence, now)
    }

    fn rule_problems(&self) -> Vec<(Scope, String)> {
        (**self).rule_problems()
    }

    fn run_periodic<'a>(&'a self, stop: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        (**self).run_periodic(stop)
    }
}
