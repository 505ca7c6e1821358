//! Typed extractors for handlers, in the manner of axum: a handler given to
//! [`CapabilityBuilder::handle`](crate::CapabilityBuilder::handle) takes what it needs as
//! parameters — [`State<T>`] (shared state the registry [provides](crate::Registry::provide)),
//! [`InstanceState<S>`] (the target instance's state), [`Caller`] (who is calling), [`Ctx`] (progress,
//! answers, cancellation) — followed by its input, and each extractor's need is checked before
//! anything is served: a missing [`Registry::provide`](crate::Registry::provide) or an instance
//! mounted without the state a handler takes is a definition error at mount
//! ([`Registry::check_wiring`](crate::Registry::check_wiring)), not a failure of every call.
//! A check given to
//! [`CapabilityBuilder::precondition_async`](crate::CapabilityBuilder::precondition_async) takes
//! the same extractors before a reference to the input ([`Precondition`]), checked the same way.
//!
//! ```
//! use std::sync::Arc;
//! use agent_surface_core::AgentSurfaceError;
//! use agent_surface_registry::{Caller, Registry, RegistryConfig, State};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! struct Db { prefix: String }
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct NewTicket { title: String }
//!
//! let registry = Registry::new(RegistryConfig::default());
//! registry.define("tickets", |t| {
//!     t.capability("create", "Open a ticket.").handle(
//!         |State(db): State<Db>, caller: Caller, i: NewTicket| async move {
//!             Ok::<_, AgentSurfaceError>(format!("{}-{}-{}", db.prefix, caller.0.key(), i.title))
//!         },
//!     )
//! })?;
//! // Without `provide`, mounting is refused:
//! assert!(registry.mount("tickets", "main").is_err());
//! registry.provide(Db { prefix: "T".into() });
//! let _tickets = registry.mount("tickets", "main")?;
//! # Ok::<_, agent_surface_core::DefinitionError>(())
//! ```

use std::any::{Any, TypeId, type_name};
use std::future::Future;
use std::sync::Arc;

use agent_surface_core::AgentSurfaceError;
use agent_surface_policy::Consumer;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::ctx::Ctx;
use crate::handler::{ErasedPrecondition, PreconditionCheck, Unmet};

/// What an extractor needs from the registry or the instance, checked at mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Requirement {
    /// Shared state of this type ([`crate::Registry::provide`]).
    State {
        /// The state's type.
        type_id: TypeId,
        /// Its name, for the definition error.
        type_name: &'static str,
    },
    /// Instance state of this type ([`crate::Instance::state`]) on every mounted instance.
    Instance {
        /// The state's type.
        type_id: TypeId,
        /// Its name, for the definition error.
        type_name: &'static str,
    },
}

impl Requirement {
    /// Shared state of type `T`.
    pub fn state<T: Any>() -> Requirement {
        Requirement::State { type_id: TypeId::of::<T>(), type_name: type_name::<T>() }
    }

    /// Instance state of type `S`.
    pub fn instance<S: Any>() -> Requirement {
        Requirement::Instance { type_id: TypeId::of::<S>(), type_name: type_name::<S>() }
    }
}

/// A handler parameter taken from the call: implement it for an extractor of your own.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an extractor: a handler takes its extractors first and its input last",
    label = "not an extractor (`FromCtx`)",
    note = "extractors are `Ctx`, `State<T>`, `InstanceState<S>`, `Caller` or a type that implements `FromCtx`; \
            the typed input (`Deserialize + JsonSchema`) is the last parameter, after them"
)]
pub trait FromCtx: Sized + Send + 'static {
    /// What the extractor needs, checked at mount; `None` (the default): nothing.
    fn requirement() -> Option<Requirement> {
        None
    }

    /// The value for one call; `None` only when the requirement does not hold (which the mount
    /// check rules out), and the call then fails with `EXECUTION_FAILED`.
    fn from_ctx(ctx: &Ctx) -> Option<Self>;
}

impl FromCtx for Ctx {
    fn from_ctx(ctx: &Ctx) -> Option<Self> {
        Some(ctx.clone())
    }
}

/// Shared application state of type `T`, provided with [`crate::Registry::provide`].
#[derive(Debug)]
pub struct State<T>(pub Arc<T>);

impl<T: Any + Send + Sync> FromCtx for State<T> {
    fn requirement() -> Option<Requirement> {
        Some(Requirement::state::<T>())
    }

    fn from_ctx(ctx: &Ctx) -> Option<Self> {
        ctx.state_arc::<T>().map(State)
    }
}

/// The target instance's state of type `S`, mounted with [`crate::Instance::state`].
#[derive(Debug)]
pub struct InstanceState<S>(pub Arc<S>);

