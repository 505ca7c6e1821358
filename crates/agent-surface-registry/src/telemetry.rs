//! Metrics of the invocation pipeline, through the `metrics` facade.
//!
//! The registry records what follows when [`crate::RegistryConfig::metrics`] is on (the default),
//! through whatever recorder the application installs (e.g. `metrics-exporter-prometheus`, as
//! the demo does to serve `/metrics`). While none is installed, a call asks the facade which
//! recorder is in scope (a thread-local read and an atomic load), finds its no-op one, and takes
//! no clock readings. With one, the handles of each transport and capability are registered once
//! and reused, so a successful call costs its clock readings and the recorder's own updates, not
//! a key built and hashed per metric. The readings are `quanta`'s (the clock the Prometheus
//! exporter reads; its calibration runs once per process, on the first metered call). Measured by `cargo bench -p agent-surface-registry --bench
//! pipeline` (`pipeline/metrics_off`, `pipeline/no_invocation_id` — on, no recorder — and
//! `recorded/prometheus`).
//!
//! Recording needs this crate's `metrics` feature (on by default); a build without it compiles
//! the recording out, and [`crate::RegistryConfig::metrics`] then has no effect (the `metrics`
//! facade is not linked, so no recorder could be reached).
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `agent_surface_calls_total` | counter | `capability`, `code`, `retry`, `transport` | calls that ended, by outcome (`code` `OK`, `retry` `none` for a success) |
//! | `agent_surface_call_duration_seconds` | histogram | `capability`, `phase_group` | time per phase group: `admission` (phase 1, calls with an invocation id: the idempotency store's round trip), `execute` (8, 8b: the handler and its post-condition, when they ran), `total` (the whole call) |
//! | `agent_surface_calls_in_flight` | gauge | `transport` | calls under way |
//! | `agent_surface_store_errors_total` | counter | `store` (`idempotency`, `confirmation`, `rate-limiter`, `audit`) | store (or limiter) failures the pipeline met (`audit`: a strict audit refusal) |
//! | `agent_surface_rate_limited_total` | counter | `capability`, `reason` | calls refused by the rate limiter |
//!
//! Store sizes are gauges set when [`crate::Registry::record_store_usage`] runs (call it before
//! rendering), from what the stores report (the memory stores of `agent-surface-policy` do):
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `agent_surface_store_entries` | gauge | `store` (`idempotency`, `confirmation`) | records held |
//! | `agent_surface_store_bytes` | gauge | `store` | bytes counted against the store's budget |
//! | `agent_surface_confirmations_pending` | gauge | — | confirmations waiting for a person |
//!
//! **Label values are bounded.** `capability` is the name of a defined capability, or `-` when the
//! call named none the registry knows (an agent picks the names it sends; they never become label
//! values); `code` is one of the sixteen codes or `OK`; `transport` is the adapter's fixed name
//! ([`crate::InvokeOptions::with_transport`]).

use agent_surface_core::InvokeResult;

/// The label of a call whose capability name the registry does not know.
pub(crate) const UNKNOWN_CAPABILITY: &str = "-";

/// The clock readings of one call, taken only while a recorder is in scope: raw readings of the
/// [`quanta`] clock the Prometheus exporter reads too (the CPU's counter where it has an invariant
/// one, as x86 and aarch64 do; the OS's monotonic clock otherwise), turned into nanoseconds only for
/// the durations recorded. A reading costs less than half of a [`std::time::Instant::now`] on x86;
/// the counter's calibration is shared with the exporter's and runs once per process, on the first
/// reading.
///
/// Held in the call's own state (32 bytes): a raw reading is never 0 in practice (the counter, or
/// the nanoseconds, since boot), so a reading not taken is a `None` of [`NonZeroU64`] rather than
/// a flag beside it; a reading of 0 would only leave its duration unrecorded.
#[cfg(feature = "metrics")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    start: u64,
    /// Set for a call with an invocation id, once admission answered.
    admitted: Option<NonZeroU64>,
    execute_start: Option<NonZeroU64>,
    execute_end: Option<NonZeroU64>,
}

#[cfg(feature = "metrics")]
use std::num::NonZeroU64;

/// A reading of [`clock`], `None` for the 0 no clock gives.
#[cfg(feature = "metrics")]
fn reading() -> Option<NonZeroU64> {
    NonZeroU64::new(clock().raw())
}

/// The clock of metered calls (its calibration is `quanta`'s own, shared by every clock).
#[cfg(feature = "metrics")]
fn clock() -> &'static quanta::Clock {
    static CLOCK: std::sync::OnceLock<quanta::Clock> = std::sync::OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

