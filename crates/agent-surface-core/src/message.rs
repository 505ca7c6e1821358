//! The message templates: the only way agent-facing text is produced.
//!
//! Every agent-facing `message` is one of the templates below with its slots filled from
//! [`SafeText`](crate::SafeText) fragments or numbers. Templates are imperative (they tell the
//! model what to do next), and a rendered message never exceeds [`MAX_MESSAGE_CHARS`].
//!
//! # Messages are true to their transport
//!
//! A model changes only a tool call's arguments: it cannot choose an invocation id, present a
//! confirmation id, name a target outside the arguments or wait a number of milliseconds. A
//! template whose wording asks for one of those has a second wording beside it,
//! [`Template::arguments`], for a binding through which an agent sends only a tool's arguments
//! ([`Sends::Arguments`]: MCP in both eras, the embedded toolset). The adapter of such a binding
//! words each payload with [`ErrorPayload::worded_for`](crate::ErrorPayload::worded_for), which
//! re-renders the message from the code and the details alone, so `code`, `retry`, `details` and
//! `repair` stay identical on every transport and only the message differs.
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, message::Sends};
//!
//! let payload = AgentSurfaceError::invocation_conflict().into_payload();
//! assert!(payload.message().contains("fresh invocationId")); // HTTP, the Rust API
//! let worded = payload.worded_for(Sends::Arguments); // MCP, the embedded toolset
//! assert!(!worded.message().contains("invocationId"));
//! assert_eq!((worded.code(), worded.retry(), worded.details()), (payload.code(), payload.retry(), payload.details()));
//! ```

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::code::ErrorCode;
use crate::details::{
    ConfirmationInvalidDetails, ConfirmationInvalidReason, ConflictDetails, ConflictReason, ExecutionFailedDetails,
    ExecutionFailedReason, RateLimitReason, RateLimitedDetails, StaleDetails, StaleReason, TimeoutDetails,
    UnmountPhase, UnmountedDetails,
};
use crate::text::normalize;

/// The most characters an agent-facing message may have.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// What a binding lets an agent send back, which decides how a message is worded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Sends {
    /// A whole invoke request — invocation id, confirmation id, target, staleness tokens, headers:
    /// the HTTP binding and the Rust API. Messages use each template's [`Template::text`].
    #[default]
    Request,
    /// Only a tool's arguments, which is all a model writes: MCP (both eras) and the embedded
    /// toolset. Messages use a template's [`Template::arguments`] wording where it has one.
    Arguments,
}

impl Sends {
    /// Both, in specification order.
    pub const ALL: [Sends; 2] = [Sends::Request, Sends::Arguments];

    /// The name used in `spec/error-matrix.json`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Sends::Request => "request",
            Sends::Arguments => "arguments",
        }
    }
}

/// An agent-facing message template with `{slot}` placeholders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Template {
    /// A stable id for the template (`code.variant`), for tests and operator logs.
    pub id: &'static str,
    /// The text, with `{slot}` placeholders.
    pub text: &'static str,
    /// The wording for a caller that sends only a tool's arguments ([`Sends::Arguments`]), where
    /// [`Template::text`] asks for something else (a fresh invocation id, a wait, a request
    /// member); `None` when the text is already true for such a caller. Same slots.
    pub arguments: Option<&'static str>,
}

impl Template {
    /// The text for a caller that sends `sends`.
    ///
    /// ```
    /// use agent_surface_core::message::{CANCELLED, NOT_FOUND, Sends};
    /// assert_ne!(CANCELLED.text_for(Sends::Arguments), CANCELLED.text_for(Sends::Request));
    /// assert_eq!(NOT_FOUND.text_for(Sends::Arguments), NOT_FOUND.text);
    /// ```
    pub const fn text_for(&self, sends: Sends) -> &'static str {
        match (sends, self.arguments) {
            (Sends::Arguments, Some(arguments)) => arguments,
            _ => self.text,
        }
    }

    /// The code whose messages this template words: the one whose kebab-case name is the id or
    /// the id's part before its first `.` (`rate-limited.rate` → `RATE_LIMITED`).
    pub fn code(&self) -> Option<ErrorCode> {
        let head = self.id.split('.').next().unwrap_or(self.id);
        ErrorCode::ALL.into_iter().find(|c| c.as_str().to_ascii_lowercase().replace('_', "-") == head)
    }
}

