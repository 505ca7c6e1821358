//! Every code the matrix declares, produced through the public API in each of its phases.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, InputIssue, Origin, RateLimitReason, StaleReason};
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry, SafeText, Timestamp};
use agent_surface_policy::{
    AuthorityDecision, AuthorityPolicy, CallInfo, ConfirmationDecision, ConfirmationGate, Consumer, IdempotencyStore,
    PolicyError, RateDecision, StoreError,
    idempotency::{Admission, Fingerprint, IdempotencyKey, Settlement},
};
use agent_surface_registry::{
    Binding, Ctx, DuplicateInstance, Instance, InvokeOptions, Registry, RegistryConfig, Target, Unmet,
};
use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use agent_surface_testing::{FnGate, FnLimiter};

use crate::support::*;

// ---- Phase 1: admission -------------------------------------------------------------------

#[tokio::test]
async fn conflict_in_admission() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    let first =
        r.invoke_detailed(call("demo.echo", json!({"text": "a"})).with_invocation_id("i-1"), consumer("c")).await;
    assert!(first.result.is_ok());
    let second =
        r.invoke_detailed(call("demo.echo", json!({"text": "b"})).with_invocation_id("i-1"), consumer("c")).await;
    let p = assert_produced(&second, ErrorCode::InvocationConflict, Phase::Admission);
    assert_eq!(p.details().unwrap().len(), 1, "nothing about the earlier request: {p:?}");
    assert!(!p.to_json().to_string().contains("\"a\""));
    // Another consumer may use the same id.
    let other =
        r.invoke_detailed(call("demo.echo", json!({"text": "b"})).with_invocation_id("i-1"), consumer("d")).await;
    assert!(other.result.is_ok());
}

#[tokio::test]
async fn cancelled_in_admission_when_disposed_or_precancelled() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    let token = CancellationToken::new();
    token.cancel();
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c").with_cancellation(token)).await;
    assert_produced(&inv, ErrorCode::Cancelled, Phase::Admission);
    r.dispose();
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::Cancelled, Phase::Admission);
    assert_eq!(p.retry(), Retry::Yes);
}

#[derive(Debug)]
struct BrokenStore;

impl IdempotencyStore for BrokenStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Process
    }

    fn admit<'a>(
        &'a self,
        _: &'a IdempotencyKey,
        _: Fingerprint,
        _: agent_surface_policy::idempotency::Attempt,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("redis://user:secret@10.0.0.5:6379 refused".into())) })
    }
    fn settle<'a>(
        &'a self,
        _: &'a IdempotencyKey,
        _: Fingerprint,
        _: agent_surface_policy::idempotency::Lease,
        _: Settlement,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    fn cancel<'a>(
        &'a self,
        _: &'a IdempotencyKey,
        _: agent_surface_policy::idempotency::Attempt,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn start<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn renew<'a>(
        &'a self,
        _key: &'a agent_surface_policy::idempotency::IdempotencyKey,
        _lease: agent_surface_policy::idempotency::Lease,
        _now: agent_surface_core::Timestamp,
    ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

#[tokio::test]
async fn store_failure_is_a_transient_execution_failure_in_admission() {
    let (r, _m) = echo_registry(RegistryConfig { idempotency: Arc::new(BrokenStore), ..Default::default() });
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})).with_invocation_id("i"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Admission);
    assert_eq!(p.retry(), Retry::AfterDelay);
    // Sent again under the same id, never a new one: the id may hold the result of an earlier
    // attempt whose answer was lost, which a new id would run a second time.
    assert_eq!(p.detail("reason"), Some(&json!("store-unavailable")));
    assert!(p.message().contains("under the same invocationId"), "{}", p.message());
    assert!(!p.to_json().to_string().contains("secret"));
    // Without an invocation id the store is not consulted.
    assert!(r.invoke(call("demo.echo", json!({"text": "a"})), consumer("c")).await.is_ok());
}

