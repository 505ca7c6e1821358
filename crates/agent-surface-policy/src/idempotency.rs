//! Idempotency: at most one execution per (consumer, invocation id), with duplicates joining the
//! running call or replaying its stored result.
//!
//! Admission is phase 1 of the pipeline. The registry computes the request's [`Fingerprint`] and
//! asks an [`IdempotencyStore`] to [`admit`](IdempotencyStore::admit) its [`IdempotencyKey`]:
//!
//! | store holds for the key                 | same fingerprint        | other fingerprint    |
//! |-----------------------------------------|-------------------------|----------------------|
//! | nothing, or an expired result           | [`Admission::Leader`]   | [`Admission::Leader`]|
//! | a call in flight                        | [`Admission::Follower`] | [`Admission::Conflict`] |
//! | a call in flight whose lease lapsed     | [`Admission::TakeOver`] | [`Admission::Conflict`] |
//! | a stored terminal result, not expired   | [`Admission::Replay`]   | [`Admission::Conflict`] |
//!
//! The leader runs the call and [`settle`](IdempotencyStore::settle)s exactly once, with
//! [`Settlement::Store`] for a cacheable outcome or [`Settlement::Release`] for one that must not
//! be replayed.
//!
//! # Leases and fencing
//!
//! A leader holds its record through a [`Lease`]. In one process the lease lasts until the leader
//! settles (the process and the record end together). A store shared by several processes cannot
//! wait for ever on a leader whose process died, so its leases lapse unless renewed
//! ([`Lease::renew_every`], [`IdempotencyStore::renew`]); the next admission of the same request
//! then takes the record over ([`Admission::TakeOver`]) under a new lease whose fencing token
//! ([`Lease::token`]) is greater than the old one. A late settlement or renewal carrying the old
//! token is refused with [`StoreError::LeaseLost`] and changes nothing: a leader that stalled past
//! its lease can never overwrite what its successor recorded.
//!
//! # Attempts and cancellation
//!
//! Every admission carries an [`Attempt`], unique to it. An admission the caller gave up on (it
//! did not answer within the caller's budget, or failed) may still be carried out by a shared
//! store afterwards — a stalled Redis runs the script once it resumes — and leave a claim whose
//! leader never learnt that it leads: its handler never started, and a retry would find the claim,
//! wait out its lease and answer an unknown outcome for a call that never ran. So a caller that
//! answered "nothing ran" [`cancel`](IdempotencyStore::cancel)s its attempt:
//!
//! - a record in flight under a claim that attempt made as [`Admission::Leader`] is removed (a
//!   record it took over is made to lapse at once, or settled with an unknown outcome, instead,
//!   since the earlier leader may have run; either way its followers learn that the outcome is
//!   unknown);
//! - otherwise the store remembers the attempt for a while, and refuses a later admission carrying
//!   it ([`StoreError::AttemptCancelled`]): an admission that arrives after its own cancellation
//!   (over another connection) claims nothing.
//!
//! Either way a retry with the same invocation id is admitted afresh.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_surface_core::details::ExecutionFailedReason;
use agent_surface_core::json::write_canonical;
use agent_surface_core::{AgentSurfaceError, InvokeResult, Timestamp};
use futures_util::future::BoxFuture;
use hashbrown::HashTable;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

// Their home is `store`, beside the contract every store trait shares; this path stays for the
// callers that named them here.
pub use crate::store::{StoreError, StoreUsage};

mod pages;

use pages::{Bytes, COMPACTED_AT_ONCE, MAX_PAGED, Pages};

/// Who asked, and which invocation: the identity of one logical call.
///
/// Two calls with the same key are the same call (a retry); the store decides whether the second
/// one joins, replays or conflicts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// The id's scope: the caller's principal ([`crate::Consumer::principal`]) for an invocation
    /// id, whatever session or transport sent it; a natural key's own scope for a natural key.
    pub consumer_key: String,
    /// The invocation id the consumer supplied.
    pub invocation_id: String,
}

impl IdempotencyKey {
    /// The key of `invocation_id` in the scope `consumer_key` (the caller's principal, for an
    /// invocation id the registry admits).
    pub fn new(consumer_key: impl Into<String>, invocation_id: impl Into<String>) -> IdempotencyKey {
        IdempotencyKey { consumer_key: consumer_key.into(), invocation_id: invocation_id.into() }
    }
}

/// What a request was: SHA-256 over the canonical JSON of its content.
///
/// Two requests whose JSON means the same (members in another order, `1.0` for `1`) have the same
/// fingerprint; see [`agent_surface_core::json`]. Displayed (and debugged) as 64 lowercase hex
/// digits, for the operator channel.
///
/// ```
/// use agent_surface_policy::idempotency::Fingerprint;
/// use serde_json::json;
///
/// let a = Fingerprint::of(&json!({"capability": "orders.cancel", "input": {"id": 7, "force": false}}));
/// let b = Fingerprint::of(&json!({"input": {"force": false, "id": 7.0}, "capability": "orders.cancel"}));
/// assert_eq!(a, b);
/// assert_eq!(a.to_string().len(), 64);
/// assert_eq!(
///     Fingerprint::of(&json!({})).to_string(),
///     "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", // sha256("{}")
/// );
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// SHA-256 over the canonical JSON ([`write_canonical`]) of `value`.
    pub fn of(value: &serde_json::Value) -> Fingerprint {
        // Sized for typical inputs: most are written without growing the buffer.
        let mut canonical = Vec::with_capacity(256);
        write_canonical(value, &mut canonical);
        Fingerprint(Sha256::digest(&canonical).into())
    }

    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The fingerprint with these digest bytes (e.g. read back from a shared store).
    pub fn from_bytes(bytes: [u8; 32]) -> Fingerprint {
        Fingerprint(bytes)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", agent_surface_core::hex::Hex(&self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One admission attempt: a value unique to one [`IdempotencyStore::admit`] call, recorded with
/// the claim it makes, so that a caller who gave up on that admission can
/// [`cancel`](IdempotencyStore::cancel) exactly what it may have claimed (see the module docs).
///
/// [`Attempt::fresh`] makes one from a random per-process prefix and a counter: unique across
/// processes without a system call per admission. Displayed as 32 lowercase hex digits.
///
/// ```
/// use agent_surface_policy::idempotency::Attempt;
///
/// let (a, b) = (Attempt::fresh(), Attempt::fresh());
/// assert_ne!(a, b);
/// assert_eq!(a.to_string().len(), 32);
/// assert_eq!(Attempt::from_u128(a.as_u128()), a);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attempt(u128);

impl Attempt {
    /// A new attempt, different from every other this process made and (with overwhelming
    /// probability) from those of every other process.
    pub fn fresh() -> Attempt {
        static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let prefix = *PREFIX.get_or_init(|| {
            let bytes = agent_surface_core::id::random_bytes();
            u64::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]])
        });
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Attempt((u128::from(prefix) << 64) | u128::from(n))
    }

    /// The attempt with this value (e.g. read back from a shared store).
    pub fn from_u128(value: u128) -> Attempt {
        Attempt(value)
    }

    /// Its value.
    pub fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A leader's hold on its record, from admission to settlement.
///
/// The token *fences* the record: `settle` and `renew` must present it, and a store refuses
/// them ([`StoreError::LeaseLost`]) once the record was taken over by a later leader. Tokens are
/// unique among the leases one store hands out, and a takeover's is greater than the lease it
/// replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The fencing token.
    pub token: u64,
    /// How often the leader renews the lease while it runs, for a store whose leases lapse;
    /// `None` for a lease that holds until it is settled (the memory store's).
    pub renew_every: Option<Duration>,
}

impl Lease {
    /// A lease with `token` that holds until it is settled.
    pub fn until_settled(token: u64) -> Lease {
        Lease { token, renew_every: None }
    }
}

/// What admission decided for one (key, fingerprint).
pub enum Admission {
    /// No live record: the caller runs the invocation and must call `settle` exactly once.
    Leader(Lease),
    /// The same request was in flight, but its leader's lease lapsed without a result (its
    /// process died or stalled): the record is now this caller's, under a new lease, and the old
    /// leader can no longer settle it.
    ///
    /// Whether the earlier execution took effect is unknown. The caller must settle exactly once
    /// as a leader does; the registry runs the call again only where repeating it is harmless
    /// (idempotent or read-only) and otherwise records `EXECUTION_FAILED {reason:
    /// outcome-unknown}`.
    TakeOver(Lease),
    /// The same request is in flight: this future resolves to the leader's result.
    ///
    /// If the leader's result cannot be learnt, the future resolves to an error carrying the
    /// key's invocation id: the memory store answers `CANCELLED` when its record disappears (the
    /// store was dropped, so the leader's process is ending); a shared store answers
    /// `EXECUTION_FAILED {reason: outcome-unknown}` when the leader lost its lease or the store
    /// stopped answering (the leader may still commit).
    Follower(BoxFuture<'static, InvokeResult>),
    /// The same request already finished and its terminal result is stored.
    Replay(InvokeResult),
    /// The key was used for a different request (fingerprint differs). `stored` is for the operator channel only.
    Conflict {
        /// The fingerprint of the request the key was first used for.
        stored: Fingerprint,
    },
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Admission::Leader(lease) => f.debug_tuple("Leader").field(lease).finish(),
            Admission::TakeOver(lease) => f.debug_tuple("TakeOver").field(lease).finish(),
            Admission::Follower(_) => f.debug_tuple("Follower").finish_non_exhaustive(),
            Admission::Replay(result) => f.debug_tuple("Replay").field(result).finish(),
            Admission::Conflict { stored } => f.debug_struct("Conflict").field("stored", stored).finish(),
        }
    }
}

