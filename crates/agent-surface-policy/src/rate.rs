//! Rate limits and the action queue (phase 6): [`MemoryRateLimiter`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_surface_core::Timestamp;
use agent_surface_core::details::RateLimitReason;
use futures_util::future::{BoxFuture, Either};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::clock::{Clock, SystemClock};
use crate::hooks::{CallInfo, RateDecision, RateLimiter, Scope};

const NANOS_PER_MILLI: u64 = 1_000_000;

/// A rate: at most `limit` calls per `period`, with bursts of up to `limit` calls.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use agent_surface_policy::Quota;
///
/// let q = Quota::per_second(NonZeroU32::new(10).unwrap());
/// assert_eq!(q.period(), Duration::from_secs(1));
/// assert_eq!(q.emission_interval(), Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    limit: NonZeroU32,
    period: Duration,
}

impl Quota {
    /// `limit` calls per `period`. A period under one millisecond counts as one millisecond (the
    /// pipeline's clock has millisecond precision).
    pub fn new(limit: NonZeroU32, period: Duration) -> Quota {
        Quota { limit, period: period.max(Duration::from_millis(1)) }
    }

    /// `limit` calls per second.
    pub fn per_second(limit: NonZeroU32) -> Quota {
        Quota::new(limit, Duration::from_secs(1))
    }

    /// `limit` calls per minute.
    pub fn per_minute(limit: NonZeroU32) -> Quota {
        Quota::new(limit, Duration::from_secs(60))
    }

    /// The most calls per period (and the largest burst).
    pub fn limit(&self) -> NonZeroU32 {
        self.limit
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The steady-state spacing between calls (`period / limit`, at least one nanosecond).
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.emission_ns())
    }

    fn emission_ns(&self) -> u64 {
        let period = u64::try_from(self.period.as_nanos()).unwrap_or(u64::MAX);
        (period / u64::from(self.limit.get())).max(1)
    }

    /// How far ahead of schedule a bucket may run: room for a burst of `limit` calls.
    fn tolerance_ns(&self) -> u64 {
        self.emission_ns().saturating_mul(u64::from(self.limit.get()) - 1)
    }
}

/// The bounded action queue of a [`MemoryRateLimiter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// How many calls may hold a slot (run phases 7–9) at once.
    pub max_concurrent: NonZeroUsize,
    /// How many calls may wait for a slot; one more is `RATE_LIMITED {reason: queue-full}`.
    pub max_waiting: usize,
    /// How long a call waits for a slot before it gives up with `queue-full`.
    pub max_wait: Duration,
    /// The hold time assumed for the `retryAfterMs` estimate before any call has released a
    /// slot.
    pub initial_hold_estimate: Duration,
}

impl Default for QueueConfig {
    /// 64 concurrent calls, 256 waiting, for at most 30 s; 1 s assumed hold time.
    fn default() -> QueueConfig {
        QueueConfig {
            max_concurrent: NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN),
            max_waiting: 256,
            max_wait: Duration::from_secs(30),
            initial_hold_estimate: Duration::from_secs(1),
        }
    }
}

