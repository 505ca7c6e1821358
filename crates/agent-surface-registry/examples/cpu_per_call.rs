//! CPU time per call of `Registry::invoke`, read from the thread's own CPU clock, so that the load
//! of other processes on a shared machine does not count (as it does in a wall-clock bench):
//!
//! ```text
//! cargo build --release -p agent-surface-registry --example cpu_per_call
//! target/release/examples/cpu_per_call 300000 metrics_off
//! target/release/examples/cpu_per_call 300000 prometheus
//! ```
//!
//! It calls the benches' `calc.add` on one current-thread runtime, building each request in the
//! loop as a server parses each one, 20,000 times to warm up (the exporter's clock calibrates on
//! its first observation), then the given number of times, and prints the nanoseconds of CPU time
//! per call (Linux only: `/proc/thread-self/schedstat`). Modes: `pipeline` (metrics on, no
//! recorder), `metrics_off` (`RegistryConfig::metrics` off) and `prometheus` (a Prometheus
//! recorder installed as the global one, durations in the bench's buckets). The recorder's cost is
//! the difference between `prometheus` and `metrics_off`; run the two interleaved, a few rounds.

#![allow(missing_docs, clippy::print_stderr, clippy::print_stdout, clippy::unwrap_used, reason = "a profiling harness")]

use agent_surface_policy::Consumer;
use agent_surface_registry::{InvokeOptions, InvokeRequest, RegistryConfig};

#[path = "../benches/common/mod.rs"]
mod common;

use common::input;

/// The CPU time this thread has run, in nanoseconds.
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux's schedstat");
    stat.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a CPU time in nanoseconds")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(mode)) = (args.next().and_then(|n| n.parse::<u32>().ok()), args.next()) else {
        eprintln!("usage: cpu_per_call CALLS pipeline|metrics_off|prometheus");
        std::process::exit(2);
    };
    let mut config = RegistryConfig::default();
    match mode.as_str() {
        "pipeline" => {}
        "metrics_off" => config.metrics = false,
        "prometheus" => {
            let buckets =
                [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
            let recorder =
                metrics_exporter_prometheus::PrometheusBuilder::new().set_buckets(&buckets).unwrap().build_recorder();
            metrics::set_global_recorder(recorder).unwrap();
        }
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    }
    let (r, _mount) = common::calc_registry(config);
    let consumer = InvokeOptions::new(Consumer::anonymous("profile"));
    let value = input();
    let call = || r.invoke(InvokeRequest::new("calc.add", value.clone()), consumer.clone());
    common::runtime().block_on(async {
        for _ in 0..20_000 {
            assert!(std::hint::black_box(call().await).is_ok());
        }
        let start = cpu_ns();
        for _ in 0..n {
            std::hint::black_box(call().await);
        }
        let spent = cpu_ns() - start;
        println!("{mode}: {:.0} ns of CPU time per call ({n} calls)", spent as f64 / f64::from(n));
    });
}
