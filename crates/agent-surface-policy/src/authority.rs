//! Authority (phase 4 and discovery): [`Policies`], the engine that composes
//! [`AuthorityPolicy`]s, and a few ready-made policies.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::Origin;
use futures_util::future::BoxFuture;

use crate::clock::{Clock, SystemClock};
use crate::guard::{Failure, guarded};
use crate::hooks::{AuthorityDecision, AuthorityPolicy, CallInfo, NotedDecision, PolicyError, Scope};

/// The time budget of one policy when none is configured.
pub const DEFAULT_POLICY_BUDGET: Duration = Duration::from_secs(1);

/// The authority engine: global, per-type and per-capability [`AuthorityPolicy`]s, evaluated in
/// order; the first decision that is not `Allow` wins.
///
/// The engine evaluates the policies that apply to a call in a fixed order — the global ones,
/// then those of the call's capability type, then those of the capability itself, each group in
/// the order it was added — and stops at the first decision that is not
/// [`AuthorityDecision::Allow`]. When every policy allows, the [`Fallback`] decides a call that
/// no per-type or per-capability policy names: [`Policies::new`] allows it (default-allow),
/// [`Policies::default_deny`] refuses it with `NOT_AUTHORIZED {origin: client}` (default-deny,
/// recommended for services with write capabilities: a capability nobody wrote a rule for cannot
/// be called).
///
/// Every type and capability the engine names is checked when the registry is assembled
/// ([`AuthorityPolicy::scopes`]): a misspelled name is a definition error, not a rule that
/// applies to nothing.
///
/// It fails closed: a policy that returns an error, panics, or does not answer within the
/// engine's time budget denies the call (`NOT_AUTHORIZED {origin: client}`). The failing policy's
/// name and the cause go to the operator channel (`tracing`, target `agent_surface::policy`),
/// never to the agent.
///
/// Registries use it as their authority policy (`RegistryConfig::authority`), so discovery and
/// invocation ask the same engine and a consumer never sees a capability it may not know about.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use agent_surface_core::details::Origin;
/// use agent_surface_core::Effect;
/// use agent_surface_policy::{
///     AuthorityDecision, CallInfo, Consumer, FnPolicy, Identity, ManualClock, Policies, RequireIdentity, RequireRole,
/// };
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let policies = Policies::new()
///     .with_clock(Arc::new(ManualClock::default()))
///     .with_budget(Duration::from_millis(250))
///     .global(RequireIdentity)
///     .for_type("admin", RequireRole::new("admin"))
///     .for_capability("admin.audit", FnPolicy::new("audit-hidden", |_call| Ok(AuthorityDecision::Hide)));
///
/// let user = Consumer::authenticated("session-1", Identity::new("user-7"));
/// let call = CallInfo::new(&user, "admin.purge", "admin", Effect::Destructive, false);
/// let verdict = policies.evaluate(call).await;
/// assert_eq!(verdict.decision, AuthorityDecision::Deny { origin: Origin::Client });
/// assert_eq!(verdict.decided_by, Some("require-role"));
///
/// let anonymous = Consumer::anonymous("session-2");
/// let call = CallInfo::new(&anonymous, "orders.list", "orders", Effect::Read, true);
/// assert_eq!(policies.evaluate(call).await.decision, AuthorityDecision::Unauthenticated);
/// # });
/// ```
#[derive(Clone)]
pub struct Policies {
    clock: Arc<dyn Clock>,
    budget: Duration,
    fallback: Fallback,
    global: Vec<Arc<dyn AuthorityPolicy>>,
    by_type: HashMap<String, Vec<Arc<dyn AuthorityPolicy>>>,
    by_capability: HashMap<String, Vec<Arc<dyn AuthorityPolicy>>>,
}

/// The engine's answer for one call, with the operator-side facts about it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Verdict<'p> {
    /// The decision.
    pub decision: AuthorityDecision,
    /// The name of the policy that decided, when one did not allow (for the operator channel).
    pub decided_by: Option<&'p str>,
    /// Whether the decision is a denial because that policy failed (error, panic or overrun).
    pub failed: bool,
}

