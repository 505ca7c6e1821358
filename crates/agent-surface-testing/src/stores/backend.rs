//! Every suite of the store kit on one backend, from one description of how to open its stores:
//! the [`Backend`] trait, the suites as generic functions ([`suites`]), and
//! [`store_suites!`](crate::store_suites), which writes one test per suite.
//!
//! A backend crate's `tests/it/kit.rs` is then one `impl Backend` and one macro call, and a suite
//! added to the kit reaches every backend without editing any of them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::inbox::InboxStore;
use agent_surface_policy::{AuditSink, ConfirmationStore, IdempotencyStore, RateBudgets, RateLimiter, TaskStore};

/// How a backend's idempotency leases end when nobody renews them.
///
/// Open to new variants (`#[non_exhaustive]`), as the kit's other enums: backends name a variant,
/// only the kit matches on it, so another kind of lease would not break them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leases {
    /// They lapse after their duration unless renewed (a store shared by replicas, any of which
    /// may die holding one): [`Backend::open_with_lease`] sets the duration, and
    /// [`check_idempotency_leases`](super::check_idempotency_leases) runs.
    Lapse,
    /// They hold until settled (one process owns the store, and its restart lapses them all):
    /// [`check_idempotency_holds_until_settled`](super::check_idempotency_holds_until_settled)
    /// runs.
    HoldUntilSettled,
}

/// A store backend under the kit: how to open a fresh set of its stores, and its stores.
///
/// Implement it on a type of the backend's tests (a newtype over the backend's stores, which
/// may also hold what the stores live in, like a temporary folder), then call
/// [`store_suites!`](crate::store_suites) with it. The suites need every store trait; the
/// compiler names a missing method.
pub trait Backend: Sized + Send + Sync + 'static {
    /// How this backend's idempotency leases end; decides which lease suite runs.
    const LEASES: Leases;

    /// A fresh set of stores no other test sees (a prefix, a schema or a file of their own),
    /// `name` telling them apart; `None` when the service the backend needs is missing and the
    /// test is to be skipped (the backend's helper fails instead under `CI=true`, see
    /// [`services`](crate::services)).
    fn open(name: &str) -> impl Future<Output = Option<Self>> + Send;

    /// As [`open`](Backend::open), with idempotency leases that lapse after `lease` unless
    /// renewed. Called only when [`LEASES`](Backend::LEASES) is [`Leases::Lapse`]; a backend
    /// whose leases hold until settled may return [`open`](Backend::open)'s stores.
    fn open_with_lease(name: &str, lease: Duration) -> impl Future<Output = Option<Self>> + Send;

    /// Another handle on the same stores, as a second replica holds (another connection, pool
    /// or handle on the same data).
    fn replica(&self) -> impl Future<Output = Self> + Send;

    /// The idempotency store.
    fn idempotency(&self) -> Arc<dyn IdempotencyStore>;

    /// The confirmation store.
    fn confirmations(&self) -> Arc<dyn ConfirmationStore>;

    /// The task store.
    fn tasks(&self) -> Arc<dyn TaskStore>;

    /// The audit sink.
    fn audit(&self) -> Arc<dyn AuditSink>;

    /// A rate limiter keeping `budgets` (on the system clock, as in production).
    fn rate_limiter(&self, budgets: RateBudgets) -> Arc<dyn RateLimiter>;

    /// The approval inbox's store.
    fn inbox(&self) -> Arc<dyn InboxStore>;
}

/// Each suite of the kit as a generic function of a [`Backend`]: it opens fresh stores (returning
/// at once when [`Backend::open`] says the service is missing) and runs the suite on them.
/// [`store_suites!`](crate::store_suites) writes one test per function; each can also be called
/// on its own.
pub mod suites {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use agent_surface_policy::{Quota, RateBudgets};

    use super::{Backend, Leases};
    use crate::stores;

    /// The prefix of every record the suites create.
    const PREFIX: &str = "kit-";

    /// [`check_idempotency_store`](stores::check_idempotency_store) (with cancelled attempts).
    pub async fn idempotency_store<B: Backend>() {
        let Some(b) = B::open("idem-kit").await else { return };
        stores::check_idempotency_store(&*b.idempotency(), PREFIX).await;
    }

