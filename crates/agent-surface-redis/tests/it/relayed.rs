//! Two registries (two replicas) sharing one Redis confirmation store, driven as a model drives
//! them: a model cannot send a `confirmationId` back, it can only repeat its call — and the
//! repeat may land on the other replica.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, InvokeResult};
use agent_surface_policy::{
    AuditKind, ConfirmationConfig, ConfirmationEngine, Consumer, Identity, MemoryAuditSink, TargetBinding,
};
use agent_surface_redis::{RedisConfig, RedisStores};
use agent_surface_registry::{Ctx, Mount, Registry, RegistryConfig, ServiceBuilder};
use agent_surface_testing::{Counter, expect_error, expect_ok};
use agent_surface_toolset::{Provider, Toolset, ToolsetConfig};
use serde_json::{Value, json};

/// One replica: its own connection to the shared store, engine, registry, mount and alice's
/// toolset; `note.delete` is gated and counts its runs.
struct Replica {
    engine: Arc<ConfirmationEngine>,
    runs: Counter,
    toolset: Toolset,
    _mount: Mount,
}

async fn replica(url: &str, prefix: &str, trail: &Arc<MemoryAuditSink>) -> Replica {
    let config = RedisConfig { prefix: prefix.to_string(), ..RedisConfig::default() };
    let stores = RedisStores::connect(url, config).await.expect("Redis answers");
    // The path the guide shows: the builder, on the Redis bundle. Over a shared store, evidence is
    // bound to the instance, not to this replica's registration of it (each replica mounts it
    // under a registration id of its own).
    let service = ServiceBuilder::new()
        .stores(stores.bundle())
        .audit(trail.clone())
        .authority(agent_surface_policy::Policies::default_deny().for_type("note", agent_surface_policy::AllowAll))
        .build();
    let (registry, engine) = (service.registry, service.confirmations);
    assert_eq!(engine.config().target_binding, TargetBinding::Instance);
    assert_eq!(registry.wiring_warnings(), [], "one backend, one trail, one clock");
    let runs = Counter::default();
    let seen = runs.clone();
    registry
        .define("note", |t| {
            t.capability("delete", "Delete a note.")
                .effect(Effect::Destructive)
                .confirm(|_: &Value| "Delete a note.")
                .raw_handler(
                    json!({"type": "object", "properties": {"id": {"type": "string"}}}),
                    None,
                    move |_ctx: Ctx, input: Value| {
                        seen.bump();
                        async move { Ok::<_, AgentSurfaceError>(json!({"deleted": input["id"]})) }
                    },
                );
        })
        .unwrap();
    let mount = registry.mount("note", "main").unwrap();
    // Each replica serves another session of Alice's: approvals are bound to the person.
    let alice =
        Consumer::authenticated(format!("alice-session-{prefix}-{}", std::process::id()), Identity::new("alice"));
    let toolset = Toolset::new(registry, alice, ToolsetConfig::default());
    Replica { engine, runs, toolset, _mount: mount }
}

impl Replica {
    /// One model turn calling `note-delete` with `args`.
    async fn call(&self, turn: &str, args: &str) -> InvokeResult {
        let response = json!({"role": "assistant", "tool_calls": [{
            "id": turn, "type": "function", "function": {"name": "note-delete", "arguments": args}
        }]});
        self.toolset.handle(Provider::OpenAiChat, &response).await.unwrap().outcomes.remove(0).result
    }
}

fn confirmation_id(r: &InvokeResult) -> String {
    expect_error(r, ErrorCode::ConfirmationRequired).detail("confirmationId").unwrap().as_str().unwrap().to_string()
}

