//! Wire mappings as data: how each of our 16 codes, under each retry category the matrix can
//! give it, maps onto the shapes that proposals for the next MCP release define — (a) the retry
//! classes of the proposed error registry (with `retryAfterMs` and the not-processed flag), (b)
//! the proposed structured tool-failure object, and (c) the proposed protocol-level rate-limit
//! error, which belongs to limits of the transport (the server layer's caps), never to a
//! capability's quota (that stays the in-band `RATE_LIMITED`).
//!
//! The proposals are drafts, not accepted (the transports working group's error-registry
//! proposal, SEP-3313 and SEP-3304): every name they define that we put on the wire is in
//! [`names`], so that following the final text is a change of one line there. `cargo xtask
//! gen-matrix` writes this table to `spec/wire-mappings.json`; `cargo xtask verify-matrix` checks
//! it against the matrix ([`check`]): one row for every code and retry category the matrix can
//! produce, none for a pair it cannot.
//!
//! The tool-failure object is emitted only where an adapter is told to (the MCP adapter's
//! `McpConfig::tool_failure`, off by default), and under our own `_meta` key ([`names::TOOL_FAILURE_KEY`]),
//! never under the protocol's reserved prefix, until the proposal is accepted. The retry
//! classification (a) and the transport limits (c) are recorded here and checked, and not yet
//! put on the wire: no transport we serve has a place for them before the drafts are accepted
//! (the payload's own `retry`, `notProcessed` and `details.retryAfterMs` say the same in band).

use serde_json::{Map, Value, json};

use crate::code::{ErrorCode, Retry};
use crate::matrix;
use crate::payload::ErrorPayload;

/// Every wire name the drafts define that we use: the one place to rename.
pub mod names {
    /// Retry class: do not retry as is (error registry draft).
    pub const CLASS_NO: &str = "no";
    /// Retry class: retry after the delay in [`RETRY_AFTER_MS`].
    pub const CLASS_AFTER_DELAY: &str = "after-delay";
    /// Retry class: retry with a changed request.
    pub const CLASS_WITH_CHANGES: &str = "with-changes";
    /// Retry class: refresh the definitions (list again), then retry.
    pub const CLASS_AFTER_REFRESH: &str = "after-refresh";
    /// The delay member, in milliseconds (error registry draft, SEP-3304).
    pub const RETRY_AFTER_MS: &str = "retryAfterMs";
    /// The flag that the request was not processed (error registry draft).
    pub const NOT_PROCESSED: &str = "notProcessed";

    /// The `_meta` key the tool-failure object is emitted under: ours, until SEP-3313 is
    /// accepted (its draft key, [`TOOL_FAILURE_PROPOSED_KEY`], is under the protocol's reserved
    /// prefix, which only the specification may use).
    pub const TOOL_FAILURE_KEY: &str = "agent-surface/toolFailure";
    /// The key SEP-3313 proposes (recorded, never emitted before acceptance).
    pub const TOOL_FAILURE_PROPOSED_KEY: &str = "io.modelcontextprotocol/toolFailure";
    /// Tool-failure class: the operation cannot succeed as requested.
    pub const FAILURE_CAPABILITY: &str = "capability";
    /// Tool-failure class: a transient condition.
    pub const FAILURE_RELIABILITY: &str = "reliability";
    /// Tool-failure class: refused by policy (authentication, approval, audit).
    pub const FAILURE_GOVERNANCE: &str = "governance";
    /// Tool-failure members.
    pub const CLASS: &str = "class";
    /// The open failure code.
    pub const CODE: &str = "code";
    /// Whether the exact call may be retried (reliability only).
    pub const RETRYABLE: &str = "retryable";
    /// The earliest retry, Unix epoch milliseconds.
    pub const RETRY_NOT_BEFORE: &str = "retryNotBefore";
    /// The operator's reference.
    pub const CORRELATION_ID: &str = "correlationId";
    /// The short instruction for the model.
    pub const AGENT_GUIDANCE: &str = "agentGuidance";

    /// The JSON-RPC code SEP-3304 proposes for a rate limit at the protocol level.
    pub const RATE_LIMITED_JSONRPC: i32 = -32023;
    /// Its HTTP status.
    pub const RATE_LIMITED_HTTP: u16 = 429;
}

/// A retry class of the proposed error registry.
#[expect(clippy::exhaustive_enums, reason = "the classes of the proposed registry, fixed by its table")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryClass {
    /// Do not retry as is.
    No,
    /// Retry after `retryAfterMs`.
    AfterDelay,
    /// Retry with a changed request.
    WithChanges,
    /// Refresh the definitions, then retry.
    AfterRefresh,
}

