//! Tool calls from each provider's response shape, and the invocation ids derived from them.

use std::fmt;

use agent_surface_core::details::InputIssue;
use agent_surface_core::{AgentSurfaceError, InvokeResult};
use agent_surface_registry::InvokeRequest;
use agent_surface_registry::id::capability_from_tool_name;
use serde_json::{Value, json};

use crate::provider::Provider;

/// The arguments of a tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum Arguments {
    /// The arguments as JSON (absent arguments are `{}`).
    Json(Value),
    /// OpenAI sent an `arguments` string that is not JSON; `problem` says where it broke, without
    /// quoting it.
    Malformed {
        /// What is wrong, e.g. "a JSON syntax error at line 1, column 9".
        problem: String,
    },
}

/// One tool call of a model turn, in provider-neutral form.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// Whose format it came in.
    pub provider: Provider,
    /// The provider's call id (`call_…`, `toolu_…`), or the one derived for a Gemini call
    /// without an id; tool results answer with it.
    pub call_id: String,
    /// Whether `call_id` came from the provider (false for a derived Gemini id: the
    /// `functionResponse` then carries no `id`).
    pub provider_id: bool,
    /// The tool name the model called.
    pub tool_name: String,
    /// The arguments.
    pub arguments: Arguments,
}

/// A response that does not have the provider's shape (a protocol fault, not the model's: it is
/// never turned into a tool result).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The provider whose shape was expected.
    pub provider: Provider,
    /// What is wrong, with a JSON Pointer into the response.
    pub problem: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a {} response: {}", self.provider, self.problem)
    }
}

impl std::error::Error for ParseError {}

fn fault(provider: Provider, problem: impl Into<String>) -> ParseError {
    ParseError { provider, problem: problem.into() }
}

fn string_at<'a>(provider: Provider, v: &'a Value, key: &str, at: &str) -> Result<&'a str, ParseError> {
    v.get(key).and_then(Value::as_str).ok_or_else(|| fault(provider, format!("{at}/{key} is not a string")))
}

/// A provider's call id: a string that is not empty. The id becomes the call's invocation id
/// ([`invocation_id`]), so an empty one would be every such call's (a later call replayed from
/// an earlier one's record instead of run), and its result could not say which call it answers.
fn call_id_at<'a>(provider: Provider, v: &'a Value, key: &str, at: &str) -> Result<&'a str, ParseError> {
    let id = string_at(provider, v, key, at)?;
    if id.is_empty() {
        return Err(fault(provider, format!("{at}/{key} is empty: a tool call needs an id for its result to answer")));
    }
    Ok(id)
}

/// Refuses a turn in which two calls carry one id: they would be one invocation (the second
/// joined to or replayed from the first instead of run), and their results could not be told
/// apart.
fn distinct(provider: Provider, calls: Vec<ToolCall>) -> Result<Vec<ToolCall>, ParseError> {
    for (i, call) in calls.iter().enumerate() {
        if let Some(first) = calls[..i].iter().position(|c| c.call_id == call.call_id) {
            return Err(fault(
                provider,
                format!(
                    "tool calls {first} and {i} carry the same id: each call needs its own, for its result to answer"
                ),
            ));
        }
    }
    Ok(calls)
}

