//! Expiry: the warnings before a confirmation expires, the `confirmation.expired` events after,
//! each written once per engine (marks) and once across engines (the store's claim).

use std::sync::{MutexGuard, PoisonError};

use agent_surface_core::Timestamp;

use super::engine::{ConfirmationEngine, ExpiryMarks, record_event};
use super::record::{ConfirmationRecord, ConfirmationState};
use super::sweeper;
use crate::audit::AuditKind;
use crate::clock::Clock;
use crate::store::StoreError;

impl ConfirmationEngine {
    fn marks(&self) -> MutexGuard<'_, ExpiryMarks> {
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports `record` on the operator channel once when it is pending and within the expiry
    /// warning's lead time at `now` (see [`ConfirmationConfig::expiry_warning`]); true when this
    /// call reported it.
    pub(super) fn observe(&self, record: &ConfirmationRecord, now: Timestamp) -> bool {
        let Some(lead) = self.config.expiry_warning else { return false };
        let lifetime = record.expires_at.saturating_duration_since(record.created_at);
        let lead = lead.min(lifetime / 2);
        let remaining = record.expires_at.saturating_duration_since(now);
        if record.state != ConfirmationState::Pending || remaining.is_zero() || remaining > lead {
            return false;
        }
        if !self.marks().warned.mark(&record.id) {
            return false;
        }
        tracing::warn!(
            target: "agent_surface::confirmation",
            confirmation_id = %record.id,
            capability = %record.binding.capability,
            consumer = %record.binding.consumer_key,
            expires_at = %record.expires_at,
            remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            approvals = record.approvals(),
            required = record.quorum.required(),
            "confirmation expires soon"
        );
        true
    }

    /// Whether `id`'s expiry is to be recorded now: true the first time it is seen expired —
    /// by this engine (its own memory, no store call after the first time) and by every engine
    /// sharing the store ([`ConfirmationStore::claim_expiry`]) — so that one confirmation is one
    /// `confirmation.expired` event however often, and through however many replicas, its
    /// evidence or a decision meets the deadline. A store that cannot answer leaves it recorded:
    /// an audit trail had rather hold the event twice than miss it.
    pub(super) async fn first_expiry(&self, id: &str, now: Timestamp) -> bool {
        if !self.marks().expired.mark(id) {
            return false;
        }
        let until = now.saturating_add(sweeper::EXPIRY_CLAIM_LEASE);
        let first = match self.bounded(self.config.store.claim_expiry(id, until, now)).await {
            Ok(first) => first,
            Err(e) => {
                tracing::warn!(
                    target: "agent_surface::confirmation",
                    confirmation_id = id,
                    error = %crate::redacted(&e),
                    "cannot claim the record of an expiry; recording it"
                );
                true
            }
        };
        if first {
            tracing::info!(target: "agent_surface::confirmation", confirmation_id = id, "confirmation expired");
            if self.config.audit.is_none() {
                // No event to write: recorded as soon as it is logged.
                self.expiry_recorded(id).await;
            }
        }
        first
    }

    /// Tells the store that `id`'s expiry event is written ([`ConfirmationStore::expiry_recorded`]);
    /// a failure is logged, and leaves the claim to lapse (the event may then be written twice).
    pub(super) async fn expiry_recorded(&self, id: &str) {
        let now = self.config.clock.now();
        if let Err(e) = self.bounded(self.config.store.expiry_recorded(id, now)).await {
            tracing::warn!(
                target: "agent_surface::confirmation",
                confirmation_id = id,
                error = %crate::redacted(&e),
                "cannot mark an expiry as recorded; another engine may record it again"
            );
        }
    }

    /// Looks through up to `limit` pending confirmations and warns, once each, about those within
    /// the expiry warning's lead time (see [`ConfirmationConfig::expiry_warning`](super::ConfirmationConfig::expiry_warning)); returns how
    /// many it warned about now. A host that wants the warnings without waiting for someone to
    /// look runs it on a timer (every minute, say).
    ///
    /// It then records the expiry of up to `limit` confirmations whose deadline passed while
    /// nobody touched them ([`sweep_expired`](Self::sweep_expired)), so the host's one timer
    /// serves both. A store that fails one part does not skip the other: the error (the
    /// warnings' first) is returned after both ran.
    pub async fn sweep_expiring(&self, limit: usize) -> Result<usize, StoreError> {
        let warned = self.warn_expiring(limit).await;
        let expired = self.sweep_expired(limit).await;
        let warned = warned?;
        expired?;
        Ok(warned)
    }

    /// The warnings part of [`sweep_expiring`](Self::sweep_expiring).
    async fn warn_expiring(&self, limit: usize) -> Result<usize, StoreError> {
        if self.config.expiry_warning.is_none() {
            return Ok(0);
        }
        let now = self.config.clock.now();
        let pending = self.bounded(self.config.store.list_pending(now, limit)).await?;
        Ok(pending.iter().filter(|r| self.observe(r, now)).count())
    }

    /// Records the `confirmation.expired` audit event of up to `limit` confirmations whose
    /// deadline passed while they were pending, approved and unused, or withdrawn, and whose
    /// expiry nobody recorded yet ([`ConfirmationStore::list_expired`](super::ConfirmationStore::list_expired)) — those nobody presents,
    /// decides or waits for again would otherwise never get one. Once per confirmation across
    /// the engines sharing the store, as for an expiry met by a call
    /// ([`ConfirmationStore::claim_expiry`](super::ConfirmationStore::claim_expiry)); returns how many events this sweep wrote. Run by
    /// [`sweep_expiring`](Self::sweep_expiring); a store keeps a record for its retention past
    /// the deadline, so sweep more often than that.
    ///
    /// An event the audit sink does not take after its expiry was claimed (or whose write was
    /// cut short by dropping the sweep) is kept by this engine and written first by its next
    /// sweeps, up to [`EXPIRY_WRITE_ATTEMPTS`](super::EXPIRY_WRITE_ATTEMPTS) tries and [`MAX_UNWRITTEN_EXPIRIES`](super::MAX_UNWRITTEN_EXPIRIES) events;
    /// while the sink refuses, the sweep claims no further expiries (they stay for a later
    /// sweep, or another replica). Each event kept, and each given up, is logged at `ERROR`
    /// (target `agent_surface::audit`, field `confirmation_id`) so that an operator can
    /// reconcile the trail: the engine holds the kept events in memory only.
    pub async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError> {
        if limit == 0 {
            return Ok(0);
        }
        let (mut recorded, sink_ok) = self.write_backlog().await;
        if !sink_ok {
            return Ok(recorded);
        }
        let now = self.config.clock.now();
        let expired = self.bounded(self.config.store.list_expired(now, limit)).await?;
        for record in &expired {
            if self.config.audit.is_none() {
                if self.first_expiry(&record.id, now).await {
                    recorded += 1;
                }
                continue;
            }
            let mut event = record_event(now, AuditKind::ConfirmationExpired, record);
            event.confirmation_id = Some(record.id.clone());
            // Kept for a later sweep if this one is dropped from here on (the claim may land).
            let pending = sweeper::PendingExpiry::new(self, event, 0);
            if !self.first_expiry(&record.id, now).await {
                pending.written();
                continue;
            }
            if self.write_audit(pending.event()).await {
                pending.written();
                recorded += 1;
            } else {
                // `pending` is kept as it drops; the sink refused, so leave the rest unclaimed.
                break;
            }
        }
        Ok(recorded)
    }
}
