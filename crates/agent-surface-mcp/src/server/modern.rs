//! The modern era's round (2026-07-28: stateless requests, no server-to-client requests): a
//! call that needs the person's approval, or answers to the handler's questions, is answered with
//! an input-required result and a sealed `requestState` ([`crate::mrtr`]); the client repeats the
//! call with the state and the answers, and [`McpServer::open_round`] takes them up. The legacy
//! era asks during the call instead ([`super::legacy`]).

use agent_surface_core::details::{ConfirmationInvalidReason, ConfirmationRequiredDetails};
use agent_surface_core::{ErrorCode, InvokeResult};
use agent_surface_policy::{Consumer, confirmation::ConfirmationState};
use agent_surface_registry::{Abilities, Answers, Invocation, InvokeOptions, InvokeRequest, Question};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Answered, McpServer, declined, progress};
use crate::confirm::ConfirmationAnswer;
use crate::fault::ProtocolFault;
use crate::mrtr::{self, Answer};
use crate::tasks::{Started, Tasks};

/// One modern round of a call, as its request opened it.
pub(super) struct Round {
    /// The call's arguments, which a state this round seals is bound to.
    arguments: Value,
    /// The answers the call carries: earlier rounds' (from its state) and this round's (from
    /// `inputResponses`).
    dialogue: mrtr::Dialogue,
    /// The approval the request's state asked for, with the state and the person's answer; taken
    /// when the call is made.
    approval: Option<(mrtr::Approval, String, Answer)>,
    /// What the client declared it can answer.
    abilities: Abilities,
    /// Whether this round answered a question that sent the person to an approval page: its
    /// result is relayed, not asked about again.
    paged: bool,
}

/// What a state this round seals is sealed for and with.
struct Sealing<'a> {
    tool: &'a str,
    arguments: &'a Value,
    consumer: &'a Consumer,
    dialogue: &'a mrtr::Dialogue,
    abilities: Abilities,
    /// Whether the client declared URL-mode elicitation.
    urls: bool,
    /// Whether this round answered a question that sent the person to an approval page: its
    /// result is relayed, not asked about again.
    paged: bool,
    now: agent_surface_core::Timestamp,
}

impl McpServer {
    /// Opens the round of a modern request: the answers it carries (earlier rounds' from its
    /// state, this round's from `inputResponses`) and the approval its state asks for. A state
    /// continues under the consumer it was sealed for (`consumer` becomes it). A state that does
    /// not belong to the call, or an approval answer that is no elicitation result, is `-32602`;
    /// a state too old to continue is dropped (the call is planned afresh).
    pub(super) fn open_round(
        &self,
        request: &CallToolRequestParams,
        arguments: &Value,
        consumer: &mut Consumer,
        context: &RequestContext<RoleServer>,
    ) -> Result<Round, ErrorData> {
        let responses = request.input_responses.as_ref();
        // The dialogue the request's state continues, if it opens.
        let mut continued = None;
        let mut approval = None;
        if let Some(sealed) = request.request_state.as_deref() {
            match self.session.config.approval_states.open(sealed, &request.name, arguments, consumer) {
                Ok((state, continues)) => {
                    *consumer = continues;
                    let dialogue = mrtr::Dialogue { answers: state.answers, asked: state.asked, rounds: state.rounds };
                    // A round that answers an approval takes no new answers: the approved call
                    // runs with those the approval was asked with. Otherwise this round's answers
                    // count under the keys the state asked.
                    continued = Some(match state.approval {
                        Some(asked) => {
                            let answer = mrtr::answer(responses)
                                .map_err(|_| ProtocolFault::ConfirmAnswerNotElicitation.error())?;
                            approval = Some((asked, sealed.to_string(), answer));
                            dialogue
                        }
                        None => dialogue.answered(responses),
                    });
                }
                // Too old to continue: the call is planned afresh, as if it came without one.
                Err(mrtr::StateRefused::Expired) => {
                    tracing::info!(target: "agent_surface::mcp", tool = %request.name, "request state expired; planning afresh");
                }
                Err(e) => {
                    tracing::info!(target: "agent_surface::mcp", tool = %request.name, cause = %agent_surface_policy::redacted(&e), "request state refused");
                    return Err(ProtocolFault::StateRefused.error());
                }
            }
        }
        // Without a state that continues, a first round: the call runs with every answer it
        // carries, and a state it seals carries them on.
        let dialogue = continued.unwrap_or_else(|| mrtr::Dialogue::first(responses));
        let abilities = mrtr::abilities(context.client_capabilities().as_ref());
        let paged = matches!(&approval, Some((asked, _, answer)) if asked.url.is_some() && *answer != Answer::Missing);
        Ok(Round { arguments: arguments.clone(), dialogue, approval, abilities, paged })
    }

