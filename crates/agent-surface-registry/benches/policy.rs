//! The cost of phases 4, 6 and 7 with the shipped engines, as overheads against a baseline
//! measured in the same run.
//!
//! Run with `cargo bench -p agent-surface-registry --bench policy`. Every case is the full
//! pipeline (`Registry::invoke`, no invocation id) of the same capability and input:
//!
//! - `policy/baseline`: no authority policy, rate limiter or confirmation engine;
//! - `policy/authority`: a `Policies` engine with two policies that allow (one global, one for
//!   the capability);
//! - `policy/rate`: a `MemoryRateLimiter` that never limits (per-consumer and per-capability
//!   buckets far above the call rate, and an action queue with free slots);
//! - `policy/confirmation_consume`: a capability gated with `.confirm(…)`, each call carrying
//!   evidence approved beforehand (outside the measurement), which the call consumes;
//! - `policy/confirmation_cycle`: the whole two-phase cycle per iteration — the call that gets
//!   `CONFIRMATION_REQUIRED`, the host's approval, and the retry that runs.
//!
//! And, outside the pipeline, `idempotency/memory_store`: one admission and one settlement of a
//! fresh key on the default `MemoryIdempotencyStore`, whose consumer is at its record quota so
//! that every admission evicts its oldest result (the steady state of a busy consumer): what the
//! store's guarantees cost a recorded call (`spec/invocation.md` §11).
//!
//! After the criterion groups, the bench prints each case's overhead over the baseline.

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

mod common;

use agent_surface_testing::bench::median_ns;
use common::{Add, input, runtime, sum};
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect, InvokeResult};
use agent_surface_policy::{
    AuthorityDecision, CallInfo, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine, ConfirmationGate,
    Consumer, FnPolicy, IdempotencyStore, Identity, MemoryConfirmationStore, MemoryConfirmationStoreConfig,
    MemoryIdempotencyStore, MemoryRateLimiter, Policies, QueueConfig, Quota, RateLimitConfig,
    idempotency::{Admission, Fingerprint, IdempotencyKey, Settlement},
};
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Mount, Registry, RegistryConfig};
use criterion::{BatchSize, Criterion, criterion_group};
use futures_util::FutureExt;

use serde_json::Value;

/// A registry with `calc.add`, gated by a declared confirmation when `gated`.
fn registry(config: RegistryConfig, gated: bool) -> (Registry, Mount) {
    let r = Registry::new(config);
    r.define("calc", |t| {
        let c = t.capability("add", "Add two integers.").effect(Effect::Write);
        let c = if gated { c.confirm(|i: &Add| format!("Add {} and {}.", i.a, i.b)) } else { c };
        c.handler(|_c: Ctx, i: Add| async move { Ok::<_, AgentSurfaceError>(sum(i)) })
    })
    .expect("valid");
    let m = r.mount("calc", "main").expect("mount");
    (r, m)
}

fn caller() -> InvokeOptions {
    InvokeOptions::new(Consumer::authenticated("bench", Identity::new("agent-user")))
}

fn allow(
    name: &'static str,
) -> FnPolicy<impl Fn(&CallInfo<'_>) -> Result<AuthorityDecision, agent_surface_policy::PolicyError>> {
    FnPolicy::new(name, |_call| Ok(AuthorityDecision::Allow))
}

/// The default engine: two-phase, a memory store of 10 000 records. Batches of 1 000 pre-approved
/// confirmations keep the store at its steady-state size without evicting evidence before use.
fn engine() -> Arc<ConfirmationEngine> {
    let store = MemoryConfirmationStore::new(MemoryConfirmationStoreConfig::default());
    Arc::new(ConfirmationEngine::new(ConfirmationConfig { store: Arc::new(store), ..Default::default() }))
}