/// A handler that relays `store-unavailable` (a downstream service of its own that could not
/// admit the request): the answer asks for the same id again, so it is never kept under it, or
/// every retry would replay it for the whole window.
#[tokio::test]
async fn a_store_unavailable_answer_is_never_kept_under_its_id() {
    let r = Registry::new(RegistryConfig::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    r.define("relay", move |t| {
        t.capability("send", "Send it on.").effect(Effect::Write).raw_handler(
            json!({"type": "object"}),
            None,
            move |_: Ctx, _| {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        return Err(AgentSurfaceError::store_unavailable(Duration::from_millis(10)));
                    }
                    Ok(json!({"sent": true}))
                }
            },
        );
    })
    .unwrap();
    let _m = r.mount("relay", "main").unwrap();
    let send = || call("relay.send", json!({})).with_invocation_id("send-1");
    let first = r.invoke_detailed(send(), consumer("c")).await;
    assert_eq!(first.result.error_payload().and_then(|p| p.detail("reason")), Some(&json!("store-unavailable")));
    let again = r.invoke_detailed(send(), consumer("c")).await;
    assert!(!again.replayed, "not kept: {again:?}");
    assert_eq!(again.result.output(), Some(&json!({"sent": true})));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// ---- Phase 2: resolve ------------------------------------------------------------------------

