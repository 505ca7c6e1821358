//! The `otel` feature: the invocation span's OpenTelemetry parent and its semantic-convention
//! attributes (the GenAI `execute_tool` span: `gen_ai.operation.name`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.id`, `error.type`, status `ERROR` for an error result).

use std::str::FromStr;

use agent_surface_core::InvokeResult;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::TraceParent;

/// The caller's span as a remote OpenTelemetry span context.
fn remote_context(parent: &TraceParent) -> opentelemetry::Context {
    let flags = if parent.sampled() { TraceFlags::SAMPLED } else { TraceFlags::default() };
    // Checked by `with_tracestate`; OpenTelemetry's own check is stricter in places (it
    // refuses a repeated key), and then the state is dropped, as the W3C allows.
    let state = parent.tracestate().and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
    let context = SpanContext::new(
        TraceId::from_bytes(parent.trace_id()),
        SpanId::from_bytes(parent.parent_id()),
        flags,
        true,
        state,
    );
    opentelemetry::Context::new().with_remote_span_context(context)
}

pub(super) fn start(
    span: &tracing::Span,
    parent: Option<&TraceParent>,
    correlation_id: &crate::CorrelationId,
    tool: Option<&str>,
) {
    if let Some(parent) = parent {
        // Fails only when no OpenTelemetry layer is installed (or the span is disabled): then
        // there is no OpenTelemetry span to parent.
        let _ = span.set_parent(remote_context(parent));
    }
    match tool {
        Some(tool) => {
            span.record("otel.name", format!("execute_tool {tool}"));
            span.record("gen_ai.tool.name", tool);
        }
        None => {
            span.record("otel.name", "execute_tool");
        }
    }
    span.record("gen_ai.operation.name", "execute_tool");
    span.record("gen_ai.tool.call.id", tracing::field::display(correlation_id));
}

pub(super) fn finish(span: &tracing::Span, result: &InvokeResult) {
    if let Some(code) = result.code() {
        span.record("error.type", code.as_str());
        span.record("otel.status_code", "error");
    }
}
