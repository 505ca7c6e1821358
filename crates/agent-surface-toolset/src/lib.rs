//! The agent-surface as tools for an in-process agent loop, in the formats of the OpenAI,
//! Anthropic and Gemini tool APIs, with a mechanical recovery loop.
//!
//! # Overview
//!
//! - **Definitions** — [`tool_definitions`] turns a consumer's snapshot into the request's `tools`
//!   member of OpenAI Chat Completions (`strict: true` where the schema qualifies,
//!   [`openai_strict_eligible`]), OpenAI Responses, Anthropic Messages (`input_schema`) or Gemini
//!   (`functionDeclarations`: the schema as `parameters`, converted by [`gemini_schema`] with a
//!   type on every node, or as `parametersJsonSchema` when `parameters` cannot carry it — any
//!   value, a map, a recursive type — [`gemini_parameters`]; `$ref`s are read with
//!   `agent_surface_registry::schema::resolve_ref`, as the registry does). Tool names are the
//!   registry's `type-capability`, reversible. What a provider's dialect loses of a schema (a
//!   recursive type below its recursion, `uniqueItems`, for Gemini) is reported, never silently
//!   changed: [`lossy_conversions`] lists it for a test suite to assert there is none, and the
//!   tool definitions warn about it once on the operator channel.
//! - **Calls** — [`parse_tool_calls`] reads `tool_calls`, `function_call` items, `tool_use` blocks
//!   or `functionCall` parts into [`ToolCall`]s. A malformed OpenAI `arguments` string becomes an
//!   `INVALID_INPUT` result, never a panic. Invocation ids derive from the provider's call id,
//!   namespaced by provider ([`invocation_id`]); Gemini calls without ids get derived ones (from
//!   the `responseId`, else from the turn and, in a [`Toolset`], a random part per toolset).
//! - **Results** — [`encode_result`]: a success carries the output JSON, an error the payload JSON
//!   (`code`, `message`, `retry`, `details`) unchanged, with `is_error: true` for Anthropic and
//!   an optional one-line rendering first ([`Rendering::OneLineFirst`], off by default).
//! - **Recovery** — [`RecoveryDriver`] acts on `retry` mechanically: refresh and re-resolve, wait
//!   (on the injected clock, bounded, cancellable), ask the host to confirm, or hand the error back
//!   to the model; bounded attempts; stops when the same failure comes back after the action its
//!   category prescribes (a wait excepted: bounded by the delays); never repeats a denial or an unverified non-idempotent call.
//! - **[`Toolset`]** ties them together for one consumer: tools to list, turns to answer (parallel
//!   calls run concurrently and are answered in order), and the adapter duties — the tool list is
//!   marked stale after `CAPABILITY_NOT_FOUND`, `STALE_CAPABILITY` or `COMPONENT_UNMOUNTED`, and
//!   surface tokens are refreshed, never stripped (a call whose tool's version changed goes back to
//!   the model rather than out again). A cancellation ends what is in progress, and later turns
//!   run ([`Toolset::cancel`]). A model cannot send a confirmation id, so
//!   when it repeats a call that got `CONFIRMATION_REQUIRED`, the confirmation engine presents
//!   the id it relayed, as on every transport (see [`Toolset::call`]); error messages are worded for a
//!   model, which sends only a tool's arguments ([`encode_result`]).
//!
//! `spec/adapters.md` describes the mapping for every provider.
//!
//! # Examples
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, Effect};
//! use agent_surface_policy::Consumer;
//! use agent_surface_registry::{Ctx, Registry, RegistryConfig};
//! use agent_surface_toolset::{Provider, Toolset, ToolsetConfig};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Weather { city: String }
//! #[derive(Serialize, JsonSchema)]
//! struct Report { city: String, celsius: i32 }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let registry = Registry::new(RegistryConfig::default());
//! registry.define("weather", |t| {
//!     t.capability("current", "Current temperature in a city.").effect(Effect::Read).idempotent().handler(
//!         |_ctx: Ctx, i: Weather| async move { Ok::<_, AgentSurfaceError>(Report { city: i.city, celsius: 21 }) },
//!     )
//! })?;
//! let _mounted = registry.mount("weather", "main")?;
//! let toolset = Toolset::new(registry, Consumer::anonymous("conversation-1"), ToolsetConfig::default());
//!
//! // Before the model request: the `tools` member.
//! let tools = toolset.tools(Provider::Anthropic).await;
//! assert_eq!(tools[0]["name"], "weather-current");
//!
//! // The model answers with a tool call …
//! let response = json!({"role": "assistant", "stop_reason": "tool_use", "content": [
//!     {"type": "tool_use", "id": "toolu_01", "name": "weather-current", "input": {"city": "Oslo"}}
//! ]});
//! // … which the toolset runs and answers.
//! let turn = toolset.handle(Provider::Anthropic, &response).await.unwrap();
//! assert_eq!(turn.messages, vec![json!({"role": "user", "content": [
//!     {"type": "tool_result", "tool_use_id": "toolu_01", "content": "{\"celsius\":21,\"city\":\"Oslo\"}"}
//! ]})]);
//! assert!(!turn.relist);
//! # Ok::<_, agent_surface_core::DefinitionError>(())
//! # }).unwrap();
//! ```

mod calls;
mod definitions;
mod loss;
mod provider;
pub mod recovery;
mod results;
mod schema;
mod toolset;

/// The Rust examples of the user guide's chapter on provider tool APIs (`docs/toolset.md`),
/// compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/toolset.md")]
struct UserGuideToolset;

pub use calls::{Arguments, ParseError, ToolCall, invocation_id, parse_tool_calls};
pub use definitions::{tool_definition, tool_definitions};
pub use loss::{Loss, lossy_conversions};
pub use provider::Provider;
pub use recovery::{
    Approval, ConfirmationPrompt, Invoker, Recovery, RecoveryConfig, RecoveryDriver, RecoveryHost, RegistryInvoker,
    RelayToModel, Stop, Verification,
};
pub use results::{Rendering, ResultFormat, decode_result, encode_result, render_line, reply_messages};
pub use schema::{
    GeminiParameters, LossKind, gemini_parameters, gemini_schema, openai_strict_eligible, without_dialect,
};
pub use toolset::{ProgressCallback, ToolOutcome, Toolset, ToolsetConfig, Turn};