macro_rules! templates {
    ($( $(#[$m:meta])* $name:ident = ($id:literal, $text:literal $(, arguments: $args:literal)?); )*) => {
        $( $(#[$m])* pub const $name: Template = Template { id: $id, text: $text, arguments: templates!(@args $($args)?) }; )*
        /// Every template, for checks over the whole set.
        pub const ALL: &[Template] = &[$($name),*];
    };
    (@args) => { None };
    (@args $args:literal) => { Some($args) };
}

templates! {
    /// `CAPABILITY_NOT_FOUND`.
    NOT_FOUND = ("capability-not-found",
        "This capability is not in your current tool list. Refresh the tool list and choose a capability that is listed.");
    /// `CAPABILITY_NOT_AVAILABLE`; slot: `reason`.
    NOT_AVAILABLE = ("capability-not-available",
        "This capability is disabled right now: {reason} Complete the enabling step first, refresh the tool list, then retry.");
    /// `AMBIGUOUS_INSTANCE` (names [`crate::details::TARGET_ARGUMENT`], which every transport
    /// carries in a tool's arguments).
    AMBIGUOUS = ("ambiguous-instance",
        "Several instances can handle this call. Choose one from details.instances and retry with its instanceId as the _instance argument.");
    /// `COMPONENT_UNMOUNTED` at resolution.
    UNMOUNTED_RESOLVE = ("component-unmounted.resolve",
        "The target of this call was removed. Refresh the tool list and retarget the call.",
        arguments: "The instance this call was for was removed. Refresh the tool list and repeat the call on a listed instance (in the _instance argument, where the tool has one).");
    /// `COMPONENT_UNMOUNTED` while running (sent only for a capability whose repeat cannot double
    /// an effect).
    UNMOUNTED_MID_FLIGHT = ("component-unmounted.mid-flight",
        "The target was removed while the call ran; it is safe to repeat. Refresh the tool list and retarget the call if it is still needed.",
        arguments: "The instance this call ran on was removed while it ran; it is safe to repeat. Refresh the tool list and repeat the call on a listed instance if it is still needed.");
    /// `STALE_CAPABILITY`.
    STALE = ("stale-capability",
        "This call was planned against an outdated view of the tools. Refresh the tool list, resolve the target again, then retry.",
        arguments: "This call was planned against an outdated tool list. Refresh the tool list, check that the tool and the instance you chose are still listed, then repeat the call.");
    /// `STALE_CAPABILITY {reason: tool-version-mismatch}`: not retried as it stands (the decision
    /// table's `refresh-then-ask`).
    STALE_TOOL_VERSION = ("stale-capability.tool-version",
        "This tool changed since the call was planned, so it did not run. Refresh the tool list and read its new description and input schema before calling it again: inputs may mean something else now.");
    /// `INVOCATION_CONFLICT`.
    CONFLICT = ("invocation-conflict",
        "This invocationId was already used for a different request. Send the new request with a fresh invocationId.",
        arguments: "This call reused the id of a different, earlier request, so it did not run. Make the call again; if the same error comes back, stop and report it.");
    /// `INVOCATION_CONFLICT` on a natural key.
    CONFLICT_NATURAL_KEY = ("invocation-conflict.natural-key",
        "The operation this call names (by its key, such as an order) was already made with different input, so this call did not run. Do not repeat it; tell the user what was done already.");
    /// `INVALID_INPUT`; slot: `paths`.
    INVALID_INPUT = ("invalid-input",
        "The input does not match the schema{paths}. Fix the problems listed in details.issues, then retry.");
    /// `INVALID_INPUT` for bound fields; slots: `paths`, `fields`.
    INVALID_INPUT_LOCKED = ("invalid-input.locked",
        "The input does not match the schema{paths}. Remove the fields filled by the runtime ({fields}), fix the problems listed in details.issues, then retry.");
    /// `NOT_AUTHENTICATED`.
    NOT_AUTHENTICATED = ("not-authenticated",
        "No signed-in user is attached to this call. Tell the user to sign in; do not retry and do not ask for credentials.");
    /// `NOT_AUTHORIZED`.
    NOT_AUTHORIZED = ("not-authorized",
        "This action is not permitted for the current user. Do not retry; tell the user it was refused.");
    /// `PRECONDITION_FAILED` with an author explanation; slot: `explanation`.
    PRECONDITION = ("precondition-failed",
        "{explanation} Change the input or the state it depends on, then retry.");
    /// `PRECONDITION_FAILED` for a binding that failed to evaluate.
    BINDING_FAILED = ("precondition-failed.binding-failed",
        "A value this call depends on could not be determined. Refresh the tool list and the state it shows, then retry.");
    /// `PRECONDITION_FAILED` for questions to the client that this transport cannot carry.
    CLIENT_INPUT_REQUIRED = ("precondition-failed.client-input-required",
        "This action needs answers from the user's application that this connection cannot carry. Do not retry it here; tell the user it needs an application that can answer it.");
    /// `CONFIRMATION_REQUIRED`; slot: `summary`.
    CONFIRMATION_REQUIRED = ("confirmation-required",
        "This action needs the user's approval: {summary} Ask the user to approve it, then repeat the same call.");
    /// `CONFIRMATION_REQUIRED` with an approval page (`details.approvalUrl`); slot: `summary`.
    CONFIRMATION_REQUIRED_URL = ("confirmation-required.approval-url",
        "This action needs a person's approval: {summary} Tell the user a person must approve it at the approval page in details.approvalUrl, then repeat the same call.");
    /// `CONFIRMATION_INVALID` / expired.
    CONFIRMATION_EXPIRED = ("confirmation-invalid.expired",
        "The confirmation expired. Call again without confirmationId to request a fresh approval.",
        arguments: "The approval expired before the call ran. Repeat the same call to ask for a fresh approval.");
    /// `CONFIRMATION_INVALID` / denied.
    CONFIRMATION_DENIED = ("confirmation-invalid.denied",
        "The user denied this action. Do not retry it; respect the decision.");
    /// `CONFIRMATION_INVALID` / consumed.
    CONFIRMATION_CONSUMED = ("confirmation-invalid.consumed",
        "This confirmation was already used. Do not repeat the action; start a new request only if the user asks for it again.");
    /// `CONFIRMATION_INVALID` / mismatch.
    CONFIRMATION_MISMATCH = ("confirmation-invalid.mismatch",
        "This confirmation was given for a different request. Do not reuse it for this one.");
    /// `RATE_LIMITED` / rate; slot: `ms`.
    RATE_LIMITED = ("rate-limited.rate",
        "Too many calls right now. Wait {ms} ms before retrying; do not retry sooner.",
        arguments: "Too many calls right now, so this call did not run; the limit frees up in {ms} ms. Do not repeat it at once: do other steps first, or tell the user to try again later.");
    /// `RATE_LIMITED` / queue-full; slot: `ms`.
    QUEUE_FULL = ("rate-limited.queue-full",
        "The action queue is full. Wait {ms} ms before retrying; do not retry sooner.",
        arguments: "The action queue is full, so this call did not run; it frees up in {ms} ms. Do not repeat it at once: do other steps first, or tell the user to try again later.");
    /// `TIMEOUT` (sent only for a capability whose repeat cannot double an effect); slot: `ms`.
    TIMEOUT = ("timeout",
        "The call ran out of time after {ms} ms. Retry it with a fresh invocationId if it is still needed.",
        arguments: "The call ran out of time after {ms} ms. Repeat the same call if it is still needed; it is safe to repeat.");
    /// `CANCELLED`.
    CANCELLED = ("cancelled",
        "The call was cancelled before it finished. Retry with a fresh invocationId if it is still needed.",
        arguments: "The call was cancelled before it finished. Repeat the same call if it is still needed.");
    /// `EXECUTION_FAILED` / handler-error.
    HANDLER_ERROR = ("execution-failed.handler-error",
        "The action failed. Do not retry it as it is; report the failure or take a different approach.");
    /// `EXECUTION_FAILED` with an author explanation (an error the application made agent-visible);
    /// slot: `explanation`.
    HANDLER_ERROR_EXPLAINED = ("execution-failed.explained",
        "{explanation} Do not retry it as it is; report the failure or take a different approach.");
    /// `EXECUTION_FAILED` / output-invalid.
    OUTPUT_INVALID = ("execution-failed.output-invalid",
        "The action produced a result that failed validation, so it was withheld. Do not retry it as it is; report the failure.");
    /// `EXECUTION_FAILED` / output-too-large.
    OUTPUT_TOO_LARGE = ("execution-failed.output-too-large",
        "The action's result was too large, so it was withheld. Do not retry it as it is; ask for less data if the capability allows it.");
    /// `EXECUTION_FAILED` / transport, transient; slot: `ms`.
    TRANSPORT_TRANSIENT = ("execution-failed.transport-transient",
        "A service behind this action failed temporarily. Wait {ms} ms, then retry with a fresh invocationId.",
        arguments: "A service behind this action failed temporarily; it may work again in {ms} ms. Do not repeat the call at once: do other steps first, or tell the user to try again later.");
    /// `EXECUTION_FAILED` / audit-unavailable (always transient); slot: `ms`.
    AUDIT_UNAVAILABLE = ("execution-failed.audit-unavailable",
        "The action did not run because its audit record could not be written. Wait {ms} ms, then retry with a fresh invocationId.",
        arguments: "The action did not run because its audit record could not be written; it may work in {ms} ms. Do not repeat the call at once: do other steps first, or tell the user to try again later.");
    /// `EXECUTION_FAILED` / transport, not transient.
    TRANSPORT = ("execution-failed.transport",
        "A service behind this action failed. Do not retry it as it is; report the failure.");
    /// `EXECUTION_FAILED` / verification-failed.
    VERIFICATION_FAILED = ("execution-failed.verification-failed",
        "The action ran, but its expected result is not there. Observe the current state before doing anything else; do not repeat the action blindly.");
    /// `EXECUTION_FAILED` / outcome-unknown.
    OUTCOME_UNKNOWN = ("execution-failed.outcome-unknown",
        "The action may or may not have taken effect. Do not repeat it; check the current state or ask the user whether it happened.");
    /// `EXECUTION_FAILED` / outcome-unknown, for a call without an invocation id (nothing was
    /// recorded: a repeat would run the action again).
    OUTCOME_UNKNOWN_UNTRACKED = ("execution-failed.outcome-unknown-untracked",
        "The action may or may not have taken effect. Do not repeat it until the user or the current state shows it did not happen.");
}

/// A message that the code and the details alone decide: its template and its one number slot
/// (`ms`). Every template with an [`Template::arguments`] wording is one of these, so an adapter
/// can word a payload for its binding without knowing how it was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wording {
    /// The template.
    pub(crate) template: Template,
    /// The `{ms}` slot, for the templates that have one.
    ms: Option<u64>,
}

impl Wording {
    /// The message for a caller that sends `sends`.
    pub(crate) fn render(self, sends: Sends) -> String {
        let text = self.template.text_for(sends);
        match self.ms {
            Some(ms) => render(text, &[("ms", &ms.to_string())]),
            None => render(text, &[]),
        }
    }
}

fn typed<T: DeserializeOwned>(details: Option<&Map<String, Value>>) -> Option<T> {
    T::deserialize(Value::Object(details?.clone())).ok()
}

/// The wording of a payload whose message its code and details decide (`None` for the others:
/// messages with application text, and the codes no binding needs to word differently). The
/// constructors of these codes build their messages through it, so the two cannot disagree.
pub(crate) fn wording(code: ErrorCode, details: Option<&Map<String, Value>>) -> Option<Wording> {
    let plain = |template| Some(Wording { template, ms: None });
    match code {
        ErrorCode::ComponentUnmounted => match typed::<UnmountedDetails>(details)?.phase {
            UnmountPhase::Resolve => plain(UNMOUNTED_RESOLVE),
            UnmountPhase::MidFlight => plain(UNMOUNTED_MID_FLIGHT),
        },
        ErrorCode::StaleCapability => plain(match typed::<StaleDetails>(details).map(|d| d.reason) {
            Some(StaleReason::ToolVersionMismatch) => STALE_TOOL_VERSION,
            _ => STALE,
        }),
        ErrorCode::InvocationConflict => plain(match typed::<ConflictDetails>(details)?.reason {
            ConflictReason::IdReusedWithDifferentRequest => CONFLICT,
            ConflictReason::NaturalKeyUsedByDifferentRequest => CONFLICT_NATURAL_KEY,
        }),
        ErrorCode::ConfirmationInvalid => plain(match typed::<ConfirmationInvalidDetails>(details)?.reason {
            ConfirmationInvalidReason::Expired => CONFIRMATION_EXPIRED,
            ConfirmationInvalidReason::Denied => CONFIRMATION_DENIED,
            ConfirmationInvalidReason::Consumed => CONFIRMATION_CONSUMED,
            ConfirmationInvalidReason::Mismatch => CONFIRMATION_MISMATCH,
        }),
        ErrorCode::RateLimited => {
            let d = typed::<RateLimitedDetails>(details)?;
            let template = match d.reason {
                RateLimitReason::Rate => RATE_LIMITED,
                RateLimitReason::QueueFull => QUEUE_FULL,
            };
            Some(Wording { template, ms: Some(d.retry_after_ms) })
        }
        ErrorCode::Timeout => {
            let d = typed::<TimeoutDetails>(details)?;
            Some(Wording { template: TIMEOUT, ms: Some(d.timeout_ms) })
        }
        ErrorCode::Cancelled => plain(CANCELLED),
        ErrorCode::ExecutionFailed => {
            let d = typed::<ExecutionFailedDetails>(details)?;
            let template = match (d.reason?, d.transient) {
                (ExecutionFailedReason::Transport, Some(true)) => TRANSPORT_TRANSIENT,
                (ExecutionFailedReason::AuditUnavailable, _) => AUDIT_UNAVAILABLE,
                _ => return None,
            };
            Some(Wording { template, ms: Some(d.retry_after_ms?) })
        }
        _ => None,
    }
}

/// Renders a template's text, filling each `{slot}` from `slots` (missing slots render as
/// nothing), and caps the result at [`MAX_MESSAGE_CHARS`].
pub(crate) fn render(text: &str, slots: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                if let Some((_, value)) = slots.iter().find(|(k, _)| *k == name) {
                    out.push_str(value);
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    normalize(&out, MAX_MESSAGE_CHARS)
}

/// Whether `fragment` may be quoted inside a message: short, and made only of the characters a
/// JSON Pointer or a field name of a well-formed schema uses. Agent-chosen text outside that set
/// (an injected instruction as a property name, say) is left to `details`.
pub(crate) fn is_quotable(fragment: &str) -> bool {
    !fragment.is_empty()
        && fragment.len() <= 64
        && fragment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'.' | b'~'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `{slot}` names of a text, in order.
    fn slots(text: &str) -> Vec<&str> {
        text.split('{').skip(1).filter_map(|s| s.split_once('}').map(|(name, _)| name)).collect()
    }

    #[test]
    fn templates_are_short_imperative_and_unique() {
        let mut ids = std::collections::HashSet::new();
        let texts = ALL.iter().flat_map(|t| [Some((t.id, t.text)), t.arguments.map(|a| (t.id, a))]).flatten();
        for t in ALL {
            assert!(ids.insert(t.id), "duplicate template id {}", t.id);
            assert!(t.code().is_some(), "{} names no code", t.id);
            if let Some(arguments) = t.arguments {
                assert_eq!(slots(arguments), slots(t.text), "{}: both wordings fill the same slots", t.id);
                assert_ne!(arguments, t.text, "{}: a second wording that is the same", t.id);
            }
        }
        for (id, text) in texts {
            let t = Template { id, text, arguments: None };
            // Leave room for slots: no bare template may use more than two thirds of the cap.
            assert!(t.text.chars().count() <= 200, "{} is too long", t.id);
            assert!(t.text.ends_with('.'), "{} must end with a full stop", t.id);
            // Imperative: at least one sentence starts with a verb telling the model what to do.
            let imperative = [
                "Refresh", "Complete", "Choose", "Send", "Fix", "Remove", "Tell", "Do not", "Change", "Ask", "Call",
                "Wait", "Retry", "Verify", "Observe", "Repeat", "Make",
            ];
            assert!(
                t.text.split([':', '.', ';', '}']).any(|s| {
                    let s = s.trim_start();
                    imperative.iter().any(|v| s.starts_with(v))
                }),
                "{} has no imperative sentence: {}",
                t.id,
                t.text
            );
        }
    }

    #[test]
    fn renders_slots_and_caps_length() {
        assert_eq!(
            render(RATE_LIMITED.text, &[("ms", "1500")]),
            "Too many calls right now. Wait 1500 ms before retrying; do not retry sooner."
        );
        let long = "x".repeat(1000);
        let out = render(PRECONDITION.text, &[("explanation", &long)]);
        assert_eq!(out.chars().count(), MAX_MESSAGE_CHARS);
        assert!(out.ends_with('…'));
    }

    /// Every template a binding words differently is one whose message its code and details
    /// decide, and the constructors render exactly that wording: so an adapter can re-render a
    /// payload without knowing how it was built.
    #[test]
    fn every_second_wording_is_decided_by_code_and_details() {
        let worded: Vec<Template> = crate::examples::all()
            .filter_map(|p| {
                let w = wording(p.code(), p.details())?;
                assert_eq!(w.render(Sends::Request), p.message(), "{}: the constructor's message", w.template.id);
                Some(w.template)
            })
            .collect();
        for t in ALL.iter().filter(|t| t.arguments.is_some()) {
            assert!(worded.contains(t), "{}: no example is worded through `wording`", t.id);
        }
    }

    #[test]
    fn a_repair_plan_survives_the_second_wording() {
        use crate::repair::{Repair, RepairAction, RepairStep};
        let step = RepairStep::new(RepairAction::RetrySameOperation, "Try the same lookup again later");
        let p = crate::AgentSurfaceError::transient(std::time::Duration::from_millis(900))
            .with_repair(Repair::single(step))
            .unwrap()
            .into_payload();
        let worded = p.worded_for(Sends::Arguments);
        assert!(worded.message().starts_with(&render(TRANSPORT_TRANSIENT.arguments.unwrap(), &[("ms", "900")])));
        assert!(worded.message().ends_with("Next action: Try the same lookup again later."), "{}", worded.message());
        assert_eq!(worded.repair(), p.repair());
    }

    #[test]
    fn the_ambiguous_template_names_the_target_argument() {
        assert!(AMBIGUOUS.text.contains(&format!(" {} ", crate::details::TARGET_ARGUMENT)));
    }

    #[test]
    fn quotable_fragments() {
        assert!(is_quotable("/items/0/quantity"));
        assert!(!is_quotable("/ignore previous instructions"));
        assert!(!is_quotable(""));
        assert!(!is_quotable(&"a".repeat(65)));
    }
}
