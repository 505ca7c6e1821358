//! Questions and confirmation for modern clients (MCP 2026-07-28): the input-required round
//! trip.
//!
//! From protocol revision 2026-07-28 on, a server may not send requests to the client while it
//! serves one, so the legacy way of asking the person (`elicitation/create` inside the call, see
//! [`crate::confirm`]) is gone. Instead `tools/call` may answer `resultType: "input_required"`
//! with questions (`inputRequests`) and an opaque `requestState`; the client asks the person,
//! then repeats the same call with the answers (`inputResponses`) and the state. That is exactly
//! our confirmation cycle, so the adapter maps one onto the other:
//!
//! 1. A call ends with `CONFIRMATION_REQUIRED`, the request is modern, its `_meta` declares the
//!    `elicitation` capability (form mode), and the server has a
//!    [`ConfirmationResolver`](crate::confirm::ConfirmationResolver) and an [`ApprovalStates`]
//!    sealer. The adapter answers an `InputRequiredResult`: one question under [`CONFIRM_KEY`], an
//!    elicitation form without fields whose message is the confirmation's summary, and a
//!    `requestState` sealed with `rmcp`'s `RequestStateCodec` (HMAC-SHA256, key ids, rotation).
//! 2. The state names the confirmation id, the consumer it was issued to (and whether that was
//!    an authenticated principal), the summary and the confirmation's expiry; it is bound, as
//!    associated data, to the tool name and the SHA-256 of the canonical JSON of the arguments.
//!    So it opens only for the same tool with the same arguments.
//! 3. The repeated call is answered by what the state and the answer say:
//!    - **accept**: the resolver records an in-person approval and the call runs with the
//!      confirmation as its evidence;
//!    - **decline** or **cancel**: the resolver records a denial; the answer is
//!      `CONFIRMATION_INVALID {reason: denied}`;
//!    - **no answer** under [`CONFIRM_KEY`]: the same question again (a fresh input-required
//!      result, not an error);
//!    - **expired** (past the confirmation's expiry on the registry's clock): the call is
//!      planned afresh, which asks for a new approval;
//!    - **a state that does not open** (tampered, sealed with an unknown key, for another tool,
//!      other arguments or another principal): JSON-RPC `-32602`.
//!
//! **A capability's own questions** (its ask step, `agent_surface_registry::questions`) travel
//! the same way. A call that stops for open questions, from a modern client that can answer
//! them all (forms need `elicitation`, completions `sampling`, roots `roots`), answers an
//! input-required result with one input request per question, under the question's key, and a
//! sealed state carrying the answers of earlier rounds. The repeated call carries the answers of
//! all rounds (the state's and the new `inputResponses`) to the ask step, which may ask again
//! (multi-round) or let the call run. A question the client cannot answer (it did not declare
//! the capability) is JSON-RPC `-32021` naming the capabilities it needs. Answers without a state
//! are taken too, under any key (a client may answer in its first request): that call runs with
//! all of them, and the state it seals carries them on. After a state, a retry adds answers only
//! under the keys the server asked, so no later round brings in an answer to a question that was
//! never put. Callers that cannot ask at all get `PRECONDITION_FAILED {reason:
//! client-input-required}` (retry `no`). Questions come before the approval (the ask step runs in
//! the input phase); the approval's state carries the answers the call ran with, those of the
//! first request included, so the approved call runs with them.
//!
//! **Single use lives in the confirmation store, not in the state.** The state can be replayed
//! byte for byte; what it refers to cannot: the approval is recorded once (a second decision of
//! the same confirmation is refused by the store) and the evidence is consumed once, atomically,
//! by the store's `consume`. A replayed accepted state therefore answers `CONFIRMATION_INVALID
//! {reason: consumed}` and runs nothing. With a shared confirmation store any replica can take
//! the retry, provided every replica seals with the same keys ([`ApprovalStates::new`]).
//!
//! **Who the caller is.** An authenticated caller's consumer key is its principal, the same on
//! every request; the state must name that principal. An anonymous modern request has no
//! session, so its consumer key is fresh per connection (stdio) or per request (HTTP); the
//! sealed state carries the anonymous key of the first call, and the retry continues under it —
//! whoever holds the state continues the call it was issued for, and nothing else.
//!
//! **Why an answer here counts as the person's approval.** The question is an elicitation: the
//! client shows it to the person, and the model cannot answer it (it only writes tool
//! arguments). That is the trust the legacy elicitation channel rests on, and it is recorded the
//! same way: an in-person approval on the channel `mcp-elicitation`.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_surface_policy::{Consumer, idempotency::Fingerprint};
use agent_surface_registry::{Ask, Question};
use rmcp::model::{
    ClientCapabilities, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, RequestStateCodec, RequestStateError,
    RootsCapabilities, SamplingCapability, SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The key of the approval question in `inputRequests` / `inputResponses`.
pub const CONFIRM_KEY: &str = "agent-surface/confirm";

/// The format version of a sealed state.
const FORMAT: u8 = 1;

/// The most bytes of earlier answers a state carries; a call whose answers grow past it is not
/// continued (its questions go unanswered: `PRECONDITION_FAILED {client-input-required}`).
pub const MAX_STATE_ANSWERS_BYTES: usize = 64 * 1024;

/// The most rounds of questions one call may take; past it the call is not continued (the same
/// in-band answer), so an ask step that never settles cannot keep a client looping.
pub const MAX_ROUNDS: u32 = 16;

/// How long a state of questions stays valid (an approval's state: until the confirmation
/// expires, plus this margin). A state past it does not open; the call is planned afresh.
pub const STATE_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Seals and opens the `requestState` of input-required results (questions and approvals).
///
/// Every replica that may take a retry must seal with the same keys: build it from a shared
/// keyring ([`ApprovalStates::new`] over `RequestStateCodec::new_with_keyring`, which also
/// rotates keys). [`ApprovalStates::ephemeral`] draws a random key for this process only —
/// enough for one server, useless across replicas or restarts (a state from before a restart
/// then fails to open and is answered `-32602`).
#[derive(Clone)]
pub struct ApprovalStates {
    codec: Arc<RequestStateCodec>,
    /// Drawn by [`ApprovalStates::ephemeral`], not given.
    ephemeral: bool,
}

impl std::fmt::Debug for ApprovalStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalStates").finish_non_exhaustive()
    }
}

