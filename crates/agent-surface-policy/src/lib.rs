//! Policies, clocks and state stores consulted by the agent-surface invocation pipeline.
//!
//! # Overview
//!
//! The registry's pipeline (see `ARCHITECTURE.md`) decides; this crate holds the state and the
//! time those decisions read:
//!
//! - [`Clock`] — wall-clock time and timers: [`SystemClock`] in production, [`ManualClock`] in
//!   tests, where time moves only when told to;
//! - [`IdempotencyStore`] — admission (phase 1): one execution per [`IdempotencyKey`](idempotency::IdempotencyKey), duplicates
//!   follow the running call or replay its stored result, a reused key with another request
//!   conflicts. [`MemoryIdempotencyStore`] is the bounded in-process implementation;
//! - [`Fingerprint`](idempotency::Fingerprint) — what a request was, as SHA-256 over its canonical JSON
//!   ([`agent_surface_core::json`]);
//! - [`Consumer`] and [`Identity`] — who is calling;
//! - [`AuthorityPolicy`], [`RateLimiter`], [`ConfirmationGate`] — the hooks of phases 4, 6 and 7,
//!   each optional (absent: allow);
//! - [`Policies`] — the authority engine: global, per-type and per-capability policies, first
//!   non-`Allow` decision wins, failing closed (an error, a panic or an overrun denies);
//!   default-allow or default-deny ([`Fallback`]) for capabilities no policy names;
//! - [`Scope`] — a type or capability a hook is configured for; the registry checks every one
//!   exists when it is assembled;
//! - [`MemoryRateLimiter`] — GCRA buckets ([`RateBudgets`]: per consumer, per capability, per
//!   consumer for one capability or type), taken all-or-nothing, and a bounded action queue, with
//!   an honest `retryAfterMs`;
//! - [`ConfirmationEngine`] — confirmation gates (declared or decided by a
//!   [`ConfirmationPolicy`]), single-use evidence bound to the call, the host's approve / deny
//!   API, two-phase and wait modes; its records live in a [`ConfirmationStore`]
//!   ([`MemoryConfirmationStore`] in process);
//! - [`redact`] — the operator channel's redaction of application-caused text (causes, panic
//!   messages, store errors): [`Credentials`] by default, replaced or extended process-wide with
//!   [`install_redactor`];
//! - [`AuditSink`] — the audit trail: confirmation events and executions of capabilities with an
//!   effect ([`MemoryAuditSink`], [`JsonLinesAuditSink`]; strict audit with [`AuditConfig`]).
//!
//! Stores take `now` as an argument instead of reading a clock, so they never disagree with the
//! pipeline about time. Engines that wait (policy budgets, queue waits, wait-mode approvals) or
//! serve the host outside a call (approvals) hold a [`Clock`]: give them the registry's.
//! `spec/authority-and-confirmation.md` is the normative description of the three engines.
//!
//! The crate root holds what an application names: the engines, stores and policies it
//! configures and the traits it implements. The rest is reached through its area's module:
//! [`confirmation`] (records, quorum slots, store outcomes, limits), [`idempotency`] (the admission
//! protocol a store implements), [`guard`] (running application code fail-closed), [`hooks`],
//! [`audit`], [`authority`], [`rate`], [`clock`], [`authn`], [`task`], [`principal`],
//! [`store`] (what every store trait shares: its errors, its usage, the common contract),
//! [`stored`] (the record formats the shared stores write) and [`wiring`] (warnings about a
//! service's wiring, kept for a log installed later).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//!
//! use agent_surface_core::InvokeResult;
//! use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement};
//! use agent_surface_policy::{Clock, IdempotencyStore, ManualClock, MemoryIdempotencyStore};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = ManualClock::default();
//! let store = MemoryIdempotencyStore::default();
//! let key = IdempotencyKey::new("consumer-1", "inv-42");
//! let fingerprint = Fingerprint::of(&json!({"capability": "orders.cancel", "input": {"id": 7}}));
//!
//! // The first call leads: it runs the capability, then settles.
//! let Ok(Admission::Leader(lease)) = store.admit(&key, fingerprint, Attempt::fresh(), clock.now()).await else { panic!() };
//! let result = InvokeResult::ok(json!({"cancelled": true}), Some("inv-42".into()));
//! let expires_at = clock.now().saturating_add(Duration::from_secs(3600));
//! let settlement = Settlement::Store { result: result.clone(), expires_at };
//! store.settle(&key, fingerprint, lease, settlement, clock.now()).await.unwrap();
//!
//! // A retry of the same call replays the stored result.
//! clock.advance(Duration::from_secs(60));
//! let Ok(Admission::Replay(replayed)) = store.admit(&key, fingerprint, Attempt::fresh(), clock.now()).await else { panic!() };
//! assert_eq!(replayed, result);
//!
//! // The same invocation id with another request is a conflict.
//! let other = Fingerprint::of(&json!({"capability": "orders.cancel", "input": {"id": 8}}));
//! let Ok(Admission::Conflict { stored }) = store.admit(&key, other, Attempt::fresh(), clock.now()).await else { panic!() };
//! assert_eq!(stored, fingerprint);
//!
//! // Once the result expires, the key is free again.
//! clock.advance(Duration::from_secs(3600));
//! assert!(matches!(store.admit(&key, other, Attempt::fresh(), clock.now()).await, Ok(Admission::Leader(_))));
//! # });
//! ```

pub mod audit;
pub mod authn;
pub mod authority;
mod call;
pub mod clock;
pub mod confirmation;
mod consumer;
pub mod guard;
pub mod hooks;
pub mod idempotency;
pub mod inbox;
pub mod principal;
pub mod rate;
mod redact;
pub mod store;
pub mod stored;
pub mod task;
pub mod wiring;

// The root re-exports what an application names (see the crate docs); what only the sibling crates
// and store backends use stays behind its module's path.
pub use audit::{
    AuditConfig, AuditError, AuditEvent, AuditKind, AuditOutcome, AuditSink, AuditVerdict, JsonLinesAuditSink,
    MemoryAuditSink, MemoryAuditSinkConfig,
};
pub use authn::{AuthRejection, AuthRejectionKind, Authenticator, BearerTokens};
pub use authority::{AllowAll, Fallback, FnPolicy, Policies, RequireIdentity, RequireRole, Verdict};
pub use clock::{Clock, ManualClock, SystemClock};
pub use confirmation::{
    ApprovalError, Approver, ConfirmationConfig, ConfirmationEngine, ConfirmationMode, ConfirmationPolicy,
    ConfirmationRecord, ConfirmationStore, FnApprover, FnConfirmationPolicy, Gate, MemoryConfirmationStore,
    MemoryConfirmationStoreConfig, Quorum, Review, TargetBinding,
};
pub use consumer::{Consumer, Identity};
pub use hooks::{
    AtOnce, AuthorityDecision, AuthorityPolicy, CallInfo, ConfirmationDecision, ConfirmationGate, Found, PolicyError,
    RateDecision, RateLimiter, Scope,
};
pub use idempotency::{IdempotencyStore, MemoryIdempotencyStore, MemoryStoreConfig};
pub use rate::{MemoryRateLimiter, QueueConfig, Quota, RateBudgets, RateLimitConfig};
pub use redact::{Credentials, MASK, Redacted, Redactor, RedactorAlreadyInstalled, install_redactor, redact, redacted};
pub use store::{Reach, StoreError, StoreUsage, Stores};
pub use task::{MemoryTaskStore, MemoryTaskStoreConfig, TaskStore};
