//! `tools/call`: results, errors in-band, `_meta`, strict mode, cancellation.

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_surface_core::{ErrorCode, Retry};
use agent_surface_mcp::{McpConfig, UnknownTool, codec};
use rmcp::model::{CallToolRequest, ClientRequest, ErrorCode as RpcCode};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{Value, json};

use crate::support::{call, call_raw, connect, eventually, fixture, params};

#[tokio::test]
async fn a_success_with_an_output_schema_has_structured_content_and_its_text() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let raw = call_raw(&c.client, "store-echo", json!({"text": "hi"}), json!({})).await.unwrap();
    let wire = serde_json::to_value(&raw).unwrap();
    assert_eq!(wire["isError"], false);
    assert_eq!(wire["structuredContent"], json!({"text": "hi"}));
    assert_eq!(wire["content"], json!([{"type": "text", "text": "{\"text\":\"hi\"}"}]));
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_capability_error_is_a_tool_result_carrying_exactly_the_payload() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    // The tool declares an output schema: the error must not carry structuredContent.
    let raw = call_raw(&c.client, "store-echo", json!({"text": "fail"}), json!({})).await.unwrap();
    let wire = serde_json::to_value(&raw).unwrap();
    assert_eq!(wire["isError"], true);
    assert!(wire.get("structuredContent").is_none());
    assert_eq!(wire["content"].as_array().unwrap().len(), 1);
    let payload: Value = serde_json::from_str(wire["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        payload,
        json!({
            "code": "PRECONDITION_FAILED",
            "message": payload["message"],
            "retry": "with-changes",
            // The handler ran: no `notProcessed`. The reference the model can quote, in the text
            // it reads, is the one `_meta` carries.
            "correlationId": wire["_meta"]["agent-surface/correlationId"],
            "details": {}
        })
    );
    assert!(payload["correlationId"].as_str().is_some_and(|id| id.starts_with("c-")));
    assert!(payload["message"].as_str().unwrap().contains("must not be `fail`"));

    // Input validation is a tool execution error too (SEP-1303), with the issues for the model.
    let r = call(&c.client, "store-echo", json!({"text": 5}), json!({})).await;
    let p = r.error_payload().unwrap();
    assert_eq!((p.code(), p.retry()), (ErrorCode::InvalidInput, Retry::WithChanges));
    assert_eq!(p.detail("issues").unwrap()[0]["path"], "/text");
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_unknown_tool_is_in_band_by_default_and_minus_32602_in_strict_mode() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    for name in ["store-nothing", "not a tool name", "store.echo"] {
        let r = call(&c.client, name, json!({}), json!({})).await;
        let p = r.error_payload().unwrap();
        assert_eq!((p.code(), p.retry()), (ErrorCode::CapabilityNotFound, Retry::AfterRefresh), "{name}");
        assert!(p.details().is_none());
    }
    c.client.cancel().await.unwrap();

    let strict = McpConfig { unknown_tool: UnknownTool::ProtocolError, ..Default::default() };
    let c = connect(&f.registry, strict, None).await;
    match call_raw(&c.client, "store-nothing", json!({}), json!({})).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, RpcCode::INVALID_PARAMS);
            let mapped = agent_surface_core::matrix::spec(ErrorCode::CapabilityNotFound).mcp.strict_protocol_error;
            assert_eq!(Some(e.code.0), mapped, "the matrix's strict mapping");
            assert_eq!(e.message, "Unknown tool: store-nothing");
        }
        other => panic!("expected -32602, got {other:?}"),
    }
    // Other capability errors stay in-band in strict mode.
    let r = call(&c.client, "store-echo", json!({"text": "fail"}), json!({})).await;
    assert_eq!(r.code(), Some(ErrorCode::PreconditionFailed));
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_invocation_id_comes_from_meta_never_from_the_request_id() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    // Without an invocation id, every call runs (JSON-RPC ids and progress tokens differ, but
    // they are not idempotency keys either way).
    for n in 1..=2 {
        let r = call(&c.client, "store-count", json!({}), json!({})).await;
        assert_eq!(r.output(), Some(&json!({"runs": n})));
        assert_eq!(r.invocation_id(), None);
    }
    // With one, a repeat replays the stored result and the id is echoed in the result's _meta.
    let inv = json!({"agent-surface/invocationId": "inv-1"});
    let first = call(&c.client, "store-count", json!({}), inv.clone()).await;
    let again = call(&c.client, "store-count", json!({}), inv.clone()).await;
    assert_eq!(first.output(), Some(&json!({"runs": 3})));
    assert_eq!(again, first);
    assert_eq!(again.invocation_id(), Some("inv-1"));
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 3);
    // The same id for another request conflicts.
    let r = call(&c.client, "store-echo", json!({"text": "x"}), inv).await;
    assert_eq!(r.code(), Some(ErrorCode::InvocationConflict));
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn staleness_tokens_and_targets_travel_in_meta() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let stale = json!({"agent-surface/surfaceId": f.registry.surface_id(), "agent-surface/surfaceVersion": 0});
    let r = call(&c.client, "store-send", json!({}), stale).await;
    let p = r.error_payload().unwrap();
    assert_eq!(p.code(), ErrorCode::StaleCapability);
    assert_eq!(p.detail("reason"), Some(&json!("surface-version-mismatch")));

    let other = json!({"agent-surface/surfaceId": "s-0000000000000000", "agent-surface/surfaceVersion": 1});
    let r = call(&c.client, "store-send", json!({}), other).await;
    assert_eq!(r.error_payload().unwrap().detail("reason"), Some(&json!("surface-reloaded")));

    let fresh = json!({
        "agent-surface/surfaceId": f.registry.surface_id(),
        "agent-surface/surfaceVersion": f.registry.version(),
        "agent-surface/target": {"instanceId": "main"}
    });
    assert!(call(&c.client, "store-send", json!({}), fresh).await.is_ok());
    let gone = json!({"agent-surface/target": {"instanceId": "elsewhere"}});
    assert!(!call(&c.client, "store-send", json!({}), gone).await.is_ok());
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn meta_of_the_wrong_type_is_a_protocol_fault() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    for bad in [
        json!({"agent-surface/invocationId": 7}),
        // Invocation ids follow one rule on every transport: 1 to 255 printable ASCII characters.
        // A 3 MB id is refused before anything is stored.
        json!({"agent-surface/invocationId": "x".repeat(3 << 20)}),
        json!({"agent-surface/invocationId": "x".repeat(256)}),
        json!({"agent-surface/invocationId": "caf\u{e9}"}),
        json!({"agent-surface/invocationId": "line\nbreak"}),
        json!({"agent-surface/surfaceVersion": "3"}),
        json!({"agent-surface/target": "main"}),
        json!({"agent-surface/target": {"instanceId": "main", "extra": 1}}),
    ] {
        match call_raw(&c.client, "store-echo", json!({"text": "x"}), bad.clone()).await {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code, RpcCode::INVALID_PARAMS, "{bad}"),
            other => panic!("expected -32602 for {}, got {other:?}", &bad.to_string()[..80.min(bad.to_string().len())]),
        }
    }
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 0, "nothing ran");
    // The longest id passes.
    let longest = json!({"agent-surface/invocationId": "y".repeat(255)});
    assert!(call_raw(&c.client, "store-echo", json!({"text": "x"}), longest).await.is_ok());
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn notifications_cancelled_cancels_the_invocation() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let inv = json!({"agent-surface/invocationId": "inv-slow"});
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params("store-slow", json!({}), inv.clone())));
    let handle = c.client.send_cancellable_request(request, PeerRequestOptions::no_options()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    handle.cancel(Some("stop".into())).await.unwrap();
    // The handler saw its cancellation token fire; the pipeline stored CANCELLED for the id.
    assert!(eventually(|| f.runs.0.load(Ordering::SeqCst) == 100).await, "handler was cancelled");
    let r = call(&c.client, "store-slow", json!({}), inv).await;
    let p = r.error_payload().unwrap();
    assert_eq!((p.code(), p.retry()), (ErrorCode::Cancelled, Retry::Yes));
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn results_decode_back_through_the_codec() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let raw = call_raw(&c.client, "store-echo", json!({"text": "a"}), json!({"agent-surface/invocationId": "i"}))
        .await
        .unwrap();
    let r = codec::decode(&raw).unwrap();
    assert_eq!(r.output(), Some(&json!({"text": "a"})));
    assert_eq!(r.invocation_id(), Some("i"));
    c.client.cancel().await.unwrap();
}

