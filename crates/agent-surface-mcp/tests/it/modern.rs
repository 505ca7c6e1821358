//! The modern era (MCP 2026-07-28) through `rmcp`'s own client in its discover lifecycle:
//! confirmation as an input-required round trip, progress, cache hints, `subscriptions/listen`,
//! and consumer keys that do not depend on a session.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::details::ConfirmationInvalidReason;
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, InvokeResult, Timestamp};
use agent_surface_mcp::confirm::EngineResolver;
use agent_surface_mcp::mrtr::CONFIRM_KEY;
use agent_surface_mcp::{McpConfig, McpServer, codec};
use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, Identity, ManualClock, Quorum, Scope};
use agent_surface_registry::{Answers, Ctx, Mount, Question, Registry, RegistryConfig};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitationCapability,
    Implementation, InputRequest, InputRequiredResult, InputResponses, MetaObject, ProgressNotificationParam,
    ProtocolVersion, RequestMetaObject, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

/// A client in the discover lifecycle (no `initialize`), optionally declaring elicitation;
/// records the progress notifications it receives.
struct Modern {
    elicitation: bool,
    /// Declares URL-mode elicitation too.
    urls: bool,
    sampling: bool,
    tasks: bool,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Modern {
    fn get_info(&self) -> ClientConfig {
        let mut caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        if self.elicitation {
            caps.elicitation = Some(ElicitationCapability::new());
        }
        if self.urls {
            let form = caps.elicitation.take().map(|_| rmcp::model::FormElicitationCapability::new());
            let mut elicitation = ElicitationCapability::new().with_url(rmcp::model::UrlElicitationCapability::new());
            if let Some(form) = form {
                elicitation = elicitation.with_form(form);
            }
            caps.elicitation = Some(elicitation);
        }
        if self.sampling {
            caps.sampling = Some(Default::default());
        }
        ClientConfig::new(caps, Implementation::new("it-modern", "0"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
    }
}

type Client = RunningService<RoleClient, Modern>;

struct Shop {
    registry: Registry,
    /// Releases the long-running handlers (one permit each).
    oven: Arc<tokio::sync::Notify>,
    clock: Arc<ManualClock>,
    runs: Arc<AtomicUsize>,
    _mount: Mount,
}

/// `shop.wipe` (destructive, confirmed through the real engine), `shop.count` (a write that
/// counts its runs), `shop.steps` (reports three progress steps).
fn shop() -> (Shop, Arc<ConfirmationEngine>) {
    shop_with(None)
}

/// The same, the engine's approval pages under `base`.
fn shop_with(base: Option<&str>) -> (Shop, Arc<ConfirmationEngine>) {
    shop_where(base, Vec::new())
}

/// The same, with the engine's `quorums`.
fn shop_where(base: Option<&str>, quorums: Vec<(Scope, Quorum)>) -> (Shop, Arc<ConfirmationEngine>) {
    let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(1_795_957_200_000)));
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        ttl: Duration::from_secs(300),
        approval_base_url: base.map(str::to_string),
        quorums,
        ..Default::default()
    }));
    let registry = Registry::new(RegistryConfig {
        clock: clock.clone(),
        confirmation: Some(engine.clone()),
        ..Default::default()
    });
    let runs = Arc::new(AtomicUsize::new(0));
    registry.provide(runs.clone());
    let oven = Arc::new(tokio::sync::Notify::new());
    registry.provide(oven.clone());
    registry
        .define("shop", |t| {
            t.capability("wipe", "Wipe a shelf.")
                .effect(Effect::Destructive)
                .confirm(|i: &Value| format!("Wipe shelf {}.", i["shelf"]))
                .raw_handler(
                    json!({"type": "object", "properties": {"shelf": {"type": "integer"}}, "required": ["shelf"]}),
                    None,
                    |ctx: Ctx, i: Value| async move {
                        ctx.state::<Arc<AtomicUsize>>().fetch_add(1, Ordering::SeqCst);
                        Ok::<_, AgentSurfaceError>(json!({"wiped": i["shelf"]}))
                    },
                );
            t.capability("count", "Count a run.").effect(Effect::Write).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |ctx: Ctx, _i: Value| async move {
                    let n = ctx.state::<Arc<AtomicUsize>>().fetch_add(1, Ordering::SeqCst) + 1;
                    Ok::<_, AgentSurfaceError>(json!({"runs": n}))
                },
            );
            t.capability("steps", "Work in three steps.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |ctx: Ctx, _i: Value| async move {
                    // A step takes a while (reports in a tight loop are coalesced: see `flood`).
                    for step in 1..=3 {
                        ctx.progress(f64::from(step), Some(3.0), Some("step"));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok::<_, AgentSurfaceError>(json!({"steps": 3}))
                },
            );
            // Long-running: waits until released (or cancelled); a write, so an interrupted run has
            // an unknown outcome. `shop.crunch` is the read-only counterpart, `shop.doomed` fails.
            t.capability("bake", "Bake a batch (long-running write).")
                .effect(Effect::Write)
                .long_running()
                .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _i: Value| async move {
                    ctx.state::<Arc<tokio::sync::Notify>>().notified().await;
                    ctx.state::<Arc<AtomicUsize>>().fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(json!({"baked": true}))
                });
            t.capability("crunch", "Crunch numbers (long-running read).")
                .effect(Effect::Read)
                .idempotent()
                .long_running()
                .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _i: Value| async move {
                    ctx.state::<Arc<tokio::sync::Notify>>().notified().await;
                    Ok::<_, AgentSurfaceError>(json!({"crunched": true}))
                });
            t.capability("doomed", "Fail after starting (long-running).")
                .effect(Effect::Read)
                .long_running()
                .raw_handler(json!({"type": "object", "properties": {}}), None, |_ctx: Ctx, _i: Value| async move {
                    Err::<Value, _>(AgentSurfaceError::precondition_failed("The oven is cold."))
                });
            // Long-running, reports three progress steps and ends on its own.
            t.capability("survey", "Survey the shelves (long-running, reports progress).")
                .effect(Effect::Read)
                .long_running()
                .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _i: Value| async move {
                    for step in 1..=3 {
                        ctx.progress(f64::from(step), Some(3.0), Some("shelf"));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok::<_, AgentSurfaceError>(json!({"surveyed": 3}))
                });
            // Asks one more question for every answer it gets: never settles.
            t.capability("endless", "Ask for ever.")
                .effect(Effect::Read)
                .ask(|_ctx: &Ctx, _i: &Value, answers: &Answers| {
                    let n = answers.values().len();
                    Ok(vec![Question::form(format!("q{n}"), "One more?", json!({"type": "object", "properties": {}}))])
                })
                .raw_handler(json!({"type": "object", "properties": {}}), None, |_ctx: Ctx, _i: Value| async move {
                    Ok::<_, AgentSurfaceError>(json!({}))
                });
            // Reports progress as fast as it can.
            t.capability("flood", "Report a lot of progress.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |ctx: Ctx, _i: Value| async move {
                    for i in 1..=200_000u32 {
                        ctx.progress(f64::from(i), Some(200_000.0), Some("row"));
                    }
                    Ok::<_, AgentSurfaceError>(json!({}))
                },
            );
            // Long-running and confirmed: the approved call becomes the task.
            t.capability("rebuild", "Rebuild the index (long-running, confirmed).")
                .effect(Effect::Destructive)
                .long_running()
                .confirm(|_i: &Value| "Rebuild the whole index.")
                .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _i: Value| async move {
                    ctx.state::<Arc<tokio::sync::Notify>>().notified().await;
                    Ok::<_, AgentSurfaceError>(json!({"rebuilt": true}))
                });
            // Asks the person for a name, then the client's model for a slogan, then needs an
            // approval.
            t.capability("label", "Print a label.")
                .effect(Effect::Destructive)
                .ask(|_ctx: &Ctx, _i: &Value, answers: &Answers| {
                    let schema =
                        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
                    Ok(if answers.form("name").is_none() {
                        vec![Question::form("name", "Whose label?", schema)]
                    } else if answers.sample_text("slogan").is_none() {
                        vec![Question::sample("slogan", "Write a slogan.", 20)]
                    } else {
                        vec![]
                    })
                })
                .confirm(|_i: &Value| "Print one label.")
                .raw_handler(json!({"type": "object", "properties": {}}), None, |ctx: Ctx, _i: Value| async move {
                    ctx.state::<Arc<AtomicUsize>>().fetch_add(1, Ordering::SeqCst);
                    let answers = ctx.answers();
                    let name = answers.form("name").and_then(|f| f["name"].as_str()).unwrap_or_default().to_string();
                    let slogan = answers.sample_text("slogan").unwrap_or_default().to_string();
                    let keys: Vec<&String> = answers.values().keys().collect();
                    Ok::<_, AgentSurfaceError>(json!({"label": format!("{name}: {slogan}"), "keys": keys}))
                });
        })
        .unwrap();
    let mount = registry.mount("shop", "main").unwrap();
    (Shop { registry, oven, clock, runs, _mount: mount }, engine)
}

