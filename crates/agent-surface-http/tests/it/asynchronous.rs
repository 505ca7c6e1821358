//! Progress as Server-Sent Events, and long-running calls answered `202 Accepted` with a task.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_http::{BearerTokens, HttpConfig, router};
use agent_surface_policy::Identity;
use agent_surface_registry::tasks::{TaskConfig, Tasks};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use axum::body::Body;
use http::{Request, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tower::ServiceExt;

/// `work.steps` reports `1 of 2`, waits for the gate, reports `2 of 2` and answers `{"steps": 2}`;
/// `work.bake` (long-running write) and `work.crunch` (long-running read) wait for the gate;
/// `work.quick` answers at once; `work.flash` and `work.fizzle` report once and answer or fail at
/// once.
fn registry(gate: Arc<Notify>) -> Registry {
    let registry = Registry::new(RegistryConfig::default());
    registry.provide(gate);
    let empty = || json!({"type": "object", "properties": {}, "additionalProperties": false});
    registry
        .define("work", |t| {
            t.capability("steps", "Work in two steps.").effect(Effect::Read).raw_handler(
                empty(),
                None,
                |ctx: Ctx, _i: Value| async move {
                    ctx.progress(1.0, Some(2.0), Some("half way"));
                    ctx.state::<Arc<Notify>>().notified().await;
                    ctx.progress(2.0, Some(2.0), None);
                    Ok::<_, AgentSurfaceError>(json!({"steps": 2}))
                },
            );
            t.capability("bake", "Bake (long-running write).").effect(Effect::Write).long_running().raw_handler(
                empty(),
                None,
                |ctx: Ctx, _i: Value| async move {
                    ctx.state::<Arc<Notify>>().notified().await;
                    Ok::<_, AgentSurfaceError>(json!({"baked": true}))
                },
            );
            t.capability("crunch", "Crunch (long-running read).")
                .effect(Effect::Read)
                .idempotent()
                .long_running()
                .raw_handler(empty(), None, |ctx: Ctx, _i: Value| async move {
                    ctx.state::<Arc<Notify>>().notified().await;
                    Ok::<_, AgentSurfaceError>(json!({"crunched": true}))
                });
            t.capability("flash", "Report once and answer at once.").effect(Effect::Read).raw_handler(
                empty(),
                None,
                |ctx: Ctx, _i: Value| async move {
                    ctx.progress(1.0, Some(1.0), Some("done"));
                    Ok::<_, AgentSurfaceError>(json!({"flash": true}))
                },
            );
            t.capability("fizzle", "Report once and fail at once.").effect(Effect::Read).raw_handler(
                empty(),
                None,
                |ctx: Ctx, _i: Value| async move {
                    ctx.progress(1.0, Some(1.0), Some("tried"));
                    Err::<Value, _>(AgentSurfaceError::internal("the oven is cold"))
                },
            );
            t.capability("quick", "Answer at once.").effect(Effect::Read).raw_handler(
                empty(),
                None,
                |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"quick": true})) },
            );
        })
        .unwrap();
    std::mem::forget(registry.mount("work", "main").unwrap());
    registry
}

fn config(tasks: Option<Tasks>) -> HttpConfig {
    let tokens = BearerTokens::new([("t-alice", Identity::new("alice")), ("t-bob", Identity::new("bob"))]);
    HttpConfig { authenticator: Some(Arc::new(tokens)), tasks, ..HttpConfig::with_prefix("/api") }
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(path).header("host", "localhost");
    for (name, value) in headers {
        r = r.header(*name, *value);
    }
    match body {
        Some(body) => r.header("content-type", "application/json").body(Body::from(body.to_string())).unwrap(),
        None => r.body(Body::empty()).unwrap(),
    }
}

fn invoke(capability: &str, headers: &[(&str, &str)]) -> Request<Body> {
    request("POST", "/api/invoke", headers, Some(json!({"capability": capability, "input": {}})))
}

async fn json_body(response: Response<Body>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// Reads the stream until one whole event (`event:` and `data:` lines, then a blank line) is in,
/// skipping comments; `None` at the end of the stream.
async fn next_event(body: &mut Body, buffer: &mut String) -> Option<(String, Value)> {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            if block.starts_with(':') {
                continue;
            }
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            return Some((name, serde_json::from_str(&data).unwrap()));
        }
        let frame = body.frame().await?.unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.push_str(std::str::from_utf8(&data).unwrap());
        }
    }
}

