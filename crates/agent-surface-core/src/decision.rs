//! The client's decision table: what a recovering client does with each error it receives.
//!
//! The matrix ([`crate::matrix`]) says, per code, which retry category a payload carries. A client
//! needs one step more: *what to do* — wait how long, re-list, which invocation id to send,
//! whom to ask. [`DECISIONS`] is that step, one row per code and retry branch (plus the one
//! detail that changes the action without changing the category: an `outcome-unknown` failure).
//! Every recovering client of this workspace acts on it:
//!
//! - the reference driver (`agent_surface_toolset::RecoveryDriver`) dispatches on [`decide`];
//! - the MCP client wrapper (`agent-surface-client`) does too;
//! - the Python helper (`clients/python/agent_surface`) reads the same rows from the JSON that
//!   `cargo xtask gen-matrix` writes (`spec/recovery.json`, copied into the package), and
//!   `docs/recovery.md` shows them as a generated table.
//!
//! The rows are checked against the matrix: each row's category is what [`crate::matrix::derive_retry`]
//! gives for its condition, every branch of every retry rule has a row, and each action fits its
//! category ([`Action::fits`]).
//!
//! Beyond the rows, every client applies the [`GUARD`] (the same failure twice in a row, after
//! the action its row prescribes, ends the loop; a wait row is bounded by the delays instead) and
//! the [`BOUNDS`].
//!
//! **Interrupted calls.** No row depends on the capability's declarations: the code already says
//! whether a repeat could double an effect (`spec/error-model.md`, *Interrupted calls*). A call
//! interrupted after its handler started comes back as `TIMEOUT`, `CANCELLED` or
//! `COMPONENT_UNMOUNTED {phase: mid-flight}` only for a capability that is idempotent or whose
//! effect is `read`, and is repeated as that code's row says, unverified; for any other capability
//! it is `EXECUTION_FAILED {reason: outcome-unknown}`, the one row whose action is
//! [`Action::Verify`].
//!
//! ```
//! use agent_surface_core::decision::{decide, Action, IdRule};
//! use agent_surface_core::{ErrorCode, Retry};
//!
//! let d = serde_json::json!({"reason": "per-consumer", "retryAfterMs": 1200});
//! let row = decide(ErrorCode::RateLimited, d.as_object());
//! assert_eq!((row.retry, row.action), (Retry::AfterDelay, Action::Wait));
//! assert_eq!(row.wait_field, Some("retryAfterMs"));
//! assert_eq!(row.invocation_id, IdRule::Same);
//!
//! let d = serde_json::json!({"reason": "outcome-unknown"});
//! assert_eq!(decide(ErrorCode::ExecutionFailed, d.as_object()).action, Action::Verify);
//! ```

use std::time::Duration;

use serde_json::{Map, Value};

use crate::code::{ErrorCode, Retry};
use crate::matrix::{DetailValue, NOT_PROCESSED_FIELD};
use crate::payload::ErrorPayload;

/// What a client does next with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Re-list the surface. Retry (under a fresh invocation id, with the surface tokens updated
    /// and a replaced registration retargeted) only if the capability is still listed and
    /// enabled and its target still exists; otherwise hand the error to the model.
    Refresh,
    /// Re-list the surface, so that the model is shown the tool's new definition, then hand the
    /// error to the model; never repeat the call on its own. For a tool whose definition changed
    /// (`STALE_CAPABILITY {reason: tool-version-mismatch}`): a compatible schema may carry a new
    /// meaning (units, say), so the same arguments are not sent again until the model has read it.
    RefreshThenAsk,
    /// Wait `details[wait_field]` (or the client's default delay), within the client's bounds,
    /// then retry; a wait beyond the bounds hands the error to the model.
    Wait,
    /// Retry at once.
    Retry,
    /// Retry once, at once, under a fresh invocation id: the runtime stated that the call
    /// stopped before its handler started (`notProcessed`), so a repeat cannot double an effect
    /// even of a non-idempotent call; the same failure again ends the loop (the guard).
    RetryOnce,
    /// Ask the host whether the call took effect. Not applied: retry under a fresh id. Applied,
    /// or unknown (the default): stop; never repeat blindly, never reconcile (a repeat under the
    /// same id only replays the recorded outcome).
    Verify,
    /// Retry under an invocation id derived from the conflicting one and the request itself, so
    /// that another request cannot collide with it again.
    NewId,
    /// Present the confirmation to a person (never the model). Approved: retry with
    /// `details.confirmationId`; denied: stop with `CONFIRMATION_INVALID {reason: denied}`; no
    /// one to ask: hand it to the model (two-phase).
    Confirm,
    /// Start a fresh confirmation cycle: retry without the stale `confirmationId`.
    Reconfirm,
    /// Hand the error to the model: the repair is a change of the tool's input.
    ChangeInput,
    /// Stop: the error is terminal for this intent; a denial is never retried.
    Stop,
}

