//! Confirmation (phase 7): [`ConfirmationEngine`], the gate that asks a person before a call
//! runs, and the single-use evidence it issues.

mod memory;
mod quorum;
mod record;
mod store;
mod sweeper;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin};
use agent_surface_core::{SafeText, Timestamp};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::Notify;

pub use memory::{MemoryConfirmationStore, MemoryConfirmationStoreConfig};
pub use quorum::{MAX_NAMED_APPROVERS, MAX_QUORUM, Quorum, SlotSet};
pub use record::{
    ApproverDecision, ConfirmationBinding, ConfirmationRecord, ConfirmationState, MAX_CALL_ID_BYTES,
    MAX_INPUT_PREVIEW_BYTES, Mismatch, RelayKey,
};
pub use store::{ApprovalVerdict, ConfirmationStore, Consumed, Decided, Inserted, Rejection};
pub use sweeper::{
    DEFAULT_SWEEP_INTERVAL, EXPIRY_CLAIM_LEASE, EXPIRY_WRITE_ATTEMPTS, MAX_UNWRITTEN_EXPIRIES, SWEEP_LIMIT, SweepStats,
};

use crate::audit::{AuditEvent, AuditKind, AuditSink, AuditVerdict, bounded_note, record_within};
use crate::clock::{Clock, SystemClock};
use crate::consumer::Identity;
use crate::guard::{caught, guarded};
use crate::hooks::{CallInfo, ConfirmationDecision, ConfirmationGate, ConsumedEvidence, PolicyError, Scope};
use crate::idempotency::{Fingerprint, StoreError};

/// How long a confirmation stays valid when none is configured: ten minutes, for the decision
/// and for the use of the evidence together.
pub const DEFAULT_CONFIRMATION_TTL: Duration = Duration::from_secs(10 * 60);

/// The default [`ConfirmationConfig::expiry_warning`]: two minutes before a confirmation expires
/// (at most half its time to live).
pub const DEFAULT_EXPIRY_WARNING: Duration = Duration::from_secs(2 * 60);

/// How many confirmation ids an engine remembers having warned about or recorded as expired
/// (the oldest are forgotten first).
const MAX_EXPIRY_MARKS: usize = 4096;

/// What a path segment percent-encodes: every byte but RFC 3986's unreserved `A-Z a-z 0-9 - . _ ~`.
const PATH_SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// How long a caller is asked to wait after the confirmation store failed.
pub const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

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
        let applies = self.scopes.is_empty() || self.scopes.iter().any(|s| s.covers(call.capability, call.type_id));
        if !applies {
            return Box::pin(std::future::ready(Ok(Gate::Open)));
        }
        Box::pin(std::future::ready((self.decide)(&call)))
    }

    fn scopes(&self) -> Vec<Scope> {
        self.scopes.clone()
    }
}

/// The host's answer to a confirmation request in wait mode.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Review {
    /// `approver` approves. Refused (and logged) when the approver is the requester; the call
    /// then keeps waiting.
    Approve {
        /// Who approves.
        approver: Identity,
    },
    /// The requesting user approved in person, through `channel` — a prompt the approver put in
    /// front of them that the agent cannot drive (see [`ConfirmationEngine::approve_in_person`]).
    ApproveInPerson {
        /// The channel the person answered on, e.g. `"host-ui"`.
        channel: String,
    },
    /// `approver` denies; the call ends with `CONFIRMATION_INVALID {reason: denied}`.
    Deny {
        /// Who denies.
        approver: Identity,
    },
    /// No answer now: the decision will come through [`ConfirmationEngine::approve`] or
    /// [`ConfirmationEngine::deny`], or not before the timeout.
    Defer,
}

/// The host's approval callback for wait mode: shows the request to a person and reports their
/// decision.
pub trait Approver: Send + Sync + 'static {
    /// Reviews one pending confirmation. The call waits for the answer, bounded by the wait
    /// timeout; an error or a panic counts as no answer (it is logged on the operator channel).
    fn review<'a>(&'a self, request: &'a ConfirmationRecord) -> BoxFuture<'a, Result<Review, PolicyError>>;
}

/// An [`Approver`] from an async closure over the pending record.
///
/// ```
/// use agent_surface_policy::{FnApprover, Identity, Review};
///
/// let approver = FnApprover::new(|record| async move {
///     // Show record.summary to the person on duty and wait for their answer…
///     let _ = record;
///     Ok(Review::Approve { approver: Identity::new("manager-1") })
/// });
/// # let _ = approver;
/// ```
pub struct FnApprover<F>(F);

impl<F, Fut> FnApprover<F>
where
    F: Fn(ConfirmationRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Review, PolicyError>> + Send + 'static,
{
    /// An approver that runs `review` on a copy of each pending record.
    pub fn new(review: F) -> FnApprover<F> {
        FnApprover(review)
    }
}

impl<F> fmt::Debug for FnApprover<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnApprover").finish_non_exhaustive()
    }
}

impl<F, Fut> Approver for FnApprover<F>
where
    F: Fn(ConfirmationRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Review, PolicyError>> + Send + 'static,
{
    fn review<'a>(&'a self, request: &'a ConfirmationRecord) -> BoxFuture<'a, Result<Review, PolicyError>> {
        Box::pin((self.0)(request.clone()))
    }
}

/// How a gated call obtains its approval.
#[derive(Clone, Default)]
pub enum ConfirmationMode {
    /// The call ends with `CONFIRMATION_REQUIRED`; the agent retries with the `confirmationId`
    /// once the host approved it.
    #[default]
    TwoPhase,
    /// The call waits while `approver` reviews the request, at most `timeout` (and never past
    /// the confirmation's expiry).
    ///
    /// On approval the call runs; on denial it ends with `CONFIRMATION_INVALID {reason:
    /// denied}`. When the time is up without a decision, the pending confirmation is withdrawn —
    /// a late approval no longer counts — and the call ends with `CONFIRMATION_INVALID {reason:
    /// expired}` (retry `with-confirmation`: calling again asks again). The model never sees a
    /// `CONFIRMATION_REQUIRED` in this mode.
    Wait {
        /// The host's approval callback.
        approver: Arc<dyn Approver>,
        /// The longest a call waits for a decision.
        timeout: Duration,
    },
}

impl fmt::Debug for ConfirmationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfirmationMode::TwoPhase => f.write_str("TwoPhase"),
            ConfirmationMode::Wait { timeout, .. } => {
                f.debug_struct("Wait").field("timeout", timeout).finish_non_exhaustive()
            }
        }
    }
}

/// What a confirmation's target is bound to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TargetBinding {
    /// The default: [`Instance`](Self::Instance) when the engine's store outlives this process —
    /// shared by replicas ([`ConfirmationStore::reach`] is [`Reach::Shared`](crate::Reach::Shared))
    /// or kept across restarts ([`Reach::Durable`](crate::Reach::Durable)) —, else
    /// [`Registration`](Self::Registration). Each replica, and each run of one server, mounts an
    /// instance under a registration id of its own, so evidence bound to a registration could
    /// never be used on another replica or after a restart: a person who approved would be asked
    /// again by the same call.
    #[default]
    Auto,
    /// The registration and the instance the call resolved to: a remount of the instance is
    /// another target, and its evidence is a `mismatch`. What `Auto` means for one process.
    Registration,
    /// The instance only. For replicas that share a confirmation store: each replica mounts the
    /// same instance under a registration id of its own, so an approval asked through one must
    /// hold for the same instance on the others (a remount keeps it too). Every replica must then
    /// mean the same thing by an instance id (replicas sharded by tenant with the same ids would
    /// accept each other's evidence), and all of them must use the same binding: during a change
    /// of it, evidence from the other mode is refused as a `target` mismatch.
    Instance,
}

