//! The clock, the conformance kit, the leak assertion and the fixtures.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use agent_surface_core::matrix::MATRIX;
use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Retry};
use agent_surface_policy::Clock;
use agent_surface_registry::RegistryConfig;
use agent_surface_testing::*;
use serde_json::{Value, json};

#[test]
fn the_test_epoch_is_documented() {
    assert_eq!(TEST_EPOCH.to_rfc3339(), "2026-11-29T07:00:00.000Z");
}

#[tokio::test]
async fn manual_sleeps_wait_for_the_test() {
    let clock = TestClock::new();
    let sleeper = clock.sleep(Duration::from_millis(1500));
    let (_, ()) = tokio::join!(sleeper, clock.advance_when_waiting(1, Duration::from_millis(1500)));
    assert_eq!(clock.elapsed(), Duration::from_millis(1500));
    assert_eq!(clock.pending_sleeps(), 0);
}

#[tokio::test]
async fn auto_advancing_sleeps_pass_at_once() {
    let clock = TestClock::auto_advancing();
    clock.sleep(Duration::from_secs(3)).await;
    clock.sleep(Duration::from_millis(250)).await;
    assert_eq!(clock.elapsed(), Duration::from_millis(3250));
}

#[test]
fn the_corpus_covers_every_code_and_retry_category() {
    let counts = case_counts();
    assert_eq!(counts.len(), agent_surface_core::ErrorCode::ALL.len());
    for row in &MATRIX {
        for retry in row.retry.values() {
            assert!(
                cases().iter().any(|c| c.error_payload().is_some_and(|p| p.code() == row.code && p.retry() == retry)),
                "{} with {retry}",
                row.code
            );
        }
    }
}

fn json_codec() -> impl AdapterCodec<Wire = Value> {
    codec(|r: &InvokeResult| r.to_json(), |v: &Value| serde_json::from_value(v.clone()).map_err(|e| e.to_string()))
}

#[test]
fn a_lossless_codec_is_conformant() {
    assert_conformance(&json_codec());
    let report =
        check_conformance(&json_codec(), &ConformanceConfig { compare_invocation_ids: true, ..Default::default() });
    assert!(report.is_conformant(), "{report}");
    assert_eq!(report.cases, cases().len());
}

#[test]
fn lossy_codecs_are_caught() {
    // Drops details.
    let no_details = codec(
        |r: &InvokeResult| {
            let mut v = r.to_json();
            if let Some(e) = v.get_mut("error").and_then(Value::as_object_mut) {
                e.remove("details");
            }
            v
        },
        |v: &Value| serde_json::from_value::<InvokeResult>(v.clone()).map_err(|e| e.to_string()),
    );
    let report = check_conformance(&no_details, &ConformanceConfig::default());
    assert!(!report.is_conformant());
    assert!(report.failures.iter().all(|f| f.problem.starts_with("decode failed")), "{report}");
    assert!(report.uncovered().contains(&(ErrorCode::RateLimited, Retry::AfterDelay)));
    assert!(!report.uncovered().contains(&(ErrorCode::CapabilityNotFound, Retry::AfterRefresh)));

    // Rewrites every message: it parses, but comes back different.
    let reworded = codec(
        |r: &InvokeResult| {
            let mut v = r.to_json();
            if let Some(e) = v.get_mut("error").and_then(Value::as_object_mut) {
                e.insert("message".into(), json!("Something went wrong."));
            }
            v
        },
        |v: &Value| serde_json::from_value::<InvokeResult>(v.clone()).map_err(|e| e.to_string()),
    );
    let err = catch_unwind(AssertUnwindSafe(|| assert_conformance(&reworded))).expect_err("not conformant");
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("came back different"), "{msg}");

    // Invocation ids are compared only on request.
    let no_ids = codec(
        |r: &InvokeResult| r.clone().with_invocation_id(None).to_json(),
        |v: &Value| serde_json::from_value::<InvokeResult>(v.clone()).map_err(|e| e.to_string()),
    );
    assert_conformance(&no_ids);
    let strict = ConformanceConfig { compare_invocation_ids: true, ..Default::default() };
    assert!(!check_conformance(&no_ids, &strict).is_conformant());
}

