//! Type-erased handlers: how a typed `async fn(Ctx, I) -> Result<O, AgentSurfaceError>` is stored.
//!
//! A call goes through two steps so that each failure lands in its own phase: `decode` turns the
//! validated JSON into the handler's input type (input phase), `call` runs the handler and
//! serializes its output (execute phase).

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use agent_surface_core::AgentSurfaceError;
use agent_surface_core::repair::Repair;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ctx::Ctx;

/// A decoded input, in the handler's own type, in the box that its handler's future is later
/// built in ([`Slot`]): one allocation per call holds both, one after the other.
pub(crate) type Decoded = Pin<Box<dyn Slot>>;

/// A decoded input on its own, in the handler's type (what a post-condition check receives).
pub(crate) type Input = Box<dyn Any + Send>;

/// A handler's decoded input and then, once it started, its future. The pipeline decodes the
/// input in phase 5, lends it to the phases before execution ([`Slot::input`]), and starts the
/// handler on it in phase 8 ([`Slot::start`]); polled, the slot is the handler's future, its output
/// serialized to JSON.
pub(crate) trait Slot: Future<Output = Result<Value, Failure>> + Send {
    /// The decoded input, until the handler has started (then `()`, which no input type is).
    fn input(&self) -> &(dyn Any + Send);

    /// Starts `handler` (the capability's stored handler, [`ErasedHandler::handler`]) on the
    /// input, in place. Runs the handler's synchronous prelude, which may panic: the caller
    /// guards it. A handler of another type leaves the slot unstarted, and polling it then answers
    /// an internal error.
    fn start(self: Pin<&mut Self>, ctx: Ctx, handler: &(dyn Any + Send + Sync));
}

pin_project_lite::pin_project! {
    /// The [`Slot`] of a typed handler `F` over the input `I`, whose future is `Fut`.
    #[project = TypedSlotProj]
    #[project_replace = TypedSlotTaken]
    enum TypedSlot<I, F, Fut> {
        /// Decoded, not started.
        Input { input: I, handler: PhantomData<fn() -> F> },
        /// The handler's future.
        Running { #[pin] fut: Fut },
        /// Between the two, while the handler's future is being built (and for good, if that panicked).
        Taken,
    }
}

impl<I, O, F, Fut> Future for TypedSlot<I, F, Fut>
where
    O: Serialize,
    Fut: Future<Output = Result<O, AgentSurfaceError>>,
{
    type Output = Result<Value, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            TypedSlotProj::Running { fut } => fut.poll(cx).map(|r| match r {
                Ok(out) => serde_json::to_value(out).map_err(Failure::Unserializable),
                Err(e) => Err(Failure::Error(e)),
            }),
            // `start` finds the handler's own type: both are built together in `typed`.
            TypedSlotProj::Input { .. } | TypedSlotProj::Taken => Poll::Ready(Err(Failure::Error(
                AgentSurfaceError::internal(std::io::Error::other("the handler did not start on its decoded input")),
            ))),
        }
    }
}

impl<I, O, F, Fut> Slot for TypedSlot<I, F, Fut>
where
    I: Send + 'static,
    O: Serialize,
    F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, AgentSurfaceError>> + Send,
{
    fn input(&self) -> &(dyn Any + Send) {
        match self {
            TypedSlot::Input { input, .. } => input,
            TypedSlot::Running { .. } | TypedSlot::Taken => &(),
        }
    }

    fn start(mut self: Pin<&mut Self>, ctx: Ctx, handler: &(dyn Any + Send + Sync)) {
        let Some(f) = handler.downcast_ref::<F>() else { return };
        if let TypedSlotTaken::Input { input, .. } = self.as_mut().project_replace(TypedSlot::Taken) {
            self.set(TypedSlot::Running { fut: f(ctx, input) });
        }
    }
}

/// Why a handler's call did not produce a JSON output.
pub(crate) enum Failure {
    /// The handler returned an error.
    Error(AgentSurfaceError),
    /// The handler's output could not be serialized to JSON.
    Unserializable(serde_json::Error),
}