/// The tool calls of one model response, in order.
///
/// Each provider's response may be passed whole or as its relevant part:
///
/// - OpenAI Chat: the completion (`choices[0].message`), the assistant message, or its
///   `tool_calls` array. `function.arguments` is a JSON *string*; a malformed one becomes
///   [`Arguments::Malformed`], never a panic or an error of the whole turn.
/// - OpenAI Responses: the response (`output`), or the `output` array; items of type
///   `function_call` (`call_id`, `name`, `arguments`).
/// - Anthropic: the message (`content`), or the `content` array; blocks of type `tool_use`
///   (`id`, `name`, `input`).
/// - Gemini: the response (`candidates[0].content`), the content (`parts`), or the `parts`
///   array; parts with `functionCall` (`name`, `args`, `id`?). A call without an `id` gets
///   `{responseId}.{n}` when the response has a `responseId`, else `turn{turn}.{n}`, `n` being
///   the call's position among the turn's calls.
///
/// A call id that is empty, or one that two calls of the turn share, makes the turn a
/// [`ParseError`], as a missing one does: the id is the call's invocation id, so such calls would
/// be one invocation (a later one replayed from the first's record instead of run), and their
/// results could not say which call they answer.
///
/// Text and other blocks are skipped. `turn` only matters for Gemini calls without ids: such an
/// id is deterministic for a given response only when it has a `responseId`; without one it is
/// as unique as `turn`. The id becomes the invocation id ([`invocation_id`]), which the registry
/// keys by the caller's principal (a signed-in person across all their conversations), so a
/// caller that passes the same `turn` twice for one person (a counter that starts again in each
/// conversation, say) gets the second call replayed from the first's record instead of run.
/// [`crate::Toolset::parse_calls`] adds a random part per toolset to it for that reason; with
/// this function, give each conversation its own [`invocation_id`] namespace.
///
/// ```
/// use agent_surface_toolset::{Arguments, Provider, parse_tool_calls};
/// use serde_json::json;
///
/// let message = json!({"role": "assistant", "tool_calls": [
///     {"id": "call_1", "type": "function", "function": {"name": "cart-add", "arguments": "{\"sku\":\"tea\"}"}},
///     {"id": "call_2", "type": "function", "function": {"name": "cart-add", "arguments": "{\"sku\":"}}
/// ]});
/// let calls = parse_tool_calls(Provider::OpenAiChat, &message, 0).unwrap();
/// assert_eq!(calls[0].arguments, Arguments::Json(json!({"sku": "tea"})));
/// assert!(matches!(calls[1].arguments, Arguments::Malformed { .. }));
/// ```
pub fn parse_tool_calls(provider: Provider, response: &Value, turn: u64) -> Result<Vec<ToolCall>, ParseError> {
    parse_scoped(provider, response, &format!("turn{turn}"))
}

/// [`parse_tool_calls`], with `scope` leading the ids derived for Gemini calls that have neither
/// an `id` nor a `responseId` (`{scope}.{n}`).
pub(crate) fn parse_scoped(provider: Provider, response: &Value, scope: &str) -> Result<Vec<ToolCall>, ParseError> {
    let calls = match provider {
        Provider::OpenAiChat => openai_chat(response),
        Provider::OpenAiResponses => openai_responses(response),
        Provider::Anthropic => anthropic(response),
        Provider::Gemini => gemini(response, scope),
    }?;
    distinct(provider, calls)
}

fn array_in<'a>(provider: Provider, v: &'a Value, paths: &[&str]) -> Result<(&'a [Value], String), ParseError> {
    if let Value::Array(items) = v {
        return Ok((items, String::new()));
    }
    for path in paths {
        match v.pointer(path) {
            Some(Value::Array(items)) => return Ok((items, path.to_string())),
            Some(Value::Null) => return Ok((&[], path.to_string())),
            _ => {}
        }
    }
    if v.is_object() {
        // A response without any tool calls (a text-only turn).
        return Ok((&[], String::new()));
    }
    Err(fault(provider, "the response is neither an object nor an array"))
}

/// OpenAI's `arguments` (Chat and Responses): a JSON string, parsed; absent or null is `{}`;
/// some OpenAI-compatible servers send an object, taken as it is.
fn openai_arguments(arguments: Option<&Value>) -> Arguments {
    match arguments {
        None | Some(Value::Null) => Arguments::Json(json!({})),
        Some(Value::String(text)) => parse_arguments(text),
        Some(other) => Arguments::Json(other.clone()),
    }
}

/// A call that carries the provider's own call id.
fn provider_call(provider: Provider, id: &str, name: &str, arguments: Arguments) -> ToolCall {
    ToolCall { provider, call_id: id.to_string(), provider_id: true, tool_name: name.to_string(), arguments }
}

fn openai_chat(response: &Value) -> Result<Vec<ToolCall>, ParseError> {
    let p = Provider::OpenAiChat;
    let (items, base) = array_in(p, response, &["/choices/0/message/tool_calls", "/tool_calls"])?;
    let mut calls = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{base}/{i}");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("function");
        if kind != "function" {
            continue;
        }
        let id = call_id_at(p, item, "id", &at)?;
        let function = item.get("function").ok_or_else(|| fault(p, format!("{at}/function is missing")))?;
        let name = string_at(p, function, "name", &format!("{at}/function"))?;
        calls.push(provider_call(p, id, name, openai_arguments(function.get("arguments"))));
    }
    Ok(calls)
}

fn openai_responses(response: &Value) -> Result<Vec<ToolCall>, ParseError> {
    let p = Provider::OpenAiResponses;
    let (items, base) = array_in(p, response, &["/output"])?;
    let mut calls = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            continue;
        }
        let at = format!("{base}/{i}");
        let id = call_id_at(p, item, "call_id", &at)?;
        let name = string_at(p, item, "name", &at)?;
        calls.push(provider_call(p, id, name, openai_arguments(item.get("arguments"))));
    }
    Ok(calls)
}

