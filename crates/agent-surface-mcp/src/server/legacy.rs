//! The legacy era's approvals (2025-11-25 and earlier: sessions, server-to-client requests): a
//! `CONFIRMATION_REQUIRED` settled during the call by asking the person through
//! `elicitation/create`, in URL mode (to the approval page) or in form mode (accept or decline).
//! The modern era asks with an input-required round instead ([`super::modern`]).

use std::collections::BTreeMap;
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, ConfirmationRequiredDetails};
use agent_surface_core::{ErrorCode, InvokeResult};
use agent_surface_policy::confirmation::ConfirmationState;
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest};
use rmcp::RoleServer;
use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    RequestId, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext};
use tokio_util::sync::CancellationToken;

use super::{Answered, McpServer, cancelled_while_asking, declined};
use crate::confirm::ConfirmationAnswer;
use crate::mrtr;

impl McpServer {
    /// A legacy call: invoked once, and in a session that can elicit, its
    /// `CONFIRMATION_REQUIRED` settled by asking the person.
    pub(super) async fn first_call(
        &self,
        invoke: InvokeRequest,
        options: InvokeOptions,
        context: &RequestContext<RoleServer>,
    ) -> Answered {
        let form = self.session.config.confirmations.is_some() && can_elicit(&context.peer);
        let url = can_elicit_url(&context.peer);
        if !form && !url {
            return Answered::Result(self.session.registry.invoke_detailed(invoke, options).await);
        }
        let first = self.session.registry.invoke_detailed(invoke.clone(), options.clone()).await;
        if first.result.code() != Some(ErrorCode::ConfirmationRequired) {
            return Answered::Result(first);
        }
        let details = first.result.error_payload().and_then(|p| p.details_as::<ConfirmationRequiredDetails>());
        if url && let Some(details) = details.filter(|d| d.approval_url.is_some()) {
            return Answered::Result(self.confirm_at_url(first, details, invoke, options, context).await);
        }
        if form {
            return Answered::Result(self.confirm_by_elicitation(first, invoke, options, context).await);
        }
        Answered::Result(first)
    }

    /// Asks the person through `elicitation/create` ([`ask`]), for the call of `context`: at
    /// most the session's `elicitation_timeout`, until the call is cancelled or the registry
    /// disposed.
    async fn ask(&self, params: ElicitRequestParams, context: &RequestContext<RoleServer>) -> Waited {
        let timeout = self.session.config.elicitation_timeout;
        ask(&context.peer, params, timeout, &context.ct, &self.session.registry).await
    }