    /// The lease suite [`Backend::LEASES`] calls for: with a 300 ms lease, renewal holds it, a
    /// lapsed one is taken over and the old leader's late settlement is fenced off; or a lease
    /// that holds until settled.
    pub async fn idempotency_leases<B: Backend>() {
        match B::LEASES {
            Leases::Lapse => {
                let lease = Duration::from_millis(300);
                let Some(b) = B::open_with_lease("idem-lease", lease).await else { return };
                stores::check_idempotency_leases(&*b.idempotency(), lease, PREFIX).await;
            }
            Leases::HoldUntilSettled => {
                let Some(b) = B::open("idem-held").await else { return };
                stores::check_idempotency_holds_until_settled(&*b.idempotency(), PREFIX).await;
            }
        }
    }

    /// [`check_confirmation_store`](stores::check_confirmation_store).
    pub async fn confirmation_store<B: Backend>() {
        let Some(b) = B::open("conf-kit").await else { return };
        stores::check_confirmation_store(&*b.confirmations(), PREFIX).await;
    }

    /// [`check_replicas_share_one_approval`](stores::check_replicas_share_one_approval).
    pub async fn replicas_share_one_approval<B: Backend>() {
        let Some(b) = B::open("one-approval").await else { return };
        stores::check_replicas_share_one_approval(b.confirmations()).await;
    }

    /// [`check_replicas_share_relayed_confirmations`](stores::check_replicas_share_relayed_confirmations).
    pub async fn replicas_share_relayed_confirmations<B: Backend>() {
        let Some(b) = B::open("relayed").await else { return };
        stores::check_replicas_share_relayed_confirmations(b.confirmations()).await;
    }

    /// [`check_racing_repeats_open_one_confirmation`](stores::check_racing_repeats_open_one_confirmation).
    pub async fn racing_repeats_open_one_confirmation<B: Backend>() {
        let Some(b) = B::open("racing-repeats").await else { return };
        stores::check_racing_repeats_open_one_confirmation(b.confirmations()).await;
    }

    /// [`check_replicas_record_one_expiry`](stores::check_replicas_record_one_expiry).
    pub async fn replicas_record_one_expiry<B: Backend>() {
        let Some(b) = B::open("expiry").await else { return };
        stores::check_replicas_record_one_expiry(b.confirmations()).await;
    }

    /// [`check_replicas_sweep_one_expiry`](stores::check_replicas_sweep_one_expiry).
    pub async fn replicas_sweep_one_expiry<B: Backend>() {
        let Some(b) = B::open("sweep").await else { return };
        stores::check_replicas_sweep_one_expiry(b.confirmations()).await;
    }

    /// [`check_task_store`](stores::check_task_store) (with task leases).
    pub async fn task_store<B: Backend>() {
        let Some(b) = B::open("task-kit").await else { return };
        stores::check_task_store(&*b.tasks(), PREFIX).await;
    }

    /// [`check_audit_sink`](stores::check_audit_sink).
    pub async fn audit_sink<B: Backend>() {
        let Some(b) = B::open("audit-kit").await else { return };
        stores::check_audit_sink(&*b.audit(), PREFIX).await;
    }

    /// [`check_rate_limiter`](stores::check_rate_limiter), five calls a minute per consumer.
    pub async fn rate_limiter<B: Backend>() {
        let Some(b) = B::open("rate-kit").await else { return };
        let quota = Quota::per_minute(NonZeroU32::new(5).expect("positive"));
        let limiter = b.rate_limiter(RateBudgets { per_consumer: Some(quota), ..RateBudgets::default() });
        stores::check_rate_limiter(&*limiter, quota, PREFIX).await;
    }

    /// [`check_consumer_quotas`](stores::check_consumer_quotas), four calls a minute.
    pub async fn consumer_quotas<B: Backend>() {
        let Some(b) = B::open("quota-kit").await else { return };
        let quota = Quota::per_minute(NonZeroU32::new(4).expect("positive"));
        let limiter =
            b.rate_limiter(RateBudgets { consumer_quotas: stores::consumer_quotas(quota), ..RateBudgets::default() });
        stores::check_consumer_quotas(&*limiter, quota, PREFIX).await;
    }

    /// [`check_inbox_store`](stores::check_inbox_store).
    pub async fn inbox_store<B: Backend>() {
        let Some(b) = B::open("inbox-kit").await else { return };
        stores::check_inbox_store(&*b.inbox(), PREFIX).await;
    }

