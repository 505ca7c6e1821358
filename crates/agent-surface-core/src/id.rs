//! Identifiers nobody can guess: 128 bits from the operating system's random source.
//!
//! Confirmation ids, surface ids, MCP session keys and task ids are made here. Each is `prefix`
//! followed by 32 lower-case hexadecimal digits of [`getrandom`] output: a caller who knows every
//! id issued so far learns nothing about the next one.
//!
//! What else protects what an id names differs: a confirmation is also bound to the consumer key
//! and the call it was issued for, and an authenticated caller's task to its principal; but an
//! anonymous caller's task (`TaskRecord::owner` is `None`) is reachable by whoever holds its id —
//! there the id is the only protection. So ids never fall back to a guessable value: when the
//! random source fails, making one panics.

/// `prefix` and 32 hexadecimal digits: 128 bits from the operating system's random source.
///
/// # Panics
///
/// When the operating system's random source fails ([`getrandom::fill`] returns an error —
/// not on any platform this project supports; it means the system is broken). An id that could
/// be guessed is never handed out instead (see the [module](self) documentation and
/// [`fill_random`]).
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
    let mut digits = [0u8; 32];
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    id.push_str(crate::hex::encode_into(&bytes, &mut digits));
    id
}

/// 16 bytes from the operating system's random source.
///
/// # Panics
///
/// When the random source fails (see [`fill_random`]).
#[must_use]
pub fn random_bytes() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes);
    bytes
}

/// Fills `bytes` from the operating system's random source (keys, nonces, ids).
///
/// # Panics
///
/// When the random source fails. This fails closed, as the standard library's own hash seeds
/// and the common random-number crates do: getrandom failing means the operating system cannot
/// provide entropy at all (no supported platform lacks a source; a sandbox that forbids it is
/// misconfigured), and every fallback — a clock, a counter, the process id — would hand out
/// values an attacker can predict where callers rely on them being secret.
pub fn fill_random(bytes: &mut [u8]) {
    if let Err(e) = getrandom::fill(bytes) {
        panic!("the operating system's random source is unavailable ({e}); refusing to make a guessable secret");
    }
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

    #[test]
    fn fill_random_fills_any_length() {
        fill_random(&mut []);
        let (mut a, mut b) = ([0u8; 300], [0u8; 300]);
        fill_random(&mut a);
        fill_random(&mut b);
        assert_ne!(a, b);
        // The whole buffer is written, to its last byte.
        assert_ne!(a[280..], [0u8; 20]);
    }
}
