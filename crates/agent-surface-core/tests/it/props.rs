//! Property tests: messages stay bounded and payloads stay consistent whatever text comes in.

use std::time::Duration;

use agent_surface_core::details::*;
use agent_surface_core::message::{MAX_MESSAGE_CHARS, Sends};
use agent_surface_core::repair::{MAX_INSTRUCTION_CHARS, MAX_NAME_CHARS};
use agent_surface_core::{AgentSurfaceError, ErrorPayload, MAX_FRAGMENT_CHARS, SafeText};
use proptest::prelude::*;

fn any_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,20}".prop_map(serde_json::Value::from),
        prop_oneof![Just("CANCELLED"), Just("TIMEOUT"), Just("no"), Just("yes"), Just("expired")]
            .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("code".to_string()),
                    Just("message".to_string()),
                    Just("retry".to_string()),
                    Just("details".to_string()),
                    "[a-zA-Z]{1,8}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Normalized form, checked apart from the normalizer: non-empty, within `cap`, no control or
/// invisible character (the library's one list, `is_invisible`, which its unit tests pin code point
/// by code point against an independent table), and no whitespace but single spaces between words.
fn is_clean(text: &str, cap: usize) -> bool {
    let n = text.chars().count();
    n > 0
        && n <= cap
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !text.contains("  ")
        && text
            .chars()
            .all(|c| !c.is_control() && (c == ' ' || !c.is_whitespace()) && !agent_surface_core::is_invisible(c))
}

/// Arbitrary Unicode, weighted towards what could mislead a model or hide text from a reviewer:
/// controls, line and paragraph separators, bidi controls, zero-width and tag characters.
fn hostile_text(max: usize) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => prop::char::range('a', 'z'),
        1 => Just(' '),
        2 => any::<char>(),
        2 => prop::sample::select(vec![
            '\n', '\t', '\r', '\u{0}', '\u{7}', '\u{1B}', '\u{7F}', '\u{85}', '\u{A0}', '\u{AD}', '\u{61C}', '\u{180E}',
            '\u{200B}', '\u{200D}', '\u{2028}', '\u{2029}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{FEFF}', '\u{FFF9}',
            '\u{E0001}', '\u{E0041}', '\u{E007F}', '…', '"', '\\',
        ]),
    ];
    let raw = prop::collection::vec(ch, 0..max).prop_map(String::from_iter);
    // Clean text too, so that the accepting side is exercised.
    let clean = "[a-z]{1,10}( [a-z.]{1,10}){0,3}";
    prop_oneof![1 => raw, 2 => clean.prop_map(String::from)]
}

#[derive(Debug, Clone)]
struct Step {
    action: &'static str,
    tool: Option<String>,
    instruction: String,
}

fn hostile_step() -> impl Strategy<Value = Step> {
    (
        prop::sample::select(vec!["change_input", "call_tool", "refresh_state"]),
        prop::option::of(hostile_text(MAX_NAME_CHARS + 4)),
        hostile_text(MAX_INSTRUCTION_CHARS + 4),
    )
        .prop_map(|(action, tool, instruction)| Step { action, tool, instruction })
}

