//! Identifiers nobody can guess: 128 bits from the operating system's random source.
//!
//! Confirmation ids, surface ids, MCP session keys and task ids are made here. Each is `prefix`
//! followed by 32 lower-case hexadecimal digits of [`getrandom`] output: a caller who knows every
//! id issued so far learns nothing about the next one.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::hex::Hex;

/// `prefix` and 32 hexadecimal digits: 128 bits from the operating system's random source.
///
/// Where the operating system has no random source at all (`getrandom` fails — not on any
/// platform this project runs on), the id is still unique within the process (a counter and the
/// clock) but can be guessed; whatever an id protects must not rest on it alone (confirmations
/// and tasks are also bound to their principal).
///
/// ```
/// let id = agent_surface_core::id::random_id("c-");
/// assert_eq!(id.len(), 34);
/// assert!(id.starts_with("c-") && id[2..].bytes().all(|b| b.is_ascii_hexdigit()));
/// assert_ne!(id, agent_surface_core::id::random_id("c-"));
/// ```
#[must_use]
pub fn random_id(prefix: &str) -> String {
    let bytes = random_bytes();
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    id.push_str(&Hex(&bytes).to_string());
    id
}

/// 16 bytes from the operating system's random source (see [`random_id`] for the fallback).
#[must_use]
pub fn random_bytes() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        bytes[..8].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        bytes[8..].copy_from_slice(&(nanos as u64 ^ u64::from(std::process::id()) << 32).to_le_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_use_every_digit_position() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| random_id("s-")).collect();
        assert_eq!(ids.len(), 1000);
        // Each position takes many values across the ids (a counter or a clock would not).
        for pos in 2..34 {
            let seen: std::collections::HashSet<u8> = ids.iter().map(|id| id.as_bytes()[pos]).collect();
            assert!(seen.len() >= 10, "position {pos} took only {} values", seen.len());
        }
    }
}
