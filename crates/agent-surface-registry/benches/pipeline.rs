//! The cost of the invocation pipeline, as ratios against a baseline measured in the same run.
//!
//! Run with `cargo bench -p agent-surface-registry --bench pipeline`. Cases:
//!
//! - `bare_handler`: awaiting the typed handler on an already-decoded input;
//! - `handler_validation`: what a hand-written server does per call with the parsed input it owns —
//!   `is_valid` with a compiled `jsonschema` validator, `T::deserialize(&Value)`, the handler,
//!   `serde_json::to_value` of the output, dropping the input (the baseline);
//! - `handler_contract`: `handler_validation` keeping the contract the tool advertises — its
//!   input validated against the input schema discovery lists (objects closed, integer ranges
//!   stated) and its output against the output schema, as the pipeline does (the floor of a
//!   server that promises both schemas);
//! - `tracked_limit`: `handler_validation` plus what a recorded call cannot avoid, the canonical
//!   bytes (RFC 8785) and SHA-256 of its input (its fingerprint);
//! - `pipeline/no_invocation_id` and `pipeline/with_invocation_id`: `Registry::invoke`;
//! - `pipeline/confirmation_policy`: `pipeline/no_invocation_id` in a registry with a confirmation
//!   engine whose global policy gates another capability, with one relayed confirmation
//!   remembered (the cost of the confirmation phase for a call it lets through);
//! - `pipeline/metrics_off`: `pipeline/no_invocation_id` with `RegistryConfig::metrics` off (the
//!   other cases have it on, its default, with no recorder installed: their difference is what
//!   metrics cost a service that installs no recorder);
//! - `lookup/10` and `lookup/100000`: the full pipeline in registries of 10 and 100,000
//!   capabilities (lookup cost must not grow with the registry);
//! - `recorded/prometheus`: `pipeline/no_invocation_id` with a Prometheus recorder (durations as
//!   bucketed histograms, as the demo configures it) installed as the global recorder (last: it
//!   stays installed for the rest of the process).
//!
//! After the criterion groups, the bench prints the ratios of the criterion median estimates.

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

mod common;

use agent_surface_testing::bench::median_ns;
use common::{Add, Sum, input, runtime, sum};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::Consumer;
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use criterion::{BatchSize, Criterion, criterion_group};
use serde::Deserialize;
use serde_json::json;

async fn add(i: Add) -> Result<Sum, AgentSurfaceError> {
    Ok(sum(i))
}

/// A registry with `calc.add` plus `extra` filler capabilities (10 per type, tiny schemas).
fn registry(extra: usize) -> (Registry, Vec<agent_surface_registry::Mount>) {
    registry_with(extra, RegistryConfig::default())
}