#[tokio::test]
async fn not_found_for_unknown_and_unmounted_types() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    let inv = r.invoke_detailed(call("demo.nope", json!({})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Resolve);
    assert!(p.details().is_none());
    assert_eq!(p.retry(), Retry::AfterRefresh);
    // Defined but never mounted: not in the surface.
    r.define("other", |t| {
        t.capability("x", "Do x.")
            .handler(|_c: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) })
    })
    .unwrap();
    let inv = r.invoke_detailed(call("other.x", json!({"text": "a"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Resolve);
}

#[tokio::test]
async fn unmounted_at_resolution_until_the_tombstone_expires() {
    let clock = clock();
    let (r, m) = echo_registry(config_with(&clock));
    let reg = m.registration_id().unwrap().to_string();
    drop(m);
    for target in [None, Some(Target::instance("main")), Some(Target::registration(reg.clone()))] {
        let mut req = call("demo.echo", json!({"text": "a"}));
        req.target = target;
        let inv = r.invoke_detailed(req, consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::ComponentUnmounted, Phase::Resolve);
        assert_eq!(p.detail("phase"), Some(&json!("resolve")));
    }
    assert_eq!(r.tombstone_count(), 1);
    clock.advance(r.config().tombstone_ttl + Duration::from_millis(1));
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Resolve);
    assert_eq!(r.tombstone_count(), 0);
}

#[tokio::test]
async fn stale_for_replaced_registration_other_surface_and_old_version() {
    let config = RegistryConfig { duplicate_instance: DuplicateInstance::Replace, ..Default::default() };
    let r = Registry::new(config);
    r.define("cart", |t| {
        t.capability("clear", "Empty the cart.")
            .effect(Effect::Destructive)
            .handler(|_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"cleared": true})) });
    })
    .unwrap();
    let old = r.mount("cart", "main").unwrap();
    let old_id = old.registration_id().unwrap().to_string();
    let new = r.mount("cart", "main").unwrap();
    let new_id = new.registration_id().unwrap().to_string();
    assert_ne!(old_id, new_id);
    assert!(!old.is_live() && new.is_live());

    let inv = r
        .invoke_detailed(call("cart.clear", json!({})).with_target(Target::registration(old_id.clone())), consumer("c"))
        .await;
    let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
    assert_eq!(p.details().unwrap()["reason"], "registration-replaced");
    assert_eq!(p.details().unwrap()["liveRegistrationId"], json!(new_id));
    let both = Target { instance_id: Some("main".into()), registration_id: Some(old_id) };
    let inv = r.invoke_detailed(call("cart.clear", json!({})).with_target(both), consumer("c")).await;
    assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);

    // Unmounted and mounted again (no replacement recorded): the old registration is stale and
    // names the live one, whether or not the call names the instance too.
    let live_id = new.registration_id().unwrap().to_string();
    drop(new);
    let new = r.mount("cart", "main").unwrap();
    let remounted = new.registration_id().unwrap().to_string();
    for target in [
        Target::registration(live_id.clone()),
        Target { instance_id: Some("main".into()), registration_id: Some(live_id.clone()) },
    ] {
        let inv = r.invoke_detailed(call("cart.clear", json!({})).with_target(target), consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
        assert_eq!(p.details().unwrap()["liveRegistrationId"], json!(remounted));
    }

    let inv = r
        .invoke_detailed(call("cart.clear", json!({})).with_surface("s-0000000000000000", r.version()), consumer("c"))
        .await;
    let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
    assert_eq!(p.details().unwrap()["reason"], "surface-reloaded");

    let planned = r.version();
    r.disable("cart.clear", "Maintenance.");
    r.enable("cart.clear");
    let inv =
        r.invoke_detailed(call("cart.clear", json!({})).with_surface(r.surface_id(), planned), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
    assert_eq!(p.details().unwrap()["reason"], "surface-version-mismatch");
    let ok = r.invoke(call("cart.clear", json!({})).with_surface(r.surface_id(), r.version()), consumer("c")).await;
    assert!(ok.is_ok(), "{ok:?}");
    drop((old, new));
}

/// `cart.clear` (destructive) in `r`, behind a precondition that awaits: it notifies `entered`,
/// then waits for `release`. The handler counts its runs in `runs` and answers the registration
/// it ran on.
struct WaitingCart {
    entered: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
    runs: Arc<AtomicUsize>,
}

impl WaitingCart {
    fn define(r: &Registry) -> WaitingCart {
        let cart = WaitingCart {
            entered: Arc::new(tokio::sync::Notify::new()),
            release: Arc::new(tokio::sync::Notify::new()),
            runs: Arc::new(AtomicUsize::new(0)),
        };
        let (e, g, n) = (cart.entered.clone(), cart.release.clone(), cart.runs.clone());
        r.define("cart", move |t| {
            t.capability("clear", "Empty the cart.")
                .effect(Effect::Destructive)
                .precondition_async(move |_: Ctx, _: &Value| {
                    let (entered, release) = (e.clone(), g.clone());
                    async move {
                        entered.notify_one();
                        release.notified().await;
                        Ok(())
                    }
                })
                .handler(move |c: Ctx, _i: Value| {
                    n.fetch_add(1, Ordering::SeqCst);
                    let on = c.registration_id().to_string();
                    async move { Ok::<_, AgentSurfaceError>(json!({"clearedOn": on})) }
                });
        })
        .unwrap();
        cart
    }

    /// `cart.clear` under the invocation id `clear-1`, started on a task of its own once its
    /// precondition is waiting.
    async fn waiting(&self, r: &Registry) -> tokio::task::JoinHandle<agent_surface_registry::Invocation> {
        let waiting = tokio::spawn({
            let r = r.clone();
            async move { r.invoke_detailed(clear(), consumer("c")).await }
        });
        self.entered.notified().await;
        waiting
    }
}

fn clear() -> agent_surface_registry::InvokeRequest {
    call("cart.clear", json!({})).with_invocation_id("clear-1")
}

/// A call whose registration is replaced while it waits before its handler (here, on a
/// precondition that awaits) does not start the handler on the registration that is gone: it is
/// answered `COMPONENT_UNMOUNTED {phase: resolve}` with `notProcessed`, by phase 8's gate, as
/// soon as the registration goes (the precondition still waiting), and its retry under the same
/// invocation id runs on the live registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_registration_is_replaced_while_it_waits_does_not_run_on_it() {
    let config = RegistryConfig { duplicate_instance: DuplicateInstance::Replace, ..Default::default() };
    let r = Registry::new(config);
    let cart = WaitingCart::define(&r);
    let old = r.mount("cart", "main").unwrap();
    let waiting = cart.waiting(&r).await;
    let new = r.mount("cart", "main").unwrap();
    assert!(!old.is_live());
    let inv = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("answered while the precondition still waits")
        .unwrap();
    let p = assert_produced_before_handler(&inv, ErrorCode::ComponentUnmounted, Phase::Execute);
    assert_eq!((p.retry(), p.detail("phase")), (Retry::AfterRefresh, Some(&json!("resolve"))));
    assert_eq!(cart.runs.load(Ordering::SeqCst), 0, "the handler did not run on the replaced registration");

    // Nothing ran, so nothing was recorded: the retry runs, on the live registration.
    cart.release.notify_one();
    let again = r.invoke_detailed(clear(), consumer("c")).await;
    let live = new.registration_id().unwrap();
    assert_eq!(again.result.output(), Some(&json!({"clearedOn": live})), "{:?}", again.result);
    assert!(!again.replayed);
    assert_eq!(cart.runs.load(Ordering::SeqCst), 1);
}

