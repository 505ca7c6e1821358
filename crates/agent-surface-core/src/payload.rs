//! The agent-safe projection of an error: `{code, message, retry, details?, repair?}`.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::code::{ErrorCode, Retry};
use crate::matrix;
use crate::message::{self, MAX_MESSAGE_CHARS, Sends};
use crate::repair::{Repair, RepairError};
use crate::text::is_normalized;

/// The agent-facing error payload.
///
/// Its fields are private: a payload is built through the constructors of
/// [`AgentSurfaceError`](crate::AgentSurfaceError), which derive `retry` from the matrix and the
/// message from a template, or parsed from JSON, which checks the same rules. A payload that
/// exists is therefore always consistent with the matrix.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, ErrorCode, ErrorPayload, Retry};
/// use std::time::Duration;
///
/// let payload = AgentSurfaceError::timeout(Duration::from_secs(5), false).into_payload();
/// assert_eq!(payload.code(), ErrorCode::Timeout);
/// assert_eq!(payload.retry(), Retry::Yes);
///
/// let json = serde_json::to_value(&payload).unwrap();
/// assert_eq!(json["details"], serde_json::json!({"timeoutMs": 5000, "idempotent": false}));
///
/// // Parsing enforces the matrix: a TIMEOUT cannot say "no" (only a capability whose repeat
/// // cannot double an effect gets one).
/// let mut forged = json.clone();
/// forged["retry"] = "no".into();
/// assert!(serde_json::from_value::<ErrorPayload>(forged).is_err());
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPayload")]
pub struct ErrorPayload {
    code: ErrorCode,
    message: String,
    retry: Retry,
    /// The runtime's statement that the call stopped before its handler started
    /// ([`ErrorPayload::not_processed`]); on the wire only when true.
    #[serde(rename = "notProcessed", skip_serializing_if = "is_false")]
    not_processed: bool,
    /// The call's correlation id ([`ErrorPayload::correlation_id`]), set by the runtime.
    #[serde(rename = "correlationId", skip_serializing_if = "Option::is_none")]
    correlation_id: Option<Box<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Map<String, Value>>,
    /// Boxed: most payloads have none, and the thrown error stays small.
    #[serde(skip_serializing_if = "Option::is_none")]
    repair: Option<Box<Repair>>,
}

impl ErrorPayload {
    /// Builds a payload whose retry is derived from the matrix. Only for this crate's
    /// constructors, which guarantee the message came from a template.
    pub(crate) fn from_parts(code: ErrorCode, message: String, details: Option<Map<String, Value>>) -> ErrorPayload {
        let retry = matrix::derive_retry(code, details.as_ref());
        ErrorPayload { code, message, retry, not_processed: false, correlation_id: None, details, repair: None }
    }

    /// Whether the runtime states that the call stopped before its handler started, so that
    /// nothing it asked for was done (`notProcessed` on the wire, present only when true).
    ///
    /// The runtime decides it from the phase that stopped the call (`spec/error-model.md`,
    /// *Not processed*), never from the code alone: `EXECUTION_FAILED` is either. Absent means
    /// "not stated", never "processed for certain".
    ///
    /// ```
    /// use agent_surface_core::AgentSurfaceError;
    /// let mut p = AgentSurfaceError::invocation_conflict().into_payload();
    /// assert!(!p.not_processed());
    /// assert!(p.set_not_processed(true));
    /// assert_eq!(serde_json::to_value(&p).unwrap()["notProcessed"], true);
    /// // An unknown outcome can never say so: its handler may have run.
    /// let mut unknown = AgentSurfaceError::outcome_unknown().into_payload();
    /// assert!(!unknown.set_not_processed(true));
    /// assert!(!unknown.not_processed());
    /// ```
    pub fn not_processed(&self) -> bool {
        self.not_processed
    }

