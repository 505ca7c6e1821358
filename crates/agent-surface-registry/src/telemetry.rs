//! Metrics of the invocation pipeline, through the `metrics` facade.
//!
//! Recording needs this crate's `metrics` feature (on by default); a build without it compiles
//! the recording out (and [`crate::Registry::new`] turns [`crate::RegistryConfig::metrics`] off,
//! with a warning in the operator log).
//!
//! The registry records what follows when [`crate::RegistryConfig::metrics`] is on (it is off by
//! default); the application installs the recorder of its choice (e.g.
//! `metrics-exporter-prometheus`, as the demo does to serve `/metrics`). Recording costs about
//! 0.3–0.5 µs per call even with no recorder installed (the facade builds each metric's key, and
//! the durations need clock readings) — about half the pipeline's own cost for a small call,
//! which is why it is opt-in.
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

use std::time::Instant;

use agent_surface_core::InvokeResult;
#[cfg(feature = "metrics")]
use agent_surface_core::details::{RateLimitReason, RateLimitedDetails};

/// The label of a call whose capability name the registry does not know.
pub(crate) const UNKNOWN_CAPABILITY: &str = "-";

/// The clock readings of one call, taken only when metrics are on.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code, reason = "read only by the recording the feature compiles in"))]
pub(crate) struct Timing {
    pub(crate) start: Instant,
    /// Set for a call with an invocation id, once admission answered.
    pub(crate) admitted: Option<Instant>,
    pub(crate) execute_start: Option<Instant>,
    pub(crate) execute_end: Option<Instant>,
}

impl Timing {
    pub(crate) fn start() -> Timing {
        Timing { start: Instant::now(), admitted: None, execute_start: None, execute_end: None }
    }
}

/// Counts a call in flight while it lives.
#[cfg_attr(not(feature = "metrics"), allow(dead_code, reason = "read only by the recording the feature compiles in"))]
pub(crate) struct InFlight(&'static str);

impl InFlight {
    pub(crate) fn enter(transport: &'static str) -> InFlight {
        #[cfg(feature = "metrics")]
        metrics::gauge!("agent_surface_calls_in_flight", "transport" => transport).increment(1.0);
        InFlight(transport)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("agent_surface_calls_in_flight", "transport" => self.0).decrement(1.0);
    }
}

/// A store the pipeline met failing.
pub(crate) fn store_error(store: &'static str) {
    #[cfg(not(feature = "metrics"))]
    let _ = store;
    #[cfg(feature = "metrics")]
    metrics::counter!("agent_surface_store_errors_total", "store" => store).increment(1);
}

/// Records the end of a call: its outcome and the durations of its phase groups (nothing without
/// the `metrics` feature, where [`crate::Registry::new`] keeps metrics off and this is not called).
#[cfg(not(feature = "metrics"))]
pub(crate) fn record(_capability: &str, _transport: &'static str, _result: &InvokeResult, _timing: &Timing) {}

/// Records the end of a call: its outcome and the durations of its phase groups.
#[cfg(feature = "metrics")]
pub(crate) fn record(capability: &str, transport: &'static str, result: &InvokeResult, timing: &Timing) {
    let (code, retry) = match result.error_payload() {
        Some(p) => (p.code().as_str(), p.retry().as_str()),
        None => ("OK", "none"),
    };
    let capability = capability.to_string();
    metrics::counter!(
        "agent_surface_calls_total",
        "capability" => capability.clone(),
        "code" => code,
        "retry" => retry,
        "transport" => transport
    )
    .increment(1);
    if let Some(details) = result
        .error_payload()
        .filter(|p| p.code() == agent_surface_core::ErrorCode::RateLimited)
        .and_then(|p| p.details_as::<RateLimitedDetails>())
    {
        let reason = match details.reason {
            RateLimitReason::Rate => "rate",
            RateLimitReason::QueueFull => "queue-full",
        };
        metrics::counter!("agent_surface_rate_limited_total", "capability" => capability.clone(), "reason" => reason)
            .increment(1);
    }
    let end = Instant::now();
    let seconds = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
    let histogram = |group: &'static str, value: f64| {
        metrics::histogram!(
            "agent_surface_call_duration_seconds",
            "capability" => capability.clone(),
            "phase_group" => group
        )
        .record(value);
    };
    if let Some(admitted) = timing.admitted {
        histogram("admission", seconds(timing.start, admitted));
    }
    if let Some(start) = timing.execute_start {
        histogram("execute", seconds(start, timing.execute_end.unwrap_or(end)));
    }
    histogram("total", seconds(timing.start, end));
}

/// Sets the store gauges from the stores' reports (nothing without the `metrics` feature).
#[cfg(not(feature = "metrics"))]
pub(crate) fn store_usage(
    _idempotency: Option<agent_surface_policy::StoreUsage>,
    _confirmation: Option<agent_surface_policy::StoreUsage>,
) {
}

/// Sets the store gauges from the stores' reports.
#[cfg(feature = "metrics")]
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
