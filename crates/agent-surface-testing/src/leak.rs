//! The leak assertion: no agent-facing serialization of a result contains a secret.
//!
//! A test feeds a handler, a policy or a store a hostile failure whose text carries secrets (SQL,
//! a credentialed URL, a stack trace, an environment value) and then asserts that none of them
//! reached the agent channel, in any form the agent may see: compact or pretty JSON, the
//! payload's `Display`, the message, or an adapter's own wire form.
//!
//! The operator channel carries causes on purpose, but not the credentials in them: with
//! [`credential_corpus`] (failure texts as application code writes them, each carrying
//! credentials) and [`assert_operator_log_has_no_credentials`], a test checks that the redactor
//! (`agent_surface_policy::redact`) masked every one.

use std::fmt;

use agent_surface_core::InvokeResult;

/// The kind of a [`Secrets::credential`].
const CREDENTIAL: &str = "credential";

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

    /// A credential (a password, a token, a key): it must reach neither the agent channel nor
    /// the operator channel ([`assert_operator_log_has_no_credentials`]).
    pub fn credential(self, text: impl Into<String>) -> Secrets {
        self.with(CREDENTIAL, text)
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

/// The credentials of `secrets` ([`Secrets::credential`]) found in `log`, an operator log, as
/// needles (each whole credential and its JSON-escaped form): empty when none leaked.
pub fn credential_leaks(log: &str, secrets: &Secrets) -> Vec<String> {
    secrets
        .needles()
        .into_iter()
        .filter(|(kind, needle)| *kind == CREDENTIAL && log.contains(needle.as_str()))
        .map(|(_, needle)| needle)
        .collect()
}

/// Asserts that `log` (an operator log, from [`crate::capture_operator_log`]) contains none of
/// the credentials of `secrets`. Other secrets (a query, a stack trace) may be there: the
/// operator channel is where causes go.
///
/// ```
/// use agent_surface_testing::{Secrets, assert_operator_log_has_no_credentials, capture_operator_log};
///
/// let secrets = Secrets::new().credential("hunter2");
/// let e = std::io::Error::other("postgres://app:hunter2@db/prod unreachable");
/// let ((), log) = capture_operator_log(|| {
///     tracing::warn!(cause = %agent_surface_policy::redacted(&e), "store failed");
/// });
/// assert!(log.contains("postgres://app:***@db/prod"));
/// assert_operator_log_has_no_credentials(&log, &secrets);
/// ```
///
/// # Panics
///
/// When a credential is there, or `secrets` holds no credential (the check could not fail).
#[track_caller]
pub fn assert_operator_log_has_no_credentials(log: &str, secrets: &Secrets) {
    assert!(
        secrets.items.iter().any(|(kind, text)| *kind == CREDENTIAL && !text.trim().is_empty()),
        "an operator-log leak check needs at least one credential"
    );
    let leaks = credential_leaks(log, secrets);
    assert!(leaks.is_empty(), "{} credential(s) reached the operator log: {leaks:?}\n{log}", leaks.len());
}

/// Failure texts as application code writes them (a driver's connection error, a client's
/// request dump, a configuration printed with `{:?}`, a panic message), each carrying
/// credentials in a shape the default redactor knows, and those credentials as [`Secrets`].
/// Feed the texts to hostile handlers, policies and stores; then check the operator log with
/// [`assert_operator_log_has_no_credentials`].
pub fn credential_corpus() -> (Vec<String>, Secrets) {
    const TEXTS: &[(&str, &[&str])] = &[
        ("error connecting to postgres://admin:hunter2@db.internal.example:5432/prod", &["hunter2"]),
        ("redis error: redis://:r3d1s-Pa55@cache.internal:6379/0: connection refused", &["r3d1s-Pa55"]),
        ("git fetch https://ghp_A1b2C3d4E5f6G7h8@git.example/org/repo.git failed", &["ghp_A1b2C3d4E5f6G7h8"]),
        (
            "upstream 401: request headers {\"Authorization\": \"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiJ9\"}",
            &["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiJ9"],
        ),
        ("GET /v1/charges?api_key=sk_live_51HxAbCdEfGh&limit=10 -> 500", &["sk_live_51HxAbCdEfGh"]),
        (
            "bad config: Config { user: \"svc\", password: \"Tr0ub4dor&3\", api_key: \"AKIAEXAMPLE42\" }",
            &["Tr0ub4dor", "AKIAEXAMPLE42"],
        ),
        (
            "environment: AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            &["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
        ),
        ("token=sk_live_9f8e7d6c5b4a expired; secret: 's3cr3t value'", &["sk_live_9f8e7d6c5b4a", "s3cr3t value"]),
        ("proxy said: Authorization: Basic YWRtaW46aHVudGVyMg==", &["YWRtaW46aHVudGVyMg=="]),
        ("{\"client_secret\":\"cs_0123456789abcdef\",\"apikey\":\"k-777\"}", &["cs_0123456789abcdef", "k-777"]),
    ];
    let mut secrets = Secrets::new();
    let mut texts = Vec::with_capacity(TEXTS.len());
    for (text, credentials) in TEXTS {
        texts.push((*text).to_string());
        for c in *credentials {
            secrets = secrets.credential(*c);
        }
    }
    (texts, secrets)
}
