//! `RecoveringClient` against a real registry served by `agent-surface-mcp` over an in-memory
//! pipe, with an `rmcp` client on the other end; time is a test clock the client's waits
//! advance.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_client::{
    Approval, BoxFuture, ClientHost, ConfirmationPrompt, INVOCATION_ID, Intent, RecoveringClient, RecoveryConfig, Stop,
    Verification, Wait,
};
use agent_surface_core::details::Origin;
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Retry, SafeText};
use agent_surface_mcp::{McpConfig, McpServer};
use agent_surface_policy::{
    AuthorityDecision, CallInfo, ConfirmationConfig, ConfirmationEngine, FnPolicy, Identity, MemoryRateLimiter,
    Policies, Quota, RateLimitConfig,
};
use agent_surface_registry::{Binding, Ctx, Mount, Registry, RegistryConfig};
use agent_surface_testing::TestClock;
use rmcp::ServiceExt;
use rmcp::model::JsonObject;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};

struct World {
    registry: Registry,
    clock: TestClock,
    engine: Arc<ConfirmationEngine>,
    runs: Arc<AtomicUsize>,
    _mounts: Vec<Mount>,
    _service: rmcp::service::RunningService<rmcp::RoleClient, ()>,
    peer: rmcp::Peer<rmcp::RoleClient>,
    /// Run in turn as the server answers a `tools/list`, before the client reads the answer (the
    /// surface moves while the listing travels).
    on_listing: Hooks,
    /// Whether `notes.sign`'s bound owner is known yet.
    bound: Arc<AtomicBool>,
    /// Runs of `notes.scan` (a read, not declared idempotent, that hangs on its first run).
    scans: Arc<AtomicUsize>,
    /// How many more times `notes.stamp`'s ask step panics (before its handler).
    ask_panics: Arc<AtomicUsize>,
}

type Hooks = Arc<Mutex<Vec<Box<dyn FnOnce() + Send>>>>;

/// Copies the server's lines to the client, running the next hook before a `tools/list` answer.
async fn relay(from_server: tokio::io::DuplexStream, mut to_client: impl AsyncWrite + Unpin, hooks: Hooks) {
    let mut lines = BufReader::new(from_server).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let listing = serde_json::from_str::<Value>(&line).is_ok_and(|m| m["result"]["tools"].is_array());
        if listing {
            let hook = { hooks.lock().unwrap().pop() };
            if let Some(hook) = hook {
                hook();
            }
        }
        if to_client.write_all(format!("{line}\n").as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Waits by advancing the test clock the registry's rate limiter reads.
struct AdvanceClock(TestClock, Mutex<Vec<Duration>>);

impl Wait for AdvanceClock {
    fn wait(&self, delay: Duration) -> BoxFuture<'_, ()> {
        self.1.lock().unwrap().push(delay);
        self.0.advance(delay);
        Box::pin(std::future::ready(()))
    }
}

/// A person behind the client who approves (through the engine, as a manager) or denies.
struct Person {
    engine: Arc<ConfirmationEngine>,
    approve: bool,
    /// The summary and approval page of each prompt.
    asked: Mutex<Vec<(String, Option<String>)>>,
}

impl ClientHost for Person {
    fn confirm<'a>(&'a self, prompt: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            self.asked.lock().unwrap().push((prompt.summary.clone(), prompt.approval_url.clone()));
            if !self.approve {
                return Approval::Denied;
            }
            match self.engine.approve(&prompt.confirmation_id, &Identity::new("manager")).await {
                Ok(()) => Approval::Approved,
                Err(_) => Approval::Unavailable,
            }
        })
    }
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}})
}

