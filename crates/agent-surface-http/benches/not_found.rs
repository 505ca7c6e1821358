//! Whether a hidden capability takes as long to refuse as a name that never existed.
//!
//! Run with `cargo bench -p agent-surface-http --bench not_found`. Both answers are the same
//! `CAPABILITY_NOT_FOUND` bytes; this bench measures whether their time tells them apart. A
//! registry with `calc.add` (public) and `admin.audit`, hidden from anonymous callers by one global
//! policy (as the demo hides its admin tools); every case is one anonymous call, first through
//! `Registry::invoke`, then as a whole `POST /invoke` through the binding's router (in process, no
//! socket):
//!
//! - `hidden`: `admin.audit`, which exists and the policy hides;
//! - `unknown_in_type`: `admin.audix`, a name of the same length in the same type that does not
//!   exist;
//! - `unknown`: `zzzzz.audit`, a name of the same length in no type.
//!
//! After the criterion groups, the bench prints each case against `unknown` (a ratio of 1.00 is
//! the goal: the same work on every path).

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

use std::hint::black_box;
use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_http::{HttpConfig, router};
use agent_surface_policy::{AuthorityDecision, Consumer, FnPolicy, Policies};
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use agent_surface_testing::bench::median_ns;
use axum::body::Body;
use criterion::{Criterion, criterion_group};
use http::Request;
use serde_json::{Value, json};
use tower::ServiceExt;

const CASES: [(&str, &str); 3] =
    [("hidden", "admin.audit"), ("unknown_in_type", "admin.audix"), ("unknown", "zzzzz.audit")];

fn registry() -> (Registry, Vec<agent_surface_registry::Mount>) {
    // One global policy, as the demo's: the admin type is hidden from whoever is not an admin.
    let policies = Policies::new().global(FnPolicy::new("hide-admin", |call| {
        let admin = call.consumer.identity().is_some_and(|i| i.has_role("admin"));
        Ok(if call.type_id == "admin" && !admin { AuthorityDecision::Hide } else { AuthorityDecision::Allow })
    }));
    let r = Registry::new(RegistryConfig { authority: Some(Arc::new(policies)), ..RegistryConfig::default() });
    r.define("calc", |t| {
        t.capability("add", "Add.").effect(Effect::Read).raw_handler(
            json!({"type": "object"}),
            None,
            |_c, v| async move { Ok::<Value, AgentSurfaceError>(v) },
        )
    })
    .expect("valid");
    r.define("admin", |t| {
        t.capability("audit", "Audit.").effect(Effect::Read).raw_handler(
            json!({"type": "object"}),
            None,
            |_c: Ctx, v| async move { Ok::<Value, AgentSurfaceError>(v) },
        )
    })
    .expect("valid");
    let mounts = vec![r.mount("calc", "main").expect("mount"), r.mount("admin", "main").expect("mount")];
    (r, mounts)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (registry, _mounts) = registry();

    let mut g = c.benchmark_group("registry");
    for (case, name) in CASES {
        let r = registry.clone();
        g.bench_function(case, |b| {
            b.to_async(&rt).iter(|| {
                let r = r.clone();
                async move {
                    let res = r
                        .invoke(InvokeRequest::new(name, json!({})), InvokeOptions::new(Consumer::anonymous("b")))
                        .await;
                    debug_assert_eq!(res.code().map(|c| c.as_str()), Some("CAPABILITY_NOT_FOUND"));
                    black_box(res)
                }
            })
        });
    }
    g.finish();

    let app = router(registry.clone(), HttpConfig::default());
    let mut g = c.benchmark_group("http");
    for (case, name) in CASES {
        let body = json!({"capability": name, "input": {}}).to_string();
        g.bench_function(case, |b| {
            b.to_async(&rt).iter(|| {
                let request = Request::post("/invoke")
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .body(Body::from(body.clone()))
                    .expect("a request");
                let app = app.clone();
                async move {
                    let response = app.oneshot(request).await.expect("infallible");
                    debug_assert_eq!(response.status(), 404);
                    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("a body");
                    black_box(bytes)
                }
            })
        });
    }
    g.finish();
}

fn report() {
    println!("\neach case against `unknown` (median estimates of this run):");
    println!("  {:<24} {:>10} {:>12} {:>7}", "case", "median", "difference", "ratio");
    for group in ["registry", "http"] {
        let Some(base) = median_ns(&format!("{group}/unknown")) else {
            println!("  {group}: (no baseline estimate; run the whole bench)");
            continue;
        };
        for (case, _) in CASES {
            let id = format!("{group}/{case}");
            match median_ns(&id) {
                Some(t) => println!("  {id:<24} {t:>7.0} ns {:>+9.0} ns {:>6.3}x", t - base, t / base),
                None => println!("  {id:<24} (no estimate)"),
            }
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report();
}