fn config(engine: &Arc<ConfirmationEngine>) -> McpConfig {
    McpConfig { confirmations: Some(Arc::new(EngineResolver::new(engine.clone()))), ..Default::default() }
}

/// Serves `registry` over a fresh in-memory pipe and connects a modern client.
async fn connect(
    registry: &Registry,
    config: Arc<McpConfig>,
    elicitation: bool,
) -> (Client, Arc<Mutex<Vec<ProgressNotificationParam>>>) {
    connect_with(registry, config, elicitation, false).await
}

/// The same, with or without the sampling capability.
async fn connect_with(
    registry: &Registry,
    config: Arc<McpConfig>,
    elicitation: bool,
    sampling: bool,
) -> (Client, Arc<Mutex<Vec<ProgressNotificationParam>>>) {
    connect_full(registry, config, elicitation, sampling, false).await
}

/// The same, with or without the tasks extension.
async fn connect_full(
    registry: &Registry,
    config: Arc<McpConfig>,
    elicitation: bool,
    sampling: bool,
    tasks: bool,
) -> (Client, Arc<Mutex<Vec<ProgressNotificationParam>>>) {
    let progress = Arc::new(Mutex::new(Vec::new()));
    connect_modern(registry, config, Modern { elicitation, urls: false, sampling, tasks, progress: progress.clone() })
        .await
        .map(|client| (client, progress))
        .unwrap()
}

/// Serves `registry` with `config` to `client` in the discover lifecycle.
async fn connect_modern(registry: &Registry, config: Arc<McpConfig>, client: Modern) -> Option<Client> {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(agent_surface_mcp::serve_io(McpServer::new(registry.clone(), config), read, write, 1 << 20));
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    client.serve_with_lifecycle(client_io, lifecycle).await.ok()
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_string()).with_arguments(args.as_object().cloned().unwrap_or_default())
}

fn with_meta(mut p: CallToolRequestParams, meta: Value) -> CallToolRequestParams {
    p.meta = Some(RequestMetaObject(MetaObject(meta.as_object().cloned().unwrap_or_default())));
    p
}

fn answer(action: &str) -> InputResponses {
    let mut responses = InputResponses::new();
    responses.insert(CONFIRM_KEY.to_string(), json!({"action": action}));
    responses
}

fn retry(tool: &str, args: Value, state: &str, responses: Option<InputResponses>) -> CallToolRequestParams {
    let p = params(tool, args).with_request_state(state.to_string());
    match responses {
        Some(r) => p.with_input_responses(r),
        None => p,
    }
}

#[track_caller]
fn asks(response: CallToolResponse) -> InputRequiredResult {
    match response {
        CallToolResponse::InputRequired(r) => r,
        other => panic!("expected an input-required result, got {other:?}"),
    }
}

#[track_caller]
fn completes(response: CallToolResponse) -> InvokeResult {
    match response {
        CallToolResponse::Complete(r) => codec::decode(&r).unwrap(),
        other => panic!("expected a complete result, got {other:?}"),
    }
}

#[track_caller]
fn rpc_code(result: Result<CallToolResponse, ServiceError>) -> i32 {
    match result {
        Err(ServiceError::McpError(e)) => e.code.0,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// A quorum that asks for a role does not count the person's approval in person: a client that
/// can answer a form is not asked one (no input-required round, whose answer the engine would
/// refuse); the model gets `CONFIRMATION_REQUIRED`, on the repeat too. Without an approval page,
/// and with one the client cannot open. The default quorum is still asked (control).
#[tokio::test]
async fn a_confirmation_whose_quorum_asks_for_a_role_is_not_asked_in_person() {
    for base in [None, Some("https://shop.example/inbox/c")] {
        let finance = vec![(Scope::capability("shop.wipe"), Quorum::of(1).with_role("finance"))];
        let (shop, engine) = shop_where(base, finance);
        let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
        for _ in 0..2 {
            let response = client.call_tool_once(params("shop-wipe", json!({"shelf": 3}))).await.unwrap();
            let r = completes(response);
            assert_eq!(r.code(), Some(ErrorCode::ConfirmationRequired), "{base:?}: {r:?}");
        }
        assert_eq!(shop.runs.load(Ordering::SeqCst), 0);
        client.cancel().await.unwrap();
    }

    let (shop, engine) = shop_where(None, vec![(Scope::capability("shop.wipe"), Quorum::of(1))]);
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let question = asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 3}))).await.unwrap());
    assert!(question.input_requests.is_some_and(|r| r.contains_key(CONFIRM_KEY)));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_approval_through_input_required_runs_the_call_once_and_a_replayed_state_runs_nothing() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let question = asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 3}))).await.unwrap());
    let requests = question.input_requests.clone().expect("a question");
    let Some(InputRequest::Elicitation(elicit)) = requests.get(CONFIRM_KEY) else { panic!("{requests:?}") };
    let asked = serde_json::to_value(&elicit.params).unwrap();
    assert_eq!(asked["message"], "The assistant asks for your approval: Wipe shelf 3. Approve this action?");
    assert_eq!(asked["requestedSchema"], json!({"type": "object", "properties": {}}));
    let state = question.request_state.clone().expect("a sealed state");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);

    // No answer yet: the same question again, with the same state.
    let again = asks(client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, None)).await.unwrap());
    assert_eq!(again.request_state.as_deref(), Some(state.as_str()));

    let done = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, Some(answer("accept")))).await.unwrap(),
    );
    assert_eq!(done.output(), Some(&json!({"wiped": 3})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);

    // The state is single use through the confirmation store: a replay is refused in-band.
    let replay = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, Some(answer("accept")))).await.unwrap(),
    );
    assert_eq!(replay.code(), Some(ErrorCode::ConfirmationInvalid));
    assert_eq!(replay.error_payload().unwrap().detail("reason"), Some(&json!(ConfirmationInvalidReason::Consumed)));
    // Declining it afterwards is told the truth: the approval was used, not denied.
    let late = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, Some(answer("decline")))).await.unwrap(),
    );
    assert_eq!(late.error_payload().unwrap().detail("reason"), Some(&json!(ConfirmationInvalidReason::Consumed)));
    assert!(late.error_payload().unwrap().not_processed());
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

