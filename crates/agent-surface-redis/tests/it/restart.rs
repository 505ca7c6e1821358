//! Redis going away and coming back: calls fail closed while it is gone, and with append-only
//! persistence a pending approval survives the restart and is then used once, and a stored result
//! survives it and is replayed.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Retry};
use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, ConfirmationStore, Consumer, Identity};
use agent_surface_redis::{RedisConfig, RedisStores};
use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
use serde_json::{Value, json};

/// A `redis-server` of this test's own, with every write appended and synced to disk (the folder
/// outlives it: a restart reads it back).
struct Own {
    child: Option<Child>,
}

impl Own {
    fn start(port: u16, dir: &std::path::Path) -> Option<Own> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let own = Own { child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(own)
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers.
    fn freeze(&self, frozen: bool) {
        if let Some(child) = &self.child {
            let _ =
                Command::new("kill").arg(if frozen { "-STOP" } else { "-CONT" }).arg(child.id().to_string()).status();
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: Redis flushes the append-only file and exits.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A registry whose `orders.cancel` is confirmed through an engine on `stores`, with its
/// idempotency records on `stores` too.
fn shop(stores: &RedisStores) -> (Registry, Arc<ConfirmationEngine>, agent_surface_registry::Mount) {
    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
        store: Arc::new(stores.confirmations()),
        ..Default::default()
    }));
    let registry = Registry::new(RegistryConfig {
        confirmation: Some(engine.clone()),
        idempotency: Arc::new(stores.idempotency()),
        ..Default::default()
    });
    registry
        .define("orders", |t| {
            t.capability("cancel", "Cancel an order.")
                .effect(Effect::Destructive)
                .confirm(|i: &Value| format!("Cancel order {}.", i["orderId"]))
                .raw_handler(
                    json!({"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]}),
                    None,
                    |_ctx: Ctx, i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"cancelled": i["orderId"]})) },
                )
        })
        .expect("definition is valid");
    let mount = registry.mount("orders", "main").expect("mounts");
    (registry, engine, mount)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_closed_while_redis_is_gone_and_a_pending_approval_survives_its_restart() {
    // This test runs a Redis of its own (it stops and restarts it).
    let installed = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
    if !installed {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must install redis-server");
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("agent-surface-restart-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(mut redis) = Own::start(port, &dir) else { panic!("redis-server starts") };
    let config = RedisConfig { op_timeout: Duration::from_millis(500), ..RedisConfig::with_prefix("restart:") };
    let stores = RedisStores::connect(&format!("redis://127.0.0.1:{port}/"), config).await.expect("connects");
    let (registry, engine, _mount) = shop(&stores);
    let alice = || InvokeOptions::new(Consumer::authenticated("principal:[\"alice\"]", Identity::new("alice")));
    let cancel = || InvokeRequest::new("orders.cancel", json!({"orderId": "A-1"}));

    let asked = registry.invoke(cancel(), alice()).await;
    assert_eq!(asked.code(), Some(ErrorCode::ConfirmationRequired));
    let id = asked.error_payload().unwrap().detail("confirmationId").and_then(Value::as_str).unwrap().to_string();

    // Redis goes away: nothing runs, the answer is transient — from the confirmation store, and
    // from the idempotency store for a call with an invocation id.
    redis.stop();
    let refused = registry.invoke(cancel().with_confirmation(&id), alice()).await;
    assert_eq!(refused.code(), Some(ErrorCode::ExecutionFailed), "{refused:?}");
    assert_eq!(refused.error_payload().unwrap().retry(), Retry::AfterDelay);
    let tracked = registry.invoke(cancel().with_confirmation(&id).with_invocation_id("cancel-1"), alice()).await;
    assert_eq!(tracked.code(), Some(ErrorCode::ExecutionFailed), "{tracked:?}");
    assert_eq!(tracked.error_payload().unwrap().retry(), Retry::AfterDelay);

    // Back, from its append-only file: the pending approval is still there.
    let Some(back) = Own::start(port, &dir) else { panic!("redis-server restarts") };
    let mut approved = Err(agent_surface_policy::ApprovalError::Unknown);
    for _ in 0..50 {
        approved = engine.approve(&id, &Identity::new("manager")).await;
        if !matches!(approved, Err(agent_surface_policy::ApprovalError::Store(_))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    approved.expect("the pending approval survived the restart");
    let done = registry.invoke(cancel().with_confirmation(&id).with_invocation_id("cancel-1"), alice()).await;
    assert_eq!(done.output(), Some(&json!({"cancelled": "A-1"})), "{done:?}");
    let again = registry.invoke(cancel().with_confirmation(&id), alice()).await;
    assert_eq!(again.code(), Some(ErrorCode::ConfirmationInvalid));

    // Once more down and up: the stored result is replayed under its invocation id (the approval
    // was consumed, so a second execution would have been refused, not replayed).
    let mut back = back;
    back.stop();
    let Some(back) = Own::start(port, &dir) else { panic!("redis-server restarts") };
    let mut replayed = None;
    for _ in 0..50 {
        let inv =
            registry.invoke_detailed(cancel().with_confirmation(&id).with_invocation_id("cancel-1"), alice()).await;
        if inv.result.code() != Some(ErrorCode::ExecutionFailed) {
            replayed = Some(inv);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let replayed = replayed.expect("Redis came back");
    assert!(replayed.replayed, "{replayed:?}");
    assert_eq!(replayed.result, done);
    drop((back, redis));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_fails_every_operation_within_its_budget() {
    let installed = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
    if !installed {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must install redis-server");
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("agent-surface-silent-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(redis) = Own::start(port, &dir) else { panic!("redis-server starts") };
    let config = RedisConfig { op_timeout: Duration::from_millis(300), ..RedisConfig::with_prefix("silent:") };
    let stores = RedisStores::connect(&format!("redis://127.0.0.1:{port}/"), config).await.expect("connects");
    let (registry, _engine, _mount) = shop(&stores);
    let alice = || InvokeOptions::new(Consumer::authenticated("principal:[\"alice\"]", Identity::new("alice")));

    redis.freeze(true);
    let started = Instant::now();
    let got = stores.confirmations().get("c-1", agent_surface_core::Timestamp::from_unix_millis(0)).await;
    assert!(matches!(got, Err(agent_surface_policy::StoreError::Unavailable(_))), "{got:?}");
    // The pipeline fails closed: nothing runs, the answer is transient.
    let refused = registry.invoke(InvokeRequest::new("orders.cancel", json!({"orderId": "A-1"})), alice()).await;
    assert_eq!(refused.code(), Some(ErrorCode::ExecutionFailed), "{refused:?}");
    assert_eq!(refused.error_payload().unwrap().retry(), Retry::AfterDelay);
    // Each operation gave up after its budget rather than waiting for Redis to wake.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    redis.freeze(false);
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
}