#[tokio::test]
async fn an_event_stream_carries_each_progress_report_then_the_result() {
    let gate = Arc::new(Notify::new());
    let app = router(registry(gate.clone()), config(None));
    let response = app
        .oneshot(invoke("work.steps", &[("accept", "text/event-stream"), ("idempotency-key", "inv-s1")]))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let mut buffer = String::new();
    // The first report arrives while the handler still waits: it is streamed, not buffered.
    let first = next_event(&mut body, &mut buffer).await.unwrap();
    assert_eq!(first, ("progress".to_string(), json!({"progress": 1.0, "total": 2.0, "message": "half way"})));
    gate.notify_one();
    let second = next_event(&mut body, &mut buffer).await.unwrap();
    assert_eq!(second, ("progress".to_string(), json!({"progress": 2.0, "total": 2.0})));
    let (name, result) = next_event(&mut body, &mut buffer).await.unwrap();
    assert_eq!(name, "result");
    // The correlation id is the registry's own (never the caller's invocation id).
    let correlation = result["correlationId"].as_str().unwrap().to_string();
    assert!(correlation.starts_with("c-"), "{result}");
    assert_eq!(
        result,
        json!({"status": 200, "correlationId": correlation, "body": {"status": "ok", "output": {"steps": 2}, "invocationId": "inv-s1"}})
    );
    assert_eq!(next_event(&mut body, &mut buffer).await, None, "the stream ends after the result");
}

#[tokio::test]
async fn a_call_refused_before_its_handler_is_answered_plainly_even_to_an_event_stream_client() {
    let app = router(registry(Arc::new(Notify::new())), config(None));
    let bad = request(
        "POST",
        "/api/invoke",
        &[("accept", "text/event-stream")],
        Some(json!({"capability": "work.steps", "input": {"extra": 1}})),
    );
    let response = app.clone().oneshot(bad).await.unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    assert_eq!(json_body(response).await["code"], "INVALID_INPUT");
    // A client that accepts JSON as well as a stream (as MCP clients send) gets JSON.
    let both = invoke("work.quick", &[("accept", "application/json, text/event-stream")]);
    let response = app.clone().oneshot(both).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    // A success is streamed, however quick: here the result event alone.
    let response = app.oneshot(invoke("work.quick", &[("accept", "text/event-stream")])).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let (name, result) = next_event(&mut body, &mut String::new()).await.unwrap();
    assert_eq!((name.as_str(), &result["body"]["output"]), ("result", &json!({"quick": true})));
}