/// The approved round runs under the request as the client sent it: its later repeat under the
/// same invocation id, without the state (the client never learns the confirmation's id), is
/// answered from the record, neither refused as another request nor asked or run again.
#[tokio::test]
async fn a_call_approved_in_person_is_replayed_to_its_plain_repeat() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let meta = json!({"agent-surface/invocationId": "wipe-1"});
    let call = || with_meta(params("shop-wipe", json!({"shelf": 3})), meta.clone());
    let question = asks(client.call_tool_once(call()).await.unwrap());
    let state = question.request_state.expect("a sealed state");
    let approved = with_meta(retry("shop-wipe", json!({"shelf": 3}), &state, Some(answer("accept"))), meta.clone());
    let done = completes(client.call_tool_once(approved).await.unwrap());
    assert_eq!(done.output(), Some(&json!({"wiped": 3})));
    let again = completes(client.call_tool_once(call()).await.unwrap());
    assert_eq!(again.output(), Some(&json!({"wiped": 3})), "{again:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_declined_approval_is_final_and_runs_nothing() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let state =
        asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 1}))).await.unwrap()).request_state.unwrap();
    let denied = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 1}), &state, Some(answer("decline")))).await.unwrap(),
    );
    assert_eq!(denied.code(), Some(ErrorCode::ConfirmationInvalid));
    assert_eq!(denied.error_payload().unwrap().detail("reason"), Some(&json!("denied")));
    // Nothing ran, and the payload says so, as the registry's refusals at the gate do.
    assert!(denied.error_payload().unwrap().not_processed());
    // Accepting the same state afterwards changes nothing.
    let late = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 1}), &state, Some(answer("accept")))).await.unwrap(),
    );
    assert_eq!(late.code(), Some(ErrorCode::ConfirmationInvalid));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_tampered_or_foreign_state_is_a_protocol_error() {
    let (shop, engine) = shop();
    let config = Arc::new(config(&engine));
    let (client, _) = connect(&shop.registry, config.clone(), true).await;
    let state =
        asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 2}))).await.unwrap()).request_state.unwrap();
    let tampered = format!("{state}x");
    let r = client.call_tool_once(retry("shop-wipe", json!({"shelf": 2}), &tampered, Some(answer("accept")))).await;
    assert_eq!(rpc_code(r), -32602);
    // Bound to the arguments: the same state for another shelf does not open.
    let r = client.call_tool_once(retry("shop-wipe", json!({"shelf": 9}), &state, Some(answer("accept")))).await;
    assert_eq!(rpc_code(r), -32602);
    // Bound to the tool.
    let r = client.call_tool_once(retry("shop-count", json!({"shelf": 2}), &state, Some(answer("accept")))).await;
    assert_eq!(rpc_code(r), -32602);
    // Sealed by another server's key.
    let (other, _) = connect(&shop.registry, Arc::new(self::config(&engine)), true).await;
    let r = other.call_tool_once(retry("shop-wipe", json!({"shelf": 2}), &state, Some(answer("accept")))).await;
    assert_eq!(rpc_code(r), -32602);
    // An answer that is not an elicitation result.
    let mut bad = InputResponses::new();
    bad.insert(CONFIRM_KEY.to_string(), json!(12345));
    let r = client.call_tool_once(retry("shop-wipe", json!({"shelf": 2}), &state, Some(bad))).await;
    assert_eq!(rpc_code(r), -32602);
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_expired_state_starts_a_fresh_approval() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let state =
        asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 4}))).await.unwrap()).request_state.unwrap();
    shop.clock.advance(Duration::from_secs(301));
    let fresh = asks(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 4}), &state, Some(answer("accept")))).await.unwrap(),
    );
    let fresh_state = fresh.request_state.unwrap();
    assert_ne!(fresh_state, state);
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);
    let done = completes(
        client
            .call_tool_once(retry("shop-wipe", json!({"shelf": 4}), &fresh_state, Some(answer("accept"))))
            .await
            .unwrap(),
    );
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_without_elicitation_gets_the_two_phase_result() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), false).await;
    let result = completes(client.call_tool_once(params("shop-wipe", json!({"shelf": 5}))).await.unwrap());
    assert_eq!(result.code(), Some(ErrorCode::ConfirmationRequired));
}

/// Modern era, a client that cannot answer input requests: the model's repetition of the same
/// call presents the confirmation relayed to it — the same one while nobody has decided, then,
/// once a person approved it, the call runs once.
#[tokio::test]
async fn a_repeated_call_presents_the_relayed_confirmation() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), false).await;
    let wipe = || params("shop-wipe", json!({"shelf": 6}));
    let first = completes(client.call_tool_once(wipe()).await.unwrap());
    let id = first.error_payload().unwrap().detail("confirmationId").unwrap().as_str().unwrap().to_string();
    let again = completes(client.call_tool_once(wipe()).await.unwrap());
    assert_eq!(again.error_payload().unwrap().detail("confirmationId"), Some(&json!(id)), "{again:?}");
    engine.approve(&id, &Identity::new("owner")).await.unwrap();
    let done = completes(client.call_tool_once(wipe()).await.unwrap());
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
    let next = completes(client.call_tool_once(wipe()).await.unwrap());
    assert_eq!(next.code(), Some(ErrorCode::ConfirmationRequired));
    assert_ne!(next.error_payload().unwrap().detail("confirmationId"), Some(&json!(id)));
}

#[tokio::test]
async fn progress_reaches_a_modern_client_before_the_result() {
    let (shop, engine) = shop();
    let (client, progress) = connect(&shop.registry, Arc::new(config(&engine)), false).await;
    let p = with_meta(params("shop-steps", json!({})), json!({"progressToken": "p-1"}));
    let result = completes(client.call_tool_once(p).await.unwrap());
    assert!(result.is_ok());
    let seen: Vec<(f64, Option<f64>)> = progress.lock().unwrap().iter().map(|p| (p.progress, p.total)).collect();
    assert_eq!(seen, vec![(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))]);
    // `rmcp`'s client puts a token of its own in `_meta`; every report carries the call's one.
    let tokens: Vec<Value> =
        progress.lock().unwrap().iter().map(|p| serde_json::to_value(&p.progress_token).unwrap()).collect();
    assert!(tokens.windows(2).all(|w| w[0] == w[1]), "{tokens:?}");
}

