//! Discovery, invocation, idempotency, authentication and the problem shapes.

use agent_surface_core::{ErrorCode, InvokeResult};
use agent_surface_http::HttpConfig;
use agent_surface_http::wire::{self, payload_text};
use serde_json::{Value, json};

use crate::client::ResponseExt;
use crate::client::{post_json, send, start};

#[tokio::test]
async fn capabilities_lists_the_snapshot() {
    let server = start(HttpConfig::with_prefix("/api")).await;
    let r = send(server.addr, "GET", "/api/capabilities", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["surfaceId"], server.registry.surface_id());
    let names: Vec<_> = v["capabilities"].as_array().unwrap().iter().map(|c| c["name"].clone()).collect();
    assert_eq!(names, [json!("echo.say"), json!("fail.with")]);
}

#[tokio::test]
async fn a_success_is_the_invoke_result() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"echo.say","input":{"text":"hi"}}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, r#"{"status":"ok","output":{"said":"hi"}}"#);
}

#[tokio::test]
async fn a_capability_error_is_a_problem_carrying_the_payload() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"nope.nothing"}"#).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let v = r.json();
    assert_eq!(v["type"], "urn:agent-surface:error:CAPABILITY_NOT_FOUND");
    assert_eq!(v["title"], "Capability not found");
    assert_eq!(v["code"], "CAPABILITY_NOT_FOUND");
    assert_eq!(v["retry"], "after-refresh");
    assert_eq!(v["detail"], v["message"]);
    let result = wire::decode(r.status, &r.body).unwrap();
    assert!(r.body.ends_with(&payload_text(result.error_payload().unwrap())[1..]));
    // Same bytes as the registry's own payload.
    let direct = server
        .registry
        .invoke(
            agent_surface_registry::InvokeRequest::new("nope.nothing", json!({})),
            agent_surface_registry::InvokeOptions::new(agent_surface_policy::Consumer::anonymous("x")),
        )
        .await;
    let sans_id = |p: &agent_surface_core::ErrorPayload| {
        let mut p = p.clone();
        p.set_correlation_id(None);
        payload_text(&p)
    };
    assert_eq!(sans_id(result.error_payload().unwrap()), sans_id(direct.error_payload().unwrap()));
    // The payload names the call's correlation id, the header's; it stopped before any handler.
    let p = result.error_payload().unwrap();
    assert_eq!(p.correlation_id(), r.header("agent-surface-correlation-id"));
    assert_eq!(v["correlationId"].as_str(), r.header("agent-surface-correlation-id"));
    assert_eq!(v["notProcessed"], true);
}

#[tokio::test]
async fn invalid_input_is_422_with_issues() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"echo.say","input":{"text":5}}"#).await;
    assert_eq!(r.status, 422);
    let v = r.json();
    assert_eq!(v["code"], "INVALID_INPUT");
    assert_eq!(v["details"]["issues"][0]["path"], "/text");
}

#[tokio::test]
async fn after_delay_sends_retry_after_rounded_up() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"fail.with","input":{"kind":"rate"}}"#).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(r.json()["details"]["retryAfterMs"], 1200);
}