/// The configuration of a [`ConfirmationEngine`]. Build it with struct update syntax over
/// `Default` (two-phase, in memory, system clock).
#[derive(Clone)]
pub struct ConfirmationConfig {
    /// The clock for expiries, waits and host decisions (use the registry's clock).
    pub clock: Arc<dyn Clock>,
    /// Where confirmations live.
    pub store: Arc<dyn ConfirmationStore>,
    /// How long a confirmation stays valid, for the decision and for the use of the evidence.
    pub ttl: Duration,
    /// Two-phase or wait.
    pub mode: ConfirmationMode,
    /// Per-call gates for capabilities that declare none, evaluated in order; the first that
    /// asks for a confirmation decides.
    pub policies: Vec<Arc<dyn ConfirmationPolicy>>,
    /// The time budget of one policy; a policy over budget gates the call.
    pub policy_budget: Duration,
    /// What the evidence's target is bound to (see [`TargetBinding`]).
    pub target_binding: TargetBinding,
    /// The time budget of one store operation, on `clock`. A store that does not answer within it
    /// counts as failed (`StoreError::Unavailable`): the call does not run, and the caller is told
    /// to retry after a delay.
    pub store_budget: Duration,
    /// Where the confirmation events go (requested, decided, consumed, expired); `None`: no
    /// trail. Give the registry's `AuditConfig` the same sink. A write gets `store_budget`; a
    /// failed one is an `ERROR` on the operator channel and changes no decision.
    pub audit: Option<Arc<dyn AuditSink>>,
    /// The quorums of capabilities that need more than one approval, or approvers with a role
    /// (see [`Quorum`]): the first entry whose scope covers the call's capability decides; a call
    /// no entry covers needs one approval from anyone but the requester. The registry checks
    /// that the scopes name defined capabilities and types.
    pub quorums: Vec<(Scope, Quorum)>,
    /// How long before its expiry a pending confirmation is reported on the operator channel
    /// (`WARN` "confirmation expires soon", target `agent_surface::confirmation`), so that an
    /// operator can chase the approvers; `None`: never. The lead is at most half the `ttl`, so
    /// the warning never comes with the request. It is emitted once per confirmation (per engine)
    /// by the first thing that observes the confirmation inside the window — the agent's repeat,
    /// the inbox listing or showing it, a decision — or by
    /// [`ConfirmationEngine::sweep_expiring`], which a host can run on a timer.
    pub expiry_warning: Option<Duration>,
    /// Where people approve confirmations: the approval page of the confirmation `id` is this
    /// base, a `/`, and `id` escaped as a path segment (e.g. `https://shop.example/inbox/c` gives
    /// `https://shop.example/inbox/c/c-3f…`, the detail page of the inbox served at `/inbox`).
    /// It becomes `details.approvalUrl` of `CONFIRMATION_REQUIRED` (and a message telling the
    /// agent that a person must approve it there) and the URL of URL-mode elicitation over MCP.
    /// `None` (the default): no approval page.
    pub approval_base_url: Option<String>,
    /// How often a host's expiry sweep runs ([`ConfirmationEngine::run_sweeps`], which the
    /// library's `serve` helpers run while they serve); default [`DEFAULT_SWEEP_INTERVAL`] (a
    /// minute); `None` (or zero): no periodic sweep.
    pub sweep_interval: Option<Duration>,
    /// Whether a repeat of a call without evidence presents the confirmation relayed for it
    /// (two-phase mode; the default `true`). The engine remembers, in its store, the id of every
    /// `CONFIRMATION_REQUIRED` it answers under the call's [`RelayKey`] (a digest of consumer,
    /// capability, target and input hash), so that the same consumer repeating the same call —
    /// a model, which cannot send ids back — gets the same confirmation while nobody decided,
    /// runs once a person approved, and is told of a denial; with a store that replicas share,
    /// on whichever replica the repeat lands. `false`: every call without evidence asks anew.
    pub present_on_repeat: bool,
}

/// The default [`ConfirmationConfig::store_budget`].
pub const DEFAULT_STORE_BUDGET: Duration = Duration::from_secs(5);

impl Default for ConfirmationConfig {
    fn default() -> ConfirmationConfig {
        ConfirmationConfig {
            clock: Arc::new(SystemClock),
            store: Arc::new(MemoryConfirmationStore::default()),
            ttl: DEFAULT_CONFIRMATION_TTL,
            mode: ConfirmationMode::TwoPhase,
            policies: Vec::new(),
            policy_budget: crate::authority::DEFAULT_POLICY_BUDGET,
            target_binding: TargetBinding::Auto,
            store_budget: DEFAULT_STORE_BUDGET,
            audit: None,
            quorums: Vec::new(),
            expiry_warning: Some(DEFAULT_EXPIRY_WARNING),
            approval_base_url: None,
            sweep_interval: Some(DEFAULT_SWEEP_INTERVAL),
            present_on_repeat: true,
        }
    }
}

impl fmt::Debug for ConfirmationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmationConfig")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .field("mode", &self.mode)
            .field("policies", &self.policies.iter().map(|p| p.name().to_string()).collect::<Vec<_>>())
            .field("policy_budget", &self.policy_budget)
            .field("target_binding", &self.target_binding)
            .field("store_budget", &self.store_budget)
            .field("audit", &self.audit)
            .field("quorums", &self.quorums)
            .field("expiry_warning", &self.expiry_warning)
            .field("approval_base_url", &self.approval_base_url)
            .field("present_on_repeat", &self.present_on_repeat)
            .finish_non_exhaustive()
    }
}

/// Why the host's approval or denial was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No confirmation with this id (never issued, evicted, or long gone).
    #[error("no confirmation with this id")]
    Unknown,
    /// The confirmation expired before the decision.
    #[error("the confirmation expired")]
    Expired,
    /// The approver is the requester.
    #[error("the requester cannot approve its own request")]
    SelfApproval,
    /// The approver's identity has an empty subject.
    #[error("an approver needs a non-empty subject")]
    NoApprover,
    /// The confirmation was already decided (or withdrawn); a decision is final.
    #[error("the confirmation is already {}", .0.as_str())]
    AlreadyDecided(ConfirmationState),
    /// This approver already decided the confirmation (it waits for other approvers); one
    /// decision per approver.
    #[error("this approver already decided the confirmation")]
    DecidedBefore,
    /// The confirmation's [`Quorum`] never counts this approver: they hold none of its roles,
    /// are not one of its named approvers, or hold the role of none of its slots.
    #[error("the quorum does not count this approver (not a named approver, or none of the roles it asks for)")]
    NotEligible,
    /// Every slot of the confirmation's [`Quorum`] this approver could fill is taken by other
    /// approvers (e.g. the `manager` slot of "one manager and one security officer" is filled, and
    /// this approver is a manager only); the confirmation waits for an approver for the open slots.
    #[error("the quorum's slots this approver could fill are taken; it waits for approvers of the other roles")]
    SlotsTaken,
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