impl RetryClass {
    /// The wire name ([`names`]).
    pub const fn as_str(self) -> &'static str {
        match self {
            RetryClass::No => names::CLASS_NO,
            RetryClass::AfterDelay => names::CLASS_AFTER_DELAY,
            RetryClass::WithChanges => names::CLASS_WITH_CHANGES,
            RetryClass::AfterRefresh => names::CLASS_AFTER_REFRESH,
        }
    }
}

/// Where an after-delay class takes its delay from.
#[expect(clippy::exhaustive_enums, reason = "where a delay comes from in the proposed registry, fixed by its table")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// No delay (the class is not after-delay).
    None,
    /// At once: `retryAfterMs: 0` (our `yes`, which the registry draft has no class for).
    Zero,
    /// The payload's `details.retryAfterMs`.
    FromDetails,
}

/// A class of the proposed tool-failure object.
#[expect(clippy::exhaustive_enums, reason = "the classes of the proposed tool-failure object, fixed by its table")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// The operation cannot succeed as requested: a different approach, not a retry.
    Capability,
    /// Transient: a retry may succeed.
    Reliability,
    /// Refused by policy: an action outside the call (a sign-in, an approval).
    Governance,
}

impl FailureClass {
    /// The wire name ([`names`]).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureClass::Capability => names::FAILURE_CAPABILITY,
            FailureClass::Reliability => names::FAILURE_RELIABILITY,
            FailureClass::Governance => names::FAILURE_GOVERNANCE,
        }
    }
}

/// One row: a code under one retry category, and its wire forms.
#[derive(Clone, Copy, Debug)]
pub struct WireRow {
    /// The code.
    pub code: ErrorCode,
    /// The retry category (one the matrix gives the code).
    pub retry: Retry,
    /// (a) The retry class of the proposed error registry.
    pub class: RetryClass,
    /// (a) Where its `retryAfterMs` comes from.
    pub delay: Delay,
    /// (b) The tool-failure class.
    pub failure: FailureClass,
    /// (b) The tool-failure code (the draft's baseline vocabulary where one fits).
    pub failure_code: &'static str,
}

const fn row(
    code: ErrorCode,
    retry: Retry,
    class: RetryClass,
    delay: Delay,
    failure: FailureClass,
    failure_code: &'static str,
) -> WireRow {
    WireRow { code, retry, class, delay, failure, failure_code }
}

use Delay::{FromDetails, None as NoDelay, Zero};
use FailureClass::{Capability, Governance, Reliability};
use Retry as R;
use RetryClass as K;

/// [`WIRE`], from the table's `wire` column (`codes.rs`): each code's rows are written in its
/// block there, in the table's order.
macro_rules! wire_rows {
    ($( $code:ident [ $( ( $($row:tt)* ) ),* $(,)? ] )*) => {
        /// The table: every code under every retry category the matrix can give it.
        pub static WIRE: &[WireRow] = &[
            $( $( row(ErrorCode::$code, $($row)*), )* )*
        ];
    };
}

crate::codes::code_table!(wire => wire_rows);

/// A limit of the transport (the server layer), answered with the proposed protocol-level
/// rate-limit error rather than an in-band payload: no call reached the registry.
#[derive(Clone, Copy, Debug)]
pub struct TransportLimit {
    /// What is limited, in one phrase.
    pub limit: &'static str,
    /// Where it is answered.
    pub answered_by: &'static str,
    /// The JSON-RPC code.
    pub jsonrpc_code: i32,
    /// The HTTP status.
    pub http_status: u16,
}

/// The transport's limits and their proposed protocol error (SEP-3304), recorded, not yet
/// emitted (the session cap still answers `503` with `Retry-After`). A capability's quota is
/// never one of them: it stays `RATE_LIMITED` in band (the table above).
pub static TRANSPORT_LIMITS: [TransportLimit; 1] = [TransportLimit {
    limit: "open MCP sessions (McpHttpConfig::max_sessions), at initialize",
    answered_by: "agent-surface-mcp's HTTP router: today 503 with Retry-After; this error once SEP-3304 is accepted",
    jsonrpc_code: names::RATE_LIMITED_JSONRPC,
    http_status: names::RATE_LIMITED_HTTP,
}];

/// The row for a payload: its code under its retry category.
pub fn row_of(payload: &ErrorPayload) -> Option<&'static WireRow> {
    WIRE.iter().find(|r| r.code == payload.code() && r.retry == payload.retry())
}