async fn world() -> World {
    let clock = TestClock::new();
    let policy = FnPolicy::new("client-tests", |call: &CallInfo<'_>| {
        Ok(match call.capability {
            "shop.sale" => AuthorityDecision::Disable { reason: SafeText::from("The sale opens on Monday.") },
            "admin.audit" => AuthorityDecision::Deny { origin: Origin::Client },
            _ => AuthorityDecision::Allow,
        })
    });
    let quota = |seconds| Some(Quota::new(NonZeroU32::MIN, Duration::from_secs(seconds)));
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        clock: clock.shared(),
        capability_quotas: [("quote.ping".to_string(), quota(1)), ("quote.bulk".to_string(), quota(3600))].into(),
        ..Default::default()
    });
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.shared(),
        ttl: Duration::from_secs(300),
        approval_base_url: Some("https://notes.example/inbox/c".into()),
        ..Default::default()
    }));
    let registry = Registry::new(RegistryConfig {
        clock: clock.shared(),
        authority: Some(Arc::new(Policies::default_allow().global(policy))),
        rate_limiter: Some(Arc::new(limiter)),
        confirmation: Some(engine.clone()),
        ..Default::default()
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let bound = Arc::new(AtomicBool::new(false));
    let scans = Arc::new(AtomicUsize::new(0));
    let ask_panics = Arc::new(AtomicUsize::new(0));
    let ok = {
        let runs = runs.clone();
        move |_ctx: Ctx, _input: Value| {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::ready(Ok::<_, AgentSurfaceError>(json!({"done": true}))))
                as BoxFuture<'static, Result<Value, AgentSurfaceError>>
        }
    };
    registry
        .define("quote", |t| {
            t.capability("ping", "Quote once a second.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                None,
                ok.clone(),
            );
            t.capability("bulk", "Quote once an hour.").effect(Effect::Read).idempotent().raw_handler(
                schema(),
                None,
                ok.clone(),
            );
        })
        .unwrap();
    registry
        .define("notes", |t| {
            t.capability("write", "Write a note.").effect(Effect::Write).raw_handler(schema(), None, ok.clone());
            t.capability("erase", "Erase every note.").effect(Effect::Destructive).raw_handler(
                schema(),
                None,
                ok.clone(),
            );
            t.capability("delete", "Delete a note.")
                .effect(Effect::Destructive)
                .confirm(|_: &Value| "Delete a note.")
                .raw_handler(schema(), None, ok.clone());
            let bound = bound.clone();
            let owned =
                json!({"type": "object", "properties": {"owner": {"type": "string"}, "text": {"type": "string"}}});
            t.capability("sign", "Sign a note as the owner.")
                .effect(Effect::Write)
                .bind("owner", Binding::from_consumer(move |_| bound.load(Ordering::SeqCst).then(|| json!("alice"))))
                .raw_handler(owned, None, ok.clone());
            let panics = ask_panics.clone();
            t.capability("stamp", "Stamp a note (its ask step may fail).")
                .effect(Effect::Write)
                .ask(move |_: &Ctx, _: &Value, _: &agent_surface_registry::Answers| {
                    let left = panics.load(Ordering::SeqCst);
                    if left > 0 {
                        panics.store(left - 1, Ordering::SeqCst);
                        panic!("the ask step's lookup failed");
                    }
                    Ok(Vec::new())
                })
                .raw_handler(schema(), None, ok.clone());
            t.capability("fail", "Fail in the handler.").effect(Effect::Write).raw_handler(
                schema(),
                None,
                |_ctx: Ctx, _input: Value| {
                    Box::pin(std::future::ready(Err(AgentSurfaceError::internal("the warehouse said no"))))
                        as BoxFuture<'static, Result<Value, AgentSurfaceError>>
                },
            );
            let scans = scans.clone();
            t.capability("scan", "Scan the notes (a read, not declared idempotent).")
                .effect(Effect::Read)
                .time_budget(Duration::from_secs(2))
                .raw_handler(schema(), None, move |_ctx: Ctx, _input: Value| {
                    let first = scans.fetch_add(1, Ordering::SeqCst) == 0;
                    Box::pin(async move {
                        if first {
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, AgentSurfaceError>(json!({"count": 3}))
                    }) as BoxFuture<'static, Result<Value, AgentSurfaceError>>
                });
        })
        .unwrap();
    registry
        .define("shop", |t| {
            t.capability("sale", "Open the sale.").effect(Effect::Write).raw_handler(schema(), None, ok.clone());
        })
        .unwrap();
    // Mounted by the tests that need them.
    for type_id in ["kiosk", "board"] {
        registry
            .define(type_id, |t| {
                t.capability("show", "Show it.").effect(Effect::Read).idempotent().raw_handler(
                    schema(),
                    None,
                    ok.clone(),
                );
            })
            .unwrap();
    }
    registry
        .define("admin", |t| {
            t.capability("audit", "Audit.").effect(Effect::Read).raw_handler(schema(), None, ok.clone());
        })
        .unwrap();
    let mounts = ["quote", "notes", "shop", "admin"].map(|ty| registry.mount(ty, "main").unwrap()).into();
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (read, to_client) = tokio::io::split(server_io);
    let (write, from_server) = tokio::io::duplex(1 << 20);
    let on_listing = Hooks::default();
    tokio::spawn(relay(from_server, to_client, on_listing.clone()));
    let config = McpConfig::default();
    let max = config.max_message_bytes;
    tokio::spawn(agent_surface_mcp::serve_io(McpServer::new(registry.clone(), config), read, write, max));
    let service = ().serve(client_io).await.unwrap();
    let peer = service.peer().clone();
    World {
        registry,
        clock,
        engine,
        runs,
        _mounts: mounts,
        _service: service,
        peer,
        on_listing,
        bound,
        scans,
        ask_panics,
    }
}

fn args(text: &str) -> JsonObject {
    json!({"text": text}).as_object().cloned().unwrap()
}

fn client(w: &World, host: Arc<dyn ClientHost>) -> (RecoveringClient, Arc<AdvanceClock>) {
    let wait = Arc::new(AdvanceClock(w.clock.clone(), Mutex::default()));
    (RecoveringClient::with(w.peer.clone(), RecoveryConfig::default(), host, wait.clone()), wait)
}

fn nobody() -> Arc<dyn ClientHost> {
    Arc::new(agent_surface_client::NoHost)
}

#[track_caller]
fn check(recovery: &agent_surface_client::Recovery, stop: Stop, codes: &[Option<ErrorCode>]) {
    assert_eq!(recovery.stop, stop, "{recovery:?}");
    let got: Vec<_> = recovery.calls.iter().map(|(_, c)| *c).collect();
    assert_eq!(got, codes, "{recovery:?}");
    assert_eq!(recovery.attempts as usize, codes.len());
}

#[tokio::test]
async fn after_delay_waits_the_payloads_delay_then_retries_under_the_same_id() {
    let w = world().await;
    let (c, wait) = client(&w, nobody());
    let first = c.call(Intent::new("quote-ping", args("a")).with_invocation_id("q-1")).await.unwrap();
    check(&first, Stop::Succeeded, &[None]);
    let r = c.call(Intent::new("quote-ping", args("b")).with_invocation_id("q-2")).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::RateLimited), None]);
    // The wait is the payload's retryAfterMs (at most the quota's second), on the test clock.
    let waited = wait.1.lock().unwrap().clone();
    assert_eq!(waited.len(), 1);
    assert!(waited[0] > Duration::ZERO && waited[0] <= Duration::from_secs(1), "{waited:?}");
    // RATE_LIMITED is not stored: the retry keeps the intent's id.
    assert_eq!(r.calls[1].0, "q-2");
}

