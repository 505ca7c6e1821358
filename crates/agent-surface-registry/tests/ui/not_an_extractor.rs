use agent_surface_core::AgentSurfaceError;
use agent_surface_registry::{Registry, RegistryConfig};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct In {
    n: u32,
}

struct Db;

fn main() {
    let registry = Registry::new(RegistryConfig::default());
    let _ = registry.define("t", |t| {
        t.capability("c", "Count.")
            .handle(agent_surface_registry::Anyhow(|_db: Db, i: In| async move { Ok::<_, anyhow::Error>(i.n) }))
    });
    let _ = AgentSurfaceError::cancelled();
}