/// The confirmation engine: the [`ConfirmationGate`] of phase 7 and the host's approval API.
///
/// # What is gated
///
/// A call is gated when its capability declares a gate (the registry says so in
/// [`CallInfo::declared_gate`]) or when one of the engine's [`ConfirmationPolicy`]s says so for
/// this call (for example "refunds over 500"). A policy that fails, panics or overruns its budget
/// gates the call (fail closed). An ungated call proceeds, whatever evidence it carries.
///
/// # Evidence
///
/// A gated call without evidence creates a pending [`ConfirmationRecord`] bound to the consumer,
/// the capability, the resolved target and SHA-256 of the canonical validated input
/// ([`ConfirmationBinding`]). Then, by [`ConfirmationMode`]:
///
/// - **two-phase**: the call ends with `CONFIRMATION_REQUIRED {confirmationId, summary,
///   expiresAt, effect, origin}`; the host approves or denies through
///   [`ConfirmationEngine::approve`] / [`ConfirmationEngine::deny`], and the agent retries with
///   the `confirmationId`;
/// - **wait**: the host's [`Approver`] reviews the request while the call waits, bounded by a
///   timeout; there is no `CONFIRMATION_REQUIRED` round trip.
///
/// A retry with evidence consumes it atomically ([`ConfirmationStore::consume`]): at most one
/// call runs per approval, also under concurrent retries. The requester can never approve its own
/// request. Rejected evidence is `CONFIRMATION_INVALID {reason}`: `expired` (including unknown or
/// withdrawn ids; retry `with-confirmation`), `denied`, `consumed` or `mismatch` (retry `no`).
/// Nothing in this crate retries a call.
///
/// Share it behind an `Arc`: one clone goes into the registry's configuration, the host keeps
/// another to approve and deny.
///
/// ```
/// use std::sync::Arc;
/// use agent_surface_core::{Effect, SafeText};
/// use agent_surface_policy::{
///     ApprovalError, CallInfo, Clock, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine, ConfirmationGate,
///     Consumer, Identity, ManualClock,
/// };
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let clock = Arc::new(ManualClock::default());
/// let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock: clock.clone(), ..Default::default() }));
///
/// let requester = Consumer::authenticated("session-1", Identity::new("agent-user"));
/// let input = json!({"order_id": "A-1"});
/// let summary = SafeText::from("Cancel order A-1.");
/// let call = CallInfo::new(&requester, "orders.cancel", "orders", Effect::Destructive, false)
///     .with_instance("main")
///     .with_registration("r-1")
///     .with_input(&input)
///     .with_declared_gate(Some(&summary));
///
/// let ConfirmationDecision::Required { confirmation_id, .. } = engine.check(call, None, clock.now()).await else {
///     panic!()
/// };
/// assert_eq!(engine.approve(&confirmation_id, &Identity::new("agent-user")).await, Err(ApprovalError::SelfApproval));
/// engine.approve(&confirmation_id, &Identity::new("manager-1")).await.unwrap();
///
/// let retry = engine.check(call, Some(&confirmation_id), clock.now()).await;
/// assert_eq!(retry, ConfirmationDecision::Proceed);
/// assert!(matches!(engine.check(call, Some(&confirmation_id), clock.now()).await, ConfirmationDecision::Invalid(_)));
/// # });
/// ```
pub struct ConfirmationEngine {
    config: ConfirmationConfig,
    /// Wait-mode calls in progress, woken when the host decides their confirmation.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// The confirmations already warned about, and those already recorded as expired.
    marks: Mutex<ExpiryMarks>,
    /// `confirmation.expired` events the sweep claimed but could not write yet.
    unwritten: Mutex<sweeper::Backlog>,
}

/// Two bounded sets of confirmation ids: warned about, recorded as expired.
#[derive(Default)]
struct ExpiryMarks {
    warned: MarkSet,
    expired: MarkSet,
}

/// A set of ids that forgets its oldest beyond [`MAX_EXPIRY_MARKS`].
#[derive(Default)]
struct MarkSet {
    ids: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl MarkSet {
    /// Marks `id`; false when it was marked already.
    fn mark(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() >= MAX_EXPIRY_MARKS
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.to_string());
        self.order.push_back(id.to_string());
        true
    }
}

impl ConfirmationEngine {
    /// An engine with this configuration. [`TargetBinding::Auto`] is settled here, from the
    /// store's [`reach`](ConfirmationStore::reach).
    pub fn new(mut config: ConfirmationConfig) -> ConfirmationEngine {
        if config.target_binding == TargetBinding::Auto {
            // A store whose records outlive this process holds evidence for calls whose
            // registration ids this process never saw (another replica's, or an earlier run's).
            config.target_binding = if config.store.reach().outlives_the_process() {
                TargetBinding::Instance
            } else {
                TargetBinding::Registration
            };
        }
        ConfirmationEngine {
            config,
            waiters: Mutex::new(HashMap::new()),
            marks: Mutex::new(ExpiryMarks::default()),
            unwritten: Mutex::new(sweeper::Backlog::default()),
        }
    }

    fn marks(&self) -> MutexGuard<'_, ExpiryMarks> {
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports `record` on the operator channel once when it is pending and within the expiry
    /// warning's lead time at `now` (see [`ConfirmationConfig::expiry_warning`]); true when this
    /// call reported it.
    fn observe(&self, record: &ConfirmationRecord, now: Timestamp) -> bool {
        let Some(lead) = self.config.expiry_warning else { return false };
        let lifetime = record.expires_at.saturating_duration_since(record.created_at);
        let lead = lead.min(lifetime / 2);
        let remaining = record.expires_at.saturating_duration_since(now);
        if record.state != ConfirmationState::Pending || remaining.is_zero() || remaining > lead {
            return false;
        }
        if !self.marks().warned.mark(&record.id) {
            return false;
        }
        tracing::warn!(
            target: "agent_surface::confirmation",
            confirmation_id = %record.id,
            capability = %record.binding.capability,
            consumer = %record.binding.consumer_key,
            expires_at = %record.expires_at,
            remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            approvals = record.approvals(),
            required = record.quorum.required(),
            "confirmation expires soon"
        );
        true
    }

