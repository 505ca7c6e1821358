//! Exactly once across replicas: two registries on one Redis idempotency store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode};
use agent_surface_policy::Consumer;
use agent_surface_redis::RedisStores;
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support;

/// A replica: a registry whose `tickets.open` (a write) takes `delay` and counts its runs in
/// `runs`, shared by every replica of the test.
fn replica(
    stores: &RedisStores,
    runs: &Arc<AtomicUsize>,
    delay: Duration,
) -> (Registry, agent_surface_registry::Mount) {
    let registry = Registry::new(RegistryConfig { idempotency: Arc::new(stores.idempotency()), ..Default::default() });
    let runs = runs.clone();
    registry
        .define("tickets", move |t| {
            t.capability("open", "Open a ticket.").effect(Effect::Write).handler(move |_c: Ctx, _i: Value| {
                let runs = runs.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    Ok::<_, AgentSurfaceError>(json!({"ticketId": format!("t-{n}")}))
                }
            })
        })
        .expect("definition is valid");
    let mount = registry.mount("tickets", "main").expect("mounts");
    (registry, mount)
}

/// 1,000 concurrent calls with one invocation id, split across two replicas: the handler runs
/// once and every caller gets the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_duplicates_across_two_replicas_run_once() {
    let Some(redis) = support::stores("idem-replicas").await else { return };
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ma) = replica(&redis, &runs, Duration::from_millis(100));
    let (b, _mb) = replica(&redis, &runs, Duration::from_millis(100));
    let calls = (0..1_000).map(|i| {
        let registry = if i % 2 == 0 { &a } else { &b };
        async move {
            let request =
                InvokeRequest::new("tickets.open", json!({"subject": "printer"})).with_invocation_id("open-1");
            registry.invoke_detailed(request, InvokeOptions::new(Consumer::anonymous("c-1"))).await
        }
    });
    let invocations = join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    let first = &invocations[0].result;
    assert_eq!(first.output(), Some(&json!({"ticketId": "t-0"})), "{first:?}");
    assert!(invocations.iter().all(|inv| &inv.result == first), "every caller gets the same result");
    let answered = invocations.iter().filter(|inv| inv.joined || inv.replayed).count();
    assert_eq!(answered, 999, "all but the leader joined or replayed");
    // Another invocation id is another call.
    let other = a
        .invoke(
            InvokeRequest::new("tickets.open", json!({"subject": "printer"})).with_invocation_id("open-2"),
            InvokeOptions::new(Consumer::anonymous("c-1")),
        )
        .await;
    assert_eq!(other.output(), Some(&json!({"ticketId": "t-1"})));
}

/// The same invocation id with another input, on the other replica, is a conflict there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_conflicts_on_the_other_replica() {
    let Some(redis) = support::stores("idem-conflict").await else { return };
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, _ma) = replica(&redis, &runs, Duration::ZERO);
    let (b, _mb) = replica(&redis, &runs, Duration::ZERO);
    let call = |subject: &str| InvokeRequest::new("tickets.open", json!({"subject": subject})).with_invocation_id("x");
    let alice = || InvokeOptions::new(Consumer::anonymous("c-1"));
    assert!(a.invoke(call("printer"), alice()).await.is_ok());
    let conflict = b.invoke(call("screen"), alice()).await;
    assert_eq!(conflict.code(), Some(ErrorCode::InvocationConflict));
    let replay = b.invoke_detailed(call("printer"), alice()).await;
    assert!(replay.replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
