//! Phase 6 — rate limits and the action queue.
//!
//! Input: the consumer, the capability and the validated input. Decision: the rate limiter's
//! (never limited when none is configured). Codes: `RATE_LIMITED {reason, retryAfterMs}`;
//! `EXECUTION_FAILED {reason: transport, transient}` when the limiter's store failed
//! ([`RateDecision::Unavailable`]), as the other phases answer a store failure: a store that
//! cannot be reached is not the caller calling too often; `CANCELLED` when the caller cancels, or
//! the registry is disposed, while the call waits for its permit (the pipeline's
//! `unless_cancelled`: the wait is dropped, and its place in the queue with it).
//!
//! The limiter fails closed: one that panics answers `RATE_LIMITED {reason: rate}`, and one that
//! has not decided (queue wait included) within the registry's default time budget answers
//! `RATE_LIMITED {reason: queue-full}`; either way with `retryAfterMs` of one second, and the
//! cause on the operator channel only.

use std::time::Duration;

use agent_surface_core::details::RateLimitReason;
use agent_surface_core::{AgentSurfaceError, Phase};
use agent_surface_policy::{
    RateDecision, RateLimiter,
    guard::{self, Failure, guarded},
};
use serde_json::Value;

use super::{Call, Stop};

/// A held permit (a queue slot, say), released when the call ends.
pub(crate) type Permit = Option<Box<dyn Send>>;

/// Asks `limiter` for a permit without awaiting ([`RateLimiter::acquire_at_once`]): `Some`
/// with the permit when it lets the call through at once, `Err` when it refuses it at once (as
/// [`acquire`] would answer), `None` when the call must await [`acquire`] — also when the call
/// was cancelled or the registry disposed before it got here, which [`acquire`]'s caller answers
/// without asking the limiter. A panic is caught and answered as in [`acquire`].
pub(crate) fn at_once(call: &Call<'_>, limiter: &dyn RateLimiter, input: &Value) -> Result<Option<Permit>, Stop> {
    let inner = call.inner;
    if inner.disposed.is_cancelled() || call.options.is_cancelled() {
        return Ok(None);
    }
    let info = call.info().with_input(input);
    let now = inner.config.clock.now();
    match guard::catch(|| limiter.acquire_at_once(&info, now)) {
        Ok(Some(decision)) => decided(decision).map(Some),
        Ok(None) => Ok(None),
        Err(text) => Err(failed(RateLimitReason::Rate, format!("rate limiter {}", Failure::Panic(text)))),
    }
}

/// Asks `limiter` (the registry's, which the caller unwrapped) for a permit. The clock is read
/// here, not at arrival: the decision is about this moment.
pub(crate) async fn acquire(call: &Call<'_>, limiter: &dyn RateLimiter, input: &Value) -> Result<Permit, Stop> {
    let inner = call.inner;
    let call = call.info().with_input(input);
    let backstop = inner.config.default_time_budget;
    let now = inner.config.clock.now();
    let decision = match guarded(inner.config.clock.as_ref(), backstop, || {
        let fut = limiter.acquire(call, now);
        Box::pin(async move { Ok(fut.await) })
    })
    .await
    {
        Ok(decision) => decision,
        Err(failure @ Failure::Overrun(_)) => {
            return Err(failed(RateLimitReason::QueueFull, format!("rate limiter {failure}")));
        }
        Err(failure) => return Err(failed(RateLimitReason::Rate, format!("rate limiter {failure}"))),
    };
    decided(decision)
}

/// The permit `decision` grants, or the stop it makes.
fn decided(decision: RateDecision) -> Result<Permit, Stop> {
    match decision {
        RateDecision::Allow(permit) => Ok(permit),
        RateDecision::Limited { reason, retry_after } => {
            Err(Stop::new(AgentSurfaceError::rate_limited(reason, retry_after), Phase::Rate))
        }
        RateDecision::Unavailable(cause) => Err(Stop::noted(
            AgentSurfaceError::transient(agent_surface_policy::confirmation::STORE_RETRY_AFTER),
            Phase::Rate,
            format!("rate limiter store failed: {cause}"),
        )
        .store_fault(super::Fault::RateLimiter)),
        // A decision this registry does not know yet: fail closed, as a store failure does.
        _ => Err(Stop::noted(
            AgentSurfaceError::transient(agent_surface_policy::confirmation::STORE_RETRY_AFTER),
            Phase::Rate,
            "rate limiter answered an unknown decision",
        )
        .store_fault(super::Fault::RateLimiter)),
    }
}

/// How long a caller is asked to wait after the rate limiter failed.
const FAILED_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The limiter failed: the call is limited, and its operator event is an `ERROR` (a fault)
/// carrying the note.
fn failed(reason: RateLimitReason, note: String) -> Stop {
    Stop::noted(AgentSurfaceError::rate_limited(reason, FAILED_RETRY_AFTER), Phase::Rate, note)
        .store_fault(super::Fault::RateLimiter)
}