    /// Sends the person to the confirmation's approval page (URL-mode elicitation, legacy era):
    /// the client asks them to open `details.approvalUrl`, where an approver decides (the
    /// requester may deny there, never approve). When the client answers `accept` — the person
    /// went to the page — the same call is made once more: approved by then, it runs (the relayed
    /// confirmation is presented); otherwise its answer is the two-phase result, whose later
    /// repeat runs once approved. A decline, a cancel, an error or no answer within
    /// [`crate::McpConfig::elicitation_timeout`] relays `first` unchanged: declining to open a page
    /// is no denial.
    async fn confirm_at_url(
        &self,
        first: Invocation,
        details: ConfirmationRequiredDetails,
        request: InvokeRequest,
        options: InvokeOptions,
        context: &RequestContext<RoleServer>,
    ) -> Invocation {
        let Some(url) = details.approval_url.clone() else { return first };
        let message = format!(
            "This action needs a person's approval: {} Send the link to its approval page to someone who may approve it: the person who made a request cannot approve it there.",
            details.summary
        );
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message,
            url,
            elicitation_id: details.confirmation_id.clone(),
        };
        let answer = match self.ask(params, context).await {
            Waited::CallCancelled => {
                return Invocation::answered(cancelled_while_asking(request.invocation_id), first.correlation_id);
            }
            Waited::TimedOut => {
                tracing::info!(target: "agent_surface::mcp", "URL elicitation unanswered; relaying CONFIRMATION_REQUIRED");
                return first;
            }
            Waited::Answered(answer) => answer,
        };
        match answer {
            Ok(ElicitationAction::Accept) => self.session.registry.invoke_detailed(request, options).await,
            Ok(_decline_or_cancel) => first,
            Err(e) => {
                tracing::info!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "URL elicitation failed; relaying CONFIRMATION_REQUIRED");
                first
            }
        }
    }

    /// Settles the `CONFIRMATION_REQUIRED` of `first` through elicitation when the session can
    /// and the person's approval would count ([`crate::confirm::ConfirmationResolver::counts_in_person`]);
    /// otherwise returns `first` unchanged (two-phase). An answer the adapter gives itself keeps
    /// the first call's correlation id; an approved call is a call of its own, with its own.
    async fn confirm_by_elicitation(
        &self,
        first: Invocation,
        request: InvokeRequest,
        options: InvokeOptions,
        context: &RequestContext<RoleServer>,
    ) -> Invocation {
        let Some(resolver) = &self.session.config.confirmations else { return first };
        let Some(details) = first.result.error_payload().and_then(|p| p.details_as::<ConfirmationRequiredDetails>())
        else {
            return first;
        };
        if !resolver.counts_in_person(&details.confirmation_id).await {
            // The quorum would not count the person's answer: asking them would tell them
            // something untrue. Two-phase, for an approver the quorum counts.
            tracing::info!(target: "agent_surface::mcp", confirmation_id = %details.confirmation_id, "an approval in person would not count; relaying CONFIRMATION_REQUIRED");
            return first;
        }
        let correlation_id = first.correlation_id.clone();
        let answer_with = |result: InvokeResult| Invocation::answered(result, correlation_id.clone());
        let message = format!("The assistant asks for your approval: {} Approve this action?", details.summary);
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::new(BTreeMap::new()),
        };
        let answer = match self.ask(params, context).await {
            Waited::CallCancelled => return answer_with(cancelled_while_asking(request.invocation_id)),
            Waited::TimedOut => {
                tracing::info!(target: "agent_surface::mcp", "elicitation unanswered; relaying CONFIRMATION_REQUIRED");
                return first;
            }
            Waited::Answered(answer) => answer,
        };
        let consumer = &options.consumer;
        let answer = match answer {
            Ok(ElicitationAction::Accept) => ConfirmationAnswer::Approved,
            Ok(_decline_or_cancel) => ConfirmationAnswer::Denied,
            Err(e) => {
                tracing::info!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "elicitation failed; relaying CONFIRMATION_REQUIRED");
                return first;
            }
        };
        let recorded = resolver.resolve(&details.confirmation_id, consumer, answer).await;
        match (answer, recorded) {
            (ConfirmationAnswer::Approved, Ok(())) => {
                // The request stays as the client sent it (the approval is the adapter's, in the
                // options): the client's repeat of it under the same id is answered from the record.
                let options = options.with_approval(details.confirmation_id);
                self.session.registry.invoke_detailed(request, options).await
            }
            (ConfirmationAnswer::Approved, Err(e)) => {
                tracing::warn!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "approval not recorded; relaying CONFIRMATION_REQUIRED");
                first
            }
            (ConfirmationAnswer::Denied, recorded) => {
                let mut reason = ConfirmationInvalidReason::Denied;
                if let Err(e) = recorded {
                    tracing::warn!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "denial not recorded; the confirmation will expire");
                    // A decision came first: an approval already used (an approver at the page,
                    // then the same call presenting it) ran the action, which is not `denied`.
                    if let Some(ConfirmationState::Consumed { .. }) = resolver.state(&details.confirmation_id).await {
                        reason = ConfirmationInvalidReason::Consumed;
                    }
                }
                answer_with(InvokeResult::error(declined(reason), request.invocation_id))
            }
        }
    }
}

/// Whether a legacy client declared URL-mode elicitation at `initialize`.
fn can_elicit_url(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info().is_some_and(|info| info.capabilities.elicitation.as_ref().is_some_and(|e| e.url.is_some()))
}

