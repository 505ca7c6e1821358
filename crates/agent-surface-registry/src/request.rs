//! The invoke request, its options, and the detailed outcome.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::{InvokeResult, Phase};
use agent_surface_policy::Consumer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::correlation::CorrelationId;
use crate::progress::ProgressSink;
use crate::questions::{Answers, Question};
use crate::trace::TraceParent;

/// Which registration a call targets. Both members are optional; see `spec/invocation.md` for
/// how each combination resolves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Target {
    /// The instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// The registration id the caller planned against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration_id: Option<String>,
}

impl Target {
    /// Targets an instance by id.
    pub fn instance(instance_id: impl Into<String>) -> Target {
        Target { instance_id: Some(instance_id.into()), registration_id: None }
    }

    /// Targets a registration by id.
    pub fn registration(registration_id: impl Into<String>) -> Target {
        Target { instance_id: None, registration_id: Some(registration_id.into()) }
    }
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// One call, as an agent or adapter sends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeRequest {
    /// The capability name (`type.capability`).
    pub capability: String,
    /// The target, when the caller names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// The input (default: `{}`).
    #[serde(default = "empty_object")]
    pub input: Value,
    /// The idempotency key, scoped to the consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The surface id the call was planned against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface_id: Option<String>,
    /// The surface version the call was planned against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface_version: Option<u64>,
    /// The version of the tool the call was planned against, as listed
    /// ([`CapabilityDescriptor::tool_version`](crate::CapabilityDescriptor::tool_version)): a
    /// version that is not the live one is `STALE_CAPABILITY {reason: tool-version-mismatch}`,
    /// whatever the effect. Serialized as `toolVersion`
    /// ([`agent_surface_core::tool_version::wire::HTTP_MEMBER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// Approved confirmation evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_id: Option<String>,
}

pub use agent_surface_core::details::TARGET_ARGUMENT;

/// The longest invocation id a transport accepts, in bytes.
pub const MAX_INVOCATION_ID_BYTES: usize = 255;

/// Whether `id` is an invocation id every transport accepts: 1 to [`MAX_INVOCATION_ID_BYTES`]
/// printable ASCII characters (0x20–0x7E). The adapters refuse any other id as a protocol fault
/// before anything is stored (HTTP `400`, MCP `-32602`); the registry itself stores a longer id by
/// its SHA-256, so a caller of the Rust API cannot make a record large either.
///
/// ```
/// use agent_surface_registry::is_valid_invocation_id;
/// assert!(is_valid_invocation_id("order-42 retry"));
/// assert!(!is_valid_invocation_id(""));
/// assert!(!is_valid_invocation_id(&"x".repeat(256)));
/// assert!(!is_valid_invocation_id("tab\there"));
/// assert!(!is_valid_invocation_id("café"));
/// ```
pub fn is_valid_invocation_id(id: &str) -> bool {
    (1..=MAX_INVOCATION_ID_BYTES).contains(&id.len()) && id.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// An `Idempotency-Key` header that cannot be an invocation id (see [`idempotency_key_header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidIdempotencyKey;

impl std::fmt::Display for InvalidIdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the Idempotency-Key header must be one field: a token of 1 to 255 visible ASCII characters, \
             or a structured-field string of 1 to 255 printable ASCII characters",
        )
    }
}

impl std::error::Error for InvalidIdempotencyKey {}

/// The invocation id an HTTP request's `Idempotency-Key` header carries, given the header's field
/// values (`None` without one): at most one field, a bare token (visible ASCII, no `"`) or an RFC
/// 8941 sf-string (`"…"`, escapes `\"` and `\\` only, nothing after the closing quote), decoded to
/// a valid invocation id ([`is_valid_invocation_id`]). The one rule for every HTTP transport (the
/// HTTP binding, MCP over streamable HTTP).
///
/// ```
/// use agent_surface_registry::idempotency_key_header;
/// assert_eq!(idempotency_key_header([b"order-7".as_slice()]), Ok(Some("order-7".to_string())));
/// assert_eq!(idempotency_key_header([br#""a \"b\"""#.as_slice()]), Ok(Some(r#"a "b""#.to_string())));
/// assert_eq!(idempotency_key_header(std::iter::empty::<&[u8]>()), Ok(None));
/// assert!(idempotency_key_header([b"a".as_slice(), b"b".as_slice()]).is_err(), "two fields");
/// assert!(idempotency_key_header([b"caf\xc3\xa9".as_slice()]).is_err());
/// ```
pub fn idempotency_key_header<'a>(
    fields: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Option<String>, InvalidIdempotencyKey> {
    let mut fields = fields.into_iter();
    let Some(value) = fields.next() else { return Ok(None) };
    if fields.next().is_some() {
        return Err(InvalidIdempotencyKey);
    }
    let raw = std::str::from_utf8(value).map_err(|_| InvalidIdempotencyKey)?.trim_matches([' ', '\t']);
    let key = if raw.starts_with('"') {
        sf_string(raw).ok_or(InvalidIdempotencyKey)?
    } else if raw.bytes().all(|b| b.is_ascii_graphic() && b != b'"') {
        raw.to_string()
    } else {
        return Err(InvalidIdempotencyKey);
    };
    if is_valid_invocation_id(&key) { Ok(Some(key)) } else { Err(InvalidIdempotencyKey) }
}

