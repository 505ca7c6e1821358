//! The toolset against a real registry: concurrency, malformed calls, staleness duties, tokens.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Retry};
use agent_surface_policy::{Consumer, RateDecision};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use agent_surface_testing::{
    Counter, FnLimiter, Shop, TestClock, expect_details, expect_error, expect_ok, expect_retry,
};
use agent_surface_toolset::{Provider, Rendering, ResultFormat, Stop, Toolset, ToolsetConfig, decode_result};
use serde_json::{Value, json};

fn openai_turn(calls: &[(&str, &str, &str)]) -> Value {
    json!({"role": "assistant", "tool_calls": calls.iter().map(|(id, name, args)| json!({
        "id": id, "type": "function", "function": {"name": name, "arguments": args}
    })).collect::<Vec<_>>()})
}

fn toolset(registry: &Registry) -> Toolset {
    Toolset::new(registry.clone(), Consumer::anonymous("c-1"), ToolsetConfig::default())
}

#[tokio::test]
async fn parallel_calls_run_concurrently_and_are_answered_in_order() {
    // Each call waits for the other: if they ran one after the other, the turn would hang.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let registry = Registry::new(RegistryConfig::default());
    registry.provide(barrier);
    registry
        .define("sync", |t| {
            t.capability("meet", "Wait for a partner.").effect(Effect::Read).idempotent().raw_handler(
                json!({"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}),
                None,
                |ctx: Ctx, input: Value| async move {
                    ctx.state::<Arc<tokio::sync::Barrier>>().wait().await;
                    Ok::<_, AgentSurfaceError>(json!({"met": input["who"]}))
                },
            )
        })
        .unwrap();
    let _m = registry.mount("sync", "main").unwrap();
    let ts = toolset(&registry);
    let response = openai_turn(&[("call_a", "sync-meet", r#"{"who":"a"}"#), ("call_b", "sync-meet", r#"{"who":"b"}"#)]);
    let turn = tokio::time::timeout(Duration::from_secs(5), ts.handle(Provider::OpenAiChat, &response))
        .await
        .expect("the calls ran concurrently")
        .unwrap();
    let ids: Vec<&str> = turn.messages.iter().map(|m| m["tool_call_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["call_a", "call_b"]);
    assert_eq!(turn.messages[0]["content"], r#"{"met":"a"}"#);
    assert_eq!(turn.messages[1]["content"], r#"{"met":"b"}"#);
}

/// A registry with `cart.add` (any object in, `{"ok": true}` out), counting its runs.
fn counted_cart() -> (Registry, agent_surface_registry::Mount, Counter) {
    let runs = Counter::default();
    let registry = Registry::new(RegistryConfig::default());
    let seen = runs.clone();
    registry
        .define("cart", |t| {
            t.capability("add", "Add.").raw_handler(json!({"type": "object"}), None, move |_ctx: Ctx, _i: Value| {
                seen.bump();
                async move { Ok::<_, AgentSurfaceError>(json!({"ok": true})) }
            })
        })
        .unwrap();
    let mount = registry.mount("cart", "main").unwrap();
    (registry, mount, runs)
}

#[tokio::test]
async fn malformed_arguments_and_unknown_tools_never_reach_a_handler() {
    let (registry, _m, runs) = counted_cart();
    let ts = toolset(&registry);
    ts.tools(Provider::OpenAiChat).await;
    let response = openai_turn(&[
        ("call_1", "cart-add", r#"{"sku": "tea""#),
        ("call_2", "get_weather", "{}"),
        ("call_3", "cart-add", r#"{"sku":"tea"}"#),
        ("call_4", "cart-add", ""),
    ]);
    let turn = ts.handle(Provider::OpenAiChat, &response).await.unwrap();
    let seen: Vec<_> = turn.outcomes.iter().map(|o| decode_result(Provider::OpenAiChat, &o.item).unwrap()).collect();

    let p = expect_error(&seen[0], ErrorCode::InvalidInput);
    expect_retry(p, Retry::WithChanges);
    expect_details(
        p,
        json!({"issues": [{"path": "", "message": "the arguments are not valid JSON (the JSON text ends before the value is complete); send one JSON object"}]}),
    );
    assert_eq!((turn.outcomes[0].attempts, turn.outcomes[0].request.is_none()), (0, true));

    expect_error(&seen[1], ErrorCode::CapabilityNotFound);
    expect_ok(&seen[2]);
    expect_ok(&seen[3]);
    assert_eq!(runs.get(), 2, "only the well-formed calls ran");
    assert!(turn.relist, "an unknown tool name re-lists the tools");
    assert_eq!(turn.outcomes[0].result.invocation_id(), Some("openai-chat:call_1"));
}

/// Gemini calls without ids or a `responseId` get derived ids; two toolsets of one consumer (a
/// server that builds one per request of a conversation) never derive the same one, so the same
/// call in each runs each time instead of replaying the other's record.
#[tokio::test]
async fn two_toolsets_never_derive_the_same_gemini_id() {
    let (registry, _m, runs) = counted_cart();
    let response = json!({"parts": [{"functionCall": {"name": "cart-add", "args": {"sku": "tea"}}}]});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let ts = toolset(&registry);
        let turn = ts.handle(Provider::Gemini, &response).await.unwrap();
        expect_ok(&turn.outcomes[0].result);
        ids.push(turn.outcomes[0].result.invocation_id().map(str::to_string));
    }
    assert_eq!(runs.get(), 2, "each toolset's call ran its handler");
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_stale_destructive_call_is_refreshed_not_stripped() {
    let mut shop = Shop::new(RegistryConfig::default());
    let ts = toolset(shop.registry());
    let listed = ts.snapshot().await;
    // The orders component is replaced after the model saw the tools.
    shop.unmount("orders");
    shop.mount("orders");
    assert!(shop.registry().version() > listed.version);

    let turn = ts
        .handle(Provider::OpenAiChat, &openai_turn(&[("call_1", "orders-cancel", r#"{"order_id":"A-1"}"#)]))
        .await
        .unwrap();
    let outcome = &turn.outcomes[0];
    expect_ok(&outcome.result);
    assert_eq!((outcome.attempts, outcome.stop), (2, Stop::Succeeded));
    let request = outcome.request.as_ref().unwrap();
    assert_eq!(request.surface_id.as_deref(), Some(shop.registry().surface_id()));
    assert_eq!(request.surface_version, Some(shop.registry().version()), "tokens updated, never removed");
    assert_eq!(request.invocation_id.as_deref(), Some("openai-chat:call_1#r2"));
    assert!(turn.relist && ts.is_stale(), "the loop refreshed: the model's list is stale");
    assert_eq!(ts.snapshot().await.version, shop.registry().version());
}

#[tokio::test]
async fn unmounted_and_not_found_mark_the_list_stale() {
    let mut shop = Shop::new(RegistryConfig::default());
    let ts = toolset(shop.registry());
    ts.tools(Provider::Anthropic).await;
    shop.unmount("cart");
    let response = json!({"content": [{"type": "tool_use", "id": "toolu_1", "name": "cart-view", "input": {}}]});
    let turn = ts.handle(Provider::Anthropic, &response).await.unwrap();
    let p = expect_error(&turn.outcomes[0].result, ErrorCode::ComponentUnmounted);
    expect_retry(p, Retry::AfterRefresh);
    assert_eq!(turn.outcomes[0].item["is_error"], true);
    assert!(turn.relist);
    let names: Vec<String> = ts
        .tools(Provider::Anthropic)
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!names.contains(&"cart-view".to_string()), "{names:?}");
    assert!(!ts.is_stale());
}

#[tokio::test]
async fn cancelling_the_toolset_ends_a_wait() {
    let clock = TestClock::new();
    let shop = Shop::new(RegistryConfig {
        clock: clock.shared(),
        rate_limiter: Some(Arc::new(FnLimiter::new(|_, _| RateDecision::Limited {
            reason: RateLimitReason::QueueFull,
            retry_after: Duration::from_secs(10),
        }))),
        ..Default::default()
    });
    let ts = toolset(shop.registry());
    let response = openai_turn(&[("call_1", "cart-view", "{}")]);
    let cancel_when_waiting = async {
        while clock.pending_sleeps() == 0 {
            tokio::task::yield_now().await;
        }
        ts.cancellation().cancel();
    };
    let (turn, ()) = tokio::join!(ts.handle(Provider::OpenAiChat, &response), cancel_when_waiting);
    let outcome = &turn.unwrap().outcomes[0];
    assert_eq!(outcome.stop, Stop::Cancelled);
    expect_error(&outcome.result, ErrorCode::Cancelled);
}

/// A cancellation ends what is in progress, not the toolset: the model's later turns run (a
/// `CANCELLED` that says to repeat the call must be able to succeed), whether the host cancels
/// through the token or through `Toolset::cancel`, and a turn in progress still sees it.
#[tokio::test]
async fn a_cancelled_toolset_runs_later_turns() {
    let clock = TestClock::new();
    let limited = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let shop = Shop::new(RegistryConfig {
        clock: clock.shared(),
        rate_limiter: Some(Arc::new(FnLimiter::new({
            let limited = limited.clone();
            move |_, _| match limited.load(std::sync::atomic::Ordering::SeqCst) {
                true => {
                    RateDecision::Limited { reason: RateLimitReason::QueueFull, retry_after: Duration::from_secs(10) }
                }
                false => RateDecision::Allow(None),
            }
        }))),
        ..Default::default()
    });
    let ts = toolset(shop.registry());
    let turn = |id: &str| openai_turn(&[(id, "cart-view", "{}")]);
    let cancel_when_waiting = async {
        while clock.pending_sleeps() == 0 {
            tokio::task::yield_now().await;
        }
        ts.cancellation().cancel();
    };
    let response = turn("call_1");
    let (first, ()) = tokio::join!(ts.handle(Provider::OpenAiChat, &response), cancel_when_waiting);
    assert_eq!(first.unwrap().outcomes[0].stop, Stop::Cancelled);

    limited.store(false, std::sync::atomic::Ordering::SeqCst);
    let again = ts.handle(Provider::OpenAiChat, &turn("call_2")).await.unwrap();
    assert_eq!(again.outcomes[0].stop, Stop::Succeeded, "{:?}", again.outcomes[0].result);
    expect_ok(&again.outcomes[0].result);

    // Cancelled between turns: the next turn runs all the same.
    ts.cancellation().cancel();
    let after = ts.handle(Provider::OpenAiChat, &turn("call_3")).await.unwrap();
    expect_ok(&after.outcomes[0].result);
}

/// `Toolset::cancel` ends the calls in progress and gives later calls a fresh token at once.
#[tokio::test]
async fn toolset_cancel_ends_the_calls_in_progress_only() {
    let clock = TestClock::new();
    let shop = Shop::new(RegistryConfig {
        clock: clock.shared(),
        rate_limiter: Some(Arc::new(FnLimiter::new(|_, _| RateDecision::Limited {
            reason: RateLimitReason::QueueFull,
            retry_after: Duration::from_secs(10),
        }))),
        ..Default::default()
    });
    let ts = toolset(shop.registry());
    let before = ts.cancellation();
    let cancel_when_waiting = async {
        while clock.pending_sleeps() == 0 {
            tokio::task::yield_now().await;
        }
        ts.cancel();
    };
    let response = openai_turn(&[("call_1", "cart-view", "{}")]);
    let (turn, ()) = tokio::join!(ts.handle(Provider::OpenAiChat, &response), cancel_when_waiting);
    assert_eq!(turn.unwrap().outcomes[0].stop, Stop::Cancelled);
    assert!(before.is_cancelled(), "the token of the calls that were in progress");
    assert!(!ts.cancellation().is_cancelled(), "later calls get a fresh token");
}

#[tokio::test]
async fn rendering_is_opt_in_and_keeps_the_payload() {
    let shop = Shop::new(RegistryConfig::default());
    let config = ToolsetConfig { results: ResultFormat { rendering: Rendering::OneLineFirst }, ..Default::default() };
    let ts = Toolset::new(shop.registry().clone(), Consumer::anonymous("c"), config);
    let response = openai_turn(&[("call_1", "cart-add", r#"{"sku":"gold","quantity":1}"#)]);
    let turn = ts.handle(Provider::OpenAiChat, &response).await.unwrap();
    let content = turn.messages[0]["content"].as_str().unwrap();
    let (line, payload) = content.split_once('\n').unwrap();
    assert!(line.starts_with("Tool error PRECONDITION_FAILED (retry: with-changes): There is no product"), "{line}");
    let payload: Value = serde_json::from_str(payload).unwrap();
    assert_eq!(payload["details"], json!({"reason": "unknown-sku"}));
    assert_eq!(payload, turn.outcomes[0].result.error_payload().unwrap().to_json());
}

/// `note.delete` behind the shipped `ConfirmationEngine` (counting its runs), and alice's toolset.
struct Gated {
    engine: Arc<agent_surface_policy::ConfirmationEngine>,
    registry: Registry,
    mount: Option<agent_surface_registry::Mount>,
    runs: Counter,
    toolset: Toolset,
    calls: std::sync::atomic::AtomicUsize,
}

fn gated() -> Gated {
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, Identity};

    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..Default::default() });
    let runs = Counter::default();
    let seen = runs.clone();
    registry
        .define("note", |t| {
            t.capability("delete", "Delete a note.")
                .effect(Effect::Destructive)
                .confirm(|_: &Value| "Delete a note.")
                .raw_handler(
                    json!({"type": "object", "properties": {"id": {"type": "string"}, "hard": {"type": "boolean"}}}),
                    None,
                    move |_ctx: Ctx, input: Value| {
                        seen.bump();
                        async move { Ok::<_, AgentSurfaceError>(json!({"deleted": input["id"]})) }
                    },
                );
        })
        .unwrap();
    let mount = Some(registry.mount("note", "main").unwrap());
    let consumer = Consumer::authenticated("c-1", Identity::new("alice"));
    let toolset = Toolset::new(registry.clone(), consumer, ToolsetConfig::default());
    Gated { engine, registry, mount, runs, toolset, calls: Default::default() }
}

impl Gated {
    /// One model turn calling `note-delete` with `args` (a fresh tool call id each time).
    async fn call(&self, args: &str) -> agent_surface_core::InvokeResult {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let response = openai_turn(&[(&format!("call_{n}"), "note-delete", args)]);
        self.toolset.handle(Provider::OpenAiChat, &response).await.unwrap().outcomes.remove(0).result
    }
}

fn confirmation_id(r: &agent_surface_core::InvokeResult) -> String {
    expect_error(r, ErrorCode::ConfirmationRequired).detail("confirmationId").unwrap().as_str().unwrap().to_string()
}

/// Two-phase confirmation through a model loop: the model can only repeat its call, and the
/// confirmation relayed for that same call is presented on the repeat (by the registry, below
/// every adapter; the toolset keeps no memory of its own), with a real `ConfirmationEngine`
/// deciding.
#[tokio::test]
async fn a_repeated_call_presents_the_relayed_confirmation() {
    use agent_surface_policy::Identity;
    let g = gated();

    // Asked again before the user decided: the same pending confirmation, not a second one.
    let first = confirmation_id(&g.call(r#"{"id": "n-1", "hard": true}"#).await);
    let again = confirmation_id(&g.call(r#"{"hard": true, "id": "n-1"}"#).await);
    assert_eq!(again, first, "the same call (keys in another order) presents the relayed id");
    // An answer from before the gate (here: the capability disabled for a while) keeps it.
    assert!(g.registry.disable("note.delete", "Maintenance."));
    expect_error(&g.call(r#"{"id": "n-1", "hard": true}"#).await, ErrorCode::CapabilityNotAvailable);
    assert!(g.registry.enable("note.delete"));
    assert_eq!(confirmation_id(&g.call(r#"{"id": "n-1", "hard": true}"#).await), first);
    // Another input is another call: its own confirmation.
    let other = confirmation_id(&g.call(r#"{"id": "n-2"}"#).await);
    assert_ne!(other, first);

    g.engine.approve(&first, &Identity::new("manager")).await.unwrap();
    expect_ok(&g.call(r#"{"id": "n-1", "hard": true}"#).await);
    assert_eq!(g.runs.get(), 1);
    // Settled: the next identical call starts a fresh cycle instead of presenting used evidence.
    let next = confirmation_id(&g.call(r#"{"id": "n-1", "hard": true}"#).await);
    assert_ne!(next, first);

    g.engine.deny(&other, &Identity::new("manager")).await.unwrap();
    let denied = g.call(r#"{"id": "n-2"}"#).await;
    assert_eq!(expect_error(&denied, ErrorCode::ConfirmationInvalid).detail("reason"), Some(&json!("denied")));
    assert_ne!(confirmation_id(&g.call(r#"{"id": "n-2"}"#).await), other);
    assert_eq!(g.runs.get(), 1);
}

/// A confirmation is bound to the registration it was issued for: once the target went away, the
/// relayed id is no longer presented, and the repeat after a remount asks afresh instead of
/// presenting evidence that can only be refused (`mismatch`, retry `no`).
#[tokio::test]
async fn a_relayed_confirmation_is_dropped_with_its_target() {
    use agent_surface_policy::Identity;
    let mut g = gated();
    let args = r#"{"id": "n-1"}"#;
    let id = confirmation_id(&g.call(args).await);
    g.engine.approve(&id, &Identity::new("manager")).await.unwrap();
    drop(g.mount.take());
    let gone = g.call(args).await;
    assert!(gone.error_payload().is_some_and(|p| p.code() != ErrorCode::ConfirmationInvalid), "{gone:?}");
    g.mount = Some(g.registry.mount("note", "main").unwrap());
    let fresh = confirmation_id(&g.call(args).await);
    assert_ne!(fresh, id, "a fresh confirmation for the new registration");
    assert_eq!(g.runs.get(), 0);
}

#[tokio::test]
async fn progress_reports_reach_the_callback_with_their_tool_call() {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("work", |t| {
            t.capability("steps", "Work in three steps.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |ctx: Ctx, _input: Value| async move {
                    for step in 1..=3 {
                        ctx.progress(f64::from(step), Some(3.0), Some("working"));
                    }
                    Ok::<_, AgentSurfaceError>(json!({"done": true}))
                },
            )
        })
        .unwrap();
    let _m = registry.mount("work", "main").unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = ToolsetConfig {
        progress: Some(Arc::new({
            let seen = seen.clone();
            move |call: &agent_surface_toolset::ToolCall, p: agent_surface_registry::Progress| {
                seen.lock().unwrap().push((call.call_id.clone(), p.done, p.total));
            }
        })),
        ..Default::default()
    };
    let ts = Toolset::new(registry.clone(), Consumer::anonymous("c-1"), config);
    let turn = ts.handle(Provider::OpenAiChat, &openai_turn(&[("call_p", "work-steps", "{}")])).await.unwrap();
    assert!(turn.outcomes[0].result.is_ok());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("call_p".to_string(), 1.0, Some(3.0)),
            ("call_p".to_string(), 2.0, Some(3.0)),
            ("call_p".to_string(), 3.0, Some(3.0))
        ]
    );
}

/// Each outcome names the correlation id its operator event was logged under; a call that never
/// became a request has none.
#[test]
fn each_outcome_carries_the_correlation_id_of_its_last_request() {
    let (turn, log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let registry = Registry::new(RegistryConfig::default());
            registry
                .define("echo", |t| {
                    t.capability("say", "Say it.").effect(Effect::Read).idempotent().raw_handler(
                        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                        None,
                        |_c: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(input) },
                    )
                })
                .unwrap();
            let _m = registry.mount("echo", "main").unwrap();
            let response = openai_turn(&[
                ("call_a", "echo-say", r#"{"text":"a"}"#),
                ("call_b", "echo-say", r#"{"text":5}"#),
                ("call_c", "echo-say", "not json"),
            ]);
            toolset(&registry).handle(Provider::OpenAiChat, &response).await.unwrap()
        })
    });
    let ids: Vec<Option<String>> =
        turn.outcomes.iter().map(|o| o.correlation_id.as_ref().map(ToString::to_string)).collect();
    let (a, b) = (ids[0].as_deref().expect("a request"), ids[1].as_deref().expect("a request"));
    assert_ne!(a, b);
    for id in [a, b] {
        assert!(log.contains(&format!("correlation_id={id}")), "{id} is in the operator log:\n{log}");
    }
    assert_eq!(ids[2], None, "malformed arguments never became a request");
}

/// The proof of per-tool versions on the toolset: the model's list was made before the definition
/// changed (remount with a new schema); the call carries the listed version, which is stale with
/// the live one in the details; the loop refreshes and the call runs under the new version.
#[tokio::test]
async fn a_call_planned_on_a_changed_tool_definition_is_stale_and_runs_under_the_live_version() {
    let registry = Registry::new(RegistryConfig::default());
    let define = |kind: &'static str| {
        move |t: &mut agent_surface_registry::TypeBuilder<'_>| {
            t.capability("show", "Show a note.").effect(Effect::Read).idempotent().raw_handler(
                json!({"type": "object", "properties": {"id": {"type": kind}}, "required": ["id"]}),
                None,
                |_: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"shown": input["id"]})) },
            );
        }
    };
    registry.define("notes", define("string")).unwrap();
    let mounted = registry.mount("notes", "main").unwrap();
    let ts = toolset(&registry);
    let v1 = ts.snapshot().await.capability("notes.show").unwrap().tool_version.clone().unwrap();

    drop(mounted);
    registry.redefine("notes", define("integer")).unwrap();
    let _mounted = registry.mount("notes", "main").unwrap();
    let v2 = registry.snapshot(ts.consumer()).await.capability("notes.show").unwrap().tool_version.clone().unwrap();
    assert_ne!(v1, v2);

    let response = openai_turn(&[("call_v", "notes-show", r#"{"id":7}"#)]);
    let call = ts.parse_calls(Provider::OpenAiChat, &response).unwrap().remove(0);
    let planned = ts.request_for(&call).unwrap();
    assert_eq!(planned.tool_version.as_deref(), Some(v1.as_str()), "the call carries the version the model saw");
    let stale = registry.invoke(planned, agent_surface_registry::InvokeOptions::new(ts.consumer().clone())).await;
    let p = expect_error(&stale, ErrorCode::StaleCapability);
    expect_retry(p, Retry::AfterRefresh);
    assert_eq!(
        p.details().map(|d| Value::Object(d.clone())),
        Some(json!({"reason": "tool-version-mismatch", "liveToolVersion": v2}))
    );

    // The changed definition goes back to the model with the list marked stale: the same
    // arguments are not sent again before the model has read the new definition.
    let outcome = ts.call(&call).await;
    expect_error(&outcome.result, ErrorCode::StaleCapability);
    assert_eq!((outcome.attempts, outcome.stop), (1, Stop::ReturnedToCaller));
    assert!(ts.is_stale(), "the model's list is stale");
    let relisted = ts.snapshot().await;
    assert_eq!(relisted.capability("notes.show").unwrap().tool_version, Some(v2.clone()));
    // The model's next call, made on the new list, carries the new version and runs.
    let _tools = ts.tools(Provider::OpenAiChat).await;
    let response = openai_turn(&[("call_w", "notes-show", r#"{"id":7}"#)]);
    let call = ts.parse_calls(Provider::OpenAiChat, &response).unwrap().remove(0);
    let outcome = ts.call(&call).await;
    expect_ok(&outcome.result);
    assert_eq!((outcome.attempts, outcome.request.unwrap().tool_version), (1, Some(v2)));
}
