//! [`Ctx`]: what a handler knows about the call it serves.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use agent_surface_policy::Consumer;
use tokio_util::sync::CancellationToken;

use crate::progress::{Progress, ProgressSink};
use crate::questions::Answers;

/// Application state shared by every handler of a registry (see [`crate::Registry::provide`]).
pub(crate) type StateMap = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// The context of one invocation, handed to its handler by value.
///
/// Cheap to clone. Gives the handler the consumer, the target instance and its state, the
/// registry's shared application state, and a cancellation token that fires when the call is
/// cancelled, times out, or its instance is unmounted — a handler that does long work should
/// watch it.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<CtxInner>,
}

struct CtxInner {
    capability: Arc<str>,
    consumer: Consumer,
    invocation_id: Option<String>,
    /// The target registration: its instance id, registration id and instance state (one
    /// reference count per call rather than one per field).
    reg: Arc<dyn Instance>,
    shared: Arc<StateMap>,
    /// Created on first use: most handlers never ask for it.
    cancellation: OnceLock<CancellationToken>,
    /// Where progress reports go, when the caller wants them.
    progress: Option<Arc<ProgressState>>,
    /// Set when the call has ended: later progress reports are dropped.
    ended: AtomicBool,
    /// The client's answers to the capability's questions.
    answers: Option<Arc<Answers>>,
}

/// The caller's progress sink and the last `done` passed to it (as `f64` bits; for finite
/// non-negative numbers the bit patterns order like the numbers), shared by the handler's and
/// the post-condition's contexts.
pub(crate) struct ProgressState {
    sink: Arc<dyn ProgressSink>,
    last: AtomicU64,
}

impl ProgressState {
    const NONE: u64 = u64::MAX;

    pub(crate) fn new(sink: Arc<dyn ProgressSink>) -> Arc<ProgressState> {
        Arc::new(ProgressState { sink, last: AtomicU64::new(Self::NONE) })
    }
}

/// What a context reads of its target registration: the live registration implements it, so that
/// a context holds one reference to it rather than one per field (and this module needs nothing
/// of the live state's).
pub(crate) trait Instance: Send + Sync {
    /// The target instance's id.
    fn instance_id(&self) -> &str;
    /// The target registration's id.
    fn registration_id(&self) -> &str;
    /// The state the instance was mounted with, if any.
    fn state(&self) -> Option<&Arc<dyn Any + Send + Sync>>;
}

/// The fields a [`Ctx`] is built from.
pub(crate) struct CtxParts {
    pub(crate) capability: Arc<str>,
    pub(crate) consumer: Consumer,
    pub(crate) invocation_id: Option<String>,
    pub(crate) reg: Arc<dyn Instance>,
    pub(crate) shared: Arc<StateMap>,
    pub(crate) progress: Option<Arc<ProgressState>>,
    pub(crate) answers: Option<Arc<Answers>>,
}

impl Ctx {
    pub(crate) fn new(p: CtxParts) -> Ctx {
        Ctx {
            inner: Arc::new(CtxInner {
                capability: p.capability,
                consumer: p.consumer,
                invocation_id: p.invocation_id,
                reg: p.reg,
                shared: p.shared,
                cancellation: OnceLock::new(),
                progress: p.progress,
                ended: AtomicBool::new(false),
                answers: p.answers,
            }),
        }
    }

    /// The capability name (`type.capability`).
    pub fn capability(&self) -> &str {
        &self.inner.capability
    }

    /// Who is calling.
    pub fn consumer(&self) -> &Consumer {
        &self.inner.consumer
    }

    /// The invocation id the call carries, if any.
    pub fn invocation_id(&self) -> Option<&str> {
        self.inner.invocation_id.as_deref()
    }

    /// The target instance's id.
    pub fn instance_id(&self) -> &str {
        self.inner.reg.instance_id()
    }

    /// The target registration's id.
    pub fn registration_id(&self) -> &str {
        self.inner.reg.registration_id()
    }

    /// Fires when the call is cancelled, runs out of time, or its instance is unmounted.
    pub fn cancellation(&self) -> &CancellationToken {
        self.inner.cancellation.get_or_init(CancellationToken::new)
    }

    /// The same context with a cancellation token of its own (for the post-condition check, which
    /// runs after the handler's token fired).
    pub(crate) fn renewed(&self) -> Ctx {
        let i = &self.inner;
        Ctx::new(CtxParts {
            capability: i.capability.clone(),
            consumer: i.consumer.clone(),
            invocation_id: i.invocation_id.clone(),
            reg: i.reg.clone(),
            shared: i.shared.clone(),
            progress: i.progress.clone(),
            answers: i.answers.clone(),
        })
    }

    /// Fires the cancellation token if anyone asked for it (the call has ended).
    pub(crate) fn end(&self) {
        self.inner.ended.store(true, Ordering::Release);
        if let Some(t) = self.inner.cancellation.get() {
            t.cancel();
        }
    }