impl Action {
    /// Every action, in table order.
    pub const ALL: [Action; 11] = [
        Action::Refresh,
        Action::RefreshThenAsk,
        Action::Wait,
        Action::Retry,
        Action::RetryOnce,
        Action::Verify,
        Action::NewId,
        Action::Confirm,
        Action::Reconfirm,
        Action::ChangeInput,
        Action::Stop,
    ];

    /// The wire name (kebab-case).
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Refresh => "refresh",
            Action::RefreshThenAsk => "refresh-then-ask",
            Action::Wait => "wait",
            Action::Retry => "retry",
            Action::RetryOnce => "retry-once",
            Action::Verify => "verify",
            Action::NewId => "new-id",
            Action::Confirm => "confirm",
            Action::Reconfirm => "reconfirm",
            Action::ChangeInput => "change-input",
            Action::Stop => "stop",
        }
    }

    /// What a client does, in one sentence.
    pub const fn meaning(self) -> &'static str {
        match self {
            Action::Refresh => {
                "Re-list the surface; retry under a fresh id, with updated surface tokens and a replaced registration retargeted, only if the tool is still listed and enabled, under the tool version the arguments were built for, and its target still exists; else hand the error to the model."
            }
            Action::RefreshThenAsk => {
                "Hand the error to the model with the surface marked for re-listing (the caller lists the tools again and shows the model the tool's new definition); never repeat the call on its own (the same arguments may now mean something else)."
            }
            Action::Wait => {
                "Wait the delay the row names (bounded by the client's limits), then retry; a longer delay goes to the model."
            }
            Action::Retry => "Retry at once.",
            Action::RetryOnce => {
                "Nothing ran (notProcessed): retry once, at once, under a fresh id; the same failure again goes to the model."
            }
            Action::Verify => {
                "Ask the host whether the effect happened: not applied, retry under a fresh id; applied or unknown, stop. Never reconcile under the same id (it replays the same record)."
            }
            Action::NewId => "Retry under an id derived from the conflicting id and this request.",
            Action::Confirm => {
                "Present the confirmation to a person: approved, retry with details.confirmationId; denied, stop (CONFIRMATION_INVALID denied); no one to ask, hand it to the model."
            }
            Action::Reconfirm => "Retry without the stale confirmationId: a fresh confirmation cycle.",
            Action::ChangeInput => "Hand the error to the model, which changes the tool's input.",
            Action::Stop => "Stop: terminal for this intent; tell the user.",
        }
    }

    /// Whether this action may answer a payload of this retry category.
    pub fn fits(self, retry: Retry) -> bool {
        match self {
            Action::Refresh | Action::RefreshThenAsk => retry == Retry::AfterRefresh,
            Action::Wait => retry == Retry::AfterDelay,
            Action::Retry => retry == Retry::Yes,
            // Only on a `notProcessed` row: the category says no blind repeat of what ran, and
            // nothing ran.
            Action::RetryOnce => retry == Retry::No,
            Action::Verify => retry == Retry::No,
            Action::NewId | Action::ChangeInput => retry == Retry::WithChanges,
            Action::Confirm | Action::Reconfirm => retry == Retry::WithConfirmation,
            Action::Stop => retry == Retry::No,
        }
    }
}

