//! Wiring that fails closed: every name a policy, a quota, a confirmation rule or a binding
//! targets must exist; a misspelled one is a definition error naming the closest name. And the
//! authority engine's two fallbacks, default-allow and default-deny, through the registry.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, DefinitionError, DefinitionErrorCode, ErrorCode, Phase, SafeText};
use agent_surface_policy::{
    AllowAll, ConfirmationConfig, ConfirmationEngine, Consumer, FnConfirmationPolicy, Gate, Identity,
    MemoryRateLimiter, Policies, Quorum, Quota, RateLimitConfig, RequireRole, Scope,
};
use agent_surface_registry::{Binding, Ctx, InvokeOptions, Mount, Registry, RegistryConfig};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

#[derive(Debug, Deserialize, JsonSchema)]
struct NewTicket {
    title: String,
    #[expect(dead_code, reason = "bound from the consumer; the test only needs the field to exist")]
    reporter: String,
}

/// Defines `tickets` (`create`, `list`) and `orders` (`cancel`) in a registry with `config`.
fn define(config: RegistryConfig) -> Result<Registry, DefinitionError> {
    let registry = Registry::new(config);
    registry.define("tickets", |t| {
        t.capability("create", "Open a ticket.")
            .handler(|_: Ctx, i: NewTicket| async move { Ok::<_, AgentSurfaceError>(json!({"title": i.title})) });
        t.capability("list", "List the tickets.")
            .handler(|_: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!([])) });
    })?;
    registry.define("orders", |t| {
        t.capability("cancel", "Cancel an order.")
            .handler(|_: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
    })?;
    Ok(registry)
}

/// [`define`], for wiring that is right.
fn tickets(config: RegistryConfig) -> Registry {
    define(config).expect("the types are valid")
}

/// [`define`], then a mount of each type: what a service does at start-up.
fn assemble(config: RegistryConfig) -> Result<(Registry, Vec<Mount>), DefinitionError> {
    let registry = define(config)?;
    let mounts = vec![registry.mount("tickets", "main")?, registry.mount("orders", "main")?];
    Ok((registry, mounts))
}

/// Asserts that `result` is an `INVALID_DEFINITION` at `location` whose problem contains each of
/// `says`.
#[track_caller]
fn check<T: std::fmt::Debug>(result: Result<T, DefinitionError>, location: &str, says: &[&str]) {
    let err = result.expect_err("the wiring names something that does not exist");
    assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition, "{err}");
    assert_eq!(err.location(), location, "{err}");
    for part in says {
        assert!(err.problem().contains(part), "{err} should say {part:?}");
    }
}

fn authority(policies: Policies) -> RegistryConfig {
    RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() }
}

fn per_minute(n: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(n).expect("positive"))
}

#[test]
fn a_misspelled_policy_target_is_a_definition_error() {
    // The capability, misspelled in its type: checked when the registry is assembled (mount).
    let registry =
        tickets(authority(Policies::default_allow().for_capability("ticket.create", RequireRole::new("agent"))));
    check(registry.check_wiring(), "ticket.create", &["an authority policy", "did you mean `tickets.create`?"]);
    check(registry.mount("tickets", "main"), "ticket.create", &["did you mean `tickets.create`?"]);
    check(registry.mount("orders", "main"), "ticket.create", &[]);

    // A type.
    let registry = tickets(authority(Policies::default_allow().for_type("ticket", RequireRole::new("agent"))));
    check(registry.mount("tickets", "main"), "ticket", &["type `ticket`", "did you mean `tickets`?"]);

    // The tool name where the capability name belongs.
    let config = authority(Policies::default_allow().for_capability("tickets-create", RequireRole::new("agent")));
    check(assemble(config), "tickets-create", &["tool name", "did you mean `tickets.create`?"]);

    // In an engine nested in another.
    let inner = Policies::default_allow().for_capability("orders.cancle", RequireRole::new("agent"));
    check(
        assemble(authority(Policies::default_allow().global(inner))),
        "orders.cancle",
        &["did you mean `orders.cancel`?"],
    );
}

