//! `serve`'s drain: on shutdown the calls in flight finish and are answered, new connections are
//! refused, and a call past the drain timeout is cancelled by disposing the registry.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_http::HttpConfig;
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::client::{Response, post_json};

/// `work.write {ms}`: a write (not idempotent) that takes `ms` milliseconds.
fn registry() -> Registry {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("work", |t| {
            t.capability("write", "Take a while, then write.").effect(Effect::Write).raw_handler(
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
                None,
                |_ctx: Ctx, input: Value| async move {
                    tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                    Ok::<_, AgentSurfaceError>(json!({"written": true}))
                },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("work", "main").unwrap());
    registry
}

/// Serves `registry` with `limits`: the address, the shutdown token and the server task.
async fn start(
    registry: Registry,
    limits: agent_surface_server::Limits,
) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let config = HttpConfig { limits, ..HttpConfig::default() };
    let server = tokio::spawn(agent_surface_http::serve(registry, config, listener, shutdown.clone()));
    (addr, shutdown, server)
}

/// `POST /invoke` of `work.write` taking `ms`, with an invocation id.
async fn write(addr: SocketAddr, ms: u64, key: &str) -> Response {
    let body = json!({"capability": "work.write", "input": {"ms": ms}}).to_string();
    post_json(addr, "/invoke", &[("Idempotency-Key", key)], &body).await
}

/// A call started before the shutdown gets its result; a connection after it is refused; `serve`
/// returns once the call is answered, not at the drain timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_lets_the_call_in_flight_finish_and_refuses_new_connections() {
    let (addr, shutdown, server) = start(registry(), agent_surface_server::Limits::default()).await;
    let call = tokio::spawn(write(addr, 800, "slow-1"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "a connection after the shutdown is refused");
    let answer = call.await.unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["output"]["written"], true, "{answer:?}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returned").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

/// A call that outlives the drain timeout is cancelled by disposing the registry: a write whose
/// handler had started answers `EXECUTION_FAILED {reason: outcome-unknown}`, and `serve` returns
/// within about the timeout plus the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_drain_timeout_ends_outcome_unknown() {
    let registry = registry();
    let limits = agent_surface_server::Limits { drain_timeout: Duration::from_millis(300), ..Default::default() };
    let (addr, shutdown, server) = start(registry.clone(), limits).await;
    let call = tokio::spawn(write(addr, 20_000, "slow-2"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returned").unwrap().unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(1500), "{took:?}");
    let answer = call.await.unwrap();
    let v = answer.json();
    assert_eq!(v["code"], "EXECUTION_FAILED", "{v}");
    assert_eq!(v["details"]["reason"], "outcome-unknown", "{v}");
    assert!(registry.is_disposed());
}

/// A boxed future, as the gate's methods take and give them.
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A gate whose periodic work says when it starts and when it is told to stop.
struct Periodic {
    started: tokio::sync::mpsc::UnboundedSender<&'static str>,
}

impl agent_surface_policy::ConfirmationGate for Periodic {
    fn check<'a>(
        &'a self,
        _call: agent_surface_policy::CallInfo<'a>,
        _confirmation_id: Option<&'a str>,
        _now: agent_surface_core::Timestamp,
    ) -> BoxFuture<'a, agent_surface_policy::ConfirmationDecision> {
        Box::pin(async { agent_surface_policy::ConfirmationDecision::Proceed })
    }

    fn run_periodic<'a>(&'a self, stop: BoxFuture<'a, ()>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let _ = self.started.send("started");
            stop.await;
            let _ = self.started.send("stopped");
        })
    }
}

/// `serve` runs the confirmation gate's periodic work (the engine's expiry sweep) while it
/// serves, and stops it before it returns.
#[tokio::test]
async fn serve_runs_the_gate_periodic_work_until_shutdown() {
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let gate = std::sync::Arc::new(Periodic { started: tx });
    let registry = Registry::new(RegistryConfig { confirmation: Some(gate), ..Default::default() });
    let (_, shutdown, server) = start(registry, agent_surface_server::Limits::default()).await;
    assert_eq!(events.recv().await, Some("started"));
    shutdown.cancel();
    server.await.unwrap().unwrap();
    assert_eq!(events.try_recv(), Ok("stopped"), "stopped before serve returned");
}

/// Calls answered as tasks run on after their `202`: the drain waits for them as for the requests
/// in flight (`serve` returned at once, and the process's end dropped them mid-run, their records
/// left `working`). A task that ends within the drain timeout records its result; one past it ends
/// when the registry is disposed, and its end is recorded too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_the_tasks_and_records_their_ends() {
    use agent_surface_policy::Consumer;
    use agent_surface_registry::tasks::{TaskConfig, Tasks};

    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("work", |t| {
            t.capability("bake", "Bake for a while.").effect(Effect::Write).long_running().raw_handler(
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
                None,
                |_ctx: Ctx, input: Value| async move {
                    tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                    Ok::<_, AgentSurfaceError>(json!({"baked": true}))
                },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("work", "main").unwrap());
    let tasks = Tasks::new(TaskConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let limits = agent_surface_server::Limits { drain_timeout: Duration::from_millis(1500), ..Default::default() };
    let config = HttpConfig { limits, tasks: Some(tasks.clone()), ..HttpConfig::default() };
    let server = tokio::spawn(agent_surface_http::serve(registry.clone(), config, listener, shutdown.clone()));

    let bake = |ms: u64| async move {
        let body = json!({"capability": "work.bake", "input": {"ms": ms}}).to_string();
        let answer = post_json(addr, "/invoke", &[("Prefer", "respond-async")], &body).await;
        assert_eq!(answer.status, 202, "{answer:?}");
        answer.json()["taskId"].as_str().unwrap().to_string()
    };
    let (short, long) = (bake(600).await, bake(60_000).await);
    let started = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), server).await.expect("serve returned").unwrap().unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "serve waited for the tasks: {took:?}");

    let anyone = Consumer::anonymous("nobody");
    let now = agent_surface_core::Timestamp::now();
    let done = tasks.find(&short, &anyone, now).await.unwrap().expect("kept");
    assert_eq!(done.status, agent_surface_policy::task::TaskStatus::Completed, "{done:?}");
    assert!(done.payload.unwrap().to_string().contains("baked"));
    let cut = tasks.find(&long, &anyone, now).await.unwrap().expect("kept");
    assert!(cut.status.is_terminal(), "the task cut off at the drain's end is recorded as ended: {cut:?}");
    assert!(cut.payload.unwrap().to_string().contains("outcome-unknown"));
}
