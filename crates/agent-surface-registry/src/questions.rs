//! Questions a capability asks the client before it runs: a form for the person, a completion
//! from the client's model, the client's roots.
//!
//! A capability declares an *ask* step ([`CapabilityBuilder::ask`](crate::CapabilityBuilder::ask)):
//! a function of the decoded input and the [`Answers`] the call carries that returns the
//! questions still open. The pipeline runs it in the input phase, after the author's
//! precondition. While questions are open the call stops before rate limits, confirmation and
//! the handler, and the [`Invocation`](crate::Invocation) lists them ([`Invocation::questions`](crate::Invocation::questions));
//! its result is `PRECONDITION_FAILED {reason: client-input-required}` (retry `no`) for callers
//! that cannot ask. A transport that can ask (MCP 2026-07-28: an input-required result) puts the
//! questions to the client and calls again with the answers ([`InvokeOptions::with_answers`](crate::InvokeOptions::with_answers));
//! once the ask step returns no question, the call goes on and the handler reads the answers
//! through [`Ctx::answers`](crate::Ctx::answers).
//!
//! Questions are not I/O inside the handler: the handler runs once, with every answer, and an
//! unanswered call never reaches it. A stop for questions is never stored as the terminal result
//! of an invocation id: the same id may be repeated with the answers.

use serde_json::{Map, Value, json};

/// What a question asks for.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Ask {
    /// A form the person fills in: a message and the JSON Schema of a flat object (MCP's
    /// elicitation schema: string, number, integer, boolean and enum properties).
    Form {
        /// What the person is asked.
        message: String,
        /// The schema of the answer's `content`.
        schema: Value,
    },
    /// A completion from the client's model: the parameters of an MCP `sampling/createMessage`
    /// request (`messages`, `maxTokens`, optional `systemPrompt`, …).
    Sample {
        /// The request parameters.
        params: Value,
    },
    /// The client's roots (MCP `roots/list`).
    Roots,
}

/// What a client can answer, as the transport reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Abilities {
    /// Forms for the person (MCP: the `elicitation` capability, form mode).
    pub form: bool,
    /// Completions from the client's model (MCP: `sampling`).
    pub sample: bool,
    /// The client's roots (MCP: `roots`).
    pub roots: bool,
}

impl Abilities {
    /// A client that answers forms, completions and roots as given.
    pub fn new(form: bool, sample: bool, roots: bool) -> Abilities {
        Abilities { form, sample, roots }
    }

    /// Whether the client can answer `ask`.
    pub fn can(&self, ask: &Ask) -> bool {
        match ask {
            Ask::Form { .. } => self.form,
            Ask::Sample { .. } => self.sample,
            Ask::Roots => self.roots,
        }
    }
}

/// One open question, under a key the answer comes back with.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Question {
    /// The key (unique among the questions of one call).
    pub key: String,
    /// What is asked.
    pub ask: Ask,
}

impl Question {
    /// A form for the person under `key`.
    pub fn form(key: impl Into<String>, message: impl Into<String>, schema: Value) -> Question {
        Question { key: key.into(), ask: Ask::Form { message: message.into(), schema } }
    }

    /// A completion from the client's model under `key`: one user message with `prompt`, at most
    /// `max_tokens` tokens.
    pub fn sample(key: impl Into<String>, prompt: impl Into<String>, max_tokens: u32) -> Question {
        let prompt: String = prompt.into();
        let params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": max_tokens,
        });
        Question { key: key.into(), ask: Ask::Sample { params } }
    }

    /// The client's roots under `key`.
    pub fn roots(key: impl Into<String>) -> Question {
        Question { key: key.into(), ask: Ask::Roots }
    }
}

/// The answers a call carries, keyed like its questions, and what the client can answer.
///
/// Values are the client's raw answers (for MCP: an elicitation result, a `sampling/createMessage`
/// result, a `roots/list` result); the typed readers accept only well-formed ones, so a
/// malformed answer counts as no answer and the question stays open.
///
/// ```
/// use agent_surface_registry::{Abilities, Answers};
/// use serde_json::json;
///
/// let answers = Answers::new(Abilities::new(true, false, false))
///     .with("user_name", json!({"action": "accept", "content": {"name": "Alice"}}))
///     .with("bad", json!(12345));
/// assert_eq!(answers.form("user_name").unwrap()["name"], "Alice");
/// assert!(answers.form("bad").is_none());
/// assert!(answers.abilities().form && !answers.abilities().sample);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answers {
    abilities: Abilities,
    values: Map<String, Value>,
}

impl Answers {
    /// No answers yet, from a client with `abilities`.
    pub fn new(abilities: Abilities) -> Answers {
        Answers { abilities, values: Map::new() }
    }

    /// The same answers and one more under `key`.
    pub fn with(mut self, key: impl Into<String>, value: Value) -> Answers {
        self.values.insert(key.into(), value);
        self
    }

    /// What the client can answer.
    pub fn abilities(&self) -> Abilities {
        self.abilities
    }

    /// Every answer, raw.
    pub fn values(&self) -> &Map<String, Value> {
        &self.values
    }

    /// The raw answer under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// The content of an accepted form under `key` (`{"action": "accept", "content": {…}}`).
    pub fn form(&self, key: &str) -> Option<&Map<String, Value>> {
        let answer = self.values.get(key)?.as_object()?;
        if answer.get("action")?.as_str()? != "accept" {
            return None;
        }
        answer.get("content")?.as_object()
    }

    /// Whether the person declined or dismissed the form under `key`.
    pub fn declined(&self, key: &str) -> bool {
        let action = self.values.get(key).and_then(|a| a.get("action")).and_then(Value::as_str);
        matches!(action, Some("decline" | "cancel"))
    }

    /// The text of a completion under `key` (a `sampling/createMessage` result whose content is
    /// a text block, or a list holding one).
    pub fn sample_text(&self, key: &str) -> Option<&str> {
        let content = self.values.get(key)?.as_object()?.get("content")?;
        let block = match content {
            Value::Array(blocks) => blocks.iter().find(|b| b.get("type").and_then(Value::as_str) == Some("text"))?,
            block => block,
        };
        (block.get("type")?.as_str()? == "text").then(|| block.get("text")?.as_str()).flatten()
    }

    /// The roots under `key` (a `roots/list` result: `{"roots": [{"uri": …, "name"?: …}]}`).
    pub fn roots(&self, key: &str) -> Option<&Vec<Value>> {
        let roots = self.values.get(key)?.get("roots")?.as_array()?;
        roots.iter().all(|r| r.get("uri").is_some_and(Value::is_string)).then_some(roots)
    }

    /// Whether the call carries no answer at all.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}
