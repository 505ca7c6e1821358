//! [`Ctx`]: what a handler knows about the call it serves.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use agent_surface_policy::Consumer;
use tokio_util::sync::CancellationToken;

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
    instance_id: Arc<str>,
    registration_id: Arc<str>,
    instance_state: Option<Arc<dyn Any + Send + Sync>>,
    shared: Arc<StateMap>,
    /// Created on first use: most handlers never ask for it.
    cancellation: OnceLock<CancellationToken>,
}

/// The fields a [`Ctx`] is built from.
pub(crate) struct CtxParts {
    pub(crate) capability: Arc<str>,
    pub(crate) consumer: Consumer,
    pub(crate) invocation_id: Option<String>,
    pub(crate) instance_id: Arc<str>,
    pub(crate) registration_id: Arc<str>,
    pub(crate) instance_state: Option<Arc<dyn Any + Send + Sync>>,
    pub(crate) shared: Arc<StateMap>,
}

impl Ctx {
    pub(crate) fn new(p: CtxParts) -> Ctx {
        Ctx {
            inner: Arc::new(CtxInner {
                capability: p.capability,
                consumer: p.consumer,
                invocation_id: p.invocation_id,
                instance_id: p.instance_id,
                registration_id: p.registration_id,
                instance_state: p.instance_state,
                shared: p.shared,
                cancellation: OnceLock::new(),
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
        &self.inner.instance_id
    }

    /// The target registration's id.
    pub fn registration_id(&self) -> &str {
        &self.inner.registration_id
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
            instance_id: i.instance_id.clone(),
            registration_id: i.registration_id.clone(),
            instance_state: i.instance_state.clone(),
            shared: i.shared.clone(),
        })
    }

    /// Fires the cancellation token if anyone asked for it (the call has ended).
    pub(crate) fn end(&self) {
        if let Some(t) = self.inner.cancellation.get() {
            t.cancel();
        }
    }

    /// A guard that calls [`Ctx::end`] when dropped: whatever route the handler (or the
    /// post-condition) ends by, work it tied to `ctx.cancellation()` stops too.
    pub(crate) fn end_on_drop(&self) -> EndOnDrop {
        EndOnDrop(self.clone())
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

    /// The target instance's state of type `T`, if it was mounted with one.
    pub fn try_instance<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.inner.instance_state.as_deref().and_then(|s| s.downcast_ref::<T>())
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
            .field("instance_id", &self.inner.instance_id)
            .field("registration_id", &self.inner.registration_id)
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
