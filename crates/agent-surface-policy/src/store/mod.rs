//! What every store trait shares: [`StoreError`], why a store could not answer; [`StoreUsage`],
//! what it holds for the operator's gauges; [`Reach`], who shares what it holds; and [`Stores`],
//! one backend's stores in one bundle.
//!
//! The store traits — [`IdempotencyStore`](crate::IdempotencyStore),
//! [`ConfirmationStore`](crate::ConfirmationStore), [`TaskStore`](crate::TaskStore),
//! [`InboxStore`](crate::inbox::InboxStore), the [`RateLimiter`](crate::RateLimiter) and the
//! [`AuditSink`](crate::AuditSink) — each document their own rules; these hold for all of them:
//!
//! - **Time is given.** Operations take `now` (the registry's clock) as an argument instead of
//!   reading a clock, so a store never disagrees with the engines about time. A shared backend
//!   that must measure leases or budgets on a clock of its own (Redis', the database's) says so.
//! - **Sharing is declared.** A store whose sharing changes a guarantee says who shares what it
//!   holds ([`Reach`]); the confirmation engine's defaults and the registry's wiring
//!   report follow from it.
//! - **A check and the change it guards are one step** (one script, one transaction, one lock), so
//!   that racing callers and replicas see single-use steps happen once.
//! - **Failure is a [`StoreError`]**: the engines fail closed on it, the agent receives an
//!   agent-safe error, and the text goes to the operator channel, redacted. The audit sink has its
//!   own [`AuditError`](crate::AuditError); a shared rate limiter that cannot reach its backend
//!   limits the call.
//! - **Usage is optional.** A store that can count cheaply reports [`StoreUsage`]; the default is
//!   `None`.
//!
//! The store kit (`agent_surface_testing::stores`) holds one suite per trait, each in a file
//! named as the backend crates' module for that trait (`idempotency.rs`, `confirmation.rs`,
//! `task.rs`, `inbox.rs`, `rate.rs`, `audit.rs`); a backend passes every suite of the traits it
//! implements.

mod bundle;
mod reach;

pub use bundle::Stores;
pub use reach::Reach;

/// Why a store could not answer. The registry maps it to an agent-safe error; the text is for the
/// operator channel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store is at its capacity and cannot take this record: every record an idempotency
    /// store holds is in flight, or a store's record or byte budget (`capacity`, in the unit of
    /// that budget) has no room the store may make.
    #[error("the store is full (capacity {capacity})")]
    Full {
        /// The store's capacity.
        capacity: usize,
    },
    /// The consumer holds its whole quota of records, all of them in flight.
    #[error("this consumer's idempotency quota is full ({quota} records in flight)")]
    ConsumerFull {
        /// The per-consumer quota.
        quota: usize,
    },
    /// The store could not carry the operation out: its backing service failed (for shared
    /// stores), or the record it was given cannot be kept (an id already taken).
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// The record is no longer held by the lease presented: it lapsed and a later admission took
    /// the record over, or it was settled already. Nothing was changed.
    #[error("the lease on this record was lost; nothing was recorded")]
    LeaseLost,
    /// The admission's [`Attempt`](crate::idempotency::Attempt) was cancelled before the store carried it out: nothing was
    /// admitted (see [`IdempotencyStore::cancel`](crate::IdempotencyStore::cancel)).
    #[error("this admission attempt was cancelled; nothing was admitted")]
    AttemptCancelled,
}

/// What a store holds right now, for the operator's gauges (`Registry::record_store_usage`
/// in `agent-surface-registry`); a store reports what it can count cheaply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreUsage {
    /// Records held (in flight, stored, or kept past their use within their retention).
    pub entries: usize,
    /// Bytes counted against the store's byte budget, when it keeps one.
    pub bytes: Option<usize>,
    /// Confirmations waiting for a person's decision (confirmation stores), when counted.
    pub pending: Option<usize>,
}

impl StoreUsage {
    /// `entries` records, nothing else counted.
    pub fn entries(entries: usize) -> StoreUsage {
        StoreUsage { entries, bytes: None, pending: None }
    }

    /// The same usage with a byte count.
    pub fn with_bytes(self, bytes: usize) -> StoreUsage {
        StoreUsage { bytes: Some(bytes), ..self }
    }

    /// The same usage with a count of pending confirmations.
    pub fn with_pending(self, pending: usize) -> StoreUsage {
        StoreUsage { pending: Some(pending), ..self }
    }
}
