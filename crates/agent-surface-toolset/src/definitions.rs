//! Tool definitions from a consumer's snapshot, in each provider's request format.

use agent_surface_registry::{CapabilityDescriptor, Snapshot};
use serde_json::{Value, json};

use crate::loss::{losses, warn_once};
use crate::provider::Provider;
use crate::schema::{gemini_conversion, openai_strict_eligible, without_dialect};

/// The description shown to the model: the capability's description, plus the reason when it is
/// disabled right now (the same string `CAPABILITY_NOT_AVAILABLE` carries: planning fuel).
fn description(c: &CapabilityDescriptor) -> String {
    match (&c.unavailable_reason, c.enabled) {
        (Some(reason), false) => format!("{} Currently unavailable: {reason}", c.description),
        (None, false) => format!("{} Currently unavailable.", c.description),
        _ => c.description.clone(),
    }
}

/// One capability as a tool definition of `provider`.
///
/// For Gemini this is one entry of `functionDeclarations`, with the parameters in the member
/// [`crate::gemini_parameters`] chooses (`parameters` or `parametersJsonSchema`, never both); for
/// the others, one entry of the request's `tools` array.
///
/// When the provider's dialect loses part of the input schema ([`crate::lossy_conversions`]),
/// this warns on the operator channel (`tracing`, target `agent_surface::toolset`), once per
/// process for each capability and provider, naming the capability and what is lost.
pub fn tool_definition(provider: Provider, capability: &CapabilityDescriptor) -> Value {
    let name = &capability.tool_name;
    let description = description(capability);
    let parameters = without_dialect(&capability.input_schema);
    match provider {
        Provider::OpenAiChat => {
            let mut function = json!({"name": name, "description": description, "parameters": parameters});
            if openai_strict_eligible(&capability.input_schema).is_ok() {
                function["strict"] = json!(true);
            }
            json!({"type": "function", "function": function})
        }
        Provider::OpenAiResponses => {
            // The Responses API defaults `strict` to true, so it is always sent explicitly.
            let strict = openai_strict_eligible(&capability.input_schema).is_ok();
            json!({"type": "function", "name": name, "description": description, "parameters": parameters, "strict": strict})
        }
        Provider::Anthropic => json!({"name": name, "description": description, "input_schema": parameters}),
        Provider::Gemini => {
            let mut declaration = json!({"name": name, "description": description});
            let (parameters, lost) = gemini_conversion(&capability.input_schema);
            warn_once(provider, capability, &losses(provider, capability, lost));
            if let Some(parameters) = parameters {
                let member = parameters.member();
                declaration[member] = parameters.into_schema();
            }
            declaration
        }
    }
}

/// The value of the request's `tools` member for `provider`: every capability of the snapshot,
/// in the snapshot's (name) order.
///
/// - OpenAI Chat Completions: `[{"type": "function", "function": {"name", "description",
///   "parameters", "strict"?}}]`, `strict: true` only when the schema qualifies
///   ([`crate::openai_strict_eligible`]).
/// - OpenAI Responses: `[{"type": "function", "name", "description", "parameters", "strict"}]`.
/// - Anthropic Messages: `[{"name", "description", "input_schema"}]`.
/// - Gemini: `[{"functionDeclarations": [{"name", "description", "parameters"?}]}]`, the schema
///   converted by [`crate::gemini_schema`]; a schema `parameters` cannot carry goes as
///   `"parametersJsonSchema"` instead ([`crate::gemini_parameters`]).
///
/// Tool names are the registry's (`type-capability`, reversible with
/// `agent_surface_registry::id::capability_from_tool_name`).
pub fn tool_definitions(provider: Provider, snapshot: &Snapshot) -> Value {
    let tools: Vec<Value> = snapshot.capabilities.iter().map(|c| tool_definition(provider, c)).collect();
    match provider {
        Provider::Gemini if tools.is_empty() => json!([]),
        Provider::Gemini => json!([{"functionDeclarations": tools}]),
        _ => Value::Array(tools),
    }
}