type DecodeFn = dyn Fn(&Value) -> Result<Decoded, DecodeError> + Send + Sync;
type DecodeInputFn = dyn Fn(&Value) -> Result<Input, serde_json::Error> + Send + Sync;
pub(crate) type PreconditionFn = dyn Fn(&Ctx, &(dyn Any + Send)) -> Option<Result<(), AgentSurfaceError>> + Send + Sync;
/// An erased asynchronous precondition: the check's future, which owns what it needs (`'static`),
/// or `None` when one of its extractors found nothing (which the mount check rules out).
pub(crate) type AsyncPreconditionFn =
    dyn Fn(&Ctx, &(dyn Any + Send)) -> Option<BoxFuture<'static, Result<(), AgentSurfaceError>>> + Send + Sync;
type VerifyFn = dyn Fn(Ctx, Input, Value) -> BoxFuture<'static, Result<Verification, AgentSurfaceError>> + Send + Sync;

/// What a capability's post-condition check (`verify`) concluded about the handler's effect.
///
/// - [`Verification::Verified`]: the intended result is there; the output goes on to validation.
/// - [`Verification::NotVerified`]: the intended result is not there; the call fails with
///   `EXECUTION_FAILED {reason: verification-failed}` (retry `no`).
/// - [`Verification::Unknown`]: the check could not tell; the call fails with
///   `EXECUTION_FAILED {reason: outcome-unknown}` (retry `no`, repair: read the state, ask the user), as it does when
///   the check returns an error, panics or runs out of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verification {
    /// The intended result is there.
    Verified,
    /// The intended result is not there.
    NotVerified,
    /// The check cannot tell whether the intended result is there.
    Unknown,
}

impl From<bool> for Verification {
    fn from(ok: bool) -> Verification {
        if ok { Verification::Verified } else { Verification::NotVerified }
    }
}

/// A stored post-condition check over the decoded input and the JSON output.
#[derive(Clone)]
pub(crate) struct ErasedVerify {
    pub(crate) call: Arc<VerifyFn>,
    pub(crate) input_type: std::any::TypeId,
}

impl ErasedVerify {
    pub(crate) fn typed<I, F, Fut>(f: F) -> ErasedVerify
    where
        I: Send + 'static,
        F: Fn(Ctx, I, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Verification, AgentSurfaceError>> + Send + 'static,
    {
        let call = move |ctx: Ctx, input: Input, output: Value| -> BoxFuture<'static, _> {
            match input.downcast::<I>() {
                Ok(input) => f(ctx, *input, output).boxed(),
                // Checked at registration: the input type is the handler's.
                Err(_) => futures_util::future::ready(Ok(Verification::Unknown)).boxed(),
            }
        };
        ErasedVerify { call: Arc::new(call), input_type: std::any::TypeId::of::<I>() }
    }
}

/// Why a validated input did not decode into its handler's type, and where.
#[derive(Debug)]
pub(crate) struct DecodeError {
    /// The JSON Pointer of the value that did not decode, as far as the decoder got into the
    /// input (`""` when it did not name one).
    pub(crate) pointer: String,
    /// The input's member the pointer starts in, if it starts in one.
    pub(crate) member: Option<String>,
    /// The decoder's own error: for the operator channel only (it may quote the value).
    pub(crate) error: serde_json::Error,
}

impl DecodeError {
    /// Decodes `v` as an `I` again, tracking the path (the first attempt, on the call's path,
    /// does not pay for tracking), and keeps where it failed.
    #[cold]
    fn of<I: DeserializeOwned>(v: &Value) -> DecodeError {
        match serde_path_to_error::deserialize::<_, I>(v) {
            Ok(_) => DecodeError {
                pointer: String::new(),
                member: None,
                error: serde::de::Error::custom("decoded on the second attempt only"),
            },
            Err(e) => {
                use serde_path_to_error::Segment;
                let member = match e.path().iter().next() {
                    Some(Segment::Map { key }) => Some(key.clone()),
                    _ => None,
                };
                let mut pointer = String::new();
                for segment in e.path().iter() {
                    match segment {
                        Segment::Seq { index } => crate::schema::push_pointer_segment(&mut pointer, &index.to_string()),
                        Segment::Map { key } | Segment::Enum { variant: key } => {
                            crate::schema::push_pointer_segment(&mut pointer, key);
                        }
                        Segment::Unknown => break,
                    }
                }
                DecodeError { pointer, member, error: e.into_inner() }
            }
        }
    }
}