/// Polls the task until it is final.
async fn final_task(app: &axum::Router, location: &str, token: &str) -> Value {
    for _ in 0..500 {
        let auth = format!("Bearer {token}");
        let response = app.clone().oneshot(request("GET", location, &[("authorization", &auth)], None)).await.unwrap();
        assert_eq!(response.status(), 200);
        let view = json_body(response).await;
        if view["status"] != "working" {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {location} did not end");
}

#[tokio::test]
async fn a_long_running_call_preferring_async_is_a_task_its_owner_polls() {
    let gate = Arc::new(Notify::new());
    let app = router(registry(gate.clone()), config(Some(Tasks::new(TaskConfig::default()))));
    let alice = [("authorization", "Bearer t-alice"), ("prefer", "respond-async")];
    let response = app.clone().oneshot(invoke("work.bake", &alice)).await.unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(response.headers()["preference-applied"], "respond-async");
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let view = json_body(response).await;
    assert_eq!(view["status"], "working");
    assert_eq!(location, format!("/api/tasks/{}", view["taskId"].as_str().unwrap()));

    // Another principal, an anonymous caller and an unknown id get the same answer.
    for (path, auth) in [(&*location, "Bearer t-bob"), (&*location, ""), ("/api/tasks/t-unknown", "Bearer t-alice")] {
        let headers: &[(&str, &str)] = if auth.is_empty() { &[] } else { &[("authorization", auth)] };
        for method in ["GET", "DELETE"] {
            let response = app.clone().oneshot(request(method, path, headers, None)).await.unwrap();
            assert_eq!(response.status(), 404, "{method} {path} as {auth:?}");
            assert_eq!(json_body(response).await["type"], "urn:agent-surface:protocol:task-not-found");
        }
    }

    gate.notify_one();
    let done = final_task(&app, &location, "t-alice").await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["status"], 200);
    assert_eq!(done["result"]["body"], json!({"status": "ok", "output": {"baked": true}}));
    // The time to live counts from the task's creation, the least the store keeps it: named,
    // its five minutes; once ended, its five minutes after its end.
    assert!((300_000..302_000).contains(&view["ttlMs"].as_u64().unwrap()), "{view}");
    let done_ttl = done["ttlMs"].as_u64().unwrap();
    assert!((300_000..320_000).contains(&done_ttl), "{done}");
    // Deleting a finished task is acknowledged and changes nothing.
    let auth = [("authorization", "Bearer t-alice")];
    let response = app.clone().oneshot(request("DELETE", &location, &auth, None)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(json_body(response).await["status"], "completed");
}

#[tokio::test]
async fn deleting_a_task_cancels_its_call() {
    let app = router(registry(Arc::new(Notify::new())), config(Some(Tasks::new(TaskConfig::default()))));
    let alice = [("authorization", "Bearer t-alice"), ("prefer", "respond-async")];
    // A read: it ends cancelled.
    let response = app.clone().oneshot(invoke("work.crunch", &alice)).await.unwrap();
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let response = app.clone().oneshot(request("DELETE", &location, &alice[..1], None)).await.unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(json_body(response).await["cancelRequested"], true);
    assert_eq!(final_task(&app, &location, "t-alice").await["status"], "cancelled");
    // A write interrupted after its handler started: completed, outcome unknown.
    let response = app.clone().oneshot(invoke("work.bake", &alice)).await.unwrap();
    let location = response.headers()["location"].to_str().unwrap().to_string();
    app.clone().oneshot(request("DELETE", &location, &alice[..1], None)).await.unwrap();
    let done = final_task(&app, &location, "t-alice").await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["status"], 500);
    assert_eq!(done["result"]["body"]["details"]["reason"], "outcome-unknown");
}

#[tokio::test]
async fn respond_async_is_ignored_where_no_task_can_be() {
    let gate = Arc::new(Notify::new());
    let tasks = Some(Tasks::new(TaskConfig::default()));
    let prefer = [("authorization", "Bearer t-alice"), ("prefer", "respond-async")];
    // Not long-running: answered when it ends.
    let app = router(registry(gate.clone()), config(tasks));
    let response = app.clone().oneshot(invoke("work.quick", &prefer)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("preference-applied").is_none());
    // Refused before its handler: answered in the call.
    let bad = request("POST", "/api/invoke", &prefer, Some(json!({"capability": "work.bake", "input": {"x": 1}})));
    assert_eq!(app.oneshot(bad).await.unwrap().status(), 422);
    // No task runtime: no task, and no task routes.
    let app = router(registry(gate.clone()), config(None));
    let call = tokio::spawn(app.clone().oneshot(invoke("work.crunch", &prefer)));
    gate.notify_one();
    let response = call.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let response = app.oneshot(request("GET", "/api/tasks/t-1", &prefer[..1], None)).await.unwrap();
    assert_eq!(json_body(response).await["type"], "urn:agent-surface:protocol:not-found");
}

#[tokio::test]
async fn the_location_names_the_path_the_binding_is_reached_by_when_nested() {
    let gate = Arc::new(Notify::new());
    let nested = HttpConfig { prefix: String::new(), ..config(Some(Tasks::new(TaskConfig::default()))) };
    let app = axum::Router::new().nest("/outer", router(registry(gate.clone()), nested));
    let headers = [("authorization", "Bearer t-alice"), ("prefer", "respond-async")];
    let call = request("POST", "/outer/invoke", &headers, Some(json!({"capability": "work.crunch", "input": {}})));
    let response = app.clone().oneshot(call).await.unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with("/outer/tasks/t-"), "{location}");
    gate.notify_one();
    assert_eq!(final_task(&app, &location, "t-alice").await["status"], "completed");
}

