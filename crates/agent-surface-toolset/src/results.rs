//! Tool results back in each provider's format, and the one-line rendering for weaker models.

use agent_surface_core::message::Sends;
use agent_surface_core::{ErrorPayload, InvokeResult};
use serde_json::{Value, json};

use crate::calls::ToolCall;
use crate::provider::Provider;

/// Whether error results start with a one-line natural-language rendering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rendering {
    /// The payload JSON only (the default): capable models read `code` and `retry`.
    #[default]
    PayloadOnly,
    /// A line such as `Tool error RATE_LIMITED (retry: after-delay): Too many calls right now. …`
    /// before the payload JSON, for models that follow prose better than fields. The payload is
    /// still there, unchanged.
    OneLineFirst,
}

/// How tool results are written. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResultFormat {
    /// The one-line rendering of errors (off by default).
    pub rendering: Rendering,
}

/// The one-line rendering of an error payload: code, retry category and message, on one line.
///
/// ```
/// use agent_surface_core::AgentSurfaceError;
/// use agent_surface_toolset::render_line;
///
/// let p = AgentSurfaceError::capability_not_found().into_payload();
/// assert!(render_line(&p).starts_with("Tool error CAPABILITY_NOT_FOUND (retry: after-refresh): "));
/// ```
pub fn render_line(payload: &ErrorPayload) -> String {
    let line = format!("Tool error {} (retry: {}): {}", payload.code(), payload.retry(), payload.message());
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text a string-content provider receives: the output's JSON text, or the payload's JSON
/// text (after the one-line rendering when enabled).
fn content_text(result: &InvokeResult, format: &ResultFormat) -> String {
    match result {
        InvokeResult::Ok { output, .. } => output.to_string(),
        InvokeResult::Error { error, .. } => {
            let json = error.to_wire_text();
            match format.rendering {
                Rendering::OneLineFirst => format!("{}\n{json}", render_line(error)),
                _ => json,
            }
        }
        _ => String::new(),
    }
}

/// One call's result in `call.provider`'s format:
///
/// - OpenAI Chat: a message `{"role": "tool", "tool_call_id", "content"}`;
/// - OpenAI Responses: an input item `{"type": "function_call_output", "call_id", "output"}`;
/// - Anthropic: a content block `{"type": "tool_result", "tool_use_id", "content", "is_error"?}`,
///   `is_error: true` on errors;
/// - Gemini: a part `{"functionResponse": {"name", "id"?, "response"}}`, the response being
///   `{"output": …}` or `{"error": payload}` as Gemini's reference suggests.
///
/// A success carries the output JSON; an error carries the payload JSON
/// (`{code, message, retry, details?}`), so `code`, `retry` and `details` reach the model
/// in-band and losslessly — the same bytes as every other adapter. The message is worded for a
/// model, which sends only a tool's arguments ([`ErrorPayload::worded_for`] with
/// [`Sends::Arguments`]): it never asks for a fresh invocation id or a wait in milliseconds.
/// Use [`reply_messages`] to wrap the items of one turn into the messages to append.
pub fn encode_result(call: &ToolCall, result: &InvokeResult, format: &ResultFormat) -> Value {
    let result = result.worded_for(Sends::Arguments);
    let result = result.as_ref();
    match call.provider {
        Provider::OpenAiChat => {
            json!({"role": "tool", "tool_call_id": call.call_id, "content": content_text(result, format)})
        }
        Provider::OpenAiResponses => {
            json!({"type": "function_call_output", "call_id": call.call_id, "output": content_text(result, format)})
        }
        Provider::Anthropic => {
            let mut block = json!({"type": "tool_result", "tool_use_id": call.call_id});
            match (result.error_payload(), format.rendering) {
                (Some(p), Rendering::OneLineFirst) => {
                    block["content"] = json!([
                        {"type": "text", "text": render_line(p)},
                        {"type": "text", "text": p.to_wire_text()},
                    ]);
                }
                _ => block["content"] = json!(content_text(result, format)),
            }
            if result.error_payload().is_some() {
                block["is_error"] = json!(true);
            }
            block
        }
        Provider::Gemini => {
            let response = match result {
                InvokeResult::Ok { output, .. } => json!({"output": output}),
                InvokeResult::Error { error, .. } => {
                    let mut r = json!({"error": error.to_json()});
                    if format.rendering == Rendering::OneLineFirst {
                        r["summary"] = json!(render_line(error));
                    }
                    r
                }
                _ => json!({}),
            };
            let mut function_response = json!({"name": call.tool_name, "response": response});
            if call.provider_id {
                function_response["id"] = json!(call.call_id);
            }
            json!({"functionResponse": function_response})
        }
    }
}

/// The messages that answer one model turn, from its results' items (in call order):
///
/// - OpenAI Chat: the `role: "tool"` messages themselves, one per call;
/// - OpenAI Responses: the `function_call_output` items themselves;
/// - Anthropic: one `{"role": "user", "content": [tool_result…]}` message;
/// - Gemini: one `{"role": "user", "parts": [functionResponse…]}` content.
pub fn reply_messages(provider: Provider, items: Vec<Value>) -> Vec<Value> {
    match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses => items,
        Provider::Anthropic if items.is_empty() => items,
        Provider::Anthropic => vec![json!({"role": "user", "content": items})],
        Provider::Gemini if items.is_empty() => items,
        Provider::Gemini => vec![json!({"role": "user", "parts": items})],
    }
}