/// Which rate budgets ("buckets") a call needs: the budget part of a [`RateLimitConfig`], and
/// the whole configuration of the shared limiter of `agent-surface-redis`, so that both take
/// from the same buckets.
///
/// Four kinds of bucket, each optional; a call takes one unit from every one that applies to it,
/// or from none. "Consumer" here means the caller's **principal** ([`Consumer::principal`](crate::Consumer::principal)): the
/// signed-in user, whatever session, consumer header or transport the call came through (so a
/// user cannot widen a budget by opening another session), and for an anonymous caller its
/// consumer key.
///
/// | field | one bucket per | e.g. |
/// |---|---|---|
/// | `per_consumer` | consumer (all its calls) | 600 calls per minute per consumer |
/// | `per_capability`, `capability_quotas` | capability (all consumers) | 100 `shipping.quote` per second |
/// | `consumer_quotas`, [`Scope::Capability`] | consumer × capability | 5 `tickets.create` per minute per user |
/// | `consumer_quotas`, [`Scope::Type`] | consumer × type | 20 `tickets.*` per minute per user |
///
/// ```
/// use std::collections::HashMap;
/// use std::num::NonZeroU32;
/// use agent_surface_core::Effect;
/// use agent_surface_policy::{CallInfo, Consumer, Quota, RateBudgets, Scope, rate::BucketKind};
///
/// let five = Quota::per_minute(NonZeroU32::new(5).unwrap());
/// let budgets = RateBudgets {
///     consumer_quotas: HashMap::from([(Scope::capability("tickets.create"), five)]),
///     ..Default::default()
/// };
/// let alice = Consumer::anonymous("alice");
/// let create = CallInfo::new(&alice, "tickets.create", "tickets", Effect::Write, false);
/// let buckets: Vec<_> = budgets.buckets(&create).collect();
/// assert_eq!(buckets.len(), 1);
/// assert_eq!(buckets[0].kind, BucketKind::ConsumerCapability);
/// assert_eq!(buckets[0].id(), "tickets.create:alice");
/// let list = CallInfo::new(&alice, "tickets.list", "tickets", Effect::Read, true);
/// assert_eq!(budgets.buckets(&list).count(), 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateBudgets {
    /// The budget of each consumer, over all capabilities.
    pub per_consumer: Option<Quota>,
    /// The budget of each capability, over all consumers (unless overridden below).
    pub per_capability: Option<Quota>,
    /// Per-capability overrides of `per_capability`, by capability name; `None` exempts the
    /// capability from the per-capability budget.
    pub capability_quotas: HashMap<String, Option<Quota>>,
    /// The budget of each consumer for one capability ([`Scope::Capability`]) or for all the
    /// capabilities of one type together ([`Scope::Type`]). A call of a capability with both
    /// takes from both.
    pub consumer_quotas: HashMap<Scope, Quota>,
}

impl RateBudgets {
    /// The budget of `capability` over all consumers.
    pub fn capability_quota(&self, capability: &str) -> Option<Quota> {
        match self.capability_quotas.get(capability) {
            Some(overridden) => *overridden,
            None => self.per_capability,
        }
    }

    /// Whether no bucket applies to any call.
    pub fn is_empty(&self) -> bool {
        self.per_consumer.is_none()
            && self.per_capability.is_none()
            && self.capability_quotas.values().all(Option::is_none)
            && self.consumer_quotas.is_empty()
    }

    /// The buckets `call` takes a unit from, in a fixed order (consumer, capability, consumer ×
    /// capability, consumer × type).
    pub fn buckets<'a>(&'a self, call: &CallInfo<'a>) -> impl Iterator<Item = Bucket<'a>> + use<'a> {
        let consumer = call.consumer.principal();
        let scoped = |scope: Scope| {
            if self.consumer_quotas.is_empty() { None } else { self.consumer_quotas.get(&scope).copied() }
        };
        [
            self.per_consumer.map(|quota| Bucket {
                kind: BucketKind::Consumer,
                consumer: Some(consumer),
                scope: None,
                quota,
            }),
            self.capability_quota(call.capability).map(|quota| Bucket {
                kind: BucketKind::Capability,
                consumer: None,
                scope: Some(call.capability),
                quota,
            }),
            scoped(Scope::capability(call.capability)).map(|quota| Bucket {
                kind: BucketKind::ConsumerCapability,
                consumer: Some(consumer),
                scope: Some(call.capability),
                quota,
            }),
            scoped(Scope::capability_type(call.type_id)).map(|quota| Bucket {
                kind: BucketKind::ConsumerType,
                consumer: Some(consumer),
                scope: Some(call.type_id),
                quota,
            }),
        ]
        .into_iter()
        .flatten()
    }

    /// The capabilities and types the budgets name (for the registry's wiring check).
    pub fn scopes(&self) -> Vec<Scope> {
        let mut scopes: Vec<Scope> = self
            .capability_quotas
            .keys()
            .map(|c| Scope::capability(c.as_str()))
            .chain(self.consumer_quotas.keys().cloned())
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }
}

