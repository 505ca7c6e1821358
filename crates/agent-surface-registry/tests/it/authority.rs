//! Phase 4 and discovery with the real authority engine (`Policies`): every outcome, fail-closed
//! evaluation, and hidden capabilities that cannot be told from names that never existed.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, ErrorCode, Phase, Retry, SafeText};
use agent_surface_policy::{
    AuthorityDecision, AuthorityPolicy, CallInfo, Consumer, FnPolicy, Identity, ManualClock, Policies, PolicyError,
    RequireIdentity, RequireRole,
};
use agent_surface_registry::{Ctx, Invocation, InvokeOptions, InvokeRequest, Registry, RegistryConfig, Target};
use agent_surface_testing::{Misbehaving, Slow};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support::*;

/// A `tracing` writer that keeps what it is given (the operator channel, for assertions).
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures the operator channel of this thread until the guard drops.
    pub(crate) fn install() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn signed_in(key: &str, roles: &[&str]) -> InvokeOptions {
    let identity = roles.iter().fold(Identity::new(format!("user-{key}")), |id, role| id.with_role(*role));
    InvokeOptions::new(Consumer::authenticated(key, identity))
}

fn noop(t: &mut agent_surface_registry::TypeBuilder<'_>, id: &str) {
    t.capability(id, "A tool.").handler(|_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
}

/// `shop.browse` for everyone signed in; the `admin` type for admins; `admin.audit` hidden from
/// non-admins; `shop.sale` disabled for everyone but the `vip` role.
fn engine(clock: &Arc<ManualClock>) -> Policies {
    Policies::default_allow()
        .with_clock(clock.clone())
        .global(RequireIdentity)
        .for_type(
            "admin",
            FnPolicy::new("hide-audit", |call| {
                let admin = call.consumer.identity().is_some_and(|i| i.has_role("admin"));
                Ok(if call.capability == "admin.audit" && !admin {
                    AuthorityDecision::Hide
                } else {
                    AuthorityDecision::Allow
                })
            }),
        )
        .for_type("admin", RequireRole::new("admin"))
        .for_capability(
            "shop.sale",
            FnPolicy::new("vip-sale", |call| {
                Ok(if call.consumer.identity().is_some_and(|i| i.has_role("vip")) {
                    AuthorityDecision::Allow
                } else {
                    AuthorityDecision::Disable { reason: SafeText::from("The sale opens to members first.") }
                })
            }),
        )
}

fn shop(config: RegistryConfig) -> (Registry, Vec<agent_surface_registry::Mount>) {
    let r = Registry::new(config);
    r.define("shop", |t| {
        noop(t, "browse");
        noop(t, "sale");
    })
    .unwrap();
    r.define("admin", |t| {
        noop(t, "purge");
        noop(t, "audit");
    })
    .unwrap();
    let mounts = vec![r.mount("shop", "main").unwrap(), r.mount("admin", "main").unwrap()];
    (r, mounts)
}

fn shop_with_engine(clock: &Arc<ManualClock>) -> (Registry, Vec<agent_surface_registry::Mount>) {
    shop(RegistryConfig { authority: Some(Arc::new(engine(clock))), ..config_with(clock) })
}

#[tokio::test]
async fn every_authority_outcome_through_invoke() {
    let clock = clock();
    let (r, _m) = shop_with_engine(&clock);

    let inv = r.invoke_detailed(call("shop.browse", json!({})), consumer("anon")).await;
    let p = assert_produced(&inv, ErrorCode::NotAuthenticated, Phase::Authority);
    assert!(p.details().is_none());
    assert_eq!(p.retry(), Retry::No);

    let inv = r.invoke_detailed(call("admin.purge", json!({})), signed_in("u", &[])).await;
    let p = assert_produced(&inv, ErrorCode::NotAuthorized, Phase::Authority);
    assert_eq!(p.details().unwrap(), json!({"origin": "client"}).as_object().unwrap());
    assert!(!p.to_json().to_string().contains("admin\""), "no permission names: {}", p.to_json());

    let inv = r.invoke_detailed(call("shop.sale", json!({})), signed_in("u", &[])).await;
    let p = assert_produced(&inv, ErrorCode::CapabilityNotAvailable, Phase::Authority);
    assert_eq!(p.detail("reason"), Some(&json!("The sale opens to members first.")));

    let inv = r.invoke_detailed(call("admin.audit", json!({})), signed_in("u", &[])).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Authority);

    for (name, who) in [("shop.browse", signed_in("u", &[])), ("shop.sale", signed_in("v", &["vip"]))] {
        assert!(r.invoke(call(name, json!({})), who).await.is_ok(), "{name}");
    }
    for name in ["admin.purge", "admin.audit"] {
        assert!(r.invoke(call(name, json!({})), signed_in("a", &["admin"])).await.is_ok(), "{name}");
    }
}

