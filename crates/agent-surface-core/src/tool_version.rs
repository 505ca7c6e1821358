//! Per-tool versions: an opaque identifier of what a model plans a call against, listed with
//! every tool and echoed on calls, and the one table of the names it travels under.
//!
//! A tool's version is a digest of its definition as a caller sees it ([`ToolDefinition`]): a
//! call that names a version which is no longer the live one is `STALE_CAPABILITY {reason:
//! tool-version-mismatch, liveToolVersion}` with retry `after-refresh`, whatever the tool's
//! effect; a call naming the live version, or none, goes on. The version is the same in every
//! process that defines the tool alike (replicas, a restart), and changes only when the
//! definition does — never on a mount, an unmount or a remount of an identical definition
//! (`spec/invocation.md`, "Tool versions", says why).
//!
//! # The wire names
//!
//! The next MCP release plans per-tool versioning (the transports working group's "Tool
//! Versioning" track: an opaque version on each tool of `tools/list`, echoed by the client on
//! `tools/call`, a standard "stale tool definition" error), but no field name is standardized
//! yet. Until it is, the version travels under the names of [`wire`], which every adapter and
//! client helper of this workspace reads: renaming to the final specification is a change of
//! that table.
//!
//! ```
//! use agent_surface_core::tool_version::{ConfirmationGate, ToolDefinition, wire};
//! use agent_surface_core::Effect;
//! use serde_json::json;
//!
//! let input = json!({"type": "object", "properties": {"city": {"type": "string"}}});
//! let def = ToolDefinition {
//!     name: "weather.current",
//!     description: "Current temperature in a city.",
//!     input_schema: &input,
//!     output_schema: None,
//!     effect: Effect::Read,
//!     idempotent: true,
//!     long_running: false,
//!     plane: "procedure",
//!     confirmation: ConfirmationGate::None,
//!     meta: None,
//! };
//! let version = def.version();
//! assert_eq!(version.len(), 20);
//! // The same definition written with its keys in another order has the same version …
//! let reordered = json!({"properties": {"city": {"type": "string"}}, "type": "object"});
//! assert_eq!(ToolDefinition { input_schema: &reordered, ..def }.version(), version);
//! // … and any change of what a caller plans against gives another.
//! assert_ne!(ToolDefinition { description: "Current temperature.", ..def }.version(), version);
//! assert_eq!(wire::MCP_META, "agent-surface/toolVersion");
//! ```

use serde_json::Value;

use crate::code::Effect;
use crate::digest::PartsDigest;
use crate::hex::Hex;
use crate::json::write_canonical;

/// The names a tool version travels under, on every transport: the one table to change when the
/// MCP specification names the field (no name is standardized yet).
pub mod wire {
    /// MCP: the key of a tool's version in the `_meta` of each tool of a `tools/list` result
    /// (both protocol eras), and the key under which a client echoes it in the `_meta` of
    /// `tools/call`. In this runtime's own `_meta` namespace until the standard names the field.
    pub const MCP_META: &str = "agent-surface/toolVersion";
    /// The HTTP binding: the member of each capability of the discovery output and the member of
    /// the invoke body; also the member of the Rust API's serialized `InvokeRequest` and
    /// `CapabilityDescriptor`, which spell it through serde's camelCase (a test pins the two).
    pub const HTTP_MEMBER: &str = "toolVersion";
    /// The details member of `STALE_CAPABILITY {reason: tool-version-mismatch}` that carries the
    /// live version (this runtime's own error model, not a protocol field).
    pub const LIVE_DETAIL: &str = "liveToolVersion";
}

/// The number of hex characters of a rendered version (80 bits of the SHA-256).
pub const VERSION_CHARS: usize = 20;

/// Whether a tool's definition declares a confirmation gate.
#[expect(
    clippy::exhaustive_enums,
    reason = "declared or not: part of a tool version's hashed input, so a new variant changes every version"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfirmationGate {
    /// No gate is declared.
    None,
    /// Every call is gated.
    Always,
    /// Some inputs are gated, decided per call.
    Conditional,
}

impl ConfirmationGate {
    const fn as_str(self) -> &'static str {
        match self {
            ConfirmationGate::None => "none",
            ConfirmationGate::Always => "always",
            ConfirmationGate::Conditional => "conditional",
        }
    }
}