#[tokio::test]
async fn the_tool_list_carries_cache_hints_and_listen_announces_changes() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), false).await;
    let listed = client.list_tools(None).await.unwrap();
    assert_eq!(listed.ttl_ms, Some(60_000));
    assert_eq!(listed.cache_scope, Some(CacheScope::Private));
    let mut subscription =
        client.peer().listen(SubscriptionFilter::builder().tools_list_changed().build()).await.unwrap();
    assert_eq!(subscription.acknowledged().tools_list_changed, Some(true));
    shop.registry
        .define("more", |t| {
            t.capability("ping", "Answer.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
            )
        })
        .unwrap();
    let _more = shop.registry.mount("more", "main").unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await.expect("a notification in time");
    assert!(matches!(next, Ok(Some(ServerNotification::ToolListChangedNotification(_)))), "{next:?}");
}

#[tokio::test]
async fn a_principal_keeps_its_idempotency_records_across_connections() {
    let (shop, engine) = shop();
    let config = Arc::new(McpConfig { identity: Some(Identity::new("alice")), ..config(&engine) });
    let meta = json!({"agent-surface/invocationId": "inv-1"});
    let (first, _) = connect(&shop.registry, config.clone(), false).await;
    let a = completes(first.call_tool_once(with_meta(params("shop-count", json!({})), meta.clone())).await.unwrap());
    let (second, _) = connect(&shop.registry, config.clone(), false).await;
    let b = completes(second.call_tool_once(with_meta(params("shop-count", json!({})), meta.clone())).await.unwrap());
    assert_eq!(a, b);
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
    // Anonymous connections are keyed apart.
    let anonymous = Arc::new(self::config(&engine));
    let (third, _) = connect(&shop.registry, anonymous.clone(), false).await;
    let _ = completes(third.call_tool_once(with_meta(params("shop-count", json!({})), meta.clone())).await.unwrap());
    let (fourth, _) = connect(&shop.registry, anonymous, false).await;
    let _ = completes(fourth.call_tool_once(with_meta(params("shop-count", json!({})), meta)).await.unwrap());
    assert_eq!(shop.runs.load(Ordering::SeqCst), 3);
}

fn responses(pairs: &[(&str, Value)]) -> InputResponses {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

#[tokio::test]
async fn questions_go_round_by_round_and_their_answers_reach_the_handler_after_the_approval() {
    let (shop, engine) = shop();
    let (client, _) = connect_with(&shop.registry, Arc::new(config(&engine)), true, true).await;
    let first = asks(client.call_tool_once(params("shop-label", json!({}))).await.unwrap());
    let requests = serde_json::to_value(first.input_requests.as_ref().unwrap()).unwrap();
    assert_eq!(requests["name"]["method"], "elicitation/create");
    assert_eq!(requests["name"]["params"]["message"], "Whose label?");
    let state1 = first.request_state.unwrap();

    // An answer to a key that was never asked does not travel on.
    let named = responses(&[("name", json!({"action": "accept", "content": {"name": "Ada"}})), ("junk", json!(1))]);
    let second = asks(client.call_tool_once(retry("shop-label", json!({}), &state1, Some(named))).await.unwrap());
    let requests = serde_json::to_value(second.input_requests.as_ref().unwrap()).unwrap();
    assert_eq!(requests["slogan"]["method"], "sampling/createMessage");
    assert_eq!(requests["slogan"]["params"]["maxTokens"], 20);
    let state2 = second.request_state.unwrap();
    assert_ne!(state2, state1);

    // The name travels in the state: this round answers only the slogan.
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "Go far."}, "model": "m"});
    let third = asks(
        client
            .call_tool_once(retry("shop-label", json!({}), &state2, Some(responses(&[("slogan", sampled)]))))
            .await
            .unwrap(),
    );
    assert!(third.input_requests.as_ref().unwrap().contains_key(CONFIRM_KEY), "{third:?}");
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);

    let state3 = third.request_state.unwrap();
    // The approval round takes no new answers: the call runs with those the approval was asked
    // with (and only answers to asked keys travelled: not `junk`).
    let mut approve = answer("accept");
    approve.insert("name".to_string(), json!({"action": "accept", "content": {"name": "Mallory"}}));
    let done = completes(client.call_tool_once(retry("shop-label", json!({}), &state3, Some(approve))).await.unwrap());
    assert_eq!(done.output(), Some(&json!({"label": "Ada: Go far.", "keys": ["name", "slogan"]})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);
}