#[cfg(feature = "metrics")]
impl Timing {
    /// The readings of a call that starts now.
    pub(crate) fn start() -> Timing {
        Timing { start: clock().raw(), admitted: None, execute_start: None, execute_end: None }
    }

    /// Admission answered a call with an invocation id (phase 1).
    pub(crate) fn admitted(&mut self) {
        self.admitted = reading();
    }

    /// The handler starts (phase 8).
    pub(crate) fn execute_started(&mut self) {
        self.execute_start = reading();
    }

    /// The handler and its post-condition ended (phases 8, 8b).
    pub(crate) fn execute_ended(&mut self) {
        self.execute_end = reading();
    }
}

/// Without the `metrics` feature no call is metered: nothing to read.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {}

#[cfg(not(feature = "metrics"))]
#[allow(dead_code, reason = "no call is metered without the `metrics` feature")]
impl Timing {
    /// Nothing to read.
    pub(crate) fn start() -> Timing {
        Timing {}
    }

    /// Nothing to read.
    pub(crate) fn admitted(&mut self) {}

    /// Nothing to read.
    pub(crate) fn execute_started(&mut self) {}

    /// Nothing to read.
    pub(crate) fn execute_ended(&mut self) {}
}

#[cfg(feature = "metrics")]
mod recording {
    //! The recording itself (the `metrics` feature).

    use super::{InvokeResult, NonZeroU64, Timing, clock};
    use std::collections::HashMap;
    use std::hash::{BuildHasherDefault, Hasher};
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{OnceLock, PoisonError, RwLock};
    use std::time::Instant;

    use agent_surface_core::details::{RateLimitReason, RateLimitedDetails};
    use metrics::{Counter, Gauge, Histogram, Recorder};

    /// The recorder in scope for this thread (a local one, else the global one), by address; `None`
    /// while it is the facade's no-op recorder, which is the only zero-sized one: a recorder that
    /// records anything holds state, or a handle to it.
    fn recorder() -> Option<usize> {
        metrics::with_recorder(|r: &dyn Recorder| {
            (std::mem::size_of_val(r) != 0).then(|| std::ptr::from_ref(r).cast::<()>() as usize)
        })
    }

    /// The address of the global recorder, once one is seen (0 before). The facade leaks the global
    /// recorder, so its address stays its own for the life of the process; a local recorder's
    /// address may be another's after it is dropped, so handles are cached for the global one only.
    static GLOBAL: AtomicUsize = AtomicUsize::new(0);

    /// When [`global`] may next look for a global recorder, in milliseconds since [`EPOCH`].
    static NEXT_LOOK: AtomicU64 = AtomicU64::new(0);
    static EPOCH: OnceLock<Instant> = OnceLock::new();

    /// The global recorder's address (0 while none is installed). Until one is seen, it is looked
    /// for at most once a second, from a thread of its own (where no local recorder is in scope),
    /// and only by calls made under a recorder that is not it.
    fn global() -> usize {
        let known = GLOBAL.load(Ordering::Relaxed);
        if known != 0 {
            return known;
        }
        let epoch = *EPOCH.get_or_init(Instant::now);
        let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = NEXT_LOOK.load(Ordering::Relaxed);
        if now < next
            || NEXT_LOOK.compare_exchange(next, now.saturating_add(1000), Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return 0;
        }
        let found = std::thread::Builder::new()
            .name("agent-surface-metrics".into())
            .spawn(recorder)
            .ok()
            .and_then(|t| t.join().ok())
            .flatten()
            .unwrap_or(0);
        if found != 0 {
            GLOBAL.store(found, Ordering::Relaxed);
        }
        found
    }

    /// Which recorder a call is recorded with.
    enum Scope {
        /// None is installed: nothing is recorded, no clock is read.
        Nothing,
        /// The global recorder: through the handles cached for it.
        Global,
        /// A local recorder (e.g. a test's): through the facade's macros on each use.
        Local,
    }

    fn scope() -> Scope {
        match recorder() {
            None => Scope::Nothing,
            Some(address) if address == global() => Scope::Global,
            Some(_) => Scope::Local,
        }
    }

    /// How many transports have handles cached for the global recorder (the library's adapters
    /// name five: `direct`, `mcp`, `http`, `toolset`, `cli`); a call through another transport
    /// registers its handles on each call, as under a local recorder.
    const TRANSPORT_SLOTS: usize = 8;

