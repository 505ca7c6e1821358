//! The reserved target argument (`_instance`): listed for a capability several visible instances
//! can handle, lifted into the call's target on every call, and hostile values refused.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, DefinitionErrorCode, ErrorCode, Phase};
use agent_surface_policy::{AuthorityDecision, Consumer, FnPolicy, Policies};
use agent_surface_registry::{Ctx, Instance, Registry, RegistryConfig, TARGET_ARGUMENT, Target};
use serde_json::{Value, json};

use crate::support::*;

/// `demo.where` answers the instance it ran on.
fn registry(config: RegistryConfig) -> Registry {
    let r = Registry::new(config);
    r.define("demo", |t| {
        t.capability("where", "Say where the call ran.")
            .handler(|c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"ran": c.instance_id()})) })
    })
    .unwrap();
    r
}

fn ran_on(result: &agent_surface_core::InvokeResult) -> &str {
    result.output().and_then(|o| o["ran"].as_str()).unwrap_or_else(|| panic!("not ok: {result:?}"))
}

#[tokio::test]
async fn listed_only_for_several_instances_and_lifted_into_the_target() {
    let r = registry(RegistryConfig::default());
    let _main = r.mount("demo", "main").unwrap();
    let single = r.snapshot(&Consumer::anonymous("c")).await;
    let schema = &single.capability("demo.where").unwrap().input_schema;
    assert!(schema.pointer(&format!("/properties/{TARGET_ARGUMENT}")).is_none(), "{schema}");

    let _side = r.mount_with("demo", "side", Instance::new().description("The side board")).unwrap();
    let snapshot = r.snapshot(&Consumer::anonymous("c")).await;
    let schema = &snapshot.capability("demo.where").unwrap().input_schema;
    let argument = &schema["properties"][TARGET_ARGUMENT];
    assert_eq!(argument["type"], "string");
    assert_eq!(argument["enum"], json!(["main", "side"]));
    assert!(argument["description"].as_str().unwrap().contains("side: The side board"), "{argument}");
    assert!(!schema["required"].as_array().is_some_and(|r| r.contains(&json!(TARGET_ARGUMENT))), "optional");

    // AMBIGUOUS_INSTANCE says to set it, and lists the values.
    let inv = r.invoke_detailed(call("demo.where", json!({})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::AmbiguousInstance, Phase::Resolve);
    assert!(p.message().contains(TARGET_ARGUMENT), "{}", p.message());
    let ids: Vec<&Value> =
        p.details().unwrap()["instances"].as_array().unwrap().iter().map(|i| &i["instanceId"]).collect();
    assert_eq!(ids, [&json!("main"), &json!("side")]);

    // Set as an argument, it is the target; it agrees with a target named the same; null is absent.
    let side = json!({TARGET_ARGUMENT: "side"});
    assert_eq!(ran_on(&r.invoke(call("demo.where", side.clone()), consumer("c")).await), "side");
    let both = call("demo.where", side).with_target(Target::instance("side"));
    assert_eq!(ran_on(&r.invoke(both, consumer("c")).await), "side");
    let inv = r.invoke_detailed(call("demo.where", json!({TARGET_ARGUMENT: null})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::AmbiguousInstance, Phase::Resolve);
    // With a registration id only, the argument names the instance.
    let by_registration = call("demo.where", json!({TARGET_ARGUMENT: "main"}))
        .with_target(Target::registration(_main.registration_id().unwrap()));
    assert_eq!(ran_on(&r.invoke(by_registration, consumer("c")).await), "main");
}

/// Both ways of naming the target are one call: the same invocation id replays, not conflicts.
#[tokio::test]
async fn both_ways_of_naming_the_target_fingerprint_alike() {
    let r = registry(RegistryConfig::default());
    let (_a, _b) = (r.mount("demo", "main").unwrap(), r.mount("demo", "side").unwrap());
    let first = call("demo.where", json!({TARGET_ARGUMENT: "side"})).with_invocation_id("i-1");
    let first = r.invoke_detailed(first, consumer("c")).await;
    let again = call("demo.where", json!({})).with_target(Target::instance("side")).with_invocation_id("i-1");
    let again = r.invoke_detailed(again, consumer("c")).await;
    assert!(again.replayed, "{:?}", again.result);
    assert_eq!(again.result, first.result);
}

#[tokio::test]
async fn hostile_values_are_refused() {
    let policies = Policies::default_allow().global(FnPolicy::new("hide-secret", |call| {
        Ok(if call.instance_id == Some("secret") { AuthorityDecision::Hide } else { AuthorityDecision::Allow })
    }));
    let r = registry(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    let _m = [r.mount("demo", "main").unwrap(), r.mount("demo", "side").unwrap(), r.mount("demo", "secret").unwrap()];

    // Not a string: no target (the call stays ambiguous, phase 2 reports first); with one named
    // otherwise, INVALID_INPUT at the argument, whatever its type.
    let inv = r.invoke_detailed(call("demo.where", json!({TARGET_ARGUMENT: 5})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::AmbiguousInstance, Phase::Resolve);
    let main = Target::registration(_m[0].registration_id().unwrap());
    for value in [json!(5), json!(["main"]), json!({"instanceId": "main"}), json!(true)] {
        let named = call("demo.where", json!({TARGET_ARGUMENT: value})).with_target(main.clone());
        let inv = r.invoke_detailed(named, consumer("c")).await;
        let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
        assert_eq!(p.details().unwrap()["issues"][0]["path"], format!("/{TARGET_ARGUMENT}"));
        assert!(p.detail("reason").is_none());
    }
    // Disagreeing with the target: INVALID_INPUT {reason: target-mismatch}, nothing run.
    let two_ways = call("demo.where", json!({TARGET_ARGUMENT: "main"})).with_target(Target::instance("side"));
    let inv = r.invoke_detailed(two_ways, consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("target-mismatch")));
    assert_eq!(p.details().unwrap()["issues"][0]["path"], format!("/{TARGET_ARGUMENT}"));

    // An unknown id and a hidden one are the same answer, byte for byte.
    let unknown = r.invoke(call("demo.where", json!({TARGET_ARGUMENT: "nowhere"})), consumer("c")).await;
    let hidden = r.invoke(call("demo.where", json!({TARGET_ARGUMENT: "secret"})), consumer("c")).await;
    assert_eq!(unknown.code(), Some(ErrorCode::CapabilityNotFound));
    assert_eq!(
        serde_json::to_vec(&unknown.without_correlation_id()).unwrap(),
        serde_json::to_vec(&hidden.without_correlation_id()).unwrap()
    );
    // Hostile strings are an unknown instance, never echoed.
    for id in ["", "\u{202e}evil", &"x".repeat(100_000), "main\"}"] {
        let result = r.invoke(call("demo.where", json!({TARGET_ARGUMENT: id})), consumer("c")).await;
        assert_eq!(result.code(), Some(ErrorCode::CapabilityNotFound), "{id:.20}");
    }
    // The listing shows only what this consumer sees.
    let snapshot = r.snapshot(&Consumer::anonymous("c")).await;
    let argument = &snapshot.capability("demo.where").unwrap().input_schema["properties"][TARGET_ARGUMENT];
    assert_eq!(argument["enum"], json!(["main", "side"]));
}

#[test]
fn an_input_schema_may_not_declare_the_argument() {
    let r = Registry::new(RegistryConfig::default());
    let schema = json!({"type": "object", "properties": {TARGET_ARGUMENT: {"type": "string"}}});
    let err = r
        .define("demo", |t| {
            t.capability("bad", "Declares the reserved argument.").raw_handler(
                schema,
                None,
                |_c: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
            )
        })
        .unwrap_err();
    assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
    assert!(err.to_string().contains(TARGET_ARGUMENT), "{err}");
}
