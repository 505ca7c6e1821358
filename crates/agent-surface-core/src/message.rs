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

/// Every code's templates, from the table's `messages` column (`codes.rs`): each code's
/// templates are written in its block there, in the table's order.
macro_rules! code_templates {
    ($( $code:ident { $($template:tt)* } )*) => {
        templates! { $( $($template)* )* }
    };
}

crate::codes::code_table!(messages => code_templates);

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
                (ExecutionFailedReason::StoreUnavailable, _) => STORE_UNAVAILABLE,
                _ => return None,
            };
            Some(Wording { template, ms: Some(d.retry_after_ms?) })
        }
        _ => None,
    }
}

/// Renders a template's text, filling each `{slot}` from `slots` (missing slots render as
/// nothing), within [`MAX_MESSAGE_CHARS`]: when the whole is longer, the longest slot is cut
/// (ending in `…`), never the template's own words, whose closing instruction is what the model
/// acts on.
pub(crate) fn render(text: &str, slots: &[(&str, &str)]) -> String {
    let whole = fill(text, slots);
    if whole.chars().count() <= MAX_MESSAGE_CHARS {
        return whole;
    }
    let mut values: Vec<(&str, String)> = slots.iter().map(|(k, v)| (*k, (*v).to_string())).collect();
    // Each round cuts the longest slot by the excess; a few rounds at most (a cut may move the
    // whitespace the whole collapses).
    for _ in 0..4 {
        let borrowed: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let whole = fill(text, &borrowed);
        let length = whole.chars().count();
        if length <= MAX_MESSAGE_CHARS {
            return whole;
        }
        let Some(longest) = values.iter_mut().max_by_key(|(_, v)| v.chars().count()) else { break };
        // A slot's leading space (` at /quantity`) separates it from the template's words.
        let lead = if longest.1.starts_with(char::is_whitespace) { " " } else { "" };
        let keep = normalize(&longest.1, usize::MAX).chars().count().saturating_sub(length - MAX_MESSAGE_CHARS);
        // Cut to nothing, a slot still shows that something was there (no `()` in the sentence).
        let cut = if keep == 0 { "…".to_string() } else { normalize(&longest.1, keep) };
        longest.1 = format!("{lead}{cut}");
    }
    let borrowed: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    normalize(&fill(text, &borrowed), MAX_MESSAGE_CHARS)
}

/// `text` with each `{slot}` filled from `slots`, whitespace collapsed.
fn fill(text: &str, slots: &[(&str, &str)]) -> String {
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
    normalize(&out, usize::MAX)
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
                t.text.split([':', '.', ';', '}', '”']).any(|s| {
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
        // The slot is cut, the template's own words kept whole.
        let long = "x".repeat(1000);
        let out = render(PRECONDITION.text, &[("explanation", &long)]);
        assert!(out.chars().count() <= MAX_MESSAGE_CHARS, "{out}");
        let tail = PRECONDITION.text.rsplit('}').next().unwrap().trim();
        assert!(out.ends_with(tail) && out.contains("x…"), "{out}");
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