impl<S: Any + Send + Sync> FromCtx for InstanceState<S> {
    fn requirement() -> Option<Requirement> {
        Some(Requirement::instance::<S>())
    }

    fn from_ctx(ctx: &Ctx) -> Option<Self> {
        ctx.instance_arc::<S>().map(InstanceState)
    }
}

/// Who is calling: the consumer (its key, and its identity when someone is signed in).
#[derive(Clone, Debug)]
pub struct Caller(pub Consumer);

impl FromCtx for Caller {
    fn from_ctx(ctx: &Ctx) -> Option<Self> {
        Some(Caller(ctx.consumer().clone()))
    }
}

/// A handler with extractors: a function of zero to four [`FromCtx`] parameters and the input
/// `I`, returning a future of `Result<O, AgentSurfaceError>`. Implemented for closures and
/// functions, and for [`Anyhow`] around one returning `anyhow::Result<O>` (the `anyhow`
/// feature); `Args` is the tuple of extractor types (it only tells the implementations apart).
///
/// A closure of another shape (a sync closure, the input before an extractor, another error
/// type) is refused with notes that list the valid shapes; `tests/ui/` pins what the compiler
/// prints.
#[diagnostic::on_unimplemented(
    message = "this is not a handler: a handler is an `async` closure or `async fn` taking extractors first and its input last",
    label = "not a handler for `.handle`",
    note = "valid shapes: `|i: In| async move {{ .. }}`, `|ctx: Ctx, i: In| async move {{ .. }}`, `|State(db): State<Db>, caller: Caller, i: In| async move {{ .. }}` \
            (up to four extractors: `Ctx`, `State<T>`, `InstanceState<S>`, `Caller`, or your own `FromCtx`), or an `async fn` of that shape",
    note = "the input, last, is `Deserialize + JsonSchema`; the future returns `Result<O, AgentSurfaceError>` with `O: Serialize + JsonSchema` \
            (write `Ok::<_, AgentSurfaceError>(..)` when nothing else names the error type)",
    note = "for `?` on an `anyhow::Error`: wrap the handler in `Anyhow(..)` (the registry's `anyhow` feature, on by default) \
            or map it with `.map_err(AgentSurfaceError::internal)?`"
)]
pub trait Handler<Args, I, O>: Send + Sync + 'static {
    /// The handler's future.
    type Future: Future<Output = Result<O, AgentSurfaceError>> + Send + 'static;

    /// What the extractors need, checked at mount.
    fn requirements() -> Vec<Requirement>;

    /// Extracts the parameters and calls the handler; `None` when an extractor finds nothing.
    fn call(&self, ctx: &Ctx, input: I) -> Option<Self::Future>;
}

/// What a function's extractors need (each extractor's [`FromCtx::requirement`]), checked at mount.
fn requirements_of(requirements: &[Option<Requirement>]) -> Vec<Requirement> {
    requirements.iter().flatten().copied().collect()
}

/// The [`Handler`] and [`Precondition`] implementations for functions of the extractors given.
macro_rules! with_extractors {
    ($($e:ident),*) => {
        impl<F, Fut, I, O, $($e,)*> Handler<($($e,)*), I, O> for F
        where
            F: Fn($($e,)* I) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<O, AgentSurfaceError>> + Send + 'static,
            $($e: FromCtx,)*
        {
            type Future = Fut;

            fn requirements() -> Vec<Requirement> {
                requirements_of(&[$(<$e as FromCtx>::requirement(),)*])
            }

            #[allow(non_snake_case, reason = "the extractors are named after their type parameters")]
            #[allow(unused_variables, reason = "the handler without extractors does not read the context")]
            fn call(&self, ctx: &Ctx, input: I) -> Option<Fut> {
                $(let $e = <$e as FromCtx>::from_ctx(ctx)?;)*
                Some(self($($e,)* input))
            }
        }

        impl<F, Fut, I, $($e,)*> Precondition<($($e,)*), I> for F
        where
            F: Fn($($e,)* &I) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<(), Unmet>> + Send + 'static,
            $($e: FromCtx,)*
        {
            type Future = Fut;

            fn requirements() -> Vec<Requirement> {
                requirements_of(&[$(<$e as FromCtx>::requirement(),)*])
            }

            #[allow(non_snake_case, reason = "the extractors are named after their type parameters")]
            #[allow(unused_variables, reason = "the check without extractors does not read the context")]
            fn check(&self, ctx: &Ctx, input: &I) -> Option<Fut> {
                $(let $e = <$e as FromCtx>::from_ctx(ctx)?;)*
                Some(self($($e,)* input))
            }
        }

        impl<F, I, $($e,)*> SyncPrecondition<($($e,)*), I> for F
        where
            F: Fn($($e,)* &I) -> Result<(), Unmet> + Send + Sync + 'static,
            $($e: FromCtx,)*
        {
            fn requirements() -> Vec<Requirement> {
                requirements_of(&[$(<$e as FromCtx>::requirement(),)*])
            }

            #[allow(non_snake_case, reason = "the extractors are named after their type parameters")]
            #[allow(unused_variables, reason = "the check without extractors does not read the context")]
            fn check(&self, ctx: &Ctx, input: &I) -> Option<Result<(), Unmet>> {
                $(let $e = <$e as FromCtx>::from_ctx(ctx)?;)*
                Some(self($($e,)* input))
            }
        }
    };
}