/// A model's call on replica A needs a confirmation; a person approves it (in the inbox of
/// replica B); the model's plain repeat — no id — lands on replica B and runs, once; a third
/// repeat is asked again. The decision is recorded with the requesting call's ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_on_the_other_replica_uses_the_inbox_approval_once() {
    let Some(url) = agent_surface_testing::services::redis_url() else { return };
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("it:{}:{nonce}:relayed:", std::process::id());
    let trail = Arc::new(MemoryAuditSink::default());
    let (a, b) = (replica(&url, &prefix, &trail).await, replica(&url, &prefix, &trail).await);
    let args = r#"{"id": "n-1"}"#;

    let asked = confirmation_id(&a.call("call_1", args).await);
    // Asked again on the other replica before anyone decided: the same confirmation.
    assert_eq!(confirmation_id(&b.call("call_2", r#"{ "id" : "n-1" }"#).await), asked);
    b.engine.approve(&asked, &Identity::new("manager")).await.unwrap();

    expect_ok(&b.call("call_3", args).await);
    assert_eq!((a.runs.get(), b.runs.get()), (0, 1), "the repeat ran on replica B, once");
    let again = confirmation_id(&a.call("call_4", args).await);
    assert_ne!(again, asked, "the repeat after the run is asked again");
    let again_on_b = confirmation_id(&b.call("call_5", args).await);
    assert_eq!(again_on_b, again, "and the new confirmation is relayed to both replicas");
    assert_eq!(a.runs.get() + b.runs.get(), 1);

    let events = trail.events();
    let requested = events.iter().find(|e| matches!(e.kind, AuditKind::ConfirmationRequested { .. })).unwrap();
    let decided = events.iter().find(|e| matches!(e.kind, AuditKind::ConfirmationDecided { .. })).unwrap();
    assert!(requested.correlation_id.is_some(), "{requested:?}");
    assert_eq!(
        (&decided.invocation_id, &decided.correlation_id),
        (&requested.invocation_id, &requested.correlation_id),
        "the decision carries the requesting call's ids"
    );
}

/// A hundred model turns repeating one call at once, half on each replica (retries sent before
/// the first answer came back), open one confirmation between them: every turn is told its id,
/// the inbox lists one request and the trail holds one `confirmation.requested`. Once denied, the
/// next repeat is told so and the one after it asks again, with a new confirmation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_racing_repeats_on_two_replicas_open_one_confirmation() {
    let Some(url) = agent_surface_testing::services::redis_url() else { return };
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("it:{}:{nonce}:racing:", std::process::id());
    let trail = Arc::new(MemoryAuditSink::default());
    let (a, b) = (replica(&url, &prefix, &trail).await, replica(&url, &prefix, &trail).await);
    let args = r#"{"id": "n-race"}"#;
    let turns = (0..100).map(|i| {
        let replica = if i % 2 == 0 { &a } else { &b };
        async move { confirmation_id(&replica.call(&format!("call_{i}"), args).await) }
    });
    let ids = futures_util::future::join_all(turns).await;
    let first = ids[0].clone();
    assert_eq!(ids.iter().filter(|id| **id == first).count(), 100, "every racing repeat is told the same confirmation");
    let inbox = a.engine.pending_for(&Identity::new("manager"), 1000).await.unwrap();
    assert_eq!(inbox.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [first.as_str()], "one request in the inbox");
    let requested =
        || trail.events().iter().filter(|e| matches!(e.kind, AuditKind::ConfirmationRequested { .. })).count();
    assert_eq!(requested(), 1);

    b.engine.deny(&first, &Identity::new("manager")).await.unwrap();
    let denied = a.call("call_denied", args).await;
    assert_eq!(expect_error(&denied, ErrorCode::ConfirmationInvalid).detail("reason"), Some(&json!("denied")));
    let again = confirmation_id(&b.call("call_again", args).await);
    assert_ne!(again, first, "the call asked again after a denial opens a new confirmation");
    assert_eq!(requested(), 2);
    assert_eq!(a.runs.get() + b.runs.get(), 0);
}

/// Half-wired replicas are reported at startup: confirmations in Redis with idempotency records
/// or rate budgets kept per process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_confirmations_over_local_idempotency_and_rates_are_reported() {
    use agent_surface_policy::{MemoryRateLimiter, RateLimitConfig};
    use agent_surface_registry::WiringWarning;

    let Some(url) = agent_surface_testing::services::redis_url() else { return };
    let stores = RedisStores::connect(&url, RedisConfig::with_prefix("half-wired:")).await.expect("Redis answers");
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        store: Arc::new(stores.confirmations()),
        ..Default::default()
    }));
    let config = || RegistryConfig { confirmation: Some(engine.clone()), ..Default::default() };
    let half = Registry::new(RegistryConfig {
        rate_limiter: Some(Arc::new(MemoryRateLimiter::new(RateLimitConfig::default()))),
        ..config()
    });
    let warnings = half.wiring_warnings();
    assert_eq!(
        warnings,
        [WiringWarning::SharedConfirmationsLocalIdempotency, WiringWarning::SharedConfirmationsLocalRates]
    );
    let text = warnings[0].to_string();
    assert!(
        text.contains("idempotency records are kept per process") && text.contains("RedisStores::idempotency"),
        "{text}"
    );
    // The operator hears of it when the registry is built.
    let ((), log) = agent_surface_testing::capture_operator_log(|| {
        drop(Registry::new(config()));
    });
    assert!(log.contains("WARN") && log.contains("a retry that reaches another replica runs again"), "{log}");
    // Wired through: nothing to report.
    let whole = Registry::new(RegistryConfig { idempotency: Arc::new(stores.idempotency()), ..config() });
    assert_eq!(whole.wiring_warnings(), []);
}
