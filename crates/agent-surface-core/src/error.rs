//! [`AgentSurfaceError`]: the thrown form used inside handlers and policies.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::code::{Effect, ErrorCode};
use crate::details::*;
use crate::message::{self, Sends, Template, is_quotable, render};
use crate::payload::ErrorPayload;
use crate::repair::{Repair, RepairAction, RepairError, RepairStep};
use crate::text::SafeText;
use crate::time::Timestamp;

/// A boxed private cause.
pub type Cause = Box<dyn StdError + Send + Sync + 'static>;

/// The error a handler or a policy returns: an agent-safe [`ErrorPayload`] plus a private cause.
///
/// There is one constructor per code; each derives `retry` from the matrix and renders the message
/// from a template, so a handler cannot produce a payload that contradicts the specification.
///
/// The cause is for the operator channel only: neither the payload's serialization nor this type's
/// `Display` or `Debug` show it. Read it with [`AgentSurfaceError::cause`].
///
/// Like `anyhow::Error`, this type does not implement [`std::error::Error`]; that is what lets
/// `?` turn *any* error into it. Such a conversion produces a sanitized
/// `EXECUTION_FAILED {reason: handler-error}` whose message is a fixed template, never the
/// cause's text:
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, ErrorCode};
///
/// fn load() -> Result<u32, AgentSurfaceError> {
///     let n: u32 = "SELECT secret FROM users".parse()?; // a std error with a hostile text
///     Ok(n)
/// }
///
/// let err = load().unwrap_err();
/// assert_eq!(err.code(), ErrorCode::ExecutionFailed);
/// assert!(!serde_json::to_string(err.payload()).unwrap().contains("SELECT"));
/// assert!(!format!("{err} {err:?}").contains("SELECT"));
/// assert!(err.cause().is_some()); // kept for the operator channel
/// ```
pub struct AgentSurfaceError {
    payload: ErrorPayload,
    cause: Option<Cause>,
}

fn to_map<T: Serialize>(details: &T) -> Map<String, Value> {
    match serde_json::to_value(details) {
        Ok(Value::Object(map)) => map,
        // Every details type is a struct of plain values, so it always serializes to an object.
        _ => Map::new(),
    }
}

impl AgentSurfaceError {
    fn build(code: ErrorCode, template: Template, slots: &[(&str, &str)], details: Option<Map<String, Value>>) -> Self {
        AgentSurfaceError {
            payload: ErrorPayload::from_parts(code, render(template.text, slots), details),
            cause: None,
        }
    }

    /// A payload whose message its code and details decide ([`message::wording`]), worded for
    /// the whole request ([`Sends::Request`]); adapters word it for their binding.
    fn worded(code: ErrorCode, details: Option<Map<String, Value>>) -> Self {
        let message = match message::wording(code, details.as_ref()) {
            Some(wording) => wording.render(Sends::Request),
            // Unreachable for the constructors that call this (a test builds each of them).
            None => render(message::HANDLER_ERROR.text, &[]),
        };
        AgentSurfaceError { payload: ErrorPayload::from_parts(code, message, details), cause: None }
    }

    fn with_details<T: Serialize>(code: ErrorCode, template: Template, slots: &[(&str, &str)], details: &T) -> Self {
        Self::build(code, template, slots, Some(to_map(details)))
    }

    /// `CAPABILITY_NOT_FOUND` (no details, so hidden and missing look the same).
    pub fn capability_not_found() -> Self {
        Self::build(ErrorCode::CapabilityNotFound, message::NOT_FOUND, &[], None)
    }

    /// `CAPABILITY_NOT_AVAILABLE {reason}`; the reason is the descriptor's `unavailableReason`.
    pub fn capability_not_available(reason: impl Into<SafeText>) -> Self {
        let reason = reason.into();
        let mut shown = reason.as_str().to_string();
        if shown.is_empty() {
            shown.push_str("The capability is switched off.");
        } else if !shown.ends_with(['.', '!', '?']) {
            shown.push('.');
        }
        Self::with_details(
            ErrorCode::CapabilityNotAvailable,
            message::NOT_AVAILABLE,
            &[("reason", &shown)],
            &NotAvailableDetails { reason: reason.as_str().to_string() },
        )
    }

    /// `AMBIGUOUS_INSTANCE {instances}`.
    pub fn ambiguous_instance(instances: Vec<InstanceRef>) -> Self {
        Self::with_details(ErrorCode::AmbiguousInstance, message::AMBIGUOUS, &[], &AmbiguousDetails { instances })
    }