/// A call whose capability is disabled while it waits before its handler (here, on a precondition
/// that awaits) does not start the handler: it is answered `CAPABILITY_NOT_AVAILABLE {reason}` with
/// `notProcessed`, in phase 8, and once the capability is enabled again its retry under the same
/// invocation id runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_capability_is_disabled_while_it_waits_does_not_run() {
    let r = Registry::new(RegistryConfig::default());
    let cart = WaitingCart::define(&r);
    let mount = r.mount("cart", "main").unwrap();
    let waiting = cart.waiting(&r).await;
    assert!(r.disable("cart.clear", "Clearing carts is paused during the migration."));
    cart.release.notify_one();
    let inv = waiting.await.unwrap();
    let p = assert_produced_before_handler(&inv, ErrorCode::CapabilityNotAvailable, Phase::Execute);
    assert_eq!(p.detail("reason"), Some(&json!("Clearing carts is paused during the migration.")));
    assert_eq!(cart.runs.load(Ordering::SeqCst), 0, "the handler did not run once the capability was disabled");

    // Nothing ran, so nothing was recorded: enabled again, the same id runs.
    assert!(r.enable("cart.clear"));
    cart.release.notify_one();
    let again = r.invoke_detailed(clear(), consumer("c")).await;
    let on = mount.registration_id().unwrap();
    assert_eq!(again.result.output(), Some(&json!({"clearedOn": on})), "{:?}", again.result);
    assert!(!again.replayed);
    assert_eq!(cart.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn ambiguous_when_several_instances_and_no_target() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    // Agent-facing text, normalized as every author text is: no control or bidi characters, one
    // line, at most 200 characters.
    let described = Instance::new().description("The second\n\n one\u{202E}").context("c".repeat(300));
    let _m2 = r.mount_with("demo", "second", described).unwrap();
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::AmbiguousInstance, Phase::Resolve);
    let instances = p.details().unwrap()["instances"].as_array().unwrap().clone();
    assert_eq!(instances.len(), 2);
    let second = instances.iter().find(|i| i["instanceId"] == "second").expect("listed");
    assert_eq!(second["description"], "The second one");
    assert!(second["context"].as_str().unwrap().chars().count() <= 200, "{second}");
    let ok =
        r.invoke(call("demo.echo", json!({"text": "a"})).with_target(Target::instance("second")), consumer("c")).await;
    assert!(ok.is_ok());
}

// ---- Phase 3: availability ---------------------------------------------------------------

#[tokio::test]
async fn not_available_with_the_descriptor_reason() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    assert!(r.disable("demo.echo", "Sign in to a store first."));
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::CapabilityNotAvailable, Phase::Availability);
    let snap = r.snapshot(&Consumer::anonymous("c")).await;
    let d = snap.capability("demo.echo").unwrap();
    assert!(!d.enabled);
    assert_eq!(p.detail("reason"), Some(&json!(d.unavailable_reason.clone().unwrap())));
    r.enable("demo.echo");
    assert!(r.invoke(call("demo.echo", json!({"text": "a"})), consumer("c")).await.is_ok());
}

// ---- Phase 4: authority ------------------------------------------------------------------

struct RolePolicy;

impl AuthorityPolicy for RolePolicy {
    fn name(&self) -> &str {
        "role-policy"
    }
    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(async move {
            Ok(match (call.consumer.identity(), call.capability) {
                (_, "demo.echo") => AuthorityDecision::Allow,
                (None, _) => AuthorityDecision::Unauthenticated,
                (Some(i), "admin.secret") if !i.has_role("admin") => AuthorityDecision::Hide,
                (Some(i), "admin.tool") if !i.has_role("admin") => AuthorityDecision::Deny { origin: Origin::Client },
                (Some(_), "admin.closed") => {
                    AuthorityDecision::Disable { reason: SafeText::from("Closed for you today.") }
                }
                _ => AuthorityDecision::Allow,
            })
        })
    }
}

