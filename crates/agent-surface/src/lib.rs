//! One dependency for a service that exposes capabilities to LLM agents, and one call that serves
//! it.
//!
//! The parts live in their own crates, re-exported here by name: [`core`] (the error model and
//! the capability model), [`policy`] (identities, authority, quotas, confirmations, stores),
//! [`registry`] (capabilities, the invocation pipeline, [`ServiceBuilder`]), [`mcp`] (the MCP
//! adapter), [`http`] (the HTTP binding and the approval inbox), [`server`] (connection limits
//! and the drain), and with their features `sqlite` (the durable stores of one server), `redis`
//! (the stores replicas share), `postgres` (the stores replicas share, durable, in PostgreSQL) and
//! `oauth` (the OAuth 2.1 resource server).
//!
//! # Features
//!
//! On by default: `stdio` (MCP over standard input and output), `http` (MCP's streamable HTTP
//! transport, the HTTP binding, the connection limits and the drain: [`http`], [`server`],
//! `Serve::http`), `inbox` (the approval inbox), `operator-log`, `metrics` and `anyhow`. Off:
//! `otel`, `redis`, `sqlite`, `postgres`, `oauth`. A service that serves MCP over stdio alone
//! builds with `default-features = false, features = ["stdio"]`, a quarter fewer crates
//! (the guide's table, `docs/guide.md`, lists what each feature costs).
//!
//! [`Serve`] puts them on the network the safe way: MCP at `/mcp`, the HTTP binding at `/api`,
//! the approval inbox at `/inbox` for the people who decide confirmations, one authenticator for
//! all three, the confirmation sweep on its timer, a graceful drain on SIGTERM or Ctrl-C, and
//! the operator log on standard error. What it cannot make safe it refuses before it listens (an
//! inbox nobody is sent to, replicas that cannot read each other's approval states), and it warns
//! of approval links to an inbox it does not serve. An MCP client that can ask its user lets the requester approve
//! their own call in person; `Serve::in_person_approval(false)` turns that off.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_surface::policy::{AllowAll, BearerTokens, Identity, Policies, RequireIdentity, Stores};
//! use agent_surface::{Serve, ServiceBuilder};
//!
//! # async fn run() -> Result<(), agent_surface::ServeError> {
//! let service = ServiceBuilder::new()
//!     .stores(Stores::memory())
//!     .authority(Policies::default_deny().global(RequireIdentity).for_type("tickets", AllowAll))
//!     .public_url("http://127.0.0.1:8080")
//!     .build();
//! // … define and mount capabilities on `service.registry` …
//! let people = BearerTokens::new([("alice-token", Identity::new("alice").with_role("approver"))]);
//! Serve::new(service)
//!     .authenticator(Arc::new(people))
//!     .approvers("approver")
//!     .http("127.0.0.1:8080")
//!     .await
//! # }
//! ```

#[cfg(any(feature = "stdio", feature = "http"))]
mod serve;

/// The token a server is given to stop it (`http::serve`, `mcp::http::serve_http`,
/// `server::serve_with`): it stops serving when the token is cancelled.
/// Re-exported from `tokio-util`, so that a service that depends on this crate alone can make one.
pub use tokio_util::sync::CancellationToken;

/// The examples of the user guide's HTTP chapter, compiled as doc tests.
#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../../../docs/http.md")]
struct UserGuideHttp;

/// The examples of the user guide's MCP chapter, compiled as doc tests.
#[cfg(all(doctest, feature = "http", feature = "stdio"))]
#[doc = include_str!("../../../docs/mcp.md")]
struct UserGuideMcp;

/// The examples of the user guide's operations chapter, compiled as doc tests (the OAuth and
/// SQLite ones when their features are on).
#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../../../docs/operations.md")]
struct UserGuideOperations;

pub use agent_surface_core as core;
#[cfg(feature = "http")]
pub use agent_surface_http as http;
pub use agent_surface_mcp as mcp;
#[cfg(feature = "oauth")]
pub use agent_surface_oauth as oauth;
pub use agent_surface_policy as policy;
#[cfg(feature = "postgres")]
pub use agent_surface_postgres as postgres;
#[cfg(feature = "redis")]
pub use agent_surface_redis as redis;
pub use agent_surface_registry as registry;
pub use agent_surface_registry::{Registry, Service, ServiceBuilder};
#[cfg(feature = "http")]
pub use agent_surface_server as server;
#[cfg(feature = "sqlite")]
pub use agent_surface_sqlite as sqlite;
#[cfg(feature = "http")]
pub use serve::Running;
#[cfg(any(feature = "stdio", feature = "http"))]
pub use serve::{Serve, ServeError};