/// How a leader ends its record.
#[derive(Clone, Debug, PartialEq)]
pub enum Settlement {
    /// Store `result` as terminal until `expires_at`; followers receive it; later admissions with the same fingerprint replay it.
    Store {
        /// The terminal result.
        result: InvokeResult,
        /// When the stored result stops being replayed (exclusive: at `expires_at` it is gone).
        expires_at: Timestamp,
    },
    /// Hand `result` to the followers, then forget the record (non-cacheable outcomes: RATE_LIMITED, CONFIRMATION_REQUIRED, INVOCATION_CONFLICT).
    Release {
        /// The result the followers receive.
        result: InvokeResult,
    },
}

/// Where admission records live: in memory ([`MemoryIdempotencyStore`]) or in a shared service.
///
/// `now` is passed in (from the registry's [`Clock`](crate::Clock)) rather than read, so a store
/// never disagrees with the pipeline about time.
pub trait IdempotencyStore: Send + Sync + fmt::Debug + 'static {
    /// Who shares the records: [`Reach::Shared`](crate::Reach::Shared) when replicas share them
    /// (a retry on another replica replays or joins), [`Reach::Durable`](crate::Reach::Durable)
    /// for a store this process keeps across its restarts, [`Reach::Process`](crate::Reach::Process)
    /// for a store in this process.
    fn reach(&self) -> crate::Reach;

    /// What the store holds, for the operator's gauges; `None` (the default): it does not say
    /// (a shared store would need a round trip).
    fn usage(&self) -> Option<StoreUsage> {
        None
    }

    /// Decides what the call with `key` and `fingerprint` does (see [`Admission`]). A
    /// [`Admission::Leader`] or [`Admission::TakeOver`] must be followed by exactly one
    /// [`settle`](Self::settle) with its lease. A claim it makes records `attempt`; an
    /// `attempt` already [cancelled](Self::cancel) is refused with
    /// [`StoreError::AttemptCancelled`] and claims nothing.
    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>>;

    /// [`admit`](Self::admit) for a call whose capability may run twice without harm (idempotent
    /// or read-only), with the mark of [`start`](Self::start) written by the admission itself
    /// where the store can: the second member is `true` when a claim the admission made
    /// ([`Admission::Leader`] or [`Admission::TakeOver`]) is marked started already, and the
    /// registry then does not call [`start`](Self::start) for it (one round trip fewer on a
    /// shared store). The default admits with [`admit`](Self::admit) and answers `false`.
    ///
    /// A claim marked by its admission counts as started from the moment it is made: one whose
    /// lease lapses is taken over ([`Admission::TakeOver`]), and the registry runs such a call
    /// again, which its capability makes harmless, instead of claiming it afresh. A store must
    /// still tell this mark from one written by [`start`](Self::start) where it matters:
    /// [`cancel`](Self::cancel) of the attempt that made the claim removes it as an unmarked
    /// claim's (that attempt's caller gave up on the admission, so no handler ran under it).
    fn admit_started<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(Admission, bool), StoreError>> {
        Box::pin(async move { self.admit(key, fingerprint, attempt, now).await.map(|admission| (admission, false)) })
    }

    /// Undoes whatever the admission of `key` under `attempt` claimed, for a caller that gave up on
    /// that admission (no answer within its budget, or an error) and so never started a handler
    /// under it. A record in flight claimed by `attempt` as a leader is removed, and its followers
    /// are told that nothing ran; one it took over is made to lapse at once or settled with
    /// `EXECUTION_FAILED {reason: outcome-unknown}` (the earlier leader may have run), and its
    /// followers are told that the outcome is unknown. Records claimed by any other attempt are left alone. When the admission has
    /// not been carried out (yet), the store remembers `attempt` at least as long as an admission
    /// could still arrive, and refuses it then. Idempotent: cancelling twice is cancelling once.
    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Ends the leader's record for `key` (see [`Settlement`]), if `lease` still holds it; a lease
    /// that no longer does (taken over, or already settled) is [`StoreError::LeaseLost`] and
    /// changes nothing.
    ///
    /// A store whose operations can go unanswered (a shared one) should recognise the same
    /// settlement repeated under the lease that already made it — the registry retries one whose
    /// answer it did not get, and that attempt may have landed — and answer `Ok(())` without
    /// changing anything (the Redis store does). The registry takes any `LeaseLost` for a lease
    /// another caller took, and answers its caller the unknown outcome the record then gives;
    /// a store that refuses its own lease's repeat makes that answer less precise, never wrong.
    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Marks the record of `key`, held by `lease`, as *started*: its leader is about to run the
    /// handler. The registry calls it for leases that lapse ([`Lease::renew_every`] is `Some`),
    /// once, after every earlier phase let the call through and before the handler starts, unless
    /// the claim's admission marked it already ([`admit_started`](Self::admit_started)); a store
    /// whose leases hold until settled answers `Ok(())` and records nothing.
    ///
    /// The mark is what makes a lapsed claim's fate decidable. A record whose lease lapsed before
    /// it was marked never had a handler run under it (its leader stalled or died between
    /// admission and execution, or the admission landed after its caller gave up): the next
    /// admission of the same request claims it afresh ([`Admission::Leader`], under a new, greater
    /// token), and its followers learn that nothing ran. Only a record that was marked (or taken
    /// over, since an earlier leader may have run) is taken over ([`Admission::TakeOver`]) with
    /// its unknown outcome.
    ///
    /// [`StoreError::LeaseLost`] when `lease` no longer holds the record or has lapsed: the leader
    /// must not run its handler (nothing ran under it), and a later admission may claim the
    /// record. A store that marks must refuse a lapsed lease here and in [`renew`](Self::renew)
    /// for a record not yet marked, so that a lapse before the mark is final.
    fn start<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Extends `lease` on the record for `key` by the store's lease duration; the leader calls it
    /// every [`Lease::renew_every`] while it runs. [`StoreError::LeaseLost`] when the record was
    /// taken over. Required of every store, so that a store whose leases lapse cannot forget it
    /// and let them lapse under a running leader without a word: a store whose leases hold until
    /// settled answers `Ok(())` and changes nothing.
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<S: IdempotencyStore + ?Sized> IdempotencyStore for Arc<S> {
    fn reach(&self) -> crate::Reach {
        (**self).reach()
    }

    fn usage(&self) -> Option<StoreUsage> {
        (**self).usage()
    }

    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        (**self).admit(key, fingerprint, attempt, now)
    }

    fn admit_started<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(Admission, bool), StoreError>> {
        (**self).admit_started(key, fingerprint, attempt, now)
    }

    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).cancel(key, attempt, now)
    }

    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).settle(key, fingerprint, lease, settlement, now)
    }

    fn start<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).start(key, lease, now)
    }

    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        lease: Lease,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).renew(key, lease, now)
    }
}

/// The configuration of a [`MemoryIdempotencyStore`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct MemoryStoreConfig {
    /// The most records (in flight and stored) held at once. Default 100 000. A capacity of 0
    /// admits nothing.
    pub capacity: usize,
    /// The most records one consumer key holds at once. Default 10 000. A consumer at its quota
    /// makes room by dropping *its own* oldest stored result, so one runaway or hostile consumer
    /// cannot push other consumers' results out of the store (which would let their retries run
    /// again). Consumers that share a key share the quota; see the adapters' consumer keys.
    pub per_consumer: usize,
    /// The most bytes the records hold at once (their keys, fingerprints and stored results, as
    /// JSON, plus a fixed overhead per record). Default 256 MiB. A stored result is held as its
    /// JSON text, so the bytes counted are the bytes held. Stored results make room the way
    /// the record capacity does (expired, then oldest); records in flight, which only hold their
    /// key, are bounded by the capacity instead. The store writes the records into 64 KiB pages
    /// of its own. Removals never add memory, but after removals out of the order the records
    /// were stored, the pages keep what they held until compaction (two pages an operation)
    /// brings them back within about twice the bytes counted and a few pages.
    pub max_bytes: usize,
    /// The most bytes one consumer key holds at once. Default 32 MiB. A consumer over it drops its
    /// own oldest stored results, as with [`MemoryStoreConfig::per_consumer`].
    pub per_consumer_bytes: usize,
    /// The largest result stored, in bytes of JSON. Default 1 MiB. A larger one still reaches the
    /// leader's caller and its followers, but the record keeps `EXECUTION_FAILED {reason:
    /// output-too-large}` in its place: a retry learns the call ran and that its result was
    /// withheld, and never runs it again.
    pub max_result_bytes: usize,
}

