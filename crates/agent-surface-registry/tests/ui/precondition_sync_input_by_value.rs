//! A check for `.precondition` that takes the input by value: refused, with the shapes it may have.

use agent_surface_core::AgentSurfaceError;
use agent_surface_registry::{Registry, RegistryConfig, Unmet};
use serde_json::Value;

fn main() {
    let registry = Registry::new(RegistryConfig::default());
    let _ = registry.define("records", |t| {
        t.capability("remove", "Remove a record.")
            .precondition(|_i: Value| Ok::<(), Unmet>(()))
            .handle(|i: Value| async move { Ok::<_, AgentSurfaceError>(i) });
    });
}
