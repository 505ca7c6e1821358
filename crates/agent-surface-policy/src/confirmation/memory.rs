//! [`MemoryConfirmationStore`]: the bounded in-process [`ConfirmationStore`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_surface_core::Timestamp;
use futures_util::future::BoxFuture;

use super::quorum::{ApprovalVerdict, SlotSet};
use super::record::{ConfirmationBinding, ConfirmationRecord, ConfirmationState, RelayKey};
use super::store::{ConfirmationStore, Consumed, Decided, Inserted, Rejection};
use crate::store::StoreError;

/// The configuration of a [`MemoryConfirmationStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryConfirmationStoreConfig {
    /// The most records held at once. When full, the oldest record that is not approved is
    /// dropped (among the oldest 64; if all of those are approved, the oldest), so a flood of
    /// new requests drops other requests before it drops evidence a person approved. A dropped
    /// record's evidence is unknown and rejected, so eviction can only refuse a call, never let
    /// one run twice.
    pub capacity: usize,
    /// The most records one consumer key holds at once; at it, the consumer's own oldest record
    /// is dropped, never another consumer's.
    pub per_consumer: usize,
    /// How long a record is kept after it expires, so that a late retry is told `consumed` or
    /// `denied` rather than `expired`.
    pub retention: Duration,
}

impl Default for MemoryConfirmationStoreConfig {
    /// 10 000 records, 1 000 per consumer key, kept one hour past their expiry.
    fn default() -> MemoryConfirmationStoreConfig {
        MemoryConfirmationStoreConfig { capacity: 10_000, per_consumer: 1_000, retention: Duration::from_secs(3600) }
    }
}

/// A [`ConfirmationStore`] in this process's memory: bounded, expiring, every operation one
/// short critical section. Records do not survive a restart; evidence issued before a restart is
/// then unknown and rejected (as expired), which never lets a call run without a fresh approval.
pub struct MemoryConfirmationStore {
    config: MemoryConfirmationStoreConfig,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<String, ConfirmationRecord>,
    /// Ids in insertion order with the instant each record is gone (`expires_at + retention`),
    /// for sweeping and eviction. Ids of records already dropped are skipped.
    order: VecDeque<(Timestamp, String)>,
    /// Per consumer key, the ids of its records in insertion order.
    by_consumer: HashMap<String, VecDeque<String>>,
    /// Ids of held records whose expiry was claimed ([`ConfirmationStore::claim_expiry`]).
    /// `Some(until)`: claimed until then; `None`: the event is recorded
    /// ([`ConfirmationStore::expiry_recorded`]).
    expiry_claimed: HashMap<String, Option<Timestamp>>,
    /// The consumption token of each consumed record that may still be reinstated
    /// ([`ConfirmationStore::reinstate`]).
    tokens: HashMap<String, String>,
    /// The relayed confirmations ([`ConfirmationStore::insert_relayed`],
    /// [`ConfirmationStore::remember_relayed`]): key → id of a held
    /// record, and back (one key per record), so that dropping a record drops its key: the
    /// memory never outgrows the records.
    relays: HashMap<RelayKey, String>,
    relay_of: HashMap<String, RelayKey>,
}

/// How many of the oldest records a global eviction looks through for one that is not approved.
const EVICTION_SCAN: usize = 64;

impl Inner {
    /// Drops the record `id` (if held) and its consumer's entry for it.
    fn drop_record(&mut self, id: &str, why: &'static str) {
        let Some(record) = self.records.remove(id) else { return };
        self.expiry_claimed.remove(id);
        self.tokens.remove(id);
        self.unrelay(id);
        let consumer = &record.binding.consumer_key;
        if let Some(ids) = self.by_consumer.get_mut(consumer) {
            if let Some(at) = ids.iter().position(|i| i == id) {
                ids.remove(at);
            }
            if ids.is_empty() {
                self.by_consumer.remove(consumer);
            }
        }
        tracing::debug!(
            target: "agent_surface::confirmation",
            confirmation_id = %record.id,
            state = record.state.as_str(),
            why,
            "confirmation dropped"
        );
    }