    /// Whether `id`'s expiry is to be recorded now: true the first time it is seen expired —
    /// by this engine (its own memory, no store call after the first time) and by every engine
    /// sharing the store ([`ConfirmationStore::claim_expiry`]) — so that one confirmation is one
    /// `confirmation.expired` event however often, and through however many replicas, its
    /// evidence or a decision meets the deadline. A store that cannot answer leaves it recorded:
    /// an audit trail had rather hold the event twice than miss it.
    async fn first_expiry(&self, id: &str, now: Timestamp) -> bool {
        if !self.marks().expired.mark(id) {
            return false;
        }
        let until = now.saturating_add(sweeper::EXPIRY_CLAIM_LEASE);
        let first = match self.bounded(self.config.store.claim_expiry(id, until, now)).await {
            Ok(first) => first,
            Err(e) => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    error = %crate::redacted(&e),
                    "cannot claim the record of an expiry; recording it"
                );
                true
            }
        };
        if first {
            tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, "confirmation expired");
            if self.config.audit.is_none() {
                // No event to write: recorded as soon as it is logged.
                self.expiry_recorded(id).await;
            }
        }
        first
    }

    /// Tells the store that `id`'s expiry event is written ([`ConfirmationStore::expiry_recorded`]);
    /// a failure is logged, and leaves the claim to lapse (the event may then be written twice).
    async fn expiry_recorded(&self, id: &str) {
        let now = self.config.clock.now();
        if let Err(e) = self.bounded(self.config.store.expiry_recorded(id, now)).await {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "cannot mark an expiry as recorded; another engine may record it again"
            );
        }
    }

    /// Looks through up to `limit` pending confirmations and warns, once each, about those within
    /// the expiry warning's lead time (see [`ConfirmationConfig::expiry_warning`]); returns how
    /// many it warned about now. A host that wants the warnings without waiting for someone to
    /// look runs it on a timer (every minute, say).
    ///
    /// It then records the expiry of up to `limit` confirmations whose deadline passed while
    /// nobody touched them ([`sweep_expired`](Self::sweep_expired)), so the host's one timer
    /// serves both. A store that fails one part does not skip the other: the error (the
    /// warnings' first) is returned after both ran.
    pub async fn sweep_expiring(&self, limit: usize) -> Result<usize, StoreError> {
        let warned = self.warn_expiring(limit).await;
        let expired = self.sweep_expired(limit).await;
        let warned = warned?;
        expired?;
        Ok(warned)
    }

    /// The warnings part of [`sweep_expiring`](Self::sweep_expiring).
    async fn warn_expiring(&self, limit: usize) -> Result<usize, StoreError> {
        if self.config.expiry_warning.is_none() {
            return Ok(0);
        }
        let now = self.config.clock.now();
        let pending = self.bounded(self.config.store.list_pending(now, limit)).await?;
        Ok(pending.iter().filter(|r| self.observe(r, now)).count())
    }

    /// Records the `confirmation.expired` audit event of up to `limit` confirmations whose
    /// deadline passed while they were pending, approved and unused, or withdrawn, and whose
    /// expiry nobody recorded yet ([`ConfirmationStore::list_expired`]) — those nobody presents,
    /// decides or waits for again would otherwise never get one. Once per confirmation across
    /// the engines sharing the store, as for an expiry met by a call
    /// ([`ConfirmationStore::claim_expiry`]); returns how many events this sweep wrote. Run by
    /// [`sweep_expiring`](Self::sweep_expiring); a store keeps a record for its retention past
    /// the deadline, so sweep more often than that.
    ///
    /// An event the audit sink does not take after its expiry was claimed (or whose write was
    /// cut short by dropping the sweep) is kept by this engine and written first by its next
    /// sweeps, up to [`EXPIRY_WRITE_ATTEMPTS`] tries and [`MAX_UNWRITTEN_EXPIRIES`] events;
    /// while the sink refuses, the sweep claims no further expiries (they stay for a later
    /// sweep, or another replica). Each event kept, and each given up, is logged at `ERROR`
    /// (target `agent_surface::audit`, field `confirmation_id`) so that an operator can
    /// reconcile the trail: the engine holds the kept events in memory only.
    pub async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError> {
        if limit == 0 {
            return Ok(0);
        }
        let (mut recorded, sink_ok) = self.write_backlog().await;
        if !sink_ok {
            return Ok(recorded);
        }
        let now = self.config.clock.now();
        let expired = self.bounded(self.config.store.list_expired(now, limit)).await?;
        for record in &expired {
            if self.config.audit.is_none() {
                if self.first_expiry(&record.id, now).await {
                    recorded += 1;
                }
                continue;
            }
            let mut event = record_event(now, AuditKind::ConfirmationExpired, record);
            event.confirmation_id = Some(record.id.clone());
            // Kept for a later sweep if this one is dropped from here on (the claim may land).
            let pending = sweeper::PendingExpiry::new(self, event, 0);
            if !self.first_expiry(&record.id, now).await {
                pending.written();
                continue;
            }
            if self.write_audit(pending.event()).await {
                pending.written();
                recorded += 1;
            } else {
                // `pending` is kept as it drops; the sink refused, so leave the rest unclaimed.
                break;
            }
        }
        Ok(recorded)
    }

    /// Gives back `evidence`, which this engine consumed for `call` (see
    /// [`ConfirmationGate::reinstate`]): atomically in the store, only for the call's binding and
    /// with the consumption token of that consumption, before the deadline
    /// ([`ConfirmationStore::reinstate`]). Logged and written to the audit trail as
    /// `confirmation.reinstated`; `true` when the approval is usable again. A store that fails
    /// or refuses leaves the evidence consumed (the retry then needs a fresh approval).
    pub async fn reinstate(&self, call: CallInfo<'_>, evidence: &ConsumedEvidence, now: Timestamp) -> bool {
        let id = evidence.confirmation_id.as_str();
        let binding = self.binding_of(&call);
        match self.bounded(self.config.store.reinstate(id, &binding, &evidence.token, now)).await {
            Ok(true) => {
                tracing::info!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    "confirmation reinstated: the call that consumed it did not run"
                );
                self.audit(|| call_event(now, AuditKind::ConfirmationReinstated, &call, &binding, id)).await;
                // The same call repeated without evidence (a model; a call in wait mode, whose
                // caller never saw the id) presents it again, on any replica sharing the store.
                if self.relays() {
                    self.remember_relayed(&RelayKey::of(&binding), id, now).await;
                }
                true
            }
            Ok(false) => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    "confirmation not reinstated (expired, or not this call's consumption)"
                );
                false
            }
            Err(e) => {
                tracing::error!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    error = %crate::redacted(&e),
                    "confirmation store failed; the confirmation stays consumed"
                );
                false
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ConfirmationConfig {
        &self.config
    }

    /// A store operation within [`ConfirmationConfig::store_budget`]; past it, the store counts
    /// as failed. An answer ready at once arms no timer.
    async fn bounded<T>(&self, op: BoxFuture<'_, Result<T, StoreError>>) -> Result<T, StoreError> {
        let budget = self.config.store_budget;
        crate::guard::within(self.config.clock.as_ref(), budget, op).await.unwrap_or_else(|| {
            Err(StoreError::Unavailable(format!(
                "the confirmation store did not answer within {} ms",
                budget.as_millis()
            )))
        })
    }

    /// The confirmation with `id`, e.g. to show its summary to the approver.
    pub async fn get(&self, id: &str) -> Result<Option<ConfirmationRecord>, StoreError> {
        let now = self.config.clock.now();
        let record = self.bounded(self.config.store.get(id, now)).await?;
        if let Some(r) = &record {
            self.observe(r, now);
        }
        Ok(record)
    }

    /// Up to `limit` pending, unexpired confirmations `approver` may decide — every one they did
    /// not request themselves ([`ConfirmationRecord::is_requester`]), have not decided yet, and
    /// whose [`Quorum`] counts their approval —, those that expire first first. The host decides
    /// beforehand whether `approver` may approve at all.
    pub async fn pending_for(&self, approver: &Identity, limit: usize) -> Result<Vec<ConfirmationRecord>, StoreError> {
        // Records the approver may not decide are skipped, so ask for more than the limit.
        let asked = limit.saturating_mul(2).max(limit.saturating_add(16));
        let now = self.config.clock.now();
        let listed = self.bounded(self.config.store.list_pending(now, asked)).await?;
        for record in &listed {
            self.observe(record, now);
        }
        Ok(listed.into_iter().filter(|r| may_decide(r, approver)).take(limit).collect())
    }

    /// The approval page of the confirmation `id`, when
    /// [`ConfirmationConfig::approval_base_url`] is set: the base without its trailing `/`s, a
    /// `/`, and `id` with every byte but `A-Z a-z 0-9 - . _ ~` percent-encoded.
    ///
    /// ```
    /// use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
    ///
    /// let engine = ConfirmationEngine::new(ConfirmationConfig {
    ///     approval_base_url: Some("https://shop.example/inbox/c/".into()),
    ///     ..Default::default()
    /// });
    /// assert_eq!(engine.approval_url("c-1f").as_deref(), Some("https://shop.example/inbox/c/c-1f"));
    /// assert_eq!(engine.approval_url("a/b?c").as_deref(), Some("https://shop.example/inbox/c/a%2Fb%3Fc"));
    /// assert_eq!(engine.approval_url("é 1%").as_deref(), Some("https://shop.example/inbox/c/%C3%A9%201%25"));
    /// assert_eq!(engine.approval_url("../x").as_deref(), Some("https://shop.example/inbox/c/..%2Fx"));
    /// ```
    pub fn approval_url(&self, id: &str) -> Option<String> {
        let base = self.config.approval_base_url.as_deref()?.trim_end_matches('/');
        Some(format!("{base}/{}", percent_encoding::utf8_percent_encode(id, PATH_SEGMENT)))
    }

    /// The quorum a call of `capability` (of type `type_id`) needs.
    pub fn quorum_for(&self, capability: &str, type_id: &str) -> Quorum {
        self.config
            .quorums
            .iter()
            .find(|(scope, _)| scope.covers(capability, type_id))
            .map(|(_, q)| q.clone())
            .unwrap_or_default()
    }

    /// Approves the pending confirmation `id` on behalf of `approver`.
    ///
    /// The host authenticates the approver and checks that they may approve; the engine refuses
    /// an approval by the requester ([`ApprovalError::SelfApproval`]), an expired or unknown
    /// confirmation, one that was already decided, a second decision by the same approver
    /// ([`ApprovalError::DecidedBefore`]), an approver the confirmation's [`Quorum`] does not
    /// count — none of its roles, not one of its named approvers (compared exactly), the role of
    /// none of its slots — ([`ApprovalError::NotEligible`]), and one whose slots are all taken
    /// ([`ApprovalError::SlotsTaken`]). With a quorum of more than one, the confirmation stays
    /// pending until every slot is filled by a distinct approver.
    pub async fn approve(&self, id: &str, approver: &Identity) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Approve, approver, None).await
    }

    /// As [`approve`](Self::approve), with the approver's note for the audit trail (trimmed, at
    /// most [`MAX_NOTE_CHARS`](crate::MAX_NOTE_CHARS) characters).
    pub async fn approve_with_note(
        &self,
        id: &str,
        approver: &Identity,
        note: Option<&str>,
    ) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Approve, approver, note).await
    }

    /// Approves the pending confirmation `id` in person: the requesting user answered a prompt
    /// that the host put in front of them through `channel` (e.g. `"mcp-elicitation"`), which the
    /// agent cannot drive. Unlike [`approve`](Self::approve), the approver may be the requester —
    /// that is the point — so only host code that really asked the person may call this; never
    /// expose it to the agent. Recorded as approved by `in-person:{channel}`: one approval
    /// towards a [`Quorum`] — at most one per confirmation, whatever the channels (it is the
    /// requester each time; a second is [`ApprovalError::DecidedBefore`]) — and none when the
    /// quorum asks every approver for a role or names its approvers (the channel has no role and
    /// is no named approver, unless the quorum names `in-person:{channel}` itself); it may fill
    /// a slot that asks for no role.
    pub async fn approve_in_person(&self, id: &str, channel: &str) -> Result<(), ApprovalError> {
        let approver = Identity::new(format!("in-person:{}", channel.trim()));
        if channel.trim().is_empty() {
            return Err(ApprovalError::NoApprover);
        }
        self.decide(id, ApprovalVerdict::ApproveInPerson, &approver, None).await
    }

    /// Denies the pending confirmation `id` on behalf of `approver` (the requester may deny its
    /// own request). Final: the evidence is then rejected with `CONFIRMATION_INVALID {reason:
    /// denied}`. An approved confirmation that no call used yet is revoked the same way (see
    /// [`ConfirmationStore::decide`]), so a person who declines is never overruled by an approval
    /// given elsewhere a moment before.
    pub async fn deny(&self, id: &str, approver: &Identity) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Deny, approver, None).await
    }

    /// As [`deny`](Self::deny), with the approver's note for the audit trail.
    pub async fn deny_with_note(&self, id: &str, approver: &Identity, note: Option<&str>) -> Result<(), ApprovalError> {
        self.decide(id, ApprovalVerdict::Deny, approver, note).await
    }

    /// Writes `event` to the audit sink, if there is one; a failure is logged, never returned.
    async fn audit(&self, event: impl FnOnce() -> AuditEvent) {
        if self.config.audit.is_none() {
            return;
        }
        self.write_audit(&event()).await;
    }

    /// Writes `event` to the audit sink within the store budget; true when it was written (or
    /// there is no sink), a failure logged at `ERROR`.
    async fn write_audit(&self, event: &AuditEvent) -> bool {
        let Some(sink) = &self.config.audit else { return true };
        match record_within(sink.as_ref(), self.config.clock.as_ref(), self.config.store_budget, event).await {
            Ok(()) => {
                // An expiry's event is written: its claim is settled for good.
                if matches!(event.kind, AuditKind::ConfirmationExpired)
                    && let Some(id) = &event.confirmation_id
                {
                    self.expiry_recorded(id).await;
                }
                true
            }
            Err(e) => {
                tracing::error!(
                    target: "agent_surface::audit",
                    event = event.name(),
                    confirmation_id = event.confirmation_id.as_deref().unwrap_or(""),
                    error = %crate::redacted(&e),
                    "audit event not recorded"
                );
                false
            }
        }
    }

    /// A confirmation event about the record `id`, described from the store (an event with only
    /// the id when the store no longer holds it or fails).
    async fn audit_record(&self, id: &str, now: Timestamp, kind: AuditKind) {
        if self.config.audit.is_none() {
            return;
        }
        let record = self.bounded(self.config.store.get(id, now)).await.ok().flatten();
        self.audit(|| {
            let mut event = match &record {
                Some(r) => record_event(now, kind, r),
                None => AuditEvent::new(now, kind, "", ""),
            };
            event.confirmation_id = Some(id.to_string());
            event
        })
        .await;
    }

    /// Records what consuming the evidence `id` did: `consumed`, or `expired` when the
    /// confirmation was past its deadline (or withdrawn by a wait that timed out).
    async fn audit_consume(
        &self,
        call: &CallInfo<'_>,
        binding: &ConfirmationBinding,
        id: &str,
        now: Timestamp,
        outcome: &Result<Result<Consumed, Rejection>, StoreError>,
    ) {
        let kind = match outcome {
            Ok(Ok(consumed)) => AuditKind::ConfirmationConsumed { approved_by: consumed.approved_by.clone() },
            Ok(Err(Rejection::Expired)) if self.first_expiry(id, now).await => AuditKind::ConfirmationExpired,
            Ok(Err(Rejection::Pending(record))) => {
                self.observe(record, now);
                return;
            }
            _ => return,
        };
        self.audit(|| call_event(now, kind, call, binding, id)).await;
    }

    async fn decide(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &Identity,
        note: Option<&str>,
    ) -> Result<(), ApprovalError> {
        if approver.subject.trim().is_empty() {
            return Err(ApprovalError::NoApprover);
        }
        let now = self.config.clock.now();
        let slots = match verdict {
            ApprovalVerdict::Deny => SlotSet::ANY,
            _ => self.slots_of(id, approver, now).await?,
        };
        let decided = self
            .bounded(self.config.store.decide_in_slots(id, verdict, &approver.subject, slots, now))
            .await
            .map_err(ApprovalError::Store)?;
        match decided {
            Decided::Done => {
                tracing::info!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    verdict = ?verdict,
                    approver = %approver.subject,
                    "confirmation decided"
                );
                let verdict = match verdict {
                    ApprovalVerdict::Approve => AuditVerdict::Approve,
                    ApprovalVerdict::ApproveInPerson => AuditVerdict::ApproveInPerson,
                    ApprovalVerdict::Deny => AuditVerdict::Deny,
                };
                let approver = approver.subject.clone();
                let kind = AuditKind::ConfirmationDecided { verdict, approver, note: bounded_note(note) };
                self.audit_record(id, now, kind).await;
                self.wake(id);
                Ok(())
            }
            Decided::Unknown => Err(ApprovalError::Unknown),
            Decided::Expired => {
                if self.first_expiry(id, now).await {
                    self.audit_record(id, now, AuditKind::ConfirmationExpired).await;
                }
                Err(ApprovalError::Expired)
            }
            Decided::SelfApproval => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    approver = %approver.subject,
                    "self-approval refused"
                );
                Err(ApprovalError::SelfApproval)
            }
            Decided::NotPending(state) => Err(ApprovalError::AlreadyDecided(state)),
            Decided::DecidedBefore => Err(ApprovalError::DecidedBefore),
            Decided::SlotsTaken => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    approver = %approver.subject,
                    "approval refused: the quorum slots this approver could fill are taken"
                );
                Err(ApprovalError::SlotsTaken)
            }
        }
    }

    /// The slots of `id`'s quorum an approval by `approver` may fill: [`SlotSet::ANY`] for a
    /// quorum without role slots (the store counts) or a record the store does not hold (it
    /// answers that); refused as [`ApprovalError::NotEligible`] when the quorum never counts
    /// them. A record's quorum never changes and an approver's roles are theirs, so reading the
    /// record first races with nothing: which of these slots are still open is the store's to
    /// decide, atomically ([`ConfirmationStore::decide_in_slots`]).
    async fn slots_of(&self, id: &str, approver: &Identity, now: Timestamp) -> Result<SlotSet, ApprovalError> {
        let record = self.bounded(self.config.store.get(id, now)).await.map_err(ApprovalError::Store)?;
        let Some(record) = record else { return Ok(SlotSet::ANY) };
        self.observe(&record, now);
        let slots = record.quorum.slots_for(approver);
        if slots.is_empty() {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                approver = %approver.subject,
                "approval refused: the quorum does not count this approver"
            );
            return Err(ApprovalError::NotEligible);
        }
        Ok(if record.quorum.slots.is_empty() { SlotSet::ANY } else { slots })
    }

    fn waiters(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, id: &str) {
        if let Some(notify) = self.waiters().get(id) {
            // Stores a permit when the waiter is not polling right now, so no wake-up is lost.
            notify.notify_one();
        }
    }

    /// `None` when the call is not gated; otherwise its summary, when there is one (a declared
    /// gate's summary is rendered only for a call without evidence).
    async fn gate(&self, call: &CallInfo<'_>) -> Option<Option<SafeText>> {
        if let Some(declared) = call.declared_gate {
            return Some(declared.summary.cloned());
        }
        for policy in &self.config.policies {
            match guarded(self.config.clock.as_ref(), self.config.policy_budget, || policy.decide(*call)).await {
                Ok(Gate::Open) => continue,
                Ok(Gate::Confirm { summary }) => return Some(Some(summary)),
                Err(failure) => {
                    tracing::warn!(
                        target: "agent_surface::confirmation",
                        policy = policy.name(),
                        capability = call.capability,
                        cause = %crate::redacted(&failure),
                        "confirmation policy failed; gating the call"
                    );
                    return Some(Some(generic_summary(call)));
                }
            }
        }
        None
    }

    /// What evidence for `call` is bound to.
    fn binding_of(&self, call: &CallInfo<'_>) -> ConfirmationBinding {
        static NO_INPUT: Value = Value::Null;
        ConfirmationBinding {
            consumer_key: call.consumer.principal().to_string(),
            capability: call.capability.to_string(),
            registration_id: match self.config.target_binding {
                TargetBinding::Registration => call.registration_id.unwrap_or_default().to_string(),
                _ => String::new(),
            },
            instance_id: call.instance_id.unwrap_or_default().to_string(),
            input_hash: Fingerprint::of(call.input.unwrap_or(&NO_INPUT)),
        }
    }

    async fn check_now(&self, call: CallInfo<'_>, evidence: Option<&str>, now: Timestamp) -> ConfirmationDecision {
        let Some(summary) = self.gate(&call).await else { return ConfirmationDecision::Proceed };
        let binding = self.binding_of(&call);
        // A call without evidence presents the confirmation relayed to its caller for this same
        // call, if the store remembers one (asked only here: for a call this engine gates).
        let relay = (evidence.is_none() && self.relays()).then(|| RelayKey::of(&binding));
        let relayed = match &relay {
            Some(key) => match self.bounded(self.config.store.relayed(key, now)).await {
                Ok(id) => id,
                Err(e) => return unavailable(&e),
            },
            None => None,
        };
        match evidence.or(relayed.as_deref()) {
            Some(id) => {
                let consumed = self.bounded(self.config.store.consume(id, &binding, now)).await;
                tell_consumed(&call, id, &consumed);
                self.audit_consume(&call, &binding, id, now, &consumed).await;
                match consumed {
                    Ok(Ok(consumed)) => {
                        tracing::info!(
                            target: "agent_surface::confirmation",
                            confirmation_id = id,
                            approved_by = %consumed.approved_by,
                            "confirmation consumed"
                        );
                        if let Some(key) = &relay {
                            self.forget_relayed(key, id, now).await;
                        }
                        ConfirmationDecision::Proceed
                    }
                    // The relayed confirmation expired, is gone or was used (by a repeat on
                    // another replica, say): the caller never sent it, so it is asked afresh
                    // rather than told about an id it does not know.
                    Ok(Err(Rejection::Unknown | Rejection::Expired | Rejection::Consumed)) if relayed.is_some() => {
                        let summary = summary.unwrap_or_else(|| generic_summary(&call));
                        self.request(call, binding, summary, now, relay).await
                    }
                    Ok(Err(rejection)) => {
                        // A final answer settles what was relayed for the call (a denial is told
                        // once; the next repeat asks anew), also for an id the caller presented.
                        let settles = match &rejection {
                            Rejection::Pending(_) => false,
                            Rejection::Denied => relayed.is_some() || self.relays(),
                            _ => relayed.is_some(),
                        };
                        if settles {
                            let key = relay.unwrap_or_else(|| RelayKey::of(&binding));
                            self.forget_relayed(&key, id, now).await;
                        }
                        rejected(id, rejection)
                    }
                    Err(e) => unavailable(&e),
                }
            }
            None => {
                let summary = summary.unwrap_or_else(|| generic_summary(&call));
                self.request(call, binding, summary, now, relay).await
            }
        }
    }

    /// Whether this engine presents relayed confirmations on repeat
    /// ([`ConfirmationConfig::present_on_repeat`]). It relays the confirmations it answers with
    /// `CONFIRMATION_REQUIRED` (two-phase mode) and those it reinstates (either mode).
    fn relays(&self) -> bool {
        self.config.present_on_repeat
    }

    /// Forgets the confirmation `id` relayed for the call `key`; a failure is logged (the next
    /// repeat then meets the settled id and is asked anew, or told of the denial again).
    async fn forget_relayed(&self, key: &RelayKey, id: &str, now: Timestamp) {
        if let Err(e) = self.bounded(self.config.store.forget_relayed(key, id, now)).await {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "cannot forget a relayed confirmation"
            );
        }
    }

    /// Remembers that the confirmation `id` was relayed for the call `key`; a failure is logged
    /// (a repeat of the call then asks for a fresh confirmation).
    async fn remember_relayed(&self, key: &RelayKey, id: &str, now: Timestamp) {
        if let Err(e) = self.bounded(self.config.store.remember_relayed(key, id, now)).await {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "cannot remember a relayed confirmation; a repeat of the call will ask anew"
            );
        }
    }

    /// Records a pending confirmation for a call without evidence, then asks for the approval as
    /// the mode says.
    ///
    /// In two-phase mode with `relay` (the call's key, when the engine presents on repeat) the
    /// record is added only if no confirmation of the same call is open
    /// ([`ConfirmationStore::insert_relayed`], one atomic step): identical calls racing —
    /// retries sent before the first answer came back, on any replica — are all answered with
    /// the one confirmation the first of them opened (its id, summary and deadline), and only
    /// that one is logged and written to the trail as requested.
    async fn request(
        &self,
        call: CallInfo<'_>,
        binding: ConfirmationBinding,
        summary: SafeText,
        now: Timestamp,
        relay: Option<RelayKey>,
    ) -> ConfirmationDecision {
        // The preview the caller computes on demand, when it did not give one.
        let preview = match call.input_preview {
            Some(_) => None,
            None => call.details.and_then(|d| d.input_preview()),
        };
        let record = ConfirmationRecord::pending(
            // `c-` and 128 bits nobody can guess; guessing would not help anyway: the evidence is
            // bound to the requesting consumer and call.
            agent_surface_core::id::random_id("c-"),
            binding,
            call.consumer.identity().map(|i| i.subject.clone()),
            summary.as_str().to_string(),
            call.effect,
            Origin::Client,
            now,
            now.saturating_add(self.config.ttl),
        )
        .with_input_preview(preview.as_deref().or(call.input_preview))
        .with_quorum(self.quorum_for(call.capability, call.type_id))
        .with_call_ids(call.invocation_id, call.correlation_id)
        .with_consumer(call.consumer.key());
        let inserted = match (&relay, &self.config.mode) {
            (Some(key), ConfirmationMode::TwoPhase) => {
                self.bounded(self.config.store.insert_relayed(record.clone(), key, now)).await
            }
            _ => self.bounded(self.config.store.insert(record.clone(), now)).await.map(|()| Inserted::New),
        };
        match inserted {
            Ok(Inserted::New) => {}
            Ok(Inserted::Held(open)) => {
                tracing::debug!(
                    target: "agent_surface::confirmation",
                    confirmation_id = %open.id,
                    capability = call.capability,
                    "the same call is waiting for this confirmation already; presenting it"
                );
                self.observe(&open, now);
                return ConfirmationDecision::Required {
                    confirmation_id: open.id,
                    summary: SafeText::trusted(open.summary),
                    expires_at: open.expires_at,
                    origin: open.origin,
                };
            }
            Err(e) => return unavailable(&e),
        }
        tracing::info!(
            target: "agent_surface::confirmation",
            confirmation_id = %record.id,
            capability = call.capability,
            consumer = call.consumer.key(),
            input_hash = %record.binding.input_hash,
            expires_at = %record.expires_at,
            "confirmation requested"
        );
        let kind = AuditKind::ConfirmationRequested { effect: record.effect, expires_at: record.expires_at };
        self.audit(|| call_event(now, kind, &call, &record.binding, &record.id)).await;
        match &self.config.mode {
            ConfirmationMode::TwoPhase => ConfirmationDecision::Required {
                confirmation_id: record.id,
                summary,
                expires_at: record.expires_at,
                origin: record.origin,
            },
            ConfirmationMode::Wait { approver, timeout } => {
                let timeout = (*timeout).min(record.expires_at.saturating_duration_since(now));
                self.wait(&call, &record, approver.as_ref(), timeout).await
            }
        }
    }

    /// Wait mode: the approver reviews while the call waits; a decision through the host API
    /// counts too.
    async fn wait(
        &self,
        call: &CallInfo<'_>,
        record: &ConfirmationRecord,
        approver: &dyn Approver,
        timeout: Duration,
    ) -> ConfirmationDecision {
        let id = record.id.as_str();
        let notify = Arc::new(Notify::new());
        self.waiters().insert(id.to_string(), Arc::clone(&notify));
        let mut waiting = Waiting { engine: self, id, settled: false };
        let review = caught(|| approver.review(record)).fuse();
        let deadline = self.config.clock.sleep(timeout).fuse();
        futures_util::pin_mut!(review, deadline);
        loop {
            tokio::select! {
                biased;
                answer = &mut review => self.apply_review(id, answer).await,
                () = notify.notified() => {}
                () = &mut deadline => {
                    let now = self.config.clock.now();
                    if let Err(e) = self.bounded(self.config.store.withdraw(id, now)).await {
                        return unavailable(&e);
                    }
                    waiting.settled = true;
                    tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, "confirmation wait timed out");
                    // A decision that landed just before the withdrawal still counts.
                    let consumed = self.bounded(self.config.store.consume(id, &record.binding, now)).await;
                    tell_consumed(call, id, &consumed);
                    self.audit_consume(call, &record.binding, id, now, &consumed).await;
                    return match consumed {
                        Ok(Ok(_)) => ConfirmationDecision::Proceed,
                        Ok(Err(rejection)) => rejected(id, rejection),
                        Err(e) => unavailable(&e),
                    };
                }
            }
            let now = self.config.clock.now();
            let consumed = self.bounded(self.config.store.consume(id, &record.binding, now)).await;
            tell_consumed(call, id, &consumed);
            self.audit_consume(call, &record.binding, id, now, &consumed).await;
            match consumed {
                Ok(Ok(_)) => {
                    waiting.settled = true;
                    tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, "confirmation consumed");
                    return ConfirmationDecision::Proceed;
                }
                Ok(Err(Rejection::Pending(_))) => continue,
                Ok(Err(rejection)) => {
                    waiting.settled = true;
                    return rejected(id, rejection);
                }
                Err(e) => return unavailable(&e),
            }
        }
    }

    async fn apply_review(&self, id: &str, answer: Result<Review, crate::guard::Failure>) {
        let outcome = match answer {
            Ok(Review::Approve { approver }) => self.approve(id, &approver).await,
            Ok(Review::ApproveInPerson { channel }) => self.approve_in_person(id, &channel).await,
            Ok(Review::Deny { approver }) => self.deny(id, &approver).await,
            Ok(Review::Defer) => Ok(()),
            Err(failure) => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    cause = %crate::redacted(&failure),
                    "approver failed; waiting for a decision until the timeout"
                );
                Ok(())
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "approver's decision not recorded; waiting until the timeout"
            );
        }
    }
}