/// Answers a client gives in its first request, before any state, are the ones that call runs
/// with: the state it seals carries them on, to the approved call as to a later round.
#[tokio::test]
async fn answers_given_before_any_state_travel_on_to_the_approved_call() {
    let (shop, engine) = shop();
    let (client, _) = connect_with(&shop.registry, Arc::new(config(&engine)), true, true).await;
    let name = json!({"action": "accept", "content": {"name": "Ada"}});
    let slogan = json!({"role": "assistant", "content": {"type": "text", "text": "Go far."}, "model": "m"});

    // Every question answered up front: only the approval is asked, and the approved call runs
    // with the answers.
    let answered = responses(&[("name", name.clone()), ("slogan", slogan.clone())]);
    let approval =
        asks(client.call_tool_once(params("shop-label", json!({})).with_input_responses(answered)).await.unwrap());
    let asked: Vec<&String> = approval.input_requests.as_ref().unwrap().keys().collect();
    assert_eq!(asked, [CONFIRM_KEY]);
    let state = approval.request_state.unwrap();
    let done =
        completes(client.call_tool_once(retry("shop-label", json!({}), &state, Some(answer("accept")))).await.unwrap());
    assert_eq!(done.output(), Some(&json!({"label": "Ada: Go far.", "keys": ["name", "slogan"]})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);

    // Part answered up front: the rest is asked, and the next round adds answers only under the
    // keys it was asked (not `junk`).
    let named = responses(&[("name", name)]);
    let second =
        asks(client.call_tool_once(params("shop-label", json!({})).with_input_responses(named)).await.unwrap());
    let asked: Vec<&String> = second.input_requests.as_ref().unwrap().keys().collect();
    assert_eq!(asked, ["slogan"]);
    let state = second.request_state.unwrap();
    let slogan_and_junk = responses(&[("slogan", slogan), ("junk", json!(1))]);
    let approval =
        asks(client.call_tool_once(retry("shop-label", json!({}), &state, Some(slogan_and_junk))).await.unwrap());
    let asked: Vec<&String> = approval.input_requests.as_ref().unwrap().keys().collect();
    assert_eq!(asked, [CONFIRM_KEY]);
    let state = approval.request_state.unwrap();
    let done =
        completes(client.call_tool_once(retry("shop-label", json!({}), &state, Some(answer("accept")))).await.unwrap());
    assert_eq!(done.output(), Some(&json!({"label": "Ada: Go far.", "keys": ["name", "slogan"]})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_question_the_client_cannot_answer_is_a_missing_capability() {
    let (shop, engine) = shop();
    // Elicitation, but no sampling.
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let state = asks(client.call_tool_once(params("shop-label", json!({}))).await.unwrap()).request_state.unwrap();
    let named = responses(&[("name", json!({"action": "accept", "content": {"name": "Ada"}}))]);
    match client.call_tool_once(retry("shop-label", json!({}), &state, Some(named))).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32021);
            let data = e.data.expect("the required capabilities");
            assert!(data["requiredCapabilities"]["sampling"].is_object(), "{data}");
            assert!(data["requiredCapabilities"].get("elicitation").is_none(), "{data}");
        }
        other => panic!("expected -32021, got {other:?}"),
    }
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn callers_that_cannot_ask_get_the_in_band_refusal() {
    let (shop, _engine) = shop();
    let result = shop
        .registry
        .invoke(
            agent_surface_registry::InvokeRequest::new("shop.label", json!({})),
            agent_surface_registry::InvokeOptions::new(agent_surface_policy::Consumer::anonymous("toolset")),
        )
        .await;
    assert_eq!(result.code(), Some(ErrorCode::PreconditionFailed));
    assert_eq!(result.error_payload().unwrap().detail("reason"), Some(&json!("client-input-required")));
    assert_eq!(result.error_payload().unwrap().retry(), agent_surface_core::Retry::No);
}

fn tasks_config(engine: &Arc<ConfirmationEngine>) -> Arc<McpConfig> {
    let tasks = agent_surface_mcp::tasks::Tasks::new(agent_surface_mcp::tasks::TaskConfig::default());
    Arc::new(McpConfig { tasks: Some(tasks), ..config(engine) })
}

#[track_caller]
fn task_id(response: CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(task) => {
            assert_eq!(task.task.status, rmcp::model::TaskStatus::Working);
            task.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Polls `tasks/get` until the task is final.
async fn final_task(client: &Client, id: &str) -> rmcp::model::DetailedTask {
    for _ in 0..200 {
        let got = client.peer().get_task(rmcp::model::GetTaskParams::new(id)).await.unwrap();
        if got.task.status().is_terminal() {
            return got.task;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {id} did not end");
}

fn release(shop: &Shop) {
    shop.oven.notify_one();
}

#[tokio::test]
async fn a_long_running_call_becomes_a_task_once_it_runs_and_completes_with_its_result() {
    let (shop, engine) = shop();
    let (client, _) = connect_full(&shop.registry, tasks_config(&engine), false, false, true).await;
    let id = task_id(client.call_tool_once(params("shop-bake", json!({}))).await.unwrap());
    let working = client.peer().get_task(rmcp::model::GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(working.task.status(), rmcp::model::TaskStatus::Working);
    // `ttlMs` counts from the task's creation, the least the store keeps it: while it runs, its
    // five minutes after now (were it to end now), so the figure grows as it runs; once ended,
    // its five minutes after its end.
    let first = working.task.task.ttl_ms.expect("a time to live");
    assert!((300_000..302_000).contains(&first), "{working:?}");
    shop.clock.advance(Duration::from_secs(5));
    let later = client.peer().get_task(rmcp::model::GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(later.task.task.ttl_ms, Some(first + 5_000), "{later:?}");
    release(&shop);
    let done = final_task(&client, &id).await;
    assert!(done.task.ttl_ms.is_some_and(|ttl| (305_000..307_000).contains(&ttl)), "{done:?}");
    let rmcp::model::TaskPayload::Completed { result } = done.payload else { panic!("{done:?}") };
    let result: rmcp::model::CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(codec::decode(&result).unwrap().output(), Some(&json!({"baked": true})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);

    // A capability error is a completed task whose result is the error.
    let id = task_id(client.call_tool_once(params("shop-doomed", json!({}))).await.unwrap());
    let done = final_task(&client, &id).await;
    let rmcp::model::TaskPayload::Completed { result } = done.payload else { panic!("{done:?}") };
    let result: rmcp::model::CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(result.is_error, Some(true));
    assert_eq!(codec::decode(&result).unwrap().code(), Some(ErrorCode::PreconditionFailed));

    // Refused before it runs: answered in the call, no task.
    let refused = completes(client.call_tool_once(params("shop-bake", json!({"extra": 1}))).await.unwrap());
    assert_eq!(refused.code(), Some(ErrorCode::InvalidInput));
}

#[tokio::test]
async fn cancelling_a_task_follows_the_cancellation_rules() {
    let (shop, engine) = shop();
    let (client, _) = connect_full(&shop.registry, tasks_config(&engine), false, false, true).await;
    // A read: nothing it did needs reconciling, the task ends cancelled.
    let id = task_id(client.call_tool_once(params("shop-crunch", json!({}))).await.unwrap());
    client.peer().cancel_task(rmcp::model::CancelTaskParams::new(&id)).await.unwrap();
    let done = final_task(&client, &id).await;
    assert_eq!(done.status(), rmcp::model::TaskStatus::Cancelled);
    // Cancelling a final task is acknowledged too.
    client.peer().cancel_task(rmcp::model::CancelTaskParams::new(&id)).await.unwrap();

    // A write interrupted after its handler started: completed, outcome unknown.
    let id = task_id(client.call_tool_once(params("shop-bake", json!({}))).await.unwrap());
    client.peer().cancel_task(rmcp::model::CancelTaskParams::new(&id)).await.unwrap();
    let done = final_task(&client, &id).await;
    let rmcp::model::TaskPayload::Completed { result } = done.payload else { panic!("{done:?}") };
    let result: rmcp::model::CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    let decoded = codec::decode(&result).unwrap();
    assert_eq!(decoded.code(), Some(ErrorCode::ExecutionFailed));
    assert_eq!(decoded.error_payload().unwrap().detail("reason"), Some(&json!("outcome-unknown")));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn tasks_are_for_clients_that_negotiate_them_and_belong_to_their_principal() {
    let (shop, engine) = shop();
    // Without the extension: the same call is answered when it ends.
    let (plain, _) = connect_full(&shop.registry, tasks_config(&engine), false, false, false).await;
    let call = tokio::spawn(async move { plain.call_tool_once(params("shop-crunch", json!({}))).await });
    let released = eventually_async(|| {
        release(&shop);
        call.is_finished()
    })
    .await;
    assert!(released);

    // An authenticated principal's task is invisible to another principal.
    let alice = Arc::new(McpConfig { identity: Some(Identity::new("alice")), ..(*tasks_config(&engine)).clone() });
    let (a, _) = connect_full(&shop.registry, alice, false, false, true).await;
    let id = task_id(a.call_tool_once(params("shop-crunch", json!({}))).await.unwrap());
    let bob = Arc::new(McpConfig { identity: Some(Identity::new("bob")), ..(*tasks_config(&engine)).clone() });
    let (b, _) = connect_full(&shop.registry, bob, false, false, true).await;
    match b.peer().get_task(rmcp::model::GetTaskParams::new(&id)).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602),
        other => panic!("expected -32602, got {other:?}"),
    }
    match a.peer().get_task(rmcp::model::GetTaskParams::new("t-unknown")).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602),
        other => panic!("expected -32602, got {other:?}"),
    }
    release(&shop);
    assert!(final_task(&a, &id).await.status().is_terminal());
}

/// Polls `f` (which may act) until it holds or two seconds pass.
async fn eventually_async(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn an_ask_step_that_never_settles_stops_after_the_round_limit() {
    let (shop, engine) = shop();
    let (client, _) = connect(&shop.registry, Arc::new(config(&engine)), true).await;
    let mut response = client.call_tool_once(params("shop-endless", json!({}))).await.unwrap();
    let mut rounds = 0;
    while let CallToolResponse::InputRequired(asked) = response {
        rounds += 1;
        assert!(rounds <= agent_surface_mcp::mrtr::MAX_ROUNDS, "more rounds than the limit");
        let (key, _) = asked.input_requests.as_ref().unwrap().iter().next().unwrap();
        let answer = responses(&[(key.as_str(), json!({"action": "accept", "content": {}}))]);
        let state = asked.request_state.clone().unwrap();
        response = client.call_tool_once(retry("shop-endless", json!({}), &state, Some(answer))).await.unwrap();
    }
    assert_eq!(rounds, agent_surface_mcp::mrtr::MAX_ROUNDS);
    let last = completes(response);
    assert_eq!(last.error_payload().unwrap().detail("reason"), Some(&json!("client-input-required")));
}

#[tokio::test]
async fn a_flood_of_progress_is_coalesced_and_the_last_report_arrives() {
    let (shop, engine) = shop();
    let (client, progress) = connect(&shop.registry, Arc::new(config(&engine)), false).await;
    let p = with_meta(params("shop-flood", json!({})), json!({"progressToken": "f"}));
    assert!(completes(client.call_tool_once(p).await.unwrap()).is_ok());
    let seen = progress.lock().unwrap().iter().map(|p| p.progress).collect::<Vec<_>>();
    assert!(!seen.is_empty() && seen.len() < 200_000, "{} reports", seen.len());
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(seen.last(), Some(&200_000.0));
}

#[tokio::test]
async fn an_approved_long_running_call_becomes_a_task() {
    let (shop, engine) = shop();
    let (client, _) = connect_full(&shop.registry, tasks_config(&engine), true, false, true).await;
    let state = asks(client.call_tool_once(params("shop-rebuild", json!({}))).await.unwrap()).request_state.unwrap();
    let id =
        task_id(client.call_tool_once(retry("shop-rebuild", json!({}), &state, Some(answer("accept")))).await.unwrap());
    release(&shop);
    let done = final_task(&client, &id).await;
    assert_eq!(done.status(), rmcp::model::TaskStatus::Completed);
}

/// A long-running call approved at the approval page becomes a task on the retry that approves it,
/// as one approved in person does: answered once its handler runs, not when it ends.
#[tokio::test]
async fn a_long_running_call_approved_at_the_page_becomes_a_task() {
    const BASE: &str = "https://shop.example/inbox/c";
    let (shop, engine) = shop_with(Some(BASE));
    let progress = Arc::new(Mutex::new(Vec::new()));
    let modern = Modern { elicitation: true, urls: true, sampling: false, tasks: true, progress };
    let client = connect_modern(&shop.registry, tasks_config(&engine), modern).await.unwrap();
    let question = asks(client.call_tool_once(params("shop-rebuild", json!({}))).await.unwrap());
    let requests = question.input_requests.clone().expect("a question");
    let Some(InputRequest::Elicitation(elicit)) = requests.get(CONFIRM_KEY) else { panic!("{requests:?}") };
    let asked = serde_json::to_value(&elicit.params).unwrap();
    let cid = asked["url"].as_str().and_then(|u| u.strip_prefix(&format!("{BASE}/"))).expect("the page").to_string();
    engine.approve(&cid, &Identity::new("manager")).await.unwrap();

    let state = question.request_state.unwrap();
    let retried = client.call_tool_once(retry("shop-rebuild", json!({}), &state, Some(answer("accept"))));
    let retried = tokio::time::timeout(Duration::from_secs(5), retried).await.expect("answered while the call runs");
    let id = task_id(retried.unwrap());
    release(&shop);
    let done = final_task(&client, &id).await;
    assert_eq!(done.status(), rmcp::model::TaskStatus::Completed);
}

/// A long-running call that cannot become a task (here: no room for one more running task) is
/// answered when it ends, and its progress reaches the client before the result.
#[tokio::test]
async fn a_long_running_call_answered_in_the_request_relays_its_progress() {
    use agent_surface_mcp::tasks::{TaskConfig, Tasks};
    let (shop, engine) = shop();
    let tasks = Tasks::new(TaskConfig { max_running: 0, ..TaskConfig::default() });
    let config = Arc::new(McpConfig { tasks: Some(tasks), ..config(&engine) });
    let (client, progress) = connect_full(&shop.registry, config, false, false, true).await;
    let p = with_meta(params("shop-survey", json!({})), json!({"progressToken": "s-1"}));
    let done = completes(client.call_tool_once(p).await.unwrap());
    assert_eq!(done.output(), Some(&json!({"surveyed": 3})));
    let seen: Vec<f64> = progress.lock().unwrap().iter().map(|p| p.progress).collect();
    assert!(!seen.is_empty(), "no progress before the result");
    assert_eq!(seen.last(), Some(&3.0));
}

/// URL-mode elicitation in the modern era: a client that declares it (here beside forms) is sent
/// to the confirmation's approval page by the input-required question. Its answer is never an
/// approval: a manager approves at the page, then the answered retry runs the call once; answered
/// before anyone decided, the retry relays the two-phase result with `approvalUrl` (not asked
/// again), and the model's later plain repeat runs once approved.
#[tokio::test]
async fn a_client_that_opens_urls_is_sent_to_the_approval_page() {
    const BASE: &str = "https://shop.example/inbox/c";
    let (shop, engine) = shop_with(Some(BASE));
    let progress = Arc::new(Mutex::new(Vec::new()));
    let modern = Modern { elicitation: true, urls: true, sampling: false, tasks: false, progress };
    let client = connect_modern(&shop.registry, Arc::new(config(&engine)), modern).await.unwrap();

    let question = asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 3}))).await.unwrap());
    let requests = question.input_requests.clone().expect("a question");
    let Some(InputRequest::Elicitation(elicit)) = requests.get(CONFIRM_KEY) else { panic!("{requests:?}") };
    let asked = serde_json::to_value(&elicit.params).unwrap();
    assert_eq!(asked["mode"], "url", "{asked}");
    let url = asked["url"].as_str().unwrap().to_string();
    let id = url.strip_prefix(&format!("{BASE}/")).expect("the approval page").to_string();
    assert!(asked["message"].as_str().unwrap().contains("Wipe shelf 3."), "{asked}");
    assert!(asked["message"].as_str().unwrap().contains("cannot approve it there"), "{asked}");
    let state = question.request_state.clone().unwrap();
    // No answer yet: the same question.
    let again = asks(client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, None)).await.unwrap());
    assert_eq!(again.request_state.as_deref(), Some(state.as_str()));

    // The requester's accept alone approves nothing: the retry relays the two-phase result.
    let early = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, Some(answer("accept")))).await.unwrap(),
    );
    let p = early.error_payload().unwrap();
    assert_eq!(p.code(), ErrorCode::ConfirmationRequired);
    assert_eq!((p.detail("confirmationId"), p.detail("approvalUrl")), (Some(&json!(id)), Some(&json!(url))));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 0);

    // A manager approves at the page; the answered retry runs the call once.
    engine.approve(&id, &Identity::new("manager")).await.unwrap();
    let done = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 3}), &state, Some(answer("accept")))).await.unwrap(),
    );
    assert_eq!(done.output(), Some(&json!({"wiped": 3})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1);

    // Another shelf: declined at the client (no denial), approved later, the plain repeat runs.
    let question = asks(client.call_tool_once(params("shop-wipe", json!({"shelf": 4}))).await.unwrap());
    let state = question.request_state.clone().unwrap();
    let declined = completes(
        client.call_tool_once(retry("shop-wipe", json!({"shelf": 4}), &state, Some(answer("decline")))).await.unwrap(),
    );
    let p = declined.error_payload().unwrap();
    assert_eq!(p.code(), ErrorCode::ConfirmationRequired, "declining to open a page is no denial");
    let second = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
    engine.approve(&second, &Identity::new("manager")).await.unwrap();
    let done = completes(client.call_tool_once(params("shop-wipe", json!({"shelf": 4}))).await.unwrap());
    assert_eq!(done.output(), Some(&json!({"wiped": 4})));
    assert_eq!(shop.runs.load(Ordering::SeqCst), 2);
}