    /// The metric handles of one registry, registered with the global recorder once per transport
    /// and capability and reused by every call after (the facade's macros build and hash each
    /// metric's key on every use). A call finds its transport's handles with an atomic load per
    /// slot (no lock, no reference count), and its capability's under a read lock, hashed by
    /// [`Fnv`]. Calls made under a local recorder register theirs on each call.
    #[derive(Default)]
    pub(crate) struct Handles {
        transports: [OnceLock<TransportHandles>; TRANSPORT_SLOTS],
    }

    /// The handles of one transport under one recorder.
    struct TransportHandles {
        transport: &'static str,
        in_flight: Gauge,
        /// By capability label (a defined capability's name, or [`UNKNOWN_CAPABILITY`]): bounded by
        /// the names the registry has defined.
        capabilities: RwLock<HashMap<Box<str>, CapabilityHandles, BuildHasherDefault<Fnv>>>,
    }

    /// FNV-1a, for the capability labels: short strings the registry defined (never a name an
    /// agent chose, see [`super::UNKNOWN_CAPABILITY`]), so no hash flooding to resist, and several
    /// times cheaper than the standard library's SipHash on them.
    #[derive(Default)]
    pub(crate) struct Fnv(u64);

    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }

        fn write(&mut self, bytes: &[u8]) {
            let mut hash = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
            for &byte in bytes {
                hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            }
            self.0 = hash;
        }
    }

    /// The handles of a successful call of one capability through one transport.
    struct CapabilityHandles {
        ok: Counter,
        admission: Histogram,
        execute: Histogram,
        total: Histogram,
    }

    impl Handles {
        /// The handles of `transport` under the global recorder; `None` when every slot holds
        /// another transport's.
        fn transport(&self, transport: &'static str) -> Option<&TransportHandles> {
            self.transports
                .iter()
                .map(|slot| slot.get_or_init(|| TransportHandles::register(transport)))
                // The adapters pass their name as one constant, so the address usually decides.
                .find(|handles| std::ptr::eq(handles.transport, transport) || handles.transport == transport)
        }
    }

    impl TransportHandles {
        /// Registers the handles of `transport` with the recorder in scope.
        fn register(transport: &'static str) -> TransportHandles {
            TransportHandles {
                transport,
                in_flight: metrics::gauge!("agent_surface_calls_in_flight", "transport" => transport),
                capabilities: RwLock::default(),
            }
        }

        /// Runs `f` with the handles of `capability`, registered on first use.
        fn with_capability(&self, capability: &str, f: impl FnOnce(&CapabilityHandles)) {
            if let Some(found) = self.capabilities.read().unwrap_or_else(PoisonError::into_inner).get(capability) {
                return f(found);
            }
            let mut all = self.capabilities.write().unwrap_or_else(PoisonError::into_inner);
            let handles = all.entry(capability.into()).or_insert_with(|| {
                let histogram = |group: &'static str| {
                    metrics::histogram!(
                        "agent_surface_call_duration_seconds",
                        "capability" => capability.to_string(),
                        "phase_group" => group
                    )
                };
                CapabilityHandles {
                    ok: metrics::counter!(
                        "agent_surface_calls_total",
                        "capability" => capability.to_string(),
                        "code" => "OK",
                        "retry" => "none",
                        "transport" => self.transport
                    ),
                    admission: histogram("admission"),
                    execute: histogram("execute"),
                    total: histogram("total"),
                }
            });
            f(handles);
        }
    }

    /// The handles a metered call uses: cached in the registry's slots, or its own.
    enum Held<'r> {
        Cached(&'r TransportHandles),
        Own(Box<TransportHandles>),
    }

    /// One call being metered: counted in flight while it lives.
    pub(crate) struct Meter<'r> {
        handles: Held<'r>,
    }

    impl<'r> Meter<'r> {
        /// Starts metering a call that came through `transport`; `None` while no recorder is
        /// installed.
        pub(crate) fn start(cache: &'r Handles, transport: &'static str) -> Option<Meter<'r>> {
            let handles = match scope() {
                Scope::Nothing => return None,
                Scope::Global => match cache.transport(transport) {
                    Some(cached) => Held::Cached(cached),
                    None => Held::Own(Box::new(TransportHandles::register(transport))),
                },
                Scope::Local => Held::Own(Box::new(TransportHandles::register(transport))),
            };
            let meter = Meter { handles };
            meter.handles().in_flight.increment(1.0);
            Some(meter)
        }

        fn handles(&self) -> &TransportHandles {
            match &self.handles {
                Held::Cached(handles) => handles,
                Held::Own(handles) => handles,
            }
        }

        /// Records the end of the call: its outcome and the durations of its phase groups.
        pub(crate) fn record(&self, capability: &str, result: &InvokeResult, timing: &Timing) {
            let transport = self.handles();
            let failed = result.error_payload();
            if let Some(p) = failed {
                // Failures register their counter on each use: they carry two more labels, and are
                // not the path a service spends its time on.
                metrics::counter!(
                    "agent_surface_calls_total",
                    "capability" => capability.to_string(),
                    "code" => p.code().as_str(),
                    "retry" => p.retry().as_str(),
                    "transport" => transport.transport
                )
                .increment(1);
                if let Some(details) = Some(p)
                    .filter(|p| p.code() == agent_surface_core::ErrorCode::RateLimited)
                    .and_then(|p| p.details_as::<RateLimitedDetails>())
                {
                    let reason = match details.reason {
                        RateLimitReason::Rate => "rate",
                        RateLimitReason::QueueFull => "queue-full",
                    };
                    metrics::counter!(
                        "agent_surface_rate_limited_total",
                        "capability" => capability.to_string(),
                        "reason" => reason
                    )
                    .increment(1);
                }
            }
            let clock = clock();
            let end = clock.raw();
            // Nanoseconds, 0 when the readings are out of order (another core's counter behind).
            #[allow(clippy::cast_precision_loss, reason = "below 2^53 ns (104 days) the conversion is exact")]
            let seconds = |from: u64, to: u64| clock.delta_as_nanos(from, to) as f64 / 1e9;
            transport.with_capability(capability, |handles| {
                if failed.is_none() {
                    handles.ok.increment(1);
                }
                if let Some(admitted) = timing.admitted {
                    handles.admission.record(seconds(timing.start, admitted.get()));
                }
                if let Some(start) = timing.execute_start {
                    handles.execute.record(seconds(start.get(), timing.execute_end.map_or(end, NonZeroU64::get)));
                }
                handles.total.record(seconds(timing.start, end));
            });
        }
    }

    impl Drop for Meter<'_> {
        fn drop(&mut self) {
            self.handles().in_flight.decrement(1.0);
        }
    }

    /// A store the pipeline met failing.
    pub(crate) fn store_error(store: &'static str) {
        metrics::counter!("agent_surface_store_errors_total", "store" => store).increment(1);
    }

    /// Sets the store gauges from the stores' reports.
    pub(crate) fn store_usage(
        idempotency: Option<agent_surface_policy::StoreUsage>,
        confirmation: Option<agent_surface_policy::StoreUsage>,
    ) {
        for (store, usage) in [("idempotency", idempotency), ("confirmation", confirmation)] {
            let Some(usage) = usage else { continue };
            metrics::gauge!("agent_surface_store_entries", "store" => store).set(usage.entries as f64);
            if let Some(bytes) = usage.bytes {
                metrics::gauge!("agent_surface_store_bytes", "store" => store).set(bytes as f64);
            }
            if let Some(pending) = usage.pending {
                metrics::gauge!("agent_surface_confirmations_pending").set(pending as f64);
            }
        }
    }
}

