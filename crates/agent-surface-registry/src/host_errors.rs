//! Host errors mapped at the boundary: the errors a handler's own code commonly meets, turned
//! into the closed code they certainly mean.
//!
//! Inside a handler, keep using your own error types and `?`: any error becomes
//! `EXECUTION_FAILED {reason: handler-error}` with the error kept as its private cause. When the
//! handler's call ends that way, the runtime looks along the cause's chain
//! ([`std::error::Error::source`]) for one of the errors below and answers what it means instead.
//! The first one found decides; anything else stays the sanitized `handler-error`. Messages stay
//! the matrix's templates and the cause goes to the operator channel only.
//!
//! | host error in the chain | capability | answer |
//! |---|---|---|
//! | [`UpstreamStatus`] 429 or 503 | read-only or idempotent | `EXECUTION_FAILED {reason: transport, transient, retryAfterMs}` (`after-delay`), the delay from `Retry-After` (1 s without one, at most 1 h) |
//! | [`UpstreamStatus`] 429 or 503 | any other | `EXECUTION_FAILED {reason: outcome-unknown}` |
//! | [`UpstreamStatus`] 502 or 504 | read-only or idempotent | `EXECUTION_FAILED {reason: transport, transient, retryAfterMs: 1000}` |
//! | [`UpstreamStatus`] 502 or 504 | any other | `EXECUTION_FAILED {reason: outcome-unknown}` |
//! | [`UpstreamStatus`] 401 or 403 | any | `EXECUTION_FAILED {reason: transport}` (`no`): the service's own credentials, never the caller's `NOT_AUTHENTICATED`/`NOT_AUTHORIZED` |
//! | `tokio::time::error::Elapsed` (a `timeout` inside the handler) | read-only or idempotent | `EXECUTION_FAILED {reason: transport, transient, retryAfterMs: 1000}` |
//! | `tokio::time::error::Elapsed` | any other | `EXECUTION_FAILED {reason: outcome-unknown}` |
//! | `std::io::Error` of kind `ConnectionRefused` | read-only or idempotent | `EXECUTION_FAILED {reason: transport, transient, retryAfterMs: 1000}` |
//! | `std::io::Error` of kind `ConnectionRefused` | any other | `EXECUTION_FAILED {reason: outcome-unknown}` |
//! | `std::io::Error` of kind `TimedOut` | as `Elapsed` | as `Elapsed` |
//!
//! Why writes differ: the error says what happened to one request the handler made, not what the
//! handler did before it. A gateway error (502, 504) or a timeout may come after the upstream
//! committed; a refusal (429, 503, a refused connection) refuses that request only, and may follow
//! a write the handler already made elsewhere. Told to wait and repeat, the agent would run the
//! call again, so for a capability whose repetition could double an effect the only answer the
//! runtime can be sure of is that the outcome is unknown. A handler that knows nothing took effect
//! says so itself: [`UpstreamStatus::before_any_effect`] gives the transient failure whatever the
//! capability.
//!
//! The same holds for another agent-surface service's answer passed on with `?`
//! ([`AgentSurfaceError::relayed`]): its transient failure or rate limit is answered as it is for a
//! read-only or idempotent capability, and as the unknown outcome for any other.
//!
//! ```
//! use agent_surface_registry::host_errors::UpstreamStatus;
//! use std::time::Duration;
//!
//! // In a handler, after an upstream answered 503 with `Retry-After: 2`:
//! let err = UpstreamStatus::new(503).with_retry_after(Duration::from_secs(2));
//! assert_eq!(err.to_string(), "an upstream service answered HTTP 503");
//! // `return Err(err.into())` (or `?`) — for a read-only or idempotent capability the agent sees
//! // a transient EXECUTION_FAILED, wait 2000 ms; for a write, an unknown outcome. A write whose
//! // handler made no other change before this answer says so:
//! let told = err.before_any_effect().into_payload();
//! assert_eq!(told.details().unwrap()["retryAfterMs"], 2000);
//! ```
//!
//! With the `http` feature, `UpstreamStatus::from_response` reads an `http::StatusCode` and
//! its `Retry-After` header.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use agent_surface_core::AgentSurfaceError;
use agent_surface_core::details::ExecutionFailedReason;

/// The delay given when the host error names none (and to a transient gateway error or timeout).
const DEFAULT_DELAY: Duration = Duration::from_secs(1);

/// The longest delay a `Retry-After` may ask for; a longer one is cut to this.
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// An upstream HTTP service's error status, for a handler to return (`?` or `.into()`) when a
/// service it calls answers with one. See the [module docs](self) for what each status becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamStatus {
    status: u16,
    retry_after: Option<Duration>,
}

