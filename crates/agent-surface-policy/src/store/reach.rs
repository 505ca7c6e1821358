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
/// assert!(!Reach::Durable.is_shared() && Reach::Durable.outlives_the_process());
/// assert!(!Reach::Process.outlives_the_process());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reach {
    /// This process only (the memory stores): replicas do not see each other's records, and a
    /// restart forgets them.
    Process,
    /// This process, and the processes after it that open the same file, one at a time (the
    /// embedded durable store, `agent-surface-sqlite`): the records outlive a restart, but
    /// replicas running side by side do not share them. Registration ids do not outlive a
    /// restart, so the confirmation engine binds evidence to the instance, as for a shared store.
    Durable,
    /// Every process that connects to the same backend (Redis, a database server).
    Shared,
}

impl Reach {
    /// Whether other processes running at the same time see the same state.
    pub fn is_shared(self) -> bool {
        matches!(self, Reach::Shared)
    }

    /// Whether the state outlives the process that wrote it (a durable or a shared store).
    pub fn outlives_the_process(self) -> bool {
        matches!(self, Reach::Durable | Reach::Shared)
    }

    /// A short name for operator messages: `process`, `durable` or `shared`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Process => "process",
            Reach::Durable => "durable",
            Reach::Shared => "shared",
        }
    }
}
