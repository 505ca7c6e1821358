//! How a [`ConfirmationEngine`](super::ConfirmationEngine) is set up: [`ConfirmationConfig`], the
//! [`ConfirmationMode`], the [`TargetBinding`] and their defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::approver::Approver;
use super::memory::MemoryConfirmationStore;
use super::policy::ConfirmationPolicy;
use super::quorum::Quorum;
use super::store::ConfirmationStore;
use crate::audit::AuditSink;
use crate::clock::{Clock, SystemClock};
use crate::hooks::Scope;

/// How long a confirmation stays valid when none is configured: ten minutes, for the decision
/// and for the use of the evidence together.
pub const DEFAULT_CONFIRMATION_TTL: Duration = Duration::from_secs(10 * 60);

/// The default [`ConfirmationConfig::expiry_warning`]: two minutes before a confirmation expires
/// (at most half its time to live).
pub const DEFAULT_EXPIRY_WARNING: Duration = Duration::from_secs(2 * 60);

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

/// The configuration of a [`ConfirmationEngine`](super::ConfirmationEngine). Build it with struct update syntax over
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
    /// [`ConfirmationEngine::sweep_expiring`](super::ConfirmationEngine::sweep_expiring), which a host can run on a timer.
    pub expiry_warning: Option<Duration>,
    /// Where people approve confirmations: the approval page of the confirmation `id` is this
    /// base, a `/`, and `id` escaped as a path segment (e.g. `https://shop.example/inbox/c` gives
    /// `https://shop.example/inbox/c/c-3f…`, the detail page of the inbox served at `/inbox`).
    /// It becomes `details.approvalUrl` of `CONFIRMATION_REQUIRED` (and a message telling the
    /// agent that a person must approve it there) and the URL of URL-mode elicitation over MCP.
    /// `None` (the default): no approval page.
    pub approval_base_url: Option<String>,
    /// How often a host's expiry sweep runs ([`ConfirmationEngine::run_sweeps`](super::ConfirmationEngine::run_sweeps), which the
    /// library's `serve` helpers run while they serve); default [`DEFAULT_SWEEP_INTERVAL`] (a
    /// minute); `None` (or zero): no periodic sweep.
    pub sweep_interval: Option<Duration>,
    /// Whether a repeat of a call without evidence presents the confirmation relayed for it
    /// (two-phase mode; the default `true`). The engine remembers, in its store, the id of every
    /// `CONFIRMATION_REQUIRED` it answers under the call's [`RelayKey`](super::RelayKey) (a digest of consumer,
    /// capability, target and input hash), so that the same consumer repeating the same call —
    /// a model, which cannot send ids back — gets the same confirmation while nobody decided,
    /// runs once a person approved, and is told of a denial; with a store that replicas share,
    /// on whichever replica the repeat lands. `false`: every call without evidence asks anew.
    pub present_on_repeat: bool,
}

/// The default [`ConfirmationConfig::sweep_interval`]: a minute.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

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
