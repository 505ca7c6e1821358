//! Every suite of the store kit on the SQLite stores: each suite on a store file of its own.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::inbox::InboxStore;
use agent_surface_policy::{
    AuditSink, ConfirmationStore, IdempotencyStore, RateBudgets, RateLimiter, SystemClock, TaskStore,
};
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use agent_surface_testing::stores::{Backend, Leases};

use crate::support::Folder;

/// The stores of one file, and the folder it lives in (removed when the last handle goes; the
/// stores are dropped first).
struct Sqlite {
    stores: SqliteStores,
    _folder: Arc<Folder>,
}

impl Backend for Sqlite {
    /// One process owns the file (it is locked), so a lease holds until settled; a restart lapses
    /// them all (`restart.rs`, `crash.rs`).
    const LEASES: Leases = Leases::HoldUntilSettled;

    async fn open(name: &str) -> Option<Sqlite> {
        let folder = Folder::new(name);
        let stores = SqliteStores::open(folder.file(), SqliteConfig::default()).await.expect("the store file opens");
        Some(Sqlite { stores, _folder: Arc::new(folder) })
    }

    async fn open_with_lease(name: &str, _lease: Duration) -> Option<Sqlite> {
        Sqlite::open(name).await
    }

    /// The file is locked to one process: a second replica is a second handle on the same stores.
    async fn replica(&self) -> Sqlite {
        Sqlite { stores: self.stores.clone(), _folder: self._folder.clone() }
    }

    fn idempotency(&self) -> Arc<dyn IdempotencyStore> {
        Arc::new(self.stores.idempotency())
    }

    fn confirmations(&self) -> Arc<dyn ConfirmationStore> {
        Arc::new(self.stores.confirmations())
    }

    fn tasks(&self) -> Arc<dyn TaskStore> {
        Arc::new(self.stores.tasks())
    }

    fn audit(&self) -> Arc<dyn AuditSink> {
        Arc::new(self.stores.audit())
    }

    fn rate_limiter(&self, budgets: RateBudgets) -> Arc<dyn RateLimiter> {
        Arc::new(self.stores.rate_limiter(budgets, Arc::new(SystemClock)))
    }

    fn inbox(&self) -> Arc<dyn InboxStore> {
        Arc::new(self.stores.inbox())
    }
}

agent_surface_testing::store_suites!(Sqlite);