/// Two servers ("replicas") sharing one task store, the first running tasks under `lease`.
fn replicas_sharing_tasks(
    engine: &Arc<ConfirmationEngine>,
    lease: Duration,
) -> (Arc<McpConfig>, Arc<McpConfig>, Arc<agent_surface_policy::MemoryTaskStore>) {
    use agent_surface_mcp::tasks::{TaskConfig, Tasks};
    let store = Arc::new(agent_surface_policy::MemoryTaskStore::default());
    let tasks = |lease| {
        Tasks::new(TaskConfig {
            lease,
            poll_interval: Duration::from_millis(10),
            ..TaskConfig::with_store(store.clone())
        })
    };
    let a = Arc::new(McpConfig { tasks: Some(tasks(lease)), ..config(engine) });
    let b = Arc::new(McpConfig { tasks: Some(tasks(lease)), ..config(engine) });
    (a, b, store)
}

#[track_caller]
fn assert_outcome_unknown(task: rmcp::model::DetailedTask) {
    assert_eq!(task.status(), rmcp::model::TaskStatus::Completed, "{task:?}");
    let rmcp::model::TaskPayload::Completed { result } = task.payload else { panic!("{task:?}") };
    let result: rmcp::model::CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(result.is_error, Some(true));
    let decoded = codec::decode(&result).unwrap();
    assert_eq!(decoded.code(), Some(ErrorCode::ExecutionFailed));
    assert_eq!(decoded.error_payload().unwrap().detail("reason"), Some(&json!("outcome-unknown")));
}

