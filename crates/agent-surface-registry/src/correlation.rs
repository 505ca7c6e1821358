//! Correlation ids: the id an agent (or the person reading its transcript) can quote to find a
//! call in the operator log.
//!
//! Every call has one, and the registry always makes it: a prefix drawn once per process from
//! the operating system's random source (so that replicas and restarts do not repeat each
//! other's ids) and a counter, e.g. `c-5f0e93a1c2d4-1b`. Making one costs an atomic increment;
//! the text is formatted only when something asks for it. It is never the caller's invocation
//! id, nor derived from anything the caller sent: the id is written where the model reads it
//! (an error payload's `correlationId`, and so the text block of an MCP result), and an agent's
//! own string must not come back to a model as if the service had said it. The invocation id,
//! which ties a call's retries and replays together, is logged beside it (`invocation_id`).
//!
//! The invocation span (`tracing`, target `agent_surface::invoke`) carries it as the field
//! `correlation_id`, and the adapters hand it to the agent: in every error payload
//! (`correlationId`), and out of band as well — the MCP adapter in the result's `_meta`
//! (`agent-surface/correlationId`), the HTTP binding as the `Agent-Surface-Correlation-Id`
//! header, the embedded toolset on its tool result.
//!
//! ```
//! use agent_surface_registry::CorrelationId;
//!
//! let given = CorrelationId::of_invocation("inv-7");
//! assert_eq!(given.to_string(), "inv-7");
//! let made = CorrelationId::generate();
//! assert!(made.to_string().starts_with("c-"));
//! assert_ne!(made, CorrelationId::generate(), "each one is new");
//! ```

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The id that ties a call's result to its operator event; see the [module](self).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CorrelationId(Repr);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Repr {
    /// The caller's invocation id.
    Invocation(Box<str>),
    /// Made by this process: the process prefix and this number.
    Generated(u64),
}

/// The counter behind generated ids (0 is never handed out).
static NEXT: AtomicU64 = AtomicU64::new(1);

/// 48 random bits, drawn once per process, as 12 hex digits.
fn process_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 6];
        if getrandom::fill(&mut bytes).is_err() {
            // No random source (no supported platform lacks one): time and process id still
            // keep two processes apart in practice; ids are for finding log lines, not secrets.
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            let mixed = nanos ^ (u64::from(std::process::id()) << 32);
            bytes.copy_from_slice(&mixed.to_le_bytes()[..6]);
        }
        agent_surface_core::hex::Hex(&bytes).to_string()
    })
}

impl CorrelationId {
    /// A new id, unique in this process and (with overwhelming probability) across processes.
    pub fn generate() -> CorrelationId {
        CorrelationId(Repr::Generated(NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// A correlation id that is the caller's `invocation_id`, for an application that keeps its
    /// own ids. The registry never makes one (see the [module](self)), and an error payload
    /// never carries one ([`crate::Invocation`] writes only generated ids there).
    pub fn of_invocation(invocation_id: &str) -> CorrelationId {
        CorrelationId(Repr::Invocation(invocation_id.into()))
    }

    /// The caller's invocation id, when the correlation id is one.
    pub fn invocation_id(&self) -> Option<&str> {
        match &self.0 {
            Repr::Invocation(id) => Some(id),
            Repr::Generated(_) => None,
        }
    }

    /// A placeholder, replaced before a call's [`crate::Invocation`] leaves the registry.
    pub(crate) const fn pending() -> CorrelationId {
        CorrelationId(Repr::Generated(0))
    }

    /// The text of a generated id, written into a buffer on the stack (`None` for an invocation
    /// id, which is its own text): no allocation and no formatting machinery, since the
    /// confirmation phase and the audit trail ask for it on every call they see.
    pub(crate) fn generated_text(&self) -> Option<GeneratedText> {
        match self.0 {
            Repr::Invocation(_) => None,
            Repr::Generated(n) => Some(GeneratedText::new(n)),
        }
    }
}

/// The text of a generated correlation id: `c-`, the 12 hex digits of the process prefix, `-`,
/// and the counter in lowercase hex without leading zeros (at most 31 bytes).
#[derive(Clone, Copy, Default)]
pub(crate) struct GeneratedText {
    bytes: [u8; GeneratedText::MAX],
    len: u8,
}

impl GeneratedText {
    const MAX: usize = 2 + 12 + 1 + 16;

    fn new(n: u64) -> GeneratedText {
        let mut bytes = [0u8; Self::MAX];
        let prefix = process_prefix().as_bytes();
        bytes[..2].copy_from_slice(b"c-");
        bytes[2..2 + prefix.len()].copy_from_slice(prefix);
        let mut at = 2 + prefix.len();
        bytes[at] = b'-';
        at += 1;
        let digits = (16 - (n.leading_zeros() as usize) / 4).max(1);
        for i in 0..digits {
            let nibble = (n >> (4 * (digits - 1 - i))) & 0xf;
            bytes[at + i] = b"0123456789abcdef"[nibble as usize];
        }
        GeneratedText { bytes, len: (at + digits) as u8 }
    }

    /// The text.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII is ever written (`c-`, hex digits, `-`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("c-")
    }
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Invocation(id) => f.write_str(id),
            Repr::Generated(n) => f.write_str(GeneratedText::new(*n).as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_distinct_and_share_the_process_prefix() {
        let ids: Vec<String> = (0..1000).map(|_| CorrelationId::generate().to_string()).collect();
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        let prefix = process_prefix();
        assert_eq!(prefix.len(), 12);
        assert!(prefix.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(ids.iter().all(|id| id.starts_with(&format!("c-{prefix}-"))), "{}", ids[0]);
        assert!(ids.iter().all(|id| id.is_ascii() && !id.contains(' ')));
    }

    #[test]
    fn generated_text_is_the_prefix_and_the_counter_in_hex() {
        let prefix = process_prefix();
        for n in [0u64, 1, 0xf, 0x10, 0x1b, 0xdead_beef, u64::MAX >> 4, u64::MAX] {
            let id = CorrelationId(Repr::Generated(n));
            let text = id.generated_text().expect("generated");
            assert_eq!(text.as_str(), format!("c-{prefix}-{n:x}"));
            assert_eq!(id.to_string(), text.as_str());
        }
        assert!(CorrelationId::of_invocation("inv-1").generated_text().is_none());
    }

    #[test]
    fn an_invocation_id_is_its_own_correlation_id() {
        let id = CorrelationId::of_invocation("order-42/retry");
        assert_eq!(id.to_string(), "order-42/retry");
        assert_eq!(id.invocation_id(), Some("order-42/retry"));
        assert_eq!(CorrelationId::generate().invocation_id(), None);
    }
}
