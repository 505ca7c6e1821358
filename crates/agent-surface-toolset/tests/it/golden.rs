//! Golden wire shapes, one set per provider: tool definitions, tool calls, tool results.
//!
//! The expected JSON follows each provider's published request/response shapes:
//!
//! - OpenAI Chat Completions — function calling guide, <https://platform.openai.com/docs/guides/function-calling>
//!   (`tools[].type = "function"`, `function.{name, description, parameters, strict}`; the response's
//!   `choices[0].message.tool_calls[].{id, type, function.{name, arguments}}` with `arguments` a JSON
//!   string; answers are `{"role": "tool", "tool_call_id", "content"}` messages), and the structured
//!   outputs guide's "Supported schemas" for `strict`.
//! - OpenAI Responses — <https://platform.openai.com/docs/api-reference/responses> and the same
//!   guide (`tools[] = {"type": "function", name, description, parameters, strict}`, `strict`
//!   defaulting to true; `output[]` items `{"type": "function_call", call_id, name, arguments}`;
//!   answers are input items `{"type": "function_call_output", call_id, output}`).
//! - Anthropic Messages — tool use, "Handle tool calls",
//!   <https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use>
//!   (`tools[].{name, description, input_schema}`; `content[]` blocks `{"type": "tool_use", id, name,
//!   input}`; answers are a user message of `{"type": "tool_result", tool_use_id, content, is_error?}`).
//! - Gemini — function calling, <https://ai.google.dev/gemini-api/docs/function-calling>, and the
//!   `Schema` / `FunctionResponse` reference, <https://ai.google.dev/api/caching#Schema>
//!   (`tools[].functionDeclarations[].{name, description, parameters}` with upper-case types, a
//!   `type` on every node, or `parametersJsonSchema` instead of `parameters` — `gemini.rs`;
//!   `candidates[0].content.parts[].functionCall.{name, args, id?}`; answers are a user content of
//!   `functionResponse.{name, id?, response}` parts, `response` using the `output` / `error` keys).

use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{AgentSurfaceError, InvokeResult};
use agent_surface_registry::InvokeRequest;
use agent_surface_toolset::{
    Arguments, Provider, Rendering, ResultFormat, ToolCall, encode_result, parse_tool_calls, reply_messages,
    tool_definitions,
};
use serde_json::{Value, json};

use crate::support::{assert_gemini_tools_typed, descriptor, snapshot};

fn add_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "sku": {"type": "string", "description": "The product's SKU."},
            "quantity": {"type": "integer", "minimum": 1}
        },
        "required": ["sku", "quantity"],
        "additionalProperties": false
    })
}

fn add_parameters() -> Value {
    let mut s = add_schema();
    s.as_object_mut().unwrap().remove("$schema");
    s
}

fn cancel_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "reason": {"type": ["string", "null"], "maxLength": 200}
        },
        "required": ["order_id"]
    })
}

fn golden_snapshot() -> agent_surface_registry::Snapshot {
    let mut cancel = descriptor("orders.cancel", "Cancel an order that has not shipped yet.", cancel_schema());
    cancel["enabled"] = json!(false);
    cancel["unavailableReason"] = json!("Sign in first.");
    cancel["effect"] = json!("destructive");
    snapshot(json!([
        descriptor("cart.add", "Add a product to the cart.", add_schema()),
        descriptor(
            "cart.view",
            "Show the cart.",
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        ),
        cancel,
    ]))
}

const CANCEL_DESCRIPTION: &str = "Cancel an order that has not shipped yet. Currently unavailable: Sign in first.";

#[track_caller]
fn check(actual: Value, expected: Value) {
    assert_eq!(actual, expected, "actual:\n{actual:#}");
}

// ---- Definitions ---------------------------------------------------------------------------

#[test]
fn openai_chat_definitions() {
    check(
        tool_definitions(Provider::OpenAiChat, &golden_snapshot()),
        json!([
            {"type": "function", "function": {
                "name": "cart-add", "description": "Add a product to the cart.",
                "parameters": add_parameters(), "strict": true
            }},
            {"type": "function", "function": {
                "name": "cart-view", "description": "Show the cart.",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": false}, "strict": true
            }},
            {"type": "function", "function": {
                "name": "orders-cancel", "description": CANCEL_DESCRIPTION, "parameters": cancel_schema()
            }}
        ]),
    );
}

