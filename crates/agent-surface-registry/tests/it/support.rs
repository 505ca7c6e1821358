//! Shared fixtures and assertions.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, ErrorPayload, Phase, Timestamp};
use agent_surface_policy::{Consumer, ManualClock};
use agent_surface_registry::{Ctx, Invocation, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Asserts that `invocation` ended with `code`, produced in `phase`, and returns the payload.
///
/// `cargo xtask verify-matrix` scans the tests for calls of this function: each (code, phase)
/// pair the matrix declares must be asserted by at least one of them.
#[track_caller]
pub(crate) fn assert_produced(invocation: &Invocation, code: ErrorCode, phase: Phase) -> ErrorPayload {
    produced(invocation, code, phase, false)
}

/// [`assert_produced`] for a stop in the execution phase that came before the handler started
/// (the caller cancelled while an earlier phase awaited a store): the payload says
/// `notProcessed`, as the phase alone would not.
#[track_caller]
pub(crate) fn assert_produced_before_handler(invocation: &Invocation, code: ErrorCode, phase: Phase) -> ErrorPayload {
    let payload = produced(invocation, code, phase, true);
    assert!(payload.not_processed(), "{code} in phase {phase}: before the handler, notProcessed");
    payload
}

#[track_caller]
fn produced(invocation: &Invocation, code: ErrorCode, phase: Phase, before_handler: bool) -> ErrorPayload {
    let payload = invocation
        .result
        .error_payload()
        .unwrap_or_else(|| panic!("expected {code} in phase {phase}, got {:#?}", invocation.result))
        .clone();
    assert_eq!(payload.code(), code, "wrong code: {:#?}", invocation.result);
    assert_eq!(invocation.phase, Some(phase), "{code} produced in the wrong phase");
    // Whatever the pipeline produces is a payload the matrix accepts.
    let back: ErrorPayload = serde_json::from_value(payload.to_json()).expect("payload parses back");
    assert_eq!(back, payload);
    // The runtime states "not processed" from the phase that stopped the call (strict audit's
    // refusal comes before the handler, in the execution phase), never for an unknown outcome.
    let reason = payload.detail("reason").and_then(serde_json::Value::as_str);
    let not_processed = (phase.is_before_handler() || before_handler || reason == Some("audit-unavailable"))
        && agent_surface_core::matrix::may_be_not_processed(code, payload.details());
    assert_eq!(payload.not_processed(), not_processed, "{code} in phase {phase}: notProcessed");
    // And the matrix lists the phase among those that may say it for this code.
    if payload.not_processed() {
        assert!(
            agent_surface_core::matrix::not_processed_phases(code).any(|p| p == phase),
            "{code} says notProcessed in phase {phase}, which the matrix's notProcessedPhases does not list"
        );
    }
    // The payload names the call's own correlation id, the one the operator log has.
    assert_eq!(payload.correlation_id(), Some(invocation.correlation_id.to_string().as_str()));
    record_evidence(code, phase);
    // Without the id, which is each call's own: tests compare the answers of several calls.
    let mut payload = payload;
    payload.set_correlation_id(None);
    payload
}

/// Appends `CODE phase` to this process's evidence file when `AGENT_SURFACE_EVIDENCE_DIR` is set
/// (by `cargo xtask ci` / `verify-matrix`), after the assertions above have passed.
fn record_evidence(code: ErrorCode, phase: Phase) {
    use std::io::Write;
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let Some(dir) = std::env::var_os("AGENT_SURFACE_EVIDENCE_DIR") else { return };
    let _guard = LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = std::path::Path::new(&dir).join(format!("registry-it-{}.txt", std::process::id()));
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("evidence file opens");
    writeln!(file, "{} {}", code.as_str(), phase.as_str()).expect("evidence is written");
}

pub(crate) fn consumer(key: &str) -> InvokeOptions {
    InvokeOptions::new(Consumer::anonymous(key))
}

pub(crate) fn call(capability: &str, input: Value) -> InvokeRequest {
    InvokeRequest::new(capability, input)
}

pub(crate) fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(Timestamp::from_unix_millis(1_795_957_200_000)))
}

pub(crate) fn config_with(clock: &Arc<ManualClock>) -> RegistryConfig {
    RegistryConfig { clock: clock.clone(), ..Default::default() }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Echo {
    pub(crate) text: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Echoed {
    pub(crate) text: String,
}

/// A registry with `demo.echo` (read, idempotent) mounted once as `main`.
pub(crate) fn echo_registry(config: RegistryConfig) -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(config);
    r.define("demo", |t| {
        t.capability("echo", "Echo the text back.")
            .effect(Effect::Read)
            .idempotent()
            .handler(|_c: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) })
    })
    .expect("definition is valid");
    let m = r.mount("demo", "main").expect("mount");
    (r, m)
}

/// Lets spawned tasks and timers registered so far make progress.
pub(crate) async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// The testing kit's capture of the operator channel (a dev-dependency: the kit depends on this
/// crate's library, which integration tests share).
pub(crate) use agent_surface_testing::capture_operator_log;

/// An authority policy that allows each call once a permit is given ([`Held::release`]): a call
/// waits there, in flight under its invocation id, while another identical call joins it.
pub(crate) struct Held(tokio::sync::Semaphore);

impl Default for Held {
    fn default() -> Held {
        Held(tokio::sync::Semaphore::new(0))
    }
}

impl Held {
    /// Lets `calls` more calls through.
    pub(crate) fn release(&self, calls: usize) {
        self.0.add_permits(calls);
    }
}

impl agent_surface_policy::AuthorityPolicy for Held {
    fn name(&self) -> &str {
        "held"
    }
    fn decide<'a>(
        &'a self,
        _call: agent_surface_policy::CallInfo<'a>,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<agent_surface_policy::AuthorityDecision, agent_surface_policy::PolicyError>,
    > {
        Box::pin(async move {
            self.0.acquire().await.map_err(|e| agent_surface_policy::PolicyError::new(e.to_string()))?.forget();
            Ok(agent_surface_policy::AuthorityDecision::Allow)
        })
    }
}