impl UpstreamStatus {
    /// The upstream answered `status`.
    #[must_use]
    pub fn new(status: u16) -> UpstreamStatus {
        UpstreamStatus { status, retry_after: None }
    }

    /// The upstream asked to wait `delay` (its `Retry-After`).
    #[must_use]
    pub fn with_retry_after(mut self, delay: Duration) -> UpstreamStatus {
        self.retry_after = Some(delay);
        self
    }

    /// As [`UpstreamStatus::new`], with a `Retry-After` header's value when it is a number of
    /// seconds (an HTTP date, or anything else, counts as no delay given).
    #[must_use]
    pub fn with_retry_after_header(self, value: Option<&str>) -> UpstreamStatus {
        match value.and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(seconds) => self.with_retry_after(Duration::from_secs(seconds)),
            None => self,
        }
    }

    /// The status and `Retry-After` of an upstream's response.
    #[cfg(feature = "http")]
    #[must_use]
    pub fn from_response(status: http::StatusCode, headers: &http::HeaderMap) -> UpstreamStatus {
        let retry_after = headers.get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok());
        UpstreamStatus::new(status.as_u16()).with_retry_after_header(retry_after)
    }

    /// The status code.
    #[must_use]
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The delay the upstream asked for, if any.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The answer for a call whose handler met this status before it changed anything: the
    /// handler's word that a repeat of the call cannot double an effect. A 429 or 503 becomes
    /// `EXECUTION_FAILED {reason: transport, transient, retryAfterMs}` (`after-delay`, the delay
    /// as for `?`) whatever the capability; the agent is told to wait and make the call again, and
    /// the call runs again. Any other status is the error `?` would give, mapped as the
    /// [module docs](self) say. The status stays the private cause, for the operator.
    ///
    /// Use it only where it is true: a handler that wrote anywhere before this request was
    /// refused returns the status with `?`, and a write is then answered with its unknown outcome.
    ///
    /// ```
    /// use agent_surface_registry::host_errors::UpstreamStatus;
    /// let told = UpstreamStatus::new(429).before_any_effect().into_payload();
    /// assert_eq!(told.details().unwrap()["reason"], "transport");
    /// assert_eq!(told.details().unwrap()["retryAfterMs"], 1000);
    /// ```
    #[must_use]
    pub fn before_any_effect(self) -> AgentSurfaceError {
        match self.status {
            429 | 503 => AgentSurfaceError::transient(refusal_delay(self.retry_after)).with_cause(self),
            _ => AgentSurfaceError::internal(self),
        }
    }
}

/// The delay a refusal asks for: the upstream's `Retry-After`, 1 s without one, at most 1 h.
fn refusal_delay(retry_after: Option<Duration>) -> Duration {
    retry_after.unwrap_or(DEFAULT_DELAY).min(MAX_DELAY)
}

impl fmt::Display for UpstreamStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an upstream service answered HTTP {}", self.status)
    }
}

impl StdError for UpstreamStatus {}

/// What a host error means, before the capability is taken into account.
enum Meaning {
    /// This request was refused before the upstream did any work (not necessarily before the
    /// handler did): wait this long.
    Refused(Duration),
    /// Cut off, maybe after the work was done.
    CutOff,
    /// The service's own credentials were refused upstream.
    Credentials,
}

fn meaning(cause: &(dyn StdError + 'static)) -> Option<Meaning> {
    if let Some(status) = cause.downcast_ref::<UpstreamStatus>() {
        return match status.status {
            429 | 503 => Some(Meaning::Refused(refusal_delay(status.retry_after))),
            502 | 504 => Some(Meaning::CutOff),
            401 | 403 => Some(Meaning::Credentials),
            _ => None,
        };
    }
    if cause.is::<tokio::time::error::Elapsed>() {
        return Some(Meaning::CutOff);
    }
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        return match io.kind() {
            std::io::ErrorKind::ConnectionRefused => Some(Meaning::Refused(DEFAULT_DELAY)),
            std::io::ErrorKind::TimedOut => Some(Meaning::CutOff),
            _ => None,
        };
    }
    None
}