impl MemoryStoreConfig {
    /// The default configuration with `capacity` records (and the per-consumer quota capped at
    /// it).
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryStoreConfig {
            capacity,
            per_consumer: MemoryStoreConfig::default().per_consumer.min(capacity),
            ..Self::default()
        }
    }

    /// This configuration with a per-consumer quota of `per_consumer` records.
    pub fn with_per_consumer(mut self, per_consumer: usize) -> Self {
        self.per_consumer = per_consumer;
        self
    }

    /// This configuration with byte budgets: `max_bytes` in all, `per_consumer_bytes` per consumer
    /// key.
    pub fn with_bytes(mut self, max_bytes: usize, per_consumer_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self.per_consumer_bytes = per_consumer_bytes;
        self
    }

    /// This configuration with results over `max_result_bytes` withheld from the record.
    pub fn with_max_result_bytes(mut self, max_result_bytes: usize) -> Self {
        self.max_result_bytes = max_result_bytes;
        self
    }
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        MemoryStoreConfig {
            capacity: 100_000,
            per_consumer: 10_000,
            max_bytes: 256 << 20,
            per_consumer_bytes: 32 << 20,
            max_result_bytes: 1 << 20,
        }
    }
}

/// What one record costs beyond its key and its result: the fingerprint, the map entry, its
/// place in the store's pages and the queue entries, rounded up.
const RECORD_OVERHEAD: usize = 192;

/// The bytes a record of `key` holds before it has a result.
fn key_bytes(key: &IdempotencyKey) -> usize {
    key.consumer_key.len() + key.invocation_id.len() + RECORD_OVERHEAD
}

/// The largest scratch buffer a thread keeps between two settlements; one that grew past it (a
/// large result) is let go, so that a rare large result does not pin its size on every thread.
const SCRATCH_KEPT: usize = 64 << 10;

thread_local! {
    /// The buffer this thread writes a stored result's text into ([`write_record`]), taken while
    /// it is used.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's scratch buffer, empty (a fresh one if it is in use or gone).
fn scratch() -> Vec<u8> {
    SCRATCH.try_with(std::cell::Cell::take).unwrap_or_default()
}

/// Gives `buf` back to this thread, unless a large result made it grow past [`SCRATCH_KEPT`].
fn keep_scratch(mut buf: Vec<u8>) {
    if buf.capacity() <= SCRATCH_KEPT {
        buf.clear();
        let _ = SCRATCH.try_with(|scratch| scratch.set(buf));
    }
}

/// The capacity this thread's scratch buffer keeps, for tests.
#[cfg(test)]
fn scratch_capacity() -> usize {
    let buf = scratch();
    let capacity = buf.capacity();
    keep_scratch(buf);
    capacity
}

/// Writes into `buf` (cleared first) `key`'s consumer key and invocation id, then `result` as
/// JSON text: the form in which a record keeps them. The store copies it into its pages under its
/// lock, so that a settlement makes no allocation of its own.
fn write_record(buf: &mut Vec<u8>, key: &IdempotencyKey, result: &InvokeResult) {
    buf.clear();
    buf.extend_from_slice(key.consumer_key.as_bytes());
    buf.extend_from_slice(key.invocation_id.as_bytes());
    let start = buf.len();
    // Serializing a result cannot fail (its maps have string keys); were it to, the record
    // would keep `null`, which a replay reports as unreadable rather than answering wrongly.
    if serde_json::to_writer(&mut *buf, result).is_err() {
        buf.truncate(start);
        buf.extend_from_slice(b"null");
    }
}

/// An [`IdempotencyStore`] in this process's memory, bounded by a capacity.
///
/// Every operation is one short synchronous critical section, run when its future is first polled;
/// the futures are ready at once (a follower's future then waits for the leader).
///
/// When a new call arrives at capacity the store makes room by dropping expired results, then the
/// oldest stored results (in the order they were settled). In-flight records are never evicted:
/// if every record is in flight, admission fails with [`StoreError::Full`]. Bytes are bounded the
/// same way ([`MemoryStoreConfig::max_bytes`], [`MemoryStoreConfig::per_consumer_bytes`]), and a
/// result over [`MemoryStoreConfig::max_result_bytes`] is recorded as withheld.
///
/// Each consumer key holds at most [`MemoryStoreConfig::per_consumer`] records: a consumer at
/// its quota makes room by dropping its own oldest stored result, and when all of its records are
/// in flight its admission fails with [`StoreError::ConsumerFull`]. One consumer therefore never
/// evicts another's results unless the store as a whole is full.
///
/// A leader that never settles keeps its record in flight, and its followers waiting, until the
/// store is dropped; the registry settles on every path, including cancellation.
pub struct MemoryIdempotencyStore {
    capacity: usize,
    per_consumer: usize,
    max_bytes: usize,
    per_consumer_bytes: usize,
    max_result_bytes: usize,
    /// The keyed hash (SipHash, a random key per store) of record and consumer keys, so that
    /// agent-chosen ids cannot be made to collide and degrade the store. An operation hashes its
    /// key once, outside the lock; a record keeps its hashes, so that expiry, eviction and the
    /// queues' checks hash nothing.
    hasher: RandomState,
    inner: Mutex<Inner>,
}

struct Inner {
    /// The records, by the hash of their key: found by key, or by [`Slot`].
    records: HashTable<Entry>,
    /// Stored results in settle order; an entry whose generation is no longer its record's is
    /// stale and skipped.
    order: VecDeque<Slot>,
    /// Stored results in the order they expire, for results settled in that order (the usual
    /// case: one window, a clock that does not go back), so that indexing one costs a push; an
    /// entry whose record was evicted first is stale and skipped, and compacted away like
    /// `order`'s.
    expiring: VecDeque<(Timestamp, Slot)>,
    /// Stored results that expire before one settled earlier, by (expiry, generation), to their
    /// key's hash; exact (removed with the record).
    expiries: BTreeMap<(Timestamp, u64), u64>,
    /// Per consumer key, by its hash: how many records it holds, and its stored results in
    /// settle order (stale entries skipped, like `order`).
    consumers: HashTable<Held>,
    /// How many records are in flight.
    in_flight: usize,
    /// The bytes all records hold.
    bytes: usize,
    next_generation: u64,
    /// Attempts cancelled before they were admitted, the latest [`CANCELLED_KEPT`].
    cancelled: VecDeque<Attempt>,
    /// The records' bytes.
    pages: Pages,
}

/// How many cancelled attempts a [`MemoryIdempotencyStore`] remembers.
const CANCELLED_KEPT: usize = 64;

/// Where a record is: the hash of its key and its generation, which no other live record has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    hash: u64,
    generation: u64,
}

struct Held {
    /// The hash of `consumer`.
    hash: u64,
    consumer: Box<str>,
    count: usize,
    /// The bytes this consumer's records hold.
    bytes: usize,
    order: VecDeque<Slot>,
}

struct Entry {
    /// The hash of the key.
    hash: u64,
    /// The hash of the key's consumer key (where its [`Held`] is).
    consumer_hash: u64,
    /// The consumer key, then the invocation id, then (once a result is stored) the result's JSON
    /// text, one after the other in the store's pages ([`pages`]), whatever the record holds.
    data: Bytes,
    /// Where the consumer key ends in `data`.
    split: usize,
    /// Where the invocation id ends in `data`, and a stored result's text begins.
    key_end: usize,
    generation: u64,
    /// What this record holds, in bytes (see [`key_bytes`]; a stored result adds its JSON text).
    bytes: usize,
    record: Record,
}

impl Entry {
    fn is(&self, pages: &Pages, key: &IdempotencyKey) -> bool {
        let data = pages.get(&self.data);
        data[..self.split] == *key.consumer_key.as_bytes()
            && data[self.split..self.key_end] == *key.invocation_id.as_bytes()
    }

    /// The stored result's JSON text (empty while the record is in flight).
    fn result_text<'a>(&'a self, pages: &'a Pages) -> &'a [u8] {
        &pages.get(&self.data)[self.key_end..]
    }

    fn slot(&self) -> Slot {
        Slot { hash: self.hash, generation: self.generation }
    }
}

enum Record {
    InFlight {
        fingerprint: Fingerprint,
        /// The admission that claimed the record.
        attempt: Attempt,
        /// Where followers wait for the result: made when the first follower joins, so that a
        /// call nobody joins (most) costs no channel and hands its result over without a copy.
        sender: Option<watch::Sender<Option<InvokeResult>>>,
    },
    /// A stored result, kept as its JSON text after the key in the entry's bytes
    /// ([`Entry::result_text`]), read back for a replay: the bytes counted against the budgets are
    /// the bytes held, written in one piece into the store's pages however many values the result
    /// holds.
    Done {
        fingerprint: Fingerprint,
        expires_at: Timestamp,
        /// An unknown outcome waiting to be reconciled: evicted after other results (see
        /// [`MAX_SPARED`]).
        spare: bool,
    },
}

impl MemoryIdempotencyStore {
    /// An empty store.
    pub fn new(config: MemoryStoreConfig) -> Self {
        MemoryIdempotencyStore {
            capacity: config.capacity,
            per_consumer: config.per_consumer,
            max_bytes: config.max_bytes,
            per_consumer_bytes: config.per_consumer_bytes,
            max_result_bytes: config.max_result_bytes,
            hasher: RandomState::new(),
            inner: Mutex::new(Inner {
                records: HashTable::new(),
                order: VecDeque::new(),
                expiring: VecDeque::new(),
                expiries: BTreeMap::new(),
                consumers: HashTable::new(),
                in_flight: 0,
                bytes: 0,
                next_generation: 0,
                cancelled: VecDeque::new(),
                pages: Pages::default(),
            }),
        }
    }