    /// Makes the call of a modern round, with progress relayed: with the answers it carries; the
    /// approved call when the round answers an approval; a task, for a long-running capability
    /// called by a client that negotiated tasks, once its handler starts ([`McpServer::run`]).
    pub(super) async fn modern_call(
        &self,
        round: &mut Round,
        invoke: InvokeRequest,
        options: InvokeOptions,
        context: &RequestContext<RoleServer>,
    ) -> Answered {
        let carried =
            round.dialogue.answers.iter().fold(Answers::new(round.abilities), |a, (k, v)| a.with(k.clone(), v.clone()));
        let options = options.with_answers(carried);
        let registry = &self.session.registry;
        let task = self.session.config.tasks.as_ref().filter(|_| {
            context.client_capabilities().is_some_and(|c| c.supports_tasks())
                && registry.is_long_running(&invoke.capability)
        });
        let task = task.map(|tasks| (tasks, context.ct.clone()));
        // Progress is relayed until the call is answered: to its end when it is answered in the
        // request (also a task that could not be named), until the task is named otherwise.
        if let Some((asked, sealed, answer)) = round.approval.take() {
            return progress::relayed(context, options, |options| {
                self.answered(asked, sealed, answer, invoke, options, task)
            })
            .await;
        }
        progress::relayed(context, options, |options| self.run(invoke, options, task)).await
    }

    /// Runs `invoke`: as a task when `task` (the runtime, and the request's cancellation, which
    /// counts until a task is named) is given, named once the handler starts; otherwise, or when
    /// no task can be named, answered when it ends. Every modern path that runs a call goes
    /// through here, so a call that may be a task becomes one whichever way it was approved.
    async fn run(
        &self,
        invoke: InvokeRequest,
        options: InvokeOptions,
        task: Option<(&Tasks, CancellationToken)>,
    ) -> Answered {
        let registry = &self.session.registry;
        let Some((tasks, request)) = task else {
            return Answered::Result(registry.invoke_detailed(invoke, options).await);
        };
        match crate::tasks::start(tasks, registry, invoke, options, request).await {
            Started::Task(task) => Answered::Task(task),
            Started::Ended(invocation) => Answered::Result(invocation),
        }
    }

