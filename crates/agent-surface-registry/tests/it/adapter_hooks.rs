//! What adapters learn about a call: whether its capability runs long, and when its handler starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode};
use agent_surface_policy::Consumer;
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};

use crate::support::{call, consumer};

#[tokio::test]
async fn the_execute_hook_fires_once_when_the_handler_runs_and_never_for_an_earlier_stop() {
    let r = Registry::new(RegistryConfig::default());
    r.define("job", |t| {
        t.capability("run", "Run a long job.").effect(Effect::Read).long_running().raw_handler(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false}),
            None,
            |_ctx: Ctx, _input: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
        );
        t.capability("quick", "Run a quick job.").effect(Effect::Read).raw_handler(
            json!({"type": "object"}),
            None,
            |_ctx: Ctx, _input: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
        );
    })
    .expect("definition is valid");
    let _m = r.mount("job", "main").expect("mounts");
    assert!(r.is_long_running("job.run"));
    assert!(!r.is_long_running("job.quick"));
    assert!(!r.is_long_running("job.unknown"));
    assert!(
        r.snapshot(&Consumer::anonymous("h")).await.capabilities.iter().any(|c| c.name == "job.run" && c.long_running)
    );

    let fired = Arc::new(AtomicUsize::new(0));
    let hooked = || {
        let fired = fired.clone();
        consumer("h").with_execute_hook(Arc::new(move || {
            fired.fetch_add(1, Ordering::SeqCst);
        }))
    };
    assert!(r.invoke(call("job.run", json!({"n": 1})), hooked()).await.is_ok());
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    let refused = r.invoke(call("job.run", json!({"bad": true})), hooked()).await;
    assert_eq!(refused.code(), Some(ErrorCode::InvalidInput));
    let unknown = r.invoke(call("job.nope", json!({})), hooked()).await;
    assert_eq!(unknown.code(), Some(ErrorCode::CapabilityNotFound));
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}
