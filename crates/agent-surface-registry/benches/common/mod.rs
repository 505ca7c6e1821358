//! What the registry's benches (and `examples/profile_invoke.rs`) share: the capability they
//! call and the runtime they run on (the estimates criterion recorded are read back with
//! `agent_surface_testing::bench::median_ns`).

#![allow(dead_code, reason = "each bench or example uses a part")]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The input of the measured capability, `calc.add`.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Add {
    pub(crate) a: i64,
    pub(crate) b: i64,
    pub(crate) note: Option<String>,
}

/// Its output.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Sum {
    pub(crate) sum: i64,
}

/// The handler's work.
pub(crate) fn sum(i: Add) -> Sum {
    Sum { sum: i.a + i.b + i.note.map_or(0, |n| n.len() as i64) }
}

/// The input every call sends.
pub(crate) fn input() -> Value {
    json!({"a": 2, "b": 3, "note": "hi"})
}

/// Validators of the input and output schemas `capability` advertises in discovery (the registry
/// closes their objects and states their integer ranges), compiled as a hand-written server
/// keeping the same contract would compile them.
pub(crate) async fn advertised(
    r: &agent_surface_registry::Registry,
    capability: &str,
) -> (jsonschema::Validator, jsonschema::Validator) {
    let snapshot = r.snapshot(&agent_surface_policy::Consumer::anonymous("bench")).await;
    let descriptor = snapshot.capability(capability).expect("listed");
    let output = descriptor.output_schema.as_ref().expect("an output schema");
    (
        jsonschema::validator_for(&descriptor.input_schema).expect("compiles"),
        jsonschema::validator_for(output).expect("compiles"),
    )
}

/// A current-thread runtime, as one adapter task would drive the pipeline.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// A registry with `config` and `calc.add` (read-only, idempotent), mounted as `main`, as the
/// examples call it.
pub(crate) fn calc_registry(
    config: agent_surface_registry::RegistryConfig,
) -> (agent_surface_registry::Registry, agent_surface_registry::Mount) {
    use agent_surface_core::{AgentSurfaceError, Effect};
    use agent_surface_registry::{Ctx, Registry};
    let r = Registry::new(config);
    r.define("calc", |t| {
        t.capability("add", "Add two integers.")
            .effect(Effect::Read)
            .idempotent()
            .handler(|_c: Ctx, i: Add| async move { Ok::<_, AgentSurfaceError>(sum(i)) })
    })
    .expect("valid");
    let mount = r.mount("calc", "main").expect("mount");
    (r, mount)
}

/// A registry with `calc.add` (read-only, idempotent) and `calc.drop` (destructive), and a
/// confirmation engine whose one global policy gates every destructive call: `calc.add` is let
/// through by the confirmation phase.
pub(crate) fn confirmation_registry() -> (agent_surface_registry::Registry, Vec<agent_surface_registry::Mount>) {
    use agent_surface_core::{AgentSurfaceError, Effect, SafeText};
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, FnConfirmationPolicy, Gate};
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    let gate_destructive = FnConfirmationPolicy::new("destructive", |call| {
        Ok(if call.effect == Effect::Destructive {
            Gate::Confirm { summary: SafeText::from("Drop it.") }
        } else {
            Gate::Open
        })
    });
    let engine = ConfirmationEngine::new(ConfirmationConfig {
        policies: vec![std::sync::Arc::new(gate_destructive)],
        ..Default::default()
    });
    let r = Registry::new(RegistryConfig { confirmation: Some(std::sync::Arc::new(engine)), ..Default::default() });
    r.define("calc", |t| {
        t.capability("add", "Add two integers.")
            .effect(Effect::Read)
            .idempotent()
            .handler(|_c: Ctx, i: Add| async move { Ok::<_, AgentSurfaceError>(sum(i)) });
        t.capability("drop", "Drop a number.")
            .effect(Effect::Destructive)
            .handler(|_c: Ctx, i: Add| async move { Ok::<_, AgentSurfaceError>(sum(i)) })
    })
    .expect("valid");
    let mounts = vec![r.mount("calc", "main").expect("mount")];
    (r, mounts)
}

/// Calls `calc.drop` once without evidence: the registry relays, and remembers, its confirmation.
pub(crate) async fn remember_one_confirmation(r: &agent_surface_registry::Registry) {
    use agent_surface_policy::Consumer;
    use agent_surface_registry::{InvokeOptions, InvokeRequest};
    let request = InvokeRequest::new("calc.drop", input());
    let result = r.invoke(request, InvokeOptions::new(Consumer::anonymous("bench"))).await;
    assert_eq!(result.code(), Some(agent_surface_core::ErrorCode::ConfirmationRequired), "{result:?}");
}