    /// Makes `key` hold the held record `id` (dropping the key `id` had, and the tie of the
    /// record `key` held).
    fn relay(&mut self, key: &RelayKey, id: &str) {
        self.unrelay(id);
        if let Some(previous) = self.relays.insert(*key, id.to_string()) {
            self.relay_of.remove(&previous);
        }
        self.relay_of.insert(id.to_string(), *key);
    }

    /// Forgets the relay key of the record `id`, if it has one.
    fn unrelay(&mut self, id: &str) {
        if let Some(key) = self.relay_of.remove(id)
            && self.relays.get(&key).is_some_and(|held| held == id)
        {
            self.relays.remove(&key);
        }
    }

    /// Drops the oldest record that is not approved among the oldest [`EVICTION_SCAN`], or the
    /// oldest record; false when there was none to drop.
    fn evict_one(&mut self) -> bool {
        let mut oldest_live = None;
        let mut seen = 0;
        for (at, (_, id)) in self.order.iter().enumerate() {
            let Some(record) = self.records.get(id) else { continue };
            if oldest_live.is_none() {
                oldest_live = Some(at);
            }
            if !matches!(record.state, ConfirmationState::Approved { .. }) {
                self.evict_at(at);
                return true;
            }
            seen += 1;
            if seen >= EVICTION_SCAN {
                break;
            }
        }
        match oldest_live {
            Some(at) => {
                self.evict_at(at);
                true
            }
            None => false,
        }
    }

    fn evict_at(&mut self, at: usize) {
        if let Some((_, id)) = self.order.remove(at) {
            self.drop_record(&id, "store full");
        }
    }
}

impl MemoryConfirmationStore {
    /// An empty store.
    pub fn new(config: MemoryConfirmationStoreConfig) -> MemoryConfirmationStore {
        MemoryConfirmationStore { config, inner: Mutex::new(Inner::default()) }
    }