fn hostile() -> (Secrets, InvokeResult) {
    let secrets = Secrets::new()
        .sql("SELECT password_hash FROM users WHERE email = 'a@b.c'")
        .url("https://admin:s3cr3t@internal.billing.svc:8443/v1/charge")
        .stack_trace("thread 'main' panicked at src/db.rs:88:13\n   2: billing::db::charge_card")
        .env("DATABASE_URL=postgres://root:toor@10.1.2.3/prod");
    let cause = std::io::Error::other(format!("{secrets:?}"));
    (secrets, InvokeResult::error(AgentSurfaceError::internal(cause).into_payload(), Some("inv-9".into())))
}

#[test]
fn sanitized_results_do_not_leak() {
    let (secrets, result) = hostile();
    assert_no_leak(&result, &secrets);
    assert_eq!(agent_facing_serializations(&result).len(), 5);
}

#[test]
fn leaks_are_caught_in_every_form() {
    let (secrets, _) = hostile();
    // A line of the stack trace, inside an adapter's wire form.
    let msg = catch_unwind(AssertUnwindSafe(|| {
        assert_text_has_no_leak("wire form", "{\"text\":\"2: billing::db::charge_card\"}", &secrets)
    }))
    .expect_err("leak");
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("a stack trace secret leaked into the wire form"), "{msg}");
    // A secret with quotes, JSON-escaped in an output.
    let leaked = InvokeResult::ok(json!({"debug": "SELECT password_hash FROM users WHERE email = 'a@b.c'"}), None);
    assert!(catch_unwind(AssertUnwindSafe(|| assert_no_leak(&leaked, &secrets))).is_err());
    let escaped = Secrets::new().other("say \"hi\"\nplease");
    let out = InvokeResult::ok(json!({"t": "say \"hi\"\nplease"}), None);
    assert!(catch_unwind(AssertUnwindSafe(|| assert_no_leak(&out, &escaped))).is_err());
}

#[tokio::test]
async fn the_shop_behaves_as_documented() {
    let mut shop = Shop::new(RegistryConfig::default());
    let results = ScriptedConsumer::new("c")
        .call("catalog.search", json!({"query": "tea"}))
        .call("cart.add", json!({"sku": "tea", "quantity": 2}))
        .call("cart.add", json!({"sku": "tea", "quantity": 1}))
        .call("cart.view", json!({}))
        .call("cart.add", json!({"sku": "gold", "quantity": 1}))
        .call("cart.add", json!({"sku": "tea", "quantity": 0}))
        .call("orders.cancel", json!({"order_id": "A-1"}))
        .call("orders.cancel", json!({"order_id": "shipped-2"}))
        .run(shop.registry())
        .await;
    assert_eq!(expect_ok(&results[0])["items"].as_array().unwrap().len(), 2);
    assert_eq!(expect_ok(&results[2])["lines"], json!({"tea": 3}));
    assert_eq!(expect_ok(&results[3])["lines"], json!({"tea": 3}));
    let p = expect_error(&results[4], ErrorCode::PreconditionFailed);
    expect_details(p, json!({"reason": "unknown-sku"}));
    let p = expect_error(&results[5], ErrorCode::InvalidInput);
    expect_details(p, json!({"issues": [{"path": "/quantity"}]}));
    assert_eq!(expect_ok(&results[6])["refunded_cents"], 4200);
    expect_error(&results[7], ErrorCode::PreconditionFailed);

    let before = shop.registration_id("cart").unwrap().to_string();
    shop.unmount("cart");
    assert_eq!(shop.registration_id("cart"), None);
    let r = ScriptedConsumer::new("c").call("cart.view", json!({})).run(shop.registry()).await;
    expect_details(expect_error(&r[0], ErrorCode::ComponentUnmounted), json!({"phase": "resolve"}));
    let after = shop.mount("cart");
    assert_ne!(before, after);
    let r = ScriptedConsumer::new("c").call("cart.view", json!({})).run(shop.registry()).await;
    assert_eq!(expect_ok(&r[0])["lines"], json!({}));
}

#[tokio::test]
async fn an_unmounted_shop_has_an_empty_surface() {
    let shop = Shop::unmounted(RegistryConfig::default());
    let consumer = ScriptedConsumer::new("c");
    assert!(shop.registry().snapshot(consumer.consumer()).await.capabilities.is_empty());
    let r = consumer.clone().call("catalog.search", json!({"query": "x"})).run(shop.registry()).await;
    expect_error(&r[0], ErrorCode::CapabilityNotFound);
    let counter = Counter::default();
    assert_eq!((counter.bump(), counter.bump(), counter.get()), (1, 2, 2));
}