/// Issue 27: a failure the runtime states was not processed (an ask step that panicked, before
/// the handler) is repeated once under a fresh id, even for a write; a processed one never is.
#[tokio::test]
async fn a_not_processed_failure_is_repeated_once_and_a_processed_one_never() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    w.ask_panics.store(1, Ordering::SeqCst);
    let r = c.call(Intent::new("notes-stamp", args("a")).with_invocation_id("s-1")).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::ExecutionFailed), None]);
    assert_eq!(r.calls[1].0, "s-1#r2", "a fresh id: the failure was stored under the first");
    assert_eq!(w.runs.load(Ordering::SeqCst), 1, "the write ran once");

    w.ask_panics.store(usize::MAX, Ordering::SeqCst);
    let r = c.call(Intent::new("notes-stamp", args("b")).with_invocation_id("s-2")).await.unwrap();
    check(&r, Stop::NotConverging, &[Some(ErrorCode::ExecutionFailed), Some(ErrorCode::ExecutionFailed)]);
    assert!(r.payload.as_ref().is_some_and(agent_surface_core::ErrorPayload::not_processed), "{r:?}");

    let r = c.call(Intent::new("notes-fail", args("c")).with_invocation_id("f-1")).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::ExecutionFailed)]);
    assert!(r.payload.as_ref().is_some_and(|p| !p.not_processed()), "the handler ran: {r:?}");
}

/// Waits on the test clock, and during the first wait another caller takes the quota's token
/// that the wait was for.
struct Drained(TestClock, rmcp::Peer<rmcp::RoleClient>, Mutex<Vec<Duration>>);

impl Wait for Drained {
    fn wait(&self, delay: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let first = {
                let mut waits = self.2.lock().unwrap();
                waits.push(delay);
                waits.len() == 1
            };
            self.0.advance(delay);
            if first {
                let params = rmcp::model::CallToolRequestParams::new("quote-ping").with_arguments(args("other"));
                let taken = self.1.call_tool(params).await.unwrap();
                assert_ne!(taken.is_error, Some(true), "the other caller got the token: {taken:?}");
            }
        })
    }
}