/// What a sealed state says: who the call belongs to, the answers of earlier rounds, and the
/// approval this round asks for, if any.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallState {
    /// The format version ([`FORMAT`]).
    v: u8,
    /// The consumer key the call belongs to.
    pub(crate) key: String,
    /// Whether that consumer was authenticated (its key is then a principal).
    pub(crate) auth: bool,
    /// The answers the call ran with, by question key: those of its first request as given,
    /// those of later rounds only under keys that were asked.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub(crate) answers: Map<String, Value>,
    /// The keys asked so far, in any round: the only answers a retry may add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) asked: Vec<String>,
    /// How many rounds of questions the call has taken.
    #[serde(default)]
    pub(crate) rounds: u32,
    /// The approval this round asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approval: Option<Approval>,
}

/// The approval a state asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Approval {
    /// The confirmation id.
    pub(crate) cid: String,
    /// The summary shown to the person.
    pub(crate) msg: String,
    /// When the confirmation expires, in Unix milliseconds on the registry's clock.
    pub(crate) exp: u64,
    /// The confirmation's approval page, when the question sends the person there (URL-mode
    /// elicitation); its answer is then never an approval, only a sign to try the call again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<String>,
}

/// The questions and answers of one call so far: what a state carries between rounds.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Dialogue {
    /// Every answer the call carries now (earlier rounds' and this round's): the answers it runs
    /// with, and those a state it seals carries on.
    pub(crate) answers: Map<String, Value>,
    /// The keys asked so far: the only ones a retry may add answers under.
    pub(crate) asked: Vec<String>,
    /// The rounds of questions taken so far.
    pub(crate) rounds: u32,
}