    /// How many records (in flight and stored, including expired ones not yet swept) it holds.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many bytes its records hold, as counted against [`MemoryStoreConfig::max_bytes`].
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each critical section leaves `Inner` consistent before anything that can panic, so a
        // poisoned lock still guards valid state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn admit_now(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> Result<Admission, StoreError> {
        let hash = self.hasher.hash_one(key);
        // A key too long for a page (only the Rust API allows one) is allocated before the lock.
        let key_len = key.consumer_key.len() + key.invocation_id.len();
        let own_key = (key_len > MAX_PAGED)
            .then(|| [key.consumer_key.as_bytes(), key.invocation_id.as_bytes()].concat().into_boxed_slice());
        let mut inner = self.lock();
        let inner = &mut *inner;
        let admitted = self.admit_locked(inner, key, hash, own_key, fingerprint, attempt, now);
        // The sweep and evictions above may have left pages sparse, whatever the answer.
        inner.compact();
        admitted
    }

    /// [`MemoryIdempotencyStore::admit_now`] under the lock; `own_key` is the key's bytes when
    /// they are too long for a page.
    #[expect(clippy::too_many_arguments, reason = "admit_now's arguments, with the lock and what it made before it")]
    fn admit_locked(
        &self,
        inner: &mut Inner,
        key: &IdempotencyKey,
        hash: u64,
        own_key: Option<Box<[u8]>>,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> Result<Admission, StoreError> {
        if !inner.cancelled.is_empty() && inner.cancelled.contains(&attempt) {
            return Err(StoreError::AttemptCancelled);
        }
        inner.sweep(now);
        if let Some(entry) = inner.records.find_mut(hash, |e| e.is(&inner.pages, key)) {
            return Ok(match &mut entry.record {
                Record::InFlight { fingerprint: stored, sender, .. } if *stored == fingerprint => {
                    let sender = sender.get_or_insert_with(|| watch::channel(None).0);
                    Admission::Follower(follow(sender.subscribe(), key.invocation_id.clone()))
                }
                Record::Done { fingerprint: stored, .. } if *stored == fingerprint => {
                    // The store wrote these bytes from a result; reading them back cannot fail
                    // short of memory corruption, which is then reported, not replayed.
                    match serde_json::from_slice(entry.result_text(&inner.pages)) {
                        Ok(result) => Admission::Replay(result),
                        Err(e) => return Err(StoreError::Unavailable(format!("a stored result is unreadable: {e}"))),
                    }
                }
                Record::InFlight { fingerprint: stored, .. } | Record::Done { fingerprint: stored, .. } => {
                    Admission::Conflict { stored: *stored }
                }
            });
        }
        let consumer_hash = self.hasher.hash_one(key.consumer_key.as_str());
        let consumer = key.consumer_key.as_bytes();
        // The consumer's quota first: it makes room from its own results only.
        while inner.held(consumer_hash, consumer).map_or(0, |h| h.count) >= self.per_consumer {
            if !inner.evict_oldest_done_of(consumer_hash, consumer) {
                // Report the store as full when it is (every record in flight): the quota is then
                // not the reason.
                return Err(if inner.records.len() >= self.capacity && inner.in_flight == inner.records.len() {
                    StoreError::Full { capacity: self.capacity }
                } else {
                    StoreError::ConsumerFull { quota: self.per_consumer }
                });
            }
        }
        while inner.records.len() >= self.capacity {
            if !inner.evict_oldest_done() {
                return Err(StoreError::Full { capacity: self.capacity });
            }
        }
        // Bytes: stored results make room; a record in flight holds only its key, so when nothing
        // is left to evict it is admitted anyway (the counts above bound those).
        let bytes = key_bytes(key);
        inner.make_room(consumer_hash, consumer, bytes, self.per_consumer_bytes, self.max_bytes);
        let generation = inner.next_generation();
        let data = match own_key {
            Some(own) => Bytes::Own(own),
            None => inner.pages.write(Slot { hash, generation }, &[consumer, key.invocation_id.as_bytes()]),
        };
        let entry = Entry {
            hash,
            consumer_hash,
            key_end: data.len(),
            data,
            split: consumer.len(),
            generation,
            bytes,
            record: Record::InFlight { fingerprint, attempt, sender: None },
        };
        inner.records.insert_unique(hash, entry, |e| e.hash);
        match inner.held_mut(consumer_hash, consumer) {
            Some(held) => {
                held.count += 1;
                held.bytes += bytes;
            }
            None => {
                let held = Held {
                    hash: consumer_hash,
                    consumer: key.consumer_key.as_str().into(),
                    count: 1,
                    bytes,
                    order: VecDeque::new(),
                };
                inner.consumers.insert_unique(consumer_hash, held, |h| h.hash);
            }
        }
        inner.bytes += bytes;
        inner.in_flight += 1;
        Ok(Admission::Leader(Lease::until_settled(generation)))
    }

    /// [`IdempotencyStore::cancel`]: removes the record in flight `attempt` claimed (its followers
    /// are answered `CANCELLED`: nothing ran), or remembers `attempt` among the last
    /// [`CANCELLED_KEPT`] cancelled ones. (In memory an admission is carried out when its future is
    /// first polled, or never, so a claim nobody learnt of cannot arise; this keeps the contract.)
    fn cancel_now(&self, key: &IdempotencyKey, attempt: Attempt) {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.lock();
        let inner = &mut *guard;
        let claimed = inner.records.find(hash, |e| e.is(&inner.pages, key)).and_then(|entry| match &entry.record {
            Record::InFlight { attempt: claimed, .. } if *claimed == attempt => Some(entry.slot()),
            _ => None,
        });
        let gone = match claimed {
            Some(this) => {
                let gone = inner.remove(this);
                inner.in_flight -= 1;
                inner.compact();
                gone
            }
            None => {
                if inner.cancelled.len() == CANCELLED_KEPT {
                    inner.cancelled.pop_front();
                }
                inner.cancelled.push_back(attempt);
                None
            }
        };
        drop(guard);
        // Dropping the record's channel (outside the lock) answers its followers.
        drop(gone);
    }

    fn settle_now(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        // What a stored record keeps, written before the lock is taken: its key and the result's
        // JSON, or, when it is over the limit, that it was withheld; and whether it is an unknown
        // outcome. (A settlement that turns out not to hold the record wastes this work; a valid
        // one never waits on it under the lock.) The result itself goes to the followers, if any.
        let kept = match &settlement {
            Settlement::Store { result, expires_at } if *expires_at > now => Some(self.stored_form(key, result)),
            _ => None,
        };
        match kept {
            // A result too long for a page gets its allocation here, not under the lock.
            Some((buf, spare)) if buf.len() > MAX_PAGED => {
                let own = Kept::Own(buf.into_boxed_slice());
                self.settle_locked(key, fingerprint, lease, settlement, Some((own, spare)))
            }
            Some((buf, spare)) => {
                let settled = self.settle_locked(key, fingerprint, lease, settlement, Some((Kept::Paged(&buf), spare)));
                keep_scratch(buf);
                settled
            }
            None => self.settle_locked(key, fingerprint, lease, settlement, None),
        }
    }

    /// [`MemoryIdempotencyStore::settle_now`] once the stored form, if any, is written: `kept`
    /// is the record's bytes (key and result) and whether it is an unknown outcome.
    fn settle_locked(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        kept: Option<(Kept<'_>, bool)>,
    ) -> Result<(), StoreError> {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.lock();
        let inner = &mut *guard;
        // Only this leader's record, in flight under its lease, is settled; any other is left
        // untouched.
        let Some(entry) = inner.records.find_mut(hash, |e| e.is(&inner.pages, key)) else {
            return Err(StoreError::LeaseLost);
        };
        let sender = match &mut entry.record {
            Record::InFlight { fingerprint: stored, sender, .. }
                if *stored == fingerprint && entry.generation == lease.token =>
            {
                sender.take()
            }
            _ => return Err(StoreError::LeaseLost),
        };
        let (this, consumer_hash, held_bytes, key_end) =
            (entry.slot(), entry.consumer_hash, entry.bytes, entry.key_end);
        let consumer = key.consumer_key.as_bytes();
        inner.in_flight -= 1;
        let for_followers = match (settlement, kept) {
            (Settlement::Store { result, expires_at }, Some((kept, spare))) => {
                let result_bytes = kept.len() - key_end;
                // Room for it comes from stored results only (never from this record, which is
                // in flight until it is stored below).
                inner.make_room(consumer_hash, consumer, result_bytes, self.per_consumer_bytes, self.max_bytes);
                inner.bytes += result_bytes;
                let generation = inner.next_generation();
                let stored = Slot { hash, generation };
                if inner.expiring.back().is_none_or(|(last, _)| *last <= expires_at) {
                    inner.expiring.push_back((expires_at, stored));
                } else {
                    inner.expiries.insert((expires_at, generation), hash);
                }
                inner.order.push_back(stored);
                // The consumer holds this record (counted at admission), so its entry exists.
                if let Some(held) = inner.held_mut(consumer_hash, consumer) {
                    held.bytes += result_bytes;
                    held.order.push_back(stored);
                }
                if let Some(entry) = inner.records.find_mut(hash, |e| e.generation == this.generation) {
                    entry.generation = generation;
                    entry.bytes = held_bytes + result_bytes;
                    entry.record = Record::Done { fingerprint, spare, expires_at };
                    let data = match kept {
                        Kept::Paged(bytes) => inner.pages.write(stored, &[bytes]),
                        Kept::Own(own) => Bytes::Own(own),
                    };
                    inner.pages.free(std::mem::replace(&mut entry.data, data));
                }
                inner.compact_consumer_order(consumer_hash, consumer);
                Some(result)
            }
            // Already expired, or not cacheable: the followers get it and the record goes.
            (Settlement::Store { result, .. } | Settlement::Release { result }, _) => {
                // The record's channel was taken above.
                drop(inner.remove(this));
                Some(result)
            }
        };
        inner.compact_order();
        inner.compact();
        drop(guard);
        // Hand the result over (or drop it) outside the lock: waking followers must not contend
        // with it.
        if let (Some(sender), Some(result)) = (sender, for_followers) {
            sender.send_replace(Some(result));
        }
        Ok(())
    }

    /// What the record of `key` keeps once `result` is stored: the key, then the result's JSON
    /// text or, over [`MemoryStoreConfig::max_result_bytes`], that of `EXECUTION_FAILED {reason:
    /// output-too-large}` ([`write_record`]), in this thread's scratch buffer; and whether it is
    /// an unknown outcome ([`awaits_reconciliation`]).
    fn stored_form(&self, key: &IdempotencyKey, result: &InvokeResult) -> (Vec<u8>, bool) {
        let mut buf = scratch();
        write_record(&mut buf, key, result);
        let key_len = key.consumer_key.len() + key.invocation_id.len();
        if buf.len() - key_len <= self.max_result_bytes {
            return (buf, awaits_reconciliation(result));
        }
        let withheld = AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge);
        write_record(&mut buf, key, &InvokeResult::error(withheld.into_payload(), None));
        (buf, false)
    }
}