/// Every result carries a correlation id in `_meta` the agent can quote, one the registry made
/// (also for a call with an invocation id) — and the operator event carries the same.
#[test]
fn every_result_carries_the_correlation_id_of_its_operator_event() {
    let (ids, log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let f = fixture();
            let c = connect(&f.registry, McpConfig::default(), None).await;
            let mut ids = Vec::new();
            for (input, meta) in [
                (json!({"text": "fail"}), json!({})),
                (json!({"text": 5}), json!({})),
                (json!({"text": "hi"}), json!({"agent-surface/invocationId": "inv-corr-1"})),
            ] {
                let raw = call_raw(&c.client, "store-echo", input, meta).await.unwrap();
                let wire = serde_json::to_value(&raw).unwrap();
                ids.push(wire["_meta"]["agent-surface/correlationId"].as_str().expect("a correlation id").to_string());
            }
            c.client.cancel().await.unwrap();
            ids
        })
    });
    assert!(ids[0].starts_with("c-") && ids[1].starts_with("c-") && ids[0] != ids[1], "{ids:?}");
    // Never the caller's invocation id: the registry makes every id.
    assert!(ids[2].starts_with("c-"), "{ids:?}");
    for id in &ids {
        assert!(log.contains(&format!("correlation_id={id}")), "{id} is in the operator log:\n{log}");
    }
}

