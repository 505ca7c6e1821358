//! Serves an agent-surface registry over plain HTTP: discovery, invocation, and the error model
//! as RFC 9457 problem details.
//!
//! # Overview
//!
//! [`router`] builds an axum router with these routes under [`HttpConfig::prefix`]:
//!
//! | route | answer |
//! |---|---|
//! | `GET {prefix}/capabilities` | `200`, `application/json`: the caller's `Snapshot` |
//! | `POST {prefix}/invoke` | the `InvokeRequest` JSON in, the result out (below); progress as Server-Sent Events, or a `202` task ([`asynchronous`]) |
//! | `GET {prefix}/openapi.json` | `200`, `application/json`: an OpenAPI 3.1 document of what the caller can do, from the live surface ([`openapi`]) |
//! | `GET`/`DELETE {prefix}/tasks/{id}` | with [`HttpConfig::tasks`]: a task's view, or its cancellation ([`asynchronous`]) |
//!
//! **Two result shapes, never confused.** A call that reached the pipeline answers with its
//! `InvokeResult`: a success is `200` with `{"status":"ok","output":…,"invocationId"?}`; a
//! capability error is the matrix's HTTP status analog (`matrix::spec(code).http_status`) with an
//! `application/problem+json` body whose `type` is `urn:agent-surface:error:{CODE}` and whose
//! extension members are the payload itself — `code`, `message`, `retry`, `details`, and any
//! member core adds — serialized by core in wire order, so the payload's bytes are the ones MCP and
//! the embedded toolset carry. `Retry-After` (seconds, rounded up) accompanies `retry:
//! after-delay`; a `401` always carries `WWW-Authenticate` (the authenticator's challenge, else
//! `Bearer`). A request that never reached the pipeline (or whose answer the server failed to
//! produce) is a **protocol fault** ([`wire::ProtocolFault`]): `400`, `401`, `403`, `404`, `405`,
//! `408`, `413`, `415`, `500` or `503` with a problem of type `urn:agent-surface:protocol:{kind}` that has no
//! `code` member. A client tells them apart by the `type` prefix (or by the presence of `code`),
//! never by the status: `404` is both `CAPABILITY_NOT_FOUND` and an unknown route, `500` both
//! `EXECUTION_FAILED` and the `internal` fault.
//!
//! **Requests.** The invoke body is `application/json` (one `Content-Type` field, `charset`
//! `utf-8` if any, no content coding), at most [`HttpConfig::max_body_bytes`], arriving within
//! [`HttpConfig::body_timeout`], one JSON object with no member name repeated in any object.
//! Every route checks the host (the absolute-form target's authority, else the single `Host`
//! header) against [`HttpConfig::allowed_hosts`].
//!
//! **Who calls.** An [`Authenticator`] (e.g. [`BearerTokens`]) turns headers into an identity,
//! or refuses the request before anything else of it is read (an OAuth 2.1 resource server such
//! as `agent-surface-oauth`'s: the protocol faults `unauthorized`, `insufficient-scope`,
//! `auth-unavailable`, each with its `WWW-Authenticate`);
//! the consumer key is `http:{principal}:{session}` (signed in: the identity's issuer and
//! subject, `Identity::principal_key`) or `http-anonymous:{session}`,
//! `session` being the `Agent-Surface-Consumer` header (default `default`); audit events and
//! the operator log show it. Idempotency keys, tasks, rate budgets, confirmations and relayed
//! confirmations are keyed on the caller's principal (`Consumer::principal`: the signed-in user,
//! the same as over MCP; an anonymous caller's consumer key), so another header value opens no
//! new budget, splits no approval and makes no retry a new call.
//!
//! **Idempotency.** `Idempotency-Key` (one field: a bare token of visible ASCII without `"`, or
//! an RFC 8941 sf-string such as `"a\"b"`, decoded) is the invocation id; the decoded key and a
//! body `invocationId` are 1 to 255 printable ASCII characters. When the body also has an
//! `invocationId`, they must be equal (else a `400` protocol fault).
//!
//! **Serving and shutdown.** [`serve`] runs the router with the connection limits of
//! [`HttpConfig::limits`] (`agent-surface-server`), and drains when its token is cancelled: new
//! connections are refused, the calls in flight finish and are answered, and those still running
//! at the drain deadline are cancelled by disposing the registry (a write whose handler had
//! started ends `EXECUTION_FAILED {reason: outcome-unknown}`). See [`serve`] for a registry
//! shared with other servers.
//!
//! See `docs/http.md`, `docs/operations.md` and the HTTP section of `spec/adapters.md`.
//!
//! # Examples
//!
//! ```
//! use agent_surface_http::{HttpConfig, router};
//! use agent_surface_registry::{Registry, RegistryConfig};
//!
//! let registry = Registry::new(RegistryConfig::default());
//! let app: axum::Router = router(registry, HttpConfig::with_prefix("/api"));
//! # drop(app);
//! ```
//!
//! Reading a response back ([`wire::decode`]) gives the same `InvokeResult`:
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, InvokeResult};
//! use agent_surface_core::details::RateLimitReason;
//! use agent_surface_http::wire;
//! use std::time::Duration;
//!
//! let payload = AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1200)).into_payload();
//! let encoded = wire::encode(&InvokeResult::error(payload, None));
//! assert_eq!(encoded.status, 429);
//! assert_eq!(encoded.retry_after, Some(2));
//! let back = wire::decode(429, &encoded.body).unwrap();
//! assert_eq!(back.code(), Some(agent_surface_core::ErrorCode::RateLimited));
//! ```

#![forbid(unsafe_code)]

pub mod asynchronous;
mod auth;
#[cfg(feature = "inbox")]
pub mod inbox;
mod json;
pub mod openapi;
mod router;
pub mod wire;

/// The examples of the user guide's approvals chapter, compiled and run as doc tests.
#[cfg(all(doctest, feature = "inbox"))]
#[doc = include_str!("../../../docs/approvals.md")]
struct UserGuideApprovals;

pub use agent_surface_core::message::Sends;
pub use auth::{Authenticator, BearerTokens, BoxFuture};
pub use router::{CONSUMER_HEADER, CORRELATION_ID, HttpConfig, IDEMPOTENCY_KEY, MetricsRenderer, router, serve};