#[test]
fn a_misspelled_capability_of_a_type_is_refused_when_the_type_is_defined() {
    let policies = Policies::default_allow().for_capability("tickets.craete", RequireRole::new("agent"));
    let registry = Registry::new(authority(policies));
    let defined = registry.define("tickets", |t| {
        t.capability("create", "Open a ticket.")
            .handler(|_: Ctx, i: NewTicket| async move { Ok::<_, AgentSurfaceError>(json!({"title": i.title})) });
    });
    check(defined, "tickets.craete", &["did you mean `tickets.create`?"]);
    assert_eq!(registry.capability_count(), 0, "nothing of the type is registered");
}

#[test]
fn a_misspelled_quota_target_is_a_definition_error() {
    let limiter = |config: RateLimitConfig| {
        assemble(RegistryConfig { rate_limiter: Some(Arc::new(MemoryRateLimiter::new(config))), ..Default::default() })
    };
    // Per consumer for one capability.
    let config = RateLimitConfig {
        consumer_quotas: HashMap::from([(Scope::capability("ticket.create"), per_minute(5))]),
        ..Default::default()
    };
    check(limiter(config), "ticket.create", &["a rate budget", "`tickets.create`"]);
    // Per consumer for one type.
    let config = RateLimitConfig {
        consumer_quotas: HashMap::from([(Scope::capability_type("tikets"), per_minute(5))]),
        ..Default::default()
    };
    check(limiter(config), "tikets", &["did you mean `tickets`?"]);
    // A capability's own budget.
    let config =
        RateLimitConfig { capability_quotas: HashMap::from([("orders.cancell".into(), None)]), ..Default::default() };
    check(limiter(config), "orders.cancell", &["did you mean `orders.cancel`?"]);
}

#[test]
fn a_misspelled_confirmation_rule_target_is_a_definition_error() {
    let rule = FnConfirmationPolicy::new("cancellations", |_call| {
        Ok(Gate::Confirm { summary: SafeText::from("Cancel the order.") })
    })
    .for_capability("order.cancel");
    let engine = ConfirmationEngine::new(ConfirmationConfig { policies: vec![Arc::new(rule)], ..Default::default() });
    let config = RegistryConfig { confirmation: Some(Arc::new(engine)), ..Default::default() };
    check(assemble(config), "order.cancel", &["a confirmation rule", "did you mean `orders.cancel`?"]);
}

#[test]
fn a_misspelled_quorum_target_is_a_definition_error() {
    let engine = |quorums| {
        let engine = ConfirmationEngine::new(ConfirmationConfig { quorums, ..Default::default() });
        assemble(RegistryConfig { confirmation: Some(Arc::new(engine)), ..Default::default() })
    };
    let two = Quorum::of(2);
    let misspelled = engine(vec![(Scope::capability("orders.cancle"), two.clone())]);
    check(misspelled, "orders.cancle", &["a confirmation rule", "did you mean `orders.cancel`?"]);
    let misspelled = engine(vec![(Scope::capability_type("order"), two.clone())]);
    check(misspelled, "order", &["type `order`", "did you mean `orders`?"]);
    assert!(engine(vec![(Scope::capability("orders.cancel"), two)]).is_ok(), "a quorum that names a capability");
}

