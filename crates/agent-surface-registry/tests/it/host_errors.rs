//! Host errors a handler meets (an upstream's status, a timeout inside it) answered as what they
//! mean, through the whole pipeline (`agent_surface_registry::host_errors`).

use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry};
use agent_surface_registry::host_errors::UpstreamStatus;
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};

use crate::support::{assert_produced, call, consumer};

/// `quotes.fetch` (read) and `orders.place` (write): each fails the way its input says, through
/// application code that wraps the host error with `?`.
fn registry() -> (Registry, agent_surface_registry::Mount, agent_surface_registry::Mount) {
    async fn upstream(input: Value) -> Result<Value, AgentSurfaceError> {
        match input["fail"].as_str() {
            Some("busy") => Err(UpstreamStatus::new(503).with_retry_after(Duration::from_secs(4)))?,
            Some("gateway") => Err(UpstreamStatus::new(504))?,
            Some("credentials") => Err(UpstreamStatus::new(401))?,
            Some("timeout") => {
                tokio::time::timeout(Duration::from_millis(1), std::future::pending::<()>()).await?;
                Ok(json!({}))
            }
            Some("teapot") => Err(UpstreamStatus::new(418))?,
            _ => Ok(json!({"ok": true})),
        }
    }
    let r = Registry::new(RegistryConfig::default());
    r.define("quotes", |t| {
        t.capability("fetch", "Fetch a quote.").effect(Effect::Read).handler(|_c: Ctx, i: Value| upstream(i))
    })
    .expect("valid");
    r.define("orders", |t| {
        t.capability("place", "Place an order.").effect(Effect::Write).handler(|_c: Ctx, i: Value| upstream(i))
    })
    .expect("valid");
    let (q, o) = (r.mount("quotes", "main").expect("mounts"), r.mount("orders", "main").expect("mounts"));
    (r, q, o)
}