    /// [`check_inbox_replicas`](stores::check_inbox_replicas), on the stores and a
    /// [`replica`](Backend::replica) of them.
    pub async fn inbox_replicas<B: Backend>() {
        let Some(a) = B::open("inbox-replicas").await else { return };
        let b = a.replica().await;
        stores::check_inbox_replicas(a.inbox(), b.inbox(), PREFIX).await;
    }
}

/// One test per suite of the store kit on a [`Backend`](crate::stores::Backend): expands, where
/// it is called (a test module of its own, such as `tests/it/kit.rs`), to one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` function per function of
/// [`stores::suites`](crate::stores::suites), named after it. The calling crate needs `tokio`
/// with its `macros` and `rt-multi-thread` features among its dev-dependencies.
///
/// The memory stores of `agent-surface-policy` as a backend (the kit's own tests run them so;
/// each backend crate's `tests/it/kit.rs` does the same with its stores):
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use agent_surface_policy::inbox::{InboxStore, MemoryInboxStore};
/// use agent_surface_policy::{
///     AuditSink, ConfirmationStore, IdempotencyStore, MemoryAuditSink, MemoryConfirmationStore,
///     MemoryIdempotencyStore, MemoryRateLimiter, MemoryTaskStore, RateBudgets, RateLimitConfig,
///     RateLimiter, SystemClock, TaskStore,
/// };
/// use agent_surface_testing::stores::{Backend, Leases};
///
/// #[derive(Clone, Default)]
/// struct Memory {
///     idempotency: Arc<MemoryIdempotencyStore>,
///     confirmations: Arc<MemoryConfirmationStore>,
///     tasks: Arc<MemoryTaskStore>,
///     audit: Arc<MemoryAuditSink>,
///     inbox: Arc<MemoryInboxStore>,
/// }
///
/// impl Backend for Memory {
///     const LEASES: Leases = Leases::HoldUntilSettled;
///     async fn open(_name: &str) -> Option<Memory> {
///         Some(Memory::default())
///     }
///     async fn open_with_lease(name: &str, _lease: Duration) -> Option<Memory> {
///         Memory::open(name).await
///     }
///     async fn replica(&self) -> Memory {
///         self.clone()
///     }
///     fn idempotency(&self) -> Arc<dyn IdempotencyStore> {
///         self.idempotency.clone()
///     }
///     fn confirmations(&self) -> Arc<dyn ConfirmationStore> {
///         self.confirmations.clone()
///     }
///     fn tasks(&self) -> Arc<dyn TaskStore> {
///         self.tasks.clone()
///     }
///     fn audit(&self) -> Arc<dyn AuditSink> {
///         self.audit.clone()
///     }
///     fn rate_limiter(&self, budgets: RateBudgets) -> Arc<dyn RateLimiter> {
///         Arc::new(MemoryRateLimiter::new(RateLimitConfig::with_budgets(budgets, Arc::new(SystemClock))))
///     }
///     fn inbox(&self) -> Arc<dyn InboxStore> {
///         self.inbox.clone()
///     }
/// }
///
/// agent_surface_testing::store_suites!(Memory);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_suites {
    ($backend:ty) => {
        $crate::store_suites!(@each $backend;
            idempotency_store, idempotency_leases, confirmation_store, replicas_share_one_approval,
            replicas_share_relayed_confirmations, racing_repeats_open_one_confirmation,
            replicas_record_one_expiry, replicas_sweep_one_expiry, task_store, audit_sink, rate_limiter,
            consumer_quotas, inbox_store, inbox_replicas);
    };
    (@each $backend:ty; $($suite:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $suite() {
                $crate::stores::suites::$suite::<$backend>().await;
            }
        )+
    };
}

#[cfg(test)]
mod tests {
    /// The macro's list of suites is the list of functions of [`suites`](super::suites): a suite
    /// added there and not to the macro would reach no backend.
    #[test]
    fn the_macro_runs_every_suite_once() {
        let source = include_str!("backend.rs");
        let (functions, rest) = source.split_once("macro_rules! store_suites").expect("the macro");
        let mut defined: Vec<&str> =
            functions.split("pub async fn ").skip(1).map(|f| f.split_once('<').expect("a generic suite").0).collect();
        let listed = rest.split_once("@each $backend;").expect("the list").1.split_once(");").expect("its end").0;
        let mut listed: Vec<&str> = listed.split(',').map(str::trim).collect();
        assert_eq!(defined.len(), 14, "{defined:?}");
        defined.sort_unstable();
        listed.sort_unstable();
        assert_eq!(listed, defined);
    }
}