/// The kind of a rate bucket (see [`RateBudgets`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BucketKind {
    /// One consumer, all its calls.
    Consumer,
    /// One capability, all consumers.
    Capability,
    /// One consumer's calls of one capability.
    ConsumerCapability,
    /// One consumer's calls of the capabilities of one type.
    ConsumerType,
}

impl BucketKind {
    /// A short name (operator events, shared-store keys).
    pub const fn as_str(self) -> &'static str {
        match self {
            BucketKind::Consumer => "consumer",
            BucketKind::Capability => "capability",
            BucketKind::ConsumerCapability => "consumer-capability",
            BucketKind::ConsumerType => "consumer-type",
        }
    }

    const fn index(self) -> usize {
        match self {
            BucketKind::Consumer => 0,
            BucketKind::Capability => 1,
            BucketKind::ConsumerCapability => 2,
            BucketKind::ConsumerType => 3,
        }
    }
}

/// One bucket a call takes a unit from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bucket<'a> {
    /// Its kind.
    pub kind: BucketKind,
    /// The caller's principal ([`Consumer::principal`](crate::Consumer::principal)), for the kinds per consumer.
    pub consumer: Option<&'a str>,
    /// The capability name or type id, for the kinds scoped to one.
    pub scope: Option<&'a str>,
    /// Its budget.
    pub quota: Quota,
}

impl<'a> Bucket<'a> {
    /// The bucket's id among those of its kind: the consumer key, the capability name, or
    /// `{capability or type}:{consumer key}` (capability names and type ids contain no `:`, so
    /// ids of different buckets never collide).
    pub fn id(&self) -> Cow<'a, str> {
        match (self.scope, self.consumer) {
            (Some(scope), Some(consumer)) => Cow::Owned(format!("{scope}:{consumer}")),
            (Some(one), None) | (None, Some(one)) => Cow::Borrowed(one),
            (None, None) => Cow::Borrowed(""),
        }
    }
}

/// The configuration of a [`MemoryRateLimiter`]. Build it with struct update syntax over
/// `Default` (which limits nothing).
#[derive(Clone)]
pub struct RateLimitConfig {
    /// The clock for queue waits and hold times (use the registry's clock).
    pub clock: Arc<dyn Clock>,
    /// The budget of each consumer, over all capabilities ([`RateBudgets::per_consumer`]).
    pub per_consumer: Option<Quota>,
    /// The budget of each capability, over all consumers, unless overridden below
    /// ([`RateBudgets::per_capability`]).
    pub per_capability: Option<Quota>,
    /// Per-capability overrides of `per_capability`, by capability name; `None` exempts the
    /// capability from the per-capability budget ([`RateBudgets::capability_quotas`]).
    pub capability_quotas: HashMap<String, Option<Quota>>,
    /// The budget of each consumer for one capability or one type: "5 `tickets.create` per
    /// minute per user" ([`RateBudgets::consumer_quotas`]).
    pub consumer_quotas: HashMap<Scope, Quota>,
    /// The action queue; `None` bounds nothing.
    pub queue: Option<QueueConfig>,
    /// The most buckets kept per kind (consumers, capabilities, consumer × capability, consumer
    /// × type). Buckets whose budget is back to full are dropped first; under pressure the
    /// fullest buckets go, which can only make the limiter more lenient, never stricter.
    pub max_buckets: usize,
}

impl Default for RateLimitConfig {
    fn default() -> RateLimitConfig {
        RateLimitConfig {
            clock: Arc::new(SystemClock),
            per_consumer: None,
            per_capability: None,
            capability_quotas: HashMap::new(),
            consumer_quotas: HashMap::new(),
            queue: None,
            max_buckets: 100_000,
        }
    }
}