/// A stored record's bytes on their way into the store: in the thread's scratch buffer, to be
/// copied into a page, or, too long for one, in an allocation of their own made before the lock.
enum Kept<'a> {
    Paged(&'a [u8]),
    Own(Box<[u8]>),
}

impl Kept<'_> {
    fn len(&self) -> usize {
        match self {
            Kept::Paged(bytes) => bytes.len(),
            Kept::Own(own) => own.len(),
        }
    }
}

/// Whether the record at `slot` is a stored result.
fn is_live_done(records: &HashTable<Entry>, slot: Slot) -> bool {
    matches!(
        records.find(slot.hash, |e| e.generation == slot.generation),
        Some(Entry { record: Record::Done { .. }, .. })
    )
}

impl Inner {
    fn next_generation(&mut self) -> u64 {
        let generation = self.next_generation;
        self.next_generation += 1;
        generation
    }

    fn held(&self, hash: u64, consumer: &[u8]) -> Option<&Held> {
        self.consumers.find(hash, |h| h.consumer.as_bytes() == consumer)
    }

    fn held_mut(&mut self, hash: u64, consumer: &[u8]) -> Option<&mut Held> {
        self.consumers.find_mut(hash, |h| h.consumer.as_bytes() == consumer)
    }

    /// Removes the record at `slot`, if it is there: its bytes freed and its consumer's counts
    /// updated; what it was.
    fn remove(&mut self, slot: Slot) -> Option<Record> {
        let found = self.records.find_entry(slot.hash, |e| e.generation == slot.generation).ok()?;
        let gone = found.remove().0;
        let consumer = &self.pages.get(&gone.data)[..gone.split];
        release(&mut self.consumers, &mut self.bytes, gone.consumer_hash, consumer, gone.bytes);
        self.pages.free(gone.data);
        Some(gone.record)
    }

    /// Moves the records of sparse pages into the page being written while the pages hold far
    /// more than the records, at most [`COMPACTED_AT_ONCE`] pages ([`pages`]).
    fn compact(&mut self) {
        for _ in 0..COMPACTED_AT_ONCE {
            let Some(page) = self.pages.next_to_compact() else { return };
            for (slot, start) in self.pages.records_in(page) {
                let Some(entry) = self.records.find_mut(slot.hash, |e| e.generation == slot.generation) else {
                    continue;
                };
                if matches!(entry.data, Bytes::Paged { page: p, start: s, .. } if p == page && s == start)
                    && let Some(moved) = self.pages.moved(&entry.data)
                {
                    entry.data = moved;
                }
            }
        }
    }

    /// Whether the stored result at `slot` is spared by eviction; `None` when `slot` is not a
    /// stored result (any more).
    fn spared(&self, slot: Slot) -> Option<bool> {
        match self.records.find(slot.hash, |e| e.generation == slot.generation) {
            Some(Entry { record: Record::Done { spare, .. }, .. }) => Some(*spare),
            _ => None,
        }
    }

    /// Drops every stored result whose expiry is at or before `now`, and stale queue heads.
    fn sweep(&mut self, now: Timestamp) {
        while let Some(&(expires_at, slot)) = self.expiring.front() {
            if expires_at > now {
                break;
            }
            self.expiring.pop_front();
            self.remove(slot);
        }
        while let Some(entry) = self.expiries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let generation = entry.key().1;
            let hash = entry.remove();
            self.remove(Slot { hash, generation });
        }
        while let Some(&slot) = self.order.front() {
            if is_live_done(&self.records, slot) {
                break;
            }
            self.order.pop_front();
        }
    }

    /// Evicts the stored result at `slot` (known to be one).
    fn evict(&mut self, slot: Slot) {
        if let Some(Record::Done { expires_at, .. }) = self.remove(slot) {
            self.expiries.remove(&(expires_at, slot.generation));
        }
    }

    /// Evicts the stored result settled longest ago, sparing unknown outcomes (up to
    /// [`MAX_SPARED`] of them per eviction); false when every record is in flight.
    fn evict_oldest_done(&mut self) -> bool {
        let mut spared = 0;
        while let Some(slot) = self.order.pop_front() {
            let Some(spare) = self.spared(slot) else { continue };
            if spared < MAX_SPARED && spare {
                spared += 1;
                self.order.push_back(slot);
                continue;
            }
            self.evict(slot);
            return true;
        }
        false
    }

    /// Evicts the stored result `consumer` (whose key hashes to `hash`) settled longest ago;
    /// false when all of its records are in flight.
    fn evict_oldest_done_of(&mut self, hash: u64, consumer: &[u8]) -> bool {
        let mut spared = 0;
        loop {
            let Some(slot) = self.held_mut(hash, consumer).and_then(|h| h.order.pop_front()) else {
                return false;
            };
            let Some(spare) = self.spared(slot) else { continue };
            if spared < MAX_SPARED && spare {
                spared += 1;
                if let Some(held) = self.held_mut(hash, consumer) {
                    held.order.push_back(slot);
                }
                continue;
            }
            self.evict(slot);
            return true;
        }
    }

    /// Evicts stored results until `bytes` more fit: `consumer`'s own first (within
    /// `per_consumer`), then anyone's (within `max`). Stops when nothing is left to evict.
    fn make_room(&mut self, hash: u64, consumer: &[u8], bytes: usize, per_consumer: usize, max: usize) {
        while self.held(hash, consumer).map_or(0, |h| h.bytes) + bytes > per_consumer {
            if !self.evict_oldest_done_of(hash, consumer) {
                break;
            }
        }
        while self.bytes + bytes > max {
            if !self.evict_oldest_done() {
                break;
            }
        }
    }

    /// Keeps a consumer's settle-order queue within a constant factor of its records.
    fn compact_consumer_order(&mut self, hash: u64, consumer: &[u8]) {
        let Some(held) = self.consumers.find_mut(hash, |h| h.consumer.as_bytes() == consumer) else { return };
        if held.order.len() > 2 * held.count + 64 {
            let records = &self.records;
            held.order.retain(|slot| is_live_done(records, *slot));
        }
    }

    /// Keeps the settle-order queue within a constant factor of the live records: stale entries
    /// pile up behind a long-lived head when results expire or are replaced out of order.
    fn compact_order(&mut self) {
        let records = &self.records;
        if self.order.len() > 2 * records.len() + 64 {
            self.order.retain(|slot| is_live_done(records, *slot));
        }
        if self.expiring.len() > 2 * records.len() + 64 {
            self.expiring.retain(|(_, slot)| is_live_done(records, *slot));
        }
    }
}

/// Counts one record of `consumer` (whose key hashes to `hash`), holding `bytes`, gone from
/// `consumers` and from the `total` the records hold; forgets the consumer when it holds none.
fn release(consumers: &mut HashTable<Held>, total: &mut usize, hash: u64, consumer: &[u8], bytes: usize) {
    *total = total.saturating_sub(bytes);
    if let Ok(mut found) = consumers.find_entry(hash, |h| h.consumer.as_bytes() == consumer) {
        let held = found.get_mut();
        held.count = held.count.saturating_sub(1);
        held.bytes = held.bytes.saturating_sub(bytes);
        if held.count == 0 {
            found.remove();
        }
    }
}