#[test]
fn openai_responses_definitions() {
    check(
        tool_definitions(Provider::OpenAiResponses, &golden_snapshot()),
        json!([
            {"type": "function", "name": "cart-add", "description": "Add a product to the cart.",
             "parameters": add_parameters(), "strict": true},
            {"type": "function", "name": "cart-view", "description": "Show the cart.",
             "parameters": {"type": "object", "properties": {}, "additionalProperties": false}, "strict": true},
            {"type": "function", "name": "orders-cancel", "description": CANCEL_DESCRIPTION,
             "parameters": cancel_schema(), "strict": false}
        ]),
    );
}

#[test]
fn anthropic_definitions() {
    check(
        tool_definitions(Provider::Anthropic, &golden_snapshot()),
        json!([
            {"name": "cart-add", "description": "Add a product to the cart.", "input_schema": add_parameters()},
            {"name": "cart-view", "description": "Show the cart.",
             "input_schema": {"type": "object", "properties": {}, "additionalProperties": false}},
            {"name": "orders-cancel", "description": CANCEL_DESCRIPTION, "input_schema": cancel_schema()}
        ]),
    );
}

#[test]
fn gemini_definitions() {
    check(
        tool_definitions(Provider::Gemini, &golden_snapshot()),
        json!([{"functionDeclarations": [
            {"name": "cart-add", "description": "Add a product to the cart.", "parameters": {
                "type": "OBJECT",
                "properties": {
                    "sku": {"type": "STRING", "description": "The product's SKU."},
                    "quantity": {"type": "INTEGER", "minimum": 1}
                },
                "required": ["sku", "quantity"]
            }},
            {"name": "cart-view", "description": "Show the cart."},
            {"name": "orders-cancel", "description": CANCEL_DESCRIPTION, "parameters": {
                "type": "OBJECT",
                "properties": {
                    "order_id": {"type": "STRING"},
                    "reason": {"type": "STRING", "nullable": true, "maxLength": 200}
                },
                "required": ["order_id"]
            }}
        ]}]),
    );
    check(tool_definitions(Provider::Gemini, &snapshot(json!([]))), json!([]));
    assert_gemini_tools_typed(&tool_definitions(Provider::Gemini, &golden_snapshot()));
}

// ---- Calls ---------------------------------------------------------------------------------

#[track_caller]
fn check_calls(provider: Provider, response: Value, expected: &[(&str, bool, &str, Arguments)]) {
    let calls = parse_tool_calls(provider, &response, 3).expect("parses");
    let got: Vec<(&str, bool, &str, &Arguments)> =
        calls.iter().map(|c| (c.call_id.as_str(), c.provider_id, c.tool_name.as_str(), &c.arguments)).collect();
    let want: Vec<(&str, bool, &str, &Arguments)> = expected.iter().map(|(i, p, n, a)| (*i, *p, *n, a)).collect();
    assert_eq!(got, want);
    assert!(calls.iter().all(|c| c.provider == provider));
}

fn args(v: Value) -> Arguments {
    Arguments::Json(v)
}

#[test]
fn openai_chat_calls() {
    let completion = json!({
        "id": "chatcmpl-9x", "object": "chat.completion", "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "refusal": null,
            "tool_calls": [
                {"id": "call_abc123", "type": "function",
                 "function": {"name": "cart-add", "arguments": "{\"sku\":\"tea\",\"quantity\":2}"}},
                {"id": "call_def456", "type": "function", "function": {"name": "cart-view", "arguments": "{}"}},
                {"id": "call_ghi789", "type": "function", "function": {"name": "cart-add", "arguments": "{\"sku\": \"tea\", "}}
            ]
        }}]
    });
    let expected = [
        ("call_abc123", true, "cart-add", args(json!({"sku": "tea", "quantity": 2}))),
        ("call_def456", true, "cart-view", args(json!({}))),
        (
            "call_ghi789",
            true,
            "cart-add",
            Arguments::Malformed { problem: "the JSON text ends before the value is complete".into() },
        ),
    ];
    check_calls(Provider::OpenAiChat, completion.clone(), &expected);
    check_calls(Provider::OpenAiChat, completion["choices"][0]["message"].clone(), &expected);
    check_calls(Provider::OpenAiChat, completion["choices"][0]["message"]["tool_calls"].clone(), &expected);
    // A text-only answer has no calls.
    check_calls(Provider::OpenAiChat, json!({"role": "assistant", "content": "Done."}), &[]);
    // A syntax error names the position, never the text.
    let bad =
        json!([{"id": "call_x", "type": "function", "function": {"name": "cart-add", "arguments": "{\"sku\": tea}"}}]);
    check_calls(
        Provider::OpenAiChat,
        bad,
        &[(
            "call_x",
            true,
            "cart-add",
            Arguments::Malformed { problem: "a JSON syntax error at line 1, column 10".into() },
        )],
    );
}