    /// How many records it holds (including expired ones within their retention).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// How many relayed confirmations it remembers ([`ConfirmationStore::insert_relayed`],
    /// [`ConfirmationStore::remember_relayed`]): at
    /// most one per held record, since dropping a record drops its relay.
    pub fn relays(&self) -> usize {
        self.lock().relays.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each critical section leaves `Inner` consistent; a poisoned lock guards valid state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gone_at(&self, record: &ConfirmationRecord) -> Timestamp {
        record.expires_at.saturating_add(self.config.retention)
    }

    fn gone(&self, record: &ConfirmationRecord, now: Timestamp) -> bool {
        self.gone_at(record) <= now
    }

    /// Drops records past their retention from the front of the insertion order. (A record that
    /// expires earlier than one inserted before it waits behind it; lookups treat it as gone
    /// already, and the capacity bounds the wait.)
    fn sweep(&self, inner: &mut Inner, now: Timestamp) {
        while let Some((gone_at, _)) = inner.order.front() {
            if *gone_at > now {
                break;
            }
            if let Some((_, id)) = inner.order.pop_front() {
                inner.drop_record(&id, "retention over");
            }
        }
    }

    /// The live record with `id` (a record past its retention counts as absent).
    fn live<'i>(&self, inner: &'i mut Inner, id: &str, now: Timestamp) -> Option<&'i mut ConfirmationRecord> {
        self.sweep(inner, now);
        inner.records.get_mut(id).filter(|r| !self.gone(r, now))
    }

    fn insert_now(&self, record: ConfirmationRecord, now: Timestamp) -> Result<(), StoreError> {
        let mut inner = self.lock();
        self.insert_locked(&mut inner, record, now)
    }

    /// [`ConfirmationStore::insert_relayed`], in one critical section.
    fn insert_relayed_now(
        &self,
        record: ConfirmationRecord,
        key: &RelayKey,
        now: Timestamp,
    ) -> Result<Inserted, StoreError> {
        let mut inner = self.lock();
        self.sweep(&mut inner, now);
        if let Some(held) = inner.relays.get(key).cloned()
            && let Some(open) = self.live(&mut inner, &held, now)
            && matches!(open.state, ConfirmationState::Pending | ConfirmationState::Approved { .. })
            && now < open.expires_at
            && open.binding == record.binding
        {
            return Ok(Inserted::Held(Box::new(open.clone())));
        }
        let id = record.id.clone();
        self.insert_locked(&mut inner, record, now)?;
        inner.relay(key, &id);
        Ok(Inserted::New)
    }

    fn insert_locked(&self, inner: &mut Inner, record: ConfirmationRecord, now: Timestamp) -> Result<(), StoreError> {
        self.sweep(inner, now);
        if inner.records.contains_key(&record.id) {
            return Err(StoreError::Unavailable(format!("confirmation id {} already exists", record.id)));
        }
        if self.config.capacity == 0 || self.config.per_consumer == 0 {
            return Err(StoreError::Full { capacity: 0 });
        }
        // The consumer's own quota first: it makes room from its own records only.
        let consumer = record.binding.consumer_key.clone();
        while inner.by_consumer.get(&consumer).is_some_and(|ids| ids.len() >= self.config.per_consumer) {
            let Some(oldest) = inner.by_consumer.get(&consumer).and_then(|ids| ids.front().cloned()) else { break };
            inner.drop_record(&oldest, "consumer quota");
        }
        while inner.records.len() >= self.config.capacity {
            if !inner.evict_one() {
                break;
            }
        }
        // Keep the insertion order free of entries whose records are gone.
        if inner.order.len() > 2 * inner.records.len() + 64 {
            let Inner { records, order, .. } = inner;
            order.retain(|(_, id)| records.contains_key(id));
        }
        inner.order.push_back((self.gone_at(&record), record.id.clone()));
        inner.by_consumer.entry(consumer).or_default().push_back(record.id.clone());
        inner.records.insert(record.id.clone(), record);
        Ok(())
    }

    fn decide_now(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &str,
        slots: SlotSet,
        now: Timestamp,
    ) -> Decided {
        let mut inner = self.lock();
        let Some(record) = self.live(&mut inner, id, now) else { return Decided::Unknown };
        let decided = record.decide(verdict, approver, slots, now);
        if decided.drops_consumption_token(verdict) {
            inner.tokens.remove(id);
        }
        decided
    }

    fn consume_now(&self, id: &str, expected: &ConfirmationBinding, now: Timestamp) -> Result<Consumed, Rejection> {
        let mut inner = self.lock();
        let Some(record) = self.live(&mut inner, id, now) else { return Err(Rejection::Unknown) };
        let approved_by = record.consume(expected, now)?;
        let token = agent_surface_core::id::random_id("k-");
        inner.tokens.insert(id.to_string(), token.clone());
        Ok(Consumed { approved_by, token: Some(token) })
    }

    fn reinstate_now(&self, id: &str, expected: &ConfirmationBinding, token: &str, now: Timestamp) -> bool {
        let mut inner = self.lock();
        let Some(record) = self.live(&mut inner, id, now) else { return false };
        if !record.binding.mismatch(expected).is_empty() || now >= record.expires_at {
            return false;
        }
        let ConfirmationState::Consumed { approved_by } = &record.state else { return false };
        let by = approved_by.clone();
        if inner.tokens.get(id).map(String::as_bytes) != Some(token.as_bytes()) {
            return false;
        }
        inner.tokens.remove(id);
        if let Some(record) = inner.records.get_mut(id) {
            record.state = ConfirmationState::Approved { by };
        }
        true
    }

    fn list_expired_now(&self, now: Timestamp, limit: usize) -> Vec<ConfirmationRecord> {
        let mut inner = self.lock();
        self.sweep(&mut inner, now);
        let mut expired: Vec<ConfirmationRecord> = inner
            .records
            .values()
            .filter(|r| {
                r.expires_at <= now
                    && !self.gone(r, now)
                    && matches!(
                        r.state,
                        ConfirmationState::Pending | ConfirmationState::Approved { .. } | ConfirmationState::Withdrawn
                    )
                    && match inner.expiry_claimed.get(&r.id) {
                        None => true,
                        Some(None) => false,
                        Some(Some(until)) => *until <= now,
                    }
            })
            .cloned()
            .collect();
        drop(inner);
        expired.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
        expired.truncate(limit);
        expired
    }

    fn withdraw_now(&self, id: &str, now: Timestamp) -> Option<ConfirmationState> {
        let mut inner = self.lock();
        let record = self.live(&mut inner, id, now)?;
        if record.state == ConfirmationState::Pending {
            record.state = ConfirmationState::Withdrawn;
        }
        Some(record.state.clone())
    }

    fn remember_relayed_now(&self, key: &RelayKey, id: &str, now: Timestamp) {
        let mut inner = self.lock();
        if self.live(&mut inner, id, now).is_none() {
            return;
        }
        inner.relay(key, id);
    }

    fn relayed_now(&self, key: &RelayKey, now: Timestamp) -> Option<String> {
        let mut inner = self.lock();
        if inner.relays.is_empty() {
            return None;
        }
        let id = inner.relays.get(key)?.clone();
        self.live(&mut inner, &id, now).map(|_| id)
    }

    fn forget_relayed_now(&self, key: &RelayKey, id: &str) {
        let mut inner = self.lock();
        if inner.relays.get(key).is_some_and(|held| held == id) {
            inner.relays.remove(key);
            inner.relay_of.remove(id);
        }
    }
}