#[test]
fn short_secrets_are_still_looked_for() {
    let result = agent_surface_core::InvokeResult::ok(serde_json::json!({"password": "hunter2"}), None);
    let caught = std::panic::catch_unwind(|| {
        agent_surface_testing::assert_no_leak(&result, &agent_surface_testing::Secrets::new().other("hunter2"))
    });
    assert!(caught.is_err(), "a 7-character secret in the output must be reported");
}

#[test]
#[should_panic(expected = "at least one non-blank secret")]
fn an_empty_secret_set_is_refused() {
    let result = agent_surface_core::InvokeResult::ok(serde_json::json!({}), None);
    agent_surface_testing::assert_no_leak(&result, &agent_surface_testing::Secrets::new());
}

/// The recording gate's round trip through a registry: a confirmation is issued for the gated
/// call, bound to its input, spent once; waiting for answers, it proceeds only once approved.
#[tokio::test]
async fn the_recording_gate_issues_binds_and_spends_confirmations() {
    use agent_surface_core::Effect;
    use agent_surface_registry::InvokeRequest;
    use std::sync::Arc;

    let cancel = |order: &str| InvokeRequest::new("orders.cancel", json!({"order_id": order}));
    let reason = |r: &InvokeResult, code: ErrorCode| {
        expect_error(r, code).detail("reason").and_then(Value::as_str).map(str::to_string)
    };
    let confirmation_id = |r: &InvokeResult| {
        let p = expect_error(r, ErrorCode::ConfirmationRequired);
        p.detail("confirmationId").and_then(Value::as_str).expect("an id").to_string()
    };

    // Presented without an answer.
    let gate = Arc::new(RecordingGate::new(|call| call.effect == Effect::Destructive));
    let shop = Shop::new(RegistryConfig { confirmation: Some(gate.clone()), ..Default::default() });
    let first = ScriptedConsumer::new("c").request(cancel("A-1")).run(shop.registry()).await;
    let id = confirmation_id(&first[0]);
    assert_eq!(id, "conf-1");
    let r = ScriptedConsumer::new("c")
        .call("cart.view", json!({}))
        .request(cancel("A-2").with_confirmation(&id))
        .request(cancel("A-1").with_confirmation("conf-9"))
        .request(cancel("A-1").with_confirmation(&id))
        .request(cancel("A-1").with_confirmation(&id))
        .run(shop.registry())
        .await;
    expect_ok(&r[0]);
    assert_eq!(reason(&r[1], ErrorCode::ConfirmationInvalid).as_deref(), Some("mismatch"));
    assert_eq!(reason(&r[2], ErrorCode::ConfirmationInvalid).as_deref(), Some("mismatch"));
    assert_eq!(expect_ok(&r[3])["refunded_cents"], 4200);
    assert_eq!(reason(&r[4], ErrorCode::ConfirmationInvalid).as_deref(), Some("consumed"));
    assert_eq!(gate.issued(), vec![("conf-1".to_string(), Issued::Used)]);

    // Waiting for answers: unanswered is no confirmation, denied is a denial, approved runs once.
    let gate = Arc::new(RecordingGate::new(|call| call.effect == Effect::Destructive).waiting_for_answers());
    let shop = Shop::new(RegistryConfig { confirmation: Some(gate.clone()), ..Default::default() });
    let r = ScriptedConsumer::new("c").request(cancel("A-1")).request(cancel("A-2")).run(shop.registry()).await;
    let (approved, denied) = (confirmation_id(&r[0]), confirmation_id(&r[1]));
    let unanswered = ScriptedConsumer::new("c").request(cancel("A-1").with_confirmation(&approved));
    let r = unanswered.run(shop.registry()).await;
    assert_eq!(reason(&r[0], ErrorCode::ConfirmationInvalid).as_deref(), Some("mismatch"));
    gate.answer(&approved, true).expect("pending");
    gate.answer(&denied, false).expect("pending");
    assert_eq!(gate.answer(&denied, true), Err(AlreadyAnswered(denied.clone())));
    assert!(gate.answer("conf-9", true).is_err());
    let r = ScriptedConsumer::new("c")
        .request(cancel("A-2").with_confirmation(&denied))
        .request(cancel("A-1").with_confirmation(&approved))
        .run(shop.registry())
        .await;
    assert_eq!(reason(&r[0], ErrorCode::ConfirmationInvalid).as_deref(), Some("denied"));
    expect_ok(&r[1]);
    assert_eq!(gate.issued(), vec![(approved, Issued::Used), (denied, Issued::Denied)]);
}