/// A quota another caller drained during the wait is met again: it is waited for again, not
/// taken for a limit that does not lift (the bounds on the delays and the attempts end waits).
#[tokio::test]
async fn a_limit_met_again_after_its_wait_is_waited_for_again() {
    let w = world().await;
    let wait = Arc::new(Drained(w.clock.clone(), w.peer.clone(), Mutex::default()));
    let c = RecoveringClient::with(w.peer.clone(), RecoveryConfig::default(), nobody(), wait.clone());
    c.call(Intent::new("quote-ping", args("a"))).await.unwrap();
    let r = c.call(Intent::new("quote-ping", args("b"))).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::RateLimited), Some(ErrorCode::RateLimited), None]);
    assert_eq!(wait.2.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_delay_beyond_the_bounds_is_not_waited() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    c.call(Intent::new("quote-bulk", args("a"))).await.unwrap();
    // An hour is beyond the bounds (30 s): not waited at all.
    let r = c.call(Intent::new("quote-bulk", args("b"))).await.unwrap();
    check(&r, Stop::DelayTooLong, &[Some(ErrorCode::RateLimited)]);
}

#[tokio::test]
async fn a_destructive_call_planned_on_an_old_surface_is_refreshed_and_sent_with_the_new_tokens() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let before = c.list_tools().await.unwrap();
    assert!(before.surface_version.is_some() && before.surface_id.is_some());
    // The tool changes after the agent listed it (taken down for maintenance and back).
    assert!(w.registry.disable("notes.erase", "Maintenance."));
    assert!(w.registry.enable("notes.erase"));
    let r = c.call(Intent::new("notes-erase", args("all")).with_invocation_id("e-1")).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::StaleCapability), None]);
    assert!(r.refreshed);
    // A fresh id for the retry; the runs count one execution.
    assert_eq!(r.calls[1].0, "e-1#r2");
    assert_eq!(w.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn after_refresh_with_nothing_changed_returns_at_once() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    c.list_tools().await.unwrap();
    let r = c.call(Intent::new("shop-sale", args("now"))).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::CapabilityNotAvailable)]);
    assert!(r.refreshed);
    // A tool that is not there at all: re-listed, still not there.
    let r = c.call(Intent::new("vault-open", args("now"))).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::CapabilityNotFound)]);
}

#[tokio::test]
async fn no_is_terminal_and_with_changes_goes_back_to_the_caller() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let r = c.call(Intent::new("admin-audit", args("x"))).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::NotAuthorized)]);
    assert_eq!(r.payload.as_ref().map(|p| p.retry().as_str()), Some("no"));
    let bad = json!({"text": 5}).as_object().cloned().unwrap();
    let r = c.call(Intent::new("notes-write", bad)).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::InvalidInput)]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_confirmation_goes_to_the_person_and_an_approval_is_presented() {
    let w = world().await;
    let person = Arc::new(Person { engine: w.engine.clone(), approve: true, asked: Mutex::default() });
    let (c, _) = client(&w, person.clone());
    let r = c.call(Intent::new("notes-delete", args("n-1"))).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::ConfirmationRequired), None]);
    let asked = person.asked.lock().unwrap().clone();
    let [(summary, Some(page))] = asked.as_slice() else { panic!("one prompt with its approval page: {asked:?}") };
    assert_eq!(summary, "Delete a note.");
    assert!(page.starts_with("https://notes.example/inbox/c/"), "the page the person approves at: {page}");
    assert_eq!(w.runs.load(Ordering::SeqCst), 1);
}