impl RateLimitConfig {
    /// The configuration of `budgets`, on `clock`, with the other settings' defaults.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_surface_policy::{RateBudgets, RateLimitConfig, SystemClock};
    /// let config = RateLimitConfig::with_budgets(RateBudgets::default(), Arc::new(SystemClock));
    /// assert!(config.consumer_quotas.is_empty());
    /// ```
    pub fn with_budgets(budgets: RateBudgets, clock: Arc<dyn Clock>) -> RateLimitConfig {
        let RateBudgets { per_consumer, per_capability, capability_quotas, consumer_quotas } = budgets;
        RateLimitConfig {
            clock,
            per_consumer,
            per_capability,
            capability_quotas,
            consumer_quotas,
            ..Default::default()
        }
    }
}

impl fmt::Debug for RateLimitConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitConfig")
            .field("per_consumer", &self.per_consumer)
            .field("per_capability", &self.per_capability)
            .field("capability_quotas", &self.capability_quotas)
            .field("consumer_quotas", &self.consumer_quotas)
            .field("queue", &self.queue)
            .field("max_buckets", &self.max_buckets)
            .finish_non_exhaustive()
    }
}

/// An in-process [`RateLimiter`]: GCRA buckets per consumer, per capability and per consumer for
/// one capability or type, and a bounded action queue.
///
/// Two kinds of budget, both optional:
///
/// - **Rate**: a [`Quota`] per consumer (all its calls together), one per capability (all
///   consumers together), and per consumer for one capability or one type ("5 `tickets.create`
///   per minute per user"; see [`RateBudgets`]), enforced with the generic cell rate algorithm
///   (GCRA). A call needs a unit from every bucket that applies; it takes from none unless all of
///   them conform, so a refused call costs nothing. When refused, `retryAfterMs` is the time until every bucket
///   involved conforms again, computed from the buckets' state and rounded up to the next
///   millisecond: a retry after that delay passes unless other calls take the budget first.
/// - **Queue**: at most [`QueueConfig::max_concurrent`] calls hold a slot at once; up to
///   [`QueueConfig::max_waiting`] more wait (first come, first served) for at most
///   [`QueueConfig::max_wait`]. A call that finds the waiting room full, or waits too long, is
///   `RATE_LIMITED {reason: queue-full}` with `retryAfterMs` estimated from the mean time calls
///   held a slot recently and the length of the queue.
///
/// Bucket time comes from the `now` the pipeline passes; queue waits and slot hold times are
/// measured on [`RateLimitConfig::clock`] (use the registry's clock).
///
/// ```
/// use std::num::NonZeroU32;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use agent_surface_core::details::RateLimitReason;
/// use agent_surface_core::Effect;
/// use agent_surface_policy::{
///     CallInfo, Clock, Consumer, ManualClock, MemoryRateLimiter, Quota, RateDecision, RateLimitConfig, RateLimiter,
/// };
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let clock = Arc::new(ManualClock::default());
/// let limiter = MemoryRateLimiter::new(RateLimitConfig {
///     clock: clock.clone(),
///     per_consumer: Some(Quota::per_second(NonZeroU32::new(2).unwrap())),
///     ..Default::default()
/// });
/// let consumer = Consumer::anonymous("session-1");
/// let call = CallInfo::new(&consumer, "orders.list", "orders", Effect::Read, true);
/// assert!(matches!(limiter.acquire(call, clock.now()).await, RateDecision::Allow(_)));
/// assert!(matches!(limiter.acquire(call, clock.now()).await, RateDecision::Allow(_)));
/// let RateDecision::Limited { reason, retry_after } = limiter.acquire(call, clock.now()).await else { panic!() };
/// assert_eq!((reason, retry_after), (RateLimitReason::Rate, Duration::from_millis(500)));
///
/// clock.advance(Duration::from_millis(500));
/// assert!(matches!(limiter.acquire(call, clock.now()).await, RateDecision::Allow(_)));
/// # });
/// ```
pub struct MemoryRateLimiter {
    config: RateLimitConfig,
    budgets: RateBudgets,
    buckets: Mutex<Buckets>,
    queue: Option<Arc<Queue>>,
}