impl Dialogue {
    /// The dialogue of a first request (no state, or one too old to continue): every answer in
    /// `responses` but one under [`CONFIRM_KEY`]. The call runs with all of them (its ask step
    /// reads the keys it asks for), so they are the answers a state it seals carries on.
    pub(crate) fn first(responses: Option<&BTreeMap<String, Value>>) -> Dialogue {
        let answers = responses
            .into_iter()
            .flatten()
            .filter(|(key, _)| *key != CONFIRM_KEY)
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        Dialogue { answers, ..Dialogue::default() }
    }

    /// The same dialogue with a retry's answers in `responses` over it, for keys asked so far
    /// only (never [`CONFIRM_KEY`], which no question uses): a retry cannot answer a question
    /// that was never put.
    pub(crate) fn answered(mut self, responses: Option<&BTreeMap<String, Value>>) -> Dialogue {
        for (key, value) in responses.into_iter().flatten() {
            if key != CONFIRM_KEY && self.asked.contains(key) {
                self.answers.insert(key.clone(), value.clone());
            }
        }
        self
    }

    /// The dialogue of a call that asks `questions` next: their keys join the asked ones, one
    /// more round.
    pub(crate) fn asking(mut self, questions: &[Question]) -> Dialogue {
        for q in questions {
            if !self.asked.contains(&q.key) {
                self.asked.push(q.key.clone());
            }
        }
        self.rounds += 1;
        self
    }
}

/// Why a presented state was refused (operator channel only; the client gets one `-32602`).
#[derive(Debug)]
pub(crate) enum StateRefused {
    /// The state did not open (tampered, unknown key, other tool or arguments, bad format).
    Open(RequestStateError),
    /// The state is past its time to live: the call is planned afresh.
    Expired,
    /// The state is of another format version.
    Format(u8),
    /// The state was issued to another consumer.
    Principal,
}

impl std::fmt::Display for StateRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateRefused::Open(e) => write!(f, "request state does not open: {e}"),
            StateRefused::Expired => f.write_str("request state expired"),
            StateRefused::Format(v) => write!(f, "request state of unknown format {v}"),
            StateRefused::Principal => f.write_str("request state issued to another consumer"),
        }
    }
}

impl ApprovalStates {
    /// Seals with `codec` (e.g. `RequestStateCodec::new_with_keyring("k2", [("k1", old), ("k2", new)])`).
    ///
    /// ```
    /// use agent_surface_mcp::mrtr::ApprovalStates;
    /// use rmcp::model::RequestStateCodec;
    ///
    /// let codec = RequestStateCodec::new_with_keyring("2026-12", [("2026-12", [7u8; 32].to_vec())]).unwrap();
    /// let states = ApprovalStates::new(codec);
    /// # let _ = states;
    /// ```
    pub fn new(codec: RequestStateCodec) -> ApprovalStates {
        ApprovalStates { codec: Arc::new(codec), ephemeral: false }
    }

    /// Seals with a random 256-bit key drawn from the operating system for this process only.
    ///
    /// # Panics
    ///
    /// When the operating system has no random source (`getrandom` fails), which no supported
    /// platform does once booted (see [`agent_surface_core::id::fill_random`]).
    pub fn ephemeral() -> ApprovalStates {
        let mut key = [0u8; 32];
        agent_surface_core::id::fill_random(&mut key);
        let codec = RequestStateCodec::new_with_keyring("ephemeral", [("ephemeral", key.to_vec())])
            .unwrap_or_else(|_| RequestStateCodec::new_unchecked(key.to_vec()));
        ApprovalStates { codec: Arc::new(codec), ephemeral: true }
    }

    /// Whether these states were drawn by [`ephemeral`](Self::ephemeral) (the default of
    /// `McpConfig`) rather than given with [`new`](Self::new): a server built on the adapter can
    /// tell the states an application gave from the default it may replace.
    ///
    /// ```
    /// use agent_surface_mcp::mrtr::ApprovalStates;
    /// use rmcp::model::RequestStateCodec;
    ///
    /// assert!(ApprovalStates::ephemeral().is_ephemeral());
    /// let codec = RequestStateCodec::new_with_keyring("k", [("k", [7u8; 32].to_vec())]).unwrap();
    /// assert!(!ApprovalStates::new(codec).is_ephemeral());
    /// ```
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// The associated data a state is bound to: the tool and the digest of its arguments.
    fn bound_to(tool: &str, arguments: &Value) -> Vec<u8> {
        let mut ad = Vec::with_capacity(96 + tool.len());
        ad.extend_from_slice(b"agent-surface/confirm/v1\0");
        ad.extend_from_slice(tool.as_bytes());
        ad.push(0);
        ad.extend_from_slice(Fingerprint::of(arguments).to_string().as_bytes());
        ad
    }