#[tokio::test]
async fn host_errors_are_answered_as_what_they_mean_for_reads_and_writes() {
    let (r, _q, _o) = registry();
    let run = |capability: &'static str, fail: &'static str| {
        let r = &r;
        async move { r.invoke_detailed(call(capability, json!({"fail": fail})), consumer("c")).await }
    };
    // A refusal of the upstream request: wait as long as the upstream asked, for a read. For a
    // write the handler may have written before the refused request, so the outcome is unknown.
    let busy = assert_produced(&run("quotes.fetch", "busy").await, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!((busy.retry(), busy.detail("retryAfterMs")), (Retry::AfterDelay, Some(&json!(4000))));
    assert_eq!(busy.detail("reason"), Some(&json!("transport")));
    let busy = assert_produced(&run("orders.place", "busy").await, ErrorCode::ExecutionFailed, Phase::Execute);
    assert_eq!((busy.retry(), busy.detail("reason")), (Retry::No, Some(&json!("outcome-unknown"))));
    for capability in ["quotes.fetch", "orders.place"] {
        // The service's own credentials: a failure of the service, not the caller's NOT_AUTH*.
        let credentials = run(capability, "credentials").await;
        let p = assert_produced(&credentials, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!((p.retry(), p.detail("reason")), (Retry::No, Some(&json!("transport"))));
        // Not in the table: the sanitized handler-error, nothing of the cause shown.
        let teapot = assert_produced(&run(capability, "teapot").await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(teapot.detail("reason"), Some(&json!("handler-error")));
        assert!(!teapot.to_json().to_string().contains("418"), "{teapot:?}");
    }
    // Cut off, maybe after the work: transient for a read, an unknown outcome for a write.
    for fail in ["gateway", "timeout"] {
        let read = assert_produced(&run("quotes.fetch", fail).await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!((read.retry(), read.detail("retryAfterMs")), (Retry::AfterDelay, Some(&json!(1000))), "{fail}");
        let write = assert_produced(&run("orders.place", fail).await, ErrorCode::ExecutionFailed, Phase::Execute);
        assert_eq!(write.detail("reason"), Some(&json!("outcome-unknown")), "{fail}");
        assert!(!write.to_json().to_string().contains("upstream"), "{write:?}");
    }
}

/// A marker no template, detail or repair step contains: where it shows, a cause leaked.
const MARKER: &str = "zq7-cause-marker";

/// Application code around a host error, as a handler's own error types wrap it: its `Display`
/// carries `text` and its `source` the host error.
#[derive(Debug)]
struct Context {
    text: String,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// What the agent is told in a row of the table.
#[derive(Clone, Copy, Debug)]
enum Told {
    /// `transport`, transient, `after-delay` with this `retryAfterMs`.
    Transient(u64),
    /// `transport`, retry `no`: the service's own credentials.
    Credentials,
    /// `outcome-unknown` (the call's tracked or untracked form).
    Unknown,
    /// Not in the table: the sanitized `handler-error`.
    Plain,
}

/// Every row of the table in `host_errors`, plus errors it does not map: the host error's name,
/// and what a read-only, an idempotent write and a plain write capability answer.
const ROWS: &[(&str, Told, Told, Told)] = &[
    ("429 retry-after 2", Told::Transient(2000), Told::Transient(2000), Told::Unknown),
    ("503 retry-after 3", Told::Transient(3000), Told::Transient(3000), Told::Unknown),
    ("503", Told::Transient(1000), Told::Transient(1000), Told::Unknown),
    ("502", Told::Transient(1000), Told::Transient(1000), Told::Unknown),
    ("504", Told::Transient(1000), Told::Transient(1000), Told::Unknown),
    ("401", Told::Credentials, Told::Credentials, Told::Credentials),
    ("403", Told::Credentials, Told::Credentials, Told::Credentials),
    ("elapsed", Told::Transient(1000), Told::Transient(1000), Told::Unknown),
    ("io refused", Told::Transient(1000), Told::Transient(1000), Told::Unknown),
    ("io timed out", Told::Transient(1000), Told::Transient(1000), Told::Unknown),
    ("418", Told::Plain, Told::Plain, Told::Plain),
    ("500", Told::Plain, Told::Plain, Told::Plain),
    ("io other", Told::Plain, Told::Plain, Told::Plain),
];

/// The host error of `row`; the io errors carry the marker in their own text.
async fn host_error(row: &str) -> Box<dyn std::error::Error + Send + Sync> {
    let io = |kind| std::io::Error::new(kind, format!("{MARKER} io {row}"));
    match row {
        "429 retry-after 2" => Box::new(UpstreamStatus::new(429).with_retry_after(Duration::from_secs(2))),
        "503 retry-after 3" => Box::new(UpstreamStatus::new(503).with_retry_after_header(Some("3"))),
        "elapsed" => {
            Box::new(tokio::time::timeout(Duration::ZERO, std::future::pending::<()>()).await.expect_err("elapses"))
        }
        "io refused" => Box::new(io(std::io::ErrorKind::ConnectionRefused)),
        "io timed out" => Box::new(io(std::io::ErrorKind::TimedOut)),
        "io other" => Box::new(io(std::io::ErrorKind::Other)),
        status => Box::new(UpstreamStatus::new(status.parse().expect("a status"))),
    }
}

/// The cause a handler returns for `row`: the host error itself, or wrapped twice in application
/// errors whose texts carry the marker.
async fn cause(row: &str, wrapped: bool) -> Box<dyn std::error::Error + Send + Sync> {
    let host = host_error(row).await;
    if !wrapped {
        return host;
    }
    let inner = Context { text: format!("{MARKER} calling the upstream for {row}"), source: host };
    Box::new(Context { text: format!("{MARKER} placing the order ({row})"), source: Box::new(inner) })
}

/// The agent-facing (code, retry, details) of `told` for a call that had an invocation id or not.
fn expected(told: Told, tracked: bool) -> (ErrorCode, Retry, Value) {
    let error = match told {
        Told::Transient(ms) => AgentSurfaceError::transient(Duration::from_millis(ms)),
        Told::Credentials => {
            AgentSurfaceError::execution_failed(agent_surface_core::details::ExecutionFailedReason::Transport)
        }
        Told::Unknown if tracked => AgentSurfaceError::outcome_unknown(),
        Told::Unknown => AgentSurfaceError::outcome_unknown_untracked(),
        Told::Plain => AgentSurfaceError::internal("anything"),
    };
    let p = error.payload();
    (p.code(), p.retry(), p.to_json()["details"].clone())
}

/// The operator event that ended the call `correlation_id` (`agent_surface::invoke`).
fn operator_event<'a>(log: &'a str, correlation_id: &str) -> &'a str {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("agent_surface::invoke") && l.contains(&format!("correlation_id={correlation_id} ")))
        .collect();
    assert_eq!(lines.len(), 1, "one event for {correlation_id} in:\n{log}");
    lines[0]
}

/// Each row of the table, run through the pipeline for a read, an idempotent write and a write,
/// with and without an invocation id, the host error returned bare and wrapped: the agent is told
/// the row's code, retry, reason and delay, and nothing of the cause (the marker, the host error's
/// own text, the wrappers' texts) is anywhere in what it receives; the operator event has it all.
#[test]
fn each_mapped_host_error_yields_its_code_and_no_text_of_the_cause() {
    let (calls, log) = crate::support::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let r = Registry::new(RegistryConfig::default());
            r.define("host", |t| {
                let fail = |_c: Ctx, i: Value| async move {
                    let row = i["row"].as_str().unwrap_or_default().to_string();
                    Err::<Value, _>(AgentSurfaceError::internal(cause(&row, i["wrapped"] == json!(true)).await))
                };
                t.capability("read", "Reads upstream.").effect(Effect::Read).handler(fail);
                t.capability("redo", "Writes upstream, idempotently.").effect(Effect::Write).idempotent().handler(fail);
                t.capability("write", "Writes upstream.").effect(Effect::Write).handler(fail);
            })
            .expect("valid");
            let _m = r.mount("host", "main").expect("mounts");
            let mut calls = Vec::new();
            for &(row, read, redo, write) in ROWS {
                for (capability, told) in [("host.read", read), ("host.redo", redo), ("host.write", write)] {
                    for (wrapped, tracked) in [(false, false), (false, true), (true, false), (true, true)] {
                        let mut request = call(capability, json!({"row": row, "wrapped": wrapped}));
                        if tracked {
                            request = request.with_invocation_id(format!("inv-{}", calls.len()));
                        }
                        let invocation = r.invoke_detailed(request, consumer("c")).await;
                        let case = format!("{row} via {capability}, wrapped: {wrapped}, tracked: {tracked}");
                        let p = assert_produced(&invocation, ErrorCode::ExecutionFailed, Phase::Execute);
                        let (code, retry, details) = expected(told, tracked);
                        assert_eq!((p.code(), p.retry(), &p.to_json()["details"]), (code, retry, &details), "{case}");
                        if let Told::Transient(ms) = told {
                            assert_eq!(p.detail("retryAfterMs"), Some(&json!(ms)), "{case}");
                        }
                        // Nothing of the cause in what the agent receives: the payload (message,
                        // details, repair) and the result around it.
                        let host_text = host_error(row).await.to_string();
                        let result = serde_json::to_string(&invocation.result).expect("serializes");
                        for text in [p.to_json().to_string(), result] {
                            for fragment in [MARKER, &host_text, "placing the order", "calling the upstream"] {
                                assert!(!text.contains(fragment), "{case}: {fragment:?} leaked into {text}");
                            }
                        }
                        calls.push((case, invocation.correlation_id.to_string(), host_text, wrapped.then_some(row)));
                    }
                }
            }
            calls
        })
    });
    assert_eq!(calls.len(), ROWS.len() * 3 * 4);
    // The whole cause reaches the operator channel.
    for (case, correlation_id, host_text, wrapped) in calls {
        let event = operator_event(&log, &correlation_id);
        assert!(event.contains(&host_text), "{case}: {event}");
        if let Some(row) = wrapped {
            let outer = format!("{MARKER} placing the order ({row})");
            assert!(event.contains(&outer) && event.contains("calling the upstream"), "{case}: {event}");
        }
    }
}
