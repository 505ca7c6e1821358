//! Reading back what criterion measured in this run, so that a benchmark can print ratios
//! against a baseline measured alongside it (the project reports ratios, never absolute times).

use std::path::PathBuf;

/// The median estimate, in nanoseconds, that criterion recorded for benchmark `id` (its group and
/// name, e.g. `"stores/memory"`) in the current run, from `target/criterion/{id}/new/`; `None`
/// when there is none. The median is robust to the outliers a shared machine produces.
///
/// The target folder is `CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn median_ns(id: &str) -> Option<f64> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("criterion").join(id).join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

/// A registry whose `calc.add` (a write, so that a replay is what a retry must get) records its
/// calls in `store`, mounted once as `main`: the setup the store benchmarks share, so that every
/// backend is measured on the same call. Its `calc.sum` is the same call declared idempotent
/// ([`recorded_idempotent_request`]): a shared store marks it started at admission. Keep the mount
/// for as long as the registry is called.
pub fn recording_registry(
    store: std::sync::Arc<dyn agent_surface_policy::IdempotencyStore>,
) -> (agent_surface_registry::Registry, agent_surface_registry::Mount) {
    use agent_surface_core::{AgentSurfaceError, Effect};
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    use serde_json::{Value, json};

    let r = Registry::new(RegistryConfig { idempotency: store, ..Default::default() });
    r.define("calc", |t| {
        let add = |_c: Ctx, i: Value| async move {
            Ok::<_, AgentSurfaceError>(json!({"sum": i["a"].as_i64().unwrap_or(0) + i["b"].as_i64().unwrap_or(0)}))
        };
        t.capability("add", "Add two integers.").effect(Effect::Write).handler(add);
        t.capability("sum", "Add two integers.").effect(Effect::Write).idempotent().handler(add)
    })
    .expect("valid");
    let m = r.mount("calc", "main").expect("mount");
    (r, m)
}

/// A call of [`recording_registry`]'s `calc.add` under the invocation id `id`.
pub fn recorded_request(id: String) -> agent_surface_registry::InvokeRequest {
    agent_surface_registry::InvokeRequest::new("calc.add", serde_json::json!({"a": 2, "b": 3})).with_invocation_id(id)
}

/// A call of [`recording_registry`]'s `calc.sum` (idempotent) under the invocation id `id`.
pub fn recorded_idempotent_request(id: String) -> agent_surface_registry::InvokeRequest {
    agent_surface_registry::InvokeRequest::new("calc.sum", serde_json::json!({"a": 2, "b": 3})).with_invocation_id(id)
}

/// How long a follower on another replica takes to learn its leader's result, the figure issue
/// #29 sets for a shared store (one round trip plus 1 ms): medians over 200 trials of the time
/// from the moment a leader's settlement on `leading` returned to the moment its follower,
/// admitted on `following` (another replica's store on the same backend) and having waited 20 ms
/// (long enough for any poll to have spread out), had the result; and the median of
/// `round_trip`, one bare round trip to the backend, timed after each trial.
///
/// # Panics
///
/// When the stores do not behave as one shared store (a new key does not lead, the same
/// request does not follow, the follower gets another result).
pub async fn follower_latency<F, Fut>(
    leading: &dyn agent_surface_policy::IdempotencyStore,
    following: &dyn agent_surface_policy::IdempotencyStore,
    mut round_trip: F,
) -> (std::time::Duration, std::time::Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement};
    use serde_json::json;
    let fp = Fingerprint::of(&json!({"request": "told"}));
    let now = agent_surface_core::Timestamp::now;
    let mut told = Vec::new();
    let mut trips = Vec::new();
    for trial in 0..200 {
        let key = IdempotencyKey::new("bench", format!("told-{trial}"));
        let Ok(Admission::Leader(lease)) = leading.admit(&key, fp, Attempt::fresh(), now()).await else {
            panic!("a new key leads")
        };
        let Ok(Admission::Follower(waiting)) = following.admit(&key, fp, Attempt::fresh(), now()).await else {
            panic!("the same request follows")
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let result = waiting.await;
            let _ = tx.send((std::time::Instant::now(), result));
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let result = agent_surface_core::InvokeResult::ok(json!({"n": trial}), None);
        leading.settle(&key, fp, lease, Settlement::Release { result }, now()).await.expect("settled");
        let settled = std::time::Instant::now();
        let (learnt, result) = rx.await.expect("the follower answers");
        assert_eq!(result.output(), Some(&json!({"n": trial})));
        told.push(learnt.saturating_duration_since(settled));
        let sent = std::time::Instant::now();
        round_trip().await;
        trips.push(sent.elapsed());
    }
    told.sort();
    trips.sort();
    (told[told.len() / 2], trips[trips.len() / 2])
}