with_extractors!();
with_extractors!(E1);
with_extractors!(E1, E2);
with_extractors!(E1, E2, E3);
with_extractors!(E1, E2, E3, E4);

/// A check for [`CapabilityBuilder::precondition`](crate::CapabilityBuilder::precondition): a
/// function of zero to four [`FromCtx`] parameters and a reference to the decoded input `I`,
/// answering at once with `Result<(), Unmet>` — or, as before extractors, of the call's context by
/// reference and the input (`|ctx: &Ctx, i: &In|`). The extractors' needs are checked at mount
/// with the handler's, so a check that reads state the registry was not given is refused before
/// anything is served; `ctx.state::<T>()` read through `&Ctx` is not (it panics at call time, a
/// fault). `Args` is the tuple of extractor types ([`CtxRef`] for the context by reference).
#[diagnostic::on_unimplemented(
    message = "this is not a precondition: it takes extractors first and a reference to the input last, and returns `Result<(), Unmet>`",
    label = "not a check for `.precondition`",
    note = "valid shapes: `|i: &In| ..`, `|ctx: &Ctx, i: &In| ..`, `|State(db): State<Db>, i: &In| ..` \
            (up to four extractors: `Ctx`, `State<T>`, `InstanceState<S>`, `Caller`, or your own `FromCtx`)",
    note = "write each parameter's type (`|_: &Ctx, i: &In|`, not `|_, i|`): the shape is chosen from them",
    note = "a check that awaits (a database, another service) is `.precondition_async`"
)]
pub trait SyncPrecondition<Args, I>: Send + Sync + 'static {
    /// What the extractors need, checked at mount.
    fn requirements() -> Vec<Requirement>;

    /// Extracts the parameters and runs the check; `None` when an extractor finds nothing.
    fn check(&self, ctx: &Ctx, input: &I) -> Option<Result<(), Unmet>>;
}

/// The `Args` of a [`SyncPrecondition`] that takes the call's context by reference
/// (`|ctx: &Ctx, i: &In|`); never built.
#[derive(Debug)]
pub enum CtxRef {}

impl<F, I> SyncPrecondition<(CtxRef,), I> for F
where
    F: Fn(&Ctx, &I) -> Result<(), Unmet> + Send + Sync + 'static,
{
    fn requirements() -> Vec<Requirement> {
        Vec::new()
    }

    fn check(&self, ctx: &Ctx, input: &I) -> Option<Result<(), Unmet>> {
        Some(self(ctx, input))
    }
}

/// `check` erased, as the builder stores it.
pub(crate) fn erase_sync_precondition<Args, I, P>(check: P) -> ErasedPrecondition
where
    I: Send + 'static,
    P: SyncPrecondition<Args, I>,
{
    let check = move |ctx: &Ctx, input: &(dyn Any + Send)| -> Option<Result<(), AgentSurfaceError>> {
        match input.downcast_ref::<I>() {
            Some(i) => check.check(ctx, i).map(|answer| answer.map_err(Unmet::into_error)),
            // The input type was checked at registration.
            None => Some(Ok(())),
        }
    };
    ErasedPrecondition { check: PreconditionCheck::Now(Arc::new(check)), input_type: TypeId::of::<I>() }
}

/// A check for [`CapabilityBuilder::precondition_async`](crate::CapabilityBuilder::precondition_async)
/// with extractors: a function of zero to four [`FromCtx`] parameters and a reference to the
/// decoded input `I`, returning a `'static` future of `Result<(), Unmet>`. The extractors' needs
/// are checked at mount with the handler's, so a check that reads state the registry was not
/// given is refused before anything is served. `Args` is the tuple of extractor types.
#[diagnostic::on_unimplemented(
    message = "this is not an asynchronous precondition: it takes extractors first and a reference to the input last, and returns a future",
    label = "not a check for `.precondition_async`",
    note = "valid shapes: `|i: &In| {{ let id = i.id.clone(); async move {{ .. }} }}`, `|ctx: Ctx, i: &In| ..`, `|State(db): State<Db>, i: &In| ..` \
            (up to four extractors: `Ctx`, `State<T>`, `InstanceState<S>`, `Caller`, or your own `FromCtx`)",
    note = "the future owns what it needs (`'static`): clone the input's fields into it; it returns `Result<(), Unmet>`"
)]
pub trait Precondition<Args, I>: Send + Sync + 'static {
    /// The check's future.
    type Future: Future<Output = Result<(), Unmet>> + Send + 'static;

    /// What the extractors need, checked at mount.
    fn requirements() -> Vec<Requirement>;

    /// Extracts the parameters and starts the check; `None` when an extractor finds nothing.
    fn check(&self, ctx: &Ctx, input: &I) -> Option<Self::Future>;
}