/// A quorum that can never be met is refused like a misspelled name: when its type is defined
/// and on every mount, naming the scope and what is wrong.
#[test]
fn an_unsatisfiable_quorum_is_a_definition_error() {
    let config = |quorum: Quorum| {
        let quorums = vec![(Scope::capability("orders.cancel"), quorum)];
        RegistryConfig {
            confirmation: Some(Arc::new(ConfirmationEngine::new(ConfirmationConfig { quorums, ..Default::default() }))),
            ..Default::default()
        }
    };
    let three_of_two = Quorum::of(3).with_approver("alice").with_approver("bob");
    // At the definition of its type.
    check(
        define(config(three_of_two.clone())),
        "orders.cancel",
        &["capability `orders.cancel`", "3 approvals of 2 named approvers"],
    );
    // On a mount, when the type was defined before the rule could be checked (a late type).
    let late = Registry::new(RegistryConfig { late_types: vec!["orders".into()], ..config(three_of_two) });
    late.define("tickets", |t| {
        t.capability("list", "List the tickets.")
            .handler(|_: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!([])) });
    })
    .unwrap();
    assert!(late.mount("tickets", "main").is_ok(), "the rule waits for its late type");
    let defined = late.define("orders", |t| {
        t.capability("cancel", "Cancel an order.")
            .handler(|_: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
    });
    check(defined, "orders.cancel", &["3 approvals of 2 named approvers"]);
    for (quorum, says) in [
        (Quorum::of(0), "0 approvals"),
        (Quorum::of(17), "at most 16"),
        (Quorum::of(1).with_role(""), "empty role"),
        (Quorum::default().with_slot(" "), "empty role"),
        (
            Quorum { approvals: 1, slots: vec!["manager".into(), "security".into()], ..Quorum::default() },
            "2 role slots for 1 approval",
        ),
        (Quorum::of(2).with_approver("bob").with_approver("b\u{043e}b"), "twice"),
    ] {
        check(assemble(config(quorum)), "orders.cancel", &["its quorum", says]);
    }
    let sound = Quorum::of(2).with_approver("alice").with_approver("bob").with_approver("carol");
    assert!(assemble(config(sound)).is_ok(), "2 of 3 named approvers");
    let slots = Quorum::default().with_slot("manager").with_slot("security");
    assert!(assemble(config(slots)).is_ok(), "one manager and one security officer");
}

#[test]
fn a_misspelled_binding_target_is_a_definition_error() {
    let registry = Registry::new(RegistryConfig::default());
    let defined = registry.define("tickets", |t| {
        t.capability("create", "Open a ticket.")
            .bind("reportr", Binding::from_consumer(|c| c.identity().map(|i| json!(i.subject))))
            .handler(|_: Ctx, i: NewTicket| async move { Ok::<_, AgentSurfaceError>(json!({"title": i.title})) });
    });
    check(defined, "tickets.create", &["bound field `reportr`", "did you mean `reporter`?"]);
}

#[tokio::test]
async fn correct_wiring_mounts_and_applies() {
    let rule = FnConfirmationPolicy::new("cancellations", |_call| {
        Ok(Gate::Confirm { summary: SafeText::from("Cancel the order.") })
    })
    .for_type("orders");
    let config = RegistryConfig {
        authority: Some(Arc::new(
            Policies::default_allow().for_capability("tickets.create", RequireRole::new("agent")),
        )),
        rate_limiter: Some(Arc::new(MemoryRateLimiter::new(RateLimitConfig {
            consumer_quotas: HashMap::from([(Scope::capability("tickets.list"), per_minute(5))]),
            ..Default::default()
        }))),
        confirmation: Some(Arc::new(ConfirmationEngine::new(ConfirmationConfig {
            policies: vec![Arc::new(rule)],
            ..Default::default()
        }))),
        ..Default::default()
    };
    let registry = tickets(config);
    registry.check_wiring().expect("every name exists");
    let _tickets = registry.mount("tickets", "main").expect("mounts");
    let _orders = registry.mount("orders", "main").expect("mounts");
    // The scoped confirmation rule asks about orders only.
    let listed = registry.invoke_detailed(call("tickets.list", json!({})), consumer("c-1")).await;
    assert!(listed.result.is_ok(), "{:?}", listed.result);
    let cancel = registry.invoke_detailed(call("orders.cancel", json!({})), consumer("c-1")).await;
    assert_eq!(cancel.result.code(), Some(ErrorCode::ConfirmationRequired));
}

fn signed_in(key: &str, roles: &[&str]) -> InvokeOptions {
    let identity = roles.iter().fold(Identity::new(format!("user-{key}")), |id, role| id.with_role(*role));
    InvokeOptions::new(Consumer::authenticated(key, identity))
}