/// Which invocation id the retry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdRule {
    /// A fresh id (derived from the first, one per attempt): the failure was stored as the
    /// terminal result of the old id, which would only replay it.
    Fresh,
    /// The same id: the failure was not stored.
    Same,
    /// An id derived from the conflicting one and the request ([`Action::NewId`]).
    Derived,
    /// There is no retry.
    None,
}

impl IdRule {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            IdRule::Fresh => "fresh",
            IdRule::Same => "same",
            IdRule::Derived => "derived",
            IdRule::None => "none",
        }
    }
}

/// One row: for a code (and a details condition), the action.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Decision {
    /// The code.
    pub code: ErrorCode,
    /// The details member and value this row needs (`None`: the code's default row).
    pub when: Option<(&'static str, DetailValue)>,
    /// The retry category such a payload carries (checked against the matrix).
    pub retry: Retry,
    /// What the client does.
    pub action: Action,
    /// The details member holding the delay in milliseconds ([`Action::Wait`]).
    pub wait_field: Option<&'static str>,
    /// Which invocation id the retry carries.
    pub invocation_id: IdRule,
    /// Where the client stops when the action cannot help (the name of the driver's stop).
    pub stop: &'static str,
    /// Why, in one sentence.
    pub note: &'static str,
}

impl Decision {
    /// Whether this row applies to these details. A row on the payload's
    /// [`notProcessed`](crate::matrix::NOT_PROCESSED_FIELD) member never matches details alone
    /// (use [`Decision::matches_payload`]).
    pub fn matches(&self, details: Option<&Map<String, Value>>) -> bool {
        match self.when {
            None => true,
            Some((NOT_PROCESSED_FIELD, _)) => false,
            Some((field, value)) => value.matches(details.and_then(|d| d.get(field))),
        }
    }

    /// Whether this row applies to this payload: its condition is on a details member, or on
    /// the payload's `notProcessed` member ([`Decision::on_payload`]).
    pub fn matches_payload(&self, payload: &ErrorPayload) -> bool {
        match self.when {
            Some((NOT_PROCESSED_FIELD, value)) => value.matches(Some(&Value::Bool(payload.not_processed()))),
            _ => self.matches(payload.details()),
        }
    }

    /// Whether the row's condition is on a member of the payload itself (`notProcessed`) rather
    /// than of its details.
    pub fn on_payload(&self) -> bool {
        matches!(self.when, Some((NOT_PROCESSED_FIELD, _)))
    }
}

/// A row before it is given its code: what a block of the table of codes (`codes.rs`, the
/// `decisions` column) writes.
#[derive(Clone, Copy)]
struct Branch {
    when: Option<(&'static str, DetailValue)>,
    retry: Retry,
    action: Action,
    wait_field: Option<&'static str>,
    invocation_id: IdRule,
    stop: &'static str,
    note: &'static str,
}

const fn row(retry: Retry, action: Action, id: IdRule, stop: &'static str, note: &'static str) -> Branch {
    Branch { when: None, retry, action, wait_field: None, invocation_id: id, stop, note }
}

const fn when(field: &'static str, value: DetailValue, b: Branch) -> Branch {
    Branch { when: Some((field, value)), ..b }
}

const fn waiting(b: Branch) -> Branch {
    Branch { wait_field: Some("retryAfterMs"), ..b }
}

const fn of(code: ErrorCode, b: Branch) -> Decision {
    let Branch { when, retry, action, wait_field, invocation_id, stop, note } = b;
    Decision { code, when, retry, action, wait_field, invocation_id, stop, note }
}

use Action::*;
use IdRule::{Derived, Fresh, Same};
use Retry as R;

// The `stop` column names a [`Stop`] (the enum; `Stop` alone in a row's action is `Action::Stop`).
const RETURNED: &str = self::Stop::ReturnedToCaller.as_str();
const NOT_CONVERGING: &str = self::Stop::NotConverging.as_str();
const DENIED: &str = self::Stop::Denied.as_str();
const DELAY_TOO_LONG: &str = self::Stop::DelayTooLong.as_str();
const UNVERIFIED: &str = self::Stop::Unverified.as_str();

/// [`DECISIONS`], from the table's `decisions` column (`codes.rs`): each code's rows are written
/// in its block there, in the table's order.
macro_rules! decisions {
    ($( $code:ident [ $($branch:expr),* $(,)? ] )*) => {
        /// The table: per code, its conditional rows first, then its default row (the first match wins).
        pub static DECISIONS: [Decision; [$($(stringify!($branch)),*),*].len()] = [
            $( $( of(ErrorCode::$code, $branch), )* )*
        ];
    };
}

crate::codes::code_table!(decisions => decisions);

/// The row for a code and its details: the first of the code's rows whose condition matches.
/// Rows on the payload's `notProcessed` member never match here: a client holding the payload
/// uses [`decide_payload`].
///
/// Every code has a default row (the table's own test checks it), so this always finds one.
pub fn decide(code: ErrorCode, details: Option<&Map<String, Value>>) -> &'static Decision {
    let mut rows = DECISIONS.iter().filter(|d| d.code == code);
    let first = rows.clone().find(|d| d.matches(details));
    first.or_else(|| rows.next_back()).unwrap_or(&DECISIONS[DECISIONS.len() - 1])
}