impl Verdict<'_> {
    fn allow() -> Self {
        Verdict { decision: AuthorityDecision::Allow, decided_by: None, failed: false }
    }
}

/// What [`Policies`] decides for a call that no per-type or per-capability policy names, once
/// the global policies allowed it.
///
/// ```
/// use agent_surface_core::details::Origin;
/// use agent_surface_core::Effect;
/// use agent_surface_policy::{AllowAll, AuthorityDecision, CallInfo, Consumer, Policies, RequireRole};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let policies = Policies::default_deny()
///     .for_capability("tickets.list", AllowAll)
///     .for_capability("tickets.create", RequireRole::new("agent"));
/// let anyone = Consumer::anonymous("session-1");
/// let list = CallInfo::new(&anyone, "tickets.list", "tickets", Effect::Read, true);
/// assert_eq!(policies.evaluate(list).await.decision, AuthorityDecision::Allow);
/// // No policy names `tickets.delete`: refused.
/// let delete = CallInfo::new(&anyone, "tickets.delete", "tickets", Effect::Destructive, false);
/// let verdict = policies.evaluate(delete).await;
/// assert_eq!(verdict.decision, AuthorityDecision::Deny { origin: Origin::Client });
/// assert_eq!(verdict.decided_by, Some("default-deny"));
/// # });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback {
    /// Allow it (default-allow): the global policies alone decide for capabilities no rule
    /// names. Ask for it by name ([`Policies::default_allow`]): a capability added later without
    /// a rule is open to every caller the global policies let through.
    Allow,
    /// Deny it (default-deny): `NOT_AUTHORIZED {origin: client}`; a capability is callable only
    /// when a policy of its type or of the capability itself names it (use [`AllowAll`] to open
    /// one to everyone). Discovery lists a refused capability as it lists any denied one. The
    /// default: a service opens what its rules name, never what they forget to name.
    #[default]
    Deny,
}

impl Policies {
    /// A default-deny engine with no policy (everything refused until a policy names it), the
    /// system clock, and a budget of [`DEFAULT_POLICY_BUDGET`] per policy.
    pub fn new() -> Policies {
        Policies {
            clock: Arc::new(SystemClock),
            budget: DEFAULT_POLICY_BUDGET,
            fallback: Fallback::Deny,
            global: Vec::new(),
            by_type: HashMap::new(),
            by_capability: HashMap::new(),
        }
    }

    /// A default-deny engine with no policy: [`Policies::new`], named for what it does.
    pub fn default_deny() -> Policies {
        Policies::new()
    }

    /// A default-allow engine with no policy (everything allowed until a policy refuses it):
    /// [`Policies::new`] with [`Fallback::Allow`]. For services whose every capability is
    /// harmless to everyone the global policies admit; prefer [`Policies::default_deny`].
    pub fn default_allow() -> Policies {
        Policies::new().with_fallback(Fallback::Allow)
    }

    /// The same engine with another [`Fallback`].
    pub fn with_fallback(mut self, fallback: Fallback) -> Policies {
        self.fallback = fallback;
        self
    }

    /// What the engine decides for calls no per-type or per-capability policy names.
    pub fn fallback(&self) -> Fallback {
        self.fallback
    }