#[test]
fn openai_responses_calls() {
    let response = json!({
        "id": "resp_67ccd2bed1ec8190", "object": "response", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_12345xyz", "call_id": "call_12345xyz", "name": "cart-add",
             "arguments": "{\"sku\":\"mug\",\"quantity\":1}", "status": "completed"},
            {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Adding."}]}
        ]
    });
    let expected = [("call_12345xyz", true, "cart-add", args(json!({"sku": "mug", "quantity": 1})))];
    check_calls(Provider::OpenAiResponses, response.clone(), &expected);
    check_calls(Provider::OpenAiResponses, response["output"].clone(), &expected);
}

#[test]
fn anthropic_calls() {
    let message = json!({
        "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "I'll add the tea and show the cart."},
            {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "cart-add", "input": {"sku": "tea", "quantity": 2}},
            {"type": "tool_use", "id": "toolu_01B", "name": "cart-view", "input": {}}
        ]
    });
    let expected = [
        ("toolu_01A09q90qw90lq917835lq9", true, "cart-add", args(json!({"sku": "tea", "quantity": 2}))),
        ("toolu_01B", true, "cart-view", args(json!({}))),
    ];
    check_calls(Provider::Anthropic, message.clone(), &expected);
    check_calls(Provider::Anthropic, message["content"].clone(), &expected);
}

#[test]
fn gemini_calls() {
    let response = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "Adding both."},
            {"functionCall": {"name": "cart-add", "args": {"sku": "tea", "quantity": 2}}},
            {"functionCall": {"name": "cart-view"}},
            {"functionCall": {"id": "fc-7", "name": "cart-add", "args": {"sku": "pot", "quantity": 1}}}
        ]}, "finishReason": "STOP", "index": 0}],
        "responseId": "Rf9kaN-0BZ2",
        "modelVersion": "gemini-2.5-flash"
    });
    check_calls(
        Provider::Gemini,
        response.clone(),
        &[
            ("Rf9kaN-0BZ2.0", false, "cart-add", args(json!({"sku": "tea", "quantity": 2}))),
            ("Rf9kaN-0BZ2.1", false, "cart-view", args(json!({}))),
            ("fc-7", true, "cart-add", args(json!({"sku": "pot", "quantity": 1}))),
        ],
    );
    // Without a responseId, ids are scoped by the turn.
    check_calls(
        Provider::Gemini,
        response["candidates"][0]["content"].clone(),
        &[
            ("turn3.0", false, "cart-add", args(json!({"sku": "tea", "quantity": 2}))),
            ("turn3.1", false, "cart-view", args(json!({}))),
            ("fc-7", true, "cart-add", args(json!({"sku": "pot", "quantity": 1}))),
        ],
    );
}

#[test]
fn malformed_responses_are_parse_errors() {
    for provider in Provider::ALL {
        let err = parse_tool_calls(provider, &json!("text"), 0).unwrap_err();
        assert_eq!(err.provider, provider);
    }
    let err = parse_tool_calls(Provider::OpenAiChat, &json!({"tool_calls": [{"type": "function", "function": {}}]}), 0)
        .unwrap_err();
    assert_eq!(err.to_string(), "not a openai-chat response: /tool_calls/0/id is not a string");
    let err =
        parse_tool_calls(Provider::Anthropic, &json!({"content": [{"type": "tool_use", "id": "t"}]}), 0).unwrap_err();
    assert_eq!(err.problem, "/content/0/name is not a string");
}