/// (a) The retry classification of a payload: `{retry, retryAfterMs?, notProcessed?}` in the
/// registry draft's names.
pub fn retry_classification(payload: &ErrorPayload) -> Value {
    let mut out = Map::new();
    let Some(row) = row_of(payload) else { return Value::Object(out) };
    out.insert("retry".into(), Value::from(row.class.as_str()));
    let delay = match row.delay {
        Delay::None => None,
        Delay::Zero => Some(0),
        Delay::FromDetails => Some(payload.retry_after().map_or(0, |d| d.as_millis() as u64)),
    };
    if let Some(ms) = delay {
        out.insert(names::RETRY_AFTER_MS.into(), Value::from(ms));
    }
    if payload.not_processed() {
        out.insert(names::NOT_PROCESSED.into(), Value::Bool(true));
    }
    Value::Object(out)
}

/// (b) The tool-failure object of a payload (SEP-3313's shape), `now_ms` the current Unix time
/// in milliseconds (for `retryNotBefore`). `None` for a payload without a correlation id (the
/// draft makes it mandatory) or outside the table.
pub fn tool_failure(payload: &ErrorPayload, now_ms: u64) -> Option<Value> {
    let row = row_of(payload)?;
    let correlation = payload.correlation_id()?;
    let mut out = json!({
        names::CLASS: row.failure.as_str(),
        names::CODE: row.failure_code,
        names::CORRELATION_ID: correlation,
        names::AGENT_GUIDANCE: payload.message(),
    });
    if row.failure == FailureClass::Reliability {
        out[names::RETRYABLE] = Value::Bool(true);
        let delay = match row.delay {
            Delay::FromDetails => payload.retry_after().map(|d| d.as_millis() as u64),
            _ => None,
        };
        if let Some(ms) = delay {
            out[names::RETRY_NOT_BEFORE] = Value::from(now_ms.saturating_add(ms));
        }
    }
    Some(out)
}

/// Checks the table against the matrix: one row for every (code, retry) pair the matrix can
/// produce and none for another; the class agrees with the category (after-delay for `yes` and
/// `after-delay`, after-refresh, with-changes for with-changes and with-confirmation, no for
/// no); a tool failure is `reliability` exactly when the category lets a client repeat the call
/// as it was; the delay comes from the details exactly when the category is `after-delay`; a
/// transport limit is never an in-band code's. Returns every problem found.
pub fn check() -> Vec<String> {
    check_rows(WIRE)
}

/// [`check`] over `rows` in place of the table.
pub fn check_rows(rows: &[WireRow]) -> Vec<String> {
    let mut problems = Vec::new();
    for spec in &matrix::MATRIX {
        let mut retries: Vec<Retry> = spec.retry.values().collect();
        retries.dedup();
        for retry in retries {
            let n = rows.iter().filter(|r| r.code == spec.code && r.retry == retry).count();
            if n != 1 {
                problems.push(format!("{} under {retry}: {n} rows, expected 1", spec.code));
            }
        }
    }
    for r in rows {
        if !matrix::spec(r.code).retry.values().any(|v| v == r.retry) {
            problems.push(format!("{} under {}: the matrix never gives this category", r.code, r.retry));
        }
        let class = match r.retry {
            Retry::Yes | Retry::AfterDelay => RetryClass::AfterDelay,
            Retry::AfterRefresh => RetryClass::AfterRefresh,
            Retry::WithChanges | Retry::WithConfirmation => RetryClass::WithChanges,
            Retry::No => RetryClass::No,
        };
        if r.class != class {
            problems.push(format!(
                "{} under {}: class {}, expected {}",
                r.code,
                r.retry,
                r.class.as_str(),
                class.as_str()
            ));
        }
        let delay = match r.retry {
            Retry::AfterDelay => Delay::FromDetails,
            Retry::Yes => Delay::Zero,
            _ => Delay::None,
        };
        if r.delay != delay {
            problems.push(format!("{} under {}: delay {:?}, expected {delay:?}", r.code, r.retry, r.delay));
        }
        let reliable = matches!(r.retry, Retry::Yes | Retry::AfterDelay);
        if (r.failure == FailureClass::Reliability) != reliable {
            problems.push(format!("{} under {}: tool-failure class {}", r.code, r.retry, r.failure.as_str()));
        }
    }
    for limit in &TRANSPORT_LIMITS {
        if limit.jsonrpc_code != names::RATE_LIMITED_JSONRPC || limit.http_status != names::RATE_LIMITED_HTTP {
            problems.push(format!("transport limit {}: not the proposed rate-limit error", limit.limit));
        }
    }
    problems
}

