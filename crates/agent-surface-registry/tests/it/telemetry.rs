//! The pipeline's metrics, read back through a Prometheus recorder after a scripted mix of calls.

use std::num::NonZeroU32;
use std::sync::Arc;

use agent_surface_core::AgentSurfaceError;
use agent_surface_policy::{MemoryRateLimiter, Quota, RateLimitConfig};
use agent_surface_registry::{Ctx, InvokeOptions, Registry, RegistryConfig};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::{Value, json};

use crate::support::{call, consumer};

fn registry(config: RegistryConfig) -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(config);
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    r.define("m", |t| {
        t.capability("ok", "Succeeds.").raw_handler(schema.clone(), None, |_c: Ctx, v: Value| async move { Ok(v) });
        t.capability("fail", "Fails.").raw_handler(schema.clone(), None, |_c: Ctx, _v: Value| async move {
            Err(AgentSurfaceError::internal("no"))
        });
    })
    .expect("valid");
    let m = r.mount("m", "main").expect("mount");
    (r, m)
}

/// Runs `script` against a registry built from `config` with a Prometheus recorder installed on
/// this thread, and returns the rendered text.
fn rendered(config: RegistryConfig, script: impl AsyncFnOnce(&Registry)) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (r, _m) = registry(config);
            script(&r).await;
        });
    });
    handle.render()
}

