//! The `otel` feature, through an in-memory span exporter and a `tracing_opentelemetry` layer:
//! a call with the caller's `traceparent` continues the caller's trace; a call without one starts
//! a new one; the span carries the semantic conventions' attributes.
//!
//! Run with `cargo test -p agent-surface-registry --features otel-tests --test otel`
//! (`cargo xtask ci` does).

use agent_surface_core::AgentSurfaceError;
use agent_surface_policy::Consumer;
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig, TraceParent};
use opentelemetry::trace::{SpanId, Status, TraceId, TracerProvider as _};
use opentelemetry::{KeyValue, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Runs `script` with an OpenTelemetry layer installed on this thread and returns the exported
/// spans.
fn exported(script: impl AsyncFnOnce(&Registry)) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let registry = Registry::new(RegistryConfig::default());
            let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
            registry
                .define("m", |t| {
                    t.capability("echo", "Echoes.").raw_handler(schema.clone(), None, |_c: Ctx, v: Value| async move {
                        Ok::<_, AgentSurfaceError>(v)
                    });
                })
                .expect("valid");
            let _mount = registry.mount("m", "main").expect("mount");
            script(&registry).await;
        });
    });
    provider.force_flush().expect("flush");
    exporter.get_finished_spans().expect("spans")
}

fn options() -> InvokeOptions {
    InvokeOptions::new(Consumer::anonymous("c"))
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a OtelValue> {
    span.attributes.iter().find(|kv: &&KeyValue| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn invocation_span(spans: &[SpanData]) -> &SpanData {
    assert_eq!(spans.len(), 1, "one invocation span: {spans:#?}");
    &spans[0]
}

#[test]
fn a_callers_traceparent_becomes_the_parent_of_the_invocation_span() {
    let parent = TraceParent::extract(Some(CALLER), Some("rojo=00f067aa0ba902b7")).expect("valid");
    let spans = exported(async |r| {
        let request = InvokeRequest::new("m.echo", json!({"n": 1}));
        assert!(r.invoke(request, options().with_trace_parent(parent)).await.is_ok());
    });
    let span = invocation_span(&spans);
    let expected_trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    assert_eq!(span.span_context.trace_id(), expected_trace, "the caller's trace");
    assert_eq!(span.parent_span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap(), "the caller's span");
    assert!(span.parent_span_is_remote);
    assert!(span.span_context.is_sampled());
    assert_eq!(span.span_context.trace_state().header(), "rojo=00f067aa0ba902b7");
    // The semantic conventions' execute_tool span; the plain log's fields too.
    assert_eq!(span.name, "execute_tool m.echo");
    assert_eq!(attribute(span, "gen_ai.operation.name"), Some(&OtelValue::from("execute_tool")));
    assert_eq!(attribute(span, "gen_ai.tool.name"), Some(&OtelValue::from("m.echo")));
    assert!(attribute(span, "gen_ai.tool.call.id").is_some());
    assert_eq!(attribute(span, "trace_id"), Some(&OtelValue::from("4bf92f3577b34da6a3ce929d0e0e4736")));
    assert_eq!(attribute(span, "parent_id"), Some(&OtelValue::from("00f067aa0ba902b7")));
    assert_eq!(attribute(span, "error.type"), None);
    assert_eq!(span.status, Status::Unset);
}

#[test]
fn without_a_traceparent_the_invocation_span_starts_a_new_trace() {
    let spans = exported(async |r| {
        assert!(r.invoke(InvokeRequest::new("m.echo", json!({"n": 1})), options()).await.is_ok());
    });
    let span = invocation_span(&spans);
    assert_eq!(span.parent_span_id, SpanId::INVALID, "a root span");
    assert!(span.span_context.is_valid());
    assert_ne!(span.span_context.trace_id(), TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap());
    assert_eq!(attribute(span, "trace_id"), None);
}

#[test]
fn an_invalid_traceparent_is_ignored() {
    let spans = exported(async |r| {
        let ignored = TraceParent::extract(Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), None);
        assert_eq!(ignored, None);
        assert!(r.invoke(InvokeRequest::new("m.echo", json!({"n": 1})), options()).await.is_ok());
    });
    assert_eq!(invocation_span(&spans).parent_span_id, SpanId::INVALID);
}

#[test]
fn an_error_result_sets_error_type_and_status() {
    let spans = exported(async |r| {
        let parent = TraceParent::parse(CALLER).unwrap();
        let bad = InvokeRequest::new("m.echo", json!({"n": "x"}));
        assert!(!r.invoke(bad, options().with_trace_parent(parent.clone())).await.is_ok());
        // A name the registry does not define stays out of the span name.
        let unknown = InvokeRequest::new("m.made-up-by-the-agent", json!({}));
        assert!(!r.invoke(unknown, options().with_trace_parent(parent)).await.is_ok());
    });
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let (invalid, unknown) = (&spans[0], &spans[1]);
    assert_eq!(invalid.name, "execute_tool m.echo");
    assert_eq!(attribute(invalid, "error.type"), Some(&OtelValue::from("INVALID_INPUT")));
    assert!(matches!(invalid.status, Status::Error { .. }), "{:?}", invalid.status);
    assert_eq!(unknown.name, "execute_tool");
    assert_eq!(attribute(unknown, "gen_ai.tool.name"), None);
    assert_eq!(attribute(unknown, "error.type"), Some(&OtelValue::from("CAPABILITY_NOT_FOUND")));
    for span in &spans {
        assert_eq!(span.parent_span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
    }
}