#[tokio::test]
async fn discovery_and_invocation_agree() {
    let clock = clock();
    let (r, _m) = shop_with_engine(&clock);
    let names = ["shop.browse", "shop.sale", "admin.purge", "admin.audit"];
    for who in [signed_in("u", &[]), signed_in("v", &["vip"]), signed_in("a", &["admin"]), consumer("anon")] {
        let snapshot = r.snapshot(&who.consumer).await;
        for name in names {
            let inv = r.invoke_detailed(call(name, json!({})), who.clone()).await;
            let code = inv.result.code();
            match snapshot.capability(name) {
                None => {
                    assert_eq!(code, Some(ErrorCode::CapabilityNotFound), "{name} is not listed, so it is not found")
                }
                Some(d) if !d.enabled => {
                    assert_eq!(code, Some(ErrorCode::CapabilityNotAvailable), "{name}");
                    let reason = inv.result.error_payload().unwrap().detail("reason").cloned();
                    assert_eq!(reason, d.unavailable_reason.clone().map(Value::from), "{name}: same reason");
                }
                Some(_) => assert_ne!(code, Some(ErrorCode::CapabilityNotFound), "{name} is listed, so it is found"),
            }
        }
    }
    let user = r.snapshot(&signed_in("u", &[]).consumer).await;
    assert!(user.capability("admin.audit").is_none());
    assert!(user.capability("admin.purge").is_some(), "denied is not hidden");
    assert_eq!(
        user.capability("shop.sale").unwrap().unavailable_reason.as_deref(),
        Some("The sale opens to members first.")
    );
}

/// Counts decisions and holds each one until released.
struct Turnstile {
    decisions: AtomicUsize,
    gate: Semaphore,
}

impl AuthorityPolicy for Turnstile {
    fn name(&self) -> &str {
        "turnstile"
    }
    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(async move {
            self.decisions.fetch_add(1, Ordering::SeqCst);
            self.gate.acquire().await.map_err(|e| PolicyError::new(e.to_string()))?.forget();
            Ok(if call.capability == "shop.sale" { AuthorityDecision::Hide } else { AuthorityDecision::Allow })
        })
    }
}

#[tokio::test]
async fn hidden_and_never_existed_are_indistinguishable() {
    let clock = clock();
    let (r, mut mounts) = shop_with_engine(&clock);
    let who = signed_in("u", &[]);

    // Byte-identical payloads, with and without an invocation id.
    let never = r.invoke(call("admin.nothing", json!({})), who.clone()).await;
    let hidden = r.invoke(call("admin.audit", json!({})), who.clone()).await;
    assert_eq!(
        serde_json::to_vec(&never.without_correlation_id()).unwrap(),
        serde_json::to_vec(&hidden.without_correlation_id()).unwrap()
    );
    let never = r.invoke(call("admin.nothing", json!({})).with_invocation_id("i-1"), who.clone()).await;
    let hidden = r.invoke(call("admin.audit", json!({})).with_invocation_id("i-2"), who.clone()).await;
    assert_eq!(
        serde_json::to_string(&never.without_correlation_id()).unwrap().replace("i-1", "i-?"),
        serde_json::to_string(&hidden.without_correlation_id()).unwrap().replace("i-2", "i-?")
    );

    // A hidden capability does not show through resolve- or availability-phase errors either.
    let reference = serde_json::to_vec(&never.with_invocation_id(None).without_correlation_id()).unwrap();
    let probes = [
        call("admin.audit", json!({})),
        call("admin.audit", json!({})).with_target(Target::instance("ghost")),
        call("admin.audit", json!({})).with_surface("s-0000000000000000", 1),
        call("admin.audit", json!({})).with_target(Target::registration("r-unknown")),
    ];
    r.disable("admin.audit", "Maintenance.");
    for probe in probes {
        let got = r.invoke(probe.clone(), who.clone()).await;
        assert_eq!(serde_json::to_vec(&got.without_correlation_id()).unwrap(), reference, "{probe:?}");
    }
    r.enable("admin.audit");
    let second = r.mount("admin", "second").unwrap();
    let ambiguous = r.invoke(call("admin.audit", json!({})), who.clone()).await;
    assert_eq!(
        serde_json::to_vec(&ambiguous.without_correlation_id()).unwrap(),
        reference,
        "two instances, none named"
    );
    drop(second);
    mounts.truncate(1); // unmounts `admin`: a tombstone now matches
    let got = r.invoke(call("admin.audit", json!({})), who.clone()).await;
    assert_eq!(serde_json::to_vec(&got.without_correlation_id()).unwrap(), reference);
    let visible = r.invoke(call("admin.purge", json!({})), signed_in("a", &["admin"])).await;
    assert_eq!(visible.code(), Some(ErrorCode::ComponentUnmounted), "a visible capability reports the tombstone");
}

