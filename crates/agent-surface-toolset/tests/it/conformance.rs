//! The conformance kit, run over every provider format, with and without the one-line rendering;
//! messages are worded for a model, which sends only a tool's arguments.

use agent_surface_core::InvokeResult;
use agent_surface_core::message::Sends;
use agent_surface_testing::{
    ConformanceConfig, Secrets, assert_conformance_with, assert_no_leak, assert_text_has_no_leak, codec,
};
use agent_surface_toolset::{Arguments, Provider, Rendering, ResultFormat, ToolCall, decode_result, encode_result};
use serde_json::{Value, json};

/// A call of `cart-add` with empty arguments, as `provider` would make it.
pub(crate) fn call(provider: Provider) -> ToolCall {
    ToolCall {
        provider,
        call_id: "call-1".into(),
        provider_id: provider != Provider::Gemini,
        tool_name: "cart-add".into(),
        arguments: Arguments::Json(json!({})),
    }
}

#[test]
fn every_provider_format_is_lossless() {
    for provider in Provider::ALL {
        for rendering in [Rendering::PayloadOnly, Rendering::OneLineFirst] {
            let format = ResultFormat { rendering };
            let c = call(provider);
            assert_conformance_with(
                &codec(|r: &InvokeResult| encode_result(&c, r, &format), |w: &Value| decode_result(provider, w)),
                &ConformanceConfig { sends: Sends::Arguments, ..Default::default() },
            );
        }
    }
}

#[test]
fn no_provider_format_leaks_a_cause() {
    let secrets = Secrets::new()
        .sql("DELETE FROM carts WHERE owner = 'u-7'")
        .url("amqp://queue:Sup3rS3cret@10.4.0.9:5672/orders")
        .stack_trace(
            "thread 'tokio-runtime-worker' panicked at src/cart.rs:17:5\nstack backtrace:\n   0: rust_begin_unwind",
        )
        .env("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG");
    let cause = std::io::Error::other(format!("{secrets:?}"));
    let result = InvokeResult::error(agent_surface_core::AgentSurfaceError::internal(cause).into_payload(), None);
    assert_no_leak(&result, &secrets);
    for provider in Provider::ALL {
        let item = encode_result(&call(provider), &result, &ResultFormat { rendering: Rendering::OneLineFirst });
        assert_text_has_no_leak(provider.as_str(), &item.to_string(), &secrets);
    }
}