/// How many unknown outcomes one eviction passes over (moving them to the back of the queue)
/// before it takes the oldest result whatever it is. Bounded, so that a store full of unknown
/// outcomes still makes room in constant time.
const MAX_SPARED: usize = 16;

/// Whether a stored result is an unknown outcome (`EXECUTION_FAILED {reason: outcome-unknown}`):
/// the agent is told to reconcile under the same invocation id, which only this record can answer,
/// so under pressure it is evicted after other results.
fn awaits_reconciliation(result: &InvokeResult) -> bool {
    result.error_payload().is_some_and(|p| {
        p.code() == agent_surface_core::ErrorCode::ExecutionFailed
            && p.detail("reason").and_then(serde_json::Value::as_str) == Some("outcome-unknown")
    })
}

/// The future a follower awaits: the leader's result, or `CANCELLED` if the record vanished
/// (its sender dropped: the record was evicted, or the store is going away). For stores that keep
/// their followers in this process (the memory store, an embedded store) and settle them through a
/// `watch` channel; [`Admission::Follower`] carries it.
pub fn follow(
    mut receiver: watch::Receiver<Option<InvokeResult>>,
    invocation_id: String,
) -> BoxFuture<'static, InvokeResult> {
    Box::pin(async move {
        let settled = match receiver.wait_for(Option::is_some).await {
            Ok(result) => result.clone(),
            Err(_) => None,
        };
        settled
            .unwrap_or_else(|| InvokeResult::error(AgentSurfaceError::cancelled().into_payload(), Some(invocation_id)))
    })
}

impl Default for MemoryIdempotencyStore {
    fn default() -> Self {
        MemoryIdempotencyStore::new(MemoryStoreConfig::default())
    }
}

impl fmt::Debug for MemoryIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryIdempotencyStore").field("capacity", &self.capacity).field("len", &self.len()).finish()
    }
}

impl IdempotencyStore for MemoryIdempotencyStore {
    fn reach(&self) -> crate::Reach {
        crate::Reach::Process
    }

    fn usage(&self) -> Option<StoreUsage> {
        let inner = self.lock();
        Some(StoreUsage::entries(inner.records.len()).with_bytes(inner.bytes))
    }

    fn admit<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: Attempt,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Admission, StoreError>> {
        Box::pin(async move { self.admit_now(key, fingerprint, attempt, now) })
    }