/// A stored handler.
#[derive(Clone)]
pub(crate) struct ErasedHandler {
    /// Decodes a validated input into a [`Slot`] of this handler.
    pub(crate) decode: Arc<DecodeFn>,
    /// Decodes a validated input on its own (for a post-condition check).
    pub(crate) decode_input: Arc<DecodeInputFn>,
    /// The typed handler, which [`Slot::start`] finds by its type.
    pub(crate) handler: Arc<dyn Any + Send + Sync>,
    pub(crate) input_type: std::any::TypeId,
}

impl ErasedHandler {
    /// Wraps a typed handler.
    pub(crate) fn typed<I, O, F, Fut>(f: F) -> ErasedHandler
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, AgentSurfaceError>> + Send + 'static,
    {
        let decode = |v: &Value| -> Result<Decoded, DecodeError> {
            let input = I::deserialize(v).map_err(|_| DecodeError::of::<I>(v))?;
            Ok(Box::pin(TypedSlot::<I, F, Fut>::Input { input, handler: PhantomData }))
        };
        let decode_input = |v: &Value| -> Result<Input, serde_json::Error> { Ok(Box::new(I::deserialize(v)?)) };
        ErasedHandler {
            decode: Arc::new(decode),
            decode_input: Arc::new(decode_input),
            handler: Arc::new(f),
            input_type: std::any::TypeId::of::<I>(),
        }
    }

    /// Wraps a handler over raw JSON values.
    pub(crate) fn raw<F, Fut>(f: F) -> ErasedHandler
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AgentSurfaceError>> + Send + 'static,
    {
        ErasedHandler::typed::<Value, Value, _, _>(f)
    }
}

/// A stored precondition over the decoded input.
#[derive(Clone)]
pub(crate) struct ErasedPrecondition {
    pub(crate) check: PreconditionCheck,
    pub(crate) input_type: std::any::TypeId,
}

/// How a precondition answers.
#[derive(Clone)]
pub(crate) enum PreconditionCheck {
    /// At once, from what the process holds (`CapabilityBuilder::precondition`).
    Now(Arc<PreconditionFn>),
    /// Through a future, under the call's time budget (`CapabilityBuilder::precondition_async`).
    Later(Arc<AsyncPreconditionFn>),
}

/// An unmet precondition: the explanation and details of a `PRECONDITION_FAILED`.
///
/// Returned by a capability's `precondition` check, which runs in the input phase, before rate
/// limits, confirmation and the handler.
///
/// ```
/// use agent_surface_registry::Unmet;
/// let unmet = Unmet::new("Shipped orders cannot be cancelled.").reason("order-shipped");
/// # let _ = unmet;
/// ```
#[derive(Debug)]
pub struct Unmet {
    explanation: agent_surface_core::SafeText,
    details: agent_surface_core::details::PreconditionDetails,
    /// Boxed so that `Result<(), Unmet>` stays small.
    repair: Option<Box<Repair>>,
}

impl Unmet {
    /// An unmet precondition with an explanation the application wrote.
    pub fn new(explanation: impl Into<agent_surface_core::SafeText>) -> Unmet {
        Unmet { explanation: explanation.into(), details: Default::default(), repair: None }
    }

    /// A machine-readable reason (kebab-case). `binding-failed` and `client-input-required` are
    /// reserved for the runtime and are ignored here.
    pub fn reason(mut self, reason: &'static str) -> Unmet {
        use agent_surface_core::details::{BINDING_FAILED, CLIENT_INPUT_REQUIRED};
        if reason != BINDING_FAILED && reason != CLIENT_INPUT_REQUIRED {
            self.details.reason = Some(reason.to_string());
        }
        self
    }

    /// An agent-safe detail value.
    pub fn detail(mut self, key: &'static str, value: impl Into<Value>) -> Unmet {
        if key != "reason" {
            self.details.extra.insert(key.to_string(), value.into());
        }
        self
    }

    /// A repair plan built at run time (a dynamic plan): cut to the bounds and marked
    /// `truncated` when it breaks them. It replaces the capability's static
    /// `repair_on_precondition` plan. A plan that contradicts retry `with-changes` (a `stop` or
    /// `reconcile` step, say) is dropped, with a warning on the operator channel.
    pub fn repair(mut self, repair: Repair) -> Unmet {
        self.repair = Some(Box::new(repair));
        self
    }

