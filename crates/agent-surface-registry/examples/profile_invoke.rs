//! A fixed number of calls for instruction-count profiling, which is steadier than wall-clock
//! benchmarks on a shared machine. The per-call cost of a mode is the difference between two runs
//! divided by the difference in calls:
//!
//! ```text
//! cargo build --release -p agent-surface-registry --example profile_invoke
//! for n in 1 2001; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg.$n target/release/examples/profile_invoke $n pipeline
//! done
//! ```
//!
//! Modes: `setup` (build and drop the requests only), `baseline` (what `benches/pipeline.rs`
//! calls `handler_validation`), `contract` (what `benches/pipeline.rs` calls
//! `handler_contract`: `baseline` validating against the schemas the tool advertises, its input
//! before the handler and its output after), `tracked_limit` (`baseline` plus the canonical bytes and SHA-256 of
//! the input, as the bench's case of that name), `pipeline` (`Registry::invoke` without an invocation id),
//! `tracked` (with a fresh invocation id per call), `authority` (`pipeline` with a `Policies`
//! engine of two allowing policies), `confirmation` (`pipeline` with a confirmation engine
//! whose global policy gates another capability, one relayed confirmation remembered),
//! `quota` (`pipeline` with a `MemoryRateLimiter` whose per-consumer quota never refuses),
//! `metrics_off` (`pipeline` with `RegistryConfig::metrics` off) and `prometheus` (`pipeline` with
//! a Prometheus recorder installed as the global one, durations in bucketed histograms as the
//! bench's `recorded/prometheus` case). `sizes` prints the bytes of the futures `Registry::invoke`
//! and `Registry::invoke_detailed` return, which a caller that awaits them holds in its own. Under valgrind a clock reading costs what the vDSO's code
//! does, so the `prometheus` mode's count shows the recording's work, not the clock's wall time.

#![allow(missing_docs, clippy::print_stderr, clippy::print_stdout, clippy::unwrap_used, reason = "a profiling harness")]

use agent_surface_policy::{AuthorityDecision, CallInfo, Consumer, FnPolicy, Policies};
use agent_surface_registry::{InvokeOptions, InvokeRequest, RegistryConfig};
use serde::Deserialize;

#[path = "../benches/common/mod.rs"]
mod common;

use common::{Add, input, sum as add};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(mode)) = (args.next().and_then(|n| n.parse::<usize>().ok()), args.next()) else {
        eprintln!(
            "usage: profile_invoke CALLS \
             setup|baseline|contract|tracked_limit|pipeline|tracked|authority|confirmation|quota|metrics_off|prometheus|sizes"
        );
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut config = RegistryConfig::default();
    if mode == "authority" {
        let allow = |_: &CallInfo<'_>| Ok(AuthorityDecision::Allow);
        let policies =
            Policies::new().global(FnPolicy::new("allow-1", allow)).for_type("calc", FnPolicy::new("allow-2", allow));
        config.authority = Some(std::sync::Arc::new(policies));
    }
    if mode == "quota" {
        let quota = agent_surface_policy::Quota::per_second(std::num::NonZeroU32::MAX);
        let limits = agent_surface_policy::RateLimitConfig { per_consumer: Some(quota), ..Default::default() };
        config.rate_limiter = Some(std::sync::Arc::new(agent_surface_policy::MemoryRateLimiter::new(limits)));
    }
    if mode == "metrics_off" {
        config.metrics = false;
    }
    if mode == "prometheus" {
        install_prometheus();
    }
    let (r, _m) = if mode == "confirmation" {
        let (r, m) = common::confirmation_registry();
        rt.block_on(common::remember_one_confirmation(&r));
        (r, m)
    } else {
        let (r, m) = common::calc_registry(config);
        (r, vec![m])
    };
    let (validator, output_validator) = if mode == "contract" {
        let (input, output) = rt.block_on(common::advertised(&r, "calc.add"));
        (input, Some(output))
    } else {
        (jsonschema::validator_for(&serde_json::to_value(schemars::schema_for!(Add)).unwrap()).unwrap(), None)
    };
    let consumer = InvokeOptions::new(Consumer::anonymous("profile"));
    let value = input();
    let requests: Vec<_> = (0..n)
        .map(|i| {
            let request = InvokeRequest::new("calc.add", value.clone());
            let request = if mode == "tracked" { request.with_invocation_id(format!("inv-{i}")) } else { request };
            (request, consumer.clone())
        })
        .collect();
    if mode == "sizes" {
        let (request, options) = requests.into_iter().next().unwrap();
        let invoke = std::mem::size_of_val(&r.invoke(request.clone(), options.clone()));
        let detailed = std::mem::size_of_val(&r.invoke_detailed(request, options));
        println!("Registry::invoke: {invoke} bytes; Registry::invoke_detailed: {detailed} bytes");
        return;
    }
    rt.block_on(async {
        for (request, options) in requests {
            match mode.as_str() {
                "setup" => drop(std::hint::black_box((request, options))),
                "baseline" | "contract" | "tracked_limit" => {
                    let input = request.input;
                    if mode == "tracked_limit" {
                        let mut canonical = Vec::with_capacity(128);
                        agent_surface_core::json::write_canonical(&input, &mut canonical);
                        std::hint::black_box(<sha2::Sha256 as sha2::Digest>::digest(&canonical));
                    }
                    assert!(validator.is_valid(&input));
                    let i = Add::deserialize(&input).unwrap();
                    let output = serde_json::to_value(add(i)).unwrap();
                    if let Some(v) = &output_validator {
                        assert!(v.is_valid(&output));
                    }
                    std::hint::black_box(output);
                }
                _ => {
                    std::hint::black_box(r.invoke(request, options).await);
                }
            }
        }
    });
}

/// Installs a Prometheus recorder as the global one, with the bench's buckets.
#[cfg(feature = "metrics")]
fn install_prometheus() {
    let buckets =
        [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
    let recorder =
        metrics_exporter_prometheus::PrometheusBuilder::new().set_buckets(&buckets).unwrap().build_recorder();
    metrics::set_global_recorder(recorder).unwrap();
}

/// Without the `metrics` feature there is nothing to record with.
#[cfg(not(feature = "metrics"))]
fn install_prometheus() {
    eprintln!("the prometheus mode needs the crate's `metrics` feature");
    std::process::exit(2);
}
