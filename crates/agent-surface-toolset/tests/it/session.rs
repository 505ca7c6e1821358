//! End to end: a scripted "model" drives the toolset through one session that hits and recovers
//! from `CAPABILITY_NOT_FOUND` (after refresh), `INVALID_INPUT` (with changes),
//! `CONFIRMATION_REQUIRED` (approved, then retried) and `RATE_LIMITED` (after a delay on the
//! manual clock) — once per provider format.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{Effect, ErrorCode, InvokeResult, Retry, SafeText, Timestamp};
use agent_surface_policy::{Consumer, RateDecision, RateLimiter};
use agent_surface_registry::RegistryConfig;
use agent_surface_testing::{
    FnLimiter, RecordingGate, Shop, TestClock, expect_details, expect_error, expect_ok, expect_retry,
};
use agent_surface_toolset::{
    Approval, ConfirmationPrompt, Provider, RecoveryHost, Stop, Toolset, ToolsetConfig, Turn, decode_result,
};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

/// A tiny confirmation gate: destructive calls (or calls of a capability that declares a gate)
/// need a confirmation; evidence is single-use and bound to the capability and input.
fn test_gate() -> RecordingGate {
    RecordingGate::new(|call| call.effect == Effect::Destructive || call.declared_gate.is_some())
        .summary(|call| match call.declared_gate.and_then(|g| g.summary) {
            Some(s) => s.clone(),
            None => {
                let order = call.input.and_then(|i| i["order_id"].as_str()).unwrap_or("?");
                SafeText::trusted(format!("Cancel order {order}."))
            }
        })
        .valid_for(Duration::from_secs(300))
}

/// Limits `cart.add` once: the first call that reaches the rate phase waits 1500 ms.
fn limit_once() -> impl RateLimiter {
    let until = Mutex::new(None::<Timestamp>);
    FnLimiter::new(move |call, now| {
        if call.capability != "cart.add" {
            return RateDecision::Allow(None);
        }
        let mut until = until.lock().unwrap();
        let limit = *until.get_or_insert_with(|| now.saturating_add(Duration::from_millis(1500)));
        if now < limit {
            let left = limit.unix_millis() - now.unix_millis();
            RateDecision::Limited { reason: RateLimitReason::Rate, retry_after: Duration::from_millis(left) }
        } else {
            RateDecision::Allow(None)
        }
    })
}

/// The user, approving every confirmation and remembering what it was asked.
#[derive(Default)]
struct ApprovingUser {
    prompts: Mutex<Vec<ConfirmationPrompt>>,
}

impl RecoveryHost for ApprovingUser {
    fn confirm<'a>(&'a self, prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        self.prompts.lock().unwrap().push(prompt.clone());
        Box::pin(std::future::ready(Approval::Approved))
    }
}

/// One model turn in `provider`'s response shape.
fn model_turn(provider: Provider, turn: usize, calls: &[(&str, Value)]) -> Value {
    let id = |i: usize| format!("call_{turn}_{i}");
    match provider {
        Provider::OpenAiChat => json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": calls.iter().enumerate().map(|(i, (name, args))| json!({
                "id": id(i), "type": "function", "function": {"name": name, "arguments": args.to_string()}
            })).collect::<Vec<_>>()
        }}]}),
        Provider::OpenAiResponses => {
            json!({"object": "response", "output": calls.iter().enumerate().map(|(i, (name, args))| json!({
            "type": "function_call", "id": format!("fc_{turn}_{i}"), "call_id": id(i), "name": name, "arguments": args.to_string()
        })).collect::<Vec<_>>()})
        }
        Provider::Anthropic => {
            json!({"role": "assistant", "stop_reason": "tool_use", "content": calls.iter().enumerate().map(|(i, (name, args))| json!({
            "type": "tool_use", "id": id(i), "name": name, "input": args
        })).collect::<Vec<_>>()})
        }
        Provider::Gemini => {
            json!({"responseId": format!("resp-{turn}"), "candidates": [{"content": {"role": "model", "parts":
                calls.iter().map(|(name, args)| json!({"functionCall": {"name": name, "args": args}})).collect::<Vec<_>>()
            }}]})
        }
        _ => unreachable!("a provider this test does not know"),
    }
}

/// What the model reads back: each result decoded from the provider-format item it received.
fn read(provider: Provider, turn: &Turn) -> Vec<InvokeResult> {
    turn.outcomes.iter().map(|o| decode_result(provider, &o.item).expect("decodes")).collect()
}

fn tool_names(provider: Provider, tools: &Value) -> Vec<String> {
    let list = match provider {
        Provider::Gemini => tools[0]["functionDeclarations"].as_array().cloned().unwrap_or_default(),
        _ => tools.as_array().cloned().unwrap_or_default(),
    };
    list.iter()
        .map(|t| t.pointer("/function/name").or_else(|| t.get("name")).and_then(Value::as_str).unwrap().to_string())
        .collect()
}