/// Decodes an RFC 8941 §3.3.3 sf-string that must make up all of `raw`.
fn sf_string(raw: &str) -> Option<String> {
    let mut bytes = raw.strip_prefix('"')?.bytes();
    let mut out = String::new();
    loop {
        match bytes.next()? {
            b'\\' => match bytes.next()? {
                c @ (b'"' | b'\\') => out.push(char::from(c)),
                _ => return None,
            },
            b'"' => return bytes.next().is_none().then_some(out),
            c @ 0x20..=0x7e => out.push(char::from(c)),
            _ => return None,
        }
    }
}

impl InvokeRequest {
    /// A call of `capability` with `input` and nothing else.
    pub fn new(capability: impl Into<String>, input: Value) -> InvokeRequest {
        InvokeRequest {
            capability: capability.into(),
            target: None,
            input,
            invocation_id: None,
            surface_id: None,
            surface_version: None,
            tool_version: None,
            confirmation_id: None,
        }
    }

    /// The same call with an invocation id.
    pub fn with_invocation_id(mut self, id: impl Into<String>) -> InvokeRequest {
        self.invocation_id = Some(id.into());
        self
    }

    /// The same call with a target.
    pub fn with_target(mut self, target: Target) -> InvokeRequest {
        self.target = Some(target);
        self
    }

    /// The same call, planned against `surface_id` at `version`.
    pub fn with_surface(mut self, surface_id: impl Into<String>, version: u64) -> InvokeRequest {
        self.surface_id = Some(surface_id.into());
        self.surface_version = Some(version);
        self
    }

    /// The same call, planned against version `tool_version` of its tool (as listed).
    pub fn with_tool_version(mut self, tool_version: impl Into<String>) -> InvokeRequest {
        self.tool_version = Some(tool_version.into());
        self
    }

    /// Moves the reserved [`TARGET_ARGUMENT`] from the input into the target, when it is a string
    /// that agrees with the target (or the target names no instance); drops it when `null`. Any
    /// other value stays in the input, for phase 5 to report.
    ///
    /// [`Registry::invoke`](crate::Registry::invoke) does this first, so both ways of naming a
    /// target are one call (they fingerprint alike). A client that reasons about the call's
    /// target (a recovery loop re-listing the surface, say) does it too, to see the instance the
    /// model named through the argument.
    ///
    /// ```
    /// use agent_surface_registry::{InvokeRequest, TARGET_ARGUMENT, Target};
    /// use serde_json::json;
    ///
    /// let mut named = InvokeRequest::new("board.show", json!({TARGET_ARGUMENT: "side", "n": 1}));
    /// named.lift_target_argument();
    /// assert_eq!(named.target, Some(Target::instance("side")));
    /// assert_eq!(named.input, json!({"n": 1}));
    ///
    /// // Named two ways that disagree: left for the input phase to refuse.
    /// let mut both = InvokeRequest::new("board.show", json!({TARGET_ARGUMENT: "side"}))
    ///     .with_target(Target::instance("main"));
    /// both.lift_target_argument();
    /// assert_eq!(both.input, json!({TARGET_ARGUMENT: "side"}));
    /// ```
    pub fn lift_target_argument(&mut self) {
        self.lift_target();
    }