/// The answer for a handler's `error` (see the module docs): `harmless` when repeating the call
/// cannot double an effect; `unknown` makes the call's outcome-unknown answer. Any error but a
/// plain `handler-error` with a cause is returned as it is.
pub(crate) fn map(
    error: AgentSurfaceError,
    harmless: bool,
    unknown: impl FnOnce() -> AgentSurfaceError,
) -> AgentSurfaceError {
    // Another service's transient failure or rate limit passed on with `?`: its word about its
    // own call, which may have followed a write of this handler's, as a host error may.
    if !harmless && error.is_relayed() && error.payload().retry().permits_unchanged_retry() {
        return match error.into_parts() {
            (_, Some(cause)) => unknown().with_cause(cause),
            (_, None) => unknown(),
        };
    }
    let plain = error.payload().detail("reason").and_then(|r| r.as_str()) == Some("handler-error");
    if !plain {
        return error;
    }
    let found = {
        let mut next: Option<&(dyn StdError + 'static)> = match error.cause() {
            Some(cause) => Some(cause),
            None => return error,
        };
        let mut found = None;
        while let Some(cause) = next {
            found = meaning(cause);
            if found.is_some() {
                break;
            }
            next = cause.source();
        }
        found
    };
    let Some(meaning) = found else { return error };
    let mapped = match meaning {
        Meaning::Refused(delay) if harmless => AgentSurfaceError::transient(delay),
        Meaning::CutOff if harmless => AgentSurfaceError::transient(DEFAULT_DELAY),
        Meaning::Refused(_) | Meaning::CutOff => unknown(),
        Meaning::Credentials => AgentSurfaceError::execution_failed(ExecutionFailedReason::Transport),
    };
    match error.into_parts() {
        (_, Some(cause)) => mapped.with_cause(cause),
        (_, None) => mapped,
    }
}

#[cfg(test)]
mod tests {
    use agent_surface_core::{ErrorCode, Retry};

    use super::*;

    /// What the agent is told: code, reason, retry and delay.
    fn told(error: &AgentSurfaceError) -> (ErrorCode, Option<String>, Retry, Option<u64>) {
        let p = error.payload();
        let reason = p.detail("reason").and_then(|r| r.as_str()).map(str::to_string);
        (p.code(), reason, p.retry(), p.detail("retryAfterMs").and_then(serde_json::Value::as_u64))
    }

    fn mapped(cause: impl StdError + Send + Sync + 'static, harmless: bool) -> AgentSurfaceError {
        map(AgentSurfaceError::internal(cause), harmless, AgentSurfaceError::outcome_unknown)
    }

    fn transient(ms: u64) -> (ErrorCode, Option<String>, Retry, Option<u64>) {
        (ErrorCode::ExecutionFailed, Some("transport".into()), Retry::AfterDelay, Some(ms))
    }

    fn unknown() -> (ErrorCode, Option<String>, Retry, Option<u64>) {
        told(&AgentSurfaceError::outcome_unknown())
    }

    async fn elapsed() -> tokio::time::error::Elapsed {
        tokio::time::timeout(Duration::ZERO, std::future::pending::<()>()).await.expect_err("elapses")
    }

