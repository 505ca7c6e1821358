use agent_surface_registry::{Registry, RegistryConfig};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct In {
    n: u32,
}

fn main() {
    let registry = Registry::new(RegistryConfig::default());
    let _ = registry.define("t", |t| {
        t.capability("c", "Count.").handle(|i: In| async move { Ok::<_, anyhow::Error>(i.n) })
    });
}