/// Theoretical arrival times (ns since the epoch), one map per [`BucketKind`] (by
/// [`BucketKind::index`]), keyed by [`Bucket::id`].
#[derive(Default)]
struct Buckets([HashMap<Box<str>, u64>; 4]);

/// Which bucket refused a call, and for how long (ns).
#[derive(Clone, Copy, Debug)]
struct Refusal {
    wait_ns: u64,
    bucket: &'static str,
}

/// The GCRA test for one bucket at `now`: the new theoretical arrival time if the call conforms,
/// or how long until it would.
fn probe(tat: Option<u64>, now: u64, quota: Quota) -> Result<u64, u64> {
    let tat = tat.unwrap_or(now).max(now);
    let conforms_at = tat.saturating_sub(quota.tolerance_ns());
    if now < conforms_at { Err(conforms_at - now) } else { Ok(tat.saturating_add(quota.emission_ns())) }
}

/// Keeps `map` under `max` entries before an insertion: first the buckets back to full budget
/// (`tat <= now`, equivalent to no bucket), then, if still full, the eighth with the earliest
/// arrival times (the most budget left).
fn make_room(map: &mut HashMap<Box<str>, u64>, max: usize, now: u64) {
    if map.len() < max {
        return;
    }
    map.retain(|_, tat| *tat > now);
    if map.len() < max.max(1) {
        return;
    }
    let mut tats: Vec<u64> = map.values().copied().collect();
    let cut = (tats.len() / 8).max(1).min(tats.len() - 1);
    let (_, threshold, _) = tats.select_nth_unstable(cut);
    let threshold = *threshold;
    map.retain(|_, tat| *tat > threshold);
}

fn ceil_millis(ns: u64) -> Duration {
    Duration::from_millis(ns.div_ceil(NANOS_PER_MILLI).max(1))
}

impl MemoryRateLimiter {
    /// A limiter with this configuration.
    pub fn new(config: RateLimitConfig) -> MemoryRateLimiter {
        let queue = config.queue.map(|q| {
            Arc::new(Queue {
                semaphore: Arc::new(Semaphore::new(q.max_concurrent.get())),
                waiting: AtomicUsize::new(0),
                hold_ns: AtomicU64::new(u64::try_from(q.initial_hold_estimate.as_nanos()).unwrap_or(u64::MAX)),
                config: q,
            })
        });
        let budgets = RateBudgets {
            per_consumer: config.per_consumer,
            per_capability: config.per_capability,
            capability_quotas: config.capability_quotas.clone(),
            consumer_quotas: config.consumer_quotas.clone(),
        };
        MemoryRateLimiter { config, budgets, buckets: Mutex::new(Buckets::default()), queue }
    }

    /// How many buckets are held (of every kind), including buckets that are back to full
    /// budget and not yet dropped.
    pub fn bucket_count(&self) -> usize {
        self.lock().0.iter().map(HashMap::len).sum()
    }

