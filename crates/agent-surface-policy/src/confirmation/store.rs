//! Where confirmation records live: the [`ConfirmationStore`] trait, its contract, and what its
//! operations answer.

use std::fmt;

use agent_surface_core::Timestamp;
use futures_util::future::BoxFuture;

use super::quorum::{ApprovalVerdict, SlotSet};
use super::record::{ConfirmationBinding, ConfirmationRecord, ConfirmationState, Mismatch, RelayKey};
use crate::store::StoreError;

/// What [`ConfirmationStore::decide`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decided {
    /// The record was pending and the decision is recorded: a denial ends it, and an approval
    /// that completes the quorum approves it (until then it stays pending).
    Done,
    /// The approver decided this record before; one decision per approver (nothing changed).
    DecidedBefore,
    /// No record with this id (never issued, evicted, or past its retention).
    Unknown,
    /// The record expired before the decision.
    Expired,
    /// The approver is the requester; nothing changed.
    SelfApproval,
    /// The record was already decided; its current state.
    NotPending(ConfirmationState),
    /// Every slot of the quorum this approver could fill is taken by other approvers (however
    /// the approvals so far are assigned); nothing changed
    /// ([`ConfirmationStore::decide_in_slots`]).
    SlotsTaken,
}

/// What [`ConfirmationStore::consume`] hands the one call it admits.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Consumed {
    /// The approver's subject (for the operator channel and audit).
    pub approved_by: String,
    /// The consumption token: a fresh random value the store recorded with this consumption,
    /// known only to the call that consumed. Presented to [`ConfirmationStore::reinstate`], it
    /// gives the approval back when that call's handler never started, or answered that the same
    /// call should be made again. `None`: the store cannot reinstate.
    pub token: Option<String>,
}

impl Consumed {
    /// Evidence approved by `approved_by` (no consumption token).
    pub fn new(approved_by: impl Into<String>) -> Consumed {
        Consumed { approved_by: approved_by.into(), token: None }
    }

    /// The same, with the consumption token the store recorded.
    pub fn with_token(mut self, token: impl Into<String>) -> Consumed {
        self.token = Some(token.into());
        self
    }
}

/// Shows whether there is a token, never the token.
impl fmt::Debug for Consumed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumed")
            .field("approved_by", &self.approved_by)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

/// Why [`ConfirmationStore::consume`] refused the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No record with this id (never issued, evicted, or past its retention).
    Unknown,
    /// The evidence belongs to another call; which fields differ.
    Mismatch(Mismatch),
    /// Not decided yet; the record, to repeat the request.
    Pending(Box<ConfirmationRecord>),
    /// Denied.
    Denied,
    /// Already used.
    Consumed,
    /// Expired or withdrawn.
    Expired,
}

/// What [`ConfirmationStore::insert_relayed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The record was added, and the relay key now holds its id.
    New,
    /// The relay key holds a confirmation of the same call that is still open — pending, or
    /// approved and unused, before its deadline: nothing was added or changed; that record, to
    /// answer the call with.
    Held(Box<ConfirmationRecord>),
}