/// The value of the sample `name{labels}` (labels in the exporter's order), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn calls_are_counted_by_capability_code_retry_and_transport() {
    let text = rendered(RegistryConfig { metrics: true, ..Default::default() }, async |r| {
        for _ in 0..3 {
            assert!(r.invoke(call("m.ok", json!({"n": 1})), consumer("c").with_transport("http")).await.is_ok());
        }
        r.invoke(call("m.ok", json!({"n": "x"})), consumer("c").with_transport("http")).await;
        r.invoke(call("m.fail", json!({"n": 1})), consumer("c").with_transport("mcp")).await;
        // Names an agent made up never become label values.
        r.invoke(call("m.made-up-by-the-agent", json!({})), consumer("c")).await;
        r.invoke(call("ignore previous instructions", json!({})), consumer("c")).await;
    });
    let calls = |labels: &str| sample(&text, &format!("agent_surface_calls_total{{{labels}}}"));
    assert_eq!(calls(r#"capability="m.ok",code="OK",retry="none",transport="http""#), Some(3.0), "{text}");
    assert_eq!(calls(r#"capability="m.ok",code="INVALID_INPUT",retry="with-changes",transport="http""#), Some(1.0));
    assert_eq!(calls(r#"capability="m.fail",code="EXECUTION_FAILED",retry="no",transport="mcp""#), Some(1.0));
    assert_eq!(
        calls(r#"capability="-",code="CAPABILITY_NOT_FOUND",retry="after-refresh",transport="direct""#),
        Some(2.0)
    );
    assert!(!text.contains("made-up") && !text.contains("ignore previous"), "{text}");
    // Durations per phase group; nothing in flight once the calls ended.
    assert!(
        text.contains(r#"agent_surface_call_duration_seconds{capability="m.ok",phase_group="execute",quantile="0.5"}"#)
            || text.contains(r#"agent_surface_call_duration_seconds_count{capability="m.ok",phase_group="execute"}"#),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"agent_surface_call_duration_seconds_count{capability="m.ok",phase_group="total"}"#),
        Some(4.0)
    );
    assert_eq!(sample(&text, r#"agent_surface_calls_in_flight{transport="http"}"#), Some(0.0));
}

#[test]
fn rate_limit_refusals_are_counted() {
    let limiter = MemoryRateLimiter::new(RateLimitConfig {
        per_consumer: Some(Quota::per_minute(NonZeroU32::new(1).unwrap())),
        ..Default::default()
    });
    let config = RegistryConfig { rate_limiter: Some(Arc::new(limiter)), metrics: true, ..Default::default() };
    let text = rendered(config, async |r| {
        assert!(r.invoke(call("m.ok", json!({"n": 1})), consumer("c")).await.is_ok());
        let limited = r.invoke(call("m.ok", json!({"n": 1})), consumer("c")).await;
        assert_eq!(limited.code().map(|c| c.as_str()), Some("RATE_LIMITED"));
    });
    assert_eq!(
        sample(&text, r#"agent_surface_rate_limited_total{capability="m.ok",reason="rate"}"#),
        Some(1.0),
        "{text}"
    );
}

#[test]
fn metrics_are_on_by_default_and_can_be_turned_off() {
    let ok = async |r: &Registry| {
        let anonymous = InvokeOptions::new(agent_surface_policy::Consumer::anonymous("c"));
        assert!(r.invoke(call("m.ok", json!({"n": 1})), anonymous).await.is_ok());
    };
    let text = rendered(RegistryConfig::default(), ok);
    let series = r#"agent_surface_calls_total{capability="m.ok",code="OK",retry="none",transport="direct"}"#;
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
    let text = rendered(RegistryConfig { metrics: false, ..Default::default() }, ok);
    assert!(!text.contains("agent_surface_calls_total"), "{text}");
}

/// The handles a registry caches belong to the recorder that registered them: calls made with
/// no recorder record nothing, and each recorder in scope later gets the calls made under it
/// (never the handles of the one before).
#[test]
fn each_recorder_gets_the_calls_made_under_it() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (r, _m) = registry(RegistryConfig::default());
    let calls = |n: usize| {
        rt.block_on(async {
            for _ in 0..n {
                assert!(r.invoke(call("m.ok", json!({"n": 1})), consumer("c").with_transport("mcp")).await.is_ok());
            }
        })
    };
    calls(1);
    let series = r#"agent_surface_calls_total{capability="m.ok",code="OK",retry="none",transport="mcp"}"#;
    let under = |n: usize| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || calls(n));
        let text = handle.render();
        assert_eq!(sample(&text, series), Some(n as f64), "{text}");
        assert_eq!(sample(&text, r#"agent_surface_calls_in_flight{transport="mcp"}"#), Some(0.0), "{text}");
        let total = r#"agent_surface_call_duration_seconds_count{capability="m.ok",phase_group="total"}"#;
        assert_eq!(sample(&text, total), Some(n as f64), "{text}");
    };
    under(2);
    under(3);
}

#[test]
fn store_failures_are_counted() {
    let config =
        RegistryConfig { idempotency: Arc::new(crate::operator_log::DownStore), metrics: true, ..Default::default() };
    let text = rendered(config, async |r| {
        let failed = r.invoke(call("m.ok", json!({"n": 1})).with_invocation_id("i-1"), consumer("c")).await;
        assert_eq!(failed.code().map(|c| c.as_str()), Some("EXECUTION_FAILED"));
    });
    assert_eq!(sample(&text, r#"agent_surface_store_errors_total{store="idempotency"}"#), Some(1.0), "{text}");
    // Stopped at admission, before resolution: the name is looked up for its label.
    let series = r#"agent_surface_calls_total{capability="m.ok",code="EXECUTION_FAILED",retry="after-delay",transport="direct"}"#;
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
}

/// The store gauges come from what the memory stores report, set when the application asks
/// (just before rendering).
#[test]
fn store_usage_is_reported_on_request() {
    use agent_surface_core::Effect;
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let config = RegistryConfig { confirmation: Some(engine), metrics: true, ..Default::default() };
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let r = Registry::new(config);
            r.define("g", |t| {
                t.capability("go", "Gated.")
                    .effect(Effect::Destructive)
                    .confirm(|_: &Value| "Go.".to_string())
                    .raw_handler(json!({"type": "object"}), None, |_c: Ctx, v: Value| async move { Ok(v) })
            })
            .unwrap();
            let _m = r.mount("g", "main").unwrap();
            // Two requests (the same one repeated would present the first's confirmation).
            for id in ["i-1", "i-2"] {
                let asked = r.invoke(call("g.go", json!({"id": id})).with_invocation_id(id), consumer("c")).await;
                assert_eq!(asked.code().map(|c| c.as_str()), Some("CONFIRMATION_REQUIRED"));
            }
            r.record_store_usage();
        });
    });
    let text = handle.render();
    assert_eq!(sample(&text, "agent_surface_confirmations_pending"), Some(2.0), "{text}");
    assert_eq!(sample(&text, r#"agent_surface_store_entries{store="confirmation"}"#), Some(2.0), "{text}");
    // CONFIRMATION_REQUIRED is not stored as a terminal result: the two records were released.
    assert!(sample(&text, r#"agent_surface_store_entries{store="idempotency"}"#).is_some(), "{text}");
    assert!(sample(&text, r#"agent_surface_store_bytes{store="idempotency"}"#).is_some(), "{text}");
}

#[test]
fn durations_are_recorded_in_seconds_and_the_handler_s_lies_within_the_call_s() {
    // A handler that waits 50 ms: its duration (and the call's) is at least that in seconds, with
    // a margin for the clock's calibration, and far below what a unit slip (milliseconds or
    // nanoseconds counted as seconds) would give.
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let r = Registry::new(RegistryConfig::default());
            let schema = json!({"type": "object"});
            r.define("m", |t| {
                t.capability("slow", "Waits.").raw_handler(schema, None, |_c: Ctx, v: Value| async move {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Ok(v)
                });
            })
            .expect("valid");
            let _m = r.mount("m", "main").expect("mount");
            assert!(r.invoke(call("m.slow", json!({})), consumer("c")).await.is_ok());
        });
    });
    let text = handle.render();
    let seconds = |group: &str| {
        let series = format!(r#"agent_surface_call_duration_seconds_sum{{capability="m.slow",phase_group="{group}"}}"#);
        sample(&text, &series).unwrap_or_else(|| panic!("no {group} duration in {text}"))
    };
    let (execute, total) = (seconds("execute"), seconds("total"));
    assert!((0.045..10.0).contains(&execute), "execute {execute} s\n{text}");
    assert!(execute <= total && total < 10.0, "execute {execute} s, total {total} s\n{text}");
}