/// A `traceparent` in `_meta` (SEP-414) is the caller's trace: the invocation span records its
/// ids. An invalid one, or one that is not a string, is ignored: the call runs, no fault.
#[test]
fn a_traceparent_in_meta_is_the_callers_trace_and_an_invalid_one_is_ignored() {
    let (results, log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let f = fixture();
            let c = connect(&f.registry, McpConfig::default(), None).await;
            let mut results = Vec::new();
            for meta in [
                json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "rojo=1"}),
                json!({"traceparent": "00-FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF-00f067aa0ba902b7-01"}),
                json!({"traceparent": {"not": "a string"}}),
            ] {
                let raw = call_raw(&c.client, "store-echo", json!({"text": "hi"}), meta).await.expect("no fault");
                results.push(serde_json::to_value(&raw).unwrap());
            }
            c.client.cancel().await.unwrap();
            results
        })
    });
    for wire in &results {
        assert_ne!(wire["isError"], json!(true), "{wire}");
    }
    let spans =
        log.lines().filter(|l| l.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736 parent_id=00f067aa0ba902b7"));
    assert!(spans.count() >= 1, "{log}");
    assert_eq!(
        log.matches("trace_id=").count(),
        log.matches("trace_id=4bf92f3577b34da6a3ce929d0e0e4736").count(),
        "{log}"
    );
    assert!(log.contains("reason=\"trace-id is not 32 lowercase hex digits\""), "{log}");
    assert!(log.contains("reason=\"not a string\""), "{log}");
    // (rmcp traces whole frames at TRACE; our own events never carry the value.)
    let ours = log.lines().filter(|l| l.contains(" agent_surface::"));
    assert!(ours.clone().count() >= 3 && ours.clone().all(|l| !l.contains("FFFFFFFF")), "never the value: {log}");
}