/// A task whose process died ends (#26): once its lease lapses, `tasks/get` and `tasks/cancel`
/// through another replica end it as completed with the unknown outcome; a task whose process is
/// alive is renewed and stays working however long it runs.
#[tokio::test]
async fn a_task_whose_process_died_ends_with_an_unknown_outcome_through_another_replica() {
    use agent_surface_policy::{Clock as _, TaskStore};
    let (shop, engine) = shop();
    let lease = Duration::from_secs(3);
    let (a, b, store) = replicas_sharing_tasks(&engine, lease);
    let (on_a, _) = connect_full(&shop.registry, a, false, false, true).await;
    let (on_b, _) = connect_full(&shop.registry, b, false, false, true).await;

    // Alive: replica A renews its task; through B it stays working across four leases.
    let alive = task_id(on_a.call_tool_once(params("shop-bake", json!({}))).await.unwrap());
    for _ in 0..12 {
        shop.clock.advance(Duration::from_secs(1));
        let renewed = shop.clock.now().saturating_add(lease);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Wait for A's renewal of this second before the clock moves on.
        while store.get(&alive, shop.clock.now()).await.unwrap().unwrap().lease_until < Some(renewed)
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let got = on_b.peer().get_task(rmcp::model::GetTaskParams::new(&alive)).await.unwrap();
        assert_eq!(got.task.status(), rmcp::model::TaskStatus::Working, "an alive replica's task is renewed");
    }
    release(&shop);
    let done = final_task(&on_b, &alive).await;
    assert!(matches!(done.payload, rmcp::model::TaskPayload::Completed { .. }), "{done:?}");

    // Dead: tasks left by a replica that stopped renewing (as a kill -9 leaves them).
    let left = |id: &str| {
        agent_surface_policy::task::TaskRecord::working(
            id,
            None,
            shop.clock.now(),
            Duration::from_secs(300),
            Duration::from_secs(3600),
        )
        .with_lease(lease)
    };
    store.create(left("t-dead-get"), shop.clock.now()).await.unwrap();
    store.create(left("t-dead-cancel"), shop.clock.now()).await.unwrap();
    // Within its lease it is working, as far as anyone can tell.
    let got = on_b.peer().get_task(rmcp::model::GetTaskParams::new("t-dead-get")).await.unwrap();
    assert_eq!(got.task.status(), rmcp::model::TaskStatus::Working);
    shop.clock.advance(lease);
    let got = on_b.peer().get_task(rmcp::model::GetTaskParams::new("t-dead-get")).await.unwrap();
    assert_outcome_unknown(got.task);
    // Ended once: read again (through either replica), the same end.
    let again = on_a.peer().get_task(rmcp::model::GetTaskParams::new("t-dead-get")).await.unwrap();
    assert_outcome_unknown(again.task);
    // A cancellation of a dead task is acknowledged, and the task ends as unknown, not cancelled:
    // its handler started and nobody can say what it did.
    on_b.peer().cancel_task(rmcp::model::CancelTaskParams::new("t-dead-cancel")).await.unwrap();
    let got = on_b.peer().get_task(rmcp::model::GetTaskParams::new("t-dead-cancel")).await.unwrap();
    assert_outcome_unknown(got.task);
    assert_eq!(shop.runs.load(Ordering::SeqCst), 1, "the alive task ran once; nothing ran again");
}

