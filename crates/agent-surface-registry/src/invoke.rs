//! [`Registry::invoke`]: the registry's entry to the pipeline. It sits beside `registry.rs`, not
//! in it, so that the registry and the pipeline (which reads the registry's state) do not import
//! each other (`cargo xtask structure`).

use agent_surface_core::InvokeResult;

use crate::registry::Registry;
use crate::request::{Invocation, InvokeOptions, InvokeRequest};

impl Registry {
    /// Runs one call through the pipeline ([`crate::pipeline`], read top to bottom in its
    /// `mod.rs`). Never fails and never panics for anything the caller sends: every failure is an
    /// `InvokeResult` with an agent-safe payload.
    pub async fn invoke(&self, request: InvokeRequest, options: InvokeOptions) -> InvokeResult {
        crate::pipeline::invoke(self, request, options).await.result
    }

    /// [`Registry::invoke`], plus what the operator side knows: the phase that produced an
    /// error, and whether the result was replayed or joined.
    pub async fn invoke_detailed(&self, request: InvokeRequest, options: InvokeOptions) -> Invocation {
        crate::pipeline::invoke(self, request, options).await
    }
}
