//! The legacy era's approvals (2025-11-25 and earlier: sessions, server-to-client requests): a
//! `CONFIRMATION_REQUIRED` settled during the call by asking the person through
//! `elicitation/create`, in URL mode (to the approval page) or in form mode (accept or decline).
//! The modern era asks with an input-required round instead ([`super::modern`]).

use std::collections::BTreeMap;

use agent_surface_core::details::{ConfirmationInvalidReason, ConfirmationRequiredDetails};
use agent_surface_core::{ErrorCode, InvokeResult};
use agent_surface_registry::{Invocation, InvokeOptions, InvokeRequest};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema, ServerRequest,
};
use rmcp::service::{Peer, RequestContext};

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
            "This action needs a person's approval: {} Open its approval page to approve it, or to pass it to someone who may.",
            details.summary
        );
        let elicit = elicit_url(&context.peer, message, url, details.confirmation_id.clone());
        let answer = tokio::select! {
            biased;
            _ = context.ct.cancelled() => {
                return Invocation::answered(cancelled_while_asking(request.invocation_id), first.correlation_id);
            }
            r = tokio::time::timeout(self.session.config.elicitation_timeout, elicit) => r,
        };
        match answer {
            Ok(Ok(ElicitationAction::Accept)) => self.session.registry.invoke_detailed(request, options).await,
            Ok(Ok(_decline_or_cancel)) => first,
            Ok(Err(e)) => {
                tracing::info!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "URL elicitation failed; relaying CONFIRMATION_REQUIRED");
                first
            }
            Err(_elapsed) => {
                tracing::info!(target: "agent_surface::mcp", "URL elicitation unanswered; relaying CONFIRMATION_REQUIRED");
                first
            }
        }
    }

    /// Settles the `CONFIRMATION_REQUIRED` of `first` through elicitation when the session can;
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
        let correlation_id = first.correlation_id.clone();
        let answer_with = |result: InvokeResult| Invocation::answered(result, correlation_id.clone());
        let message = format!("The assistant asks for your approval: {} Approve this action?", details.summary);
        let elicit = elicit(&context.peer, message);
        let answer = tokio::select! {
            biased;
            _ = context.ct.cancelled() => {
                return answer_with(cancelled_while_asking(request.invocation_id));
            }
            r = tokio::time::timeout(self.session.config.elicitation_timeout, elicit) => r,
        };
        let consumer = &options.consumer;
        let answer = match answer {
            Ok(Ok(ElicitationAction::Accept)) => ConfirmationAnswer::Approved,
            Ok(Ok(_decline_or_cancel)) => ConfirmationAnswer::Denied,
            Ok(Err(e)) => {
                tracing::info!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "elicitation failed; relaying CONFIRMATION_REQUIRED");
                return first;
            }
            Err(_elapsed) => {
                tracing::info!(target: "agent_surface::mcp", "elicitation unanswered; relaying CONFIRMATION_REQUIRED");
                return first;
            }
        };
        let recorded = resolver.resolve(&details.confirmation_id, consumer, answer).await;
        match (answer, recorded) {
            (ConfirmationAnswer::Approved, Ok(())) => {
                let retry = InvokeRequest { confirmation_id: Some(details.confirmation_id), ..request };
                self.session.registry.invoke_detailed(retry, options).await
            }
            (ConfirmationAnswer::Approved, Err(e)) => {
                tracing::warn!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "approval not recorded; relaying CONFIRMATION_REQUIRED");
                first
            }
            (ConfirmationAnswer::Denied, recorded) => {
                if let Err(e) = recorded {
                    tracing::warn!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "denial not recorded; the confirmation will expire");
                }
                answer_with(InvokeResult::error(declined(ConfirmationInvalidReason::Denied), request.invocation_id))
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

/// Asks the person at the client to accept or decline, with no form fields.
async fn elicit(peer: &Peer<RoleServer>, message: String) -> Result<ElicitationAction, String> {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match peer.send_request(request).await {
        Ok(ClientResult::ElicitResult(r)) => Ok(r.action),
        Ok(_) => Err("unexpected response to elicitation/create".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Asks the client to send the person to `url` (URL-mode elicitation, `elicitation_id` naming the
/// request); the action they took.
async fn elicit_url(
    peer: &Peer<RoleServer>,
    message: String,
    url: String,
    elicitation_id: String,
) -> Result<ElicitationAction, String> {
    let params = ElicitRequestParams::UrlElicitationParams { meta: None, message, url, elicitation_id };
    match peer.send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params))).await {
        Ok(ClientResult::ElicitResult(r)) => Ok(r.action),
        Ok(_) => Err("unexpected response to elicitation/create".to_string()),
        Err(e) => Err(e.to_string()),
    }
}
