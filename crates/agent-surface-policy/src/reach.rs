//! [`Reach`]: who shares what a store holds, so that the registry can tell wiring whose
//! guarantees hold across replicas from wiring whose do not.

/// Who shares the state a store (or a limiter) holds.
///
/// Every store trait asks for it ([`ConfirmationStore::reach`](crate::ConfirmationStore::reach),
/// [`IdempotencyStore::reach`](crate::IdempotencyStore::reach),
/// [`RateLimiter::reach`](crate::RateLimiter::reach)); the defaults that depend on it follow from
/// it (the confirmation engine's [`TargetBinding::Auto`](crate::TargetBinding::Auto)), and the
/// registry reports wiring that mixes the two at startup (`Registry::wiring_warnings`).
///
/// ```
/// use agent_surface_policy::{ConfirmationStore, MemoryConfirmationStore, Reach};
/// assert_eq!(MemoryConfirmationStore::default().reach(), Reach::Process);
/// assert!(!Reach::Process.is_shared() && Reach::Shared.is_shared());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive] // a durable store of one machine may come to need its own answer
pub enum Reach {
    /// This process only (the memory stores): replicas do not see each other's records.
    Process,
    /// Every process that connects to the same backend (Redis, a database server).
    Shared,
}

impl Reach {
    /// Whether other processes see the same state.
    pub fn is_shared(self) -> bool {
        matches!(self, Reach::Shared)
    }

    /// A short name for operator messages: `process` or `shared`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Process => "process",
            Reach::Shared => "shared",
        }
    }
}