impl Default for MemoryConfirmationStore {
    fn default() -> MemoryConfirmationStore {
        MemoryConfirmationStore::new(MemoryConfirmationStoreConfig::default())
    }
}

impl fmt::Debug for MemoryConfirmationStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryConfirmationStore").field("config", &self.config).field("len", &self.len()).finish()
    }
}

impl ConfirmationStore for MemoryConfirmationStore {
    fn reach(&self) -> crate::Reach {
        crate::Reach::Process
    }

    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        let inner = self.lock();
        let pending =
            inner.records.values().filter(|r| r.state == ConfirmationState::Pending && r.expires_at > now).count();
        Some(crate::StoreUsage::entries(inner.records.len()).with_pending(pending))
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.insert_now(record, now) })
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        Box::pin(std::future::ready(self.insert_relayed_now(record, key, now)))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        Box::pin(async move {
            let mut inner = self.lock();
            Ok(self.live(&mut inner, id, now).map(|r| r.clone()))
        })
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(async move { Ok(self.decide_now(id, verdict, approver, SlotSet::ANY, now)) })
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(async move { Ok(self.decide_now(id, verdict, approver, slots, now)) })
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        Box::pin(async move { Ok(self.consume_now(id, expected, now)) })
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        Box::pin(async move { Ok(self.withdraw_now(id, now)) })
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        let mut pending: Vec<ConfirmationRecord> = {
            let mut inner = self.lock();
            self.sweep(&mut inner, now);
            inner
                .records
                .values()
                .filter(|r| r.state == ConfirmationState::Pending && now < r.expires_at)
                .cloned()
                .collect()
        };
        pending.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
        pending.truncate(limit);
        Box::pin(std::future::ready(Ok(pending)))
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let first = {
            let mut inner = self.lock();
            let held = self.live(&mut inner, id, now).is_some();
            let free = match inner.expiry_claimed.get(id) {
                None => true,
                Some(None) => false,
                Some(Some(claimed)) => *claimed <= now,
            };
            if held && free {
                inner.expiry_claimed.insert(id.to_string(), Some(until));
            }
            !held || free
        };
        Box::pin(std::future::ready(Ok(first)))
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut inner = self.lock();
        if self.live(&mut inner, id, now).is_some() {
            inner.expiry_claimed.insert(id.to_string(), None);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(self.reinstate_now(id, expected, token, now))))
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.list_expired_now(now, limit))))
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.remember_relayed_now(key, id, now);
        Box::pin(std::future::ready(Ok(())))
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.relayed_now(key, now))))
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = now;
        self.forget_relayed_now(key, id);
        Box::pin(std::future::ready(Ok(())))
    }
}
