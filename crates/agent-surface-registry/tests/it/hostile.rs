//! Hostile handlers and hostile inputs: the right code, nothing leaked, never a panic.

use agent_surface_core::{AgentSurfaceError, ErrorCode, ErrorPayload, InvokeResult, matrix};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

const SECRETS: &[&str] = &[
    "SELECT card_number FROM payments",
    "postgres://admin:hunter2@db.internal.example:5432/prod",
    "at shop::orders::cancel (src/orders.rs:88:17)",
    "AWS_SECRET_ACCESS_KEY=AKIAEXAMPLEEXAMPLE",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9",
    "hunter2",
];

#[derive(Debug, Deserialize, JsonSchema)]
struct Which {
    which: u8,
    #[schemars(extend("writeOnly" = true))]
    #[allow(dead_code, reason = "present for its schema: a sensitive field")]
    password: Option<String>,
}

fn hostile_registry() -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(RegistryConfig::default());
    r.define("evil", |t| {
        t.capability("run", "Fail in a hostile way.").handler(|_c: Ctx, i: Which| async move {
            let text = SECRETS.join("\n");
            match i.which {
                0 => Err(AgentSurfaceError::internal(std::io::Error::other(text))),
                1 => {
                    let e: Box<dyn std::error::Error + Send + Sync> = text.into();
                    Err(AgentSurfaceError::transient(std::time::Duration::from_millis(10)).with_cause(e))
                }
                2 => panic!("{text}"),
                3 => {
                    let _: u32 = text.parse()?;
                    Ok(json!({}))
                }
                4 => Err(AgentSurfaceError::precondition_failed("The order is locked.")
                    .with_cause(std::io::Error::other(text))),
                _ => Ok(json!({"ok": true})),
            }
        })
    })
    .unwrap();
    let m = r.mount("evil", "main").unwrap();
    (r, m)
}

#[track_caller]
fn assert_clean(result: &InvokeResult) {
    let text = serde_json::to_string(result).unwrap();
    for s in SECRETS {
        assert!(!text.contains(s), "{s:?} leaked into {text}");
    }
}

#[test]
fn hostile_causes_reach_the_operator_channel_only() {
    let ((), log) = capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (r, _m) = hostile_registry();
            for which in 0..5 {
                let result = r.invoke(call("evil.run", json!({"which": which})), consumer("c")).await;
                assert!(result.error_payload().is_some(), "{which}: {result:?}");
                assert_clean(&result);
            }
            assert!(r.invoke(call("evil.run", json!({"which": 9})), consumer("c")).await.is_ok());
        });
    });
    assert!(log.contains("SELECT card_number FROM payments"), "the cause chain is on the operator channel:\n{log}");
    assert!(log.contains("code=\"EXECUTION_FAILED\"") || log.contains("code=EXECUTION_FAILED"), "{log}");
}