impl fmt::Debug for ConfirmationEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmationEngine").field("config", &self.config).finish_non_exhaustive()
    }
}

impl ConfirmationGate for ConfirmationEngine {
    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        self.config.store.usage(now)
    }

    /// Its store's reach.
    fn reach(&self) -> Option<crate::Reach> {
        Some(self.config.store.reach())
    }

    fn clock(&self) -> Option<Arc<dyn crate::Clock>> {
        Some(self.config.clock.clone())
    }

    fn audit_sink(&self) -> Option<Arc<dyn crate::AuditSink>> {
        self.config.audit.clone()
    }

    /// What its confirmation policies are scoped to.
    fn scopes(&self) -> Vec<Scope> {
        let mut scopes: Vec<Scope> = self.config.policies.iter().flat_map(|p| p.scopes()).collect();
        scopes.extend(self.config.quorums.iter().map(|(scope, _)| scope.clone()));
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// Its quorums that can never be met or are malformed ([`Quorum::problem`]).
    fn rule_problems(&self) -> Vec<(Scope, String)> {
        self.config
            .quorums
            .iter()
            .filter_map(|(scope, quorum)| quorum.problem().map(|p| (scope.clone(), format!("its quorum {p}"))))
            .collect()
    }

    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision> {
        Box::pin(self.check_now(call, confirmation_id, now))
    }

    /// It asks [`CallInfo::details`] for the confirmation relayed for a call it gates without
    /// evidence (and for the input preview), so that a call it lets through costs neither.
    fn approval_url(&self, confirmation_id: &str) -> Option<String> {
        ConfirmationEngine::approval_url(self, confirmation_id)
    }

    fn consults_call_details(&self) -> bool {
        true
    }

    /// See [`ConfirmationEngine::reinstate`].
    fn reinstate<'a>(
        &'a self,
        call: CallInfo<'a>,
        evidence: &'a ConsumedEvidence,
        now: Timestamp,
    ) -> BoxFuture<'a, bool> {
        Box::pin(ConfirmationEngine::reinstate(self, call, evidence, now))
    }

    /// The expiry sweep, every [`ConfirmationConfig::sweep_interval`] ([`ConfirmationEngine::run_sweeps`]).
    fn run_periodic<'a>(&'a self, stop: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let stats = self.run_sweeps(stop).await;
            tracing::debug!(target: "agent_surface::confirmation", rounds = stats.rounds, warned = stats.warned, "expiry sweeps stopped");
        })
    }
}

