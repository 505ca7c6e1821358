//! Provider tool calls: the responses models send, and the arguments strings inside them.

use agent_surface_core::{ErrorPayload, InvokeResult};
use agent_surface_registry::id::{capability_from_tool_name, tool_name};
use agent_surface_toolset::{
    Arguments, Provider, ResultFormat, ToolCall, decode_result, encode_result, invocation_id, parse_tool_calls,
};
use serde_json::{Value, json};

use crate::check;

/// The namespace the driver derives invocation ids in.
const NAMESPACE: &str = "conversation-1";

/// Reads `data` (lossily decoded) as the `arguments` string of an OpenAI Chat and an OpenAI
/// Responses call, and as a tool name; when `data` is JSON, also as a whole response of every
/// provider, and as the arguments object of one call of every provider.
///
/// Panics (a finding) unless: every response of the right shape parses, and every other one is
/// a typed [`agent_surface_toolset::ParseError`] naming its provider; an arguments string parses
/// exactly as `serde_json` reads it, and a malformed one is described without being quoted; a
/// tool name maps to a capability exactly when it maps back; every call becomes a request with
/// the namespaced invocation id or an error result that round-trips, quotes nothing of the call,
/// and reads back unchanged from each provider's result encoding (both renderings); and an
/// output reads back from each provider's encoding.
///
/// ```
/// agent_surface_fuzz::toolset_args(br#"{"sku": "tea"}"#);
/// agent_surface_fuzz::toolset_args(br#"{"sku": "#);
/// ```
pub fn toolset_args(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    let chat = |name: &str, arguments: Value| {
        json!({"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
        ]})
    };
    let responses = |name: &str, arguments: Value| json!({"output": [{"type": "function_call", "call_id": "call_1", "name": name, "arguments": arguments}]});

    for (provider, response) in [
        (Provider::OpenAiChat, chat("fuzz-echo", Value::String(text.clone()))),
        (Provider::OpenAiResponses, responses("fuzz-echo", Value::String(text.clone()))),
    ] {
        let call = one_call(provider, &response);
        arguments_read_as_json_does(&text, &call.arguments);
        check_call(&call);
    }

    let named = one_call(Provider::OpenAiChat, &chat(&text, json!("{}")));
    let capability = capability_from_tool_name(&text);
    if let Some(capability) = &capability {
        assert_eq!(tool_name(capability).as_deref(), Some(text.as_str()), "a tool name does not map back");
    }
    match named.to_request(None) {
        Ok(request) => assert_eq!(Some(&request.capability), capability.as_ref(), "a call names another capability"),
        Err(result) => assert!(capability.is_none(), "a valid tool name was refused: {result:?}"),
    }
    check_call(&named);

    let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
    for provider in Provider::ALL {
        match parse_tool_calls(provider, &value, 7) {
            Ok(calls) => calls.iter().for_each(check_call),
            Err(fault) => {
                assert_eq!(fault.provider, provider, "a parse error names another provider: {fault}");
                assert!(!fault.problem.is_empty() && !fault.to_string().is_empty(), "an empty parse error");
            }
        }
    }
    let expected = if value.is_null() { json!({}) } else { value.clone() };
    for (provider, response) in [
        (Provider::OpenAiChat, chat("fuzz-tree", value.clone())),
        (Provider::OpenAiResponses, responses("fuzz-tree", value.clone())),
        (
            Provider::Anthropic,
            json!({"content": [{"type": "tool_use", "id": "toolu_1", "name": "fuzz-tree", "input": value}]}),
        ),
        (
            Provider::Gemini,
            json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "fuzz-tree", "args": value}}]}}]}),
        ),
    ] {
        let call = one_call(provider, &response);
        // A string is OpenAI's arguments text, read as JSON; everything else is taken as it is.
        if !(value.is_string() && matches!(provider, Provider::OpenAiChat | Provider::OpenAiResponses)) {
            assert_eq!(call.arguments, Arguments::Json(expected.clone()), "{provider} arguments changed");
        }
        check_call(&call);
        output_reads_back(&call, &expected);
    }
}