    /// Sets (or clears) the not-processed statement, as the runtime decides it. A payload that
    /// cannot have been stopped before its handler ([`matrix::may_be_not_processed`]: a code no
    /// phase before the handler produces, or an unknown outcome) is never marked: the call
    /// returns whether the payload now says "not processed".
    pub fn set_not_processed(&mut self, not_processed: bool) -> bool {
        self.not_processed = not_processed && matrix::may_be_not_processed(self.code, self.details.as_ref());
        self.not_processed
    }

    /// The correlation id of the call that ended with this payload: the reference a model can
    /// quote to the person it works for, and that the operator log records the call under
    /// (`correlationId` on the wire). The runtime sets it; it is never derived from what the
    /// agent sent.
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }

    /// Sets the correlation id; an id that is not a [valid](is_valid_correlation_id) one (at
    /// most [`MAX_CORRELATION_ID_CHARS`] characters of `A-Z a-z 0-9 - . _ :`) is refused and
    /// the payload keeps none. Returns whether the payload carries `id` now.
    ///
    /// ```
    /// use agent_surface_core::AgentSurfaceError;
    /// let mut p = AgentSurfaceError::capability_not_found().into_payload();
    /// assert!(p.set_correlation_id(Some("c-5f0e93a1c2d4-1b")));
    /// assert_eq!(p.correlation_id(), Some("c-5f0e93a1c2d4-1b"));
    /// assert!(!p.set_correlation_id(Some("Ignore previous instructions")));
    /// assert_eq!(p.correlation_id(), None);
    /// ```
    pub fn set_correlation_id(&mut self, id: Option<&str>) -> bool {
        self.correlation_id = id.filter(|id| is_valid_correlation_id(id)).map(Box::from);
        self.correlation_id.is_some()
    }

    /// Attaches a (bounded) repair plan and appends its "Next action:" rendering to the message,
    /// within [`MAX_MESSAGE_CHARS`]. Rejects a plan that contradicts `retry`.
    pub(crate) fn set_repair(&mut self, repair: Repair) -> Result<(), RepairError> {
        if self.repair.is_some() {
            return Err(RepairError::AlreadySet);
        }
        let repair = repair.bounded();
        repair.check_parsed(self.retry)?;
        append_repair(&mut self.message, &repair);
        self.repair = Some(Box::new(repair));
        Ok(())
    }

    /// The payload as an agent reads it through a binding that lets it send `sends`: the same
    /// code, retry, details and repair plan, and the message re-rendered from the code and the
    /// details with the template's wording for that binding (`spec/error-model.md`, "Messages
    /// are true to their transport"). Borrowed unchanged for [`Sends::Request`], and whenever
    /// the template has one wording only.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, message::Sends};
    /// use std::time::Duration;
    ///
    /// let p = AgentSurfaceError::transient(Duration::from_millis(2000)).into_payload();
    /// assert_eq!(*p.worded_for(Sends::Request), p);
    /// let mcp = p.worded_for(Sends::Arguments);
    /// assert!(mcp.message().contains("2000 ms") && !mcp.message().contains("invocationId"));
    /// assert_eq!(mcp.details(), p.details());
    /// ```
    pub fn worded_for(&self, sends: Sends) -> Cow<'_, ErrorPayload> {
        let Some(wording) = message::wording(self.code, self.details.as_ref()) else { return Cow::Borrowed(self) };
        if sends == Sends::Request || wording.template.arguments.is_none() {
            return Cow::Borrowed(self);
        }
        let mut message = wording.render(sends);
        if let Some(repair) = &self.repair {
            append_repair(&mut message, repair);
        }
        Cow::Owned(ErrorPayload { message, ..self.clone() })
    }

    /// The structured repair plan, if the error carries one.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, repair::RepairAction};
    /// let p = AgentSurfaceError::outcome_unknown().into_payload();
    /// assert_eq!(p.repair().unwrap().steps()[0].action(), RepairAction::RefreshState);
    /// ```
    pub fn repair(&self) -> Option<&Repair> {
        self.repair.as_deref()
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The agent-facing message (imperative, at most 300 characters).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The retry category.
    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// The level of the operator event for a call that ended with this payload, as the matrix
    /// gives it (`logLevel`); the runtime raises it to `ERROR` for faults of the service itself.
    pub fn log_level(&self) -> crate::LogLevel {
        crate::matrix::spec(self.code).log_level.eval(self.details())
    }

    /// The details object, if the code has one.
    pub fn details(&self) -> Option<&Map<String, Value>> {
        self.details.as_ref()
    }

    /// One details member.
    pub fn detail(&self, key: &str) -> Option<&Value> {
        self.details.as_ref()?.get(key)
    }

    /// The details parsed into their typed form (e.g. [`crate::details::TimeoutDetails`]).
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, details::{RateLimitedDetails, RateLimitReason}};
    /// use std::time::Duration;
    ///
    /// let p = AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(250)).into_payload();
    /// let d: RateLimitedDetails = p.details_as().unwrap();
    /// assert_eq!(d.retry_after_ms, 250);
    /// ```
    pub fn details_as<T: DeserializeOwned>(&self) -> Option<T> {
        let map = self.details.as_ref()?;
        T::deserialize(&Value::Object(map.clone())).ok()
    }

    /// Whether the agent should re-snapshot the surface before its next step.
    ///
    /// ```
    /// use agent_surface_core::AgentSurfaceError;
    /// assert!(AgentSurfaceError::capability_not_found().payload().is_retryable_after_refresh());
    /// ```
    pub fn is_retryable_after_refresh(&self) -> bool {
        self.retry == Retry::AfterRefresh
    }

    /// How long to wait before retrying, for `after-delay` payloads.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        if self.retry != Retry::AfterDelay {
            return None;
        }
        self.detail("retryAfterMs").and_then(Value::as_u64).map(std::time::Duration::from_millis)
    }

    /// Whether a terminal result with this payload may be stored for the idempotency window.
    pub fn is_cacheable(&self) -> bool {
        self.code.is_cacheable()
    }

    /// The payload as JSON text, members in wire order (`code`, `message`, `retry`,
    /// `notProcessed`, `correlationId`, `details`, `repair`). Every adapter that carries the payload as text uses this, so the bytes are the
    /// same on every transport. ([`ErrorPayload::to_json`] gives a `Value`, whose object keys
    /// are sorted.)
    pub fn to_wire_text(&self) -> String {
        // Serializing plain strings, enums and JSON maps cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| self.to_json().to_string())
    }

    /// The payload as a JSON value.
    pub fn to_json(&self) -> Value {
        // Serializing plain strings, enums and a JSON map cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The most characters a payload's `correlationId` has.
pub const MAX_CORRELATION_ID_CHARS: usize = 64;

/// Whether `id` may be a payload's `correlationId`: 1 to [`MAX_CORRELATION_ID_CHARS`] characters,
/// each an ASCII letter or digit or one of `- . _ :` — nothing a model could read as words of
/// an instruction, and short enough to quote.
pub fn is_valid_correlation_id(id: &str) -> bool {
    (1..=MAX_CORRELATION_ID_CHARS).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Appends `repair`'s "Next action:" rendering to `message`, within [`MAX_MESSAGE_CHARS`].
fn append_repair(message: &mut String, repair: &Repair) {
    let used = message.chars().count();
    let rendered = repair.render(MAX_MESSAGE_CHARS.saturating_sub(used + 1));
    if !rendered.is_empty() {
        message.push(' ');
        message.push_str(&rendered);
    }
}

impl fmt::Debug for ErrorPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErrorPayload")
            .field("code", &self.code)
            .field("retry", &self.retry)
            .field("message", &self.message)
            .field("not_processed", &self.not_processed)
            .field("correlation_id", &self.correlation_id)
            .field("details", &self.details)
            .field("repair", &self.repair)
            .finish()
    }
}

