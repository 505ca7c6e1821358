use agent_surface_core::AgentSurfaceError;
use agent_surface_registry::{Registry, RegistryConfig, Unmet};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct In {
    n: u32,
}

fn main() {
    let registry = Registry::new(RegistryConfig::default());
    // The check takes the input by value: it is lent to the check, which takes `&In`.
    let _ = registry.define("t", |t| {
        t.capability("c", "Count.")
            .precondition_async(|i: In| async move { if i.n > 0 { Ok(()) } else { Err(Unmet::new("Zero.")) } })
            .handle(|i: In| async move { Ok::<_, AgentSurfaceError>(i.n) })
    });
}
