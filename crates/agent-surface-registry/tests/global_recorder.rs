//! The pipeline's metrics through a global recorder, the way a service installs one: calls made
//! before it is installed record nothing, calls after it are recorded through handles the
//! registry registered once, and a local recorder in scope still gets the calls made under it.
//!
//! A test binary of its own: a process has one global recorder, for good.

#![allow(missing_docs, reason = "a test binary")]

use agent_surface_core::Effect;
use agent_surface_policy::Consumer;
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::{Value, json};

fn registry() -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(RegistryConfig::default());
    r.define("m", |t| {
        t.capability("ok", "Succeeds.").effect(Effect::Read).raw_handler(
            json!({"type": "object"}),
            None,
            |_c: Ctx, v: Value| async move { Ok(v) },
        )
    })
    .expect("valid");
    let m = r.mount("m", "main").expect("mount");
    (r, m)
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_global_recorder_gets_every_call_made_after_it_is_installed() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (one, _m1) = registry();
    let (two, _m2) = registry();
    let calls = |r: &Registry, n: usize| {
        rt.block_on(async {
            let all = (0..n).map(|_| {
                let r = r.clone();
                tokio::spawn(async move {
                    let options = InvokeOptions::new(Consumer::anonymous("c")).with_transport("mcp");
                    r.invoke(InvokeRequest::new("m.ok", json!({})), options).await.is_ok()
                })
            });
            for call in all.collect::<Vec<_>>() {
                assert!(call.await.unwrap());
            }
        })
    };
    // No recorder yet: nothing to record, nothing fails.
    calls(&one, 3);

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only global recorder of this process");
    calls(&one, 5);
    calls(&two, 2);
    calls(&one, 1);
    let text = handle.render();
    let ok = r#"agent_surface_calls_total{capability="m.ok",code="OK",retry="none",transport="mcp"}"#;
    assert_eq!(sample(&text, ok), Some(8.0), "{text}");
    let total = r#"agent_surface_call_duration_seconds_count{capability="m.ok",phase_group="total"}"#;
    assert_eq!(sample(&text, total), Some(8.0), "{text}");
    assert_eq!(sample(&text, r#"agent_surface_calls_in_flight{transport="mcp"}"#), Some(0.0), "{text}");

    // A local recorder in scope gets the calls made under it; the global one does not.
    let local = PrometheusBuilder::new().build_recorder();
    let local_handle = local.handle();
    metrics::with_local_recorder(&local, || {
        let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        current.block_on(async {
            let options = InvokeOptions::new(Consumer::anonymous("c")).with_transport("mcp");
            assert!(one.invoke(InvokeRequest::new("m.ok", json!({})), options).await.is_ok());
        });
    });
    assert_eq!(sample(&local_handle.render(), ok), Some(1.0));
    assert_eq!(sample(&handle.render(), ok), Some(8.0));

    // More transports than the registry caches handles for: each call is still counted under
    // its own transport, and none stays in flight.
    const TRANSPORTS: [&str; 12] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10", "t11"];
    rt.block_on(async {
        for round in 0..2 {
            for transport in TRANSPORTS {
                let options = InvokeOptions::new(Consumer::anonymous("c")).with_transport(transport);
                assert!(two.invoke(InvokeRequest::new("m.ok", json!({})), options).await.is_ok(), "{round}");
            }
        }
    });
    let text = handle.render();
    for transport in TRANSPORTS {
        let ok =
            format!(r#"agent_surface_calls_total{{capability="m.ok",code="OK",retry="none",transport="{transport}"}}"#);
        assert_eq!(sample(&text, &ok), Some(2.0), "{transport}: {text}");
        let in_flight = format!(r#"agent_surface_calls_in_flight{{transport="{transport}"}}"#);
        assert_eq!(sample(&text, &in_flight), Some(0.0), "{transport}: {text}");
    }
}