/// Reads a tool-result item of `provider` back into a result (without an invocation id, which
/// the wire form does not carry). The inverse of [`encode_result`], for conformance tests.
///
/// OpenAI's formats have no error flag: a content that parses as a valid error payload (the
/// matrix checks included) is read as an error, anything else as an output.
pub fn decode_result(provider: Provider, item: &Value) -> Result<InvokeResult, String> {
    match provider {
        Provider::OpenAiChat => decode_text(text_member(item, "content")?, None),
        Provider::OpenAiResponses => decode_text(text_member(item, "output")?, None),
        Provider::Anthropic => {
            let is_error = item.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            let text = match item.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(blocks)) => {
                    blocks.last().and_then(|b| b.get("text")).and_then(Value::as_str).unwrap_or_default().to_string()
                }
                _ => return Err("tool_result without content".into()),
            };
            decode_text(&text, Some(is_error))
        }
        Provider::Gemini => {
            let response = item
                .pointer("/functionResponse/response")
                .and_then(Value::as_object)
                .ok_or("functionResponse without a response object")?;
            match (response.get("output"), response.get("error")) {
                (Some(output), None) => Ok(InvokeResult::ok(output.clone(), None)),
                (None, Some(error)) => payload(error.clone()),
                _ => Err("the response has neither exactly `output` nor `error`".into()),
            }
        }
    }
}

fn text_member<'a>(item: &'a Value, key: &str) -> Result<&'a str, String> {
    item.get(key).and_then(Value::as_str).ok_or_else(|| format!("`{key}` is not a string"))
}

fn payload(value: Value) -> Result<InvokeResult, String> {
    serde_json::from_value::<ErrorPayload>(value).map(|p| InvokeResult::error(p, None)).map_err(|e| e.to_string())
}

fn decode_text(text: &str, is_error: Option<bool>) -> Result<InvokeResult, String> {
    let (json_text, rendered) = match serde_json::from_str::<Value>(text) {
        Ok(v) => (v, false),
        Err(_) => {
            let (_, rest) = text.split_once('\n').ok_or("the content is not JSON")?;
            (serde_json::from_str::<Value>(rest).map_err(|e| e.to_string())?, true)
        }
    };
    match is_error {
        Some(true) => payload(json_text),
        Some(false) if rendered => Err("a rendered line on a success".into()),
        Some(false) => Ok(InvokeResult::ok(json_text, None)),
        None => match serde_json::from_value::<ErrorPayload>(json_text.clone()) {
            Ok(p) => Ok(InvokeResult::error(p, None)),
            Err(_) if rendered => Err("a rendered line before something that is not a payload".into()),
            Err(_) => Ok(InvokeResult::ok(json_text, None)),
        },
    }
}