#[tokio::test]
async fn default_deny_refuses_a_capability_no_policy_names() {
    let policies = Policies::default_deny()
        .for_capability("tickets.create", RequireRole::new("agent"))
        .for_type("orders", AllowAll);
    let registry = tickets(authority(policies));
    let _tickets = registry.mount("tickets", "main").expect("mounts");
    let _orders = registry.mount("orders", "main").expect("mounts");
    let agent = || signed_in("a-1", &["agent"]);

    // No policy names `tickets.list`: refused, for everyone.
    let refused = registry.invoke_detailed(call("tickets.list", json!({})), agent()).await;
    let payload = assert_produced(&refused, ErrorCode::NotAuthorized, Phase::Authority);
    assert_eq!(payload.detail("origin"), Some(&json!("client")));
    // Named ones follow their policies.
    let created = registry.invoke(call("tickets.create", json!({"title": "t", "reporter": "r"})), agent()).await;
    assert!(created.is_ok(), "{created:?}");
    let other =
        registry.invoke(call("tickets.create", json!({"title": "t", "reporter": "r"})), signed_in("a-2", &[])).await;
    assert_eq!(other.code(), Some(ErrorCode::NotAuthorized));
    assert!(registry.invoke(call("orders.cancel", json!({})), consumer("anyone")).await.is_ok());
    // Discovery lists the refused capability as it lists any denied one.
    let snapshot = registry.snapshot(&Consumer::anonymous("anyone")).await;
    assert!(snapshot.capabilities.iter().any(|c| c.name == "tickets.list"));
}

#[tokio::test]
async fn default_allow_is_unchanged() {
    let policies = Policies::default_allow().for_capability("tickets.create", RequireRole::new("agent"));
    let registry = tickets(authority(policies));
    let _tickets = registry.mount("tickets", "main").expect("mounts");
    // Not named: allowed, as before.
    assert!(registry.invoke(call("tickets.list", json!({})), consumer("anyone")).await.is_ok());
    // Named: its policy decides.
    let refused =
        registry.invoke(call("tickets.create", json!({"title": "t", "reporter": "r"})), consumer("anyone")).await;
    assert_eq!(refused.code(), Some(ErrorCode::NotAuthenticated));
}