/// What a tool's version is computed from: its definition as a caller plans against it.
///
/// Left out on purpose: the live instances and their registration ids (a remount, another
/// replica or a restart must not make a call stale that still fits; the instances are judged by
/// resolution: `AMBIGUOUS_INSTANCE`, `registration-replaced`, `COMPONENT_UNMOUNTED`), the reserved
/// target argument discovery adds when several instances are visible (it depends on the consumer
/// and the instances), availability (`CAPABILITY_NOT_AVAILABLE` says so at call time), and what a
/// caller cannot see (the handler's code, bindings' sources, time budgets, audit settings).
#[derive(Clone, Copy, Debug)]
pub struct ToolDefinition<'a> {
    /// The capability name (`type.capability`); the tool name derives from it.
    pub name: &'a str,
    /// The description for the model.
    pub description: &'a str,
    /// The advertised input schema (bound fields excluded, without the target argument).
    pub input_schema: &'a Value,
    /// The output schema, when declared.
    pub output_schema: Option<&'a Value>,
    /// The declared effect.
    pub effect: Effect,
    /// Whether the capability is idempotent.
    pub idempotent: bool,
    /// Whether a call may run long (a task where the transport can hand one back).
    pub long_running: bool,
    /// Where it runs, as discovery spells it (`view`, `procedure`).
    pub plane: &'a str,
    /// The declared confirmation gate.
    pub confirmation: ConfirmationGate,
    /// The author's metadata, listed with the tool.
    pub meta: Option<&'a Value>,
}

impl ToolDefinition<'_> {
    /// The version: the first [`VERSION_CHARS`] lowercase hex characters of a SHA-256 over the
    /// labelled parts below, JSON values in their canonical form (RFC 8785, [`crate::json`]).
    /// Computed once per definition, never per call.
    pub fn version(&self) -> String {
        let json = |v: Option<&Value>| {
            let mut out = Vec::new();
            if let Some(v) = v {
                write_canonical(v, &mut out);
            }
            out
        };
        let bool = |b: bool| if b { &b"true"[..] } else { &b"false"[..] };
        let digest = PartsDigest::new()
            .labelled(b"agent-surface/tool-version/1", b"")
            .labelled(b"name", self.name.as_bytes())
            .labelled(b"description", self.description.as_bytes())
            .labelled(b"input", &json(Some(self.input_schema)))
            .labelled(b"output", &json(self.output_schema))
            .labelled(b"effect", self.effect.as_str().as_bytes())
            .labelled(b"idempotent", bool(self.idempotent))
            .labelled(b"long-running", bool(self.long_running))
            .labelled(b"plane", self.plane.as_bytes())
            .labelled(b"confirmation", self.confirmation.as_str().as_bytes())
            .labelled(b"meta", &json(self.meta))
            .finish();
        Hex(&digest[..VERSION_CHARS / 2]).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base(input: &Value) -> ToolDefinition<'_> {
        ToolDefinition {
            name: "notes.erase",
            description: "Erase a note.",
            input_schema: input,
            output_schema: None,
            effect: Effect::Destructive,
            idempotent: false,
            long_running: false,
            plane: "procedure",
            confirmation: ConfirmationGate::None,
            meta: None,
        }
    }

    #[test]
    fn every_part_moves_the_version() {
        let input = json!({"type": "object"});
        let other = json!({"type": "object", "properties": {"id": {"type": "string"}}});
        let output = json!({"type": "object"});
        let meta = json!({"owner": "ops"});
        let b = base(&input);
        let v = b.version();
        let variants = [
            ToolDefinition { name: "notes.erase2", ..b },
            ToolDefinition { description: "Erase a note for good.", ..b },
            ToolDefinition { input_schema: &other, ..b },
            ToolDefinition { output_schema: Some(&output), ..b },
            ToolDefinition { effect: Effect::Write, ..b },
            ToolDefinition { idempotent: true, ..b },
            ToolDefinition { long_running: true, ..b },
            ToolDefinition { plane: "view", ..b },
            ToolDefinition { confirmation: ConfirmationGate::Always, ..b },
            ToolDefinition { confirmation: ConfirmationGate::Conditional, ..b },
            ToolDefinition { meta: Some(&meta), ..b },
        ];
        let mut seen = std::collections::HashSet::from([v.clone()]);
        for d in variants {
            let w = d.version();
            assert_eq!(w.len(), VERSION_CHARS);
            assert!(w.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{w}");
            assert!(seen.insert(w), "{d:?} has a version another definition has");
        }
        assert_eq!(base(&input).version(), v, "deterministic");
    }

    /// Pinned: the version is the same in every process and release that defines the tool alike
    /// (replicas, restarts); changing the construction changes every version, which is allowed
    /// (a caller refreshes once) but must be deliberate.
    #[test]
    fn the_construction_is_pinned() {
        let input = json!({"type": "object"});
        // SHA-256 of the framed parts computed outside Rust (Python hashlib), first 10 bytes.
        assert_eq!(base(&input).version(), "bf7fca8dda9579658844");
    }
}