/// The proof of per-tool versions on the modern era: list, change the definition (remount with a
/// new schema), the old version is stale with the live one, the new one runs.
#[tokio::test]
async fn a_call_planned_on_a_changed_tool_definition_is_stale_and_names_the_live_version() {
    use agent_surface_mcp::meta;

    use crate::support::{notes, tool_version};

    let registry = Registry::new(RegistryConfig::default());
    registry.define("notes", notes("string")).unwrap();
    let mounted = registry.mount("notes", "main").unwrap();
    let (client, _) = connect(&registry, Arc::new(McpConfig::default()), false).await;
    let v1 = tool_version(&client.list_tools(None).await.unwrap().tools, "notes-erase");

    drop(mounted);
    registry.redefine("notes", notes("integer")).unwrap();
    let _mounted = registry.mount("notes", "main").unwrap();
    // `rmcp`'s client keeps the list for its time to live (no listen subscription here): the
    // cached list still shows the old version, which is the call a version protects. A fresh
    // connection lists the live one.
    let cached = tool_version(&client.list_tools(None).await.unwrap().tools, "notes-erase");
    assert_eq!(cached, v1);
    let (fresh, _) = connect(&registry, Arc::new(McpConfig::default()), false).await;
    let v2 = tool_version(&fresh.list_tools(None).await.unwrap().tools, "notes-erase");
    assert_ne!(v1, v2);

    let call = |v: &str| with_meta(params("notes-erase", json!({"id": 7})), json!({meta::TOOL_VERSION: v}));
    let stale = completes(client.call_tool_once(call(&v1)).await.unwrap());
    let p = stale.error_payload().expect("stale");
    assert_eq!(p.code(), ErrorCode::StaleCapability);
    assert_eq!(p.retry(), agent_surface_core::Retry::AfterRefresh);
    assert_eq!(p.details().unwrap()["reason"], "tool-version-mismatch");
    assert_eq!(p.details().unwrap()["liveToolVersion"], json!(v2));
    let ok = completes(client.call_tool_once(call(&v2)).await.unwrap());
    assert!(ok.is_ok(), "{ok:?}");
}

/// One request to the HTTP binding's router; the status and the JSON body.
#[cfg(feature = "http")]
async fn over_http(
    app: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut request = http::Request::builder().method(method).uri(path).header("host", "localhost");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = match body {
        Some(body) => request.header("content-type", "application/json").body(axum::body::Body::from(body.to_string())),
        None => request.body(axum::body::Body::empty()),
    };
    let response = app.clone().oneshot(request.unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[cfg(feature = "http")]
#[tokio::test]
async fn a_task_started_over_one_transport_is_read_over_the_other_by_its_owner_only() {
    let (shop, engine) = shop();
    let tasks = agent_surface_mcp::tasks::Tasks::new(agent_surface_mcp::tasks::TaskConfig::default());
    let as_principal = |name: &str| {
        Arc::new(McpConfig { identity: Some(Identity::new(name)), tasks: Some(tasks.clone()), ..config(&engine) })
    };
    let alice = as_principal("alice");
    let (mcp, _) = connect_full(&shop.registry, alice, false, false, true).await;
    let tokens =
        agent_surface_http::BearerTokens::new([("t-alice", Identity::new("alice")), ("t-bob", Identity::new("bob"))]);
    let api = agent_surface_http::router(
        shop.registry.clone(),
        agent_surface_http::HttpConfig {
            authenticator: Some(Arc::new(tokens)),
            tasks: Some(tasks.clone()),
            ..Default::default()
        },
    );
    let as_alice = [("authorization", "Bearer t-alice")];

    // Started over MCP, read over HTTP: working, then completed with the result.
    let id = task_id(mcp.call_tool_once(params("shop-crunch", json!({}))).await.unwrap());
    let (status, view) = over_http(&api, "GET", &format!("/tasks/{id}"), &as_alice, None).await;
    assert_eq!((status, &view["status"]), (200, &json!("working")), "{view}");
    // Another principal gets the not-found answer, never the task.
    let (status, refused) =
        over_http(&api, "GET", &format!("/tasks/{id}"), &[("authorization", "Bearer t-bob")], None).await;
    assert_eq!((status, &refused["type"]), (404, &json!("urn:agent-surface:protocol:task-not-found")));
    assert!(refused.get("taskId").is_none());
    release(&shop);
    let mut done = Value::Null;
    for _ in 0..200 {
        done = over_http(&api, "GET", &format!("/tasks/{id}"), &as_alice, None).await.1;
        if done["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["body"], json!({"status": "ok", "output": {"crunched": true}}));

    // Started over HTTP (202), read over MCP.
    let headers = [("authorization", "Bearer t-alice"), ("prefer", "respond-async")];
    let (status, view) =
        over_http(&api, "POST", "/invoke", &headers, Some(json!({"capability": "shop.crunch", "input": {}}))).await;
    assert_eq!(status, 202, "{view}");
    let id = view["taskId"].as_str().unwrap().to_string();
    let working = mcp.peer().get_task(rmcp::model::GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(working.task.status(), rmcp::model::TaskStatus::Working);
    release(&shop);
    let done = final_task(&mcp, &id).await;
    let rmcp::model::TaskPayload::Completed { result } = done.payload else { panic!("{done:?}") };
    let result: rmcp::model::CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(codec::decode(&result).unwrap().output(), Some(&json!({"crunched": true})));
    // Bob cannot read it over MCP either.
    let (b, _) = connect_full(&shop.registry, as_principal("bob"), false, false, true).await;
    match b.peer().get_task(rmcp::model::GetTaskParams::new(&id)).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602),
        other => panic!("expected -32602, got {other:?}"),
    }
}

/// With `tool_failure`, a task that ended in a capability error carries the structured tool
/// failure in its result's `_meta`, as the same failure answered in the call does.
#[tokio::test]
async fn a_failed_task_carries_the_tool_failure_the_direct_answer_carries() {
    const KEY: &str = "agent-surface/toolFailure";
    let (shop, engine) = shop();
    let config = Arc::new(McpConfig { tool_failure: true, ..(*tasks_config(&engine)).clone() });
    let (client, _) = connect_full(&shop.registry, config.clone(), false, false, true).await;
    let id = task_id(client.call_tool_once(params("shop-doomed", json!({}))).await.unwrap());
    let done = final_task(&client, &id).await;
    let rmcp::model::TaskPayload::Completed { result: from_task } = done.payload else { panic!("{done:?}") };

    // The same call from a client without the tasks extension is answered directly.
    let (direct, _) = connect_full(&shop.registry, config, false, false, false).await;
    let CallToolResponse::Complete(answered) = direct.call_tool_once(params("shop-doomed", json!({}))).await.unwrap()
    else {
        panic!("answered in the call")
    };
    let answered = serde_json::to_value(answered).unwrap();

    let meta = &from_task["_meta"];
    let failure = meta.get(KEY).unwrap_or_else(|| panic!("no tool failure in {meta}"));
    assert_eq!(failure["correlationId"], meta["agent-surface/correlationId"]);
    // Equal but for the call's own correlation id.
    let without_correlation = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("correlationId");
        v
    };
    assert_eq!(without_correlation(failure), without_correlation(&answered["_meta"][KEY]));
    assert_eq!(failure["code"], answered["_meta"][KEY]["code"]);
}