/// Tells the call (through [`CallInfo::details`]) which evidence was consumed for it, with the
/// store's consumption token, so that it can be given back should its handler never start — at
/// once, before anything else is awaited, so that a call dropped meanwhile can give it back too.
fn tell_consumed(call: &CallInfo<'_>, id: &str, consumed: &Result<Result<Consumed, Rejection>, StoreError>) {
    if let (Some(details), Ok(Ok(Consumed { token: Some(token), .. }))) = (call.details, consumed) {
        details.consumed(ConsumedEvidence::new(id, token.clone()));
    }
}

/// A confirmation event about a call (its consumer, principal, ids) and the confirmation `id`
/// bound by `binding`.
fn call_event(
    now: Timestamp,
    kind: AuditKind,
    call: &CallInfo<'_>,
    binding: &ConfirmationBinding,
    id: &str,
) -> AuditEvent {
    let mut event = AuditEvent::of_call(now, kind, call);
    event.input_digest = Some(binding.input_hash.to_string());
    event.confirmation_id = Some(id.to_string());
    event
}

/// A confirmation event no call causes (a decision, an expiry found through a decision or a
/// sweep), described from the stored record: the requesting consumer and principal, and the
/// invocation and correlation ids of the call that requested it.
fn record_event(now: Timestamp, kind: AuditKind, record: &ConfirmationRecord) -> AuditEvent {
    let consumer = record.consumer.as_deref().unwrap_or(&record.binding.consumer_key);
    let mut event = AuditEvent::new(now, kind, &record.binding.capability, consumer);
    event.principal = record.requester.clone();
    event.input_digest = Some(record.binding.input_hash.to_string());
    event.invocation_id = record.invocation_id.clone();
    event.correlation_id = record.correlation_id.clone();
    event
}