    /// For a modern round, turns the call's stop for questions or its `CONFIRMATION_REQUIRED` into
    /// an input-required result (or, for questions the client cannot answer, `-32021`); `Ok(None)`:
    /// relay the result as it is. `consumer` is the one the call ran for.
    pub(super) async fn ask_modern(
        &self,
        invocation: &Invocation,
        round: &Round,
        tool: &str,
        consumer: &Consumer,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<rmcp::model::InputRequiredResult>, ErrorData> {
        let sealing = Sealing {
            tool,
            arguments: &round.arguments,
            consumer,
            dialogue: &round.dialogue,
            abilities: round.abilities,
            urls: mrtr::can_open_urls(context.client_capabilities().as_ref()),
            paged: round.paged,
            now: self.session.registry.config().clock.now(),
        };
        self.seal_question(&invocation.result, invocation.questions.as_deref(), &sealing).await
    }

    /// A modern retry carrying the state of an approval and the person's answer. Each way that
    /// makes the call (approved in person, after the approval page, planned afresh) runs it
    /// through [`McpServer::run`] with `task`, so the retry may become the task.
    async fn answered(
        &self,
        approval: mrtr::Approval,
        sealed: String,
        answer: Answer,
        invoke: InvokeRequest,
        options: InvokeOptions,
        task: Option<(&Tasks, CancellationToken)>,
    ) -> Answered {
        let registry = &self.session.registry;
        let now = registry.config().clock.now();
        if approval.url.is_some() {
            // The person was sent to the approval page: an answer is no approval. Not answered
            // yet: the same question; otherwise the call is made again (it runs if someone
            // approved at the page meanwhile, through the relayed confirmation).
            if answer == Answer::Missing && approval.exp > now.unix_millis() {
                return Answered::Ask(mrtr::input_required(&approval, sealed));
            }
            return self.run(invoke, options, task).await;
        }
        let Some(resolver) = self.session.config.confirmations.as_ref().filter(|_| approval.exp > now.unix_millis())
        else {
            // Too late to approve this one: plan the call afresh, which asks again.
            tracing::info!(target: "agent_surface::mcp", confirmation_id = %approval.cid, "approval state expired; asking afresh");
            return self.run(invoke, options, task).await;
        };
        let consumer = &options.consumer;
        match answer {
            // Not answered yet: the same question, with the same state.
            Answer::Missing => Answered::Ask(mrtr::input_required(&approval, sealed)),
            Answer::Accept => {
                if let Err(e) = resolver.resolve(&approval.cid, consumer, ConfirmationAnswer::Approved).await {
                    // Already decided (a replayed state), expired or a store failure: the store's
                    // single-use `consume` decides what the evidence is worth.
                    tracing::info!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "approval not recorded");
                }
                // The approved call is the one that runs: a task, when it may be one. The request
                // stays as the client sent it (the approval is the adapter's, in the options): the
                // client's repeat of it under the same id is answered from the record.
                self.run(invoke, options.with_approval(approval.cid), task).await
            }
            Answer::Decline => {
                let mut reason = ConfirmationInvalidReason::Denied;
                if let Err(e) = resolver.resolve(&approval.cid, consumer, ConfirmationAnswer::Denied).await {
                    tracing::info!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "denial not recorded");
                    // A decision came first: an approval that was already used is not `denied`.
                    if let Some(ConfirmationState::Consumed { .. }) = resolver.state(&approval.cid).await {
                        reason = ConfirmationInvalidReason::Consumed;
                    }
                }
                let refusal = Invocation::new(InvokeResult::error(declined(reason), invoke.invocation_id));
                tracing::info!(
                    target: "agent_surface::mcp",
                    correlation_id = %refusal.correlation_id,
                    confirmation_id = %approval.cid,
                    "approval declined"
                );
                Answered::Result(refusal)
            }
        }
    }

    /// Turns a stop for questions or a `CONFIRMATION_REQUIRED` into an
    /// input-required result (or, for questions the client cannot answer, `-32021`); `Ok(None)`:
    /// relay the result as it is. A confirmation is asked about in a form only when the person's
    /// approval would count ([`crate::confirm::ConfirmationResolver::counts_in_person`]).
    async fn seal_question(
        &self,
        result: &InvokeResult,
        questions: Option<&[Question]>,
        round: &Sealing<'_>,
    ) -> Result<Option<rmcp::model::InputRequiredResult>, ErrorData> {
        let states = &self.session.config.approval_states;
        if let Some(questions) = questions {
            if let Some(required) = mrtr::missing(questions, round.abilities) {
                return Err(ProtocolFault::MissingCapability(required.into()).error());
            }
            let Some(requests) = mrtr::requests(questions) else { return Ok(None) };
            let dialogue = round.dialogue.clone().asking(questions);
            let sealed = states.seal(round.tool, round.arguments, round.consumer, &dialogue, None, round.now);
            return Ok(sealed.map(|state| rmcp::model::InputRequiredResult::new(Some(requests), Some(state))));
        }
        if result.code() != Some(ErrorCode::ConfirmationRequired) || round.paged {
            return Ok(None);
        }
        let Some(details) = result.error_payload().and_then(|p| p.details_as::<ConfirmationRequiredDetails>()) else {
            return Ok(None);
        };
        // A page to send the person to (URL mode), preferred; otherwise a form answered in person,
        // when their approval would count (else asking them would tell them something untrue).
        let url = details.approval_url.clone().filter(|_| round.urls);
        if url.is_none() {
            let Some(resolver) = self.session.config.confirmations.as_ref().filter(|_| round.abilities.form) else {
                return Ok(None);
            };
            if !resolver.counts_in_person(&details.confirmation_id).await {
                tracing::info!(target: "agent_surface::mcp", confirmation_id = %details.confirmation_id, "an approval in person would not count; relaying CONFIRMATION_REQUIRED");
                return Ok(None);
            }
        }
        let Some(expires_at) = agent_surface_core::Timestamp::parse_rfc3339(&details.expires_at) else {
            return Ok(None);
        };
        let approval = mrtr::Approval {
            cid: details.confirmation_id,
            msg: details.summary.clone(),
            exp: expires_at.unix_millis(),
            url,
        };
        let question = approval.clone();
        let sealed =
            states.seal(round.tool, round.arguments, round.consumer, round.dialogue, Some(approval), round.now);
        Ok(sealed.map(|state| mrtr::input_required(&question, state)))
    }
}