/// A call id that is empty, or shared by two calls of a turn, would make them one invocation (the
/// later one replayed from the first's record, the model told it succeeded though nothing ran):
/// the turn is refused, as for a missing id. A Gemini call without an id gets one of its own.
#[test]
fn empty_or_repeated_call_ids_are_parse_errors() {
    let chat = |id: &str| json!({"id": id, "type": "function", "function": {"name": "cart-add", "arguments": "{}"}});
    let err = parse_tool_calls(Provider::OpenAiChat, &json!({"tool_calls": [chat("")]}), 0).unwrap_err();
    assert_eq!(err.problem, "/tool_calls/0/id is empty: a tool call needs an id for its result to answer");
    let err = parse_tool_calls(Provider::OpenAiChat, &json!({"tool_calls": [chat("c1"), chat("c2"), chat("c1")]}), 0)
        .unwrap_err();
    assert_eq!(err.problem, "tool calls 0 and 2 carry the same id: each call needs its own, for its result to answer");
    let responses =
        json!({"output": [{"type": "function_call", "call_id": "", "name": "cart-add", "arguments": "{}"}]});
    assert!(parse_tool_calls(Provider::OpenAiResponses, &responses, 0).is_err());
    let use_ = |id: &str| json!({"type": "tool_use", "id": id, "name": "cart-add", "input": {}});
    assert!(parse_tool_calls(Provider::Anthropic, &json!({"content": [use_("")]}), 0).is_err());
    assert!(parse_tool_calls(Provider::Anthropic, &json!({"content": [use_("t"), use_("t")]}), 0).is_err());
    let part = |id: &str| json!({"functionCall": {"id": id, "name": "cart-add", "args": {}}});
    assert!(parse_tool_calls(Provider::Gemini, &json!({"parts": [part("g"), part("g")]}), 0).is_err());
    let calls = parse_tool_calls(Provider::Gemini, &json!({"parts": [part(""), part("")]}), 0).unwrap();
    assert_eq!(calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(), ["turn0.0", "turn0.1"]);
}

#[test]
fn calls_become_requests() {
    let call = |provider, id: &str, tool: &str, arguments| ToolCall {
        provider,
        call_id: id.into(),
        provider_id: true,
        tool_name: tool.into(),
        arguments,
    };
    let request =
        call(Provider::OpenAiChat, "call_1", "cart-add", args(json!({"sku": "tea"}))).to_request(None).unwrap();
    assert_eq!(request, InvokeRequest::new("cart.add", json!({"sku": "tea"})).with_invocation_id("openai-chat:call_1"));
    let request = call(Provider::Gemini, "r.0", "orders-cancel", args(json!({}))).to_request(Some("conv-1")).unwrap();
    assert_eq!(request.invocation_id.as_deref(), Some("conv-1/gemini:r.0"));
    assert_eq!(request.capability, "orders.cancel");

    // Two providers' equal call ids never collide.
    let a = call(Provider::OpenAiChat, "call_1", "cart-add", args(json!({}))).to_request(None).unwrap();
    let b = call(Provider::OpenAiResponses, "call_1", "cart-add", args(json!({}))).to_request(None).unwrap();
    assert_ne!(a.invocation_id, b.invocation_id);

    // Not a tool name of ours: CAPABILITY_NOT_FOUND, answered without a request.
    let nf = call(Provider::Anthropic, "toolu_9", "get_weather", args(json!({}))).to_request(None).unwrap_err();
    assert_eq!(nf.to_json()["error"]["code"], "CAPABILITY_NOT_FOUND");
    assert_eq!(nf.invocation_id(), Some("anthropic:toolu_9"));

    // Malformed arguments: INVALID_INPUT with a clear issue.
    let bad = call(
        Provider::OpenAiChat,
        "call_2",
        "cart-add",
        Arguments::Malformed { problem: "a JSON syntax error at line 1, column 10".into() },
    )
    .to_request(None)
    .unwrap_err();
    check(
        bad.to_json()["error"]["details"].clone(),
        json!({"issues": [{"path": "", "message": "the arguments are not valid JSON (a JSON syntax error at line 1, column 10); send one JSON object"}]}),
    );
    assert_eq!(bad.to_json()["error"]["retry"], "with-changes");
}

// ---- Results -------------------------------------------------------------------------------

fn tool_call(provider: Provider, id: &str, provider_id: bool) -> ToolCall {
    ToolCall { provider, call_id: id.into(), provider_id, tool_name: "cart-add".into(), arguments: args(json!({})) }
}

fn ok() -> InvokeResult {
    InvokeResult::ok(json!({"lines": {"tea": 2}}), Some("x:1".into()))
}

fn limited() -> InvokeResult {
    InvokeResult::error(
        AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1200)).into_payload(),
        Some("x:2".into()),
    )
}