    /// A guard that calls [`Ctx::end`] when dropped: whatever route the handler (or the
    /// post-condition) ends by, work it tied to `ctx.cancellation()` stops too.
    pub(crate) fn end_on_drop(&self) -> EndOnDrop {
        EndOnDrop(self.clone())
    }

    /// Reports progress to the caller: `done` units of work so far, of `total` when known, with an
    /// optional short message for the person watching.
    ///
    /// Whether anyone sees it depends on the transport (MCP: `notifications/progress` when the
    /// client asked with a progress token; the embedded toolset: its progress callback; the HTTP
    /// binding: `progress` events to a request that accepts `text/event-stream`, nobody otherwise,
    /// and nobody who polls a task). A report is dropped when `done` does not grow past the last one, when a
    /// number is negative, not finite, or `done` exceeds `total`, and after the call ended; the
    /// message loses control characters and is cut to
    /// [`MAX_PROGRESS_MESSAGE_CHARS`](crate::MAX_PROGRESS_MESSAGE_CHARS). Never blocks, never fails.
    ///
    /// ```
    /// # async fn handler(ctx: agent_surface_registry::Ctx) {
    /// for (i, step) in ["fetch", "check", "write"].into_iter().enumerate() {
    ///     ctx.progress(i as f64, Some(3.0), Some(step));
    ///     // … the step's work …
    /// }
    /// # }
    /// ```
    pub fn progress(&self, done: f64, total: Option<f64>, message: Option<&str>) {
        let Some(state) = &self.inner.progress else { return };
        if self.inner.ended.load(Ordering::Acquire) {
            return;
        }
        let report = Progress { done, total, message: message.map(str::to_string) };
        if !report.is_valid() {
            return;
        }
        // `+ 0.0` turns `-0.0` into `0.0`, whose bits order correctly.
        let bits = (done + 0.0).to_bits();
        let grew = state
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                (last == ProgressState::NONE || bits > last).then_some(bits)
            })
            .is_ok();
        if grew {
            state.sink.report(report.clean());
        }
    }

    /// The client's answers to this capability's questions (see
    /// [`CapabilityBuilder::ask`](crate::CapabilityBuilder::ask)); empty when it asks none.
    pub fn answers(&self) -> &Answers {
        static NONE: std::sync::OnceLock<Answers> = std::sync::OnceLock::new();
        self.inner.answers.as_deref().unwrap_or_else(|| NONE.get_or_init(Answers::default))
    }

    /// Whether the caller receives progress reports (so a handler can skip preparing them).
    pub fn wants_progress(&self) -> bool {
        self.inner.progress.is_some()
    }

    /// The shared application state of type `T`, if the registry provides one.
    pub fn try_state<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.inner.shared.get(&TypeId::of::<T>()).and_then(|s| s.downcast_ref::<T>())
    }

    /// The shared application state of type `T`.
    ///
    /// # Panics
    ///
    /// When the registry does not provide a `T` — a wiring bug. Inside a handler the pipeline
    /// catches the panic and answers `EXECUTION_FAILED {reason: handler-error}`.
    pub fn state<T: Any + Send + Sync>(&self) -> &T {
        match self.try_state::<T>() {
            Some(s) => s,
            None => panic!("no shared state of type {} was provided to the registry", type_name::<T>()),
        }
    }

    /// The shared state of type `T`, shared (for the [`State`](crate::State) extractor).
    pub(crate) fn state_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.inner.shared.get(&TypeId::of::<T>()).cloned().and_then(|s| s.downcast::<T>().ok())
    }

    /// The instance's state of type `T`, shared (for the [`InstanceState`](crate::InstanceState)
    /// extractor).
    pub(crate) fn instance_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.inner.reg.state().cloned().and_then(|s| s.downcast::<T>().ok())
    }

    /// The target instance's state of type `T`, if it was mounted with one.
    pub fn try_instance<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.inner.reg.state().map(|s| &**s).and_then(|s| s.downcast_ref::<T>())
    }

    /// The target instance's state of type `T`.
    ///
    /// # Panics
    ///
    /// When the instance was mounted without a `T` (caught by the pipeline, like
    /// [`Ctx::state`]).
    pub fn instance<T: Any + Send + Sync>(&self) -> &T {
        match self.try_instance::<T>() {
            Some(s) => s,
            None => panic!("instance {} has no state of type {}", self.instance_id(), type_name::<T>()),
        }
    }
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("capability", &self.inner.capability)
            .field("consumer", &self.inner.consumer.key())
            .field("invocation_id", &self.inner.invocation_id)
            .field("instance_id", &self.inner.reg.instance_id())
            .field("registration_id", &self.inner.reg.registration_id())
            .finish_non_exhaustive()
    }
}

/// See [`Ctx::end_on_drop`].
pub(crate) struct EndOnDrop(Ctx);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}