/// A registry whose hooks name `tickets` before it is defined, with `late_types` as given:
/// `orders` is defined, `tickets` not yet.
fn before_tickets(policies: Policies, late_types: &[&str]) -> Registry {
    let late_types = late_types.iter().map(|t| t.to_string()).collect();
    let registry =
        Registry::new(RegistryConfig { authority: Some(Arc::new(policies)), late_types, ..Default::default() });
    registry
        .define("orders", |t| {
            t.capability("cancel", "Cancel an order.")
                .handler(|_: Ctx, _: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
        })
        .expect("orders is valid");
    registry
}

/// Defines `tickets` with `create` (the later definition [`before_tickets`] waits for).
fn define_tickets(registry: &Registry) -> Result<(), DefinitionError> {
    registry.define("tickets", |t| {
        t.capability("create", "Open a ticket.")
            .handler(|_: Ctx, i: NewTicket| async move { Ok::<_, AgentSurfaceError>(json!({"title": i.title})) });
    })
}

#[tokio::test]
async fn a_type_declared_late_is_checked_when_it_is_defined() {
    let policies = || {
        Policies::default_deny()
            .for_type("orders", AllowAll)
            .for_type("tickets", RequireRole::new("agent"))
            .for_capability("tickets.create", AllowAll)
    };
    // Undeclared, the names under `tickets` must exist at every mount.
    let registry = before_tickets(policies(), &[]);
    check(registry.mount("orders", "main"), "tickets", &["type `tickets`", "not defined"]);

    // Declared: earlier mounts do not wait for it, and they serve.
    let registry = before_tickets(policies(), &["tickets"]);
    let _orders = registry.mount("orders", "main").expect("the names under `tickets` wait for its definition");
    assert!(registry.invoke(call("orders.cancel", json!({})), consumer("anyone")).await.is_ok());
    // Until it is defined, start-up is not over: `check_wiring` says so, and which hooks name it.
    check(
        registry.check_wiring(),
        "tickets",
        &["`RegistryConfig::late_types` declares type `tickets`", "an authority policy names it"],
    );
    // Its definition checks the names under it; then everything is wired.
    define_tickets(&registry).expect("every name under `tickets` exists");
    registry.check_wiring().expect("every name exists");
    let _tickets = registry.mount("tickets", "main").expect("mounts");
    let agent = signed_in("a-1", &["agent"]);
    let created = registry.invoke(call("tickets.create", json!({"title": "t", "reporter": "r"})), agent).await;
    assert!(created.is_ok(), "{created:?}");
    let refused =
        registry.invoke(call("tickets.create", json!({"title": "t", "reporter": "r"})), consumer("anyone")).await;
    assert_eq!(refused.code(), Some(ErrorCode::NotAuthenticated), "the type's policy applies");
}

#[test]
fn a_misspelled_name_under_a_late_type_is_refused_when_the_type_is_defined() {
    let policies = Policies::default_allow().for_capability("tickets.crate", RequireRole::new("agent"));
    let registry = before_tickets(policies, &["tickets"]);
    let _orders = registry.mount("orders", "main").expect("`tickets` is declared late");
    check(define_tickets(&registry), "tickets.crate", &["an authority policy", "did you mean `tickets.create`?"]);
    assert!(registry.mount("tickets", "main").is_err(), "nothing of the type is registered");
    check(registry.check_wiring(), "tickets", &["declares type `tickets`, which is not defined"]);
}

#[test]
fn a_late_type_never_defined_is_reported_by_check_wiring() {
    // Declared under a name the application never defines (it defines `orders`): mounts pass,
    // `check_wiring` names the closest defined type.
    let policies = Policies::default_allow().for_type("order", RequireRole::new("agent"));
    let registry = before_tickets(policies, &["order"]);
    let _orders = registry.mount("orders", "main").expect("`order` is declared late");
    check(
        registry.check_wiring(),
        "order",
        &["`RegistryConfig::late_types` declares type `order`, which is not defined", "did you mean `orders`?"],
    );
    // A declared type no hook names is still one the application promised to define.
    let registry = before_tickets(Policies::default_allow(), &["tickets"]);
    check(registry.check_wiring(), "tickets", &["declares type `tickets`"]);
    define_tickets(&registry).expect("valid");
    registry.check_wiring().expect("every declared type is defined");
    // A declared type that could never be defined fails every mount.
    let registry = before_tickets(Policies::default_allow(), &["Tickets"]);
    let err = registry.mount("orders", "main").expect_err("`Tickets` is not a type id");
    assert_eq!(err.location(), "Tickets", "{err}");
}

#[test]
fn a_misspelled_type_that_is_not_declared_late_stays_a_definition_error_at_mount() {
    // `tickets` is declared late, the policy names `ticket.create`: not under a declared type.
    let policies = Policies::default_allow().for_capability("ticket.create", RequireRole::new("agent"));
    let registry = before_tickets(policies, &["tickets"]);
    check(registry.mount("orders", "main"), "ticket.create", &["an authority policy", "which is not defined"]);
    // Once `tickets` is defined the closest name is the capability.
    define_tickets(&registry).expect("no name under `tickets` is wrong");
    check(registry.mount("tickets", "main"), "ticket.create", &["did you mean `tickets.create`?"]);
    check(registry.check_wiring(), "ticket.create", &["did you mean `tickets.create`?"]);
}

/// The wiring report names a part that reads another clock than the registry, and an audit trail
/// the registry and the confirmation engine do not share; clones of one manual clock are one
/// clock, and the system clock is one wherever it is made.
#[test]
fn clocks_and_audit_sinks_that_differ_are_reported() {
    use agent_surface_policy::{AuditConfig, AuditSink, ManualClock, MemoryAuditSink};
    use agent_surface_registry::WiringWarning;

    let registry_clock = clock();
    let other: Arc<ManualClock> = clock();
    let engine = |clock: Arc<ManualClock>, audit: Option<Arc<dyn AuditSink>>| -> Arc<ConfirmationEngine> {
        Arc::new(ConfirmationEngine::new(ConfirmationConfig { clock, audit, ..Default::default() }))
    };
    // A limiter and an engine on another manual clock, an engine with a sink the registry lacks.
    let sink: Arc<dyn AuditSink> = Arc::new(MemoryAuditSink::default());
    let mixed = Registry::new(RegistryConfig {
        rate_limiter: Some(Arc::new(MemoryRateLimiter::new(RateLimitConfig {
            clock: other.clone(),
            ..Default::default()
        }))),
        confirmation: Some(engine(other, Some(sink.clone()))),
        ..config_with(&registry_clock)
    });
    let warnings = mixed.wiring_warnings();
    assert_eq!(
        warnings,
        [
            WiringWarning::ClockDiffers { part: "rate limiter" },
            WiringWarning::ClockDiffers { part: "confirmation engine" },
            WiringWarning::AuditNotShared,
        ]
    );
    assert!(warnings[0].to_string().contains("RegistryConfig::clock"), "{}", warnings[0]);
    // One clock (a clone of the registry's) and one sink everywhere: nothing to report.
    let whole = Registry::new(RegistryConfig {
        audit: Some(AuditConfig::new(sink.clone())),
        confirmation: Some(engine(Arc::new((*registry_clock).clone()), Some(sink))),
        ..config_with(&registry_clock)
    });
    assert_eq!(whole.wiring_warnings(), []);
    // The defaults: system clocks made apart are one clock.
    let defaults = Registry::new(RegistryConfig {
        confirmation: Some(Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()))),
        ..Default::default()
    });
    assert_eq!(defaults.wiring_warnings(), []);
}