    /// The same engine, timing its policies on `clock` (use the registry's clock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Policies {
        self.clock = clock;
        self
    }

    /// The same engine with another time budget per policy. A policy still running when its
    /// budget is spent denies the call.
    pub fn with_budget(mut self, budget: Duration) -> Policies {
        self.budget = budget;
        self
    }

    /// Adds a policy that applies to every capability.
    pub fn global(mut self, policy: impl AuthorityPolicy) -> Policies {
        self.global.push(Arc::new(policy));
        self
    }

    /// Adds a policy that applies to the capabilities of one type.
    pub fn for_type(mut self, type_id: &str, policy: impl AuthorityPolicy) -> Policies {
        self.by_type.entry(type_id.to_string()).or_default().push(Arc::new(policy));
        self
    }

    /// Adds a policy that applies to one capability (`type.capability`).
    pub fn for_capability(mut self, capability: &str, policy: impl AuthorityPolicy) -> Policies {
        self.by_capability.entry(capability.to_string()).or_default().push(Arc::new(policy));
        self
    }

    /// The rule that names `capability` (`type.capability`, its type the part before the first
    /// `.`): [`Scope::Capability`] when policies were added for the capability itself, else
    /// [`Scope::Type`] when policies were added for its type, else `None` — no rule names it, and
    /// once the global policies allowed a call, the [`Fallback`] decides it (under
    /// default-allow, the call goes through with no rule written for it).
    ///
    /// For tests and lints (the testing kit's service lint asks it); a nested engine's rules are
    /// its own and not consulted.
    ///
    /// ```
    /// use agent_surface_policy::{AllowAll, Policies, RequireIdentity, RequireRole, Scope};
    ///
    /// let policies = Policies::new()
    ///     .global(RequireIdentity)
    ///     .for_type("tickets", AllowAll)
    ///     .for_capability("tickets.delete", RequireRole::new("admin"));
    /// assert_eq!(policies.rule_for("tickets.delete"), Some(Scope::capability("tickets.delete")));
    /// assert_eq!(policies.rule_for("tickets.list"), Some(Scope::capability_type("tickets")));
    /// // Only the global policy and the fallback (default-deny) decide `reports.export`.
    /// assert_eq!(policies.rule_for("reports.export"), None);
    /// ```
    pub fn rule_for(&self, capability: &str) -> Option<Scope> {
        let named = |groups: &HashMap<String, Vec<Arc<dyn AuthorityPolicy>>>, key: &str| {
            groups.get(key).is_some_and(|p| !p.is_empty())
        };
        let scope = Scope::capability(capability);
        if named(&self.by_capability, capability) {
            Some(scope)
        } else if named(&self.by_type, scope.type_id()) {
            Some(Scope::capability_type(scope.type_id()))
        } else {
            None
        }
    }

    /// How many policies the engine holds.
    pub fn len(&self) -> usize {
        self.global.len()
            + self.by_type.values().map(Vec::len).sum::<usize>()
            + self.by_capability.values().map(Vec::len).sum::<usize>()
    }

    /// Whether the engine holds no policy (and so decides everything by its [`Fallback`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The time budget of one policy.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The policies that apply to `call`, in evaluation order.
    fn chain<'p>(&'p self, call: &CallInfo<'_>) -> impl Iterator<Item = &'p Arc<dyn AuthorityPolicy>> + 'p {
        let by_type = self.by_type.get(call.type_id).into_iter().flatten();
        let by_capability = self.by_capability.get(call.capability).into_iter().flatten();
        self.global.iter().chain(by_type).chain(by_capability)
    }

    /// Whether a per-type or per-capability policy names `call`'s capability.
    fn names(&self, call: &CallInfo<'_>) -> bool {
        self.by_type.get(call.type_id).is_some_and(|p| !p.is_empty())
            || self.by_capability.get(call.capability).is_some_and(|p| !p.is_empty())
    }

    /// Evaluates the policies that apply to `call`, in order, failing closed; then, when all of
    /// them allowed, the [`Fallback`].
    pub async fn evaluate<'p>(&'p self, call: CallInfo<'_>) -> Verdict<'p> {
        self.evaluate_noted(call).await.0
    }

    /// [`Policies::evaluate`], with the decision noted as the deepest policy that made it says
    /// (a nested engine's own policy, say) for the operator channel.
    async fn evaluate_noted<'p>(&'p self, call: CallInfo<'_>) -> (Verdict<'p>, NotedDecision) {
        for policy in self.chain(&call) {
            // A nested engine says which of its policies decided; any other policy is asked its
            // plain decision (one boxed future, not two) and noted by its own name.
            let is_engine = (policy.as_ref() as &dyn std::any::Any).is::<Policies>();
            let decided = if is_engine {
                guarded(self.clock.as_ref(), self.budget, || policy.decide_noted(call)).await
            } else {
                guarded(self.clock.as_ref(), self.budget, || policy.decide(call))
                    .await
                    .map(|decision| NotedDecision::of(policy.as_ref(), decision))
            };
            if let Some(verdict) = concluded(policy, &call, decided) {
                return verdict;
            }
        }
        self.fallen_back(&call)
    }

    /// [`Policies::evaluate_noted`] when every policy that applies to `call` decides at once
    /// ([`AuthorityPolicy::decide_noted_at_once`], a panic caught); `None` as soon as one of
    /// them cannot.
    fn evaluate_noted_at_once<'p>(&'p self, call: &CallInfo<'_>) -> Option<(Verdict<'p>, NotedDecision)> {
        for policy in self.chain(call) {
            // As in `evaluate_noted`: a nested engine says which of its policies decided; any
            // other policy is noted by its own name.
            let is_engine = (policy.as_ref() as &dyn std::any::Any).is::<Policies>();
            let decided = if is_engine {
                crate::guard::at_once(|| policy.decide_noted_at_once(call))?
            } else {
                crate::guard::at_once(|| policy.decide_at_once(call))?
                    .map(|decision| NotedDecision::of(policy.as_ref(), decision))
            };
            if let Some(verdict) = concluded(policy, call, decided) {
                return Some(verdict);
            }
        }
        Some(self.fallen_back(call))
    }

    /// The verdict once every policy that applies to `call` allowed it: the [`Fallback`]'s.
    fn fallen_back<'p>(&self, call: &CallInfo<'_>) -> (Verdict<'p>, NotedDecision) {
        if self.fallback == Fallback::Deny && !self.names(call) {
            tracing::debug!(
                target: "agent_surface::policy",
                policy = "default-deny",
                capability = call.capability,
                consumer = call.consumer.key(),
                "no policy names the capability; denying"
            );
            let decision = AuthorityDecision::Deny { origin: Origin::Client };
            let wants = Some("a policy that names the capability".to_string());
            let noted = NotedDecision::new(decision.clone(), "default-deny", wants);
            return (Verdict { decision, decided_by: Some("default-deny"), failed: false }, noted);
        }
        (Verdict::allow(), NotedDecision::allow())
    }
}

