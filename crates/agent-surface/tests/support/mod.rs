//! What the `Serve` tests share.

use agent_surface::ServiceBuilder;
use agent_surface::core::{AgentSurfaceError, Effect};
use agent_surface::policy::{AllowAll, Policies, RequireIdentity};
use serde_json::{Value, json};

/// A service on `builder` (its public URL, its approval page, …) with one capability that needs a
/// person's approval, its mount kept alive.
pub(crate) fn refunds_on(builder: ServiceBuilder) -> (agent_surface::Service, agent_surface::registry::Mount) {
    let service = builder.authority(Policies::new().global(RequireIdentity).for_type("refunds", AllowAll)).build();
    service
        .registry
        .define("refunds", |t| {
            t.capability("issue", "Refund an order.")
                .effect(Effect::Write)
                .confirm(|i: &Value| format!("Refund order {}.", i["order"]))
                .handle(|i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"refunded": i["order"]})) });
        })
        .expect("defines");
    let mount = service.registry.mount("refunds", "main").expect("mounts");
    (service, mount)
}
