//! Fuzz drivers for the surfaces where agent-surface reads bytes it does not control.
//!
//! # Overview
//!
//! Each public function takes arbitrary bytes, drives one surface with them and asserts that
//! surface's invariants; a panic is a finding. The same functions serve two callers:
//!
//! - the cargo-fuzz targets in `fuzz/fuzz_targets/` (nightly, libFuzzer), one thin wrapper each;
//! - `tests/corpora.rs`, which replays every committed corpus file (`fuzz/corpus/<target>/`) as an
//!   ordinary test, so `cargo test --workspace` on stable re-checks every input the fuzzer kept.
//!
//! | target | surface | invariants |
//! |---|---|---|
//! | [`invoke_input`] | `Registry::invoke` with recursive, nested schemas | never panics; error payloads round-trip; an input value never reaches a payload (only keys, as issue paths); replays equal the first result |
//! | [`mcp_frame`] | one JSON-RPC frame to the MCP server after `initialize` | every answer is JSON-RPC 2.0; the server answers a following ping and ends cleanly |
//! | [`toolset_args`] | provider tool calls (`parse_tool_calls`) and their arguments strings | never panics; faults are typed; malformed arguments quote nothing; results round-trip through each provider's encoding |
//! | [`http_request`] | the HTTP binding's router, one request | the status is documented; every body is JSON; problems are either a protocol fault's fixed body or a payload that decodes |
//! | [`payload_parse`] | `ErrorPayload` and `InvokeResult` parsing | what parses re-serializes and parses back equal, with a normalized message |
//!
//! Every driver is deterministic and fast: one current-thread runtime and one registry per
//! thread, created on first use; no sleeps.
//!
//! # Examples
//!
//! ```
//! agent_surface_fuzz::payload_parse(br#"{"code":"CANCELLED","message":"The call was cancelled.","retry":"no"}"#);
//! for (name, run) in agent_surface_fuzz::TARGETS {
//!     assert!(!name.is_empty());
//!     run(b"{}");
//! }
//! ```

mod check;
mod fixture;
mod http;
mod invoke;
mod mcp;
mod payload;
mod toolset;

pub use http::http_request;
pub use invoke::invoke_input;
pub use mcp::mcp_frame;
pub use payload::payload_parse;
pub use toolset::toolset_args;

/// The marker a fuzz input plants in its values: an error payload may contain it only when one
/// of the input's object keys does (issue paths name keys, never values), and a message then
/// only inside a plain JSON Pointer.
pub const SECRET_MARKER: &str = "SECRET-MARKER";

/// A driver: bytes in, a panic when an invariant breaks.
pub type Driver = fn(&[u8]);

/// Every target, by the name of its cargo-fuzz target and corpus directory.
pub const TARGETS: [(&str, Driver); 5] = [
    ("invoke_input", invoke_input),
    ("mcp_frame", mcp_frame),
    ("toolset_args", toolset_args),
    ("http_request", http_request),
    ("payload_parse", payload_parse),
];