    fn cancel<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        attempt: Attempt,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.cancel_now(key, attempt);
            Ok(())
        })
    }

    fn settle<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Lease,
        settlement: Settlement,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.settle_now(key, fingerprint, lease, settlement, now) })
    }

    /// Nothing to renew: a lease here holds until it is settled.
    fn renew<'a>(
        &'a self,
        _key: &'a IdempotencyKey,
        _lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Nothing to mark: a lease here holds until it is settled (no admission can take the record
    /// over), and an admission is carried out when its caller first polls it, or not at all.
    fn start<'a>(
        &'a self,
        _key: &'a IdempotencyKey,
        _lease: Lease,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(ms)
    }

    /// The lease of the leader holding `key`'s record in flight.
    fn held(store: &MemoryIdempotencyStore, key: &IdempotencyKey) -> Lease {
        let hash = store.hasher.hash_one(key);
        let inner = store.lock();
        let entry = inner.records.find(hash, |e| e.is(&inner.pages, key)).expect("a record in flight");
        assert!(matches!(entry.record, Record::InFlight { .. }));
        Lease::until_settled(entry.generation)
    }

    /// Short-lived results expiring behind a long-lived head of the settle queue must not make
    /// the queue grow without bound.
    #[test]
    fn the_settle_queue_stays_proportional_to_the_records() {
        let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(1_000));
        let fp = Fingerprint::of(&serde_json::json!(1));
        let result = InvokeResult::ok(serde_json::json!(null), None);
        let settle = |key: &IdempotencyKey, expires_at, now| {
            let admitted = store.admit(key, fp, Attempt::fresh(), now).now_or_never();
            assert!(matches!(admitted, Some(Ok(Admission::Leader(_)))));
            let settlement = Settlement::Store { result: result.clone(), expires_at };
            assert!(matches!(store.settle(key, fp, held(&store, key), settlement, now).now_or_never(), Some(Ok(()))));
        };
        settle(&IdempotencyKey::new("c", "head"), at(u64::MAX), at(0));
        for i in 0..10_000 {
            settle(&IdempotencyKey::new("c", format!("k{i}")), at(i + 1), at(i));
            let inner = store.lock();
            assert!(inner.order.len() <= 2 * inner.records.len() + 65, "{} queued", inner.order.len());
            assert_expiries_indexed(&inner);
        }
        assert_eq!(store.len(), 2);
    }

    /// Every stored result is indexed by its expiry once, and stale entries stay proportional to
    /// the records.
    fn assert_expiries_indexed(inner: &Inner) {
        let live = inner.expiring.iter().filter(|(_, slot)| is_live_done(&inner.records, *slot)).count();
        let done = inner.records.iter().filter(|e| matches!(e.record, Record::Done { .. })).count();
        assert_eq!(live + inner.expiries.len(), done);
        assert!(inner.expiring.len() <= 2 * inner.records.len() + 65, "{} indexed", inner.expiring.len());
    }

    /// Results settled in order of expiry are indexed by a push, and results evicted before they
    /// expire do not make that index grow without bound; each expires on time.
    #[test]
    fn the_expiry_index_stays_proportional_and_expires_in_order() {
        let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(100));
        let fp = Fingerprint::of(&serde_json::json!(1));
        let result = InvokeResult::ok(serde_json::json!(null), None);
        for i in 0..10_000 {
            let key = IdempotencyKey::new("c", format!("k{i}"));
            assert!(matches!(
                store.admit(&key, fp, Attempt::fresh(), at(i)).now_or_never(),
                Some(Ok(Admission::Leader(_)))
            ));
            let settlement = Settlement::Store { result: result.clone(), expires_at: at(i + 1_000_000) };
            assert!(matches!(
                store.settle(&key, fp, held(&store, &key), settlement, at(i)).now_or_never(),
                Some(Ok(()))
            ));
            assert_expiries_indexed(&store.lock());
        }
        assert_eq!(store.len(), 100);
        // One settled out of order (an earlier expiry) goes to the exact index.
        let key = IdempotencyKey::new("c", "early");
        assert!(matches!(
            store.admit(&key, fp, Attempt::fresh(), at(10_000)).now_or_never(),
            Some(Ok(Admission::Leader(_)))
        ));
        let settlement = Settlement::Store { result: result.clone(), expires_at: at(10_001) };
        store.settle(&key, fp, held(&store, &key), settlement, at(10_000)).now_or_never().unwrap().unwrap();
        assert_eq!(store.lock().expiries.len(), 1);
        assert_expiries_indexed(&store.lock());
        // Each goes at its expiry: the early one first, then the rest in order.
        let _ = leader(&store, &IdempotencyKey::new("d", "sweep-1"), at(10_001));
        assert!(matches!(leader(&store, &key, at(10_002)), Ok(Admission::Leader(_))), "expired, so led again");
        let middle = IdempotencyKey::new("c", "k9950");
        assert!(matches!(leader(&store, &middle, at(1_009_949)), Ok(Admission::Replay(_))));
        assert!(matches!(leader(&store, &middle, at(1_009_950)), Ok(Admission::Leader(_))), "expired at 1,009,950");
        let last = IdempotencyKey::new("c", "k9999");
        assert!(matches!(leader(&store, &last, at(1_009_998)), Ok(Admission::Replay(_))));
        assert!(matches!(leader(&store, &last, at(1_009_999)), Ok(Admission::Leader(_))), "expired at 1,009,999");
    }

    fn leader(store: &MemoryIdempotencyStore, key: &IdempotencyKey, now: Timestamp) -> Result<Admission, StoreError> {
        store.admit(key, Fingerprint::of(&serde_json::json!(1)), Attempt::fresh(), now).now_or_never().expect("ready")
    }

    fn store_result(store: &MemoryIdempotencyStore, key: &IdempotencyKey, now: Timestamp) {
        let fp = Fingerprint::of(&serde_json::json!(1));
        let result = InvokeResult::ok(serde_json::json!(key.invocation_id), None);
        let settlement = Settlement::Store { result, expires_at: at(1_000_000) };
        store.settle(key, fp, held(store, key), settlement, now).now_or_never().expect("ready").unwrap();
    }

    /// A consumer at its quota evicts its own oldest result, never another consumer's; with all
    /// of its records in flight it is refused, and others are still admitted.
    #[test]
    fn one_consumer_cannot_push_out_anothers_results() {
        let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(100).with_per_consumer(3));
        let victim = IdempotencyKey::new("victim", "pay-1");
        assert!(matches!(leader(&store, &victim, at(0)), Ok(Admission::Leader(_))));
        store_result(&store, &victim, at(0));
        for i in 0..50 {
            let key = IdempotencyKey::new("flood", format!("k{i}"));
            assert!(matches!(leader(&store, &key, at(1)), Ok(Admission::Leader(_))), "{i}");
            store_result(&store, &key, at(1));
        }
        assert_eq!(store.len(), 4, "the flood holds its quota of 3, the victim its 1");
        // The victim's retry is still a replay.
        assert!(matches!(leader(&store, &victim, at(2)), Ok(Admission::Replay(_))));
        // The flood's oldest went first: k47..k49 remain.
        assert!(matches!(leader(&store, &IdempotencyKey::new("flood", "k49"), at(2)), Ok(Admission::Replay(_))));
        assert!(matches!(leader(&store, &IdempotencyKey::new("flood", "k46"), at(2)), Ok(Admission::Leader(_))));

        // All of a consumer's records in flight: refused; another consumer is admitted.
        let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(100).with_per_consumer(2));
        for i in 0..2 {
            assert!(matches!(
                leader(&store, &IdempotencyKey::new("busy", format!("k{i}")), at(0)),
                Ok(Admission::Leader(_))
            ));
        }
        assert_eq!(
            leader(&store, &IdempotencyKey::new("busy", "k2"), at(0)).err(),
            Some(StoreError::ConsumerFull { quota: 2 })
        );
        assert!(matches!(leader(&store, &IdempotencyKey::new("other", "k0"), at(0)), Ok(Admission::Leader(_))));
    }

    /// Under pressure an unknown outcome, which a reconcile call needs, goes after other results.
    #[test]
    fn unknown_outcomes_are_evicted_last() {
        let fp = Fingerprint::of(&serde_json::json!(1));
        let unknown = InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), None);
        for store in [
            // The per-consumer quota makes room, then the global capacity does.
            MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(100).with_per_consumer(3)),
            MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(3).with_per_consumer(100)),
        ] {
            let pending = IdempotencyKey::new("c", "pay-1");
            assert!(matches!(leader(&store, &pending, at(0)), Ok(Admission::Leader(_))));
            let settlement = Settlement::Store { result: unknown.clone(), expires_at: at(1_000_000) };
            store.settle(&pending, fp, held(&store, &pending), settlement, at(0)).now_or_never().unwrap().unwrap();
            for i in 0..5 {
                let key = IdempotencyKey::new("c", format!("k{i}"));
                assert!(matches!(leader(&store, &key, at(1)), Ok(Admission::Leader(_))));
                store_result(&store, &key, at(1));
            }
            assert_eq!(store.len(), 3);
            assert!(
                matches!(leader(&store, &pending, at(2)), Ok(Admission::Replay(r)) if r == unknown),
                "the unknown outcome is still there to reconcile"
            );
        }
    }

    /// A stored record is its key, then its result's JSON text, in the store's pages, of exactly
    /// the length the byte budgets count (with the fixed overhead), and a replay reads it back.
    #[test]
    fn a_stored_record_is_its_key_and_result_in_the_pages() {
        let store = MemoryIdempotencyStore::default();
        let key = IdempotencyKey::new("consumer-1", "inv-42");
        assert!(matches!(leader(&store, &key, at(0)), Ok(Admission::Leader(_))));
        {
            let inner = store.lock();
            let entry = inner.records.iter().next().expect("the record in flight");
            assert!(matches!(entry.data, Bytes::Paged { .. }));
            assert_eq!(inner.pages.get(&entry.data), b"consumer-1inv-42", "in flight, the record holds its key only");
            assert_eq!(entry.bytes, entry.data.len() + RECORD_OVERHEAD);
        }
        store_result(&store, &key, at(0));
        let text = serde_json::to_vec(&InvokeResult::ok(serde_json::json!("inv-42"), None)).unwrap();
        {
            let inner = store.lock();
            let entry = inner.records.iter().next().expect("the stored record");
            assert!(entry.is(&inner.pages, &key));
            assert_eq!(entry.result_text(&inner.pages), &text[..]);
            assert_eq!(entry.data.len(), "consumer-1inv-42".len() + text.len(), "no slack beyond the bytes counted");
            assert_eq!(entry.bytes, entry.data.len() + RECORD_OVERHEAD);
            assert_eq!(inner.bytes, entry.bytes);
        }
        assert!(
            matches!(leader(&store, &key, at(1)), Ok(Admission::Replay(r)) if r == InvokeResult::ok(serde_json::json!("inv-42"), None))
        );
        // Another key of the same consumer is not this record, though its bytes run on the same.
        assert!(matches!(
            leader(&store, &IdempotencyKey::new("consumer-1inv", "-42"), at(1)),
            Ok(Admission::Leader(_))
        ));
    }

    /// A result longer than a page takes allocates on its own, is read back whole, and the buffer
    /// a thread writes results into does not keep its size.
    #[test]
    fn a_large_result_is_kept_whole_and_not_in_the_threads_scratch_buffer() {
        let store = MemoryIdempotencyStore::new(MemoryStoreConfig::default().with_max_result_bytes(usize::MAX));
        let key = IdempotencyKey::new("c", "k");
        let large = InvokeResult::ok(serde_json::json!("x".repeat(4 * SCRATCH_KEPT)), None);
        assert!(matches!(leader(&store, &key, at(0)), Ok(Admission::Leader(_))));
        let fp = Fingerprint::of(&serde_json::json!(1));
        let settle = Settlement::Store { result: large.clone(), expires_at: at(1_000) };
        store.settle(&key, fp, held(&store, &key), settle, at(0)).now_or_never().unwrap().unwrap();
        {
            let inner = store.lock();
            let entry = inner.records.iter().next().expect("the stored record");
            assert!(matches!(entry.data, Bytes::Own(_)), "a record over a quarter page is not paged");
            assert_eq!(entry.data.len(), 2 + serde_json::to_vec(&large).unwrap().len());
        }
        assert!(scratch_capacity() <= SCRATCH_KEPT, "{} bytes kept", scratch_capacity());
        let replayed = store.admit(&key, fp, Attempt::fresh(), at(1)).now_or_never().unwrap();
        assert!(matches!(replayed, Ok(Admission::Replay(r)) if r == large));
        let mut buf = Vec::new();
        write_record(&mut buf, &key, &InvokeResult::ok(serde_json::json!(1), None));
        assert_eq!(&buf[2..], &serde_json::to_vec(&InvokeResult::ok(serde_json::json!(1), None)).unwrap()[..]);
    }

    /// Records removed out of the order they were written (here: most expire early, one in
    /// sixteen late) leave a few in each page; the pages' survivors are moved together, so the
    /// pages hold at most about twice the records' bytes, and every survivor reads back as its
    /// own.
    #[test]
    fn scattered_survivors_do_not_pin_a_page_each() {
        let store =
            MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(1_000_000).with_per_consumer(1_000_000));
        let fp = Fingerprint::of(&serde_json::json!(1));
        let result = |i: usize| InvokeResult::ok(serde_json::json!({"call": i, "pad": "p".repeat(200)}), None);
        let n = 20_000;
        for i in 0..n {
            let key = IdempotencyKey::new("consumer", format!("call-{i}"));
            assert!(matches!(leader(&store, &key, at(0)), Ok(Admission::Leader(_))));
            let expires_at = if i % 16 == 0 { at(1_000_000) } else { at(100 + i as u64) };
            let settle = Settlement::Store { result: result(i), expires_at };
            store.settle(&key, fp, held(&store, &key), settle, at(0)).now_or_never().unwrap().unwrap();
        }
        let written = store.lock().pages.memory();
        // Every short-lived record expires at the next admission; each admission after it
        // compacts a few pages.
        assert!(matches!(
            leader(&store, &IdempotencyKey::new("other", "sweep"), at(500_000)),
            Ok(Admission::Leader(_))
        ));
        for i in (0..n).step_by(16) {
            let key = IdempotencyKey::new("consumer", format!("call-{i}"));
            let replayed = store.admit(&key, fp, Attempt::fresh(), at(500_001)).now_or_never().unwrap();
            assert!(matches!(replayed, Ok(Admission::Replay(r)) if r == result(i)), "call-{i}");
        }
        let inner = store.lock();
        assert_eq!(inner.records.len(), n / 16 + 1);
        assert_eq!(inner.pages.check(), Ok(()));
        let live: usize = inner.records.iter().map(|e| pages::HEADER + e.data.len()).sum();
        let memory = inner.pages.memory();
        assert!(
            memory <= 2 * live + 8 * pages::PAGE_BYTES,
            "{memory} bytes of pages for {live} bytes of records (written: {written})"
        );
    }

    /// A record of no bytes (an empty consumer key and invocation id, which the Rust API
    /// allows) still takes its place in a page: removing it after the rest of its page was
    /// removed empties the page once, not twice.
    #[test]
    fn an_empty_key_empties_its_page_once() {
        let store =
            MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(1_000_000).with_per_consumer(1_000_000));
        let fp = Fingerprint::of(&serde_json::json!(1));
        let admit = |key: &IdempotencyKey| {
            let attempt = Attempt::fresh();
            assert!(matches!(store.admit(key, fp, attempt, at(0)).now_or_never().unwrap(), Ok(Admission::Leader(_))));
            (key.clone(), attempt)
        };
        let mut claims = vec![admit(&IdempotencyKey::new("c", "a")), admit(&IdempotencyKey::new("", ""))];
        // Enough keys to fill the page and go on to the next.
        claims.splice(1..1, (0..50).map(|i| admit(&IdempotencyKey::new("c", format!("{i:0>99}")))));
        for (key, attempt) in claims {
            store.cancel(&key, attempt, at(0)).now_or_never().unwrap().unwrap();
            assert_eq!(store.lock().pages.check(), Ok(()));
        }
        for i in 0..500 {
            let key = IdempotencyKey::new("d", format!("{i:0>60}"));
            admit(&key);
            store_result(&store, &key, at(0));
        }
        for i in 0..500 {
            let key = IdempotencyKey::new("d", format!("{i:0>60}"));
            let replayed = store.admit(&key, fp, Attempt::fresh(), at(1)).now_or_never().unwrap();
            assert!(
                matches!(replayed, Ok(Admission::Replay(ref r)) if *r == InvokeResult::ok(serde_json::json!(key.invocation_id), None))
            );
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Admits the key (consumer, id).
        Admit(usize, usize),
        /// Settles the `n`th record in flight: stored for `ttl` (0: released), `pad` bytes long.
        Settle(usize, u64, usize),
        /// Cancels the `n`th record in flight.
        Cancel(usize),
        /// Lets time pass.
        Wait(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..4usize, 0..400usize).prop_map(|(c, i)| Op::Admit(c, i)),
            4 => (0..64usize, prop_oneof![1 => Just(0u64), 6 => 1..200u64, 1 => Just(1_000_000u64)], prop_oneof![4 => 0..900usize, 1 => 2_000..3_000usize])
                .prop_map(|(n, ttl, pad)| Op::Settle(n, ttl, pad)),
            1 => (0..64usize).prop_map(Op::Cancel),
            2 => (1..30u64).prop_map(Op::Wait),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Whatever the order of admissions, settlements, cancellations, expiries and evictions,
        /// every record's bytes in the pages are its own key (and its result), a replay answers
        /// the result stored under that key and no other, and the pages hold at most about twice
        /// the records' bytes whenever no compaction is due, and once compaction has caught up.
        #[test]
        fn the_pages_keep_every_record_whole_and_bounded(ops in proptest::collection::vec(op(), 1..1_500)) {
            let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(300).with_per_consumer(200));
            let fp = Fingerprint::of(&serde_json::json!(1));
            let result = |key: &IdempotencyKey, pad: usize| {
                InvokeResult::ok(serde_json::json!({"id": key.invocation_id, "pad": "p".repeat(pad)}), None)
            };
            let mut now = 0u64;
            let mut in_flight: Vec<(IdempotencyKey, Attempt, Lease)> = Vec::new();
            let mut stored: std::collections::HashMap<IdempotencyKey, InvokeResult> = Default::default();
            let last = ops.len() - 1;
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Admit(c, i) => {
                        // Consumer 3 is the empty key, and call 0 its empty id: records of no bytes.
                        let consumer = if c == 3 { String::new() } else { format!("consumer-{c}") };
                        let id = if i == 0 { String::new() } else { format!("call-{i}") };
                        let key = IdempotencyKey::new(consumer, id);
                        let attempt = Attempt::fresh();
                        match store.admit(&key, fp, attempt, at(now)).now_or_never().expect("ready") {
                            Ok(Admission::Leader(lease)) => in_flight.push((key, attempt, lease)),
                            Ok(Admission::Replay(replayed)) => {
                                proptest::prop_assert_eq!(Some(&replayed), stored.get(&key), "{:?}", key);
                            }
                            _ => {}
                        }
                    }
                    Op::Settle(n, ttl, pad) if !in_flight.is_empty() => {
                        let (key, _, lease) = in_flight.swap_remove(n % in_flight.len());
                        let result = result(&key, pad);
                        let settlement = if ttl == 0 {
                            Settlement::Release { result }
                        } else {
                            stored.insert(key.clone(), result.clone());
                            Settlement::Store { result, expires_at: at(now + ttl) }
                        };
                        store.settle(&key, fp, lease, settlement, at(now)).now_or_never().expect("ready").unwrap();
                    }
                    Op::Cancel(n) if !in_flight.is_empty() => {
                        let (key, attempt, _) = in_flight.swap_remove(n % in_flight.len());
                        store.cancel(&key, attempt, at(now)).now_or_never().expect("ready").unwrap();
                    }
                    Op::Wait(ms) => now += ms,
                    _ => {}
                }
                let mut inner = store.lock();
                proptest::prop_assert!(inner.pages.check().is_ok(), "{:?}", inner.pages.check());
                if step % 8 == 0 {
                    // A burst of removals (an expiry sweep, evictions out of order) can leave the
                    // pages over their bound until compaction, two pages an operation, catches
                    // up: over it, a compaction must be due.
                    let (memory, live) = pages_against_records(&store, &inner, &stored)?;
                    proptest::prop_assert!(
                        memory <= 2 * live + 8 * pages::PAGE_BYTES || inner.pages.compaction_due(),
                        "{} bytes of pages for {} live, and no compaction due", memory, live
                    );
                }
                if step == last {
                    // Caught up, the pages hold within their bound, and every record moved
                    // reads back as its own.
                    let mut operations = 0;
                    while inner.pages.compaction_due() {
                        inner.compact();
                        operations += 1;
                        proptest::prop_assert!(operations <= 10_000, "compaction does not catch up");
                    }
                    proptest::prop_assert!(inner.pages.check().is_ok(), "{:?}", inner.pages.check());
                    let (memory, live) = pages_against_records(&store, &inner, &stored)?;
                    proptest::prop_assert!(
                        memory <= 2 * live + 8 * pages::PAGE_BYTES,
                        "{} bytes of pages for {} live after {} compactions", memory, live, operations
                    );
                }
            }
        }
    }

    /// Checks that every record's bytes in the pages are its own key (and the result stored
    /// under it); the pages' memory and the paged records' bytes, headers included.
    fn pages_against_records(
        store: &MemoryIdempotencyStore,
        inner: &Inner,
        stored: &std::collections::HashMap<IdempotencyKey, InvokeResult>,
    ) -> Result<(usize, usize), proptest::test_runner::TestCaseError> {
        let mut live = 0;
        for entry in inner.records.iter() {
            let data = inner.pages.get(&entry.data);
            proptest::prop_assert_eq!(data.len(), entry.data.len());
            let consumer = std::str::from_utf8(&data[..entry.split]).unwrap();
            let id = std::str::from_utf8(&data[entry.split..entry.key_end]).unwrap();
            let key = IdempotencyKey::new(consumer, id);
            proptest::prop_assert_eq!(store.hasher.hash_one(&key), entry.hash, "the bytes are the record's key");
            if let Record::Done { .. } = entry.record {
                let kept: InvokeResult = serde_json::from_slice(entry.result_text(&inner.pages)).unwrap();
                proptest::prop_assert_eq!(Some(&kept), stored.get(&key));
            }
            if matches!(entry.data, Bytes::Paged { .. }) {
                live += pages::HEADER + entry.data.len();
            }
        }
        Ok((inner.pages.memory(), live))
    }

    /// The per-consumer bookkeeping follows every way a record goes: expiry, release, eviction.
    #[test]
    fn consumer_counts_follow_every_removal() {
        let store = MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(4).with_per_consumer(4));
        let fp = Fingerprint::of(&serde_json::json!(1));
        // Released (not cacheable).
        let k = IdempotencyKey::new("a", "r");
        assert!(matches!(leader(&store, &k, at(0)), Ok(Admission::Leader(_))));
        let release = Settlement::Release { result: InvokeResult::ok(serde_json::json!(1), None) };
        store.settle(&k, fp, held(&store, &k), release, at(0)).now_or_never().unwrap().unwrap();
        // Expired.
        let k = IdempotencyKey::new("a", "e");
        assert!(matches!(leader(&store, &k, at(0)), Ok(Admission::Leader(_))));
        let short = Settlement::Store { result: InvokeResult::ok(serde_json::json!(1), None), expires_at: at(5) };
        store.settle(&k, fp, held(&store, &k), short, at(0)).now_or_never().unwrap().unwrap();
        let _ = leader(&store, &IdempotencyKey::new("b", "sweep"), at(10));
        // Evicted globally by other consumers.
        for i in 0..6 {
            let key = IdempotencyKey::new("c", format!("k{i}"));
            if matches!(leader(&store, &key, at(11)), Ok(Admission::Leader(_))) {
                store_result(&store, &key, at(11));
            }
        }
        let inner = store.lock();
        let counted: usize = inner.consumers.iter().map(|h| h.count).sum();
        assert_eq!(counted, inner.records.len());
        let bytes: usize = inner.records.iter().map(|e| e.bytes).sum();
        assert_eq!(inner.bytes, bytes, "the byte total is the records' bytes");
        assert_eq!(inner.consumers.iter().map(|h| h.bytes).sum::<usize>(), bytes);
        let in_flight = inner.records.iter().filter(|e| matches!(e.record, Record::InFlight { .. })).count();
        assert_eq!(inner.in_flight, in_flight);
        assert!(!inner.consumers.iter().any(|h| &*h.consumer == "a"), "a consumer holding nothing is forgotten");
    }
}