/// A host that answers `Approved` when nothing was recorded on the server (a "yes" in the
/// client's own interface): the call is sent once more with the confirmation id, the server
/// answers `CONFIRMATION_REQUIRED` again (still pending), and the convergence guard ends the
/// intent. Nothing ran; once an approver approves it on the server, the same call repeated runs.
#[tokio::test]
async fn an_approval_the_server_never_saw_does_not_converge() {
    struct SaysYes;
    impl ClientHost for SaysYes {
        fn confirm<'a>(&'a self, _: &'a ConfirmationPrompt) -> BoxFuture<'a, Approval> {
            Box::pin(std::future::ready(Approval::Approved))
        }
    }
    let w = world().await;
    let (c, _) = client(&w, Arc::new(SaysYes));
    let r = c.call(Intent::new("notes-delete", args("n-1")).with_invocation_id("d-1")).await.unwrap();
    check(&r, Stop::NotConverging, &[Some(ErrorCode::ConfirmationRequired), Some(ErrorCode::ConfirmationRequired)]);
    assert_eq!(r.calls[1].0, "d-1", "the same id, now with the confirmation id");
    assert_eq!(w.runs.load(Ordering::SeqCst), 0);
    let id = r.payload.as_ref().and_then(|p| p.detail("confirmationId")).and_then(Value::as_str).unwrap();
    w.engine.approve(id, &Identity::new("manager")).await.unwrap();
    let (c, _) = client(&w, nobody());
    let r = c.call(Intent::new("notes-delete", args("n-1"))).await.unwrap();
    check(&r, Stop::Succeeded, &[None]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_denied_confirmation_is_never_retried_and_without_a_person_it_goes_back() {
    let w = world().await;
    let person = Arc::new(Person { engine: w.engine.clone(), approve: false, asked: Mutex::default() });
    let (c, _) = client(&w, person);
    let r = c.call(Intent::new("notes-delete", args("n-1"))).await.unwrap();
    check(&r, Stop::Denied, &[Some(ErrorCode::ConfirmationRequired)]);
    // What goes back to the model is the denial, not the request for approval it answered.
    let p = r.payload.as_ref().expect("a payload");
    assert_eq!((p.code(), p.retry()), (ErrorCode::ConfirmationInvalid, Retry::No));
    assert_eq!(p.detail("reason"), Some(&json!("denied")));
    assert_eq!(agent_surface_client::payload_of(&r.result).as_ref(), Some(p), "the result carries it");
    let (c, _) = client(&w, nobody());
    let r = c.call(Intent::new("notes-delete", args("n-2"))).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::ConfirmationRequired)]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_conflicting_id_is_replaced_by_one_derived_from_the_request() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let first = c.call(Intent::new("notes-write", args("one")).with_invocation_id("w-1")).await.unwrap();
    check(&first, Stop::Succeeded, &[None]);
    let r = c.call(Intent::new("notes-write", args("two")).with_invocation_id("w-1")).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::InvocationConflict), None]);
    assert!(r.calls[1].0.starts_with("w-1#c"), "{:?}", r.calls);
    // A repeat of the same intent derives the same id and replays instead of running again.
    let again = c.call(Intent::new("notes-write", args("two")).with_invocation_id("w-1")).await.unwrap();
    assert_eq!(again.calls[1].0, r.calls[1].0);
    assert_eq!(w.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn every_request_carries_the_invocation_id_in_meta() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let r = c.call(Intent::new("notes-write", args("x"))).await.unwrap();
    // The server echoes the id it received in the result's _meta.
    let meta = r.result.meta.as_ref().map(|m| m.0.clone()).unwrap_or_default();
    assert_eq!(meta.get(INVOCATION_ID), Some(&json!(r.calls[0].0)), "{meta:?}");
    assert!(r.calls[0].0.starts_with("rmcp-"));
}

#[tokio::test]
async fn a_tool_still_disabled_after_the_relisting_goes_back_at_once() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    c.list_tools().await.unwrap();
    // Disabled after the agent listed it: the listing changed, but the tool is still disabled.
    assert!(w.registry.disable("notes.write", "Maintenance."));
    let r = c.call(Intent::new("notes-write", args("x"))).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::CapabilityNotAvailable)]);
    assert!(r.refreshed);
}

#[tokio::test]
async fn a_replaced_registration_is_retargeted_to_the_live_one() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let mount = w.registry.mount("kiosk", "main").unwrap();
    let old = mount.registration_id().unwrap().to_string();
    c.list_tools().await.unwrap();
    drop(mount);
    let _again = w.registry.mount("kiosk", "main").unwrap();
    let intent = Intent::new("kiosk-show", args("x")).with_target(json!({"registrationId": old}));
    let r = c.call(intent).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::StaleCapability), None]);
}

#[tokio::test]
async fn an_instance_no_longer_listed_is_not_called_again() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let mounts: Vec<Mount> = ["main", "side", "spare"].iter().map(|i| w.registry.mount("board", i).unwrap()).collect();
    c.list_tools().await.unwrap();
    let mut mounts = mounts.into_iter();
    let (_main, side, _spare) = (mounts.next(), mounts.next(), mounts.next());
    drop(side);
    // Named through `_meta`, and through the tool's target argument.
    let by_meta = Intent::new("board-show", args("x")).with_target(json!({"instanceId": "side"}));
    let r = c.call(by_meta).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::ComponentUnmounted)]);
    let by_argument = json!({"text": "x", "_instance": "side"}).as_object().cloned().unwrap();
    let r = c.call(Intent::new("board-show", by_argument)).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::ComponentUnmounted)]);
    // The instances still listed are called as usual.
    let r = c.call(Intent::new("board-show", args("x")).with_target(json!({"instanceId": "spare"}))).await.unwrap();
    check(&r, Stop::Succeeded, &[None]);
}