/// A client that hangs up on a `Prefer: respond-async` call before its task is named (here: while
/// the authority policy decides) cancels the call, as hanging up on a plain call does: the
/// handler never runs, and its key answers `CANCELLED` — not a write run for nobody, its answer
/// dropped.
#[tokio::test]
async fn hanging_up_before_the_task_is_named_cancels_the_call() {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let slow = agent_surface_testing::Slow::new(Duration::from_millis(200), agent_surface_policy::AllowAll);
    let registry = Registry::new(RegistryConfig { authority: Some(Arc::new(slow)), ..Default::default() });
    let counted = runs.clone();
    registry
        .define("work", move |t| {
            t.capability("bake", "Bake (long-running write).").effect(Effect::Write).long_running().raw_handler(
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                None,
                move |_ctx: Ctx, _i: Value| {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async move { Ok::<_, AgentSurfaceError>(json!({"baked": true})) }
                },
            );
        })
        .unwrap();
    let _mount = registry.mount("work", "main").unwrap();
    let app = router(registry, config(Some(Tasks::new(TaskConfig::default()))));
    let headers = [("authorization", "Bearer t-alice"), ("prefer", "respond-async"), ("idempotency-key", "bake-1")];
    let hung_up = tokio::spawn(app.clone().oneshot(invoke("work.bake", &headers)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    hung_up.abort();
    assert!(hung_up.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "the handler never ran");
    let again = app
        .clone()
        .oneshot(invoke("work.bake", &headers[..1].iter().chain(&headers[2..]).copied().collect::<Vec<_>>()))
        .await
        .unwrap();
    assert_eq!(again.status(), 499);
    assert_eq!(json_body(again).await["code"], "CANCELLED");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A client that hangs up on a plain call while a phase before the handler waits (here: the
/// authority policy): the call is not dropped in the middle of that phase. It goes on under its
/// cancellation until the pipeline ends it, and the operator log has the call's own end,
/// `CANCELLED` with its correlation id — not a call that vanished mid-phase.
#[test]
fn hanging_up_on_a_plain_call_lets_the_pipeline_end_it() {
    let ((), log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let slow = agent_surface_testing::Slow::new(Duration::from_millis(100), agent_surface_policy::AllowAll);
            let registry = Registry::new(RegistryConfig { authority: Some(Arc::new(slow)), ..Default::default() });
            registry
                .define("work", |t| {
                    t.capability("mix", "Mix.").effect(Effect::Write).raw_handler(
                        json!({"type": "object", "properties": {}, "additionalProperties": false}),
                        None,
                        |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"mixed": true})) },
                    );
                })
                .unwrap();
            let _mount = registry.mount("work", "main").unwrap();
            let app = router(registry, config(None));
            let headers = [("authorization", "Bearer t-alice"), ("idempotency-key", "mix-1")];
            let hung_up = tokio::spawn(app.clone().oneshot(invoke("work.mix", &headers)));
            tokio::time::sleep(Duration::from_millis(30)).await;
            hung_up.abort();
            assert!(hung_up.await.unwrap_err().is_cancelled());
            tokio::time::sleep(Duration::from_millis(300)).await;
        });
    });
    let end = log.lines().find(|l| l.contains("invocation_id=\"mix-1\"") && l.contains("note=caller cancelled"));
    assert!(end.is_some(), "the call's end is in the log:\n{log}");
}

/// A client that closes the event stream while the handler waits, reporting nothing more, cancels
/// the call then, not at the next report or keep-alive (15 s later): the call ends `CANCELLED`,
/// and its key answers so.
#[tokio::test]
async fn closing_the_event_stream_cancels_the_call_at_once() {
    let gate = Arc::new(Notify::new());
    let app = router(registry(gate.clone()), config(None));
    let headers = [("accept", "text/event-stream"), ("idempotency-key", "steps-1")];
    let response = app.clone().oneshot(invoke("work.steps", &headers)).await.unwrap();
    let mut body = response.into_body();
    let mut buffer = String::new();
    let (name, _) = next_event(&mut body, &mut buffer).await.unwrap();
    assert_eq!(name, "progress");
    drop(body);
    // Let the stream's task see the stream closed, then open the gate: a call still running
    // would complete now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.notify_one();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = app.clone().oneshot(invoke("work.steps", &headers[1..])).await.unwrap();
    assert_eq!(again.status(), 499);
    assert_eq!(json_body(again).await["code"], "CANCELLED");
}

