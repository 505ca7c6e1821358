//! [`InvokeResult`]: what `invoke` returns — a discriminated union, never an exception.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::code::ErrorCode;
use crate::message::Sends;
use crate::payload::ErrorPayload;

/// The result of one invocation: `{"status":"ok","output":…}` or
/// `{"status":"error","error":{…}}`, with the invocation id when there is one.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use serde_json::json;
///
/// let ok = InvokeResult::ok(json!({"total": 3}), Some("inv-1".into()));
/// assert_eq!(serde_json::to_value(&ok).unwrap(), json!({"status": "ok", "output": {"total": 3}, "invocationId": "inv-1"}));
///
/// let err = InvokeResult::error(AgentSurfaceError::cancelled().into_payload(), None);
/// let json = serde_json::to_value(&err).unwrap();
/// assert_eq!(json["status"], "error");
/// assert_eq!(json["error"]["code"], "CANCELLED");
/// assert_eq!(serde_json::from_value::<InvokeResult>(json).unwrap(), err);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
#[non_exhaustive]
pub enum InvokeResult {
    /// The capability ran and produced this output.
    Ok {
        /// The output, validated against the output schema when there is one.
        output: Value,
        /// The invocation id the call carried.
        #[serde(rename = "invocationId", default, skip_serializing_if = "Option::is_none")]
        invocation_id: Option<String>,
    },
    /// The call failed with this agent-safe payload.
    Error {
        /// The payload.
        error: ErrorPayload,
        /// The invocation id the call carried.
        #[serde(rename = "invocationId", default, skip_serializing_if = "Option::is_none")]
        invocation_id: Option<String>,
    },
}

impl InvokeResult {
    /// A success.
    pub fn ok(output: Value, invocation_id: Option<String>) -> Self {
        InvokeResult::Ok { output, invocation_id }
    }

    /// A failure.
    pub fn error(error: ErrorPayload, invocation_id: Option<String>) -> Self {
        InvokeResult::Error { error, invocation_id }
    }

    /// Whether the call succeeded.
    pub fn is_ok(&self) -> bool {
        matches!(self, InvokeResult::Ok { .. })
    }

    /// The output of a success.
    pub fn output(&self) -> Option<&Value> {
        match self {
            InvokeResult::Ok { output, .. } => Some(output),
            InvokeResult::Error { .. } => None,
        }
    }

    /// The payload of a failure.
    pub fn error_payload(&self) -> Option<&ErrorPayload> {
        match self {
            InvokeResult::Ok { .. } => None,
            InvokeResult::Error { error, .. } => Some(error),
        }
    }

    /// The error payload, mutable (`None` on success): for the runtime, which states on it what
    /// only it knows (`notProcessed`, the correlation id).
    pub fn error_payload_mut(&mut self) -> Option<&mut ErrorPayload> {
        match self {
            InvokeResult::Ok { .. } => None,
            InvokeResult::Error { error, .. } => Some(error),
        }
    }

    /// The result without its correlation id: what two calls answered alike have in common
    /// (each call has its own id), e.g. to show that a hidden capability and a missing one get
    /// the same answer, or that a replay gives the recorded one.
    #[must_use]
    pub fn without_correlation_id(&self) -> InvokeResult {
        let mut result = self.clone();
        if let Some(payload) = result.error_payload_mut() {
            payload.set_correlation_id(None);
        }
        result
    }

    /// The result as an agent reads it through a binding that lets it send `sends`: a failure's
    /// message worded for that binding ([`ErrorPayload::worded_for`]); anything else unchanged.
    pub fn worded_for(&self, sends: Sends) -> Cow<'_, InvokeResult> {
        match self {
            InvokeResult::Error { error, invocation_id } => match error.worded_for(sends) {
                Cow::Owned(error) => Cow::Owned(InvokeResult::Error { error, invocation_id: invocation_id.clone() }),
                Cow::Borrowed(_) => Cow::Borrowed(self),
            },
            InvokeResult::Ok { .. } => Cow::Borrowed(self),
        }
    }

    /// The code of a failure.
    pub fn code(&self) -> Option<ErrorCode> {
        self.error_payload().map(ErrorPayload::code)
    }

    /// The invocation id.
    pub fn invocation_id(&self) -> Option<&str> {
        match self {
            InvokeResult::Ok { invocation_id, .. } | InvokeResult::Error { invocation_id, .. } => {
                invocation_id.as_deref()
            }
        }
    }

    /// The same result with another invocation id (used when a stored result is replayed).
    pub fn with_invocation_id(mut self, id: Option<String>) -> Self {
        match &mut self {
            InvokeResult::Ok { invocation_id, .. } | InvokeResult::Error { invocation_id, .. } => *invocation_id = id,
        }
        self
    }

    /// The result as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
