//! [`Registry::invoke`]: the registry's entry to the pipeline. It sits beside `registry.rs`, not
//! in it, so that the registry and the pipeline (which reads the registry's state) do not import
//! each other (`cargo xtask structure`).

use agent_surface_core::InvokeResult;

use crate::registry::Registry;
use crate::request::{Invocation, InvokeOptions, InvokeRequest};

impl Registry {
    /// Runs one call through the pipeline (the private module `pipeline`, read top to bottom in its
    /// `mod.rs`). Never fails and never panics for anything the caller sends: every failure is an
    /// `InvokeResult` with an agent-safe payload.
    ///
    /// The returned future holds the call: the request and options are moved into it once, and
    /// nothing is boxed for a call that no hook waits on and whose handler completes on its first
    /// poll. A caller that keeps many calls pending may box it.
    pub fn invoke(
        &self,
        request: InvokeRequest,
        options: InvokeOptions,
    ) -> impl Future<Output = InvokeResult> + Send + '_ {
        crate::pipeline::invoke(self, request, options, |invocation| invocation.result)
    }

    /// [`Registry::invoke`], plus what the operator side knows: the phase that produced an
    /// error, and whether the result was replayed or joined.
    pub fn invoke_detailed(
        &self,
        request: InvokeRequest,
        options: InvokeOptions,
    ) -> impl Future<Output = Invocation> + Send + '_ {
        crate::pipeline::invoke(self, request, options, std::convert::identity)
    }
}