/// The row for a payload: the first of its code's rows whose condition matches its details or
/// its `notProcessed` member.
///
/// ```
/// use agent_surface_core::{decision::{decide_payload, Action}, AgentSurfaceError, details::ExecutionFailedReason};
/// let mut p = AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError).into_payload();
/// assert_eq!(decide_payload(&p).action, Action::Stop);
/// p.set_not_processed(true);
/// assert_eq!(decide_payload(&p).action, Action::RetryOnce);
/// ```
pub fn decide_payload(payload: &ErrorPayload) -> &'static Decision {
    let mut rows = DECISIONS.iter().filter(|d| d.code == payload.code());
    let first = rows.clone().find(|d| d.matches_payload(payload));
    first.or_else(|| rows.next_back()).unwrap_or(&DECISIONS[DECISIONS.len() - 1])
}

/// Why a client helper's recovery loop stopped: the names of the decision table's `stop` column,
/// one vocabulary for the toolset's `RecoveryDriver` and the `rmcp` client helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// The call succeeded.
    Succeeded,
    /// The error is the caller's (the model's) to act on: `no`, `with-changes`, a confirmation no
    /// one in-process can approve, a re-listing that found nothing to call or nothing changed.
    ReturnedToCaller,
    /// The same failure (code, reason, capability, target, surface tokens sent) came back after
    /// the action its row prescribes: repeating it cannot help. (Not after a wait: a limit met
    /// again is waited for again, within [`Bounds`].)
    NotConverging,
    /// The attempt budget is spent.
    BudgetExhausted,
    /// The requested delay exceeds the bounds.
    DelayTooLong,
    /// The person denied the confirmation.
    Denied,
    /// The call may have taken effect and nothing proves it did not: not repeated.
    Unverified,
    /// The host verified that the call took effect: not repeated.
    VerifiedApplied,
    /// The caller's cancellation fired (a loop that takes a cancellation token).
    Cancelled,
}

impl Stop {
    /// The name, as in the decision table.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Stop::Succeeded => "succeeded",
            Stop::ReturnedToCaller => "returned-to-caller",
            Stop::NotConverging => "not-converging",
            Stop::BudgetExhausted => "budget-exhausted",
            Stop::DelayTooLong => "delay-too-long",
            Stop::Denied => "denied",
            Stop::Unverified => "unverified",
            Stop::VerifiedApplied => "verified-applied",
            Stop::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host's answer when a person is asked to approve a call (a confirmation's
/// [`Action::Confirm`]): the same three answers for every client helper.
#[expect(
    clippy::exhaustive_enums,
    reason = "the three answers every client helper offers: a fourth would change every helper"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Approved: retry with the confirmation id.
    Approved,
    /// Denied: never retry.
    Denied,
    /// No one can be asked in-process: hand the confirmation to the model (two-phase).
    Unavailable,
}

/// A host's finding after a call that may have taken effect (the [`Action::Verify`] row), the
/// same for every client helper.
#[expect(clippy::exhaustive_enums, reason = "the findings every client helper offers, closed with the decision table")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// The effect did not happen: the call may be repeated.
    NotApplied,
    /// The effect happened: do not repeat.
    Applied,
    /// It cannot be told: do not repeat (the default).
    Unknown,
}

