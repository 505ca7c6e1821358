//! Confirmations relayed to callers that cannot send them back, for a gate that does not
//! remember them itself.
//!
//! A model changes only a tool call's arguments, so it cannot present the `confirmationId` of a
//! `CONFIRMATION_REQUIRED` it was told about. The `ConfirmationEngine` remembers the ids it
//! relays in its store (`ConfirmationStore::remember_relayed`, shared by replicas that share the
//! store) and presents one when the same consumer repeats the same call; a gate that says so
//! (`ConfirmationGate::consults_call_details`) gets nothing from this module. For any other gate
//! (a custom `ConfirmationGate`) the registry keeps this memory: the id of each confirmation it
//! relayed, keyed on the consumer, the capability, the registration the call resolved to and
//! the input's fingerprint (`Fingerprint::of`, SHA-256 of its canonical JSON: the hash the
//! confirmation's evidence is bound to); when the same consumer repeats the same call without
//! evidence, phase 7 presents the remembered id — per process: a repeat that reaches another
//! replica is asked anew.
//!
//! The memory is bounded: at most `RegistryConfig::relayed_confirmations` ids (the oldest is
//! forgotten first), none longer than [`MAX_ID_BYTES`]. A lost entry only costs the caller a fresh
//! confirmation; an entry never grants anything by itself, since the confirmation gate checks the
//! id's binding (consumer, capability, target, input) and single use as for any presented id.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use agent_surface_policy::idempotency::Fingerprint;

/// The longest confirmation id remembered, in bytes; a longer one is relayed, not remembered.
pub(crate) const MAX_ID_BYTES: usize = 256;

/// One call as a caller repeats it: a keyed hash (random per registry, so keys cannot be
/// precomputed) of the consumer, the capability, the registration and the input's fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RelayKey(u64);

/// The remembered ids.
pub(crate) struct Relayed {
    hasher: RandomState,
    capacity: usize,
    memory: Mutex<Memory>,
    /// How many ids are remembered, kept beside the memory so that asking costs no lock.
    len: AtomicUsize,
}

#[derive(Default)]
struct Memory {
    ids: HashMap<RelayKey, Box<str>>,
    /// Keys in the order they were first remembered, oldest first.
    order: VecDeque<RelayKey>,
}

impl Relayed {
    /// A memory of at most `capacity` ids.
    pub(crate) fn new(capacity: usize) -> Relayed {
        Relayed { hasher: RandomState::new(), capacity, memory: Mutex::default(), len: AtomicUsize::new(0) }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of a call.
    pub(crate) fn key(
        &self,
        consumer: &str,
        capability: &str,
        registration: &str,
        input_hash: &Fingerprint,
    ) -> RelayKey {
        let mut h = self.hasher.build_hasher();
        for part in [consumer, capability, registration] {
            h.write(part.as_bytes());
            h.write_u8(0xff);
        }
        h.write(input_hash.as_bytes());
        RelayKey(h.finish())
    }

    /// The id relayed for this call, if any.
    pub(crate) fn get(&self, key: RelayKey) -> Option<String> {
        self.memory().ids.get(&key).map(|id| id.to_string())
    }

    /// Remembers the id relayed for this call (replacing an earlier one).
    pub(crate) fn remember(&self, key: RelayKey, id: &str) {
        if self.capacity == 0 || id.len() > MAX_ID_BYTES {
            return self.forget(key);
        }
        let mut memory = self.memory();
        if memory.ids.insert(key, id.into()).is_none() {
            memory.order.push_back(key);
        }
        while memory.ids.len() > self.capacity {
            let Some(oldest) = memory.order.pop_front() else { break };
            memory.ids.remove(&oldest);
        }
        self.len.store(memory.ids.len(), Ordering::Relaxed);
    }

    /// Forgets the id relayed for this call.
    pub(crate) fn forget(&self, key: RelayKey) {
        let mut memory = self.memory();
        if memory.ids.remove(&key).is_some() {
            memory.order.retain(|k| *k != key);
            self.len.store(memory.ids.len(), Ordering::Relaxed);
        }
    }

    /// Whether no id is remembered (read without the lock: a call racing a `remember` may miss
    /// it, as it would had it come a moment earlier).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Relaxed) == 0
    }

    /// How many ids are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.memory().ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_canonical_and_bounded_memory() {
        let relayed = Relayed::new(2);
        let key = |consumer, capability, registration, input: serde_json::Value| {
            relayed.key(consumer, capability, registration, &Fingerprint::of(&input))
        };
        let a = key("c", "t.x", "r1", json!({"a": 1, "b": 2}));
        assert_eq!(a, key("c", "t.x", "r1", json!({"b": 2, "a": 1})), "key order does not matter");
        assert_ne!(a, key("d", "t.x", "r1", json!({"a": 1, "b": 2})), "another consumer");
        assert_ne!(a, key("c", "t.x", "r2", json!({"a": 1, "b": 2})), "another registration");
        assert_ne!(key("c", "ab", "r", json!({})), key("ca", "b", "r", json!({})));
        let (b, c) = (key("c", "t.x", "r1", json!(1)), key("c", "t.x", "r1", json!(2)));
        relayed.remember(a, "c-a");
        relayed.remember(b, "c-b");
        relayed.remember(a, "c-a2");
        relayed.remember(c, "c-c");
        assert_eq!(relayed.len(), 2);
        assert!(!relayed.is_empty());
        assert_eq!(relayed.get(a), None, "the oldest is forgotten first");
        assert_eq!(relayed.get(c).as_deref(), Some("c-c"));
        relayed.forget(c);
        assert_eq!(relayed.get(c), None);
        relayed.forget(b);
        assert!(relayed.is_empty(), "the count follows the memory");
        relayed.remember(c, &"x".repeat(MAX_ID_BYTES + 1));
        assert_eq!(relayed.get(c), None, "an overlong id is not remembered");
    }
}