/// The only call of a response that has the provider's shape.
#[track_caller]
fn one_call(provider: Provider, response: &Value) -> ToolCall {
    let calls = parse_tool_calls(provider, response, 0)
        .unwrap_or_else(|e| panic!("a response of the right shape does not parse ({e}): {response}"));
    let [call] = <[ToolCall; 1]>::try_from(calls).unwrap_or_else(|calls| panic!("not one call: {calls:?}"));
    call
}

/// OpenAI arguments text reads as `serde_json` reads it (blank is `{}`); a malformed one is
/// described by position only.
#[track_caller]
fn arguments_read_as_json_does(text: &str, arguments: &Arguments) {
    let parsed = serde_json::from_str::<Value>(text).ok();
    match arguments {
        Arguments::Json(v) if text.trim().is_empty() => assert_eq!(v, &json!({}), "blank arguments are not {{}}"),
        Arguments::Json(v) => assert_eq!(Some(v), parsed.as_ref(), "arguments read differently from serde_json"),
        Arguments::Malformed { problem } => {
            assert!(parsed.is_none() && !text.trim().is_empty(), "valid arguments were called malformed: {problem}");
            let position = problem
                .strip_prefix("a JSON syntax error at line ")
                .and_then(|rest| rest.split_once(", column "))
                .is_some_and(|(line, column)| {
                    [line, column].iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                });
            assert!(
                position || problem == "the JSON text ends before the value is complete",
                "a malformed-arguments problem says more than where: {problem:?}"
            );
        }
    }
}

/// The call becomes a request with the namespaced id, or an error result that round-trips,
/// quotes nothing of the call, and reads back from every result encoding of its provider.
#[track_caller]
fn check_call(call: &ToolCall) {
    let id = invocation_id(Some(NAMESPACE), call.provider, &call.call_id);
    match call.to_request(Some(NAMESPACE)) {
        Ok(request) => assert_eq!(request.invocation_id.as_ref(), Some(&id), "a request lost its invocation id"),
        Err(result) => {
            assert_eq!(result.invocation_id(), Some(id.as_str()), "an error result lost its invocation id");
            check::result_round_trips(&result);
            if let Some(payload) = result.error_payload() {
                check::no_marker_leak(payload, false);
            }
            let plain = result.clone().with_invocation_id(None);
            for format in formats() {
                let item = encode_result(call, &result, &format);
                let back = decode_result(call.provider, &item)
                    .unwrap_or_else(|e| panic!("a {} result item does not read back ({e}): {item}", call.provider));
                assert_eq!(back, plain, "a {} result item reads back differently: {item}", call.provider);
            }
        }
    }
}

/// An output reads back from each provider's encoding; OpenAI's have no error flag, so an
/// output that is itself a valid payload reads back as that error (documented).
#[track_caller]
fn output_reads_back(call: &ToolCall, output: &Value) {
    let result = InvokeResult::ok(output.clone(), None);
    let item = encode_result(call, &result, &ResultFormat::default());
    let back = decode_result(call.provider, &item)
        .unwrap_or_else(|e| panic!("a {} output item does not read back ({e}): {item}", call.provider));
    let openai = matches!(call.provider, Provider::OpenAiChat | Provider::OpenAiResponses);
    match serde_json::from_value::<ErrorPayload>(output.clone()) {
        Ok(payload) if openai => assert_eq!(back, InvokeResult::error(payload, None), "{item}"),
        _ => assert_eq!(back, result, "a {} output item reads back differently: {item}", call.provider),
    }
}

fn formats() -> [ResultFormat; 2] {
    [ResultFormat::default(), ResultFormat { rendering: agent_surface_toolset::Rendering::OneLineFirst }]
}