/// The loop's bounds every client shares by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bounds {
    /// The most requests one intent may send, the first included.
    pub max_attempts: u32,
    /// The longest single wait honored; a longer delay goes to the model.
    pub max_delay: Duration,
    /// The most waiting in all, for one intent.
    pub max_total_delay: Duration,
    /// The wait when a `wait` row's payload carries no delay.
    pub default_delay: Duration,
}

/// The default bounds.
pub const BOUNDS: Bounds = Bounds {
    max_attempts: 4,
    max_delay: Duration::from_secs(30),
    max_total_delay: Duration::from_secs(60),
    default_delay: Duration::from_secs(1),
};

/// The answer a client gives the model when its host's person denied a confirmation (the `confirm`
/// action answered *denied*): `CONFIRMATION_INVALID {reason: denied}`, `notProcessed` (nothing it
/// asked for was done), worded as the server words it when the model writes tool arguments (the
/// MCP adapter's own answer to a declined approval). The model is told the decision, never the
/// request for approval it answered.
///
/// ```
/// use agent_surface_core::{ErrorCode, Retry, decision::denied_answer};
/// let p = denied_answer();
/// assert_eq!((p.code(), p.retry()), (ErrorCode::ConfirmationInvalid, Retry::No));
/// assert_eq!(p.detail("reason"), Some(&serde_json::json!("denied")));
/// assert!(p.not_processed());
/// ```
pub fn denied_answer() -> ErrorPayload {
    let mut payload = crate::AgentSurfaceError::confirmation_invalid(crate::details::ConfirmationInvalidReason::Denied)
        .into_payload()
        .worded_for(crate::message::Sends::Arguments)
        .into_owned();
    payload.set_not_processed(true);
    payload
}