    /// Seals a state for `consumer`'s call of `tool` with `arguments`, carrying the dialogue's
    /// answers (those the call ran with: [`Dialogue::first`], [`Dialogue::answered`]) and the
    /// approval asked for; `None` when the answers are over [`MAX_STATE_ANSWERS_BYTES`] or
    /// sealing fails (logged).
    pub(crate) fn seal(
        &self,
        tool: &str,
        arguments: &Value,
        consumer: &Consumer,
        dialogue: &Dialogue,
        approval: Option<Approval>,
        now: agent_surface_core::Timestamp,
    ) -> Option<String> {
        // The answers the call ran with travel on; which ones a round may add is decided when
        // the round is opened (`Dialogue::first`, `Dialogue::answered`).
        let answers = dialogue.answers.clone();
        let size = serde_json::to_vec(&answers).map(|b| b.len()).unwrap_or(usize::MAX);
        if size > MAX_STATE_ANSWERS_BYTES || dialogue.rounds > MAX_ROUNDS {
            tracing::info!(target: "agent_surface::mcp", bytes = size, rounds = dialogue.rounds, "the call's answers cannot travel on in a request state");
            return None;
        }
        // The codec's own expiry (on the system clock) is a backstop: an approval's expiry is
        // checked on the registry's clock first.
        let ttl = match &approval {
            Some(a) => std::time::Duration::from_millis(a.exp.saturating_sub(now.unix_millis())) + STATE_TTL,
            None => STATE_TTL,
        };
        let state = CallState {
            v: FORMAT,
            key: consumer.key().to_string(),
            auth: consumer.identity().is_some(),
            answers,
            asked: dialogue.asked.clone(),
            rounds: dialogue.rounds,
            approval,
        };
        let ad = Self::bound_to(tool, arguments);
        match self.codec.seal_json_with(&state, &SealOptions::new().associated_data(&ad).ttl(ttl)) {
            Ok(sealed) => Some(sealed),
            Err(e) => {
                tracing::warn!(target: "agent_surface::mcp", error = %agent_surface_policy::redacted(&e), "cannot seal a request state");
                None
            }
        }
    }

    /// Opens a state presented with a call of `tool` with `arguments` by `consumer`, and returns
    /// it with the consumer the call continues under.
    pub(crate) fn open(
        &self,
        sealed: &str,
        tool: &str,
        arguments: &Value,
        consumer: &Consumer,
    ) -> Result<(CallState, Consumer), StateRefused> {
        let ad = Self::bound_to(tool, arguments);
        let state: CallState = self.codec.open_json_with(sealed, &ad).map_err(|e| match e {
            RequestStateError::Expired => StateRefused::Expired,
            e => StateRefused::Open(e),
        })?;
        if state.v != FORMAT {
            return Err(StateRefused::Format(state.v));
        }
        let continues = match (state.auth, consumer.identity()) {
            // The same principal, whichever replica or connection it calls through.
            (true, Some(_)) if state.key == consumer.key() => consumer.clone(),
            // An anonymous caller continues the anonymous call the state was issued for.
            (false, None) => Consumer::anonymous(state.key.clone()),
            _ => return Err(StateRefused::Principal),
        };
        Ok((state, continues))
    }
}