/// Whether a legacy client declared form elicitation at `initialize`.
fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    mrtr::abilities(peer.peer_info().as_ref().map(|info| &info.capabilities)).form
}

/// How waiting for the client's answer to an elicitation ended.
enum Waited {
    /// The client answered, or the request failed (the text says why).
    Answered(Result<ElicitationAction, String>),
    /// No answer within the elicitation timeout; the request was withdrawn.
    TimedOut,
    /// The call was cancelled (a request already sent was withdrawn).
    CallCancelled,
}

/// Sends `elicitation/create` with `params` and waits for the client's answer, at most `timeout`
/// and until `call` (the call's cancellation) fires or `registry` is disposed (a server shutting
/// down answers the call, as `CANCELLED` with nothing run, within its grace rather than leaving it
/// to wait out the timeout, by when the connection is gone).
///
/// Whenever the adapter stops waiting without an answer — the timeout, the call's cancellation, the
/// registry's disposal, or this future dropped with its call — it withdraws the request: the client
/// gets `notifications/cancelled` naming it, so that its prompt closes instead of taking an answer
/// nobody reads. (`rmcp` sends that notification only for its own request timeout; dropping the
/// wait for a response sends nothing.)
async fn ask(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
    timeout: Duration,
    call: &CancellationToken,
    registry: &agent_surface_registry::Registry,
) -> Waited {
    if call.is_cancelled() || registry.is_disposed() {
        return Waited::CallCancelled;
    }
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let handle = match peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
        Ok(handle) => handle,
        Err(e) => return Waited::Answered(Err(e.to_string())),
    };
    let pending = Withdrawal { peer: peer.clone(), id: Some(handle.id.clone()) };
    let waited = tokio::select! {
        biased;
        () = call.cancelled() => Waited::CallCancelled,
        () = registry.disposed() => Waited::CallCancelled,
        answer = tokio::time::timeout(timeout, handle.await_response()) => match answer {
            Ok(Ok(ClientResult::ElicitResult(r))) => Waited::Answered(Ok(r.action)),
            Ok(Ok(_)) => Waited::Answered(Err("unexpected response to elicitation/create".to_string())),
            Ok(Err(e)) => Waited::Answered(Err(e.to_string())),
            Err(_elapsed) => Waited::TimedOut,
        },
    };
    match waited {
        Waited::Answered(_) => pending.answered(),
        Waited::TimedOut => pending.withdraw("the elicitation was not answered in time").await,
        Waited::CallCancelled => pending.withdraw("the call that asked was cancelled").await,
    }
    waited
}

/// An `elicitation/create` request the adapter may still stop waiting for. Withdrawn
/// ([`Withdrawal::withdraw`]) or dropped unanswered, it tells the client with
/// `notifications/cancelled` naming the request.
struct Withdrawal {
    peer: Peer<RoleServer>,
    /// The request's id; `None` once it was answered or withdrawn.
    id: Option<RequestId>,
}

impl Withdrawal {
    /// The client answered: nothing to withdraw.
    fn answered(mut self) {
        self.id = None;
    }

    /// Tells the client the request is withdrawn, for `reason`.
    async fn withdraw(mut self, reason: &str) {
        if let Some(id) = self.id.clone() {
            let params = CancelledNotificationParam::new(Some(id), Some(reason.to_string()));
            if let Err(e) = self.peer.notify_cancelled(params).await {
                tracing::debug!(target: "agent_surface::mcp", error = %e, "cannot withdraw an elicitation");
            }
            self.id = None;
        }
    }
}

impl Drop for Withdrawal {
    /// Dropped unanswered (the call's future was dropped): the notification is sent from a task
    /// of its own, since a drop cannot wait.
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let params = CancelledNotificationParam::new(Some(id), Some("the call that asked ended".to_string()));
            let _ = peer.notify_cancelled(params).await;
        });
    }
}