async fn session(provider: Provider) {
    let clock = TestClock::new();
    let config = RegistryConfig {
        clock: clock.shared(),
        confirmation: Some(Arc::new(test_gate())),
        rate_limiter: Some(Arc::new(limit_once())),
        ..Default::default()
    };
    let mut shop = Shop::unmounted(config);
    shop.mount("catalog");
    shop.mount("cart");
    let user = Arc::new(ApprovingUser::default());
    let toolset = Toolset::new(
        shop.registry().clone(),
        Consumer::anonymous("conversation-1"),
        ToolsetConfig { host: user.clone(), ..Default::default() },
    );

    // Step 1: list the tools. Orders are not mounted yet.
    assert!(toolset.is_stale(), "never listed");
    let tools = toolset.tools(provider).await;
    assert_eq!(tool_names(provider, &tools), ["cart-add", "cart-view", "catalog-search"]);
    assert!(!toolset.is_stale());

    // Turn 1: two parallel calls, answered in order.
    let turn = toolset
        .handle(
            provider,
            &model_turn(provider, 1, &[("catalog-search", json!({"query": "tea"})), ("cart-view", json!({}))]),
        )
        .await
        .unwrap();
    let seen = read(provider, &turn);
    assert_eq!(expect_ok(&seen[0])["items"][0]["sku"], "tea");
    assert_eq!(expect_ok(&seen[1])["lines"], json!({}));

    // Turn 2: INVALID_INPUT, with changes — the model reads the issue and fixes the input.
    let turn = toolset
        .handle(provider, &model_turn(provider, 2, &[("cart-add", json!({"sku": "tea", "quantity": 0}))]))
        .await
        .unwrap();
    let seen = read(provider, &turn);
    let p = expect_error(&seen[0], ErrorCode::InvalidInput);
    expect_retry(p, Retry::WithChanges);
    expect_details(p, json!({"issues": [{"path": "/quantity"}]}));
    assert_eq!((turn.outcomes[0].attempts, turn.outcomes[0].stop), (1, Stop::ReturnedToCaller));

    // Turn 3: the fixed call is RATE_LIMITED; the loop waits 1500 ms on the manual clock and
    // retries by itself.
    let fixed = model_turn(provider, 3, &[("cart-add", json!({"sku": "tea", "quantity": 2}))]);
    let (turn, ()) =
        tokio::join!(toolset.handle(provider, &fixed), clock.advance_when_waiting(1, Duration::from_millis(1500)));
    let turn = turn.unwrap();
    let seen = read(provider, &turn);
    assert_eq!(expect_ok(&seen[0])["lines"], json!({"tea": 2}));
    assert_eq!((turn.outcomes[0].attempts, turn.outcomes[0].stop), (2, Stop::Succeeded));
    assert_eq!(clock.elapsed(), Duration::from_millis(1500));

    // Turn 4: the model calls a tool that is not in the surface: CAPABILITY_NOT_FOUND. The loop
    // refreshes, still finds nothing, hands it back and marks the tool list stale.
    let turn = toolset
        .handle(provider, &model_turn(provider, 4, &[("orders-cancel", json!({"order_id": "A-1"}))]))
        .await
        .unwrap();
    let seen = read(provider, &turn);
    expect_retry(expect_error(&seen[0], ErrorCode::CapabilityNotFound), Retry::AfterRefresh);
    assert!(turn.relist && toolset.is_stale());

    // The orders component mounts; the loop re-lists before the model's next step.
    shop.mount("orders");
    let tools = toolset.tools(provider).await;
    assert_eq!(tool_names(provider, &tools), ["cart-add", "cart-view", "catalog-search", "orders-cancel"]);
    assert!(!toolset.is_stale());

    // Turn 5: the cancel needs the user's approval: CONFIRMATION_REQUIRED, approved by the host,
    // retried with the confirmation id.
    let turn = toolset
        .handle(provider, &model_turn(provider, 5, &[("orders-cancel", json!({"order_id": "A-1"}))]))
        .await
        .unwrap();
    let seen = read(provider, &turn);
    assert_eq!(expect_ok(&seen[0])["refunded_cents"], 4200);
    let outcome = &turn.outcomes[0];
    assert_eq!((outcome.attempts, outcome.stop), (2, Stop::Succeeded));
    let request = outcome.request.as_ref().unwrap();
    assert_eq!(request.confirmation_id.as_deref(), Some("conf-1"));
    // The destructive call carried the staleness tokens of the list the model saw.
    let listed = toolset.listed().unwrap();
    assert_eq!(
        (request.surface_id.as_deref(), request.surface_version),
        (Some(listed.surface_id.as_str()), Some(listed.version))
    );
    let prompts = user.prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 1);
    assert_eq!((prompts[0].capability.as_str(), prompts[0].summary.as_str()), ("orders.cancel", "Cancel order A-1."));
    assert!(!turn.relist);

    // Every answer is in the provider's reply shape.
    match provider {
        Provider::Anthropic => assert_eq!(turn.messages[0]["content"][0]["type"], "tool_result"),
        Provider::Gemini => assert!(turn.messages[0]["parts"][0]["functionResponse"].is_object()),
        Provider::OpenAiChat => assert_eq!(turn.messages[0]["role"], "tool"),
        _ => assert_eq!(turn.messages[0]["type"], "function_call_output"),
    }
}

#[tokio::test]
async fn openai_chat_session_recovers() {
    session(Provider::OpenAiChat).await;
}

#[tokio::test]
async fn openai_responses_session_recovers() {
    session(Provider::OpenAiResponses).await;
}

#[tokio::test]
async fn anthropic_session_recovers() {
    session(Provider::Anthropic).await;
}

#[tokio::test]
async fn gemini_session_recovers() {
    session(Provider::Gemini).await;
}