fn admin_registry() -> (Registry, agent_surface_registry::Mount) {
    let (r, m) = echo_registry(RegistryConfig { authority: Some(Arc::new(RolePolicy)), ..Default::default() });
    r.define("admin", |t| {
        for id in ["tool", "secret", "closed"] {
            t.capability(id, "An admin tool.")
                .handler(|_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
        }
    })
    .unwrap();
    std::mem::forget(r.mount("admin", "main").unwrap());
    (r, m)
}

fn signed_in(key: &str, roles: &[&str]) -> InvokeOptions {
    let mut id = agent_surface_policy::Identity::new("user-1");
    for role in roles {
        id = id.with_role(*role);
    }
    InvokeOptions::new(Consumer::authenticated(key, id))
}

#[tokio::test]
async fn authority_outcomes() {
    let (r, _m) = admin_registry();
    let inv = r.invoke_detailed(call("admin.tool", json!({})), consumer("anon")).await;
    let p = assert_produced(&inv, ErrorCode::NotAuthenticated, Phase::Authority);
    assert!(p.details().is_none());
    let inv = r.invoke_detailed(call("admin.tool", json!({})), signed_in("u", &[])).await;
    let p = assert_produced(&inv, ErrorCode::NotAuthorized, Phase::Authority);
    assert_eq!(p.details().unwrap(), json!({"origin": "client"}).as_object().unwrap());
    let inv = r.invoke_detailed(call("admin.closed", json!({})), signed_in("u", &[])).await;
    let p = assert_produced(&inv, ErrorCode::CapabilityNotAvailable, Phase::Authority);
    assert_eq!(p.detail("reason"), Some(&json!("Closed for you today.")));
    assert!(r.invoke(call("admin.tool", json!({})), signed_in("u", &["admin"])).await.is_ok());
}

#[tokio::test]
async fn hidden_is_byte_identical_to_never_existed() {
    let (r, _m) = admin_registry();
    let hidden = r.invoke_detailed(call("admin.secret", json!({})), signed_in("u", &[])).await;
    assert_produced(&hidden, ErrorCode::CapabilityNotFound, Phase::Authority);
    let missing = r.invoke(call("admin.nothing", json!({})), signed_in("u", &[])).await;
    assert_eq!(
        serde_json::to_string(&hidden.result.without_correlation_id()).unwrap(),
        serde_json::to_string(&missing.without_correlation_id()).unwrap()
    );
    let snap = r.snapshot(&Consumer::authenticated("u", agent_surface_policy::Identity::new("user-1"))).await;
    assert!(snap.capability("admin.secret").is_none());
    assert!(snap.capability("admin.tool").is_some());
}

// ---- Phase 5: input ----------------------------------------------------------------------

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct AddItem {
    cart_id: String,
    sku: String,
    quantity: u32,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Added {
    cart_id: String,
    quantity: u32,
}

struct Cart {
    id: Option<String>,
}

fn cart_registry() -> Registry {
    let r = Registry::new(RegistryConfig::default());
    r.define("cart", |t| {
        t.capability("add_item", "Add an item to the current cart.")
            .bind("cart_id", Binding::from_instance(|c: &Cart| c.id.clone().map(Value::from)))
            .precondition(|_ctx: &Ctx, i: &AddItem| {
                if i.sku == "discontinued" {
                    return Err(Unmet::new("This item is discontinued.")
                        .reason("discontinued")
                        .detail("sku", i.sku.clone()));
                }
                if i.sku == "boom" {
                    panic!("precondition bug");
                }
                Ok(())
            })
            .handler(|_c: Ctx, i: AddItem| async move {
                Ok::<_, AgentSurfaceError>(Added { cart_id: i.cart_id, quantity: i.quantity })
            })
    })
    .unwrap();
    r
}

#[tokio::test]
async fn invalid_input_for_schema_and_locked_fields() {
    let r = cart_registry();
    let _m = r.mount_with("cart", "main", Instance::new().state(Cart { id: Some("cart-9".into()) })).unwrap();
    let inv = r.invoke_detailed(call("cart.add_item", json!({"sku": "A", "quantity": -1})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
    let issues: Vec<InputIssue> = serde_json::from_value(p.details().unwrap()["issues"].clone()).unwrap();
    assert!(issues.iter().any(|i| i.path == "/quantity"), "{issues:?}");
    assert!(!p.to_json().to_string().contains("-1"));

    let inv = r
        .invoke_detailed(call("cart.add_item", json!({"sku": "A", "quantity": 1, "cart_id": "mine"})), consumer("c"))
        .await;
    let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
    assert_eq!(p.detail("lockedFields"), Some(&json!(["cart_id"])));

    let inv = r
        .invoke_detailed(call("cart.add_item", json!({"sku": "A", "quantity": 1, "colour": "red"})), consumer("c"))
        .await;
    let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
    assert_eq!(p.details().unwrap()["issues"][0]["path"], "/colour");

    let ok = r.invoke(call("cart.add_item", json!({"sku": "A", "quantity": 2})), consumer("c")).await;
    assert_eq!(ok.output(), Some(&json!({"cart_id": "cart-9", "quantity": 2})));
}

#[tokio::test]
async fn precondition_failed_for_bindings_and_author_checks() {
    let r = cart_registry();
    let m = r.mount_with("cart", "main", Instance::new().state(Cart { id: None })).unwrap();
    let inv = r.invoke_detailed(call("cart.add_item", json!({"sku": "A", "quantity": 1})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("binding-failed")));
    assert_eq!(p.retry(), Retry::AfterRefresh);
    drop(m);

    let _m = r.mount_with("cart", "main", Instance::new().state(Cart { id: Some("c-1".into()) })).unwrap();
    let inv =
        r.invoke_detailed(call("cart.add_item", json!({"sku": "discontinued", "quantity": 1})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(p.retry(), Retry::WithChanges);
    assert_eq!(p.details().unwrap(), json!({"reason": "discontinued", "sku": "discontinued"}).as_object().unwrap());

    let inv = r.invoke_detailed(call("cart.add_item", json!({"sku": "boom", "quantity": 1})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Input);
    assert!(!p.message().contains("precondition bug"));
}

// ---- Phase 6: rate ----------------------------------------------------------------------

#[tokio::test]
async fn rate_limited_is_not_cached() {
    let calls = AtomicUsize::new(0);
    let (r, _m) = echo_registry(RegistryConfig {
        // One call only: the first passes, every later one waits 1.5 s.
        rate_limiter: Some(Arc::new(FnLimiter::new(move |_, _| match calls.fetch_add(1, Ordering::SeqCst) {
            0 => RateDecision::Allow(None),
            _ => RateDecision::Limited { reason: RateLimitReason::Rate, retry_after: Duration::from_millis(1500) },
        }))),
        ..Default::default()
    });
    assert!(r.invoke(call("demo.echo", json!({"text": "a"})), consumer("c")).await.is_ok());
    let req = call("demo.echo", json!({"text": "a"})).with_invocation_id("i-7");
    let inv = r.invoke_detailed(req.clone(), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::RateLimited, Phase::Rate);
    assert_eq!(p.retry_after(), Some(Duration::from_millis(1500)));
    // Not stored: the same id runs the pipeline again rather than replaying.
    let again = r.invoke_detailed(req, consumer("c")).await;
    assert!(!again.replayed);
    assert_produced(&again, ErrorCode::RateLimited, Phase::Rate);
}

// ---- Phase 7: confirmation ---------------------------------------------------------------

/// Every call needs `conf-1`; any other id is denied.
fn gate() -> impl ConfirmationGate {
    FnGate::new(|_call, evidence, now| match evidence {
        None => ConfirmationDecision::Required {
            confirmation_id: "conf-1".into(),
            summary: SafeText::from("Echo a text."),
            expires_at: now.saturating_add(Duration::from_secs(60)),
            origin: Origin::Client,
        },
        Some("conf-1") => ConfirmationDecision::Proceed,
        Some(_) => ConfirmationDecision::Invalid(ConfirmationInvalidReason::Denied),
    })
}

#[tokio::test]
async fn confirmation_required_then_invalid_then_proceed() {
    let (r, _m) = echo_registry(RegistryConfig { confirmation: Some(Arc::new(gate())), ..Default::default() });
    let inv = r.invoke_detailed(call("demo.echo", json!({"text": "a"})).with_invocation_id("i"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationRequired, Phase::Confirmation);
    assert_eq!(p.detail("confirmationId"), Some(&json!("conf-1")));
    assert_eq!(p.detail("effect"), Some(&json!("read")));
    let inv =
        r.invoke_detailed(call("demo.echo", json!({"text": "a"})).with_confirmation("forged"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ConfirmationInvalid, Phase::Confirmation);
    assert_eq!(p.retry(), Retry::No);
    // CONFIRMATION_REQUIRED was not stored: the same invocation id proceeds with evidence.
    let ok = r
        .invoke(
            call("demo.echo", json!({"text": "a"})).with_invocation_id("i").with_confirmation("conf-1"),
            consumer("c"),
        )
        .await;
    assert!(ok.is_ok(), "{ok:?}");
}

// ---- Phase 8: execute --------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
struct Mode {
    mode: String,
}

/// The behaviour of the `act.*` capabilities, chosen by the input's mode.
async fn behave(ctx: Ctx, i: Mode) -> Result<Value, AgentSurfaceError> {
    match i.mode.as_str() {
        "ok" => Ok(json!({"done": true})),
        "slow" => {
            std::future::pending::<()>().await;
            Ok(json!({}))
        }
        "error" => Err(AgentSurfaceError::internal(std::io::Error::other(
            "SELECT * FROM users -- postgres://admin:pw@db.internal/prod",
        ))),
        "panic" => panic!("handler bug at src/secret.rs:42"),
        "invalid" => Err(AgentSurfaceError::invalid_input(
            vec![InputIssue { path: "/mode".into(), message: "is not accepted by the server".into() }],
            None,
        )),
        "unauthenticated" => Err(AgentSurfaceError::not_authenticated()),
        "forbidden" => Err(AgentSurfaceError::not_authorized(Origin::Server)),
        "precondition" => Err(AgentSurfaceError::precondition_failed("The order already shipped.")),
        "throttled" => Err(AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_secs(3))),
        "reserved" => Err(AgentSurfaceError::stale_capability(StaleReason::SurfaceReloaded, None)),
        "state" => Ok(json!({"missing": ctx.state::<String>().len()})),
        _ => Ok(json!(null)),
    }
}

/// `act.run` (write, not idempotent) and `act.peek` (read): a mid-flight timeout or unmount is
/// `TIMEOUT` / `COMPONENT_UNMOUNTED` for `act.peek` and `EXECUTION_FAILED {reason:
/// outcome-unknown}` for `act.run`.
fn behaviour_registry(config: RegistryConfig) -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(config);
    r.define("act", |t| {
        t.capability("run", "Behave as told.").time_budget(Duration::from_secs(2)).handler(behave);
        t.capability("peek", "Behave as told, reading only.")
            .effect(Effect::Read)
            .time_budget(Duration::from_secs(2))
            .handler(behave)
    })
    .unwrap();
    let m = r.mount("act", "main").unwrap();
    (r, m)
}

#[tokio::test]
async fn timeout_with_a_manual_clock() {
    let clock = clock();
    let (r, _m) = behaviour_registry(config_with(&clock));
    let call_fut = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke_detailed(call("act.peek", json!({"mode": "slow"})), consumer("c")).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_secs(2));
    let inv = call_fut.await.unwrap();
    let p = assert_produced(&inv, ErrorCode::Timeout, Phase::Execute);
    assert_eq!(p.details().unwrap(), json!({"timeoutMs": 2000, "idempotent": false}).as_object().unwrap());
    // A read has no effect to double: repeat it (error-model.md, Interrupted calls).
    assert_eq!(p.retry(), Retry::Yes);
}

#[tokio::test]
async fn cancelled_and_unmounted_mid_flight() {
    let clock = clock();
    let (r, m) = behaviour_registry(config_with(&clock));
    let token = CancellationToken::new();
    let fut = {
        let (r, token) = (r.clone(), token.clone());
        tokio::spawn(async move {
            r.invoke_detailed(call("act.peek", json!({"mode": "slow"})), consumer("c").with_cancellation(token)).await
        })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    token.cancel();
    assert_produced(&fut.await.unwrap(), ErrorCode::Cancelled, Phase::Execute);

    let fut = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke_detailed(call("act.peek", json!({"mode": "slow"})), consumer("c")).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    drop(m);
    let p = assert_produced(&fut.await.unwrap(), ErrorCode::ComponentUnmounted, Phase::Execute);
    assert_eq!(p.detail("phase"), Some(&json!("mid-flight")));

    let _m = r.mount("act", "main").unwrap();
    let fut = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke_detailed(call("act.peek", json!({"mode": "slow"})), consumer("c")).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    r.dispose();
    assert_produced(&fut.await.unwrap(), ErrorCode::Cancelled, Phase::Execute);
}

#[tokio::test]
async fn handler_errors_and_panics_are_sanitized_and_the_runtime_keeps_serving() {
    let (r, _m) = behaviour_registry(RegistryConfig::default());
    for mode in ["error", "panic", "reserved", "state"] {
        let inv = r.invoke_detailed(call("act.run", json!({"mode": mode})), consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(p.detail("reason"), Some(&json!("handler-error")));
        let text = serde_json::to_string(&inv.result).unwrap();
        for secret in ["SELECT", "postgres", "admin:pw", "src/secret.rs", "String", "STALE"] {
            assert!(!text.contains(secret), "{mode}: {secret} leaked into {text}");
        }
    }
    assert!(r.invoke(call("act.run", json!({"mode": "ok"})), consumer("c")).await.is_ok());
}

#[tokio::test]
async fn codes_a_handler_may_return() {
    let (r, _m) = behaviour_registry(RegistryConfig::default());
    let cases = [
        ("invalid", ErrorCode::InvalidInput),
        ("unauthenticated", ErrorCode::NotAuthenticated),
        ("forbidden", ErrorCode::NotAuthorized),
        ("precondition", ErrorCode::PreconditionFailed),
        ("throttled", ErrorCode::RateLimited),
    ];
    for (mode, code) in cases {
        let inv = r.invoke_detailed(call("act.run", json!({"mode": mode})), consumer("c")).await;
        assert_eq!(inv.result.code(), Some(code), "{mode}");
    }
    let inv = r.invoke_detailed(call("act.run", json!({"mode": "invalid"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::InvalidInput, Phase::Execute);
    let inv = r.invoke_detailed(call("act.run", json!({"mode": "unauthenticated"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::NotAuthenticated, Phase::Execute);
    let inv = r.invoke_detailed(call("act.run", json!({"mode": "forbidden"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::NotAuthorized, Phase::Execute);
    let inv = r.invoke_detailed(call("act.run", json!({"mode": "precondition"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Execute);
    let inv = r.invoke_detailed(call("act.run", json!({"mode": "throttled"})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::RateLimited, Phase::Execute);
}

// ---- Phase 9: output ---------------------------------------------------------------------

#[derive(Debug, Serialize, JsonSchema)]
struct Strict {
    count: u32,
}

#[tokio::test]
async fn output_invalid_and_too_large_are_withheld() {
    let r = Registry::new(RegistryConfig { max_output_bytes: 1024, ..Default::default() });
    r.define("out", |t| {
        t.capability("bad", "Return a bad output.").raw_handler(
            json!({"type": "object"}),
            Some(json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})),
            |_c, _i| async move { Ok(json!({"count": "card 4111 1111 1111 1111"})) },
        );
        t.capability("big", "Return a big output.")
            .handler(|_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"blob": "x".repeat(4096)})) });
        t.capability("strict", "Return a typed output.")
            .handler(|_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(Strict { count: 3 }) });
    })
    .unwrap();
    let _m = r.mount("out", "main").unwrap();
    let inv = r.invoke_detailed(call("out.bad", json!({})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Output);
    assert_eq!(p.detail("reason"), Some(&json!("output-invalid")));
    assert!(!serde_json::to_string(&inv.result).unwrap().contains("4111"));
    let inv = r.invoke_detailed(call("out.big", json!({})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::ExecutionFailed, Phase::Output);
    assert_eq!(p.detail("reason"), Some(&json!("output-too-large")));
    assert_eq!(r.invoke(call("out.strict", json!({})), consumer("c")).await.output(), Some(&json!({"count": 3})));
}
