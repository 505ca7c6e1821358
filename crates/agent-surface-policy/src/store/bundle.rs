//! [`Stores`]: the state a service keeps, in one bundle — in memory ([`Stores::memory`]) or on a
//! shared backend (`agent_surface_redis::RedisStores::bundle`) — so that a service is wired to one
//! backend throughout, never half on one and half on another.

use std::fmt;
use std::sync::Arc;

use crate::clock::Clock;
use crate::confirmation::{ConfirmationStore, MemoryConfirmationStore};
use crate::hooks::RateLimiter;
use crate::idempotency::{IdempotencyStore, MemoryIdempotencyStore};
use crate::inbox::{InboxStore, MemoryInboxStore};
use crate::rate::{MemoryRateLimiter, RateBudgets, RateLimitConfig};
use crate::task::{MemoryTaskStore, TaskStore};

/// Makes the rate limiter of a bundle for some budgets, on the service's clock.
type LimiterFactory = dyn Fn(RateBudgets, Arc<dyn Clock>) -> Arc<dyn RateLimiter> + Send + Sync;

/// The stores of one service, from one backend: idempotency records, confirmations, tasks, the
/// approval inbox's sessions, and the rate limiter for the service's budgets.
///
/// ```
/// use agent_surface_policy::{IdempotencyStore, RateBudgets, Reach, Stores, SystemClock};
/// use std::sync::Arc;
///
/// let stores = Stores::memory();
/// assert_eq!(stores.idempotency.reach(), Reach::Process);
/// let limiter = stores.rate_limiter(RateBudgets::default(), Arc::new(SystemClock));
/// assert_eq!(limiter.reach(), Reach::Process);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Stores {
    /// Idempotency records (invocation ids and natural keys).
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// Pending, approved and used confirmations.
    pub confirmations: Arc<dyn ConfirmationStore>,
    /// Calls answered as tasks (the MCP adapter's).
    pub tasks: Arc<dyn TaskStore>,
    /// The approval inbox's sessions, used form nonces and form-signing key (in memory unless
    /// the backend gives its own: see [`with_inbox`](Stores::with_inbox)).
    pub inbox: Arc<dyn InboxStore>,
    limiter: Arc<LimiterFactory>,
}

impl Stores {
    /// Everything in this process's memory, bounded (the memory stores' defaults): for tests, the
    /// scripted demo and a single process that may lose its state on restart.
    pub fn memory() -> Stores {
        Stores {
            idempotency: Arc::new(MemoryIdempotencyStore::default()),
            confirmations: Arc::new(MemoryConfirmationStore::default()),
            tasks: Arc::new(MemoryTaskStore::default()),
            inbox: Arc::new(MemoryInboxStore::default()),
            limiter: Arc::new(|budgets: RateBudgets, clock: Arc<dyn Clock>| -> Arc<dyn RateLimiter> {
                Arc::new(MemoryRateLimiter::new(RateLimitConfig::with_budgets(budgets, clock)))
            }),
        }
    }

    /// A bundle of these stores; `limiter` makes the rate limiter for the service's budgets on
    /// its clock (a backend's own limiter, sharing its connection). The inbox's store is in
    /// memory until [`with_inbox`](Stores::with_inbox) gives the backend's.
    pub fn new(
        idempotency: Arc<dyn IdempotencyStore>,
        confirmations: Arc<dyn ConfirmationStore>,
        tasks: Arc<dyn TaskStore>,
        limiter: impl Fn(RateBudgets, Arc<dyn Clock>) -> Arc<dyn RateLimiter> + Send + Sync + 'static,
    ) -> Stores {
        Stores {
            idempotency,
            confirmations,
            tasks,
            inbox: Arc::new(MemoryInboxStore::default()),
            limiter: Arc::new(limiter),
        }
    }

    /// These stores, with `inbox` keeping the approval inbox's sessions (the backend's own, so
    /// that replicas share them).
    pub fn with_inbox(mut self, inbox: Arc<dyn InboxStore>) -> Stores {
        self.inbox = inbox;
        self
    }

    /// The rate limiter of this backend for `budgets`, on `clock`.
    pub fn rate_limiter(&self, budgets: RateBudgets, clock: Arc<dyn Clock>) -> Arc<dyn RateLimiter> {
        (self.limiter)(budgets, clock)
    }
}

impl fmt::Debug for Stores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stores")
            .field("idempotency", &self.idempotency)
            .field("confirmations", &self.confirmations)
            .field("inbox", &self.inbox)
            .finish_non_exhaustive()
    }
}
