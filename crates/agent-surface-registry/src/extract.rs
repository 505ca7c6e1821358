//! Typed extractors for handlers, in the manner of axum: a handler given to
//! [`CapabilityBuilder::handle`](crate::CapabilityBuilder::handle) takes what it needs as
//! parameters — [`State<T>`] (shared state the registry [provides](crate::Registry::provide)),
//! [`InstanceState<S>`] (the target instance's state), [`Caller`] (who is calling), [`Ctx`] (progress,
//! answers, cancellation) — followed by its input, and each extractor's need is checked before
//! anything is served: a missing [`Registry::provide`](crate::Registry::provide) or an instance
//! mounted without the state a handler takes is a definition error at mount
//! ([`Registry::check_wiring`](crate::Registry::check_wiring)), not a failure of every call.
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

use crate::ctx::Ctx;

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
/// functions; `Args` is the tuple of extractor types (it only tells the implementations apart).
pub trait Handler<Args, I, O>: Send + Sync + 'static {
    /// The handler's future.
    type Future: Future<Output = Result<O, AgentSurfaceError>> + Send + 'static;

    /// What the extractors need, checked at mount.
    fn requirements() -> Vec<Requirement>;

    /// Extracts the parameters and calls the handler; `None` when an extractor finds nothing.
    fn call(&self, ctx: &Ctx, input: I) -> Option<Self::Future>;
}

macro_rules! handler_with {
    ($($e:ident),*) => {
        impl<F, Fut, I, O, $($e,)*> Handler<($($e,)*), I, O> for F
        where
            F: Fn($($e,)* I) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<O, AgentSurfaceError>> + Send + 'static,
            $($e: FromCtx,)*
        {
            type Future = Fut;

            fn requirements() -> Vec<Requirement> {
                let requirements: Vec<Option<Requirement>> = vec![$(<$e as FromCtx>::requirement(),)*];
                requirements.into_iter().flatten().collect()
            }

            #[allow(non_snake_case, reason = "the extractors are named after their type parameters")]
            #[allow(unused_variables, reason = "the handler without extractors does not read the context")]
            fn call(&self, ctx: &Ctx, input: I) -> Option<Fut> {
                $(let $e = <$e as FromCtx>::from_ctx(ctx)?;)*
                Some(self($($e,)* input))
            }
        }
    };
}

handler_with!();
handler_with!(E1);
handler_with!(E1, E2);
handler_with!(E1, E2, E3);
handler_with!(E1, E2, E3, E4);