proptest! {
    #[test]
    fn parsed_text_is_normalized_or_rejected(
        message in hostile_text(MAX_MESSAGE_CHARS + 4),
        steps in prop::option::of(prop::collection::vec(hostile_step(), 1..3)),
        preserve in prop::collection::vec(hostile_text(MAX_NAME_CHARS + 4), 0..3),
    ) {
        // The document in wire order, so that a round trip can be compared byte for byte.
        let js = |s: &str| serde_json::to_string(s).unwrap();
        let mut doc = format!(
            r#"{{"code":"PRECONDITION_FAILED","message":{},"retry":"with-changes","details":{{}}"#,
            js(&message)
        );
        let mut valid = is_clean(&message, MAX_MESSAGE_CHARS);
        if let Some(steps) = &steps {
            let rendered: Vec<String> = steps
                .iter()
                .map(|s| {
                    let tool = s.tool.as_deref().map(|t| format!(r#","tool":{}"#, js(t))).unwrap_or_default();
                    format!(r#"{{"action":"{}"{tool},"instruction":{}}}"#, s.action, js(&s.instruction))
                })
                .collect();
            doc.push_str(&format!(r#","repair":{{"steps":[{}]"#, rendered.join(",")));
            if !preserve.is_empty() {
                let names: Vec<String> = preserve.iter().map(|f| js(f)).collect();
                doc.push_str(&format!(r#","preserve":[{}]"#, names.join(",")));
            }
            doc.push('}');
            for s in steps {
                valid &= is_clean(&s.instruction, MAX_INSTRUCTION_CHARS);
                valid &= s.tool.as_deref().map_or(s.action != "call_tool", |t| is_clean(t, MAX_NAME_CHARS));
            }
            valid &= preserve.iter().all(|f| is_clean(f, MAX_NAME_CHARS));
        }
        doc.push('}');
        match serde_json::from_str::<ErrorPayload>(&doc) {
            Ok(p) => {
                prop_assert!(valid, "accepted text that is not in normalized form: {}", doc);
                prop_assert!(is_clean(p.message(), MAX_MESSAGE_CHARS));
                if let Some(r) = p.repair() {
                    for s in r.steps() {
                        prop_assert!(is_clean(s.instruction(), MAX_INSTRUCTION_CHARS));
                        prop_assert!(s.tool_name().is_none_or(|t| is_clean(t, MAX_NAME_CHARS)));
                    }
                    prop_assert!(r.preserved().iter().all(|f| is_clean(f, MAX_NAME_CHARS)));
                }
                prop_assert_eq!(p.to_wire_text(), doc);
            }
            Err(e) => prop_assert!(!valid, "rejected a valid payload: {}: {}", e, doc),
        }
    }

    #[test]
    fn fragments_are_bounded_and_clean(s in any::<String>()) {
        let t = SafeText::trusted(s);
        prop_assert!(t.as_str().chars().count() <= MAX_FRAGMENT_CHARS);
        prop_assert!(t.is_empty() || is_clean(t.as_str(), MAX_FRAGMENT_CHARS), "{:?}", t);
    }

    #[test]
    fn messages_are_bounded(s in any::<String>(), ms in any::<u64>(), paths in prop::collection::vec(any::<String>(), 0..6)) {
        let issues = paths.into_iter().map(|p| InputIssue { path: p, message: "bad".into() }).collect();
        let errs = [
            AgentSurfaceError::precondition_failed(SafeText::trusted(s.clone())),
            AgentSurfaceError::capability_not_available(SafeText::trusted(s.clone())),
            AgentSurfaceError::handler_failed(SafeText::trusted(s.clone())),
            AgentSurfaceError::invalid_input(issues, Some(vec![s.clone()])),
            AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(ms)),
            AgentSurfaceError::timeout(Duration::from_millis(ms), ms % 2 == 0),
        ];
        for e in errs {
            let p = e.into_payload();
            let n = p.message().chars().count();
            prop_assert!(n > 0 && n <= MAX_MESSAGE_CHARS, "{} chars", n);
            // Every built payload parses back unchanged.
            let back: ErrorPayload = serde_json::from_value(p.to_json()).unwrap();
            prop_assert_eq!(&back, &p);
            // Worded for a model, it keeps all but the message, which stays bounded and parses.
            let worded = p.worded_for(Sends::Arguments);
            prop_assert_eq!((worded.code(), worded.retry(), worded.details()), (p.code(), p.retry(), p.details()));
            let back: ErrorPayload = serde_json::from_value(worded.to_json()).unwrap();
            prop_assert_eq!(&back, &*worded);
        }
    }

    #[test]
    fn parsing_arbitrary_json_never_panics(v in any_json()) {
        if let Ok(p) = serde_json::from_value::<ErrorPayload>(v) {
            // Whatever parses is consistent with the matrix.
            prop_assert_eq!(p.retry(), agent_surface_core::matrix::derive_retry(p.code(), p.details()));
        }
    }
}