/// Where confirmations live.
///
/// A record is created *pending*, decided once (*approved* or *denied*), and an approved record
/// is *consumed* by exactly one call. Every state change is one atomic operation of the store,
/// so a shared store (Redis, PostgreSQL) keeps the guarantees across replicas:
///
/// | operation | atomic effect |
/// |---|---|
/// | [`insert`](ConfirmationStore::insert) | adds a pending record under a fresh id (set-if-absent) |
/// | [`decide`](ConfirmationStore::decide) | records one approver's decision on a pending record (a denial of an approved, unused record before its deadline revokes it: approved → denied) — refused when expired, when the approver decided it before (or, for an `ApproveInPerson`, when the record holds one already), or (for an `Approve`, not an `ApproveInPerson`) when the approver is the requester; a denial makes it denied, the approval that completes its [`Quorum`](super::Quorum) makes it approved |
/// | [`decide_in_slots`](ConfirmationStore::decide_in_slots) | as `decide`, by an approver who can fill only some of the quorum's role slots: refused unless every approval so far and this one can each be given a distinct slot (a bipartite matching) |
/// | [`consume`](ConfirmationStore::consume) | approved → consumed, if the presented binding matches and the record has not expired |
/// | [`withdraw`](ConfirmationStore::withdraw) | pending → withdrawn (a wait-mode call gave up) |
/// | [`reinstate`](ConfirmationStore::reinstate) | consumed → approved, for the call that consumed it (its binding and consumption token), before the deadline |
/// | [`claim_expiry`](ConfirmationStore::claim_expiry) | claims the recording of an expiry until a deadline, unless a claim holds or it is recorded |
/// | [`expiry_recorded`](ConfirmationStore::expiry_recorded) | marks an expiry's event as written, for good |
/// | [`insert_relayed`](ConfirmationStore::insert_relayed) | claims a [`RelayKey`] for a new pending record and adds the record, in one step — unless the key holds a record of the same call that is still open (pending, or approved and unused, before its deadline): then nothing changes and that record is the answer. A key whose record was settled (denied, withdrawn, consumed, expired, gone) is free. Identical calls racing without evidence open one confirmation between them |
/// | [`remember_relayed`](ConfirmationStore::remember_relayed) | a [`RelayKey`] → the id of a held record, for as long as the record is held, replacing what the key held (for evidence given back by [`reinstate`](ConfirmationStore::reinstate)) |
/// | [`relayed`](ConfirmationStore::relayed) | reads what a key holds |
/// | [`forget_relayed`](ConfirmationStore::forget_relayed) | removes a key, only while it still holds the given id |
///
/// With Redis each row is one Lua script over one hash (`HGET` the state and binding, compare,
/// `HSET` the new state), which runs atomically; the record's TTL is `expires_at + retention`.
///
/// The reads promise less, but what they promise a store must keep:
///
/// | operation | what it must guarantee |
/// |---|---|
/// | [`reach`](ConfirmationStore::reach) | says truly who shares the records: the engine binds evidence to the instance rather than the registration when records outlive the process, and the registry reports wiring that shares confirmations but not idempotency |
/// | [`get`](ConfirmationStore::get) | the record as the last state change left it, while the store holds it (at least until `expires_at`) |
/// | [`list_pending`](ConfirmationStore::list_pending) | every record pending and unexpired at `now`, up to the limit, soonest deadline first (the approval inbox); a snapshot |
/// | [`list_expired`](ConfirmationStore::list_expired) | every held record whose deadline passed while it was open and whose expiry is neither recorded nor under a live claim, up to the limit, earliest first (the expiry sweep); a snapshot |
/// | [`usage`](ConfirmationStore::usage) | how much the store holds, for the operator's gauges, or `None` |
///
/// # Required and optional operations
///
/// Every operation is required except [`usage`](ConfirmationStore::usage), a gauge whose default
/// (`None`: the store does not say) costs no guarantee. No operation has a default that does
/// nothing: such a default would weaken a guarantee of a third-party store without anyone
/// noticing (a relay that remembers nothing turns approval-on-repeat off; an expiry list that is
/// always empty leaves expiries unrecorded). The store kit of `agent-surface-testing` checks these
/// guarantees, racing callers and replicas included; a new backend passes it.
///
/// `now` is passed in rather than read, so a store never disagrees with the engine about time.
/// A record is kept at least until `expires_at`; a store may keep it longer (its retention) so
/// that a late retry learns `consumed` or `denied` rather than `expired`.
pub trait ConfirmationStore: Send + Sync + fmt::Debug + 'static {
    /// Who shares the records: [`Reach::Shared`](crate::Reach::Shared) for a store that replicas share (evidence
    /// approved through one is presented on another), [`Reach::Durable`](crate::Reach::Durable)
    /// for one that this process keeps across its restarts, [`Reach::Process`](crate::Reach::Process) for one that lives in
    /// this process. The engine's default [`TargetBinding`](crate::TargetBinding) follows from
    /// it, and the registry reports wiring that shares confirmations but not idempotency.
    fn reach(&self) -> crate::Reach;

    /// What the store holds, for the operator's gauges; `None` (the default): it does not say.
    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        let _ = now;
        None
    }

    /// Adds a pending record. Ids are fresh; an id that exists already is an error.
    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Atomically opens the confirmation `record` for the call whose [`RelayKey`] is `key`,
    /// unless one is open for that call already.
    ///
    /// When `key` holds the id of a record that the store holds, whose state is pending or
    /// approved (unused), whose deadline has not passed (`now < expires_at`) and whose binding
    /// equals `record`'s, nothing changes and the answer is that record ([`Inserted::Held`]).
    /// Otherwise `record` is added as by [`insert`](Self::insert) (an id that exists already is
    /// an error, and nothing changes) and, in the same step, `key` is made to hold its id — for
    /// as long as the store holds the record, as [`remember_relayed`](Self::remember_relayed)
    /// keeps a key — replacing the settled or vanished id it held ([`Inserted::New`]).
    ///
    /// This is what lets identical calls without evidence that race — a client's concurrent
    /// retries of one call without an invocation id, on one replica or several — open one
    /// confirmation between them: the first to claim the key adds the record, every other is
    /// answered with it, so an approver's inbox holds one request. The claim and the record come
    /// into being in one step, so no caller can leave a claim without a record (a caller that
    /// stops before the step claimed nothing; after it, the record exists and lapses as any
    /// other); and a key whose record was denied, withdrawn, consumed, expired or dropped is free
    /// for the next request of the call.
    ///
    /// Required of every store: doing it as an [`insert`](Self::insert) followed by a
    /// [`remember_relayed`](Self::remember_relayed) lets racing retries each open a confirmation.
    /// The store kit of `agent-surface-testing` checks it, racing callers included.
    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>>;

    /// The record with `id`, if the store still holds it.
    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>>;

    /// Atomically records `approver`'s decision on a pending, unexpired record. An approval by
    /// the requester (see [`ConfirmationRecord::is_requester`]) is refused; a denial by the
    /// requester is accepted.
    ///
    /// A denial of an *approved* record that nobody used yet, before its deadline, revokes the
    /// approval: whoever declines (the requester at the client, an approver taking their
    /// approval back), the record becomes [`ConfirmationState::Denied`] by them, the denial is
    /// appended to its decisions after the approvals, and the answer is [`Decided::Done`]; the
    /// evidence is then refused as denied. It is the same atomic step as a consumption's, so a
    /// decline racing a use lands exactly when the use does not. A used, denied or withdrawn
    /// record, or an approved one past its deadline, answers [`Decided::NotPending`] and keeps
    /// its state; a denial that meets a used record also drops its consumption token in the same
    /// step ([`Decided::drops_consumption_token`]), so that a use that does not happen after all
    /// cannot give the approval back ([`reinstate`](Self::reinstate) then answers `false`). A denial is final ([`ConfirmationState::Denied`]); an approval is
    /// appended to [`ConfirmationRecord::decisions`], and the one that brings them to
    /// [`Quorum::required`](super::Quorum::required) makes the record [`ConfirmationState::Approved`] (by the approvers,
    /// in order, separated by `, `). The approver may fill any of the quorum's slots: the
    /// quorum's roles and named approvers are the engine's to check (the record's quorum never
    /// changes); the store counts. With role slots the engine calls
    /// [`decide_in_slots`](Self::decide_in_slots) instead.
    ///
    /// Checks, in order: the record exists; it is pending; the approver has not decided it
    /// before ([`Decided::DecidedBefore`], names compared as a person reads them; an
    /// `ApproveInPerson` when the record holds one already is also `DecidedBefore`, whatever
    /// the channel: it is the requester each time); the approver is not the requester
    /// (approvals only); it has not expired.
    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>>;

    /// As [`decide`](Self::decide), by an approver who can fill only `slots` of the record's
    /// [`Quorum`](super::Quorum) (as the engine found from their roles; recorded as
    /// [`ApproverDecision::slots`](super::ApproverDecision::slots)). After the checks of `decide`, an approval is recorded only
    /// if the approvals so far and this one can each be given a distinct slot they could fill
    /// (a bipartite matching, [`Quorum::has_room`](super::Quorum::has_room)), else [`Decided::SlotsTaken`]; the record is
    /// approved when every slot is filled. In the same atomic step as the rest: two approvers
    /// racing for the last slot they both could fill get one `Done` and one `SlotsTaken`.
    ///
    /// Required of every store (the store kit of `agent-surface-testing` checks it). A store
    /// that cannot match slots answers `SlotSet::ANY` as `decide` does and refuses any other set
    /// with `StoreError::Unavailable`, so that it never counts an approval towards a role slot
    /// the approver may not fill.
    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>>;

    /// Atomically consumes approved evidence for the call with binding `expected`: the first
    /// caller gets [`Consumed`], every later or concurrent one a [`Rejection`].
    ///
    /// Checks, in order: the record exists; the binding matches (before anything else, so
    /// that another call's evidence reveals nothing about its state); the state is not final
    /// (`consumed`, `denied`, `withdrawn`); it has not expired; it is approved.
    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>>;

    /// Atomically withdraws a pending record; returns the state after the call (`None` for an
    /// unknown id). A record decided meanwhile keeps its decision.
    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>>;

    /// Up to `limit` records that are pending and not expired at `now`, those that expire first
    /// first (an approval inbox's list). A snapshot: a record may be decided right after.
    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>>;

    /// Atomically claims the recording of `id`'s expiry until `until`: `true` when nobody holds
    /// it — never claimed, or claimed under a claim that lapsed (`until <= now` of that claim)
    /// before the claimer marked the event written ([`expiry_recorded`](Self::expiry_recorded)) —,
    /// `false` while another claim holds or once the event is recorded. So engines sharing the
    /// store (replicas) write one `confirmation.expired` audit event between them however many of
    /// them see the deadline pass, and at least one: an engine that stops between its claim and
    /// its write (killed, its sweep dropped) leaves a claim that lapses, and the expiry is listed
    /// ([`list_expired`](Self::list_expired)) and claimed again by another engine. A record the
    /// store no longer holds answers `true` (there is nothing to claim against). Required of
    /// every store, and atomic; the store kit of `agent-surface-testing` checks it with racing
    /// engines, and a claim that lapses.
    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Atomically marks `id`'s expiry event as written, for good: no claim is granted after it,
    /// and the record is not listed by [`list_expired`](Self::list_expired) again. The engine
    /// calls it once the audit sink took the event its claim was for. Nothing happens for a
    /// record the store does not hold.
    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Atomically gives back evidence a call consumed when that call's handler never started
    /// (the registry's strict audit could not record its start), or answered that the same call
    /// should be made again (a transient failure): consumed → approved, by the same approvers, so
    /// that the call's retry can use it. `true` when reinstated.
    ///
    /// Only the consumer can reinstate, and only its own consumption: the record must exist, its
    /// binding match `expected` (as for [`consume`](ConfirmationStore::consume)), its state be
    /// `consumed` with the consumption token `token` (the [`Consumed::token`] that consumption
    /// handed out, not dropped since by a denial), and its deadline not have passed. Reinstating clears the token, so evidence is
    /// reinstated at most once per consumption: a second reinstatement, or one after another call
    /// consumed the evidence again (with a token of its own), answers `false` and changes nothing.
    ///
    /// Required of every store. One whose [`consume`](ConfirmationStore::consume) hands out no
    /// token answers `false` (the evidence stays consumed; the caller needs a fresh approval);
    /// the store kit of `agent-surface-testing` checks a store that hands out tokens.
    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Up to `limit` records whose deadline passed (`expires_at <= now`) while they were pending,
    /// approved and unused, or withdrawn, whose expiry is not recorded
    /// ([`expiry_recorded`](ConfirmationStore::expiry_recorded)) and not under a claim that holds
    /// at `now` ([`claim_expiry`](ConfirmationStore::claim_expiry)), those that expired first first —
    /// for the engine's sweep, which records their `confirmation.expired` event even when nobody
    /// meets them again. Records the store no longer holds (past its retention) are not listed. A
    /// snapshot: a listed record may be claimed right after.
    ///
    /// Required of every store: a store that listed none would leave the expiry of a request
    /// nobody meets again unrecorded in the audit trail. The store kit checks it.
    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>>;

    /// Atomically remembers that the confirmation `id` was relayed for the call whose key is
    /// `key` (replacing the id the key held, open or not: the engine calls it for evidence it
    /// gave back with [`reinstate`](Self::reinstate), which is approved and beats a pending
    /// request; a new request claims its key with [`insert_relayed`](Self::insert_relayed)), for
    /// as long as the store holds the record `id` —
    /// at most its `expires_at` plus the store's retention, and never past the record's eviction.
    /// Nothing is remembered for an id the store does not hold. The memory is what lets a repeat
    /// of the call on any engine sharing the store (replicas) present the confirmation a person
    /// approved; it never grants anything by itself, since the engine consumes the id as any
    /// presented evidence (binding and single use checked).
    ///
    /// Required of every store: a store that remembered nothing would make each repeat ask for a
    /// fresh confirmation, which is safe but leaves an approval given in an inbox unused by a
    /// caller that cannot send ids (a model), silently. The store kit of `agent-surface-testing`
    /// checks it.
    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The id remembered under `key` ([`remember_relayed`](Self::remember_relayed),
    /// [`insert_relayed`](Self::insert_relayed)), if its record is still held.
    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>>;

    /// Atomically forgets `key`, only while it still holds `id` (a confirmation relayed for the
    /// call meanwhile, e.g. by another replica, stays).
    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<S: ConfirmationStore + ?Sized> ConfirmationStore for std::sync::Arc<S> {
    fn reach(&self) -> crate::Reach {
        (**self).reach()
    }

    fn usage(&self, now: Timestamp) -> Option<crate::StoreUsage> {
        (**self).usage(now)
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).insert(record, now)
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        (**self).insert_relayed(record, key, now)
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        (**self).get(id, now)
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        (**self).decide(id, verdict, approver, now)
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        (**self).decide_in_slots(id, verdict, approver, slots, now)
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        (**self).consume(id, expected, now)
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        (**self).withdraw(id, now)
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        (**self).list_pending(now, limit)
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).claim_expiry(id, until, now)
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).expiry_recorded(id, now)
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).reinstate(id, expected, token, now)
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        (**self).list_expired(now, limit)
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).remember_relayed(key, id, now)
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        (**self).relayed(key, now)
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).forget_relayed(key, id, now)
    }
}