/// What `policy`'s answer about `call` makes of an engine's evaluation: `None` to ask the next
/// policy (it allowed), else the verdict — its decision, or a denial when it failed, with the
/// operator event either says.
fn concluded<'p>(
    policy: &'p Arc<dyn AuthorityPolicy>,
    call: &CallInfo<'_>,
    decided: Result<NotedDecision, Failure>,
) -> Option<(Verdict<'p>, NotedDecision)> {
    match decided {
        Ok(NotedDecision { decision: AuthorityDecision::Allow, .. }) => None,
        Ok(noted) => {
            tracing::debug!(
                target: "agent_surface::policy",
                policy = policy.name(),
                capability = call.capability,
                consumer = call.consumer.key(),
                decision = ?noted.decision,
                "authority decision"
            );
            let verdict = Verdict { decision: noted.decision.clone(), decided_by: Some(policy.name()), failed: false };
            Some((verdict, noted))
        }
        Err(failure) => {
            let noted = denial_of_failure(policy.as_ref(), call, &failure);
            Some((Verdict { decision: noted.decision.clone(), decided_by: Some(policy.name()), failed: true }, noted))
        }
    }
}

/// What an authority policy that failed — returned an error, panicked or overran its budget —
/// decided: a denial (`NOT_AUTHORIZED {origin: client}`) noted by its name, wanting nothing. Its
/// operator event goes out here, target `agent_surface::policy`, with the policy, the capability,
/// the consumer key and the cause (redacted): an `ERROR` for a panic (broken user code), a `WARN`
/// for an error or an overrun. The [`Policies`] engine and the registry answer a failed policy so.
pub fn denial_of_failure(policy: &dyn AuthorityPolicy, call: &CallInfo<'_>, failure: &Failure) -> NotedDecision {
    if matches!(failure, Failure::Panic(_)) {
        tracing::error!(
            target: "agent_surface::policy",
            policy = policy.name(),
            capability = call.capability,
            consumer = call.consumer.key(),
            cause = %crate::redacted(failure),
            "authority policy panicked; denying"
        );
    } else {
        tracing::warn!(
            target: "agent_surface::policy",
            policy = policy.name(),
            capability = call.capability,
            consumer = call.consumer.key(),
            cause = %crate::redacted(failure),
            "authority policy failed; denying"
        );
    }
    NotedDecision::new(AuthorityDecision::Deny { origin: Origin::Client }, policy.name(), None)
}