/// Issue 28: a second `STALE_CAPABILITY` sent under the newer tokens of the re-listing is
/// progress (the surface moved again meanwhile), not the same failure: the third call runs.
#[tokio::test]
async fn a_surface_that_moves_again_after_the_relisting_is_followed() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    c.list_tools().await.unwrap();
    let bump = |registry: &Registry| {
        assert!(registry.disable("notes.erase", "Maintenance."));
        assert!(registry.enable("notes.erase"));
    };
    bump(&w.registry);
    // It moves again while the client's re-listing travels.
    let registry = w.registry.clone();
    w.on_listing.lock().unwrap().push(Box::new(move || bump(&registry)));
    let r = c.call(Intent::new("notes-erase", args("all")).with_invocation_id("e-1")).await.unwrap();
    let stale = Some(ErrorCode::StaleCapability);
    check(&r, Stop::Succeeded, &[stale, stale, None]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 1);
}

/// Issue 28: `binding-failed` is retried once after the re-listing, as its row says, although
/// the listing did not change; the same failure again ends the loop.
#[tokio::test]
async fn a_failed_binding_is_retried_once_whether_or_not_the_listing_changed() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    c.list_tools().await.unwrap();
    let r = c.call(Intent::new("notes-sign", args("x"))).await.unwrap();
    let failed = Some(ErrorCode::PreconditionFailed);
    check(&r, Stop::NotConverging, &[failed, failed]);
    assert_eq!(r.payload.as_ref().and_then(|p| p.detail("reason")), Some(&json!("binding-failed")));
    // The owner becomes known while the client re-lists: the retry runs.
    let bound = w.bound.clone();
    w.on_listing.lock().unwrap().push(Box::new(move || bound.store(true, Ordering::SeqCst)));
    let r = c.call(Intent::new("notes-sign", args("y"))).await.unwrap();
    check(&r, Stop::Succeeded, &[failed, None]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 1);
}

/// A host that counts the verifications it is asked for and can never tell.
#[derive(Default)]
struct Counting(AtomicUsize);

impl ClientHost for Counting {
    fn verify<'a>(
        &'a self,
        _: &'a str,
        _: &'a JsonObject,
        _: &'a agent_surface_core::ErrorPayload,
    ) -> BoxFuture<'a, Verification> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(Verification::Unknown))
    }
}

/// Issue 28, the one rule for interrupted calls: a read that is not declared idempotent and runs
/// out of time has no effect to double, so `TIMEOUT` is repeated at once under a fresh id, as its
/// row says, and the host is never asked to verify.
#[tokio::test]
async fn an_interrupted_read_is_repeated_without_asking_the_host() {
    let w = world().await;
    let host = Arc::new(Counting::default());
    let wait = Arc::new(AdvanceClock(w.clock.clone(), Mutex::default()));
    let c = RecoveringClient::with(w.peer.clone(), RecoveryConfig::default(), host.clone(), wait);
    c.list_tools().await.unwrap();
    let (r, ()) = tokio::join!(
        c.call(Intent::new("notes-scan", JsonObject::new()).with_invocation_id("s-1")),
        w.clock.advance_when_waiting(1, Duration::from_secs(3)),
    );
    let r = r.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::Timeout), None]);
    let timeout = r.calls.first().map(|(id, _)| id.as_str());
    assert_eq!((timeout, r.calls[1].0.as_str()), (Some("s-1"), "s-1#r2"), "a fresh id");
    assert_eq!(host.0.load(Ordering::SeqCst), 0, "the host is not asked");
    assert_eq!(w.scans.load(Ordering::SeqCst), 2);
}

/// `memo.show`, a read whose input's `id` is of JSON type `kind` (a change of it changes the
/// tool's version).
fn memo(kind: &'static str) -> impl FnOnce(&mut agent_surface_registry::TypeBuilder<'_>) {
    move |t| {
        t.capability("show", "Show a memo.").effect(Effect::Read).idempotent().raw_handler(
            json!({"type": "object", "properties": {"id": {"type": kind}}}),
            None,
            |_: Ctx, v: Value| async move { Ok::<_, AgentSurfaceError>(v) },
        );
    }
}