    /// How many calls hold a queue slot now (0 without a queue).
    pub fn in_flight(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.config.max_concurrent.get() - q.semaphore.available_permits())
    }

    /// How many calls wait for a queue slot now.
    pub fn waiting(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.waiting.load(Ordering::SeqCst))
    }

    fn lock(&self) -> MutexGuard<'_, Buckets> {
        // Every critical section leaves the maps consistent; a poisoned lock guards valid state.
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one unit from every bucket that applies, or none and says how long to wait.
    fn take(&self, call: &CallInfo<'_>, now: Timestamp) -> Result<(), Refusal> {
        let mut buckets = self.budgets.buckets(call).peekable();
        if buckets.peek().is_none() {
            return Ok(());
        }
        let now = now.unix_millis().saturating_mul(NANOS_PER_MILLI);
        let mut b = self.lock();
        // At most one bucket of each kind applies to a call.
        let mut next: [Option<(Cow<'_, str>, u64)>; 4] = Default::default();
        let mut refusal: Option<Refusal> = None;
        for bucket in buckets {
            let id = bucket.id();
            let map = &b.0[bucket.kind.index()];
            match probe(map.get(&*id).copied(), now, bucket.quota) {
                Ok(tat) => next[bucket.kind.index()] = Some((id, tat)),
                Err(wait_ns) => {
                    if refusal.is_none_or(|r| wait_ns > r.wait_ns) {
                        refusal = Some(Refusal { wait_ns, bucket: bucket.kind.as_str() });
                    }
                }
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        let max = self.config.max_buckets;
        for (map, taken) in b.0.iter_mut().zip(next) {
            let Some((id, tat)) = taken else { continue };
            match map.get_mut(&*id) {
                Some(slot) => *slot = tat,
                None => {
                    make_room(map, max, now);
                    map.insert(id.into(), tat);
                }
            }
        }
        Ok(())
    }

    /// Gives back the unit [`take`](Self::take) took, for a call that then did not run.
    fn refund(&self, call: &CallInfo<'_>) {
        let mut b = self.lock();
        for bucket in self.budgets.buckets(call) {
            if let Some(tat) = b.0[bucket.kind.index()].get_mut(&*bucket.id()) {
                *tat = tat.saturating_sub(bucket.quota.emission_ns());
            }
        }
    }

    async fn acquire_now(&self, call: CallInfo<'_>, now: Timestamp) -> RateDecision {
        // 1. Without a queue, or with a free slot, the budget decides at once.
        if let Some(decided) = self.acquire_at_once(&call, now) {
            return decided;
        }
        // 2. Every slot is taken: a place in the waiting room, which costs no rate budget yet.
        // (Without a queue the budget has decided at once; were it not to, it decides here.)
        let Some(queue) = &self.queue else {
            return self.take_or_limited(&call, now).map_or_else(|limited| limited, |()| RateDecision::Allow(None));
        };
        let Some(place) = queue.enter() else { return queue.full(call.capability) };
        // 3. The rate budget.
        if let Err(limited) = self.take_or_limited(&call, now) {
            return limited;
        }
        // 4. Wait for a slot, bounded. The unit goes back unless a slot is granted: after the
        // wait runs out, and when the wait is dropped (the caller cancelled: nothing ran, so
        // nothing is spent).
        let mut unspent = Unspent { limiter: self, call: &call, spent: false };
        let acquire = queue.semaphore.clone().acquire_owned();
        let waited = futures_util::future::select(Box::pin(acquire), self.config.clock.sleep(queue.config.max_wait));
        let permit = match waited.await {
            Either::Left((Ok(permit), _)) => Some(permit),
            Either::Left((Err(_), _)) | Either::Right(_) => None,
        };
        drop(place);
        match permit {
            Some(permit) => {
                unspent.spent = true;
                self.holding(queue, permit)
            }
            None => {
                drop(unspent);
                queue.full(call.capability)
            }
        }
    }

    /// Takes one unit from every bucket that applies ([`take`](Self::take)), or answers how
    /// long to wait, with a `DEBUG` event naming the bucket.
    fn take_or_limited(&self, call: &CallInfo<'_>, now: Timestamp) -> Result<(), RateDecision> {
        let refusal = match self.take(call, now) {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        let retry_after = ceil_millis(refusal.wait_ns);
        tracing::debug!(
            target: "agent_surface::rate",
            bucket = refusal.bucket,
            capability = call.capability,
            consumer = call.consumer.key(),
            retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
            "rate limited"
        );
        Err(RateDecision::Limited { reason: RateLimitReason::Rate, retry_after })
    }

    /// The permit of a call that holds a queue slot: the slot, and when it was taken.
    fn holding(&self, queue: &Arc<Queue>, permit: tokio::sync::OwnedSemaphorePermit) -> RateDecision {
        RateDecision::Allow(Some(Box::new(Slot {
            _permit: permit,
            queue: Arc::clone(queue),
            clock: Arc::clone(&self.config.clock),
            since: self.config.clock.now(),
        })))
    }
}

/// The unit a waiting call took, given back when this is dropped unless the call got its slot
/// (`spent`).
struct Unspent<'l, 'c> {
    limiter: &'l MemoryRateLimiter,
    call: &'l CallInfo<'c>,
    spent: bool,
}

impl Drop for Unspent<'_, '_> {
    fn drop(&mut self) {
        if !self.spent {
            self.limiter.refund(self.call);
        }
    }
}

impl fmt::Debug for MemoryRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRateLimiter")
            .field("config", &self.config)
            .field("buckets", &self.bucket_count())
            .field("in_flight", &self.in_flight())
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl RateLimiter for MemoryRateLimiter {
    fn reach(&self) -> crate::Reach {
        crate::Reach::Process
    }

    fn clock(&self) -> Option<Arc<dyn Clock>> {
        Some(self.config.clock.clone())
    }

    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision> {
        Box::pin(self.acquire_now(call, now))
    }

    /// Decides at once without a queue, or with a free slot; `None`, having taken nothing, when
    /// every slot is taken (the call is left to [`acquire`](RateLimiter::acquire)).
    fn acquire_at_once(&self, call: &CallInfo<'_>, now: Timestamp) -> Option<RateDecision> {
        let slot = match &self.queue {
            None => None,
            Some(queue) => Some((queue, queue.semaphore.clone().try_acquire_owned().ok()?)),
        };
        // A refused call gives its slot back (dropped here).
        if let Err(limited) = self.take_or_limited(call, now) {
            return Some(limited);
        }
        Some(match slot {
            Some((queue, permit)) => self.holding(queue, permit),
            None => RateDecision::Allow(None),
        })
    }

    fn scopes(&self) -> Vec<Scope> {
        self.budgets.scopes()
    }
}

/// The action queue's shared state.
struct Queue {
    config: QueueConfig,
    semaphore: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// A moving average of how long calls held a slot, in ns.
    hold_ns: AtomicU64,
}

impl Queue {
    /// Takes a place in the waiting room, if there is one.
    fn enter(self: &Arc<Self>) -> Option<Place> {
        let max = self.config.max_waiting;
        self.waiting.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Place(Arc::clone(self)))
    }

    /// `RATE_LIMITED {queue-full}`, with the time for the queue ahead to drain one slot's worth
    /// per waiting call: mean hold time × (waiting + 1) / concurrency.
    fn full(&self, capability: &str) -> RateDecision {
        let hold = self.hold_ns.load(Ordering::Relaxed);
        let ahead = u64::try_from(self.waiting.load(Ordering::SeqCst)).unwrap_or(u64::MAX).saturating_add(1);
        let slots = u64::try_from(self.config.max_concurrent.get()).unwrap_or(u64::MAX);
        let retry_after = ceil_millis(hold.saturating_mul(ahead) / slots);
        tracing::debug!(
            target: "agent_surface::rate",
            bucket = "queue",
            capability,
            retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
            "action queue full"
        );
        RateDecision::Limited { reason: RateLimitReason::QueueFull, retry_after }
    }

    fn record_hold(&self, held: Duration) {
        let sample = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        // An exponential moving average with weight 1/8; a lost update under contention only
        // drops one sample.
        let old = self.hold_ns.load(Ordering::Relaxed);
        let new = old - old / 8 + sample / 8;
        self.hold_ns.store(new, Ordering::Relaxed);
    }
}

/// A place in the waiting room, given back on drop (also when the waiting call is cancelled).
struct Place(Arc<Queue>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A held queue slot; released (and its hold time recorded) when the call ends.
struct Slot {
    _permit: OwnedSemaphorePermit,
    queue: Arc<Queue>,
    clock: Arc<dyn Clock>,
    since: Timestamp,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.queue.record_hold(self.clock.now().saturating_duration_since(self.since));
    }
}