    /// `COMPONENT_UNMOUNTED {phase}`.
    pub fn component_unmounted(phase: UnmountPhase) -> Self {
        Self::worded(ErrorCode::ComponentUnmounted, Some(to_map(&UnmountedDetails { phase })))
    }

    /// `STALE_CAPABILITY {reason, liveRegistrationId?}`.
    pub fn stale_capability(reason: StaleReason, live_registration_id: Option<String>) -> Self {
        let details = StaleDetails { reason, live_registration_id, live_tool_version: None };
        Self::worded(ErrorCode::StaleCapability, Some(to_map(&details)))
    }

    /// `STALE_CAPABILITY {reason: tool-version-mismatch, liveToolVersion}` (retry `after-refresh`):
    /// the call named a version of its tool that is not the live one (see [`crate::tool_version`]).
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry};
    /// let p = AgentSurfaceError::stale_tool_version("3f1c0a9b2d4e6f8071a2").into_payload();
    /// assert_eq!((p.code(), p.retry()), (ErrorCode::StaleCapability, Retry::AfterRefresh));
    /// let details = p.details().unwrap();
    /// assert_eq!(details["reason"], "tool-version-mismatch");
    /// assert_eq!(details["liveToolVersion"], "3f1c0a9b2d4e6f8071a2");
    /// ```
    pub fn stale_tool_version(live_tool_version: impl Into<String>) -> Self {
        let details = StaleDetails {
            reason: StaleReason::ToolVersionMismatch,
            live_registration_id: None,
            live_tool_version: Some(live_tool_version.into()),
        };
        Self::worded(ErrorCode::StaleCapability, Some(to_map(&details)))
    }

    /// `INVOCATION_CONFLICT {reason: id-reused-with-different-request}`; never anything about the
    /// earlier request.
    pub fn invocation_conflict() -> Self {
        let details = ConflictDetails { reason: ConflictReason::IdReusedWithDifferentRequest };
        Self::worded(ErrorCode::InvocationConflict, Some(to_map(&details)))
    }

    /// `INVOCATION_CONFLICT {reason: natural-key-used-by-different-request}` (retry `no`): the
    /// capability's natural idempotency key names an operation made with different input. Never
    /// anything about the earlier request.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry};
    /// let p = AgentSurfaceError::natural_key_conflict().into_payload();
    /// assert_eq!((p.code(), p.retry()), (ErrorCode::InvocationConflict, Retry::No));
    /// ```
    pub fn natural_key_conflict() -> Self {
        let details = ConflictDetails { reason: ConflictReason::NaturalKeyUsedByDifferentRequest };
        Self::worded(ErrorCode::InvocationConflict, Some(to_map(&details)))
    }

    /// `INVALID_INPUT {issues, lockedFields?}`.
    ///
    /// The message names up to three offending paths when they are plain JSON Pointers, so a
    /// boundary that keeps only the message still tells the model what to fix.
    pub fn invalid_input(issues: Vec<InputIssue>, locked_fields: Option<Vec<String>>) -> Self {
        let paths = quoted_paths(&issues);
        let locked = locked_fields.as_ref().filter(|l| !l.is_empty());
        let details = InvalidInputDetails { issues, locked_fields: locked.cloned(), reason: None };
        match locked {
            Some(fields) => {
                let names: Vec<&str> = fields.iter().map(String::as_str).filter(|f| is_quotable(f)).take(5).collect();
                let fields = if names.is_empty() { "see details.lockedFields".to_string() } else { names.join(", ") };
                Self::with_details(
                    ErrorCode::InvalidInput,
                    message::INVALID_INPUT_LOCKED,
                    &[("paths", &paths), ("fields", &fields)],
                    &details,
                )
            }
            None => Self::with_details(ErrorCode::InvalidInput, message::INVALID_INPUT, &[("paths", &paths)], &details),
        }
    }

    /// `INVALID_INPUT {issues, reason: target-mismatch}`: the reserved target argument `argument`
    /// names another instance than the call's target. One issue, at the argument.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry};
    /// let p = AgentSurfaceError::target_mismatch("_instance").into_payload();
    /// assert_eq!((p.code(), p.retry()), (ErrorCode::InvalidInput, Retry::WithChanges));
    /// assert_eq!(p.detail("reason").and_then(|r| r.as_str()), Some("target-mismatch"));
    /// ```
    pub fn target_mismatch(argument: &str) -> Self {
        let issue = InputIssue {
            path: format!("/{argument}"),
            message: "names another instance than the call's target; name one instance, once".into(),
        };
        let paths = quoted_paths(std::slice::from_ref(&issue));
        let details = InvalidInputDetails {
            issues: vec![issue],
            locked_fields: None,
            reason: Some(InvalidInputReason::TargetMismatch),
        };
        Self::with_details(ErrorCode::InvalidInput, message::INVALID_INPUT, &[("paths", &paths)], &details)
    }

    /// `INVALID_INPUT {issues, reason: undecodable}`: the input passes the schema, but the values
    /// at the issues' paths are not ones the capability's input type can hold. The message names
    /// up to three paths, as [`AgentSurfaceError::invalid_input`]'s does; it never says the input
    /// breaks the schema, which it does not.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry};
    /// use agent_surface_core::details::InputIssue;
    /// let issue = InputIssue { path: "/quantity".into(), message: "must be an integer written without a fraction".into() };
    /// let p = AgentSurfaceError::undecodable_input(vec![issue]).into_payload();
    /// assert_eq!((p.code(), p.retry()), (ErrorCode::InvalidInput, Retry::WithChanges));
    /// assert_eq!(p.detail("reason").and_then(|r| r.as_str()), Some("undecodable"));
    /// assert!(p.message().contains("/quantity"), "{}", p.message());
    /// ```
    pub fn undecodable_input(issues: Vec<InputIssue>) -> Self {
        let paths = quoted_paths(&issues);
        let details =
            InvalidInputDetails { issues, locked_fields: None, reason: Some(InvalidInputReason::Undecodable) };
        Self::with_details(ErrorCode::InvalidInput, message::INVALID_INPUT_UNDECODABLE, &[("paths", &paths)], &details)
    }

    /// `NOT_AUTHENTICATED` (no details).
    pub fn not_authenticated() -> Self {
        Self::build(ErrorCode::NotAuthenticated, message::NOT_AUTHENTICATED, &[], None)
    }

    /// `NOT_AUTHORIZED {origin}`; never permission names or policy internals.
    pub fn not_authorized(origin: Origin) -> Self {
        Self::with_details(ErrorCode::NotAuthorized, message::NOT_AUTHORIZED, &[], &NotAuthorizedDetails { origin })
    }

    /// `PRECONDITION_FAILED` with the author's explanation (retry `with-changes`).
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, Retry};
    /// let e = AgentSurfaceError::precondition_failed("Shipped orders cannot be cancelled.");
    /// assert_eq!(e.payload().retry(), Retry::WithChanges);
    /// assert!(e.payload().message().starts_with("Shipped orders cannot be cancelled."));
    /// ```
    pub fn precondition_failed(explanation: impl Into<SafeText>) -> Self {
        Self::precondition_failed_with(explanation, PreconditionDetails::default())
    }

    /// `PRECONDITION_FAILED` with author details (retry `with-changes`). The reasons reserved for
    /// the runtime, `binding-failed` and `client-input-required` ([`AgentSurfaceError::binding_failed`],
    /// [`AgentSurfaceError::client_input_required`]), are dropped, in `reason` or among the other
    /// values: each would change the retry (`after-refresh`, `no`) to one this answer's message
    /// does not say, and `after-refresh` would have a client repeat on its own a call whose
    /// handler ran.
    ///
    /// ```
    /// use agent_surface_core::details::PreconditionDetails;
    /// use agent_surface_core::{AgentSurfaceError, Retry};
    /// let details = PreconditionDetails { reason: Some("binding-failed".into()), ..Default::default() };
    /// let p = AgentSurfaceError::precondition_failed_with("The row is locked.", details).into_payload();
    /// assert_eq!((p.retry(), p.detail("reason")), (Retry::WithChanges, None));
    /// ```
    pub fn precondition_failed_with(explanation: impl Into<SafeText>, mut details: PreconditionDetails) -> Self {
        let reserved = |r: &str| r == BINDING_FAILED || r == CLIENT_INPUT_REQUIRED;
        if details.reason.as_deref().is_some_and(reserved) {
            details.reason = None;
        }
        if details.extra.get("reason").and_then(Value::as_str).is_some_and(reserved) {
            details.extra.remove("reason");
        }
        let explanation = explanation.into();
        let mut shown = explanation.as_str().to_string();
        if shown.is_empty() {
            shown.push_str("The current state does not allow this call.");
        } else if !shown.ends_with(['.', '!', '?']) {
            shown.push('.');
        }
        Self::with_details(ErrorCode::PreconditionFailed, message::PRECONDITION, &[("explanation", &shown)], &details)
    }

    /// `PRECONDITION_FAILED {reason: binding-failed}` (retry `after-refresh`).
    pub fn binding_failed() -> Self {
        let details = PreconditionDetails { reason: Some(BINDING_FAILED.to_string()), extra: Map::new() };
        Self::with_details(ErrorCode::PreconditionFailed, message::BINDING_FAILED, &[], &details)
    }

    /// `PRECONDITION_FAILED {reason: client-input-required}` (retry `no`): the capability asks the
    /// client questions this transport cannot carry.
    pub fn client_input_required() -> Self {
        let details = PreconditionDetails { reason: Some(CLIENT_INPUT_REQUIRED.to_string()), extra: Map::new() };
        Self::with_details(ErrorCode::PreconditionFailed, message::CLIENT_INPUT_REQUIRED, &[], &details)
    }

    /// `CONFIRMATION_REQUIRED {confirmationId, summary, expiresAt, effect, origin}`.
    pub fn confirmation_required(
        confirmation_id: impl Into<String>,
        summary: SafeText,
        expires_at: Timestamp,
        effect: Effect,
        origin: Origin,
    ) -> Self {
        Self::confirmation_required_at(confirmation_id, summary, expires_at, effect, origin, None)
    }

    /// `CONFIRMATION_REQUIRED {confirmationId, summary, expiresAt, effect, origin, approvalUrl}`:
    /// with `approval_url`, the confirmation's approval page, the message tells the agent that a
    /// person must approve it there (its template is `confirmation-required.approval-url`).
    pub fn confirmation_required_at(
        confirmation_id: impl Into<String>,
        summary: SafeText,
        expires_at: Timestamp,
        effect: Effect,
        origin: Origin,
        approval_url: Option<String>,
    ) -> Self {
        // Quoted in the message (its own quotation marks taken out): a summary is composed from
        // the call's input, and quoted it cannot pass for the template's instruction or a repair
        // sentence ("Next action: …") of its own.
        let quote = |c: &char| matches!(c, '"' | '“' | '”' | '„' | '‟' | '″' | '＂' | '«' | '»');
        let mut shown: String = summary.as_str().chars().filter(|c| !quote(c)).collect();
        if shown.trim().is_empty() {
            shown = "Confirm the action.".to_string();
        } else if !shown.ends_with(['.', '!', '?']) {
            shown.push('.');
        }
        let template =
            if approval_url.is_some() { message::CONFIRMATION_REQUIRED_URL } else { message::CONFIRMATION_REQUIRED };
        let details = ConfirmationRequiredDetails {
            confirmation_id: confirmation_id.into(),
            summary: summary.as_str().to_string(),
            expires_at: expires_at.to_rfc3339(),
            effect,
            origin,
            approval_url,
        };
        Self::with_details(ErrorCode::ConfirmationRequired, template, &[("summary", &shown)], &details)
    }

    /// `CONFIRMATION_INVALID {reason}`; retry `with-confirmation` only for `expired`.
    pub fn confirmation_invalid(reason: ConfirmationInvalidReason) -> Self {
        Self::worded(ErrorCode::ConfirmationInvalid, Some(to_map(&ConfirmationInvalidDetails { reason })))
    }

    /// `RATE_LIMITED {reason, retryAfterMs}`.
    ///
    /// From a handler (a server's throttling, mapped), as [`AgentSurfaceError::transient`]: the
    /// agent is told to wait and make the call again, and the call runs again (a rate limit is
    /// never recorded under an invocation id or idempotency key), on the approval it used if it
    /// had one. Return it only where nothing the handler did took effect.
    pub fn rate_limited(reason: RateLimitReason, retry_after: Duration) -> Self {
        let details = RateLimitedDetails { reason, retry_after_ms: millis(retry_after) };
        Self::worded(ErrorCode::RateLimited, Some(to_map(&details)))
    }

    /// `TIMEOUT {timeoutMs, idempotent}`; retry `yes` whatever `idempotent` says: the runtime
    /// sends `TIMEOUT` only for a capability whose repeat cannot double an effect (declared
    /// idempotent, or effect `read`), and `EXECUTION_FAILED {reason: outcome-unknown}` for any
    /// other (`spec/error-model.md`, *Interrupted calls*).
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, Retry};
    /// use std::time::Duration;
    /// assert_eq!(AgentSurfaceError::timeout(Duration::from_secs(1), true).payload().retry(), Retry::Yes);
    /// // A read that is not declared idempotent: it has no effect to double.
    /// assert_eq!(AgentSurfaceError::timeout(Duration::from_secs(1), false).payload().retry(), Retry::Yes);
    /// ```
    pub fn timeout(budget: Duration, idempotent: bool) -> Self {
        let details = TimeoutDetails { timeout_ms: millis(budget), idempotent };
        Self::worded(ErrorCode::Timeout, Some(to_map(&details)))
    }

    /// `CANCELLED` (no details).
    pub fn cancelled() -> Self {
        Self::worded(ErrorCode::Cancelled, None)
    }

    /// `EXECUTION_FAILED {reason}` with the template for that reason (retry `no`).
    pub fn execution_failed(reason: ExecutionFailedReason) -> Self {
        use ExecutionFailedReason as R;
        let template = match reason {
            R::HandlerError => message::HANDLER_ERROR,
            R::OutputInvalid => message::OUTPUT_INVALID,
            R::OutputTooLarge => message::OUTPUT_TOO_LARGE,
            R::Transport => message::TRANSPORT,
            R::VerificationFailed => message::VERIFICATION_FAILED,
            R::OutcomeUnknown => message::OUTCOME_UNKNOWN,
            // Never without its delay: the call did not run, and it may once the trail is back.
            R::AuditUnavailable => return Self::audit_unavailable(UNAVAILABLE_RETRY_AFTER),
            R::StoreUnavailable => return Self::store_unavailable(UNAVAILABLE_RETRY_AFTER),
        };
        let details = ExecutionFailedDetails { reason: Some(reason), transient: None, retry_after_ms: None };
        Self::with_details(ErrorCode::ExecutionFailed, template, &[], &details)
    }

    /// `EXECUTION_FAILED {reason: handler-error}` keeping `cause` for the operator channel only.
    pub fn internal(cause: impl Into<Cause>) -> Self {
        Self::execution_failed(ExecutionFailedReason::HandlerError).with_cause(cause)
    }

    /// `EXECUTION_FAILED {reason: handler-error}` whose message is an explanation the application
    /// chose to show (an application error that opts in to being agent-visible).
    pub fn handler_failed(explanation: impl Into<SafeText>) -> Self {
        let explanation = explanation.into();
        let mut shown = explanation.as_str().to_string();
        if shown.is_empty() {
            shown.push_str("The capability failed.");
        } else if !shown.ends_with(['.', '!', '?']) {
            shown.push('.');
        }
        let details = ExecutionFailedDetails {
            reason: Some(ExecutionFailedReason::HandlerError),
            transient: None,
            retry_after_ms: None,
        };
        Self::with_details(
            ErrorCode::ExecutionFailed,
            message::HANDLER_ERROR_EXPLAINED,
            &[("explanation", &shown)],
            &details,
        )
    }

    /// `EXECUTION_FAILED {reason: transport, transient: true, retryAfterMs}` (retry `after-delay`).
    ///
    /// The agent is told to wait, then make the call again, and the call runs again (under a fresh
    /// invocation id, or the same idempotency key, which this answer leaves free). A handler
    /// returns it only where that repeat cannot double an effect: nothing it did took effect, or
    /// the capability is idempotent. The runtime never gives it to a write whose handler started,
    /// but on the handler's word (error-model.md, *Host errors at the boundary*).
    pub fn transient(retry_after: Duration) -> Self {
        let details = ExecutionFailedDetails {
            reason: Some(ExecutionFailedReason::Transport),
            transient: Some(true),
            retry_after_ms: Some(millis(retry_after)),
        };
        Self::worded(ErrorCode::ExecutionFailed, Some(to_map(&details)))
    }

    /// `EXECUTION_FAILED {reason: audit-unavailable, transient: true, retryAfterMs}` (retry
    /// `after-delay`): strict audit could not record that the call starts, so it did not run.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry};
    /// let p = AgentSurfaceError::audit_unavailable(Duration::from_millis(1500)).into_payload();
    /// assert_eq!((p.code(), p.retry()), (ErrorCode::ExecutionFailed, Retry::AfterDelay));
    /// assert_eq!(p.details().unwrap()["reason"], "audit-unavailable");
    /// assert_eq!(p.details().unwrap()["retryAfterMs"], 1500);
    /// ```
    pub fn audit_unavailable(retry_after: Duration) -> Self {
        let details = ExecutionFailedDetails {
            reason: Some(ExecutionFailedReason::AuditUnavailable),
            transient: Some(true),
            retry_after_ms: Some(millis(retry_after)),
        };
        Self::worded(ErrorCode::ExecutionFailed, Some(to_map(&details)))
    }

    /// `EXECUTION_FAILED {reason: store-unavailable, transient: true, retryAfterMs}` (retry
    /// `after-delay`): the idempotency store could not admit the call, so it did not run and
    /// nothing is recorded under its invocation id for this attempt. Unlike a transient transport
    /// failure (whose answer is kept under the id, so that a retry needs a new one), it is sent
    /// again under the *same* id: that id may hold the result of an earlier attempt whose answer
    /// was lost, which a new id would run a second time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry};
    /// let p = AgentSurfaceError::store_unavailable(Duration::from_millis(1000)).into_payload();
    /// assert_eq!((p.code(), p.retry()), (ErrorCode::ExecutionFailed, Retry::AfterDelay));
    /// assert_eq!(p.details().unwrap()["reason"], "store-unavailable");
    /// assert!(p.message().contains("same invocationId"));
    /// ```
    pub fn store_unavailable(retry_after: Duration) -> Self {
        let details = ExecutionFailedDetails {
            reason: Some(ExecutionFailedReason::StoreUnavailable),
            transient: Some(true),
            retry_after_ms: Some(millis(retry_after)),
        };
        Self::worded(ErrorCode::ExecutionFailed, Some(to_map(&details)))
    }

    /// `EXECUTION_FAILED {reason: outcome-unknown}` (retry `no`) with the repair that says to
    /// establish what happened out of band: read the current state, and if that does not tell,
    /// ask the user. Never "reconcile" by calling again under the same invocation id: the record
    /// of an unknown outcome only replays the same unknown outcome (spec/error-model.md,
    /// "Outcome unknown").
    ///
    /// ```
    /// use agent_surface_core::repair::RepairAction;
    /// use agent_surface_core::{AgentSurfaceError, Retry};
    /// let p = AgentSurfaceError::outcome_unknown().into_payload();
    /// assert_eq!(p.retry(), Retry::No);
    /// assert!(p.message().chars().count() <= 300);
    /// assert!(p.message().contains("Next actions, in order, not in parallel: 1."));
    /// assert!(!p.message().contains("invocationId"));
    /// let steps = p.repair().unwrap().steps();
    /// assert_eq!(steps[0].action(), RepairAction::RefreshState);
    /// assert!(steps.iter().all(|s| s.action() != RepairAction::Reconcile));
    /// ```
    pub fn outcome_unknown() -> Self {
        let repair = Repair::plan([
            RepairStep::new(RepairAction::RefreshState, "Read the current state to see whether it took effect"),
            RepairStep::new(RepairAction::AskUser, "If still unclear, ask the user"),
        ]);
        let mut err = Self::execution_failed(ExecutionFailedReason::OutcomeUnknown);
        // The plan is compatible with retry `no` (see `RepairAction::compatible`).
        let _ = err.payload.set_repair(repair);
        err
    }

    /// `EXECUTION_FAILED {reason: outcome-unknown}` (retry `no`) for a call made *without* an
    /// invocation id. Nothing was recorded, so calling again would run the action again. The
    /// message and the repair say to establish what happened (read the current state, then ask the
    /// user); the payload has no `reconcile` step (neither has
    /// [`AgentSurfaceError::outcome_unknown`]'s).
    ///
    /// ```
    /// use agent_surface_core::repair::RepairAction;
    /// use agent_surface_core::{AgentSurfaceError, Retry};
    /// let p = AgentSurfaceError::outcome_unknown_untracked().into_payload();
    /// assert_eq!(p.retry(), Retry::No);
    /// assert!(p.message().chars().count() <= 300);
    /// assert!(!p.message().contains("same invocationId"));
    /// let steps = p.repair().unwrap().steps();
    /// assert_eq!(steps[0].action(), RepairAction::RefreshState);
    /// assert!(steps.iter().all(|s| s.action() != RepairAction::Reconcile));
    /// ```
    pub fn outcome_unknown_untracked() -> Self {
        let repair = Repair::plan([
            RepairStep::new(RepairAction::RefreshState, "Read the current state to see whether it took effect"),
            RepairStep::new(RepairAction::AskUser, "If still unclear, ask the user before doing it again"),
        ]);
        let details = ExecutionFailedDetails {
            reason: Some(ExecutionFailedReason::OutcomeUnknown),
            transient: None,
            retry_after_ms: None,
        };
        let mut err = Self::with_details(ErrorCode::ExecutionFailed, message::OUTCOME_UNKNOWN_UNTRACKED, &[], &details);
        // The plan is compatible with retry `no` (see `RepairAction::compatible`).
        let _ = err.payload.set_repair(repair);
        err
    }

    /// Attaches a repair plan (see [`crate::repair`]) and appends its bounded "Next action:"
    /// sentence to the message, which stays within 300 characters: the template sentence is kept
    /// whole and the rendering is cut instead.
    ///
    /// The plan is a dynamic one: it is cut to the bounds and marked `truncated` when it breaks
    /// them. It is rejected when a step contradicts the payload's retry category (the matrix's
    /// `repairActions` table), when it is malformed (no step, an empty instruction, a `call_tool`
    /// step without a tool), or when the error already carries a plan.
    pub fn with_repair(mut self, repair: Repair) -> Result<Self, RepairError> {
        self.payload.set_repair(repair)?;
        Ok(self)
    }

    /// Attaches a private cause (operator channel only).
    pub fn with_cause(mut self, cause: impl Into<Cause>) -> Self {
        self.cause = Some(cause.into());
        self
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.payload.code()
    }

    /// The agent-safe payload.
    pub fn payload(&self) -> &ErrorPayload {
        &self.payload
    }

    /// The agent-safe payload, by value.
    pub fn into_payload(self) -> ErrorPayload {
        self.payload
    }

    /// The payload and the private cause.
    pub fn into_parts(self) -> (ErrorPayload, Option<Cause>) {
        (self.payload, self.cause)
    }

    /// The private cause, for the operator channel.
    pub fn cause(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.cause.as_deref()
    }

    /// Whether this error relays a payload another service built ([`AgentSurfaceError::relayed`],
    /// or `?` on an [`ErrorPayload`]): what it says (a transient failure, a rate limit) is that
    /// service's word about its own call, not this handler's about everything it did.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_surface_core::AgentSurfaceError;
    /// let upstream = AgentSurfaceError::transient(Duration::from_secs(1)).into_payload();
    /// assert!(AgentSurfaceError::relayed(upstream).is_relayed());
    /// assert!(!AgentSurfaceError::transient(Duration::from_secs(1)).is_relayed());
    /// ```
    #[must_use]
    pub fn is_relayed(&self) -> bool {
        self.cause.as_deref().is_some_and(|cause| cause.is::<RelayedPayload>())
    }

    /// The cause chain as text, outermost first, for the operator channel.
    pub fn cause_chain(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut next: Option<&(dyn StdError + 'static)> = self.cause.as_deref().map(|c| c as &(dyn StdError + 'static));
        while let Some(e) = next {
            out.push(e.to_string());
            next = e.source();
        }
        out
    }
}