#[tokio::test]
async fn not_authenticated_is_401_with_a_challenge() {
    let server = start(HttpConfig::default()).await;
    let r = post_json(server.addr, "/invoke", &[], r#"{"capability":"fail.with","input":{"kind":"auth"}}"#).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert_eq!(r.json()["code"], "NOT_AUTHENTICATED");
}

/// Every answer of `/invoke` carries the call's correlation id, one the registry made (a new one
/// per call, also for a call with an invocation id); protocol faults (no call) do not.
#[tokio::test]
async fn every_call_answers_with_its_correlation_id() {
    let server = start(HttpConfig::default()).await;
    let ok = r#"{"capability":"echo.say","input":{"text":"a"}}"#;
    let failed = r#"{"capability":"fail.with","input":{"kind":"auth"}}"#;
    let a = post_json(server.addr, "/invoke", &[], ok).await;
    let b = post_json(server.addr, "/invoke", &[], failed).await;
    let (a_id, b_id) = (a.header("agent-surface-correlation-id"), b.header("agent-surface-correlation-id"));
    assert!(a_id.is_some_and(|id| id.starts_with("c-")), "{a:?}");
    assert!(b_id.is_some_and(|id| id.starts_with("c-")), "{b:?}");
    assert_ne!(a_id, b_id);
    // Never the caller's key: the registry makes every id.
    let keyed = post_json(server.addr, "/invoke", &[("Idempotency-Key", "k-corr")], ok).await;
    assert!(keyed.header("agent-surface-correlation-id").is_some_and(|id| id.starts_with("c-")), "{keyed:?}");
    // A failure's problem document names the same id the header does.
    let problem = b.json();
    assert_eq!(problem["correlationId"].as_str(), b_id);
    let fault = post_json(server.addr, "/invoke", &[], "{").await;
    assert_eq!(fault.status, 400);
    assert_eq!(fault.header("agent-surface-correlation-id"), None);
}

#[tokio::test]
async fn idempotency_key_is_the_invocation_id() {
    let server = start(HttpConfig::default()).await;
    let body = r#"{"capability":"echo.say","input":{"text":"a"}}"#;
    let r = post_json(server.addr, "/invoke", &[("Idempotency-Key", "\"k-1\"")], body).await;
    assert_eq!(r.body, r#"{"status":"ok","output":{"said":"a"},"invocationId":"k-1"}"#);
    // The same key with another request: INVOCATION_CONFLICT, a capability error.
    let other = r#"{"capability":"echo.say","input":{"text":"b"}}"#;
    let r = post_json(server.addr, "/invoke", &[("Idempotency-Key", "k-1")], other).await;
    assert_eq!(r.status, 422, "{r:?}");
    let v = r.json();
    assert_eq!(v["code"], "INVOCATION_CONFLICT");
    assert_eq!(v["invocationId"], "k-1");
    // Another consumer (the consumer header) has its own ids.
    let r =
        post_json(server.addr, "/invoke", &[("Idempotency-Key", "k-1"), ("Agent-Surface-Consumer", "s2")], other).await;
    assert_eq!(r.status, 200);
    // Header and body disagree: a protocol fault.
    let with_id = r#"{"capability":"echo.say","input":{"text":"a"},"invocationId":"k-2"}"#;
    post_json(server.addr, "/invoke", &[("Idempotency-Key", "k-3")], with_id)
        .await
        .assert_fault(400, "invocation-id-mismatch");
    // Equal: fine.
    let r = post_json(server.addr, "/invoke", &[("Idempotency-Key", "k-2")], with_id).await;
    assert_eq!(r.status, 200);
    post_json(server.addr, "/invoke", &[("Idempotency-Key", "")], body).await.assert_fault(400, "invalid-header");
    post_json(server.addr, "/invoke", &[("Agent-Surface-Consumer", "a:b")], body)
        .await
        .assert_fault(400, "invalid-header");
}

#[tokio::test]
async fn bearer_tokens_sign_in() {
    let server = start(HttpConfig::default()).await;
    // Ids are per consumer: the same key under the signed-in consumer is a new call.
    let body = r#"{"capability":"echo.say","input":{"text":"a"}}"#;
    let anon = post_json(server.addr, "/invoke", &[("Idempotency-Key", "k")], body).await;
    assert_eq!(anon.status, 200);
    let other = r#"{"capability":"echo.say","input":{"text":"z"}}"#;
    let signed =
        post_json(server.addr, "/invoke", &[("Idempotency-Key", "k"), ("Authorization", "Bearer t-sam")], other).await;
    assert_eq!(signed.status, 200, "{signed:?}");
}

#[tokio::test]
async fn routes_and_methods_are_protocol_faults() {
    let server = start(HttpConfig::with_prefix("/api")).await;
    send(server.addr, "GET", "/api/nothing", &[], b"").await.assert_fault(404, "not-found");
    send(server.addr, "GET", "/invoke", &[], b"").await.assert_fault(404, "not-found");
    let r = send(server.addr, "GET", "/api/invoke", &[], b"").await;
    r.assert_fault(405, "method-not-allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    let r = send(server.addr, "DELETE", "/api/capabilities", &[], b"").await;
    r.assert_fault(405, "method-not-allowed");
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
}

#[test]
fn every_code_gets_the_matrix_status() {
    for spec in agent_surface_core::matrix::MATRIX.iter() {
        for payload in agent_surface_core::examples::of(spec.code) {
            let encoded = wire::encode(&InvokeResult::error(payload.clone(), None));
            assert_eq!(encoded.status.as_u16(), spec.http_status.eval(payload.details()));
            assert_eq!(encoded.retry_after.is_some(), payload.retry() == agent_surface_core::Retry::AfterDelay);
            if payload.code() == ErrorCode::CapabilityNotFound {
                assert_eq!(encoded.status, 404);
            }
        }
    }
}

#[tokio::test]
async fn a_foreign_host_is_refused() {
    let server = start(HttpConfig::default()).await;
    let r = crate::client::send_as(server.addr, "evil.example:80", "GET", "/capabilities").await;
    r.assert_fault(403, "host-not-allowed");
    let r = crate::client::send_as(server.addr, "localhost:1234", "GET", "/capabilities").await;
    assert_eq!(r.status, 200);
}

/// `GET /metrics` serves the renderer's text when one is configured, in the Prometheus text
/// format; without one there is no such route; another method is a `405`.
#[tokio::test]
async fn metrics_are_served_only_when_configured() {
    let renders = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = renders.clone();
    let render: agent_surface_http::MetricsRenderer = std::sync::Arc::new(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        "agent_surface_calls_total{code=\"OK\"} 3\n".to_string()
    });
    let server = start(HttpConfig { metrics: Some(render), ..HttpConfig::with_prefix("/api") }).await;
    let r = send(server.addr, "GET", "/api/metrics", &[], b"").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    assert_eq!(r.body, "agent_surface_calls_total{code=\"OK\"} 3\n");
    assert_eq!(renders.load(std::sync::atomic::Ordering::Relaxed), 1);
    send(server.addr, "POST", "/api/metrics", &[], b"").await.assert_fault(405, "method-not-allowed");
    // Another host is refused before the renderer runs.
    let r = crate::client::send_as(server.addr, "evil.example", "GET", "/api/metrics").await;
    r.assert_fault(403, "host-not-allowed");
    assert_eq!(renders.load(std::sync::atomic::Ordering::Relaxed), 1);

    let plain = start(HttpConfig::default()).await;
    send(plain.addr, "GET", "/metrics", &[], b"").await.assert_fault(404, "not-found");
}

/// A confirmation relayed over HTTP and approved by a person is presented when the same
/// principal repeats the same call: the caller never has to send the id back.
#[tokio::test]
async fn an_approved_confirmation_is_presented_on_repeat() {
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine};
    let engine = std::sync::Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let registry = agent_surface_registry::Registry::new(agent_surface_registry::RegistryConfig {
        confirmation: Some(engine.clone()),
        ..Default::default()
    });
    registry
        .define("store", |t| {
            t.capability("wipe", "Wipe the store.")
                .effect(agent_surface_core::Effect::Destructive)
                .confirm(|_: &serde_json::Value| "Wipe the store.".to_string())
                .raw_handler(serde_json::json!({"type": "object"}), None, |_c, _i| async move {
                    Ok::<_, agent_surface_core::AgentSurfaceError>(serde_json::json!({"wiped": true}))
                });
        })
        .unwrap();
    let _mount = registry.mount("store", "main").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let config = HttpConfig {
        authenticator: Some(std::sync::Arc::new(agent_surface_http::BearerTokens::new([(
            "t-sam",
            agent_surface_policy::Identity::new("sam"),
        )]))),
        ..Default::default()
    };
    tokio::spawn(agent_surface_http::serve(registry, config, listener, shutdown.clone()));
    let sam = [("Authorization", "Bearer t-sam")];
    let body = r#"{"capability":"store.wipe","input":{}}"#;

    // A token the table does not hold is refused before the body is read, not served as anonymous.
    let typo = post_json(addr, "/invoke", &[("Authorization", "Bearer t-sma")], body).await;
    assert_eq!(typo.status, 401, "{typo:?}");
    let challenge = typo.header("www-authenticate").unwrap();
    assert!(challenge.starts_with(r#"Bearer error="invalid_token""#), "{challenge}");
    assert!(typo.body.contains("unauthorized") && !typo.body.contains("t-sma"), "{}", typo.body);
    let first = post_json(addr, "/invoke", &sam, body).await;
    assert_eq!(first.json()["code"], "CONFIRMATION_REQUIRED", "{first:?}");
    let id = first.json()["details"]["confirmationId"].as_str().unwrap().to_string();
    // Repeated before anyone decides: the same confirmation, not a second one.
    let again = post_json(addr, "/invoke", &sam, body).await;
    assert_eq!(again.json()["details"]["confirmationId"], id.as_str());
    // A person approves; the same call, repeated without the id, runs once.
    engine.approve(&id, &agent_surface_policy::Identity::new("owner")).await.unwrap();
    let done = post_json(addr, "/invoke", &sam, body).await;
    assert_eq!(done.status, 200, "{done:?}");
    assert_eq!(done.json()["output"]["wiped"], true);
    // The approval was single use: the next request asks again.
    let next = post_json(addr, "/invoke", &sam, body).await;
    assert_eq!(next.json()["code"], "CONFIRMATION_REQUIRED");
    assert_ne!(next.json()["details"]["confirmationId"], id.as_str());
    shutdown.cancel();
}

/// `HttpConfig::sends`: agents that reach `/invoke` through a generic tool (they fill in only
/// the input) get the arguments wording — everything but the message is the same bytes, status
/// and `Retry-After` included; the default keeps each message as built.
#[tokio::test]
async fn agents_that_send_only_arguments_get_their_wording() {
    use agent_surface_http::Sends;
    let rate = r#"{"capability":"fail.with","input":{"kind":"rate"}}"#;
    let built = start(HttpConfig::default()).await;
    let worded = start(HttpConfig { sends: Sends::Arguments, ..HttpConfig::default() }).await;
    let (a, b) =
        (post_json(built.addr, "/invoke", &[], rate).await, post_json(worded.addr, "/invoke", &[], rate).await);
    assert_eq!((a.status, a.header("retry-after")), (b.status, b.header("retry-after")));
    let (request, arguments) = (wire::decode(a.status, &a.body).unwrap(), wire::decode(b.status, &b.body).unwrap());
    let (request, arguments) = (request.error_payload().unwrap(), arguments.error_payload().unwrap());
    let (mut request, mut arguments) = (request.clone(), arguments.clone());
    request.set_correlation_id(None);
    arguments.set_correlation_id(None);
    let (request, arguments) = (&request, &arguments);
    assert_eq!(arguments, &*request.worded_for(Sends::Arguments), "the arguments wording of the same payload");
    assert_ne!(arguments.message(), request.message(), "rate-limited.rate has a wording of its own");
    assert_eq!(
        (arguments.code(), arguments.retry(), arguments.details()),
        (request.code(), request.retry(), request.details())
    );
    // A message with one wording only is the same on both.
    let input = r#"{"capability":"echo.say","input":{"text":5}}"#;
    let (a, b) =
        (post_json(built.addr, "/invoke", &[], input).await, post_json(worded.addr, "/invoke", &[], input).await);
    let sans_id = |body: &str| {
        let mut v: Value = serde_json::from_str(body).unwrap();
        v.as_object_mut().unwrap().remove("correlationId");
        v
    };
    assert_eq!(sans_id(&a.body), sans_id(&b.body));
}

/// The proof of per-tool versions on the HTTP binding: list, change the definition (remount with
/// a new schema), the old version is `412` STALE_CAPABILITY with the live one, the new one runs.
#[tokio::test]
async fn a_call_planned_on_a_changed_tool_definition_is_stale_and_names_the_live_version() {
    use agent_surface_core::tool_version::wire::HTTP_MEMBER;
    use agent_surface_core::{AgentSurfaceError, Effect};
    use agent_surface_registry::Ctx;

    let server = start(HttpConfig::default()).await;
    let listed = |server: &crate::client::Server| {
        let addr = server.addr;
        async move {
            let v = send(addr, "GET", "/capabilities", &[], b"").await.json();
            let say = v["capabilities"].as_array().unwrap().iter().find(|c| c["name"] == "echo.say").unwrap().clone();
            say[HTTP_MEMBER].as_str().expect("a version").to_string()
        }
    };
    let v1 = listed(&server).await;
    let body =
        |v: &str, text: Value| json!({"capability": "echo.say", "input": {"text": text}, HTTP_MEMBER: v}).to_string();
    assert_eq!(post_json(server.addr, "/invoke", &[], &body(&v1, json!("hi"))).await.status, 200);

    // Remount with a new schema: the text becomes a list of words.
    server
        .registry
        .redefine("echo", |t| {
            t.capability("say", "Echoes the text.").effect(Effect::Read).idempotent().raw_handler(
                json!({"type": "object", "properties": {"text": {"type": "array", "items": {"type": "string"}}}, "required": ["text"]}),
                None,
                |_ctx: Ctx, input: Value| async move { Ok::<_, AgentSurfaceError>(json!({"said": input["text"]})) },
            );
        })
        .unwrap();
    let v2 = listed(&server).await;
    assert_ne!(v1, v2);

    let r = post_json(server.addr, "/invoke", &[], &body(&v1, json!(["hi"]))).await;
    assert_eq!(r.status, 412, "{r:?}");
    let p = r.json();
    assert_eq!((&p["code"], &p["retry"]), (&json!("STALE_CAPABILITY"), &json!("after-refresh")));
    assert_eq!(p["details"], json!({"reason": "tool-version-mismatch", "liveToolVersion": v2}));
    let r = post_json(server.addr, "/invoke", &[], &body(&v2, json!(["hi"]))).await;
    assert_eq!((r.status, r.json()["output"].clone()), (200, json!({"said": ["hi"]})));
}
