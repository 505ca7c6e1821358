//! The store kit against the memory stores of `agent-surface-policy` (every suite, through
//! `store_suites!`), the JSON-lines audit sink, and a suite that fails.

use agent_surface_core::Timestamp;
use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Lease, Settlement};
use agent_surface_policy::{MemoryRateLimiter, Quota, RateLimitConfig, StoreError};
use agent_surface_testing::stores;
use futures_util::future::BoxFuture;

/// Every suite of the kit on the memory stores, written by the macro the backends use.
mod memory {
    use std::sync::Arc;
    use std::time::Duration;

    use agent_surface_policy::inbox::{InboxStore, MemoryInboxStore};
    use agent_surface_policy::{
        AuditSink, ConfirmationStore, IdempotencyStore, MemoryAuditSink, MemoryConfirmationStore,
        MemoryIdempotencyStore, MemoryRateLimiter, MemoryTaskStore, RateBudgets, RateLimitConfig, RateLimiter,
        SystemClock, TaskStore,
    };
    use agent_surface_testing::stores::{Backend, Leases};

    /// One set of memory stores; a replica shares them (one process).
    #[derive(Clone, Default)]
    struct Memory {
        idempotency: Arc<MemoryIdempotencyStore>,
        confirmations: Arc<MemoryConfirmationStore>,
        tasks: Arc<MemoryTaskStore>,
        audit: Arc<MemoryAuditSink>,
        inbox: Arc<MemoryInboxStore>,
    }

    impl Backend for Memory {
        const LEASES: Leases = Leases::HoldUntilSettled;

        async fn open(_name: &str) -> Option<Memory> {
            Some(Memory::default())
        }

        async fn open_with_lease(_name: &str, _lease: Duration) -> Option<Memory> {
            Some(Memory::default())
        }

        async fn replica(&self) -> Memory {
            self.clone()
        }

        fn idempotency(&self) -> Arc<dyn IdempotencyStore> {
            self.idempotency.clone()
        }

        fn confirmations(&self) -> Arc<dyn ConfirmationStore> {
            self.confirmations.clone()
        }

        fn tasks(&self) -> Arc<dyn TaskStore> {
            self.tasks.clone()
        }

        fn audit(&self) -> Arc<dyn AuditSink> {
            self.audit.clone()
        }

        fn rate_limiter(&self, budgets: RateBudgets) -> Arc<dyn RateLimiter> {
            Arc::new(MemoryRateLimiter::new(RateLimitConfig::with_budgets(budgets, Arc::new(SystemClock))))
        }

        fn inbox(&self) -> Arc<dyn InboxStore> {
            self.inbox.clone()
        }
    }

    agent_surface_testing::store_suites!(Memory);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_lines_audit_sink_passes_the_kit() {
    let dir = std::env::temp_dir().join(format!("agent-surface-kit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&path);
    let sink = agent_surface_policy::JsonLinesAuditSink::open(&path).unwrap();
    stores::check_audit_sink(&sink, "kit-").await;
    // Opened again, the file reads back the same.
    let again = agent_surface_policy::JsonLinesAuditSink::open(&path).unwrap();
    use agent_surface_policy::AuditSink;
    assert_eq!(again.recent(100).await.unwrap(), sink.recent(100).await.unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The suite can fail: a limiter whose budget covers all of a consumer's calls (not one
/// capability) limits `orders.list` too, and the kit says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "a quota of one capability does not limit another")]
async fn the_per_consumer_quota_kit_refuses_a_budget_over_all_capabilities() {
    let quota = Quota::per_minute(std::num::NonZeroU32::new(5).unwrap());
    let limiter = MemoryRateLimiter::new(RateLimitConfig { per_consumer: Some(quota), ..Default::default() });
    stores::check_consumer_quotas(&limiter, quota, "kit-").await;
}

/// A memory idempotency store whose leases claim to lapse (they ask for renewal).
#[derive(Debug, Default)]
struct Lapsing(agent_surface_policy::MemoryIdempotencyStore);

impl agent_surface_policy::IdempotencyStore for Lapsing {
    fn reach(&self) -> agent_surface_policy::Reach {
        self.0.reach()
    }

    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        Box::pin(async move {
            match self.0.admit(key, fingerprint, attempt, now).await? {
                Admission::Leader(lease) => {
                    Ok(Admission::Leader(Lease { renew_every: Some(std::time::Duration::from_secs(1)), ..lease }))
                }
                other => Ok(other),
            }
        })
    }

    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.cancel(key, attempt, now)
    }

    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.settle(key, fingerprint, lease, settlement, now)
    }

    fn start<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.start(key, lease, now)
    }

    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.renew(key, lease, now)
    }
}

/// The suite of leases that hold until settled can fail: a store whose leases ask for renewal
/// (so they lapse) is told to run the lease suite instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "a lease that holds until settled asks for no renewal")]
async fn the_held_lease_check_refuses_leases_that_ask_for_renewal() {
    stores::check_idempotency_holds_until_settled(&Lapsing::default(), "kit-").await;
}