/// The builder wires every part once: the registry, the engine and the limiter read one clock,
/// the registry and the engine write one audit trail, the stores come from one bundle, and the
/// budgets hold.
#[tokio::test]
async fn the_service_builder_wires_every_part_once() {
    use agent_surface_policy::{AuditSink, MemoryAuditSink, RateBudgets, Stores, clock::same_time};
    use agent_surface_registry::ServiceBuilder;

    let clock = clock();
    let sink: Arc<dyn AuditSink> = Arc::new(MemoryAuditSink::default());
    let one = Quota::per_minute(NonZeroU32::new(1).unwrap());
    let service = ServiceBuilder::new()
        .clock(clock.clone())
        .stores(Stores::memory())
        .audit(sink.clone())
        .approval_base_url("https://desk.example/inbox/c")
        .authority(Policies::default_deny().for_type("demo", AllowAll))
        .rate_budgets(RateBudgets {
            consumer_quotas: HashMap::from([(Scope::capability("demo.echo"), one)]),
            ..Default::default()
        })
        .build();
    assert_eq!(service.registry.wiring_warnings(), []);
    let engine = service.confirmations.config();
    let clock_dyn: Arc<dyn agent_surface_policy::Clock> = clock.clone();
    assert!(same_time(&engine.clock, &clock_dyn), "the engine reads the service's clock");
    assert!(engine.audit.as_ref().is_some_and(|a| Arc::ptr_eq(a, &sink)), "one trail");
    assert_eq!(engine.approval_base_url.as_deref(), Some("https://desk.example/inbox/c"));

    service
        .registry
        .define("demo", |t| {
            t.capability("echo", "Echo the text back.")
                .effect(agent_surface_core::Effect::Read)
                .handler(|_c: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) })
        })
        .unwrap();
    let _mount = service.registry.mount("demo", "main").unwrap();
    let alice = || InvokeOptions::new(Consumer::authenticated("s", Identity::new("alice")));
    let echo = || call("demo.echo", json!({"text": "a"}));
    assert!(service.registry.invoke(echo(), alice()).await.output().is_some());
    // The budget is the builder's, on the builder's clock.
    let limited = service.registry.invoke_detailed(echo(), alice()).await;
    assert_produced(&limited, ErrorCode::RateLimited, Phase::Rate);
    clock.advance(std::time::Duration::from_secs(60));
    assert!(service.registry.invoke(echo(), alice()).await.output().is_some());
}

/// A builder given no authority policy opens nothing: every call is refused, never allowed by
/// omission.
#[tokio::test]
async fn a_service_built_without_authority_refuses_every_call() {
    let service = agent_surface_registry::ServiceBuilder::new().build();
    service
        .registry
        .define("demo", |t| {
            t.capability("echo", "Echo the text back.")
                .effect(agent_surface_core::Effect::Read)
                .handler(|_c: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) })
        })
        .unwrap();
    let _mount = service.registry.mount("demo", "main").unwrap();
    let alice = InvokeOptions::new(Consumer::authenticated("s", Identity::new("alice")));
    let refused = service.registry.invoke(call("demo.echo", json!({"text": "a"})), alice).await;
    assert!(refused.error_payload().is_some(), "{refused:?}");
}
