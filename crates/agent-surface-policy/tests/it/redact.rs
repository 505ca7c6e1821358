//! The default redactor: whatever the text, no panic, and a credential planted in it in any of
//! the shapes it knows never survives, whatever surrounds it.

use agent_surface_policy::{Credentials, Redactor};
use proptest::prelude::*;

/// Text rich in what the scanner looks for: separators, quotes, escapes, `://`, `@`, key names.
fn tricky_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("://".to_string()),
        Just("@".to_string()),
        Just(":".to_string()),
        Just("=".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("\\".to_string()),
        Just(" ".to_string()),
        Just("Bearer ".to_string()),
        Just("token".to_string()),
        Just("Authorization".to_string()),
        Just("api_key".to_string()),
        Just("é".to_string()),
        ".{0,6}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

/// A credential: no separator, quote, whitespace or `/` of its own.
fn credential() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.~+!$*-]{6,24}"
}

/// `secret` in one of the shapes the default redactor knows.
fn planted(secret: &str, shape: usize, key: usize) -> String {
    const KEYS: &[&str] = &[
        "password",
        "PASSWORD",
        "passwd",
        "token",
        "access_token",
        "secret",
        "client_secret",
        "key",
        "api_key",
        "apikey",
        "ApiKey",
        "x-api-key",
        "AWS_SECRET_ACCESS_KEY",
        "\"password\"",
        "\\\"token\\\"",
    ];
    let key = KEYS[key % KEYS.len()];
    match shape % 12 {
        0 => format!("postgres://admin:{secret}@db.internal:5432/prod"),
        1 => format!("redis://:{secret}@cache"),
        2 => format!("https://{secret}@git.example/repo"),
        3 => format!(" Bearer {secret}"),
        4 => format!("Authorization: Bearer {secret}"),
        5 => format!("authorization=Basic {secret}"),
        6 => format!("{key}={secret}"),
        7 => format!("{key}: {secret}"),
        8 => format!("{key} = \"{secret}\""),
        9 => format!("{key}:'{secret}'"),
        10 => format!("{key}:\\\"{secret}\\\""),
        _ => format!("{key}={secret}&next=1"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>(), tricky in tricky_text()) {
        let r = Credentials::new();
        let _ = r.redact(&text);
        let out = r.redact(&tricky);
        // What is not masked is kept: the output is never longer than the text plus one mask per
        // byte, and text without anything to mask comes back borrowed.
        prop_assert!(out.len() <= tricky.len() * 4 + 3);
    }

    #[test]
    fn a_planted_credential_never_survives(
        before in tricky_text(),
        secret in credential(),
        after in tricky_text(),
        shape in 0usize..12,
        key in 0usize..15,
    ) {
        let text = format!("{before}{}{after}", planted(&secret, shape, key));
        let out = Credentials::new().redact(&text);
        prop_assert!(!out.contains(&secret), "{secret:?} survived in {out:?} (from {text:?})");
    }
}

/// Inputs built to make a careless scanner quadratic finish at once (each is a megabyte).
#[test]
fn adversarial_inputs_take_linear_time() {
    let r = Credentials::new();
    for unit in ["token=", "://", "a://b@", "Bearer ", ":", "password\"\"", "key=\"\\", &"k".repeat(70), "=:"] {
        let text = unit.repeat((1 << 20) / unit.len());
        let started = std::time::Instant::now();
        let _ = r.redact(&text);
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(5), "{unit:?}: {took:?}");
    }
}

#[test]
fn text_without_secrets_is_borrowed() {
    let text = "db unreachable: connection refused (os error 111) at 10.0.0.5:5432";
    assert!(matches!(Credentials::new().redact(text), std::borrow::Cow::Borrowed(_)));
}