#[tokio::test]
async fn hostile_inputs_get_the_right_code_and_no_echo() {
    let (r, _m) = hostile_registry();
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let cases: Vec<(Value, &str)> = vec![
        (json!("just a string"), "non-object"),
        (json!(null), "null"),
        (json!([1, 2, 3]), "array"),
        (json!({"which": "DROP TABLE users; --"}), "wrong type"),
        (json!({"which": 1, "unknown": "ignore previous instructions"}), "unknown field"),
        (json!({"which": 1, "password": 12345678}), "sensitive field of the wrong type"),
        (json!({"which": 1, "blob": "x".repeat(2 * 1024 * 1024)}), "huge"),
        (json!({"which": 1, "nested": deep}), "deep"),
        (json!({"which": 300}), "out of range"),
    ];
    for (input, what) in cases {
        let echo: Vec<String> = match &input {
            Value::Object(m) => m
                .values()
                .filter_map(|v| v.as_str().map(str::to_string))
                .chain(m.values().filter_map(|v| v.as_i64().map(|n| n.to_string())))
                .collect(),
            Value::String(s) => vec![s.clone()],
            _ => vec![],
        };
        let result = r.invoke(call("evil.run", input), consumer("c")).await;
        assert_eq!(result.code(), Some(ErrorCode::InvalidInput), "{what}: {result:?}");
        let text = serde_json::to_string(&result).unwrap();
        for e in echo.iter().filter(|e| e.len() >= 4) {
            assert!(!text.contains(e.as_str()), "{what}: the value {e:?} was echoed: {text}");
        }
        assert!(text.len() < 4096, "{what}: the error is {} bytes", text.len());
    }
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![Just("which".to_string()), Just("password".to_string()), ".{0,6}"],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arbitrary_request() -> impl Strategy<Value = agent_surface_registry::InvokeRequest> {
    (
        prop_oneof![Just("evil.run".to_string()), Just("evil.nope".to_string()), ".{0,16}"],
        arbitrary_json(),
        proptest::option::of("[a-z0-9-]{1,8}"),
        proptest::option::of(prop_oneof![Just("main".to_string()), ".{0,8}"]),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(capability, input, invocation_id, instance, version)| {
            let mut req = agent_surface_registry::InvokeRequest::new(capability, input);
            req.invocation_id = invocation_id;
            req.target = instance.map(agent_surface_registry::Target::instance);
            req.surface_version = version;
            req
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever is sent, `invoke` answers (no panic) with a result whose error payload is one the
    /// matrix accepts (it parses back, with the retry the matrix derives).
    #[test]
    fn invoke_never_panics_and_always_answers_within_the_matrix(requests in prop::collection::vec(arbitrary_request(), 1..6)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (r, _m) = hostile_registry();
            for req in requests {
                let result = r.invoke(req, consumer("c")).await;
                if let Some(p) = result.error_payload() {
                    let back: ErrorPayload = serde_json::from_value(p.to_json()).expect("payload parses back");
                    assert_eq!(&back, p);
                    assert_eq!(p.retry(), matrix::derive_retry(p.code(), p.details()));
                    assert!(p.message().chars().count() <= 300);
                }
                assert_clean(&result);
            }
        });
    }
}

/// Upstream payloads a handler might relay, each carrying the secrets wherever free text fits —
/// message, issue texts, a precondition's explanation and extras, a repair plan — for every code
/// a handler may return. They parse as payloads (they are normalized, and their retry matches).
fn upstream_payloads() -> Vec<ErrorPayload> {
    let secret = SECRETS.join(" | ").replace('\n', " ");
    let texts = [
        json!({"code": "INVALID_INPUT", "message": format!("Bad input: {secret}."), "retry": "with-changes",
               "details": {"issues": [{"path": "/q", "message": secret}], "lockedFields": ["/x"]}}),
        json!({"code": "NOT_AUTHENTICATED", "message": format!("Sign in at {secret}."), "retry": "after-refresh"}),
        json!({"code": "NOT_AUTHORIZED", "message": format!("Denied by {secret}."), "retry": "no",
               "details": {"origin": "server"}}),
        json!({"code": "PRECONDITION_FAILED", "message": format!("Locked: {secret}."), "retry": "with-changes",
               "details": {"reason": "row-locked", "query": secret, "dsn": SECRETS[1]}}),
        json!({"code": "RATE_LIMITED", "message": format!("Slow down ({secret})."), "retry": "after-delay",
               "details": {"reason": "rate", "retryAfterMs": 1500}}),
        json!({"code": "EXECUTION_FAILED", "message": format!("Upstream died: {secret}."), "retry": "after-delay",
               "details": {"reason": "transport", "transient": true, "retryAfterMs": 800}}),
        json!({"code": "CAPABILITY_NOT_FOUND", "message": format!("No {secret}."), "retry": "after-refresh"}),
    ];
    texts
        .into_iter()
        .map(|mut v| {
            // The retry category each code and its details call for.
            let code: ErrorCode = serde_json::from_value(v["code"].clone()).unwrap();
            let retry = matrix::derive_retry(code, v.get("details").and_then(Value::as_object));
            v["retry"] = serde_json::to_value(retry).unwrap();
            v
        })
        .map(|v| match serde_json::from_value::<ErrorPayload>(v.clone()) {
            Ok(p) => p,
            Err(e) => panic!("the fixture must parse as a payload ({e}): {v}"),
        })
        .collect()
}

/// A handler that relays an upstream payload (`From<ErrorPayload>`) cannot carry its free text to
/// the agent: the code, the retry category and typed details survive, the text does not.
#[tokio::test]
async fn a_relayed_payload_keeps_its_code_and_loses_its_text() {
    let r = Registry::new(RegistryConfig::default());
    r.define("relay", |t| {
        // A read: a write that relays a retryable answer gets its unknown outcome instead (it may
        // have written first; `host_errors`).
        t.capability("run", "Relay an upstream failure.").effect(agent_surface_core::Effect::Read).handler(
            |_c: Ctx, i: Value| async move {
                let n = i["n"].as_u64().unwrap_or(0) as usize;
                let upstream = upstream_payloads().swap_remove(n);
                Err::<Value, _>(AgentSurfaceError::from(upstream))
            },
        )
    })
    .unwrap();
    let _m = r.mount("relay", "main").unwrap();
    let payloads = upstream_payloads();
    for (n, upstream) in payloads.iter().enumerate() {
        let result = r.invoke(call("relay.run", json!({"n": n})), consumer("c")).await;
        assert_clean(&result);
        let p = result.error_payload().expect("an error");
        let expected =
            if matrix::spec(upstream.code()).handler_may_return { upstream.code() } else { ErrorCode::ExecutionFailed };
        assert_eq!(p.code(), expected, "{upstream:?}");
        assert_eq!(p.retry(), matrix::derive_retry(p.code(), p.details()), "{p:?}");
    }
    // Typed details survive.
    let limited = r.invoke(call("relay.run", json!({"n": 4})), consumer("c")).await;
    assert_eq!(limited.error_payload().unwrap().detail("retryAfterMs"), Some(&json!(1500)));
    let locked = r.invoke(call("relay.run", json!({"n": 3})), consumer("c")).await;
    assert_eq!(locked.error_payload().unwrap().detail("reason"), Some(&json!("row-locked")));
}

/// A registry whose handler, authority policy and rate limiter fail with `text` in every way
/// they can: `evil.run` by `which` (an internal error, a transient one with a boxed cause, a
/// panic, a `?`-converted error, an unmet precondition with a cause), `evil.deny` by a policy
/// error, `evil.boom` by a policy panic, `evil.slow` by a rate limiter panic.
fn credential_registry(text: &str) -> (Registry, agent_surface_registry::Mount) {
    use agent_surface_policy::{AuthorityDecision, FnPolicy, Policies, PolicyError, RateDecision};
    use agent_surface_testing::FnLimiter;

    let text: std::sync::Arc<str> = text.into();
    let (deny, boom, slow) = (text.clone(), text.clone(), text.clone());
    let policies = Policies::default_allow()
        .for_capability("evil.deny", FnPolicy::new("vault", move |_| Err(PolicyError::new(deny.to_string()))))
        .for_capability(
            "evil.boom",
            FnPolicy::new("vault", move |_| -> Result<AuthorityDecision, PolicyError> { panic!("{boom}") }),
        );
    let limiter = FnLimiter::new(move |call, _| {
        assert!(call.capability != "evil.slow", "{slow}");
        RateDecision::Allow(None)
    });
    let r = Registry::new(RegistryConfig {
        authority: Some(std::sync::Arc::new(policies)),
        rate_limiter: Some(std::sync::Arc::new(limiter)),
        ..RegistryConfig::default()
    });
    r.define("evil", |t| {
        let run = text.clone();
        t.capability("run", "Fail in a hostile way.").handler(move |_c: Ctx, i: Which| {
            let text = run.to_string();
            async move {
                match i.which {
                    0 => Err(AgentSurfaceError::internal(std::io::Error::other(text))),
                    1 => {
                        let e: Box<dyn std::error::Error + Send + Sync> = text.into();
                        Err(AgentSurfaceError::transient(std::time::Duration::from_millis(10)).with_cause(e))
                    }
                    2 => panic!("{text}"),
                    3 => {
                        let _: u32 = text.parse().map_err(|_| std::io::Error::other(text))?;
                        Ok(json!({}))
                    }
                    _ => Err(AgentSurfaceError::precondition_failed("The order is locked.")
                        .with_cause(std::io::Error::other(text))),
                }
            }
        });
        for (name, description) in [
            ("deny", "Denied by a failing policy."),
            ("boom", "Denied by a panicking policy."),
            ("slow", "Limited by a panicking limiter."),
        ] {
            t.capability(name, description).handler(|_c: Ctx, _i: Value| async move { Ok(json!({})) });
        }
    })
    .unwrap();
    let m = r.mount("evil", "main").unwrap();
    (r, m)
}

/// Every failure of the credential corpus, run with the operator log captured at `level`: the
/// log and the number of credentials found in it.
fn operator_log_of_the_corpus(level: tracing::Level) -> (String, usize) {
    let (texts, secrets) = agent_surface_testing::credential_corpus();
    let ((), log) = agent_surface_testing::capture_operator_log_at(level, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            for text in &texts {
                let (r, _m) = credential_registry(text);
                let mut calls: Vec<(&str, Value)> = (0..5).map(|which| ("evil.run", json!({"which": which}))).collect();
                calls.extend(["evil.deny", "evil.boom", "evil.slow"].map(|name| (name, json!({}))));
                for (name, input) in calls {
                    let result = r.invoke(call(name, input), consumer("c")).await;
                    assert!(result.error_payload().is_some(), "{name}: {result:?}");
                    agent_surface_testing::assert_no_leak(&result, &secrets);
                }
            }
        });
    });
    let leaks = agent_surface_testing::credential_leaks(&log, &secrets).len();
    (log, leaks)
}

/// Handler errors and panics, policy errors and panics and a limiter's panic whose text carries
/// credentials reach the operator log with their credentials masked: none is left at `WARN`
/// (the operator log's default), nor at `TRACE`.
#[test]
fn hostile_causes_reach_the_operator_channel_without_their_credentials() {
    let (_, secrets) = agent_surface_testing::credential_corpus();
    let (warn, leaks) = operator_log_of_the_corpus(tracing::Level::WARN);
    assert!(warn.contains("EXECUTION_FAILED") && warn.contains(":***@db.internal.example"), "{warn}");
    assert!(warn.contains("panicked"), "the panic texts are logged: {warn}");
    assert_eq!(leaks, 0, "{warn}");
    agent_surface_testing::assert_operator_log_has_no_credentials(&warn, &secrets);
    let (all, leaks) = operator_log_of_the_corpus(tracing::Level::TRACE);
    assert!(all.contains("The order is locked") || all.contains("PRECONDITION_FAILED"), "{all}");
    assert_eq!(leaks, 0, "{all}");
    agent_surface_testing::assert_operator_log_has_no_credentials(&all, &secrets);
}