    /// [`InvokeRequest::lift_target_argument`], telling whether the argument is left in the input
    /// (for phase 5 to report), so that the pipeline looks it up once.
    pub(crate) fn lift_target(&mut self) -> bool {
        let Some(input) = self.input.as_object_mut() else { return false };
        match input.get(TARGET_ARGUMENT) {
            None => return false,
            Some(Value::Null) => {}
            Some(Value::String(id)) => match self.target.as_mut() {
                Some(Target { instance_id: Some(named), .. }) if named != id => return true,
                Some(Target { instance_id: Some(_), .. }) => {}
                Some(target) => target.instance_id = Some(id.clone()),
                None => self.target = Some(Target::instance(id.clone())),
            },
            Some(_) => return true,
        }
        input.remove(TARGET_ARGUMENT);
        false
    }

    /// The same call with confirmation evidence.
    pub fn with_confirmation(mut self, confirmation_id: impl Into<String>) -> InvokeRequest {
        self.confirmation_id = Some(confirmation_id.into());
        self
    }
}

/// How a call is made: by whom, under which cancellation, with which time budget, and where
/// its progress reports go.
#[derive(Clone)]
#[non_exhaustive]
pub struct InvokeOptions {
    /// The caller.
    pub consumer: Consumer,
    /// Cancelling this token ends the call with `CANCELLED`.
    pub cancellation: Option<CancellationToken>,
    /// Overrides the capability's time budget for this call.
    pub time_budget: Option<Duration>,
    /// Receives the handler's [`Ctx::progress`](crate::Ctx::progress) reports; `None` drops them.
    pub progress: Option<Arc<dyn ProgressSink>>,
    /// The client's answers to the capability's questions, and what the client can answer
    /// ([`crate::questions`]); `None`: no answers, a client that can answer nothing.
    pub answers: Option<Arc<Answers>>,
    /// Called once when the handler is about to run (phase 8), never for a call that stops
    /// earlier or is answered from the idempotency store: an adapter's signal that the call is
    /// under way (e.g. to answer it as a task from then on).
    pub on_execute: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The adapter the call came through, as the `transport` label of the metrics
    /// ([`crate::telemetry`]): a fixed name such as `mcp`, `http` or `toolset`; `direct` by
    /// default.
    pub transport: &'static str,
    /// The caller's W3C trace context, which the invocation span continues ([`crate::trace`]);
    /// `None`: the span's parent is the current `tracing` span, if any.
    pub trace_parent: Option<TraceParent>,
    /// Confirmation evidence the adapter obtained while answering this call: a person's
    /// approval given through the client (an accepted elicitation), presented to the
    /// confirmation phase in place of [`InvokeRequest::confirmation_id`]. It is not part of the
    /// request: the call's fingerprint is that of the request as its client sent it, so that the
    /// client's repeat of that request under the same invocation id is answered from the call's
    /// record (replayed, or joined while it runs), never refused as another request
    /// (`spec/invocation.md` §7.7). `None` by default ([`InvokeOptions::with_approval`]).
    pub approval: Option<String>,
}

impl std::fmt::Debug for InvokeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvokeOptions")
            .field("consumer", &self.consumer)
            .field("cancellation", &self.cancellation)
            .field("time_budget", &self.time_budget)
            .field("progress", &self.progress.is_some())
            .field("answers", &self.answers)
            .field("on_execute", &self.on_execute.is_some())
            .field("transport", &self.transport)
            .field("trace_parent", &self.trace_parent)
            .field("approval", &self.approval)
            .finish()
    }
}

impl InvokeOptions {
    /// Options for `consumer`, with no cancellation and the capability's time budget.
    pub fn new(consumer: Consumer) -> InvokeOptions {
        InvokeOptions {
            consumer,
            cancellation: None,
            time_budget: None,
            progress: None,
            answers: None,
            on_execute: None,
            transport: "direct",
            trace_parent: None,
            approval: None,
        }
    }

    /// The same options naming the adapter the call came through (the metrics' `transport`
    /// label; keep it a fixed name).
    pub fn with_transport(mut self, transport: &'static str) -> InvokeOptions {
        self.transport = transport;
        self
    }

    /// The same options continuing the caller's trace: the invocation span records the trace
    /// parent's ids and, with the `otel` feature, takes it as its OpenTelemetry parent. The
    /// adapters get one from [`TraceParent::extract`].
    pub fn with_trace_parent(mut self, parent: TraceParent) -> InvokeOptions {
        self.trace_parent = Some(parent);
        self
    }

    /// The same options with a cancellation token.
    pub fn with_cancellation(mut self, token: CancellationToken) -> InvokeOptions {
        self.cancellation = Some(token);
        self
    }