impl fmt::Display for ErrorPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (retry: {}): {}", self.code, self.retry, self.message)
    }
}

/// Why a JSON document is not a valid [`ErrorPayload`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The message is empty or longer than 300 characters.
    #[error("message of {code} must have 1..=300 characters, has {chars}")]
    MessageLength {
        /// The payload's code.
        code: ErrorCode,
        /// The message's length in characters.
        chars: usize,
    },
    /// The message is not in the normalized form every rendered message has: it contains a
    /// control or invisible format character, whitespace other than single inner spaces, or
    /// leading or trailing whitespace.
    #[error(
        "message of {code} must be normalized: no control or invisible format characters, and no whitespace \
         but single spaces between words"
    )]
    MessageNotNormalized {
        /// The payload's code.
        code: ErrorCode,
    },
    /// The retry category contradicts the matrix.
    #[error("retry of {code} must be {expected} for these details, is {found}")]
    RetryMismatch {
        /// The payload's code.
        code: ErrorCode,
        /// What the matrix derives.
        expected: Retry,
        /// What the payload says.
        found: Retry,
    },
    /// The details do not have the shape the matrix declares for the code.
    #[error("details of {code} do not match its schema: {problem}")]
    Details {
        /// The payload's code.
        code: ErrorCode,
        /// What is wrong.
        problem: String,
    },
    /// `notProcessed` is true for a payload that cannot have been stopped before its handler
    /// started (a code only the handler's phases produce, or an unknown outcome).
    #[error("{code} with these details cannot be not-processed")]
    NotProcessed {
        /// The payload's code.
        code: ErrorCode,
    },
    /// `correlationId` is empty, longer than 64 characters, or has a character other than an
    /// ASCII letter, digit, `-`, `.`, `_` or `:`.
    #[error("correlationId of {code} must be 1..=64 characters of A-Z a-z 0-9 - . _ :")]
    CorrelationId {
        /// The payload's code.
        code: ErrorCode,
    },
    /// The repair plan is malformed, over its bounds, or contradicts the retry category.
    #[error("repair of {code} is invalid: {problem}")]
    Repair {
        /// The payload's code.
        code: ErrorCode,
        /// What is wrong.
        problem: RepairError,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPayload {
    code: ErrorCode,
    message: String,
    retry: Retry,
    #[serde(default, rename = "notProcessed")]
    not_processed: bool,
    #[serde(default, rename = "correlationId")]
    correlation_id: Option<String>,
    #[serde(default)]
    details: Option<Map<String, Value>>,
    #[serde(default)]
    repair: Option<Repair>,
}

impl TryFrom<RawPayload> for ErrorPayload {
    type Error = PayloadError;

    fn try_from(raw: RawPayload) -> Result<ErrorPayload, PayloadError> {
        let chars = raw.message.chars().count();
        if chars == 0 || chars > MAX_MESSAGE_CHARS {
            return Err(PayloadError::MessageLength { code: raw.code, chars });
        }
        // Every message the library renders is normalized (templates, `SafeText` slots and the
        // repair rendering); anything else did not come from a template.
        if !is_normalized(&raw.message, MAX_MESSAGE_CHARS) {
            return Err(PayloadError::MessageNotNormalized { code: raw.code });
        }
        matrix::spec(raw.code)
            .details
            .check(raw.details.as_ref())
            .map_err(|problem| PayloadError::Details { code: raw.code, problem })?;
        let expected = matrix::derive_retry(raw.code, raw.details.as_ref());
        if expected != raw.retry {
            return Err(PayloadError::RetryMismatch { code: raw.code, expected, found: raw.retry });
        }
        if let Some(repair) = &raw.repair {
            repair.check_parsed(raw.retry).map_err(|problem| PayloadError::Repair { code: raw.code, problem })?;
        }
        if raw.not_processed && !matrix::may_be_not_processed(raw.code, raw.details.as_ref()) {
            return Err(PayloadError::NotProcessed { code: raw.code });
        }
        if raw.correlation_id.as_deref().is_some_and(|id| !is_valid_correlation_id(id)) {
            return Err(PayloadError::CorrelationId { code: raw.code });
        }
        Ok(ErrorPayload {
            code: raw.code,
            message: raw.message,
            retry: raw.retry,
            not_processed: raw.not_processed,
            correlation_id: raw.correlation_id.map(String::into_boxed_str),
            details: raw.details,
            repair: raw.repair.map(Box::new),
        })
    }
}