impl Default for Policies {
    fn default() -> Policies {
        Policies::new()
    }
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |v: &Vec<Arc<dyn AuthorityPolicy>>| v.iter().map(|p| p.name().to_string()).collect::<Vec<_>>();
        f.debug_struct("Policies")
            .field("budget", &self.budget)
            .field("fallback", &self.fallback)
            .field("global", &names(&self.global))
            .field("by_type", &self.by_type.iter().map(|(k, v)| (k, names(v))).collect::<HashMap<_, _>>())
            .field("by_capability", &self.by_capability.iter().map(|(k, v)| (k, names(v))).collect::<HashMap<_, _>>())
            .finish()
    }
}

/// The engine is itself a policy, so engines nest and a registry can take one where it takes a
/// policy. Its failures are already turned into denials, so it never returns an error.
impl AuthorityPolicy for Policies {
    fn name(&self) -> &str {
        "policies"
    }

    fn clock(&self) -> Option<Arc<dyn Clock>> {
        Some(self.clock.clone())
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(async move { Ok(self.evaluate(call).await.decision) })
    }

    /// Names the policy among those it holds that decided (a nested engine's own, in turn).
    fn decide_noted<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<NotedDecision, PolicyError>> {
        Box::pin(async move { Ok(self.evaluate_noted(call).await.1) })
    }

    /// At once when every policy that applies to the call decides at once.
    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        self.evaluate_noted_at_once(call).map(|(verdict, _)| Ok(verdict.decision))
    }

    fn decide_noted_at_once(&self, call: &CallInfo<'_>) -> Option<Result<NotedDecision, PolicyError>> {
        self.evaluate_noted_at_once(call).map(|(_, noted)| Ok(noted))
    }

    /// The types and capabilities of its per-type and per-capability groups, and what the
    /// policies it holds name (an engine nested in it, say), in a stable order.
    fn scopes(&self) -> Vec<Scope> {
        let mut scopes: Vec<Scope> = self
            .by_type
            .keys()
            .map(|t| Scope::capability_type(t.as_str()))
            .chain(self.by_capability.keys().map(|c| Scope::capability(c.as_str())))
            .collect();
        let held =
            self.global.iter().chain(self.by_type.values().flatten()).chain(self.by_capability.values().flatten());
        scopes.extend(held.flat_map(|p| p.scopes()));
        scopes.sort();
        scopes.dedup();
        scopes
    }
}

/// Allows every call: under [`Policies::default_deny`], names a type or a capability that
/// anyone may call.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl AuthorityPolicy for AllowAll {
    fn name(&self) -> &str {
        "allow-all"
    }

    fn decide<'a>(&'a self, _call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(std::future::ready(Ok(AuthorityDecision::Allow)))
    }

    fn decide_at_once(&self, _call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        Some(Ok(AuthorityDecision::Allow))
    }
}

/// Requires a signed-in identity: `NOT_AUTHENTICATED` for anonymous consumers.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequireIdentity;

impl AuthorityPolicy for RequireIdentity {
    fn name(&self) -> &str {
        "require-identity"
    }

    fn wants(&self) -> Option<String> {
        Some("a signed-in identity".to_string())
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(std::future::ready(Ok(self.decision(&call))))
    }

    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        Some(Ok(self.decision(call)))
    }
}

impl RequireIdentity {
    fn decision(self, call: &CallInfo<'_>) -> AuthorityDecision {
        if call.consumer.identity().is_some() { AuthorityDecision::Allow } else { AuthorityDecision::Unauthenticated }
    }
}