/// The explanation a relayed `PRECONDITION_FAILED` shows instead of the one it carried.
const RELAYED_PRECONDITION: &str = "A condition this action depends on is not met.";

/// The issue text a relayed `INVALID_INPUT` shows instead of the one it carried.
const RELAYED_ISSUE: &str = "is not valid";

impl AgentSurfaceError {
    /// An error relaying `payload` — one this process did not build, e.g. parsed from an upstream
    /// service's response — rebuilt from the library's own templates: it keeps the code, the
    /// retry category and the details that are typed values (reasons, origins, delays, JSON
    /// Pointers, kebab-case reasons), and drops every free text the payload carried (its message,
    /// issue texts, a precondition's explanation and extra details, a repair plan), since text
    /// from elsewhere can hold anything. The whole payload stays the private cause, for the
    /// operator channel. An upstream `TIMEOUT` relays as `EXECUTION_FAILED {reason:
    /// outcome-unknown}` (the upstream call may have taken effect); any other code a handler may
    /// not return relays as `EXECUTION_FAILED {reason: handler-error}`. Delays are capped at an
    /// hour.
    ///
    /// `From<ErrorPayload>` is this conversion.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode, ErrorPayload};
    /// let upstream: ErrorPayload = serde_json::from_str(
    ///     r#"{"code":"PRECONDITION_FAILED","message":"Row 7 locked by admin@db.internal:5432.","retry":"with-changes","details":{"reason":"row-locked","dsn":"postgres://u:pw@db"}}"#,
    /// ).unwrap();
    /// let relayed = AgentSurfaceError::relayed(upstream);
    /// let p = relayed.payload();
    /// assert_eq!(p.code(), ErrorCode::PreconditionFailed);
    /// assert_eq!(p.detail("reason").and_then(|r| r.as_str()), Some("row-locked"));
    /// assert!(p.detail("dsn").is_none());
    /// assert!(!p.message().contains("db.internal"));
    /// assert_eq!(relayed.cause_chain().len(), 1, "the upstream payload is the private cause");
    /// ```
    pub fn relayed(payload: ErrorPayload) -> Self {
        let rebuilt = match payload.code() {
            ErrorCode::InvalidInput => {
                let details: Option<InvalidInputDetails> = payload.details_as();
                let issues = details
                    .as_ref()
                    .map(|d| {
                        d.issues
                            .iter()
                            .filter(|i| is_quotable(&i.path) || i.path.is_empty())
                            .take(64)
                            .map(|i| InputIssue { path: i.path.clone(), message: RELAYED_ISSUE.to_string() })
                            .collect()
                    })
                    .unwrap_or_default();
                let locked = details
                    .and_then(|d| d.locked_fields)
                    .map(|fields| fields.into_iter().filter(|f| is_quotable(f)).take(64).collect::<Vec<_>>());
                AgentSurfaceError::invalid_input(issues, locked)
            }
            ErrorCode::NotAuthenticated => AgentSurfaceError::not_authenticated(),
            ErrorCode::NotAuthorized => {
                let origin = payload.details_as::<NotAuthorizedDetails>().map_or(Origin::Server, |d| d.origin);
                AgentSurfaceError::not_authorized(origin)
            }
            ErrorCode::PreconditionFailed => {
                let reason =
                    payload.detail("reason").and_then(Value::as_str).filter(|r| is_kebab_reason(r)).map(str::to_string);
                let details = PreconditionDetails { reason, ..PreconditionDetails::default() };
                AgentSurfaceError::precondition_failed_with(SafeText::trusted(RELAYED_PRECONDITION), details)
            }
            ErrorCode::RateLimited => match payload.details_as::<RateLimitedDetails>() {
                Some(d) => AgentSurfaceError::rate_limited(d.reason, relayed_delay(d.retry_after_ms)),
                None => AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_secs(1)),
            },
            // The upstream call may or may not have taken effect.
            ErrorCode::Timeout => AgentSurfaceError::outcome_unknown(),
            ErrorCode::ExecutionFailed => match payload.details_as::<ExecutionFailedDetails>() {
                // An unknown outcome first: one also marked transient (a non-conforming upstream)
                // may still have taken effect, and must not be relayed as a failure to retry.
                Some(ExecutionFailedDetails { reason: Some(ExecutionFailedReason::OutcomeUnknown), .. }) => {
                    AgentSurfaceError::outcome_unknown()
                }
                Some(ExecutionFailedDetails { transient: Some(true), retry_after_ms, .. }) => {
                    AgentSurfaceError::transient(relayed_delay(retry_after_ms.unwrap_or(1000)))
                }
                Some(ExecutionFailedDetails { reason: Some(reason), .. }) => {
                    AgentSurfaceError::execution_failed(reason)
                }
                _ => AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError),
            },
            _ => AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError),
        };
        rebuilt.with_cause(RelayedPayload(payload))
    }
}