/// Whether `approver` may decide `record`: not its requester, not decided by them yet, counted
/// by its quorum, and with a slot left for them.
fn may_decide(record: &ConfirmationRecord, approver: &Identity) -> bool {
    !record.is_requester(&approver.subject)
        && !record.decided_by(&approver.subject)
        && record.quorum.has_room(&record.decisions, record.quorum.slots_for(approver))
}

/// The summary of a gate that has none of its own (a failed policy, a declared gate whose summary
/// was not rendered).
fn generic_summary(call: &CallInfo<'_>) -> SafeText {
    SafeText::trusted(format!("Call {} with the given input.", call.capability))
}

/// The decision for rejected evidence.
fn rejected(id: &str, rejection: Rejection) -> ConfirmationDecision {
    let reason = match rejection {
        Rejection::Pending(record) => {
            return ConfirmationDecision::Required {
                confirmation_id: record.id,
                summary: SafeText::trusted(record.summary),
                expires_at: record.expires_at,
                origin: record.origin,
            };
        }
        Rejection::Unknown | Rejection::Expired => ConfirmationInvalidReason::Expired,
        Rejection::Denied => ConfirmationInvalidReason::Denied,
        Rejection::Consumed => ConfirmationInvalidReason::Consumed,
        Rejection::Mismatch(mismatch) => {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                mismatch_diff = %mismatch,
                "confirmation presented for another call"
            );
            ConfirmationInvalidReason::Mismatch
        }
    };
    tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, reason = ?reason, "confirmation rejected");
    ConfirmationDecision::Invalid(reason)
}

fn unavailable(e: &StoreError) -> ConfirmationDecision {
    tracing::error!(target: "agent_surface::confirmation", error = %crate::redacted(&e), "confirmation store failed; not running the call");
    ConfirmationDecision::Unavailable { retry_after: STORE_RETRY_AFTER }
}

/// A wait in progress. Dropped unsettled (the caller gave up, or the store failed), it withdraws
/// the pending confirmation so that a late approval cannot be used by anyone.
struct Waiting<'e> {
    engine: &'e ConfirmationEngine,
    id: &'e str,
    settled: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.engine.waiters().remove(self.id);
        if self.settled {
            return;
        }
        let store = Arc::clone(&self.engine.config.store);
        let id = self.id.to_string();
        let now = self.engine.config.clock.now();
        let withdraw = async move {
            if let Err(e) = store.withdraw(&id, now).await {
                tracing::warn!(target: "agent_surface::confirmation", confirmation_id = %id, error = %crate::redacted(&e), "could not withdraw");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(withdraw);
            }
            Err(_) => {
                withdraw.now_or_never();
            }
        }
    }
}