#[cfg(feature = "metrics")]
pub(crate) use recording::{Handles, Meter, store_error, store_usage};

/// Without the `metrics` feature: nothing to cache.
#[cfg(not(feature = "metrics"))]
#[derive(Default)]
pub(crate) struct Handles {}

/// Without the `metrics` feature: no call is metered.
#[cfg(not(feature = "metrics"))]
pub(crate) struct Meter<'r>(std::marker::PhantomData<&'r Handles>);

#[cfg(not(feature = "metrics"))]
impl<'r> Meter<'r> {
    /// Never metered: the recording is compiled out.
    pub(crate) fn start(_cache: &'r Handles, _transport: &'static str) -> Option<Meter<'r>> {
        None
    }

    /// Never called: no call is metered.
    pub(crate) fn record(&self, _capability: &str, _result: &InvokeResult, _timing: &Timing) {}
}

/// A store the pipeline met failing (nothing without the `metrics` feature).
#[cfg(not(feature = "metrics"))]
pub(crate) fn store_error(_store: &'static str) {}

/// Sets the store gauges (nothing without the `metrics` feature).
#[cfg(not(feature = "metrics"))]
pub(crate) fn store_usage(
    _idempotency: Option<agent_surface_policy::StoreUsage>,
    _confirmation: Option<agent_surface_policy::StoreUsage>,
) {
}
