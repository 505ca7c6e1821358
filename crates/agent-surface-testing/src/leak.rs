//! The leak assertion: no agent-facing serialization of a result contains a secret.
//!
//! A test feeds a handler, a policy or a store a hostile failure whose text carries secrets (SQL,
//! a credentialed URL, a stack trace, an environment value) and then asserts that none of them
//! reached the agent channel, in any form the agent may see: compact or pretty JSON, the
//! payload's `Display`, the message, or an adapter's own wire form.

use std::fmt;

use agent_surface_core::InvokeResult;

/// Secrets that must never reach an agent.
///
/// ```
/// use agent_surface_core::{AgentSurfaceError, InvokeResult};
/// use agent_surface_testing::{Secrets, assert_no_leak};
///
/// let secrets = Secrets::new()
///     .sql("SELECT card_number FROM payments WHERE user_id = 7")
///     .url("postgres://billing:hunter2@10.0.0.5:5432/prod")
///     .stack_trace("at billing::charge (src/billing.rs:42:7)\nat tokio::runtime::task::poll")
///     .env("STRIPE_SECRET_KEY=sk_live_51Hx");
/// let cause = std::io::Error::other(format!("{secrets:?}"));
/// let result = InvokeResult::error(AgentSurfaceError::internal(cause).into_payload(), None);
/// assert_no_leak(&result, &secrets);
/// ```
#[derive(Clone, Default)]
pub struct Secrets {
    items: Vec<(&'static str, String)>,
}

impl Secrets {
    /// No secrets yet.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    fn with(mut self, kind: &'static str, text: impl Into<String>) -> Secrets {
        self.items.push((kind, text.into()));
        self
    }

    /// A query text.
    pub fn sql(self, text: impl Into<String>) -> Secrets {
        self.with("sql", text)
    }

    /// A URL, typically with credentials or an internal host.
    pub fn url(self, text: impl Into<String>) -> Secrets {
        self.with("url", text)
    }

    /// A stack trace; each of its lines counts as a secret too.
    pub fn stack_trace(self, text: impl Into<String>) -> Secrets {
        self.with("stack trace", text)
    }

    /// An environment value (or `NAME=value`).
    pub fn env(self, text: impl Into<String>) -> Secrets {
        self.with("env", text)
    }

    /// Any other secret text.
    pub fn other(self, text: impl Into<String>) -> Secrets {
        self.with("secret", text)
    }

    /// Every needle to look for, with its kind: each whole secret (whatever its length), each of
    /// its lines of at least 8 characters (shorter fragments would match innocent text), and the
    /// JSON-escaped form of each (how it would appear inside a JSON string).
    ///
    /// # Panics
    ///
    /// When there is nothing to look for (no secret, or only blank ones): a leak check over no
    /// needles could never fail.
    pub fn needles(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        let mut push = |kind: &'static str, s: &str, min_chars: usize| {
            let s = s.trim();
            if !s.is_empty() && s.chars().count() >= min_chars && !out.iter().any(|(_, n)| n == s) {
                out.push((kind, s.to_string()));
            }
        };
        for (kind, text) in &self.items {
            push(kind, text, 1);
            for line in text.lines() {
                push(kind, line, 8);
            }
            let escaped = serde_json::to_string(text).unwrap_or_default();
            push(kind, escaped.trim_matches('"'), 1);
        }
        assert!(!out.is_empty(), "a leak check needs at least one non-blank secret");
        out
    }
}

impl fmt::Debug for Secrets {
    /// The secrets themselves (this type exists to be fed into hostile test fixtures).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.items.iter().map(|(_, s)| s)).finish()
    }
}

/// The agent-facing serializations of a result, each with a label: compact and pretty JSON of
/// the result and of its payload, the payload's `Display`, and the message.
pub fn agent_facing_serializations(result: &InvokeResult) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("result json", serde_json::to_string(result).unwrap_or_default()),
        ("result pretty json", serde_json::to_string_pretty(result).unwrap_or_default()),
    ];
    if let Some(p) = result.error_payload() {
        out.push(("payload json", p.to_json().to_string()));
        out.push(("payload display", p.to_string()));
        out.push(("message", p.message().to_string()));
    }
    out
}

/// Asserts that no agent-facing serialization of `result` contains any of `secrets`.
///
/// # Panics
///
/// When one does; the message names the secret's kind and the serialization, and shows the
/// whole serialization.
#[track_caller]
pub fn assert_no_leak(result: &InvokeResult, secrets: &Secrets) {
    for (label, text) in agent_facing_serializations(result) {
        assert_text_has_no_leak(label, &text, secrets);
    }
}

/// Asserts that `text` (an adapter's own wire form, say) contains none of `secrets`.
///
/// # Panics
///
/// When it does.
#[track_caller]
pub fn assert_text_has_no_leak(label: &str, text: &str, secrets: &Secrets) {
    for (kind, needle) in secrets.needles() {
        if text.contains(&needle) {
            panic!("a {kind} secret leaked into the {label}: {needle:?}\n{label}:\n{text}");
        }
    }
}
