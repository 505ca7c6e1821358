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
//!
//! Without a resolver, or with a client that cannot elicit, every `CONFIRMATION_REQUIRED` is
//! relayed to the model unchanged (two-phase mode): it asks the user, the host approves the
//! confirmation out of band, and the model retries with `_meta["agent-surface/confirmationId"]`.

use agent_surface_policy::Consumer;
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
}