/// A handler that reports and ends at once — before the stream's first look — is answered as a
/// stream all the same, its last report before its result, an error included: the shape of the
/// answer does not depend on how the threads raced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_ends_at_once_is_still_answered_as_a_stream() {
    let app = router(registry(Arc::new(Notify::new())), config(None));
    for _ in 0..20 {
        for (capability, status) in [("work.flash", 200), ("work.fizzle", 500)] {
            let response = app.clone().oneshot(invoke(capability, &[("accept", "text/event-stream")])).await.unwrap();
            assert_eq!(response.status(), 200, "{capability}");
            assert_eq!(response.headers()["content-type"], "text/event-stream", "{capability}");
            let mut body = response.into_body();
            let mut buffer = String::new();
            let (name, report) = next_event(&mut body, &mut buffer).await.unwrap();
            assert_eq!((name.as_str(), &report["progress"]), ("progress", &json!(1.0)), "{capability}");
            let (name, result) = next_event(&mut body, &mut buffer).await.unwrap();
            assert_eq!((name.as_str(), &result["status"]), ("result", &json!(status)), "{capability}: {result}");
            assert!(next_event(&mut body, &mut buffer).await.is_none());
        }
    }
}

/// A task store whose `request_cancel` fails (the rest is a memory store's).
#[derive(Debug, Default)]
struct CancelRefused(agent_surface_policy::MemoryTaskStore);

type Answer<'a, T> = futures_util::future::BoxFuture<'a, Result<T, agent_surface_policy::StoreError>>;

impl agent_surface_policy::TaskStore for CancelRefused {
    fn create<'a>(
        &'a self,
        record: agent_surface_policy::task::TaskRecord,
        now: agent_surface_core::Timestamp,
    ) -> Answer<'a, ()> {
        self.0.create(record, now)
    }

    fn get<'a>(
        &'a self,
        id: &'a str,
        now: agent_surface_core::Timestamp,
    ) -> Answer<'a, Option<agent_surface_policy::task::TaskRecord>> {
        self.0.get(id, now)
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: agent_surface_policy::task::TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: agent_surface_core::Timestamp,
    ) -> Answer<'a, bool> {
        self.0.finish(id, status, payload, message, now)
    }

    fn request_cancel<'a>(
        &'a self,
        _id: &'a str,
        _now: agent_surface_core::Timestamp,
    ) -> Answer<'a, Option<agent_surface_policy::task::TaskRecord>> {
        Box::pin(std::future::ready(Err(agent_surface_policy::StoreError::Unavailable(
            "redis://10.1.2.3 refused".into(),
        ))))
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: agent_surface_core::Timestamp,
        now: agent_surface_core::Timestamp,
    ) -> Answer<'a, Option<agent_surface_policy::task::TaskRecord>> {
        self.0.renew(id, until, now)
    }

    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: agent_surface_core::Timestamp,
    ) -> Answer<'a, Option<agent_surface_policy::task::TaskRecord>> {
        self.0.end_lapsed(id, payload, message, now)
    }
}

/// A cancellation the store did not record is never acknowledged by a replica where the task does
/// not run (nothing would end it): the caller gets the binding's `internal` fault, naming nothing
/// of the store. Where the task runs, the cancellation is fired all the same, and acknowledged.
#[tokio::test]
async fn a_cancellation_nobody_can_act_on_is_not_acknowledged() {
    let store = Arc::new(CancelRefused::default());
    let tasks = || Tasks::new(TaskConfig { store: store.clone(), ..TaskConfig::default() });
    let registry = registry(Arc::new(Notify::new()));
    let (running, elsewhere) =
        (router(registry.clone(), config(Some(tasks()))), router(registry, config(Some(tasks()))));
    let alice = [("authorization", "Bearer t-alice"), ("prefer", "respond-async")];
    let response = running.clone().oneshot(invoke("work.crunch", &alice)).await.unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let refused = elsewhere.clone().oneshot(request("DELETE", &location, &alice[..1], None)).await.unwrap();
    assert_eq!(refused.status(), 500);
    let body = json_body(refused).await;
    assert_eq!(body["type"], "urn:agent-surface:protocol:internal", "{body}");
    assert!(!body.to_string().contains("10.1.2.3"), "{body}");
    let still = elsewhere.clone().oneshot(request("GET", &location, &alice[..1], None)).await.unwrap();
    assert_eq!(json_body(still).await["status"], "working", "nothing ended it");
    let fired = running.clone().oneshot(request("DELETE", &location, &alice[..1], None)).await.unwrap();
    assert_eq!(fired.status(), 202);
    assert_eq!(final_task(&running, &location, "t-alice").await["status"], "cancelled");
}