const OK_TEXT: &str = r#"{"lines":{"tea":2}}"#;
// The message is worded for a model, which sends only a tool's arguments and cannot wait so many
// milliseconds (`ErrorPayload::worded_for`); HTTP says "Wait 1200 ms before retrying".
const LIMITED_TEXT: &str = r#"{"code":"RATE_LIMITED","message":"Too many calls right now, so this call did not run; the limit frees up in 1200 ms. Do not repeat it at once: do other steps first, or tell the user to try again later.","retry":"after-delay","details":{"reason":"rate","retryAfterMs":1200}}"#;
const LIMITED_LINE: &str = "Tool error RATE_LIMITED (retry: after-delay): Too many calls right now, so this call did not run; the limit frees up in 1200 ms. Do not repeat it at once: do other steps first, or tell the user to try again later.";

fn plain() -> ResultFormat {
    ResultFormat::default()
}

fn rendered() -> ResultFormat {
    ResultFormat { rendering: Rendering::OneLineFirst }
}

#[test]
fn openai_chat_results() {
    let c = tool_call(Provider::OpenAiChat, "call_abc123", true);
    check(
        encode_result(&c, &ok(), &plain()),
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": OK_TEXT}),
    );
    check(
        encode_result(&c, &limited(), &plain()),
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": LIMITED_TEXT}),
    );
    check(
        encode_result(&c, &limited(), &rendered()),
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": format!("{LIMITED_LINE}\n{LIMITED_TEXT}")}),
    );
    // Successes are never rendered.
    check(
        encode_result(&c, &ok(), &rendered()),
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": OK_TEXT}),
    );
    let items = vec![encode_result(&c, &ok(), &plain())];
    assert_eq!(reply_messages(Provider::OpenAiChat, items.clone()), items);
}

#[test]
fn openai_responses_results() {
    let c = tool_call(Provider::OpenAiResponses, "call_12345xyz", true);
    check(
        encode_result(&c, &ok(), &plain()),
        json!({"type": "function_call_output", "call_id": "call_12345xyz", "output": OK_TEXT}),
    );
    check(
        encode_result(&c, &limited(), &plain()),
        json!({"type": "function_call_output", "call_id": "call_12345xyz", "output": LIMITED_TEXT}),
    );
    check(
        encode_result(&c, &limited(), &rendered()),
        json!({"type": "function_call_output", "call_id": "call_12345xyz", "output": format!("{LIMITED_LINE}\n{LIMITED_TEXT}")}),
    );
}

#[test]
fn anthropic_results() {
    let c = tool_call(Provider::Anthropic, "toolu_01A", true);
    let ok_block = json!({"type": "tool_result", "tool_use_id": "toolu_01A", "content": OK_TEXT});
    check(encode_result(&c, &ok(), &plain()), ok_block.clone());
    check(
        encode_result(&c, &limited(), &plain()),
        json!({"type": "tool_result", "tool_use_id": "toolu_01A", "content": LIMITED_TEXT, "is_error": true}),
    );
    check(
        encode_result(&c, &limited(), &rendered()),
        json!({"type": "tool_result", "tool_use_id": "toolu_01A", "is_error": true, "content": [
            {"type": "text", "text": LIMITED_LINE},
            {"type": "text", "text": LIMITED_TEXT}
        ]}),
    );
    check(
        Value::Array(reply_messages(Provider::Anthropic, vec![ok_block.clone()])),
        json!([{"role": "user", "content": [ok_block]}]),
    );
}

#[test]
fn gemini_results() {
    let c = tool_call(Provider::Gemini, "Rf9k.0", false);
    let limited_json: Value = serde_json::from_str(LIMITED_TEXT).unwrap();
    let ok_part = json!({"functionResponse": {"name": "cart-add", "response": {"output": {"lines": {"tea": 2}}}}});
    check(encode_result(&c, &ok(), &plain()), ok_part.clone());
    check(
        encode_result(&c, &limited(), &plain()),
        json!({"functionResponse": {"name": "cart-add", "response": {"error": limited_json}}}),
    );
    check(
        encode_result(&c, &limited(), &rendered()),
        json!({"functionResponse": {"name": "cart-add", "response": {"error": limited_json, "summary": LIMITED_LINE}}}),
    );
    // A call the provider gave an id is answered with it.
    let with_id = tool_call(Provider::Gemini, "fc-7", true);
    check(
        encode_result(&with_id, &ok(), &plain()),
        json!({"functionResponse": {"name": "cart-add", "id": "fc-7", "response": {"output": {"lines": {"tea": 2}}}}}),
    );
    check(
        Value::Array(reply_messages(Provider::Gemini, vec![ok_part.clone()])),
        json!([{"role": "user", "parts": [ok_part]}]),
    );
}
