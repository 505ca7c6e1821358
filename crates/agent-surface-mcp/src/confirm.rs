//! `CONFIRMATION_REQUIRED` in wait mode: asking the person through MCP elicitation.
//!
//! When a call ends with `CONFIRMATION_REQUIRED`, the adapter can ask the person at the MCP
//! client instead of relaying the error to the model. It does so when three things hold: the
//! server was given a [`ConfirmationResolver`] ([`crate::McpConfig::confirmations`]), the client
//! declared the `elicitation` capability at `initialize`, and the request is not cancelled. Then:
//!
//! 1. the adapter sends `elicitation/create` (form mode, no fields) with the confirmation's
//!    `summary` as the message;
//! 2. **accept** → the resolver records the approval, and the adapter re-invokes the same call
//!    (same `invocationId`) carrying the `confirmationId`; the model sees only the final result;
//! 3. **decline** or **cancel** → the resolver records the denial and the call ends with
//!    `CONFIRMATION_INVALID {reason: denied}` (retry `no`): a decision of the person that the
//!    model must respect; nothing retries it;
//! 4. no answer within [`crate::McpConfig::elicitation_timeout`], an elicitation error, or a
//!    resolver that fails → the original `CONFIRMATION_REQUIRED` goes to the model (two-phase).
//!    An elicitation left unanswered (timed out, or its call cancelled) is withdrawn: the client
//!    gets `notifications/cancelled` naming the `elicitation/create` request.
//!
//! The person is asked in form mode only when their answer can count
//! ([`ConfirmationResolver::counts_in_person`]): a confirmation whose quorum asks for a role or
//! names its approvers is not theirs to approve, so it goes to its approval page (URL mode) when
//! there is one and the client can open it, and is otherwise relayed to the model (two-phase).
//!
//! Without a resolver, or with a client that cannot elicit, every `CONFIRMATION_REQUIRED` is
//! relayed to the model unchanged (two-phase mode): it asks the user, the host approves the
//! confirmation out of band, and the model retries with `_meta["agent-surface/confirmationId"]`.
//!
//! With the shipped [`ConfirmationEngine`] as the registry's gate, [`EngineResolver`] is the
//! resolver: an accepted elicitation is an in-person approval
//! ([`ConfirmationEngine::approve_in_person`], channel `mcp-elicitation`), a declined one a denial
//! by the requester.
//!
//! ```
//! use std::sync::Arc;
//! use agent_surface_mcp::McpConfig;
//! use agent_surface_mcp::confirm::EngineResolver;
//! use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
//! use agent_surface_registry::{Registry, RegistryConfig};
//!
//! let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
//! let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..Default::default() });
//! let config = McpConfig { confirmations: Some(Arc::new(EngineResolver::new(engine))), ..Default::default() };
//! # let _ = (registry, config);
//! ```
//!
//! **Trust.** An in-person approval is exactly as trustworthy as the MCP client's elicitation
//! prompt: use it with clients that show the prompt to the person and let only them answer it.

use std::sync::Arc;

use agent_surface_policy::{ConfirmationEngine, Consumer, confirmation::ConfirmationState};
use futures_util::future::BoxFuture;

/// The person's answer to a confirmation, as the MCP client reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfirmationAnswer {
    /// The person accepted.
    Approved,
    /// The person declined or dismissed the request.
    Denied,
}

/// A failure to record an answer; the adapter falls back to two-phase (it relays the original
/// `CONFIRMATION_REQUIRED`). The text goes to the operator channel only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveError(pub String);

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ResolveError {}

