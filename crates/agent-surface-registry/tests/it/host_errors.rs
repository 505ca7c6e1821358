//! Host errors a handler meets (an upstream's status, a timeout inside it) answered as what they
//! mean, through the whole pipeline (`agent_surface_registry::host_errors`).

use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry};
use agent_surface_registry::host_errors::UpstreamStatus;
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};

use crate::support::{assert_produced, call, consumer};

/// `quotes.fetch` (read) and `orders.place` (write): each fails the way its input says, through
/// application code that wraps the host error with `?`.
fn registry() -> (Registry, agent_surface_registry::Mount, agent_surface_registry::Mount) {
    async fn upstream(input: Value) -> Result<Value, AgentSurfaceError> {
        match input["fail"].as_str() {
            Some("busy") => Err(UpstreamStatus::new(503).with_retry_after(Duration::from_secs(4)))?,
            Some("gateway") => Err(UpstreamStatus::new(504))?,
            Some("credentials") => Err(UpstreamStatus::new(401))?,
            Some("timeout") => {
                tokio::time::timeout(Duration::from_millis(1), std::future::pending::<()>()).await?;
                Ok(json!({}))
            }
            Some("teapot") => Err(UpstreamStatus::new(418))?,
            _ => Ok(json!({"ok": true})),
        }
    }
    let r = Registry::new(RegistryConfig::default());
    r.define("quotes", |t| {
        t.capability("fetch", "Fetch a quote.").effect(Effect::Read).handler(|_c: Ctx, i: Value| upstream(i))
    })
    .expect("valid");
    r.define("orders", |t| {
        t.capability("place", "Place an order.").effect(Effect::Write).handler(|_c: Ctx, i: Value| upstream(i))
    })
    .expect("valid");
    let (q, o) = (r.mount("quotes", "main").expect("mounts"), r.mount("orders", "main").expect("mounts"));
    (r, q, o)
}

#[tokio::test]
async fn host_errors_are_answered_as_what_they_mean_for_reads_and_writes() {
    let (r, _q, _o) = registry();
    let run = |capability: &'static str, fail: &'static str| {
        let r = &r;
        async move { r.invoke_detailed(call(capability, json!({"fail": fail})), consumer("c")).await }
    };
    for capability in ["quotes.fetch", "orders.place"] {
        // A refusal before any work: wait as long as the upstream asked, for a write too.
        let busy = assert_produced(&run(capability, "busy").await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!((busy.retry(), busy.detail("retryAfterMs")), (Retry::AfterDelay, Some(&json!(4000))));
        assert_eq!(busy.detail("reason"), Some(&json!("transport")));
        // The service's own credentials: a failure of the service, not the caller's NOT_AUTH*.
        let credentials = run(capability, "credentials").await;
        let p = assert_produced(&credentials, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!((p.retry(), p.detail("reason")), (Retry::No, Some(&json!("transport"))));
        // Not in the table: the sanitized handler-error, nothing of the cause shown.
        let teapot = assert_produced(&run(capability, "teapot").await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(teapot.detail("reason"), Some(&json!("handler-error")));
        assert!(!teapot.to_json().to_string().contains("418"), "{teapot:?}");
    }
    // Cut off, maybe after the work: transient for a read, an unknown outcome for a write.
    for fail in ["gateway", "timeout"] {
        let read = assert_produced(&run("quotes.fetch", fail).await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!((read.retry(), read.detail("retryAfterMs")), (Retry::AfterDelay, Some(&json!(1000))), "{fail}");
        let write = assert_produced(&run("orders.place", fail).await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(write.detail("reason"), Some(&json!("outcome-unknown")), "{fail}");
        assert!(!write.to_json().to_string().contains("upstream"), "{write:?}");
    }
}
