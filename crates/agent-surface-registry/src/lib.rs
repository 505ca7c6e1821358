//! Capability definitions, live registrations, snapshots, and the invocation pipeline.
//!
//! # Overview
//!
//! A [`Registry`] holds capability *types*, each declaring capabilities with typed handlers
//! ([`Registry::define`]); live *instances* of a type are mounted and unmounted at run time
//! ([`Registry::mount`], [`Mount`]). A consumer discovers its [`Snapshot`] of the surface and calls
//! capabilities with [`Registry::invoke`], which runs the pipeline and returns an
//! [`InvokeResult`](agent_surface_core::InvokeResult) — never an `Err`, never a panic, whatever the
//! agent sends:
//!
//! 1. admission / idempotency, 2. resolve, 3. availability, 4. authority, 5. input,
//! 6. rate, 7. confirmation, 8. execute, 9. output, 10. record.
//!
//! Each phase lives in its own module under `pipeline/`; `spec/invocation.md` is the normative
//! description.
//!
//! JSON Schema has one owner, the public [`schema`] module: the portable subset every capability
//! schema is checked against ([`schema::PortableSchema`]), the one `$ref` resolver, the one JSON
//! Pointer escape, the subschema walk (`schemars`' own) and the one set of validator options
//! (formats asserted) for input, bound input and output. Adapters that rewrite schemas for a
//! provider build on it.
//!
//! # Features
//!
//! - `otel` (off by default): the invocation span continues the caller's W3C trace in
//!   OpenTelemetry — its parent is set with `tracing-opentelemetry` from the
//!   [`TraceParent`] an adapter passed ([`InvokeOptions::with_trace_parent`]), and it carries
//!   the semantic conventions' `execute_tool` attributes; see [`trace`] and `docs/operations.md`
//!   ("Traces"). Without it the span still records the caller's `trace_id` and `parent_id`.
//! - `operator-log` (off by default): `operator_log::init`, the operator log a `main` installs —
//!   `RUST_LOG` (default `warn`, the `invoke` span kept), text or JSON lines
//!   (`AGENT_SURFACE_LOG_FORMAT=json`), panics routed to it, redacted; see `docs/operations.md`
//!   ("Logs").
//! - `otel-tests`: not for applications; this crate's own test of `otel` (an in-memory span
//!   exporter).
//!
//! # Examples
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode};
//! use agent_surface_policy::Consumer;
//! use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig, Unmet};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct CancelOrder { order_id: String }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Cancelled { order_id: String }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let registry = Registry::new(RegistryConfig::default());
//! registry.define("orders", |t| {
//!     t.capability("cancel", "Cancel an order that has not shipped yet.")
//!         .effect(Effect::Write)
//!         .precondition(|_ctx: &Ctx, i: &CancelOrder| {
//!             if i.order_id.starts_with("shipped-") {
//!                 return Err(Unmet::new("Shipped orders cannot be cancelled.").reason("order-shipped"));
//!             }
//!             Ok(())
//!         })
//!         .handler(|_ctx: Ctx, i: CancelOrder| async move {
//!             Ok::<_, AgentSurfaceError>(Cancelled { order_id: i.order_id })
//!         })
//! })?;
//! let _mounted = registry.mount("orders", "default")?;
//! let consumer = InvokeOptions::new(Consumer::anonymous("session-1"));
//!
//! let ok = registry.invoke(InvokeRequest::new("orders.cancel", serde_json::json!({"order_id": "A-1"})), consumer.clone()).await;
//! assert!(ok.is_ok());
//!
//! let err = registry.invoke(InvokeRequest::new("orders.cancel", serde_json::json!({"order_id": "shipped-2"})), consumer).await;
//! assert_eq!(err.code(), Some(ErrorCode::PreconditionFailed));
//! # Ok::<_, agent_surface_core::DefinitionError>(())
//! # }).unwrap();
//! ```

mod authority;
pub mod correlation;
mod ctx;
mod define;
pub mod extract;
mod handler;
pub mod host_errors;
pub mod id;
mod invoke;
mod live;
mod measure;
#[cfg(feature = "operator-log")]
pub mod operator_log;
mod periodic;
mod pipeline;
mod progress;
pub mod questions;
mod registry;
mod relayed;
mod request;
pub mod schema;
mod service;
mod snapshot;
pub mod tasks;
pub mod telemetry;
pub mod trace;
mod validate;
mod wiring;

pub use correlation::CorrelationId;
pub use ctx::Ctx;
pub use define::{Binding, CapabilityBuilder, DefinitionLimits, Executor, KeyScope, Plane, TypeBuilder};
#[cfg(feature = "anyhow")]
pub use extract::{Anyhow, AnyhowArgs};
pub use extract::{
    Caller, CtxRef, FromCtx, Handler, InstanceState, Precondition, Requirement, State, SyncPrecondition,
};
pub use handler::{Unmet, Verification};
pub use periodic::Periodic;
pub use progress::{FnProgress, MAX_PROGRESS_MESSAGE_CHARS, Progress, ProgressSink};
pub use questions::{Abilities, Answers, Ask, Question};
pub use registry::{DuplicateInstance, Instance, Mount, MountRejection, Registry, RegistryConfig};
pub use request::{
    InvalidIdempotencyKey, Invocation, InvokeOptions, InvokeRequest, MAX_INVOCATION_ID_BYTES, TARGET_ARGUMENT, Target,
    idempotency_key_header, is_valid_invocation_id,
};
pub use service::{Service, ServiceBuilder};
pub use snapshot::{CapabilityDescriptor, InstanceDescriptor, Snapshot};
pub use trace::TraceParent;
pub use wiring::WiringWarning;

/// The examples of the user guide's chapter on policies, quotas and confirmation rules, compiled
/// and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/policies.md")]
struct UserGuidePolicies;