/// Issues and approves evidence for the call `calc.add(input)` of `caller()` on `mount`, through
/// the engine directly (the memory store answers at once, so no runtime is needed).
fn approved_evidence(engine: &ConfirmationEngine, mount: &Mount, input: &Value) -> String {
    let options = caller();
    let summary = agent_surface_core::SafeText::from("Add.");
    let call = CallInfo::new(&options.consumer, "calc.add", "calc", Effect::Write, false)
        .with_instance(mount.instance_id())
        .with_registration(mount.registration_id().expect("live"))
        .with_input(input)
        .with_declared_gate(Some(&summary));
    let now = agent_surface_core::Timestamp::now();
    let Some(ConfirmationDecision::Required { confirmation_id, .. }) = engine.check(call, None, now).now_or_never()
    else {
        panic!("a gated call without evidence is asked to confirm")
    };
    engine.approve(&confirmation_id, &Identity::new("manager")).now_or_never().expect("ready").expect("approved");
    confirmation_id
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let value = input();
    let run = |r: &Registry, request: InvokeRequest| {
        let r = r.clone();
        async move {
            let res: InvokeResult = r.invoke(request, caller()).await;
            debug_assert!(res.is_ok(), "{res:?}");
            black_box(res)
        }
    };
    let mut g = c.benchmark_group("policy");

    let (r, _m) = registry(RegistryConfig::default(), false);
    g.bench_function("baseline", |b| b.to_async(&rt).iter(|| run(&r, InvokeRequest::new("calc.add", value.clone()))));

    let policies = Policies::new().global(allow("global-allow")).for_capability("calc.add", allow("capability-allow"));
    let (r, _m) = registry(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() }, false);
    g.bench_function("authority", |b| b.to_async(&rt).iter(|| run(&r, InvokeRequest::new("calc.add", value.clone()))));

    let huge = Quota::per_second(NonZeroU32::MAX);
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        per_consumer: Some(huge),
        per_capability: Some(huge),
        queue: Some(QueueConfig { max_concurrent: NonZeroUsize::new(1024).expect("non-zero"), ..Default::default() }),
        ..Default::default()
    });
    let (r, _m) = registry(RegistryConfig { rate_limiter: Some(Arc::new(limiter)), ..Default::default() }, false);
    g.bench_function("rate", |b| b.to_async(&rt).iter(|| run(&r, InvokeRequest::new("calc.add", value.clone()))));

    let confirmations = engine();
    let (r, m) = registry(RegistryConfig { confirmation: Some(confirmations.clone()), ..Default::default() }, true);
    g.bench_function("confirmation_consume", |b| {
        b.to_async(&rt).iter_batched(
            || approved_evidence(&confirmations, &m, &value),
            |id| run(&r, InvokeRequest::new("calc.add", value.clone()).with_confirmation(id)),
            BatchSize::NumIterations(1_000),
        )
    });
    g.bench_function("confirmation_cycle", |b| {
        b.to_async(&rt).iter(|| {
            let (r, confirmations, value) = (r.clone(), confirmations.clone(), value.clone());
            async move {
                let first = r.invoke(InvokeRequest::new("calc.add", value.clone()), caller()).await;
                let id = first.error_payload().and_then(|p| p.detail("confirmationId")).and_then(Value::as_str);
                let id = id.expect("CONFIRMATION_REQUIRED").to_string();
                confirmations.approve(&id, &Identity::new("manager")).await.expect("approved");
                let res = r.invoke(InvokeRequest::new("calc.add", value).with_confirmation(id), caller()).await;
                debug_assert!(res.is_ok(), "{res:?}");
                black_box(res)
            }
        })
    });
    g.finish();

    let store = MemoryIdempotencyStore::default();
    let fingerprint = Fingerprint::of(&value);
    let result = InvokeResult::ok(serde_json::json!({"sum": 5}), None);
    let now = agent_surface_core::Timestamp::now();
    let expires_at = now.saturating_add(std::time::Duration::from_secs(600));
    let mut n = 0_u64;
    let record = |n: u64| {
        let key = IdempotencyKey::new("anonymous:bench", format!("inv-{n}"));
        let Some(Ok(Admission::Leader(lease))) =
            store.admit(&key, fingerprint, agent_surface_policy::idempotency::Attempt::fresh(), now).now_or_never()
        else {
            panic!("a fresh key is led")
        };
        let settlement = Settlement::Store { result: result.clone(), expires_at };
        store.settle(&key, fingerprint, lease, settlement, now).now_or_never().expect("ready").expect("settled");
    };
    // The consumer's quota (10 000 records) full: every admission from here evicts.
    while n < 10_000 {
        record(n);
        n += 1;
    }
    c.bench_function("idempotency/memory_store", |b| {
        b.iter(|| {
            n += 1;
            record(black_box(n));
        })
    });
}

fn report() {
    if let Some(t) = median_ns("idempotency/memory_store") {
        println!("\nidempotency/memory_store: {t:.0} ns (one admission and one settlement, outside the pipeline)");
    }
    let Some(base) = median_ns("policy/baseline") else {
        println!("\n(no baseline estimate; run the whole bench)");
        return;
    };
    println!("\noverhead against policy/baseline (median estimates of this run):");
    println!("  {:<30} {:>10} {:>12} {:>7}", "case", "median", "overhead", "ratio");
    for id in [
        "policy/baseline",
        "policy/authority",
        "policy/rate",
        "policy/confirmation_consume",
        "policy/confirmation_cycle",
    ] {
        match median_ns(id) {
            Some(t) => println!("  {id:<30} {t:>7.0} ns {:>+9.0} ns {:>6.2}x", t - base, t / base),
            None => println!("  {id:<30} (no estimate)"),
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report();
}