/// Issue 27: the client echoes the version of the tool it listed; after the definition changed
/// (a new schema), the call is refused with the live version and handed back rather than sent
/// again: the caller lists the tools and the model reads the new definition first
/// (`refresh-then-ask`).
#[tokio::test]
async fn a_call_planned_on_a_changed_tool_definition_is_handed_back_until_the_caller_lists() {
    let w = world().await;
    w.registry.define("memo", memo("string")).unwrap();
    let _mounted = w.registry.mount("memo", "main").unwrap();
    let (c, _) = client(&w, nobody());
    let listed = |l: &agent_surface_client::Listing| {
        let meta = l.tool("memo-show").and_then(|t| t.meta.clone()).expect("listed with _meta");
        meta.get(agent_surface_client::TOOL_VERSION).cloned().expect("a version")
    };
    let v1 = listed(&c.list_tools().await.unwrap());
    w.registry.redefine("memo", memo("integer")).unwrap();
    let id = json!({"id": 7}).as_object().cloned().unwrap();
    // A read: the surface token alone would let it through; the tool version does not.
    let r = c.call(Intent::new("memo-show", id.clone()).with_invocation_id("m-1")).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::StaleCapability)]);
    assert!(r.refreshed, "the caller shows the model the new definition");
    // A blind repeat, before the caller showed the model the new definition, is refused again:
    // the client does not adopt a re-listing the model has not seen.
    let r = c.call(Intent::new("memo-show", id.clone()).with_invocation_id("m-2")).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::StaleCapability)]);
    // Listed again (what the model is shown now), the next call is planned on it and runs.
    assert_ne!(listed(&c.list_tools().await.unwrap()), v1);
    let r = c.call(Intent::new("memo-show", id).with_invocation_id("m-3")).await.unwrap();
    check(&r, Stop::Succeeded, &[None]);
}

/// The Python helper spells the tool version's `_meta` key as the one table does (it cannot read
/// the Rust constant): renaming the field stays a change of the table, caught here if Python lags.
#[test]
fn the_python_helper_uses_the_tables_tool_version_key() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/python/agent_surface/loop.py");
    let source = std::fs::read_to_string(&path).expect("the Python helper is in the repository");
    let line = format!("TOOL_VERSION = \"{}\"", agent_surface_core::tool_version::wire::MCP_META);
    assert!(source.lines().any(|l| l == line), "{} must define `{line}`", path.display());
    assert_eq!(agent_surface_client::TOOL_VERSION, agent_surface_core::tool_version::wire::MCP_META);
}

/// Two clients of the same person (one consumer key on the server) each send the same call with
/// no id of their own: each is its own intent and runs, never replayed from the other's record.
#[tokio::test]
async fn two_clients_default_ids_never_collide() {
    let w = world().await;
    let (first, _) = client(&w, nobody());
    let (second, _) = client(&w, nobody());
    let a = first.call(Intent::new("notes-write", args("same"))).await.unwrap();
    let b = second.call(Intent::new("notes-write", args("same"))).await.unwrap();
    check(&a, Stop::Succeeded, &[None]);
    check(&b, Stop::Succeeded, &[None]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 2, "each client's call ran its handler");
    assert_ne!(a.calls[0].0, b.calls[0].0);
    // An explicitly configured prefix still leads the id.
    let config = RecoveryConfig { id_prefix: "agent-7".into(), ..RecoveryConfig::default() };
    let third = RecoveringClient::new(w.peer.clone(), config);
    let c = third.call(Intent::new("notes-write", args("other"))).await.unwrap();
    assert!(c.calls[0].0.starts_with("agent-7-"), "{:?}", c.calls);
}

/// A refresh row (here a replaced registration) whose re-listing shows a new version of the tool:
/// the arguments were built for the definition the call named, so they are not sent again; the
/// caller gets the error, marked refreshed, and the next call is planned on the new listing.
#[tokio::test]
async fn a_relisting_that_changes_the_tool_version_does_not_resend_the_arguments() {
    let w = world().await;
    let memo = |description: &'static str| {
        let runs = w.runs.clone();
        move |t: &mut agent_surface_registry::TypeBuilder<'_>| {
            let runs = runs.clone();
            t.capability("pay", description).effect(Effect::Write).raw_handler(
                json!({"type": "object", "properties": {"amount": {"type": "integer"}}}),
                None,
                move |_: Ctx, v: Value| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, AgentSurfaceError>(v) }
                },
            );
        }
    };
    w.registry.define("memo", memo("Pay an amount in euros.")).unwrap();
    let mounted = w.registry.mount("memo", "main").unwrap();
    let old = mounted.registration_id().unwrap().to_string();
    let (c, _) = client(&w, nobody());
    c.list_tools().await.unwrap();
    drop(mounted);
    w.registry.redefine("memo", memo("Pay an amount in cents.")).unwrap();
    let _again = w.registry.mount("memo", "main").unwrap();
    let amount = json!({"amount": 7}).as_object().cloned().unwrap();
    let intent = Intent::new("memo-pay", amount.clone()).with_target(json!({"registrationId": old}));
    let r = c.call(intent).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::StaleCapability)]);
    assert!(r.refreshed);
    assert_eq!(w.runs.load(Ordering::SeqCst), 0, "7 euros were not paid as 7 cents");
    // Repeated blindly, it is refused again; once the caller lists the tools (and the model
    // reads the new definition), the next call names the new version and runs.
    let r = c.call(Intent::new("memo-pay", amount.clone())).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::StaleCapability)]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 0);
    c.list_tools().await.unwrap();
    let r = c.call(Intent::new("memo-pay", amount)).await.unwrap();
    check(&r, Stop::Succeeded, &[None]);
    assert_eq!(w.runs.load(Ordering::SeqCst), 1);
}

