//! What the `Serve` tests share.

use agent_surface::ServiceBuilder;
use agent_surface::core::{AgentSurfaceError, Effect};
use agent_surface::policy::{AllowAll, Policies, RequireIdentity};
use serde_json::{Value, json};

/// A service with one capability that needs a person's approval, its mount kept alive.
pub(crate) fn refunds(public_url: Option<&str>) -> (agent_surface::Service, agent_surface::registry::Mount) {
    let mut builder =
        ServiceBuilder::new().authority(Policies::new().global(RequireIdentity).for_type("refunds", AllowAll));
    if let Some(url) = public_url {
        builder = builder.public_url(url);
    }
    let service = builder.build();
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