    /// Whether the caller's cancellation has fired (never, without one).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancellation.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Completes when the caller's cancellation fires (never, without one).
    pub(crate) async fn cancelled(&self) {
        match &self.cancellation {
            Some(t) => t.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// The same options with a progress sink.
    pub fn with_progress(mut self, sink: Arc<dyn ProgressSink>) -> InvokeOptions {
        self.progress = Some(sink);
        self
    }

    /// The same options with the client's answers (and abilities) for the capability's questions.
    pub fn with_answers(mut self, answers: Answers) -> InvokeOptions {
        self.answers = Some(Arc::new(answers));
        self
    }

    /// The same options with a hook called once when the handler is about to run.
    pub fn with_execute_hook(mut self, hook: Arc<dyn Fn() + Send + Sync>) -> InvokeOptions {
        self.on_execute = Some(hook);
        self
    }

    /// The same options presenting `confirmation_id`, an approval the adapter obtained for this
    /// call from a person (see [`InvokeOptions::approval`]): the call runs as if its request
    /// carried the evidence, and is recorded under the request as its client sent it.
    ///
    /// ```
    /// use agent_surface_registry::{InvokeOptions, InvokeRequest};
    /// use agent_surface_policy::Consumer;
    /// let request = InvokeRequest::new("orders.cancel", serde_json::json!({"orderId": "A-1"}));
    /// let options = InvokeOptions::new(Consumer::anonymous("k")).with_approval("c-1");
    /// assert_eq!(options.approval.as_deref(), Some("c-1"));
    /// assert_eq!(request.confirmation_id, None); // the request stays as its client sent it
    /// ```
    pub fn with_approval(mut self, confirmation_id: impl Into<String>) -> InvokeOptions {
        self.approval = Some(confirmation_id.into());
        self
    }

    /// The same options with a time budget override.
    pub fn with_time_budget(mut self, budget: Duration) -> InvokeOptions {
        self.time_budget = Some(budget);
        self
    }
}

/// The result of a call plus what the operator side knows about it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Invocation {
    /// What the agent receives.
    pub result: InvokeResult,
    /// The phase that ended the call with an error (`None` on success, and for results replayed
    /// or joined from another call).
    pub phase: Option<Phase>,
    /// The result was replayed from the idempotency store.
    pub replayed: bool,
    /// The call joined an identical call in flight and received its result.
    pub joined: bool,
    /// The capability's open questions, when the call stopped for them (its result is then
    /// `PRECONDITION_FAILED {reason: client-input-required}`); see [`crate::questions`].
    pub questions: Option<Vec<Question>>,
    /// The id the agent can quote to find this call in the operator log (the caller's
    /// invocation id, or one the registry made); see [`crate::correlation`].
    pub correlation_id: CorrelationId,
}

impl Invocation {
    /// An invocation that is only its result (an adapter's own answer, e.g. for a call it lost).
    pub fn new(result: InvokeResult) -> Invocation {
        Invocation::answered(result, CorrelationId::generate())
    }

    /// An invocation that is only its result, under a correlation id the adapter already holds
    /// (which an error payload then carries, as the registry writes it when the call is recorded).
    pub fn answered(result: InvokeResult, correlation_id: CorrelationId) -> Invocation {
        let mut invocation =
            Invocation { result, phase: None, replayed: false, joined: false, questions: None, correlation_id };
        invocation.stamp();
        invocation
    }

    /// Writes the correlation id into the error payload (`correlationId`, where the model reads
    /// it) when the registry made the id; an id the caller chose (an invocation id, which an
    /// agent may have written) is never echoed there, and the payload then carries none.
    /// A success carries no payload to write into, so its id's text is never written.
    pub(crate) fn stamp(&mut self) {
        if let Some(payload) = self.result.error_payload_mut() {
            let generated = self.correlation_id.generated_text();
            payload.set_correlation_id(generated.as_ref().map(|t| t.as_str()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sf_strings_decode_exactly() {
        assert_eq!(sf_string(r#""a\"b""#).as_deref(), Some("a\"b"));
        assert_eq!(sf_string(r#""a\\b""#).as_deref(), Some("a\\b"));
        assert_eq!(sf_string(r#""a b""#).as_deref(), Some("a b"));
        for bad in [r#"""#, r#""abc"#, r#""a\b""#, r#""a"b"#, r#""a" "#, r#""a\""#, "\"a\u{7f}\""] {
            assert_eq!(sf_string(bad), None, "{bad:?}");
        }
    }
}