fn anthropic(response: &Value) -> Result<Vec<ToolCall>, ParseError> {
    let p = Provider::Anthropic;
    let (items, base) = array_in(p, response, &["/content"])?;
    let mut calls = Vec::new();
    for (i, block) in items.iter().enumerate() {
        if block.get("type").and_then(Value::as_str) != Some("tool_use") {
            continue;
        }
        let at = format!("{base}/{i}");
        let id = call_id_at(p, block, "id", &at)?;
        let name = string_at(p, block, "name", &at)?;
        let input = block.get("input").cloned().filter(|v| !v.is_null()).unwrap_or_else(|| json!({}));
        calls.push(provider_call(p, id, name, Arguments::Json(input)));
    }
    Ok(calls)
}

fn gemini(response: &Value, fallback: &str) -> Result<Vec<ToolCall>, ParseError> {
    let p = Provider::Gemini;
    let (parts, base) = array_in(p, response, &["/candidates/0/content/parts", "/parts"])?;
    let scope = response.get("responseId").and_then(Value::as_str).unwrap_or(fallback);
    let mut calls = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let Some(call) = part.get("functionCall") else { continue };
        let at = format!("{base}/{i}/functionCall");
        let name = string_at(p, call, "name", &at)?;
        let args = call.get("args").cloned().filter(|v| !v.is_null()).unwrap_or_else(|| json!({}));
        let (call_id, provider_id) = match call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
            Some(id) => (id.to_string(), true),
            None => (format!("{scope}.{}", calls.len()), false),
        };
        calls.push(ToolCall {
            provider: p,
            call_id,
            provider_id,
            tool_name: name.to_string(),
            arguments: Arguments::Json(args),
        });
    }
    Ok(calls)
}

/// Parses an OpenAI `arguments` string; an empty string means "no arguments".
fn parse_arguments(text: &str) -> Arguments {
    if text.trim().is_empty() {
        return Arguments::Json(json!({}));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Arguments::Json(v),
        Err(e) => {
            use serde_json::error::Category;
            let problem = match e.classify() {
                Category::Eof => "the JSON text ends before the value is complete".to_string(),
                _ => format!("a JSON syntax error at line {}, column {}", e.line(), e.column()),
            };
            Arguments::Malformed { problem }
        }
    }
}

/// The invocation id of a provider call: `{provider}:{callId}`, or `{namespace}/{provider}:{callId}`
/// with a namespace (a conversation id, say).
///
/// The registry keys idempotency by `(principal, invocationId)`, so the full key is
/// `(caller, [namespace,] provider, callId)`: ids of two providers, or of two callers, never
/// collide (give each of one person's conversations its namespace when its call ids may repeat), and a provider's retry of the same call id joins or replays the first call instead
/// of running it twice. The recovery loop derives its retries' ids from it (`…#r2`, `…#r3`).
///
/// ```
/// use agent_surface_toolset::{Provider, invocation_id};
/// assert_eq!(invocation_id(None, Provider::Anthropic, "toolu_01A"), "anthropic:toolu_01A");
/// assert_eq!(invocation_id(Some("conv-7"), Provider::Gemini, "r-9.0"), "conv-7/gemini:r-9.0");
/// ```
pub fn invocation_id(namespace: Option<&str>, provider: Provider, call_id: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{provider}:{call_id}"),
        None => format!("{provider}:{call_id}"),
    }
}

impl ToolCall {
    /// The invoke request for this call, or the result to answer it with when it cannot be one:
    /// `CAPABILITY_NOT_FOUND` for a tool name that is not a capability's, `INVALID_INPUT` for
    /// malformed arguments.
    ///
    /// The request carries the derived invocation id; staleness tokens are added by the caller.
    pub fn to_request(&self, namespace: Option<&str>) -> Result<InvokeRequest, InvokeResult> {
        let id = invocation_id(namespace, self.provider, &self.call_id);
        let Some(capability) = capability_from_tool_name(&self.tool_name) else {
            return Err(InvokeResult::error(AgentSurfaceError::capability_not_found().into_payload(), Some(id)));
        };
        match &self.arguments {
            Arguments::Json(input) => Ok(InvokeRequest::new(capability, input.clone()).with_invocation_id(id)),
            Arguments::Malformed { problem } => {
                let issue = InputIssue {
                    path: String::new(),
                    message: format!("the arguments are not valid JSON ({problem}); send one JSON object"),
                };
                Err(InvokeResult::error(AgentSurfaceError::invalid_input(vec![issue], None).into_payload(), Some(id)))
            }
        }
    }
}