/// The table as the JSON document written to `spec/wire-mappings.json`.
pub fn to_json() -> Value {
    json!({
        "$comment": "GENERATED by `cargo xtask gen-matrix` from crates/agent-surface-core/src/wire.rs. Do not edit by hand.",
        "formatVersion": crate::render::FORMAT_VERSION,
        "status": "drafts: the error-registry proposal of the transports working group, SEP-3313 (tool failures), SEP-3304 (rate limits); none accepted",
        "names": {
            "retryClasses": [names::CLASS_NO, names::CLASS_AFTER_DELAY, names::CLASS_WITH_CHANGES, names::CLASS_AFTER_REFRESH],
            "retryAfterMs": names::RETRY_AFTER_MS,
            "notProcessed": names::NOT_PROCESSED,
            "toolFailureKey": names::TOOL_FAILURE_KEY,
            "toolFailureProposedKey": names::TOOL_FAILURE_PROPOSED_KEY,
            "toolFailureEmitted": "only with McpConfig::tool_failure, under toolFailureKey",
            "rateLimitedJsonRpc": names::RATE_LIMITED_JSONRPC,
            "rateLimitedHttp": names::RATE_LIMITED_HTTP,
        },
        "rows": WIRE.iter().map(|r| json!({
            "code": r.code.as_str(),
            "retry": r.retry.as_str(),
            "retryClass": r.class.as_str(),
            "retryAfterMs": match r.delay { Delay::None => Value::Null, Delay::Zero => Value::from(0), Delay::FromDetails => Value::from("details.retryAfterMs") },
            "notProcessedPhases": matrix::not_processed_phases(r.code).map(|p| p.as_str()).collect::<Vec<_>>(),
            "toolFailure": {"class": r.failure.as_str(), "code": r.failure_code, "retryable": r.failure == FailureClass::Reliability},
        })).collect::<Vec<_>>(),
        "transportLimits": TRANSPORT_LIMITS.iter().map(|l| json!({
            "limit": l.limit,
            "answeredBy": l.answered_by,
            "jsonRpcCode": l.jsonrpc_code,
            "httpStatus": l.http_status,
        })).collect::<Vec<_>>(),
    })
}

/// [`to_json`] as text (pretty, newline at the end).
pub fn to_json_string() -> String {
    let mut s = serde_json::to_string_pretty(&to_json()).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_agrees_with_the_matrix() {
        assert_eq!(check(), Vec::<String>::new());
    }

    #[test]
    fn a_missing_row_or_a_wrong_class_is_reported() {
        let missing: Vec<WireRow> = WIRE.iter().copied().filter(|r| r.code != ErrorCode::Timeout).collect();
        assert!(
            check_rows(&missing).iter().any(|p| p.contains("TIMEOUT under yes: 0 rows")),
            "{:?}",
            check_rows(&missing)
        );
        let mut wrong: Vec<WireRow> = WIRE.to_vec();
        // A capability's quota as a non-retryable failure: refused.
        wrong
            .iter_mut()
            .filter(|r| r.code == ErrorCode::RateLimited)
            .for_each(|r| r.failure = FailureClass::Capability);
        assert!(check_rows(&wrong).iter().any(|p| p.starts_with("RATE_LIMITED")), "{:?}", check_rows(&wrong));
    }

    #[test]
    fn a_payload_maps_to_both_drafts() {
        use crate::AgentSurfaceError;
        use crate::details::RateLimitReason;
        let mut p = AgentSurfaceError::rate_limited(RateLimitReason::Rate, std::time::Duration::from_millis(1200))
            .into_payload();
        assert!(p.set_not_processed(true));
        assert_eq!(
            retry_classification(&p),
            json!({"retry": "after-delay", "retryAfterMs": 1200, "notProcessed": true})
        );
        assert_eq!(tool_failure(&p, 1_000), None, "no correlation id, no object (the draft makes it mandatory)");
        assert!(p.set_correlation_id(Some("c-1")));
        let f = tool_failure(&p, 1_000).unwrap();
        assert_eq!(
            (f["class"].clone(), f["retryable"].clone(), f["retryNotBefore"].clone()),
            (json!("reliability"), json!(true), json!(2_200))
        );
        assert_eq!(f["correlationId"], "c-1");
        let denied = AgentSurfaceError::not_authenticated().into_payload();
        assert_eq!(retry_classification(&denied), json!({"retry": "no"}));
    }
}