    /// A cause that wraps another, as application errors do.
    #[derive(Debug)]
    struct Wrapped(Box<dyn StdError + Send + Sync>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fetching the quote failed")
        }
    }

    impl StdError for Wrapped {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn each_row_of_the_table() {
        let refused = UpstreamStatus::new(429).with_retry_after(Duration::from_secs(2));
        let refused_io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(told(&mapped(refused, true)), transient(2000));
        assert_eq!(told(&mapped(UpstreamStatus::new(503), true)), transient(1000));
        assert_eq!(told(&mapped(refused_io(), true)), transient(1000));
        // A refusal of one request says nothing of what the handler wrote before it.
        assert_eq!(told(&mapped(refused, false)), unknown());
        assert_eq!(told(&mapped(UpstreamStatus::new(503), false)), unknown());
        assert_eq!(told(&mapped(refused_io(), false)), unknown());
        for harmless in [true, false] {
            let credentials = told(&mapped(UpstreamStatus::new(401), harmless));
            assert_eq!(credentials, (ErrorCode::ExecutionFailed, Some("transport".into()), Retry::No, None));
            assert_eq!(told(&mapped(UpstreamStatus::new(403), harmless)), credentials);
        }
        for cut_off in [502, 504] {
            assert_eq!(told(&mapped(UpstreamStatus::new(cut_off), true)), transient(1000));
            assert_eq!(told(&mapped(UpstreamStatus::new(cut_off), false)), unknown());
        }
        let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(told(&mapped(timed_out(), true)), transient(1000));
        assert_eq!(told(&mapped(timed_out(), false)), unknown());
        // Not in the table: stays the sanitized handler-error.
        let plain = told(&AgentSurfaceError::internal(std::io::Error::other("x")));
        for other in [UpstreamStatus::new(404), UpstreamStatus::new(500), UpstreamStatus::new(418)] {
            assert_eq!(told(&mapped(other, false)), plain);
        }
        assert_eq!(told(&mapped(std::io::Error::other("disk full"), false)), plain);
    }

    #[tokio::test]
    async fn an_elapsed_timeout_deep_in_the_chain_is_found_and_the_cause_is_kept() {
        let error = mapped(Wrapped(Box::new(elapsed().await)), false);
        assert_eq!(told(&error), unknown());
        assert_eq!(error.cause_chain().first().map(String::as_str), Some("fetching the quote failed"));
        assert_eq!(told(&mapped(Wrapped(Box::new(elapsed().await)), true)), transient(1000));
    }

    #[test]
    fn a_delay_is_bounded_and_a_header_that_is_no_number_gives_the_default() {
        let long = UpstreamStatus::new(429).with_retry_after(Duration::from_secs(86_400));
        assert_eq!(told(&mapped(long, true)), transient(3_600_000));
        assert_eq!(told(&long.before_any_effect()), transient(3_600_000));
        let dated = UpstreamStatus::new(503).with_retry_after_header(Some("Wed, 21 Oct 2026 07:28:00 GMT"));
        assert_eq!(dated.retry_after(), None);
        assert_eq!(told(&mapped(dated, true)), transient(1000));
        assert_eq!(
            UpstreamStatus::new(503).with_retry_after_header(Some(" 7 ")).retry_after(),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn errors_the_handler_chose_are_kept() {
        // An explained failure, a transient the handler built itself, another code: untouched.
        for chosen in [
            AgentSurfaceError::handler_failed("the warehouse is closed"),
            AgentSurfaceError::transient(Duration::from_millis(300)).with_cause(UpstreamStatus::new(401)),
            AgentSurfaceError::execution_failed(ExecutionFailedReason::Transport).with_cause(UpstreamStatus::new(503)),
        ] {
            let before = told(&chosen);
            assert_eq!(told(&map(chosen, false, AgentSurfaceError::outcome_unknown)), before);
        }
    }

    /// The handler's word that nothing took effect: a refusal is transient whatever the capability
    /// (the pipeline keeps an error the handler built), and the status stays the cause; another
    /// status is what `?` gives.
    #[test]
    fn a_refusal_before_any_effect_is_transient_for_every_capability() {
        let said = UpstreamStatus::new(503).with_retry_after(Duration::from_secs(4)).before_any_effect();
        assert_eq!(told(&said), transient(4000));
        assert_eq!(said.cause_chain(), ["an upstream service answered HTTP 503"]);
        assert_eq!(told(&map(said, false, AgentSurfaceError::outcome_unknown)), transient(4000));
        for (status, harmless, answer) in [
            (504, false, unknown()),
            (504, true, transient(1000)),
            (401, false, { (ErrorCode::ExecutionFailed, Some("transport".into()), Retry::No, None) }),
        ] {
            let said = UpstreamStatus::new(status).before_any_effect();
            assert_eq!(told(&map(said, harmless, AgentSurfaceError::outcome_unknown)), answer, "{status}");
        }
    }

    /// Another service's retryable answer passed on: as it is for a harmless capability, the
    /// unknown outcome for a write (this handler may have written first); its other answers as
    /// they are.
    #[test]
    fn a_relayed_retryable_answer_of_a_write_is_its_unknown_outcome() {
        let limited = AgentSurfaceError::rate_limited(
            agent_surface_core::details::RateLimitReason::Rate,
            Duration::from_millis(1500),
        );
        for upstream in [AgentSurfaceError::transient(Duration::from_millis(700)), limited] {
            let before = told(&upstream);
            let relayed = || AgentSurfaceError::relayed(upstream.payload().clone());
            assert_eq!(told(&map(relayed(), true, AgentSurfaceError::outcome_unknown)), before);
            let write = map(relayed(), false, AgentSurfaceError::outcome_unknown);
            assert_eq!(told(&write), unknown());
            assert!(write.cause_chain()[0].starts_with("relayed payload"), "{:?}", write.cause_chain());
            // The handler's own word is kept.
            assert_eq!(told(&map(upstream, false, AgentSurfaceError::outcome_unknown)), before);
        }
        let refused = AgentSurfaceError::relayed(AgentSurfaceError::not_authenticated().into_payload());
        assert_eq!(told(&map(refused, false, AgentSurfaceError::outcome_unknown)).0, ErrorCode::NotAuthenticated);
    }

    #[cfg(feature = "http")]
    #[test]
    fn from_an_http_response() {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("3"));
        let status = UpstreamStatus::from_response(http::StatusCode::TOO_MANY_REQUESTS, &headers);
        assert_eq!((status.status(), status.retry_after()), (429, Some(Duration::from_secs(3))));
        assert_eq!(told(&mapped(status, true)), transient(3000));
        let bare = UpstreamStatus::from_response(http::StatusCode::BAD_GATEWAY, &http::HeaderMap::new());
        assert_eq!((bare.status(), bare.retry_after()), (502, None));
    }
}
