//! [`Provider`]: the tool-calling wire formats this crate speaks.

use std::fmt;

/// A provider's tool-calling format.
///
/// The wire shapes follow each provider's published API reference; `spec/adapters.md` lists them
/// and the golden tests pin them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI Chat Completions: `tools[].function`, `message.tool_calls[]`, `role: "tool"`
    /// messages.
    OpenAiChat,
    /// OpenAI Responses: `tools[]` of `type: "function"`, `function_call` output items,
    /// `function_call_output` input items.
    OpenAiResponses,
    /// Anthropic Messages: `tools[].input_schema`, `tool_use` blocks, `tool_result` blocks.
    Anthropic,
    /// Gemini `generateContent`: `tools[].functionDeclarations`, `functionCall` parts,
    /// `functionResponse` parts.
    Gemini,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 4] =
        [Provider::OpenAiChat, Provider::OpenAiResponses, Provider::Anthropic, Provider::Gemini];

    /// The provider's namespace in invocation ids (see [`crate::invocation_id`]).
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai-chat",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
