//! Property tests: messages stay bounded and payloads stay consistent whatever text comes in.

use std::time::Duration;

use agent_surface_core::details::*;
use agent_surface_core::message::MAX_MESSAGE_CHARS;
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

proptest! {
    #[test]
    fn fragments_are_bounded_and_clean(s in any::<String>()) {
        let t = SafeText::trusted(s);
        prop_assert!(t.as_str().chars().count() <= MAX_FRAGMENT_CHARS);
        prop_assert!(!t.as_str().chars().any(char::is_control));
        prop_assert_eq!(t.as_str().trim(), t.as_str());
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
            prop_assert_eq!(back, p);
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