/// The approval question: an elicitation form without fields, the summary as its message; or,
/// for an approval with a page, a URL-mode elicitation sending the person there.
pub(crate) fn question(approval: &Approval) -> InputRequests {
    let summary = &approval.msg;
    let params = match &approval.url {
        Some(url) => ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: format!(
                "This action needs a person's approval: {summary} Send the link to its approval page to someone who may approve it: the person who made a request cannot approve it there."
            ),
            url: url.clone(),
            // 2026-07-28 has no elicitation id.
            elicitation_id: String::new(),
        },
        None => ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("The assistant asks for your approval: {summary} Approve this action?"),
            requested_schema: ElicitationSchema::new(BTreeMap::new()),
        },
    };
    let mut requests = InputRequests::new();
    requests.insert(CONFIRM_KEY.to_string(), InputRequest::Elicitation(ElicitRequest::new(params)));
    requests
}

/// The input-required result asking for `approval` with `state`.
pub(crate) fn input_required(approval: &Approval, state: String) -> InputRequiredResult {
    InputRequiredResult::new(Some(question(approval)), Some(state))
}

/// Whether the client declared URL-mode elicitation.
pub(crate) fn can_open_urls(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities.and_then(|c| c.elicitation.as_ref()).is_some_and(|e| e.url.is_some())
}

/// What a client can answer, from the capabilities it declared.
pub(crate) fn abilities(capabilities: Option<&ClientCapabilities>) -> agent_surface_registry::Abilities {
    let Some(c) = capabilities else { return agent_surface_registry::Abilities::default() };
    let form = c.elicitation.as_ref().is_some_and(|e| e.form.is_some() || e.url.is_none());
    agent_surface_registry::Abilities::new(form, c.sampling.is_some(), c.roots.is_some())
}

/// The client capabilities the questions need that `abilities` lacks, if any.
pub(crate) fn missing(
    questions: &[Question],
    abilities: agent_surface_registry::Abilities,
) -> Option<ClientCapabilities> {
    let mut required = ClientCapabilities::default();
    let mut lacking = false;
    for q in questions.iter().filter(|q| !abilities.can(&q.ask)) {
        lacking = true;
        match &q.ask {
            Ask::Form { .. } => required.elicitation = Some(ElicitationCapability::new()),
            Ask::Sample { .. } => required.sampling = Some(SamplingCapability::default()),
            Ask::Roots => required.roots = Some(RootsCapabilities::default()),
            _ => {}
        }
    }
    lacking.then_some(required)
}

/// The input requests for `questions` (`None` when one cannot be expressed, or uses the reserved
/// key [`CONFIRM_KEY`]: logged).
pub(crate) fn requests(questions: &[Question]) -> Option<InputRequests> {
    let mut requests = InputRequests::new();
    for q in questions {
        if q.key == CONFIRM_KEY {
            tracing::warn!(target: "agent_surface::mcp", key = %q.key, "a question uses the key reserved for approvals");
            return None;
        }
        let wire = match &q.ask {
            Ask::Form { message, schema } => json!({
                "method": "elicitation/create",
                "params": {"mode": "form", "message": message, "requestedSchema": schema},
            }),
            Ask::Sample { params } => json!({"method": "sampling/createMessage", "params": params}),
            Ask::Roots => json!({"method": "roots/list", "params": {}}),
            _ => return None,
        };
        match InputRequest::deserialize(&wire) {
            Ok(request) => {
                requests.insert(q.key.clone(), request);
            }
            Err(e) => {
                tracing::warn!(target: "agent_surface::mcp", key = %q.key, error = %agent_surface_policy::redacted(&e), "a question cannot be sent as an input request");
                return None;
            }
        }
    }
    Some(requests)
}

/// The person's answer found in `inputResponses`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// No answer under [`CONFIRM_KEY`].
    Missing,
    /// Accepted.
    Accept,
    /// Declined or dismissed.
    Decline,
}

/// Reads the answer to the approval question; `Err` when it is not an elicitation result.
pub(crate) fn answer(responses: Option<&BTreeMap<String, Value>>) -> Result<Answer, serde_json::Error> {
    let Some(value) = responses.and_then(|r| r.get(CONFIRM_KEY)) else { return Ok(Answer::Missing) };
    let result = ElicitResult::deserialize(value)?;
    Ok(match result.action {
        ElicitationAction::Accept => Answer::Accept,
        _ => Answer::Decline,
    })
}
