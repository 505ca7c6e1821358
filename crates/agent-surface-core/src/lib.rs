//! The error model of agent-surface: the closed set of codes an agent sees, their retry
//! categories, the agent-safe payload, the thrown form with its private cause, and the matrix
//! from which `spec/error-matrix.json` is generated.
//!
//! # Overview
//!
//! An agent loop must be able to act on every failure mechanically. So every failure that crosses
//! to an agent is an [`ErrorPayload`] `{code, message, retry, details?}`:
//!
//! - [`ErrorCode`] — sixteen codes, closed;
//! - [`Retry`] — six categories telling the loop what to do next;
//! - `details` — a typed, agent-safe object per code (see [`details`]);
//! - `message` — an imperative sentence from a template ([`message`]), never an error's text.
//! - `repair` — optionally, the concrete next action or an ordered plan ([`repair`]), compatible
//!   with `retry` and also rendered as a bounded "Next action:" sentence of the message.
//!
//! Inside handlers and policies the thrown form is [`AgentSurfaceError`]: the payload plus a
//! private cause for the operator channel. The [`matrix`] is the single source of truth for each
//! code's phase, layer, retry rule, cacheability, details schema and adapter mappings; the
//! constructors derive `retry` from it. What follows from the table sits above it: the example
//! payloads ([`examples`]) and the JSON document and docs tables ([`render`]).
//!
//! This crate has no async runtime and does no I/O.
//!
//! # Examples
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult, Retry};
//!
//! // A handler rejects a call for a business reason.
//! let err = AgentSurfaceError::precondition_failed("Shipped orders cannot be cancelled.");
//! let result = InvokeResult::error(err.into_payload(), Some("inv-42".into()));
//!
//! // The agent loop branches on code and retry, never on the text.
//! let payload = result.error_payload().unwrap();
//! assert_eq!(payload.code(), ErrorCode::PreconditionFailed);
//! assert_eq!(payload.retry(), Retry::WithChanges);
//!
//! // On the wire:
//! let json = serde_json::to_value(&result).unwrap();
//! assert_eq!(json["error"]["code"], "PRECONDITION_FAILED");
//! assert_eq!(json["error"]["retry"], "with-changes");
//! ```

// Closedness is decided for every public enum of this crate: an enum that leaves it undecided
// fails clippy. The error model's enums (codes, retry categories, phases, every `details`
// reason) are exhaustive on purpose: each is the wire contract the matrix is generated from, so a
// new variant is a change of that contract (the matrix, the spec, the real clients), and matching
// them exhaustively is how the compiler finds every place that must decide about it. Each enum
// says so with a targeted `expect`, and its reason (#30).
#![warn(clippy::exhaustive_enums)]

#[cfg(feature = "anyhow")]
mod anyhow_interop;
mod code;
mod codes;
pub mod decision;
mod definition;
pub mod details;
pub mod digest;
mod error;
pub mod examples;
pub mod hex;
pub mod id;
pub mod json;
pub mod matrix;
pub mod message;
mod payload;
pub mod render;
pub mod repair;
mod result;
mod text;
mod time;
pub mod tool_version;
pub mod wire;

pub use code::{Effect, ErrorCode, Layer, LogLevel, Phase, Retry};
pub use definition::{DefinitionError, DefinitionErrorCode};
pub use error::{AgentSurfaceError, Cause};
pub use payload::{ErrorPayload, MAX_CORRELATION_ID_CHARS, PayloadError, is_valid_correlation_id};
pub use result::InvokeResult;
pub use text::{MAX_FRAGMENT_CHARS, SafeText, is_invisible};
pub use time::Timestamp;

/// The examples of the user guide's error chapter, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/errors.md")]
struct UserGuideErrors;