/// Records the answer a person gave through the MCP client to a pending confirmation, so that
/// the confirmation gate accepts (or refuses) the evidence afterwards.
///
/// Implemented by the host over its confirmation engine (the gate configured in
/// `RegistryConfig::confirmation`). The approver is the person behind the MCP client, reached
/// through elicitation, not the model that requested the call; an implementation records it as
/// such (for example, as the session's signed-in identity with an `mcp-elicitation` channel).
pub trait ConfirmationResolver: Send + Sync + 'static {
    /// Records `answer` for `confirmation_id`, which was issued to `requester`.
    fn resolve<'a>(
        &'a self,
        confirmation_id: &'a str,
        requester: &'a Consumer,
        answer: ConfirmationAnswer,
    ) -> BoxFuture<'a, Result<(), ResolveError>>;

    /// Where `confirmation_id` is in its life, when the resolver can tell (`None`: unknown).
    /// The adapter asks when an answer could not be recorded, so that a declined repeat of an
    /// approval that was already used is told so rather than `denied`. The default cannot tell.
    fn state<'a>(&'a self, confirmation_id: &'a str) -> BoxFuture<'a, Option<ConfirmationState>> {
        let _ = confirmation_id;
        Box::pin(std::future::ready(None))
    }

    /// Whether an approval given in person for `confirmation_id` (an accepted form prompt,
    /// [`ConfirmationAnswer::Approved`]) would count towards it. The adapter asks before it puts
    /// the approve-or-decline prompt in front of the person: when their answer cannot count (the
    /// confirmation's quorum asks for a role, or names its approvers), it does not ask — it sends
    /// them to the approval page when there is one and the client can open it, and otherwise
    /// relays `CONFIRMATION_REQUIRED` to the model (two-phase). The default, for a resolver that
    /// cannot tell, is `true`: the prompt is shown, as before this method existed.
    fn counts_in_person<'a>(&'a self, confirmation_id: &'a str) -> BoxFuture<'a, bool> {
        let _ = confirmation_id;
        Box::pin(std::future::ready(true))
    }
}

/// The [`ConfirmationResolver`] over the shipped [`ConfirmationEngine`] (the registry's gate).
///
/// The person who answers an elicitation is the requester, whom [`ConfirmationEngine::approve`]
/// refuses by design (an agent must not approve its own request through an API it can reach).
/// The elicitation is a different thing: a prompt the client shows to the person, which the
/// model cannot answer. So an accepted elicitation is recorded with
/// [`ConfirmationEngine::approve_in_person_for`] on the channel `mcp-elicitation`, and a declined
/// one with [`ConfirmationEngine::deny_as_requester`] (its identity, or its consumer key when
/// anonymous), each only for a confirmation of the requester's own call: an approval round's
/// state that names another caller's confirmation decides nothing.
#[derive(Clone)]
pub struct EngineResolver {
    engine: Arc<ConfirmationEngine>,
}

impl EngineResolver {
    /// The channel recorded for approvals given through elicitation.
    pub const CHANNEL: &'static str = "mcp-elicitation";

    /// A resolver that records answers in `engine`.
    pub fn new(engine: Arc<ConfirmationEngine>) -> EngineResolver {
        EngineResolver { engine }
    }
}

impl std::fmt::Debug for EngineResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineResolver").finish_non_exhaustive()
    }
}

impl ConfirmationResolver for EngineResolver {
    fn resolve<'a>(
        &'a self,
        confirmation_id: &'a str,
        requester: &'a Consumer,
        answer: ConfirmationAnswer,
    ) -> BoxFuture<'a, Result<(), ResolveError>> {
        Box::pin(async move {
            let decided = match answer {
                ConfirmationAnswer::Approved => {
                    self.engine.approve_in_person_for(confirmation_id, Self::CHANNEL, requester).await
                }
                ConfirmationAnswer::Denied => self.engine.deny_as_requester(confirmation_id, requester).await,
            };
            decided.map_err(|e| ResolveError(format!("confirmation {confirmation_id}: {e}")))
        })
    }

    fn state<'a>(&'a self, confirmation_id: &'a str) -> BoxFuture<'a, Option<ConfirmationState>> {
        Box::pin(async move { self.engine.get(confirmation_id).await.ok().flatten().map(|r| r.state) })
    }

    /// [`ConfirmationEngine::counts_in_person`] on [`EngineResolver::CHANNEL`]: the engine's own
    /// rules for [`ConfirmationEngine::approve_in_person`], read-only. A record that cannot be
    /// read (the store fails) counts as `false`: not asking only falls back to two-phase, which
    /// tells the person nothing untrue, while a prompt whose answer the engine then refuses
    /// would.
    fn counts_in_person<'a>(&'a self, confirmation_id: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            match self.engine.counts_in_person(confirmation_id, Self::CHANNEL).await {
                Ok(counts) => counts,
                Err(e) => {
                    tracing::info!(
                        target: "agent_surface::mcp",
                        confirmation_id,
                        error = %agent_surface_policy::redacted(&e),
                        "cannot tell whether an approval in person would count; not asking"
                    );
                    false
                }
            }
        })
    }
}