/// The longest delay a relay passes on: an upstream's `retryAfterMs` is capped at an hour.
fn relayed_delay(ms: u64) -> Duration {
    Duration::from_millis(ms.min(3_600_000))
}

/// A reason an application could have chosen: kebab-case, at most 64 characters.
fn is_kebab_reason(reason: &str) -> bool {
    !reason.is_empty()
        && reason.len() <= 64
        && reason.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !reason.starts_with('-')
        && !reason.ends_with('-')
}

/// A payload this process did not build, kept as the private cause of its relay.
#[derive(Debug)]
struct RelayedPayload(ErrorPayload);

impl fmt::Display for RelayedPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "relayed payload: {}", self.0.to_wire_text())
    }
}

impl StdError for RelayedPayload {}

/// Relays a payload this process did not build: see [`AgentSurfaceError::relayed`]. Free text
/// in it (the message above all) never reaches an agent.
impl From<ErrorPayload> for AgentSurfaceError {
    fn from(payload: ErrorPayload) -> Self {
        AgentSurfaceError::relayed(payload)
    }
}

/// Any error becomes a sanitized `EXECUTION_FAILED {reason: handler-error}`; the error is kept
/// as the private cause.
impl<E: StdError + Send + Sync + 'static> From<E> for AgentSurfaceError {
    fn from(cause: E) -> Self {
        AgentSurfaceError::internal(cause)
    }
}

impl fmt::Display for AgentSurfaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.payload, f)
    }
}

impl fmt::Debug for AgentSurfaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentSurfaceError")
            .field("payload", &self.payload)
            .field("has_cause", &self.cause.is_some())
            .finish()
    }
}

/// The delay [`AgentSurfaceError::execution_failed`] gives `audit-unavailable` and
/// `store-unavailable`, which are always transient (the runtime uses
/// [`AgentSurfaceError::audit_unavailable`] and [`AgentSurfaceError::store_unavailable`] with
/// its own delays).
const UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `" at /a, /b, /c"`: the first three issue paths that can be quoted in a message, or nothing.
fn quoted_paths(issues: &[InputIssue]) -> String {
    let quoted: Vec<&str> = issues.iter().map(|i| i.path.as_str()).filter(|p| is_quotable(p)).take(3).collect();
    if quoted.is_empty() { String::new() } else { format!(" at {}", quoted.join(", ")) }
}