#[tokio::test]
async fn hidden_and_never_existed_take_the_same_path() {
    let clock = clock();
    let turnstile = Arc::new(Turnstile { decisions: AtomicUsize::new(0), gate: Semaphore::new(0) });
    let policies = Policies::default_allow().with_clock(clock.clone()).global(turnstile.clone());
    let (r, _m) = shop(RegistryConfig { authority: Some(Arc::new(policies)), ..config_with(&clock) });

    let mut payloads = Vec::new();
    for name in ["shop.sale", "shop.nothing", "nothing"] {
        let before = turnstile.decisions.load(Ordering::SeqCst);
        let task = {
            let r = r.clone();
            tokio::spawn(async move { r.invoke(call(name, json!({})), consumer("c")).await })
        };
        settle().await;
        // Both wait for the policy: no early return skips it for one of them.
        assert!(!task.is_finished(), "{name} answered without asking the policy");
        assert_eq!(turnstile.decisions.load(Ordering::SeqCst), before + 1, "{name}: exactly one decision");
        turnstile.gate.add_permits(1);
        payloads.push(serde_json::to_vec(&task.await.unwrap().without_correlation_id()).unwrap());
    }
    assert!(payloads.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(turnstile.decisions.load(Ordering::SeqCst), 3);
}

async fn denied_without_leaks(r: &Registry, capability: &str) {
    let inv = r.invoke_detailed(call(capability, json!({})), signed_in("u", &[])).await;
    let p = assert_produced(&inv, ErrorCode::NotAuthorized, Phase::Authority);
    assert_eq!(p.detail("origin"), Some(&json!("client")));
    let text = p.to_json().to_string();
    for secret in ["ldap", "secret.rules", "hangs", "panics", "failing", "budget"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

#[tokio::test]
async fn failing_panicking_and_hanging_policies_deny() {
    let (log, _guard) = Captured::install();
    let clock = clock();
    let failing = Misbehaving::fails("failing-ldap", "ldap://10.0.0.7 refused the bind");
    let panics_at_once = FnPolicy::new("panics-at-once", |call| {
        if call.capability == "shop.browse" {
            panic!("policy bug reading /etc/policy.d/secret.rules")
        }
        Ok(AuthorityDecision::Allow)
    });
    let policies = Policies::default_allow()
        .with_clock(clock.clone())
        .with_budget(Duration::from_millis(250))
        .for_capability("shop.browse", panics_at_once)
        .for_capability(
            "shop.sale",
            Misbehaving::panics_later("panics-later", "policy bug reading /etc/policy.d/secret.rules"),
        )
        .for_capability("admin.purge", failing)
        .for_capability("admin.audit", Misbehaving::hangs("hangs"));
    let (r, _m) = shop(RegistryConfig { authority: Some(Arc::new(policies)), ..config_with(&clock) });

    for capability in ["shop.browse", "shop.sale", "admin.purge"] {
        denied_without_leaks(&r, capability).await;
    }
    let hung = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke_detailed(call("admin.audit", json!({})), signed_in("u", &[])).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_millis(249));
    settle().await;
    assert!(!hung.is_finished(), "still within the budget");
    clock.advance(Duration::from_millis(1));
    let inv = hung.await.unwrap();
    assert_produced(&inv, ErrorCode::NotAuthorized, Phase::Authority);

    let log = log.text();
    for needle in
        ["panics-at-once", "panics-later", "failing-ldap", "ldap://10.0.0.7", "hangs", "250 ms", "secret.rules"]
    {
        assert!(log.contains(needle), "the operator channel names {needle}:\n{log}");
    }
}

#[tokio::test]
async fn a_single_policy_is_bounded_by_the_registry_budget() {
    let clock = clock();
    let (r, _m) = shop(RegistryConfig {
        authority: Some(Arc::new(Misbehaving::hangs("hangs"))),
        authority_budget: Duration::from_millis(100),
        ..config_with(&clock)
    });
    let hung = {
        let r = r.clone();
        tokio::spawn(async move { r.invoke_detailed(call("shop.browse", json!({})), signed_in("u", &[])).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_millis(100));
    assert_produced(&hung.await.unwrap(), ErrorCode::NotAuthorized, Phase::Authority);
    // Discovery is bounded too — by one budget for the whole snapshot — and shows a denied
    // capability (it does not hide it).
    let snapshot = {
        let r = r.clone();
        tokio::spawn(async move { r.snapshot(&Consumer::anonymous("c")).await })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_millis(100));
    assert_eq!(snapshot.await.unwrap().capabilities.len(), 4);
}

#[tokio::test]
async fn unknown_names_are_asked_about_as_calls_of_their_type() {
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let record = seen.clone();
    let policies = Policies::default_allow().global(FnPolicy::new("recorder", move |call| {
        record.lock().unwrap().push((call.capability.to_string(), call.type_id.to_string()));
        Ok(AuthorityDecision::Unauthenticated)
    }));
    let (r, _m) = shop(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    // The decision is computed but an unknown name stays CAPABILITY_NOT_FOUND, in resolve.
    let inv = r.invoke_detailed(InvokeRequest::new("admin.nothing", json!({})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Resolve);
    let inv = r.invoke_detailed(InvokeRequest::new("garbage", json!({})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Resolve);
    assert_eq!(
        *seen.lock().unwrap(),
        [("admin.nothing".to_string(), "admin".to_string()), ("garbage".to_string(), String::new())]
    );
}

#[tokio::test]
async fn a_policy_sees_the_resolved_target() {
    let seen: Arc<Mutex<Vec<Target>>> = Arc::default();
    let record = seen.clone();
    let policies = Policies::default_allow().global(FnPolicy::new("recorder", move |call| {
        record.lock().unwrap().push(Target {
            instance_id: call.instance_id.map(String::from),
            registration_id: call.registration_id.map(String::from),
        });
        Ok(AuthorityDecision::Allow)
    }));
    let (r, m) = shop(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    assert!(r.invoke(call("shop.browse", json!({})), consumer("c")).await.is_ok());
    let _ = r.snapshot(&Consumer::anonymous("c")).await;
    let seen = seen.lock().unwrap();
    let expected =
        Target { instance_id: Some("main".into()), registration_id: m[0].registration_id().map(String::from) };
    assert_eq!(seen[0], expected);
    // Discovery asks about each capability as a whole and about each of its live instances.
    let (whole, per_instance): (Vec<_>, Vec<_>) = seen[1..].iter().partition(|s| **s == Target::default());
    assert_eq!((whole.len(), per_instance.len()), (4, 4), "{seen:?}");
    assert!(per_instance.iter().all(|s| s.instance_id.as_deref() == Some("main")), "{seen:?}");
}

/// A policy that hides one instance from a consumer: discovery does not list that instance (nor
/// a capability left without a visible instance), and calling it is `CAPABILITY_NOT_FOUND`.
#[tokio::test]
async fn a_hidden_instance_is_not_listed() {
    let policies = Policies::default_allow().global(FnPolicy::new("hide-eu", |call| {
        Ok(if call.instance_id == Some("eu") { AuthorityDecision::Hide } else { AuthorityDecision::Allow })
    }));
    let (r, mounts) = shop(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    let _eu = r.mount("shop", "eu").unwrap();
    let _admin_eu = r.mount("admin", "eu").unwrap();
    drop(mounts);
    let _main = r.mount("shop", "main").unwrap();
    let snapshot = r.snapshot(&Consumer::anonymous("c")).await;
    let browse = snapshot.capability("shop.browse").expect("listed through main");
    let instances: Vec<&str> = browse.instances.iter().map(|i| i.instance_id.as_str()).collect();
    assert_eq!(instances, ["main"]);
    assert!(snapshot.capability("admin.purge").is_none(), "only a hidden instance is left");
    let hidden = call("shop.browse", json!({})).with_target(Target::instance("eu"));
    let inv = r.invoke_detailed(hidden, consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Authority);

    // Probes that stop after resolution found (or was named) the hidden instance are answered as
    // a name that never existed: no stale registration naming its live id, no stale tool version,
    // no disabled reason, no tombstone.
    let never = r.invoke(call("admin.never", json!({})), consumer("c")).await;
    let reference = serde_json::to_vec(&never.without_correlation_id()).unwrap();
    let same_as_never = |inv: Invocation, probe: &str| {
        assert_eq!(inv.result.code(), Some(ErrorCode::CapabilityNotFound), "{probe}: {:?}", inv.result);
        assert_eq!(serde_json::to_vec(&inv.result.without_correlation_id()).unwrap(), reference, "{probe}");
    };
    let replaced = Target { instance_id: Some("eu".into()), registration_id: Some("r-old".into()) };
    same_as_never(
        r.invoke_detailed(call("admin.purge", json!({})).with_target(replaced), consumer("c")).await,
        "registration",
    );
    let versioned = call("admin.purge", json!({})).with_tool_version("v-old");
    same_as_never(r.invoke_detailed(versioned, consumer("c")).await, "tool version");
    r.disable("admin.purge", "Purging is paused.");
    same_as_never(r.invoke_detailed(call("admin.purge", json!({})), consumer("c")).await, "disabled");
    let old = _admin_eu.registration_id().expect("mounted").to_string();
    drop(_admin_eu);
    let gone = call("admin.purge", json!({})).with_target(Target::instance("eu"));
    same_as_never(r.invoke_detailed(gone, consumer("c")).await, "unmounted");
    // The tombstone named by its registration alone, then once the instance is mounted again
    // (whose answer would name the new registration).
    let by_registration = || call("admin.purge", json!({})).with_target(Target::registration(old.clone()));
    same_as_never(r.invoke_detailed(by_registration(), consumer("c")).await, "tombstone by registration");
    let _again = r.mount("admin", "eu").unwrap();
    same_as_never(r.invoke_detailed(by_registration(), consumer("c")).await, "replaced, by registration");
}

/// `AMBIGUOUS_INSTANCE` lists only the instances the policy lets this consumer see, as discovery
/// does: a hidden instance is never named, one visible instance is the call's target, and none
/// visible is `CAPABILITY_NOT_FOUND`, as for a capability absent from the snapshot.
#[tokio::test]
async fn an_ambiguous_call_lists_only_visible_instances() {
    let policies = Policies::default_allow().global(FnPolicy::new("hide-secret", |call| {
        let hidden = match call.consumer.key() {
            "sees-none" => call.instance_id.is_some(),
            "sees-one" => call.instance_id.is_some_and(|i| i != "main"),
            _ => call.instance_id == Some("secret"),
        };
        Ok(if hidden { AuthorityDecision::Hide } else { AuthorityDecision::Allow })
    }));
    let (r, _mounts) = shop(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    let _eu = r.mount("shop", "eu").unwrap();
    let _secret = r.mount("shop", "secret").unwrap();

    let inv = r.invoke_detailed(call("shop.browse", json!({})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::AmbiguousInstance, Phase::Resolve);
    let listed: Vec<Value> = inv.result.error_payload().unwrap().details().unwrap()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["instanceId"].clone())
        .collect();
    assert_eq!(listed, [json!("eu"), json!("main")]);
    assert!(!serde_json::to_string(&inv.result).unwrap().contains("secret"), "a hidden instance is never named");
    let snapshot = r.snapshot(&Consumer::anonymous("c")).await;
    let shown: Vec<&str> =
        snapshot.capability("shop.browse").unwrap().instances.iter().map(|i| i.instance_id.as_str()).collect();
    assert_eq!(shown, ["eu", "main"], "the call and discovery agree");

    // One visible instance: the call runs against it.
    assert!(r.invoke(call("shop.browse", json!({})), consumer("sees-one")).await.is_ok());
    // None visible: the capability is absent from the snapshot, and a call is not found.
    assert!(r.snapshot(&Consumer::anonymous("sees-none")).await.capability("shop.browse").is_none());
    let inv = r.invoke_detailed(call("shop.browse", json!({})), consumer("sees-none")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Authority);
    let never = r.invoke(call("shop.nothing", json!({})), consumer("sees-none")).await;
    assert_eq!(
        serde_json::to_vec(&inv.result.without_correlation_id()).unwrap(),
        serde_json::to_vec(&never.without_correlation_id()).unwrap()
    );
}

/// A stuck policy costs discovery one authority budget in all, not one per capability: what the
/// snapshot has no time left for is denied (shown, refused when called), as a failed decision.
#[tokio::test]
async fn a_stuck_policy_costs_a_snapshot_one_budget() {
    let config = RegistryConfig {
        authority: Some(Arc::new(Misbehaving::hangs("hangs"))),
        authority_budget: Duration::from_millis(100),
        ..Default::default()
    };
    let (r, _m) = shop(config);
    let started = std::time::Instant::now();
    let snapshot = r.snapshot(&agent_surface_policy::Consumer::anonymous("c")).await;
    let took = started.elapsed();
    assert_eq!(snapshot.capabilities.len(), 4, "denied, not hidden, as a failed decision");
    // Four capabilities at 100 ms each would take 400 ms.
    assert!(took < Duration::from_millis(300), "the snapshot took {took:?}");
}

/// A policy that takes 50 ms per decision and hides the `admin` type.
fn slow_hide() -> Slow<FnPolicy<impl Fn(&CallInfo<'_>) -> Result<AuthorityDecision, PolicyError> + Send + Sync>> {
    let hide = FnPolicy::new("slow-hide", |call: &CallInfo<'_>| {
        Ok(if call.type_id == "admin" { AuthorityDecision::Hide } else { AuthorityDecision::Allow })
    });
    Slow::new(Duration::from_millis(50), hide)
}

/// A policy slow per decision but within the budget is asked about every capability at once, so
/// a snapshot does not run out of time and show what the policy would have hidden.
#[tokio::test]
async fn a_slow_policy_still_hides_in_a_snapshot() {
    let config = RegistryConfig {
        authority: Some(Arc::new(slow_hide())),
        authority_budget: Duration::from_millis(120),
        ..Default::default()
    };
    let (r, _m) = shop(config);
    let snapshot = r.snapshot(&agent_surface_policy::Consumer::anonymous("c")).await;
    let names: Vec<&str> = snapshot.capabilities.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["shop.browse", "shop.sale"], "four decisions of 50 ms fit one budget of 120 ms together");
}

/// The operator event of a denial names the policy that decided (inside the engine) and the role
/// it wanted; the agent's payload names neither.
#[test]
fn the_operator_note_names_the_deciding_policy_and_what_it_wanted() {
    let ((denied, anonymous), log) = capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let policies = Policies::default_allow().for_type("demo", RequireRole::new("agent"));
            let (r, _m) = echo_registry(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
            let denied =
                r.invoke_detailed(call("demo.echo", json!({"text": "a"})), signed_in("bob", &["viewer"])).await;
            let anonymous = r.invoke_detailed(call("demo.echo", json!({"text": "a"})), consumer("anon")).await;
            (denied, anonymous)
        })
    });
    assert_produced(&denied, ErrorCode::NotAuthorized, Phase::Authority);
    assert_produced(&anonymous, ErrorCode::NotAuthenticated, Phase::Authority);
    // The note is written as text (`note=…`), not as a quoted string.
    assert!(log.contains(r#"policy require-role denied: wants role "agent""#), "{log}");
    assert!(log.contains(r#"policy require-role refused an anonymous caller: wants role "agent""#), "{log}");
    for result in [&denied.result, &anonymous.result] {
        let wire = serde_json::to_string(result).unwrap();
        assert!(!wire.contains("require-role") && !wire.contains("agent\\\""), "{wire}");
    }
}

/// A policy whose decision at once is `at_once`'s, counting how often each way was asked; its
/// `decide` hides `admin.*` and allows the rest.
struct DecidesAtOnce {
    at_once: fn(&CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>>,
    asked_at_once: AtomicUsize,
    awaited: AtomicUsize,
}

impl AuthorityPolicy for DecidesAtOnce {
    fn name(&self) -> &str {
        "decides-at-once"
    }

    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        self.awaited.fetch_add(1, Ordering::SeqCst);
        let hidden = call.capability.starts_with("admin.");
        Box::pin(std::future::ready(Ok(if hidden { AuthorityDecision::Hide } else { AuthorityDecision::Allow })))
    }

    fn decide_at_once(&self, call: &CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> {
        self.asked_at_once.fetch_add(1, Ordering::SeqCst);
        (self.at_once)(call)
    }
}

/// Phase 4 and discovery ask a policy's decision at once first and await `decide` only when it
/// has none; a decision at once is taken as `decide`'s would be (a hidden capability is not
/// found, a panic denies with nothing of it in the answer).
#[tokio::test]
async fn a_policy_that_decides_at_once_is_not_awaited() {
    let policy =
        |at_once| Arc::new(DecidesAtOnce { at_once, asked_at_once: AtomicUsize::new(0), awaited: AtomicUsize::new(0) });
    let counts = |p: &DecidesAtOnce| (p.asked_at_once.load(Ordering::SeqCst), p.awaited.load(Ordering::SeqCst));
    let hides_admin: fn(&CallInfo<'_>) -> Option<Result<AuthorityDecision, PolicyError>> = |call| {
        Some(Ok(if call.capability.starts_with("admin.") { AuthorityDecision::Hide } else { AuthorityDecision::Allow }))
    };
    let decides = policy(hides_admin);
    let (r, _m) = shop(RegistryConfig { authority: Some(decides.clone()), ..Default::default() });
    assert!(r.invoke(call("shop.browse", json!({})), signed_in("u", &[])).await.is_ok());
    let inv = r.invoke_detailed(call("admin.purge", json!({})), signed_in("u", &[])).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Authority);
    assert_eq!(counts(&decides), (2, 0), "decided at once, never awaited");
    let listed = r.snapshot(&signed_in("u", &[]).consumer).await;
    assert!(listed.capability("shop.browse").is_some() && listed.capability("admin.purge").is_none());
    assert_eq!(counts(&decides).1, 0, "discovery did not await either");

    let awaits = policy(|_| None);
    let (r, _m) = shop(RegistryConfig { authority: Some(awaits.clone()), ..Default::default() });
    let inv = r.invoke_detailed(call("admin.purge", json!({})), signed_in("u", &[])).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Authority);
    assert!(r.invoke(call("shop.browse", json!({})), signed_in("u", &[])).await.is_ok());
    assert_eq!(counts(&awaits), (2, 2), "no decision at once: awaited");

    let (log, _guard) = Captured::install();
    let panics = policy(|_| panic!("policy bug reading /etc/policy.d/secret.rules"));
    let (r, _m) = shop(RegistryConfig { authority: Some(panics.clone()), ..Default::default() });
    denied_without_leaks(&r, "shop.browse").await;
    assert_eq!(counts(&panics), (1, 0));
    // The operator channel has the one event a panic in `decide` gives: an ERROR naming the policy.
    let log = log.text();
    assert_eq!(log.matches("authority policy panicked; denying").count(), 1, "{log}");
    assert!(
        log.contains("ERROR") && log.contains("policy=\"decides-at-once\"") && log.contains("secret.rules"),
        "{log}"
    );
    assert!(log.contains("consumer=\"u\""), "the event names the consumer, as the engine's do: {log}");
}