/// Two calls the model planned together on one listing: the first's recovery re-lists (the
/// surface moved), and the second's tool changed too. The second is refused, not sent with the
/// re-listing's tokens and arguments built for the definition the model was shown.
#[tokio::test]
async fn a_relisting_during_one_call_does_not_move_the_tokens_of_another() {
    let w = world().await;
    w.registry.define("memo", memo("string")).unwrap();
    let _memo = w.registry.mount("memo", "main").unwrap();
    let (c, _) = client(&w, nobody());
    c.list_tools().await.unwrap();
    // notes.erase is taken down and back (its surface moved), and memo's definition changes.
    assert!(w.registry.disable("notes.erase", "Maintenance."));
    assert!(w.registry.enable("notes.erase"));
    w.registry.redefine("memo", memo("integer")).unwrap();
    // The first call, a destructive one on a tool that did not change, is refused for the
    // surface it was planned on, re-listed and retried: it runs.
    let r = c.call(Intent::new("notes-erase", args("a"))).await.unwrap();
    check(&r, Stop::Succeeded, &[Some(ErrorCode::StaleCapability), None]);
    // The second, planned on the first listing, is refused: its tool changed.
    let id = json!({"id": "7"}).as_object().cloned().unwrap();
    let r = c.call(Intent::new("memo-show", id)).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::StaleCapability)]);
    assert_eq!(r.payload.as_ref().and_then(|p| p.detail("reason")), Some(&json!("tool-version-mismatch")));
}

/// A server whose `tools/list` never ends: each page names the next cursor `next(cursor)`.
struct Pages(fn(Option<&str>) -> String);

impl rmcp::ServerHandler for Pages {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        _: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let tool = rmcp::model::Tool::new("t", "A tool.", Arc::new(JsonObject::new()));
        let mut page = rmcp::model::ListToolsResult::with_all_items(vec![tool]);
        page.next_cursor = Some((self.0)(request.as_ref().and_then(|r| r.cursor.as_deref())));
        Ok(page)
    }
}

/// A client of a stub server whose pages never end.
async fn endless(
    pages: Pages,
    config: RecoveryConfig,
) -> (RecoveringClient, rmcp::service::RunningService<rmcp::RoleClient, ()>) {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(server) = pages.serve(server_io).await {
            let _ = server.waiting().await;
        }
    });
    let service = ().serve(client_io).await.unwrap();
    (RecoveringClient::new(service.peer().clone(), config), service)
}

/// A server that repeats a cursor, or pages without end, makes the listing fail instead of loop.
#[tokio::test]
async fn a_listing_that_never_ends_is_an_error() {
    let (c, _service) = endless(Pages(|_| "again".into()), RecoveryConfig::default()).await;
    let listed = tokio::time::timeout(Duration::from_secs(10), c.list_tools()).await.expect("the listing ends");
    let error = listed.expect_err("a repeated cursor is an error");
    assert!(error.to_string().contains("again"), "{error}");

    let next = |c: Option<&str>| format!("{}x", c.unwrap_or_default());
    let (c, _service) = endless(Pages(next), RecoveryConfig { max_list_pages: 5, ..RecoveryConfig::default() }).await;
    let listed = tokio::time::timeout(Duration::from_secs(10), c.list_tools()).await.expect("the listing ends");
    let error = listed.expect_err("too many pages is an error");
    assert!(error.to_string().contains('5'), "{error}");
}

/// A registration that is gone is not called again when the re-listing cannot show it (a tool
/// with one instance lists no instances): the error goes back at once instead of repeating the
/// call on the gone registration until the convergence guard stops it.
#[tokio::test]
async fn a_gone_registration_is_not_called_again_when_one_other_instance_is_listed() {
    let w = world().await;
    let (c, _) = client(&w, nobody());
    let mount = w.registry.mount("kiosk", "main").unwrap();
    let old = mount.registration_id().unwrap().to_string();
    drop(mount);
    let _other = w.registry.mount("kiosk", "hall").unwrap();
    c.list_tools().await.unwrap();
    let intent = Intent::new("kiosk-show", args("x")).with_target(json!({"registrationId": old}));
    let r = c.call(intent).await.unwrap();
    check(&r, Stop::ReturnedToCaller, &[Some(ErrorCode::ComponentUnmounted)]);
    assert!(r.refreshed);
}
