//! What the test suites of agent-surface services and adapters import.
//!
//! # Overview
//!
//! - **Assertions** — [`expect_ok`], [`expect_error`], [`expect_retry`], [`expect_details`]
//!   (a subset match, [`json_subset`]): `#[track_caller]`, and a failure prints the whole result as
//!   pretty JSON.
//! - **Time** — [`TestClock`], a [`ManualClock`] the registry accepts
//!   (`RegistryConfig { clock: clock.shared(), .. }`), so expiries, rate windows and delays are
//!   tested without sleeping; [`TestClock::advance_when_waiting`] moves it as soon as the code under
//!   test waits; [`SleepMode::AutoAdvance`] makes every wait pass at once.
//! - **Consumers and fixtures** — [`ScriptedConsumer`] (a key, an identity, a sequence of calls)
//!   and [`Shop`], a small registry with a catalog, a cart and orders.
//! - **Conformance kit** — [`assert_conformance`]: given an adapter's encode/decode pair
//!   ([`AdapterCodec`], or two closures through [`codec`]), checks that all sixteen codes with
//!   every retry category the matrix allows them, and representative details, survive the
//!   adapter's wire form unchanged.
//! - **Hooks** — [`Misbehaving`] (an authority policy, rate limiter and confirmation gate that
//!   panics, hangs or fails on every call), [`Slow`] (a policy that takes its time) and
//!   [`FnGate`] (a confirmation gate from a closure), [`RecordingGate`] (a stateful gate that
//!   records the confirmations it issued, for their round trip), [`FnLimiter`] (a rate limiter
//!   from a closure).
//! - **HTTP** — [`http`], a small HTTP/1.1 client for servers under test that never half-closes
//!   its write side (which hyper takes for a client gone away).
//! - **Snapshots** — [`wire_snapshot`]: every conformance case, labelled, rendered by an adapter,
//!   the text an `expect-test` snapshot pins.
//! - **Audit** — [`FlakyAuditSink`], a sink that fails while told to (strict audit);
//!   [`stores::check_audit_sink`], the suite every audit sink passes.
//! - **Store kit** — [`stores`]: a suite per store trait, and [`store_suites!`], which runs every
//!   suite on a backend described once by [`stores::Backend`] (one test per suite).
//! - **Leak assertion** — [`assert_no_leak`]: given [`Secrets`] (SQL, a credentialed URL, a stack
//!   trace, an environment value), no agent-facing serialization of a result contains any of them;
//!   [`assert_operator_log_has_no_credentials`]: no credential ([`Secrets::credential`]) reached
//!   the operator log, redacted; [`credential_corpus`], failure texts carrying credentials.
//! - **Service lint** — [`assert_service`]: every capability the authority policy lets through
//!   has a rule written for it, every input schema reaches every enabled provider whole
//!   ([`ServiceLint::providers`]), every capability declares its output schema and describes its
//!   input; a failure lists every problem.
//!
//! `docs/testing.md` is the guide.
//!
//! # Examples
//!
//! A downstream crate's test: it defines its own capability, drives it with a scripted consumer
//! and asserts on codes, retry categories and details, never on message text.
//!
//! ```
//! use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Retry};
//! use agent_surface_registry::{Ctx, Registry, RegistryConfig};
//! use agent_surface_testing::{
//!     ScriptedConsumer, Secrets, TestClock, assert_no_leak, expect_details, expect_error, expect_ok,
//!     expect_retry,
//! };
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Lookup { invoice: String }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Invoice { invoice: String, cents: u64 }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let clock = TestClock::new();
//! let registry = Registry::new(RegistryConfig { clock: clock.shared(), ..Default::default() });
//! registry.define("billing", |t| {
//!     t.capability("lookup", "Look up an invoice.").effect(Effect::Read).idempotent().handler(
//!         |_ctx: Ctx, i: Lookup| async move {
//!             if i.invoice == "broken" {
//!                 // A hostile failure: its text must never reach the agent.
//!                 let cause = std::io::Error::other("SELECT * FROM invoices -- postgres://app:pw@db:5432");
//!                 return Err(AgentSurfaceError::internal(cause));
//!             }
//!             Ok(Invoice { invoice: i.invoice, cents: 1999 })
//!         },
//!     )
//! })?;
//! let _mounted = registry.mount("billing", "main")?;
//!
//! let results = ScriptedConsumer::new("session-1")
//!     .call("billing.lookup", json!({"invoice": "I-7"}))
//!     .call("billing.lookup", json!({}))
//!     .call("billing.lookup", json!({"invoice": "broken"}))
//!     .run(&registry)
//!     .await;
//!
//! assert_eq!(expect_ok(&results[0])["cents"], 1999);
//!
//! let invalid = expect_error(&results[1], ErrorCode::InvalidInput);
//! expect_retry(invalid, Retry::WithChanges);
//! expect_details(invalid, json!({"issues": [{"path": "/invoice"}]}));
//!
//! let failed = expect_error(&results[2], ErrorCode::ExecutionFailed);
//! expect_details(failed, json!({"reason": "handler-error"}));
//! assert_no_leak(&results[2], &Secrets::new().sql("SELECT * FROM invoices").url("postgres://app:pw@db:5432"));
//! # Ok::<_, agent_surface_core::DefinitionError>(())
//! # }).unwrap();
//! ```

mod assert;
mod audit;
pub mod bench;
mod clock;
mod conformance;
mod consumer;
mod fixtures;
mod gemini;
mod hooks;
pub mod http;
mod leak;
mod lint;
mod logs;
pub mod postgres;
pub mod services;
pub mod stores;

pub use assert::{expect_details, expect_error, expect_no_details, expect_ok, expect_retry, json_subset, pretty};
pub use audit::FlakyAuditSink;
pub use clock::{ManualClock, SleepMode, TEST_EPOCH, TestClock};
pub use conformance::{
    AdapterCodec, ConformanceConfig, ConformanceReport, Failure, FnCodec, assert_conformance, assert_conformance_with,
    case_counts, cases, check_conformance, codec, wire_snapshot,
};
pub use consumer::ScriptedConsumer;
pub use fixtures::{
    AddToCart, CancelOrder, Cancelled, Cart, CartView, Counter, NoInput, PRODUCTS, Product, SHOP_TYPES, SearchInput,
    SearchOutput, Shop,
};
pub use gemini::gemini_untyped;
pub use hooks::{AlreadyAnswered, FnGate, FnLimiter, Issued, Misbehaving, Misbehaviour, RecordingGate, Slow};
pub use leak::{
    Secrets, agent_facing_serializations, assert_no_leak, assert_operator_log_has_no_credentials,
    assert_text_has_no_leak, credential_corpus, credential_leaks,
};
pub use lint::{ServiceLint, ServiceProblem, assert_service, check_service};
pub use logs::{capture_operator_log, capture_operator_log_at};

/// The examples of the user guide's testing chapter, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/testing.md")]
struct UserGuideTesting;