/// The convergence guard every client applies.
pub const GUARD: &str = "The same failure (code, details.reason or details.phase, tool, target and the surface tokens sent) twice in a row, the second after the action its row prescribes, ends the loop (not-converging): doing the same a third time cannot help. A failure met again under newer surface tokens is progress (the surface moved again after the re-listing), not the same failure. A wait row is not held to the guard: a limit or a dependency met again after its delay is waited for again, within the bounds on each delay, on the delays in all (delay-too-long) and on the attempts (budget-exhausted).";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::matrix::{derive_retry, spec};

    fn details_of(d: &Decision) -> Option<Map<String, Value>> {
        let (field, value) = d.when?;
        let v = match value {
            DetailValue::Str(s) => json!(s),
            DetailValue::Bool(b) => json!(b),
        };
        Some([(field.to_string(), v)].into_iter().collect())
    }

    #[test]
    fn every_row_agrees_with_the_matrix() {
        for d in DECISIONS.iter().filter(|d| !d.on_payload()) {
            let details = details_of(d);
            assert_eq!(derive_retry(d.code, details.as_ref()), d.retry, "{}", d.code);
            assert!(d.action.fits(d.retry), "{}: {} does not fit {}", d.code, d.action.as_str(), d.retry);
            assert!(std::ptr::eq(decide(d.code, details.as_ref()), d), "{}: the row is shadowed", d.code);
            // A retry under the same id only works for a failure that was not stored: a code that
            // is never kept, or a store that could not admit the call (nothing was recorded).
            if d.invocation_id == Same && d.when != Some(("reason", DetailValue::Str("store-unavailable"))) {
                assert!(!spec(d.code).cacheable, "{}", d.code);
            }
            assert_eq!(d.wait_field.is_some(), d.action == Wait, "{}", d.code);
            let retries = !matches!(d.action, RefreshThenAsk | ChangeInput | Stop);
            assert_eq!(retries, d.invocation_id != IdRule::None, "{}", d.code);
        }
    }

    /// The rows on `notProcessed`: each is reached by a payload the runtime marks (a pre-handler
    /// failure of that code), agrees with the matrix, and only licenses one repeat under a fresh
    /// id; the same code's payload without the mark keeps its own row.
    #[test]
    fn not_processed_rows_are_reached_only_by_marked_payloads() {
        use crate::AgentSurfaceError;
        use crate::details::ExecutionFailedReason;
        let on_payload: Vec<_> = DECISIONS.iter().filter(|d| d.on_payload()).collect();
        assert_eq!(on_payload.len(), 1);
        let d = on_payload[0];
        assert_eq!(d.code, ErrorCode::ExecutionFailed);
        assert!(d.action.fits(d.retry) && d.action == RetryOnce && d.invocation_id == Fresh);
        let mut p = AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError).into_payload();
        assert_eq!(decide_payload(&p).action, Stop, "processed: never repeated");
        assert!(p.set_not_processed(true));
        assert!(std::ptr::eq(decide_payload(&p), d));
        assert_eq!(derive_retry(p.code(), p.details()), d.retry);
        // Details alone never reach it.
        assert_eq!(decide(p.code(), p.details()).action, Stop);
        // A transient one waits as before; an unknown outcome cannot be marked.
        let mut t = AgentSurfaceError::transient(Duration::from_millis(100)).into_payload();
        assert!(t.set_not_processed(true));
        assert_eq!(decide_payload(&t).action, Wait);
        let mut u = AgentSurfaceError::outcome_unknown().into_payload();
        assert!(!u.set_not_processed(true));
        assert_eq!(decide_payload(&u).action, Verify);
    }

    /// The one rule for interrupted calls: the codes a call of a read or idempotent capability
    /// gets when interrupted after its handler started are repeated as their category says,
    /// unverified, whatever the capability declares; only an unknown outcome (any other
    /// capability) is verified first.
    #[test]
    fn only_an_unknown_outcome_is_verified_before_a_repeat() {
        let interrupted = [
            (ErrorCode::Timeout, Some(json!({"timeoutMs": 5000, "idempotent": false}))),
            (ErrorCode::Timeout, Some(json!({"timeoutMs": 5000, "idempotent": true}))),
            (ErrorCode::Cancelled, None),
            (ErrorCode::ComponentUnmounted, Some(json!({"phase": "mid-flight"}))),
        ];
        for (code, details) in interrupted {
            let details = details.as_ref().and_then(Value::as_object);
            let row = decide(code, details);
            assert!(matches!(row.action, Retry | Refresh), "{code} {details:?}: {}", row.action.as_str());
            assert_eq!(row.retry, derive_retry(code, details), "{code} {details:?}");
        }
        let verifying: Vec<_> = DECISIONS.iter().filter(|d| d.action == Verify).collect();
        assert_eq!(verifying.len(), 1);
        assert_eq!(
            (verifying[0].code, verifying[0].when),
            (ErrorCode::ExecutionFailed, Some(("reason", DetailValue::Str("outcome-unknown"))))
        );
    }

    /// A tool whose definition changed is re-listed and handed to the model, never called again
    /// with the same arguments; a stale surface token alone (the tool itself unchanged) is.
    #[test]
    fn a_changed_tool_is_not_called_again_before_the_model_reads_it() {
        let changed = json!({"reason": "tool-version-mismatch", "liveToolVersion": "0123456789abcdef0123"});
        let row = decide(ErrorCode::StaleCapability, changed.as_object());
        assert_eq!((row.action, row.invocation_id), (RefreshThenAsk, IdRule::None));
        let moved = json!({"reason": "surface-version-mismatch"});
        assert_eq!(decide(ErrorCode::StaleCapability, moved.as_object()).action, Refresh);
        let asking: Vec<_> = DECISIONS.iter().filter(|d| d.action == RefreshThenAsk).collect();
        assert_eq!(asking.len(), 1, "only a changed tool's definition is handed to the model after a re-listing");
    }

    #[test]
    fn every_code_and_retry_branch_has_a_row() {
        for code in ErrorCode::ALL {
            let rows: Vec<_> = DECISIONS.iter().filter(|d| d.code == code).collect();
            assert!(rows.last().is_some_and(|d| d.when.is_none()), "{code}: no default row last");
            for retry in spec(code).retry.values() {
                assert!(rows.iter().any(|d| d.retry == retry), "{code}: no row for retry {retry}");
            }
        }
    }
}