fn registry_with(extra: usize, config: RegistryConfig) -> (Registry, Vec<agent_surface_registry::Mount>) {
    let r = Registry::new(config);
    r.define("calc", |t| {
        t.capability("add", "Add two integers.").effect(Effect::Read).idempotent().handler(|_c: Ctx, i: Add| add(i))
    })
    .expect("valid");
    let mut mounts = vec![r.mount("calc", "main").expect("mount")];
    for ty in 0..extra.div_ceil(10) {
        let type_id = format!("t{ty}");
        r.define(&type_id, |t| {
            for c in 0..10 {
                t.capability(&format!("c{c}"), "Filler.").raw_handler(
                    json!({"type": "object"}),
                    None,
                    |_c, v| async move { Ok(v) },
                );
            }
        })
        .expect("valid");
        mounts.push(r.mount(&type_id, "main").expect("mount"));
    }
    (r, mounts)
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let schema = serde_json::to_value(schemars::schema_for!(Add)).expect("schema");
    let validator = jsonschema::validator_for(&schema).expect("compiles");
    let value = input();

    c.bench_function("bare_handler", |b| {
        b.to_async(&rt).iter(|| async { black_box(add(Add { a: 2, b: 3, note: Some("hi".into()) }).await) })
    });
    // Like the pipeline, the baseline owns the parsed input of each call (and drops it).
    c.bench_function("handler_validation", |b| {
        b.to_async(&rt).iter_batched(
            || value.clone(),
            |input| async {
                let input = input;
                assert!(validator.is_valid(black_box(&input)));
                let i = Add::deserialize(&input).expect("decodes");
                let out = add(i).await.expect("ok");
                black_box(serde_json::to_value(out).expect("serializes"))
            },
            BatchSize::SmallInput,
        )
    });

    let (r, _m) = registry(0);
    let (input_contract, output_contract) = rt.block_on(common::advertised(&r, "calc.add"));
    c.bench_function("handler_contract", |b| {
        b.to_async(&rt).iter_batched(
            || value.clone(),
            |input| async {
                let input = input;
                assert!(input_contract.is_valid(black_box(&input)));
                let i = Add::deserialize(&input).expect("decodes");
                let out = serde_json::to_value(add(i).await.expect("ok")).expect("serializes");
                assert!(output_contract.is_valid(&out));
                black_box(out)
            },
            BatchSize::SmallInput,
        )
    });

    // The least a recorded call does beyond the baseline: its fingerprint's canonical bytes and
    // SHA-256.
    c.bench_function("tracked_limit", |b| {
        b.to_async(&rt).iter_batched(
            || value.clone(),
            |input| async {
                let input = input;
                let mut canonical = Vec::with_capacity(128);
                agent_surface_core::json::write_canonical(black_box(&input), &mut canonical);
                black_box(<sha2::Sha256 as sha2::Digest>::digest(&canonical));
                assert!(validator.is_valid(black_box(&input)));
                let i = Add::deserialize(&input).expect("decodes");
                let out = add(i).await.expect("ok");
                black_box(serde_json::to_value(out).expect("serializes"))
            },
            BatchSize::SmallInput,
        )
    });

    let consumer = InvokeOptions::new(Consumer::anonymous("bench"));
    let mut g = c.benchmark_group("pipeline");
    // Building the request (and cloning its input) is setup, as the baseline's input is.
    g.bench_function("no_invocation_id", |b| {
        b.to_async(&rt).iter_batched(
            || (InvokeRequest::new("calc.add", value.clone()), consumer.clone()),
            |(req, opts)| async {
                let res = r.invoke(req, opts).await;
                debug_assert!(res.is_ok());
                black_box(res)
            },
            BatchSize::SmallInput,
        )
    });
    let n = AtomicU64::new(0);
    g.bench_function("with_invocation_id", |b| {
        b.to_async(&rt).iter_batched(
            || {
                let id = format!("inv-{}", n.fetch_add(1, Ordering::Relaxed));
                (InvokeRequest::new("calc.add", value.clone()).with_invocation_id(id), consumer.clone())
            },
            |(req, opts)| async {
                let res = r.invoke(req, opts).await;
                debug_assert!(res.is_ok());
                black_box(res)
            },
            BatchSize::SmallInput,
        )
    });
    // The same call with `RegistryConfig::metrics` off.
    let (unmetered, _unmetered_mounts) = registry_with(0, RegistryConfig { metrics: false, ..Default::default() });
    g.bench_function("metrics_off", |b| {
        b.to_async(&rt).iter_batched(
            || (InvokeRequest::new("calc.add", value.clone()), consumer.clone()),
            |(req, opts)| async {
                let res = unmetered.invoke(req, opts).await;
                debug_assert!(res.is_ok());
                black_box(res)
            },
            BatchSize::SmallInput,
        )
    });
    // A global confirmation policy that gates another capability, and one confirmation relayed
    // (and remembered) for it: the calls measured are let through by the confirmation phase.
    let (confirmed, _confirmed_mounts) = common::confirmation_registry();
    rt.block_on(common::remember_one_confirmation(&confirmed));
    g.bench_function("confirmation_policy", |b| {
        b.to_async(&rt).iter_batched(
            || (InvokeRequest::new("calc.add", value.clone()), consumer.clone()),
            |(req, opts)| async {
                let res = confirmed.invoke(req, opts).await;
                debug_assert!(res.is_ok());
                black_box(res)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("lookup");
    for size in [10usize, 100_000] {
        let (r, _m) = registry(size);
        g.bench_function(size.to_string(), |b| {
            b.to_async(&rt).iter_batched(
                || (InvokeRequest::new("calc.add", value.clone()), consumer.clone()),
                |(req, opts)| async { black_box(r.invoke(req, opts).await) },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();

    // Last: a global recorder stays installed for the rest of the process.
    #[cfg(feature = "metrics")]
    recorded(c, &rt, &r, &value, &consumer);
}

/// `recorded/prometheus`: the plain call with a Prometheus recorder installed as the global one.
#[cfg(feature = "metrics")]
fn recorded(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    r: &Registry,
    value: &serde_json::Value,
    consumer: &InvokeOptions,
) {
    // Histograms with buckets, as the demo and the guide's service configure them (the exporter's
    // default, a summary, costs several times more per observation).
    let buckets =
        [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
    let recorder =
        metrics_exporter_prometheus::PrometheusBuilder::new().set_buckets(&buckets).expect("buckets").build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("no other global recorder");
    let mut g = c.benchmark_group("recorded");
    g.bench_function("prometheus", |b| {
        b.to_async(rt).iter_batched(
            || (InvokeRequest::new("calc.add", value.clone()), consumer.clone()),
            |(req, opts)| async {
                let res = r.invoke(req, opts).await;
                debug_assert!(res.is_ok());
                black_box(res)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
    assert!(handle.render().contains("agent_surface_calls_total"), "the calls were recorded");
}

fn report() {
    let base = median_ns("handler_validation");
    println!("\nratios against handler_validation (median estimates of this run):");
    for id in [
        "bare_handler",
        "handler_validation",
        "handler_contract",
        "tracked_limit",
        "pipeline/no_invocation_id",
        "pipeline/with_invocation_id",
        "pipeline/metrics_off",
        "recorded/prometheus",
        "pipeline/confirmation_policy",
        "lookup/10",
        "lookup/100000",
    ] {
        match (median_ns(id), base) {
            (Some(t), Some(b)) => println!("  {id:<30} {t:>10.0} ns   {:>5.2}x", t / b),
            _ => println!("  {id:<30} (no estimate)"),
        }
    }
    if let (Some(untracked), Some(contract)) = (median_ns("pipeline/no_invocation_id"), median_ns("handler_contract")) {
        println!("  no_invocation_id / handler_contract: {:.2}x", untracked / contract);
    }
    if let (Some(tracked), Some(limit)) = (median_ns("pipeline/with_invocation_id"), median_ns("tracked_limit")) {
        println!("  with_invocation_id / tracked_limit: {:.2}x", tracked / limit);
    }
    if let (Some(on), Some(off), Some(recorded)) =
        (median_ns("pipeline/no_invocation_id"), median_ns("pipeline/metrics_off"), median_ns("recorded/prometheus"))
    {
        println!("  metrics on, no recorder - metrics off: {:+.0} ns", on - off);
        println!("  metrics on, Prometheus recorder - metrics off: {:+.0} ns", recorded - off);
    }
    if let (Some(gated), Some(plain)) =
        (median_ns("pipeline/confirmation_policy"), median_ns("pipeline/no_invocation_id"))
    {
        println!("  confirmation_policy / no_invocation_id: {:.2}x", gated / plain);
    }
    if let (Some(small), Some(large)) = (median_ns("lookup/10"), median_ns("lookup/100000")) {
        println!("  lookup 100000 / 10: {:.2}x", large / small);
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report();
}