/// Requires a role: `NOT_AUTHENTICATED` for anonymous consumers, `NOT_AUTHORIZED {origin:
/// client}` for identities without the role; or, with [`RequireRole::or_hide`], the capability
/// does not exist for them (absent from discovery, `CAPABILITY_NOT_FOUND` when invoked). The
/// role's name never reaches the agent.
///
/// ```
/// use agent_surface_core::details::Origin;
/// use agent_surface_core::Effect;
/// use agent_surface_policy::{AuthorityDecision, CallInfo, Consumer, Identity, Policies, RequireRole};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let policies = Policies::new()
///     .for_type("refunds", RequireRole::new("support"))
///     .for_type("admin", RequireRole::new("admin").or_hide());
/// let user = Consumer::authenticated("session-1", Identity::new("user-7"));
/// let refund = CallInfo::new(&user, "refunds.issue", "refunds", Effect::Write, false);
/// assert_eq!(policies.evaluate(refund).await.decision, AuthorityDecision::Deny { origin: Origin::Client });
/// let purge = CallInfo::new(&user, "admin.purge", "admin", Effect::Write, false);
/// assert_eq!(policies.evaluate(purge).await.decision, AuthorityDecision::Hide);
/// let anonymous = Consumer::anonymous("session-2");
/// let purge = CallInfo::new(&anonymous, "admin.purge", "admin", Effect::Write, false);
/// assert_eq!(policies.evaluate(purge).await.decision, AuthorityDecision::Hide);
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct RequireRole {
    role: String,
    hide: bool,
}

impl RequireRole {
    /// Requires `role`.
    pub fn new(role: impl Into<String>) -> RequireRole {
        RequireRole { role: role.into(), hide: false }
    }

    /// Hides what it guards from every consumer without the role, anonymous or signed in,
    /// instead of refusing the call: tools only some people should know exist (administration,
    /// approvals).
    pub fn or_hide(mut self) -> RequireRole {
        self.hide = true;
        self
    }
}

impl AuthorityPolicy for RequireRole {
    fn name(&self) -> &str {
        "require-role"
    }

    fn wants(&self) -> Option<String> {
        Some(format!("role {:?}", self.role))
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(std::future::ready(Ok(self.decision(&call))))
    }

    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        Some(Ok(self.decision(call)))
    }
}

impl RequireRole {
    fn decision(&self, call: &CallInfo<'_>) -> AuthorityDecision {
        match call.consumer.identity() {
            Some(identity) if identity.has_role(&self.role) => AuthorityDecision::Allow,
            _ if self.hide => AuthorityDecision::Hide,
            None => AuthorityDecision::Unauthenticated,
            Some(_) => AuthorityDecision::Deny { origin: Origin::Client },
        }
    }
}

/// A named synchronous policy from a closure.
///
/// The closure decides both ways ([`AuthorityPolicy::decide`] and
/// [`AuthorityPolicy::decide_at_once`]), so the registry never awaits it. It may run more than
/// once for one call — when another policy of the same engine has to await, the engine's
/// evaluation runs again through `decide` — so it decides and does nothing else (no counting or
/// recording of calls in it).
///
/// ```
/// use agent_surface_core::SafeText;
/// use agent_surface_policy::{AuthorityDecision, FnPolicy};
///
/// let closed = FnPolicy::new("store-hours", |_call| {
///     Ok(AuthorityDecision::Disable { reason: SafeText::from("The store opens at 9:00.") })
/// });
/// # let _ = closed;
/// ```
pub struct FnPolicy<F> {
    name: String,
    decide: F,
}

impl<F> FnPolicy<F>
where
    F: Fn(&CallInfo<'_>) -> Result<AuthorityDecision, PolicyError> + Send + Sync + 'static,
{
    /// A policy named `name` that decides with `decide`.
    pub fn new(name: impl Into<String>, decide: F) -> FnPolicy<F> {
        FnPolicy { name: name.into(), decide }
    }
}

impl<F> fmt::Debug for FnPolicy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnPolicy").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<F> AuthorityPolicy for FnPolicy<F>
where
    F: Fn(&CallInfo<'_>) -> Result<AuthorityDecision, PolicyError> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(std::future::ready((self.decide)(&call)))
    }

    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        Some((self.decide)(call))
    }
}