    pub(crate) fn into_error(self) -> AgentSurfaceError {
        let Some(repair) = self.repair else {
            return AgentSurfaceError::precondition_failed_with(self.explanation, self.details);
        };
        let err = AgentSurfaceError::precondition_failed_with(self.explanation.clone(), self.details.clone());
        match err.with_repair(*repair) {
            Ok(err) => err,
            Err(problem) => {
                tracing::warn!(target: "agent_surface::invoke", %problem, "repair plan of an unmet precondition dropped");
                AgentSurfaceError::precondition_failed_with(self.explanation, self.details)
            }
        }
    }
}

/// The ask step over the decoded input (see [`crate::CapabilityBuilder::ask`]).
pub(crate) type AskFn = dyn Fn(
        &Ctx,
        &(dyn std::any::Any + Send),
        &crate::questions::Answers,
    ) -> Option<Result<Vec<crate::questions::Question>, Unmet>>
    + Send
    + Sync;

/// A declared ask step.
#[derive(Clone)]
pub(crate) struct ErasedAsk {
    /// `None` when the input is not of the declared type (never, once the definition is checked).
    pub(crate) ask: std::sync::Arc<AskFn>,
    pub(crate) input_type: std::any::TypeId,
}

impl ErasedAsk {
    pub(crate) fn typed<I, F>(f: F) -> ErasedAsk
    where
        I: Send + 'static,
        F: Fn(&Ctx, &I, &crate::questions::Answers) -> Result<Vec<crate::questions::Question>, Unmet>
            + Send
            + Sync
            + 'static,
    {
        let ask = move |ctx: &Ctx, input: &(dyn std::any::Any + Send), answers: &crate::questions::Answers| {
            input.downcast_ref::<I>().map(|i| f(ctx, i, answers))
        };
        ErasedAsk { ask: std::sync::Arc::new(ask), input_type: std::any::TypeId::of::<I>() }
    }
}

impl std::fmt::Debug for ErasedAsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErasedAsk").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_surface_policy::Consumer;

    fn ctx() -> Ctx {
        Ctx::new(crate::ctx::CtxParts {
            capability: "t.c".into(),
            consumer: Consumer::anonymous("k"),
            invocation_id: None,
            reg: Arc::new(crate::live::Registration {
                type_id: "t".into(),
                instance_id: "i".into(),
                registration_id: "r".into(),
                description: None,
                context: None,
                state: None,
                unmounted: Default::default(),
            }),
            shared: Arc::default(),
            progress: None,
            answers: None,
        })
    }

    fn doubling() -> ErasedHandler {
        ErasedHandler::typed(|_: Ctx, n: u32| async move { Ok::<_, AgentSurfaceError>(n * 2) })
    }

    #[test]
    fn a_slot_lends_its_input_then_becomes_the_handlers_future() {
        let h = doubling();
        let mut slot = (h.decode)(&serde_json::json!(21)).expect("decodes");
        assert_eq!(slot.input().downcast_ref::<u32>(), Some(&21));
        slot.as_mut().start(ctx(), &*h.handler);
        // Started, the input is the handler's: the phases before execution no longer see it.
        assert!(slot.input().downcast_ref::<u32>().is_none());
        let output = slot.now_or_never().expect("ready at once");
        assert!(matches!(output, Ok(Value::Number(n)) if n.as_u64() == Some(42)));
    }

    #[test]
    fn a_slot_started_with_another_handler_answers_an_internal_error() {
        let other = ErasedHandler::typed(|_: Ctx, s: String| async move { Ok::<_, AgentSurfaceError>(s) });
        let mut slot = (doubling().decode)(&serde_json::json!(1)).expect("decodes");
        slot.as_mut().start(ctx(), &*other.handler);
        let output = slot.now_or_never().expect("ready at once");
        assert!(matches!(output, Err(Failure::Error(e)) if e.code() == agent_surface_core::ErrorCode::ExecutionFailed));
    }

    #[test]
    fn a_handler_panicking_while_its_future_is_built_leaves_the_slot_taken() {
        let h = ErasedHandler::typed(|_: Ctx, _: u32| -> std::future::Ready<Result<u32, AgentSurfaceError>> {
            panic!("prelude")
        });
        let mut slot = (h.decode)(&serde_json::json!(1)).expect("decodes");
        let caught = agent_surface_policy::guard::catch(|| slot.as_mut().start(ctx(), &*h.handler));
        assert_eq!(caught, Err("prelude".to_string()));
        assert!(slot.input().downcast_ref::<u32>().is_none());
        assert!(matches!(slot.now_or_never(), Some(Err(Failure::Error(_)))));
    }
}
