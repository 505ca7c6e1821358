//! The `anyhow` feature: an [`anyhow::Error`](::anyhow::Error) into and out of
//! [`AgentSurfaceError`].
//!
//! `impl From<anyhow::Error> for AgentSurfaceError` cannot exist beside the blanket
//! `impl<E: std::error::Error> From<E>` that makes `?` safe on every other error: the compiler
//! refuses it (E0119, "upstream crates may add a new impl of trait `std::error::Error` for type
//! `anyhow::Error`"). So the conversion is [`AgentSurfaceError::from_anyhow`], and the other
//! direction is a `From`: an `AgentSurfaceError` goes into an `anyhow::Error` and comes back out
//! unchanged, which is what lets a handler written over `anyhow::Result` (the registry's
//! `Anyhow` handler) use `?` on both.

use std::error::Error as StdError;
use std::fmt;

use crate::error::AgentSurfaceError;

/// An [`AgentSurfaceError`] carried inside an `anyhow::Error`: its `Display` is the payload's
/// (agent-safe), its source the private cause, so the chain stays whole on the operator channel.
struct Carried(AgentSurfaceError);

impl fmt::Display for Carried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Carried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl StdError for Carried {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.cause().map(|c| c as &(dyn StdError + 'static))
    }
}

/// An [`AgentSurfaceError`] inside an `anyhow::Error`, to come back out unchanged through
/// [`AgentSurfaceError::from_anyhow`] (context added on the way is dropped then).
impl From<AgentSurfaceError> for ::anyhow::Error {
    fn from(error: AgentSurfaceError) -> Self {
        ::anyhow::Error::new(Carried(error))
    }
}

impl AgentSurfaceError {
    /// An `anyhow::Error` as an `AgentSurfaceError`: one that carries an `AgentSurfaceError`
    /// (converted with `?` or `.into()`) is that error; any other is a sanitized
    /// `EXECUTION_FAILED {reason: handler-error}`, as [`AgentSurfaceError::internal`] makes it,
    /// whose private cause keeps the whole `anyhow` chain (contexts included) for the operator
    /// channel. Needs the `anyhow` feature.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, ErrorCode};
    /// use anyhow::Context;
    ///
    /// let err: anyhow::Error = Err::<(), _>(std::io::Error::other("password=hunter2"))
    ///     .context("reading the ledger")
    ///     .unwrap_err();
    /// let err = AgentSurfaceError::from_anyhow(err);
    /// assert_eq!(err.code(), ErrorCode::ExecutionFailed);
    /// assert!(!serde_json::to_string(err.payload()).unwrap().contains("hunter2"));
    /// assert_eq!(err.cause_chain(), ["reading the ledger", "password=hunter2"]);
    ///
    /// // A typed error survives the trip through anyhow.
    /// let typed: anyhow::Error = AgentSurfaceError::precondition_failed("The order has shipped.").into();
    /// assert_eq!(AgentSurfaceError::from_anyhow(typed).code(), ErrorCode::PreconditionFailed);
    /// ```
    pub fn from_anyhow(error: ::anyhow::Error) -> AgentSurfaceError {
        match error.downcast::<Carried>() {
            Ok(Carried(error)) => error,
            Err(error) => AgentSurfaceError::internal(error),
        }
    }
}
