//! Confirmation for modern clients (MCP 2026-07-28): the input-required round trip.
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

use agent_surface_core::Timestamp;
use agent_surface_policy::{Consumer, Fingerprint};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, InputRequiredResult, RequestStateCodec, RequestStateError, SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of the approval question in `inputRequests` / `inputResponses`.
pub const CONFIRM_KEY: &str = "agent-surface/confirm";

/// The format version of a sealed approval state.
const FORMAT: u8 = 1;

/// Seals and opens the `requestState` of pending approvals.
///
/// Every replica that may take a retry must seal with the same keys: build it from a shared
/// keyring ([`ApprovalStates::new`] over `RequestStateCodec::new_with_keyring`, which also
/// rotates keys). [`ApprovalStates::ephemeral`] draws a random key for this process only —
/// enough for one server, useless across replicas or restarts (a state from before a restart
/// then fails to open and is answered `-32602`).
#[derive(Clone)]
pub struct ApprovalStates {
    codec: Arc<RequestStateCodec>,
}

impl std::fmt::Debug for ApprovalStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalStates").finish_non_exhaustive()
    }
}

/// What a sealed approval state says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ApprovalState {
    /// The format version ([`FORMAT`]).
    v: u8,
    /// The confirmation id.
    pub(crate) cid: String,
    /// The consumer key the confirmation was issued to.
    pub(crate) key: String,
    /// Whether that consumer was authenticated (its key is then a principal).
    pub(crate) auth: bool,
    /// The summary shown to the person.
    pub(crate) msg: String,
    /// When the confirmation expires, in Unix milliseconds on the registry's clock.
    pub(crate) exp: u64,
}

/// Why a presented state was refused (operator channel only; the client gets one `-32602`).
#[derive(Debug)]
pub(crate) enum StateRefused {
    /// The state did not open (tampered, unknown key, other tool or arguments, bad format).
    Open(RequestStateError),
    /// The state is of another format version.
    Format(u8),
    /// The state was issued to another consumer.
    Principal,
}

impl std::fmt::Display for StateRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateRefused::Open(e) => write!(f, "request state does not open: {e}"),
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
        ApprovalStates { codec: Arc::new(codec) }
    }

    /// Seals with a random 256-bit key drawn from the operating system for this process only.
    ///
    /// # Panics
    ///
    /// When the operating system has no random source (`getrandom` fails), which no supported
    /// platform does once booted.
    pub fn ephemeral() -> ApprovalStates {
        let mut key = [0u8; 32];
        #[allow(clippy::expect_used, reason = "no usable system without a random source; documented above")]
        getrandom::fill(&mut key).expect("the operating system's random source");
        let codec = RequestStateCodec::new_with_keyring("ephemeral", [("ephemeral", key.to_vec())])
            .unwrap_or_else(|_| RequestStateCodec::new_unchecked(key.to_vec()));
        ApprovalStates::new(codec)
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

    /// Seals the state of the approval of `confirmation_id`, issued to `consumer` for calling
    /// `tool` with `arguments`.
    pub(crate) fn seal(
        &self,
        tool: &str,
        arguments: &Value,
        consumer: &Consumer,
        confirmation_id: &str,
        summary: &str,
        expires_at: Timestamp,
    ) -> Option<String> {
        let state = ApprovalState {
            v: FORMAT,
            cid: confirmation_id.to_string(),
            key: consumer.key().to_string(),
            auth: consumer.identity().is_some(),
            msg: summary.to_string(),
            exp: expires_at.unix_millis(),
        };
        let ad = Self::bound_to(tool, arguments);
        match self.codec.seal_json_with(&state, &SealOptions::new().associated_data(&ad)) {
            Ok(sealed) => Some(sealed),
            Err(e) => {
                tracing::warn!(target: "agent_surface::mcp", error = %e, "cannot seal an approval state");
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
    ) -> Result<(ApprovalState, Consumer), StateRefused> {
        let ad = Self::bound_to(tool, arguments);
        let state: ApprovalState = self.codec.open_json_with(sealed, &ad).map_err(StateRefused::Open)?;
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

/// The approval question: an elicitation form without fields, the summary as its message.
pub(crate) fn question(summary: &str) -> InputRequests {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("The assistant asks for your approval: {summary} Approve this action?"),
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    };
    let mut requests = InputRequests::new();
    requests.insert(CONFIRM_KEY.to_string(), InputRequest::Elicitation(ElicitRequest::new(params)));
    requests
}

/// The input-required result asking `summary` with `state`.
pub(crate) fn input_required(summary: &str, state: String) -> InputRequiredResult {
    InputRequiredResult::new(Some(question(summary)), Some(state))
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