/// `check` erased, as the builder stores it.
pub(crate) fn erase_precondition<Args, I, P>(check: P) -> ErasedPrecondition
where
    I: Send + 'static,
    P: Precondition<Args, I>,
{
    let check =
        move |ctx: &Ctx, input: &(dyn Any + Send)| -> Option<BoxFuture<'static, Result<(), AgentSurfaceError>>> {
            match input.downcast_ref::<I>() {
                Some(i) => Some(check.check(ctx, i)?.map(|answer| answer.map_err(Unmet::into_error)).boxed()),
                // The input type was checked at registration.
                None => Some(std::future::ready(Ok(())).boxed()),
            }
        };
    ErasedPrecondition { check: PreconditionCheck::Later(Arc::new(check)), input_type: TypeId::of::<I>() }
}

/// A handler written over `anyhow::Result<O>`, so that `?` works on an `anyhow::Error` (and on
/// any error, and on an [`AgentSurfaceError`], which comes back out unchanged). Its errors become
/// what [`AgentSurfaceError::from_anyhow`] makes of them: a sanitized
/// `EXECUTION_FAILED {reason: handler-error}` whose private cause keeps the whole chain, or the
/// `AgentSurfaceError` it carries. The `anyhow` feature (on by default).
///
/// ```
/// use agent_surface_core::AgentSurfaceError;
/// use agent_surface_registry::{Anyhow, Registry, RegistryConfig};
/// use anyhow::Context;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Lookup { sku: String }
///
/// let registry = Registry::new(RegistryConfig::default());
/// registry.define("stock", |t| {
///     t.capability("count", "Count a product in stock.").handle(Anyhow(|i: Lookup| async move {
///         if i.sku.is_empty() {
///             return Err(AgentSurfaceError::precondition_failed("Name a product.").into());
///         }
///         let n: u32 = std::fs::read_to_string(format!("/stock/{}", i.sku))
///             .context("reading the stock file")?
///             .trim()
///             .parse()?;
///         Ok(n)
///     }))
/// })?;
/// # Ok::<_, agent_surface_core::DefinitionError>(())
/// ```
#[cfg(feature = "anyhow")]
#[derive(Clone, Copy, Debug)]
pub struct Anyhow<F>(pub F);

/// Tells the implementations of [`Handler`] for [`Anyhow`] apart from those for bare closures.
#[cfg(feature = "anyhow")]
#[derive(Debug)]
#[non_exhaustive]
pub struct AnyhowArgs<Args>(std::marker::PhantomData<Args>);

#[cfg(feature = "anyhow")]
macro_rules! anyhow_handler_with {
    ($($e:ident),*) => {
        impl<F, Fut, I, O, $($e,)*> Handler<AnyhowArgs<($($e,)*)>, I, O> for Anyhow<F>
        where
            F: Fn($($e,)* I) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = anyhow::Result<O>> + Send + 'static,
            $($e: FromCtx,)*
        {
            type Future = futures_util::future::MapErr<Fut, fn(anyhow::Error) -> AgentSurfaceError>;

            fn requirements() -> Vec<Requirement> {
                requirements_of(&[$(<$e as FromCtx>::requirement(),)*])
            }

            #[allow(non_snake_case, reason = "the extractors are named after their type parameters")]
            #[allow(unused_variables, reason = "the handler without extractors does not read the context")]
            fn call(&self, ctx: &Ctx, input: I) -> Option<Self::Future> {
                use futures_util::TryFutureExt as _;
                $(let $e = <$e as FromCtx>::from_ctx(ctx)?;)*
                let convert: fn(anyhow::Error) -> AgentSurfaceError = AgentSurfaceError::from_anyhow;
                Some((self.0)($($e,)* input).map_err(convert))
            }
        }
    };
}

#[cfg(feature = "anyhow")]
anyhow_handler_with!();
#[cfg(feature = "anyhow")]
anyhow_handler_with!(E1);
#[cfg(feature = "anyhow")]
anyhow_handler_with!(E1, E2);
#[cfg(feature = "anyhow")]
anyhow_handler_with!(E1, E2, E3);
#[cfg(feature = "anyhow")]
anyhow_handler_with!(E1, E2, E3, E4);
