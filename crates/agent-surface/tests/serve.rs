//! `Serve`: what it refuses before it listens, and the three routes it serves together with one
//! authenticator.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface::core::{AgentSurfaceError, Effect, ErrorCode};
use agent_surface::mcp::McpConfig;
use agent_surface::mcp::confirm::{ConfirmationAnswer, ConfirmationResolver, EngineResolver, ResolveError};
use agent_surface::policy::{AllowAll, BearerTokens, Consumer, Identity, Policies, RequireIdentity};
use agent_surface::{Serve, ServeError, ServiceBuilder};
use agent_surface_testing::http;
use serde_json::{Value, json};

mod support;

/// A service with one capability that needs a person's approval, reached at `public_url` when
/// given (its approval links then point at the inbox under it).
fn refunds(public_url: Option<&str>) -> (agent_surface::Service, agent_surface::registry::Mount) {
    let builder = ServiceBuilder::new();
    support::refunds_on(match public_url {
        Some(url) => builder.public_url(url),
        None => builder,
    })
}

fn people() -> Arc<BearerTokens> {
    Arc::new(BearerTokens::new([
        ("alice-token", Identity::new("alice")),
        ("maria-token", Identity::new("maria").with_role("approver")),
    ]))
}

fn refused<T: std::fmt::Debug>(result: Result<T, ServeError>) -> String {
    match result {
        Err(ServeError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn an_inbox_nobody_is_sent_to_or_can_sign_in_to_is_refused_before_listening() {
    let (service, _mount) = refunds(None);
    let why =
        refused(Serve::new(service.clone()).authenticator(people()).approvers("approver").bind("127.0.0.1:0").await);
    assert!(why.contains("ServiceBuilder::public_url"), "{why}");
    let (service, _mount) = refunds(Some("http://127.0.0.1:9"));
    let why = refused(Serve::new(service).approvers("approver").bind("127.0.0.1:0").await);
    assert!(why.contains("Serve::authenticator"), "{why}");
}

/// Why a service at `public_url` serving the inbox, bound on `addr`, is refused.
async fn inbox_refused_at(public_url: &str, addr: &str) -> String {
    let (service, _mount) = refunds(Some(public_url));
    refused(Serve::new(service).authenticator(people()).approvers("approver").bind(addr).await)
}

#[tokio::test]
async fn a_public_url_no_browser_opens_is_refused_before_listening() {
    let why = inbox_refused_at("lb.example", "127.0.0.1:0").await;
    assert!(why.contains("ServiceBuilder::public_url `lb.example`") && why.contains("https://host"), "{why}");
    // Port 0 is picked when the server binds, after the service (and its approval links) is built.
    let why = inbox_refused_at("http://127.0.0.1:0", "127.0.0.1:0").await;
    assert!(why.contains("`http://127.0.0.1:0` names port 0") && why.contains("127.0.0.1:8787"), "{why}");
    // A URL with credentials is refused (they would reach every agent told the link), and the
    // refusal, printed where the operator log's masking does not reach, does not repeat them.
    let why = inbox_refused_at("https://ops:s3cret@tickets.example", "127.0.0.1:0").await;
    assert!(why.contains("is not an absolute http or https URL") && !why.contains("s3cret"), "{why}");
}

/// An inbox nobody could use from where people reach it is refused at start: under a public path
/// (its pages link at the root), or over plain http beyond the loopback (browsers drop its Secure
/// sign-in cookies). An inbox reached by the approval base URL alone admits that URL's host.
#[tokio::test]
async fn an_inbox_people_cannot_use_from_where_they_reach_it_is_refused() {
    let why = inbox_refused_at("https://tickets.example/desk", "127.0.0.1:0").await;
    assert!(why.contains("the path /desk") && why.contains("/inbox"), "{why}");

    let why = inbox_refused_at("http://tickets.example", "0.0.0.0:0").await;
    assert!(why.contains("plain http") && why.contains("https"), "{why}");
    // People at a loopback name (a container's port mapped to the host's localhost) are served.
    let (service, _mount) = refunds(Some("http://localhost:8787"));
    let serve = Serve::new(service).authenticator(people()).approvers("approver").operator_log(false);
    let running = serve.bind("0.0.0.0:0").await.expect("serves people at localhost");
    running.stop();
    running.stopped().await.expect("drains");

    let (service, _mount) =
        support::refunds_on(ServiceBuilder::new().approval_base_url("https://approvals.example/inbox/c/"));
    let running = Serve::new(service)
        .authenticator(people())
        .approvers("approver")
        .operator_log(false)
        .bind("127.0.0.1:0")
        .await
        .expect("serves");
    let page = get_then_stop(running, "/inbox/sign-in", &[("Host", "approvals.example")]).await;
    assert_eq!(page.status, 200, "the approval links' host is admitted: {page:?}");
}

/// `GET path` with `headers` from `running`, which is then stopped and drained.
async fn get_then_stop(
    running: agent_surface::Running,
    path: &str,
    headers: &[(&str, &str)],
) -> agent_surface_testing::http::Response {
    let page = agent_surface_testing::http::request(running.local_addr(), "GET", path, headers, b"").await;
    running.stop();
    running.stopped().await.expect("drains");
    page
}

#[tokio::test]
async fn a_short_state_key_is_refused() {
    let (service, _mount) = refunds(None);
    let why = refused(Serve::new(service).state_key(vec![7u8; 16]).bind("127.0.0.1:0").await);
    assert!(why.contains("at least 32 bytes"), "{why}");
}

/// Over a durable store, approvals outlive the process, and so must the key that seals MCP
/// approval rounds: with none given, the store keeps one. A round the server sealed before a
/// restart is answered after it. Stores whose inbox store lives in the process cannot keep the
/// key: refused, naming both ways out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_confirmations_keep_the_key_that_seals_approval_rounds() {
    let dir = std::env::temp_dir().join(format!("serve-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("state.db");
    let service_on = |stores: agent_surface::policy::Stores| {
        support::refunds_on(
            ServiceBuilder::new()
                .stores(stores)
                .authority(Policies::new().global(RequireIdentity).for_type("refunds", AllowAll)),
        )
    };
    let answer = |asked: &Value| {
        let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
        json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state})
    };

    let stores = agent_surface_sqlite::SqliteStores::open(&path, Default::default()).await.expect("opens");
    let (service, mount) = service_on(stores.bundle());
    let before = Serve::new(service).authenticator(people()).operator_log(false).bind("127.0.0.1:0").await;
    let before = before.expect("serves without a state key");
    let asked = ask_refund(before.local_addr(), json!({})).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    before.stop();
    before.stopped().await.expect("drains");
    drop((mount, stores));

    // The restart: the same file, a new process's draw of random keys.
    let stores = agent_surface_sqlite::SqliteStores::open(&path, Default::default()).await.expect("opens again");
    let (service, mount) = service_on(stores.bundle());
    let after = Serve::new(service).authenticator(people()).operator_log(false).bind("127.0.0.1:0").await;
    let after = after.expect("serves again");
    let done = ask_refund(after.local_addr(), answer(&asked)).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"]["refunded"], "o-9", "{done}");
    after.stop();
    after.stopped().await.expect("drains");

    // The inbox store in the process, the confirmations on disk: nothing keeps the key.
    let bundle = stores.bundle();
    let half = agent_surface::policy::Stores::new(
        bundle.idempotency.clone(),
        bundle.confirmations.clone(),
        bundle.tasks.clone(),
        move |budgets, clock| Arc::new(stores.rate_limiter(budgets, clock)),
    );
    let (service, _half_mount) = service_on(half);
    let why = refused(Serve::new(service).operator_log(false).bind("127.0.0.1:0").await);
    assert!(why.contains("outlive the process") && why.contains("Stores::with_inbox"), "{why}");
    assert!(why.contains("Serve::state_key"), "{why}");
    drop((mount, bundle));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_misspelled_policy_target_is_refused_before_listening() {
    let service = ServiceBuilder::new().authority(Policies::new().for_capability("refund.issue", AllowAll)).build();
    service
        .registry
        .define("refunds", |t| {
            t.capability("issue", "Refund an order.")
                .effect(Effect::Write)
                .handle(|_: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) });
        })
        .expect("defines");
    let why = refused(Serve::new(service).bind("127.0.0.1:0").await);
    assert!(why.contains("refund.issue"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_the_binding_and_the_inbox_are_served_with_one_authenticator() {
    let (service, _mount) = refunds(Some("https://refunds.example"));
    let registry = service.registry.clone();
    let running = Serve::new(service)
        .authenticator(people())
        .approvers("approver")
        .operator_log(false)
        .bind("127.0.0.1:0")
        .await
        .expect("serves");
    let addr = running.local_addr();

    // The binding: Alice's refund waits for a person, who is sent to the inbox under the public URL.
    let body = json!({"capability": "refunds.issue", "input": {"order": "o-1"}}).to_string();
    let r = http::post_json(addr, "/api/invoke", &[("Authorization", "Bearer alice-token")], &body).await;
    let asked = agent_surface::http::wire::decode(r.status, &r.body).expect("an invoke result");
    let payload = asked.error_payload().expect("an error");
    assert_eq!(payload.code(), ErrorCode::ConfirmationRequired);
    let id = payload.detail("confirmationId").and_then(Value::as_str).expect("an id").to_string();
    let url = payload.detail("approvalUrl").and_then(Value::as_str).expect("an approval URL");
    assert_eq!(url, format!("https://refunds.example/inbox/c/{id}"));

    // The inbox: Maria, an approver, sees it; Alice, who is not, does not get in. The public host
    // is admitted (and only loopback otherwise).
    let maria = [("Authorization", "Bearer maria-token"), ("Host", "refunds.example")];
    let page = http::request(addr, "GET", "/inbox/", &maria, b"").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(&id), "the inbox lists the confirmation");
    let alice = [("Authorization", "Bearer alice-token")];
    let page = http::request(addr, "GET", "/inbox/", &alice, b"").await;
    assert_eq!(page.status, 403);
    let elsewhere = [("Authorization", "Bearer maria-token"), ("Host", "evil.example")];
    assert_eq!(http::request(addr, "GET", "/inbox/", &elsewhere, b"").await.status, 403);

    // MCP: the same people sign in (the stateless era here): Alice is asked for the approval as
    // over the binding, an anonymous caller is told to sign in.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "serve-test", "version": "0"}});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "refunds-issue", "arguments": {"order": "o-2"}, "_meta": meta}})
    .to_string();
    let over_mcp = |authorization: &'static str| {
        let call = call.clone();
        async move {
            let mut headers = vec![
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "refunds-issue"),
            ];
            headers.extend((!authorization.is_empty()).then_some(("Authorization", authorization)));
            let r = http::post_json(addr, "/mcp", &headers, &call).await;
            let message = r.messages().into_iter().find(|m| m.get("result").is_some()).expect("a tools/call result");
            let result = serde_json::from_value(message["result"].clone()).expect("a CallToolResult");
            agent_surface::mcp::codec::decode(&result).expect("an invoke result")
        }
    };
    let asked = over_mcp("Bearer alice-token").await;
    let payload = asked.error_payload().expect("an error");
    assert_eq!(payload.code(), ErrorCode::ConfirmationRequired);
    let url = payload.detail("approvalUrl").and_then(Value::as_str).expect("an approval URL");
    assert!(url.starts_with("https://refunds.example/inbox/c/"), "{url}");
    let anonymous = over_mcp("").await;
    assert_eq!(anonymous.error_payload().expect("an error").code(), ErrorCode::NotAuthenticated);

    running.stop();
    running.stopped().await.expect("drains");
    // Stopped, the service's calls are cancelled. (That the listener is closed is
    // `agent-surface-server`'s to test: probing the freed port here raced the other tests and
    // processes the system hands it to next.)
    assert!(registry.is_disposed());
}

/// A `tools/call` of `refunds-issue` by alice over MCP (stateless era) from a client that can
/// ask its user, with `extra` merged into the params: the JSON-RPC answer.
async fn ask_refund(addr: std::net::SocketAddr, extra: Value) -> Value {
    let mut params = json!({"name": "refunds-issue", "arguments": {"order": "o-9"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "serve-test", "version": "0"}}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        params[k] = v.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let headers = [
        ("Authorization", "Bearer alice-token"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "refunds-issue"),
    ];
    let r = http::post_json(addr, "/mcp", &headers, &body).await;
    r.messages().into_iter().find(|m| m.get("id").is_some()).unwrap_or_else(|| panic!("an answer: {r:?}"))
}

/// The state key is rotated without failing the rounds in flight: a round sealed with the old key
/// by one server is finished by a server that seals with the new key and accepts the old one; a
/// server that knows only the new key cannot open it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_key_rotates_without_failing_the_rounds_in_flight() {
    let (old, new) = (vec![0x01u8; 32], vec![0x02u8; 32]);
    let (service, _mount) = refunds(None);
    let serve = |key: &[u8]| Serve::new(service.clone()).authenticator(people()).operator_log(false).state_key(key);
    let before = serve(&old).bind("127.0.0.1:0").await.expect("serves");
    let rotated = serve(&new).accept_state_key(old.clone()).bind("127.0.0.1:0").await.expect("serves");
    let forgotten = serve(&new).bind("127.0.0.1:0").await.expect("serves");

    let answer = |asked: &Value| {
        let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
        json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state})
    };
    let asked = ask_refund(before.local_addr(), json!({})).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let unopened = ask_refund(forgotten.local_addr(), answer(&asked)).await;
    assert_eq!(unopened["error"]["code"], -32602, "{unopened}");
    let done = ask_refund(rotated.local_addr(), answer(&asked)).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"]["refunded"], "o-9", "{done}");
}

#[tokio::test]
async fn an_accepted_state_key_needs_a_state_key_and_32_bytes() {
    let (service, _mount) = refunds(None);
    let why = refused(Serve::new(service.clone()).accept_state_key(vec![1u8; 32]).bind("127.0.0.1:0").await);
    assert!(why.contains("give Serve::state_key"), "{why}");
    let short = Serve::new(service).state_key(vec![1u8; 32]).accept_state_key(vec![2u8; 16]);
    let why = refused(short.bind("127.0.0.1:0").await);
    assert!(why.contains("Serve::accept_state_key must be at least 32 bytes"), "{why}");
}

/// An application's own MCP handler: one resource.
struct Notes;

impl rmcp::ServerHandler for Notes {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_resources().build())
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        let contents = rmcp::model::ResourceContents::text("Refunds take a week.", request.uri);
        Ok(rmcp::model::ReadResourceResult::new(vec![contents]).into())
    }
}

/// `Serve::mcp_fallback`: the application's resource is served at `/mcp` beside the tools, behind
/// the same authenticator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_own_mcp_handler_is_served_beside_the_tools() {
    let (service, _mount) = refunds(None);
    let running = Serve::new(service)
        .authenticator(people())
        .mcp_fallback(|| Notes)
        .operator_log(false)
        .bind("127.0.0.1:0")
        .await
        .expect("serves");
    let addr = running.local_addr();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "serve-test", "version": "0"}});
    let ask = |method: &'static str, name: Option<&'static str>, params: Value| {
        let mut params = params;
        params["_meta"] = meta.clone();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        async move {
            let headers = [
                ("Authorization", "Bearer alice-token"),
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", method),
            ];
            let mut headers = headers.to_vec();
            headers.extend(name.map(|name| ("Mcp-Name", name)));
            let r = http::post_json(addr, "/mcp", &headers, &body).await;
            r.messages().into_iter().find(|m| m.get("id").is_some()).unwrap_or_else(|| panic!("an answer: {r:?}"))
        }
    };
    let read = ask("resources/read", Some("notes://refunds"), json!({"uri": "notes://refunds"})).await;
    assert_eq!(read["result"]["contents"][0]["text"], "Refunds take a week.", "{read}");
    let discovered = ask("server/discover", None, json!({})).await;
    let caps = &discovered["result"]["capabilities"];
    assert!(caps.get("tools").is_some() && caps.get("resources").is_some(), "{discovered}");
    let tools = ask("tools/list", None, json!({})).await;
    assert_eq!(tools["result"]["tools"][0]["name"], "refunds-issue", "{tools}");
    running.stop();
    running.stopped().await.expect("drains");
}

/// Approvals shared between replicas with the inbox's sign-ins kept in one process: a person
/// signed in on one replica would be a stranger to the next. Refused; the backend's own bundle
/// (which includes its inbox store) serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_approvals_with_an_inbox_in_one_process_are_refused() {
    let Some(url) = agent_surface_testing::services::redis_url() else { return };
    let prefix = format!("serve-inbox-{}:", std::process::id());
    let redis = agent_surface_redis::RedisStores::connect(&url, agent_surface_redis::RedisConfig::with_prefix(prefix))
        .await
        .expect("Redis answers");
    let bundle = redis.bundle();
    let half = agent_surface::policy::Stores::new(
        bundle.idempotency.clone(),
        bundle.confirmations.clone(),
        bundle.tasks.clone(),
        move |budgets, _clock| Arc::new(redis.rate_limiter(budgets)),
    );
    let service = |stores| {
        ServiceBuilder::new()
            .stores(stores)
            .authority(Policies::new().global(RequireIdentity))
            .public_url("http://127.0.0.1:9")
            .build()
    };
    let serve = |service| {
        Serve::new(service).operator_log(false).state_key(vec![7u8; 32]).authenticator(people()).approvers("approver")
    };
    let why = refused(serve(service(half)).bind("127.0.0.1:0").await);
    assert!(why.contains("Stores::with_inbox"), "{why}");
    let running = serve(service(bundle)).bind("127.0.0.1:0").await.expect("serves with the backend's inbox store");
    running.stop();
    running.stopped().await.expect("drains");
}

/// The JSON-RPC answer's invoke result, decoded.
fn invoke_result(answer: &Value) -> agent_surface::core::InvokeResult {
    let result = serde_json::from_value(answer["result"].clone()).unwrap_or_else(|e| panic!("{e}: {answer}"));
    agent_surface::mcp::codec::decode(&result).expect("an invoke result")
}

/// A legacy (2025-11-25) session of alice's whose client declared form elicitation, and a
/// `tools/call` of `refunds-issue` in it: every message of the call's answer.
async fn legacy_refund(addr: std::net::SocketAddr) -> Vec<Value> {
    let base = [("Authorization", "Bearer alice-token"), ("Accept", "application/json, text/event-stream")];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "serve-test", "version": "0"}}});
    let r = http::post_json(addr, "/mcp", &base, &init.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let session = r.header("mcp-session-id").expect("a session").to_string();
    let mut headers = base.to_vec();
    headers.extend([("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")]);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(http::post_json(addr, "/mcp", &headers, &initialized).await.status, 202);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "refunds-issue", "arguments": {"order": "o-7"}}});
    http::post_json(addr, "/mcp", &headers, &call.to_string()).await.messages()
}

/// With in-person approval off, a client that can ask its user is not asked to approve (the
/// requester's own *accept* would count as the approval): the agent gets
/// `CONFIRMATION_REQUIRED` (two-phase), in both eras. On (the default), it is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_in_person_approval_off_a_client_that_can_ask_its_user_is_not_asked_to_approve() {
    let (service, _mount) = refunds(None);
    // A legacy client that is asked holds the call until it answers, or this long.
    let mcp = McpConfig { elicitation_timeout: Duration::from_secs(1), ..McpConfig::default() };
    let serve = |in_person: bool| {
        Serve::new(service.clone())
            .authenticator(people())
            .operator_log(false)
            .mcp(mcp.clone())
            .in_person_approval(in_person)
            .bind("127.0.0.1:0")
    };
    let (on, off) = (serve(true).await.expect("serves"), serve(false).await.expect("serves"));
    let elicits = |messages: &[Value]| messages.iter().any(|m| m["method"] == "elicitation/create");

    // Modern: an input-required round asks the person, or there is none.
    let asked = ask_refund(on.local_addr(), json!({})).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let relayed = ask_refund(off.local_addr(), json!({})).await;
    assert_ne!(relayed["result"]["resultType"], "input_required", "{relayed}");
    assert_eq!(invoke_result(&relayed).code(), Some(ErrorCode::ConfirmationRequired), "{relayed}");

    // Legacy: `elicitation/create` during the call, or none.
    let messages = legacy_refund(on.local_addr()).await;
    assert!(elicits(&messages), "{messages:?}");
    let messages = legacy_refund(off.local_addr()).await;
    assert!(!elicits(&messages), "{messages:?}");
    let answer = messages.iter().find(|m| m["id"] == 1).expect("the call's answer");
    assert_eq!(invoke_result(answer).code(), Some(ErrorCode::ConfirmationRequired), "{answer}");
}

/// Records answers in the engine, counting them.
struct Counting(EngineResolver, Arc<AtomicUsize>);

impl ConfirmationResolver for Counting {
    fn resolve<'a>(
        &'a self,
        confirmation_id: &'a str,
        requester: &'a Consumer,
        answer: ConfirmationAnswer,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), ResolveError>> + Send + 'a>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.resolve(confirmation_id, requester, answer)
    }
}

/// A resolver given in `McpConfig::confirmations` records the answers given at the client; given
/// while in-person approval is off, the contradiction is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolver_of_the_applications_records_the_answers_at_the_client() {
    let (service, _mount) = refunds(None);
    let answers = Arc::new(AtomicUsize::new(0));
    let resolver = Arc::new(Counting(EngineResolver::new(service.confirmations.clone()), answers.clone()));
    let mcp = McpConfig { confirmations: Some(resolver), ..McpConfig::default() };
    let serve = || Serve::new(service.clone()).authenticator(people()).operator_log(false).mcp(mcp.clone());
    let why = refused(serve().in_person_approval(false).bind("127.0.0.1:0").await);
    assert!(why.contains("Serve::in_person_approval(false)") && why.contains("McpConfig::confirmations"), "{why}");

    let running = serve().bind("127.0.0.1:0").await.expect("serves");
    let asked = ask_refund(running.local_addr(), json!({})).await;
    let state = asked["result"]["requestState"].as_str().expect("a sealed state");
    let accept = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});
    let done = ask_refund(running.local_addr(), accept).await;
    assert_eq!(done["result"]["structuredContent"]["refunded"], "o-9", "{done}");
    assert_eq!(answers.load(Ordering::SeqCst), 1, "the application's resolver recorded the approval");
    running.stop();
    running.stopped().await.expect("drains");
}

/// The MCP settings `Serve` sets itself, given to `Serve::mcp`, would be dropped: refused at
/// start, naming where each belongs. An identity there would sign every HTTP caller without
/// credentials in as that person.
#[tokio::test]
async fn mcp_settings_that_are_serves_own_are_refused_not_dropped() {
    let (service, _mount) = refunds(None);
    let serve = |mcp: McpConfig| Serve::new(service.clone()).operator_log(false).mcp(mcp);
    let identity = McpConfig { identity: Some(Identity::new("alice")), ..McpConfig::default() };
    let why = refused(serve(identity).bind("127.0.0.1:0").await);
    assert!(why.contains("McpConfig::identity") && why.contains("Serve::authenticator"), "{why}");
    let authenticator = McpConfig { authenticator: Some(people()), ..McpConfig::default() };
    let why = refused(serve(authenticator).bind("127.0.0.1:0").await);
    assert!(why.contains("give it with Serve::authenticator"), "{why}");
    let tasks = McpConfig {
        tasks: Some(agent_surface::registry::tasks::Tasks::new(Default::default())),
        ..McpConfig::default()
    };
    let why = refused(serve(tasks).bind("127.0.0.1:0").await);
    assert!(why.contains("McpConfig::tasks"), "{why}");
    // The adapter's other settings are the application's.
    let named = McpConfig { name: "refunds".into(), ..McpConfig::default() };
    let running = serve(named).bind("127.0.0.1:0").await.expect("serves");
    running.stop();
    running.stopped().await.expect("drains");
}

/// The HTTP binding's settings `Serve` sets itself, given to `Serve::api`, are refused at start
/// rather than dropped (an authenticator there left every caller anonymous); a metrics page given
/// before `Serve::api` stays.
#[tokio::test]
async fn api_settings_that_are_serves_own_are_refused_not_dropped() {
    use agent_surface::http::HttpConfig;
    let (service, _mount) = refunds(None);
    let serve = |api: HttpConfig| Serve::new(service.clone()).operator_log(false).api(api);
    let cases = [
        (HttpConfig { authenticator: Some(people()), ..HttpConfig::default() }, "HttpConfig::authenticator"),
        (
            HttpConfig {
                tasks: Some(agent_surface::registry::tasks::Tasks::new(Default::default())),
                ..HttpConfig::default()
            },
            "HttpConfig::tasks",
        ),
        (HttpConfig::with_prefix("/api"), "HttpConfig::prefix"),
        (
            HttpConfig {
                limits: agent_surface::server::Limits { max_connections: 7, ..Default::default() },
                ..HttpConfig::default()
            },
            "Serve::mcp_http",
        ),
    ];
    for (api, named) in cases {
        let why = refused(serve(api).bind("127.0.0.1:0").await);
        assert!(why.contains(named), "{named}: {why}");
    }
    // The binding's other settings are the application's; metrics given first survive `api`.
    let running = Serve::new(service.clone())
        .operator_log(false)
        .metrics(|| "# metrics\n".to_string())
        .api(HttpConfig { max_body_bytes: 4096, ..HttpConfig::default() })
        .bind("127.0.0.1:0")
        .await
        .expect("serves");
    let page = get_then_stop(running, "/api/metrics", &[]).await;
    assert_eq!(page.status, 200, "{page:?}");
}

/// Over stdio an authenticator would sign nobody in (no token is sent) and drop the person who
/// started the process; the inbox is served over HTTP only: both refused at start, not dropped.
#[tokio::test]
async fn http_settings_are_refused_over_stdio() {
    let (service, _mount) = refunds(None);
    let why = refused(Serve::new(service.clone()).operator_log(false).authenticator(people()).stdio(None).await);
    assert!(why.contains("Serve::authenticator") && why.contains("Serve::stdio"), "{why}");
    let why = refused(Serve::new(service).operator_log(false).approvers("admin").stdio(None).await);
    assert!(why.contains("Serve::approvers"), "{why}");
}

/// An invocation id names one call of the signed-in person whatever way it comes back: the same
/// id over the binding, with another consumer header, and over MCP (with `_meta` or the
/// `Idempotency-Key` header) runs the write once and answers each retry with its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_through_another_transport_or_session_is_the_same_call() {
    let service =
        ServiceBuilder::new().authority(Policies::new().global(RequireIdentity).for_type("notes", AllowAll)).build();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    service
        .registry
        .define("notes", move |t| {
            let counted = counted.clone();
            t.capability("add", "Add a note.").effect(Effect::Write).handle(move |i: Value| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Ok::<_, AgentSurfaceError>(json!({"note": n, "text": i["text"]})) }
            });
        })
        .expect("defines");
    let _mount = service.registry.mount("notes", "main").expect("mounts");
    let running =
        Serve::new(service).authenticator(people()).operator_log(false).bind("127.0.0.1:0").await.expect("serves");
    let addr = running.local_addr();

    let body = json!({"capability": "notes.add", "input": {"text": "once"}}).to_string();
    let over_api = |consumer: Option<&'static str>| {
        let body = body.clone();
        async move {
            let mut headers = vec![("Authorization", "Bearer alice-token"), ("Idempotency-Key", "add-1")];
            headers.extend(consumer.map(|c| ("Agent-Surface-Consumer", c)));
            let r = http::post_json(addr, "/api/invoke", &headers, &body).await;
            agent_surface::http::wire::decode(r.status, &r.body).expect("an invoke result")
        }
    };
    let first = over_api(None).await;
    assert_eq!(first.output(), Some(&json!({"note": 1, "text": "once"})), "{first:?}");
    for consumer in [Some("phone"), Some("laptop"), None] {
        let again = over_api(consumer).await;
        assert_eq!(again.output(), first.output(), "{consumer:?}: {again:?}");
    }
    let over_mcp = |meta: Value, headers: Vec<(&'static str, &'static str)>| async move {
        let mut meta_all = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "serve-test", "version": "0"}});
        for (k, v) in meta.as_object().into_iter().flatten() {
            meta_all[k] = v.clone();
        }
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "notes-add", "arguments": {"text": "once"}, "_meta": meta_all}})
        .to_string();
        let mut all = vec![
            ("Authorization", "Bearer alice-token"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "notes-add"),
        ];
        all.extend(headers);
        let r = http::post_json(addr, "/mcp", &all, &call).await;
        let message = r.messages().into_iter().find(|m| m.get("result").is_some()).expect("a tools/call result");
        let result = serde_json::from_value(message["result"].clone()).expect("a CallToolResult");
        agent_surface::mcp::codec::decode(&result).expect("an invoke result")
    };
    let by_meta = over_mcp(json!({"agent-surface/invocationId": "add-1"}), vec![]).await;
    assert_eq!(by_meta.output(), first.output(), "{by_meta:?}");
    let by_header = over_mcp(json!({}), vec![("Idempotency-Key", "add-1")]).await;
    assert_eq!(by_header.output(), first.output(), "{by_header:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one run for every retry");

    // Another person's id of the same name is their own call.
    let maria = [("Authorization", "Bearer maria-token"), ("Idempotency-Key", "add-1")];
    let r = http::post_json(addr, "/api/invoke", &maria, &body).await;
    let theirs = agent_surface::http::wire::decode(r.status, &r.body).expect("an invoke result");
    assert_eq!(theirs.output(), Some(&json!({"note": 2, "text": "once"})), "{theirs:?}");
    running.stop();
    running.stopped().await.expect("drains");
}

/// Approval states given through `Serve::mcp` seal the rounds, as `Serve::state_key` would, also
/// over durable stores (where `Serve` would otherwise seal with the key the stores keep): a round
/// one such server sealed is answered by another with the same states, and not by one that seals
/// with the stores' key. Given beside `Serve::state_key`, refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_states_given_through_mcp_seal_the_rounds() {
    use agent_surface::mcp::mrtr::ApprovalStates;
    let states = || {
        let codec =
            rmcp::model::RequestStateCodec::new_with_keyring("k1", [("k1", vec![0x05u8; 32])]).expect("a codec");
        McpConfig { approval_states: ApprovalStates::new(codec), ..McpConfig::default() }
    };
    let dir = std::env::temp_dir().join(format!("serve-states-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let stores =
        agent_surface_sqlite::SqliteStores::open(dir.join("state.db"), Default::default()).await.expect("opens");
    let (service, _mount) = support::refunds_on(
        ServiceBuilder::new()
            .stores(stores.bundle())
            .authority(Policies::new().global(RequireIdentity).for_type("refunds", AllowAll)),
    );
    let serve = || Serve::new(service.clone()).authenticator(people()).operator_log(false);
    let first = serve().mcp(states()).bind("127.0.0.1:0").await.expect("serves");
    let second = serve().mcp(states()).bind("127.0.0.1:0").await.expect("serves");
    let defaulted = serve().bind("127.0.0.1:0").await.expect("serves");

    let asked = ask_refund(first.local_addr(), json!({})).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a sealed state").to_string();
    let answer = json!({"inputResponses": {"agent-surface/confirm": {"action": "accept"}}, "requestState": state});
    let unopened = ask_refund(defaulted.local_addr(), answer.clone()).await;
    assert_eq!(unopened["error"]["code"], -32602, "{unopened}");
    let done = ask_refund(second.local_addr(), answer).await;
    assert_eq!(done["result"]["isError"], false, "{done}");

    let why = refused(serve().mcp(states()).state_key(vec![7u8; 32]).bind("127.0.0.1:0").await);
    assert!(why.contains("McpConfig::approval_states") && why.contains("Serve::state_key"), "{why}");
    for running in [first, second, defaulted] {
        running.stop();
        running.stopped().await.expect("drains");
    }
    drop((service, stores));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A service built before anything records the operator channel (the guide's order: build, then
/// `Serve`) still reports its wiring warnings: `Registry::new` finds no subscriber and keeps them,
/// and `Serve` says them when it starts, to the operator log it installs or, without one, to
/// standard error. Once in all: not again when the log was there first, nor when the service is
/// served a second time. Each case runs in a process of its own (this binary run again for this
/// test alone), since a global subscriber, once set, stays.
#[tokio::test]
async fn wiring_warnings_nobody_recorded_are_said_when_the_service_starts() {
    // Makes this binary, run again, the service under test: `log` to serve with the operator log
    // `Serve` installs, `none` without one, `early` with the log installed before the build,
    // `scoped` after a thread-local subscriber came and went (a global one was never set).
    const WIRING_CHILD: &str = "AGENT_SURFACE_TEST_WIRING_CHILD";
    if let Ok(mode) = std::env::var(WIRING_CHILD) {
        if mode == "early" {
            agent_surface::registry::operator_log::init().expect("the first subscriber");
        }
        if mode == "scoped" {
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || ());
        }
        // A policy on a clock of its own, given by hand: the registry reads another.
        let start = agent_surface::core::Timestamp::from_unix_millis(1_795_957_200_000);
        let policies = Policies::default_deny().with_clock(Arc::new(agent_surface::policy::ManualClock::new(start)));
        let service = ServiceBuilder::new()
            .registry(agent_surface::registry::RegistryConfig {
                authority: Some(Arc::new(policies)),
                ..Default::default()
            })
            .build();
        assert_eq!(
            service.registry.wiring_warnings(),
            [agent_surface::registry::WiringWarning::ClockDiffers { part: "authority policy" }]
        );
        // Served twice (a restart in one process): said at the first start only.
        for _ in 0..2 {
            let serve = Serve::new(service.clone()).operator_log(mode != "none");
            let running = serve.bind("127.0.0.1:0").await.expect("serves");
            running.stop();
            running.stopped().await.expect("stops");
        }
        return;
    }
    for (mode, said) in [
        ("log", "WARN agent_surface::wiring: the authority policy reads another clock than the registry"),
        ("none", "agent-surface: the authority policy reads another clock than the registry"),
        // Recorded when the registry was built, so not said twice.
        ("early", "WARN agent_surface::wiring: the authority policy reads another clock than the registry"),
        // A scope that ended records nothing: `Serve` still installs its log and says them there.
        ("scoped", "WARN agent_surface::wiring: the authority policy reads another clock than the registry"),
        // An operator whose filter keeps errors only is not written around: nothing is said.
        ("quiet", ""),
    ] {
        let mut child = std::process::Command::new(std::env::current_exe().expect("this test binary"));
        child
            .args(["--exact", "wiring_warnings_nobody_recorded_are_said_when_the_service_starts", "--nocapture"])
            .env(WIRING_CHILD, mode)
            // The operator log's defaults: `WARN` and up, as text.
            .env_remove("RUST_LOG")
            .env_remove(agent_surface::registry::operator_log::FORMAT_VAR);
        if mode == "quiet" {
            child.env("RUST_LOG", "error");
        }
        let child = child.output().expect("runs");
        let stderr = String::from_utf8_lossy(&child.stderr);
        assert!(child.status.success(), "{mode}: {stderr}");
        if !said.is_empty() {
            assert_eq!(stderr.matches(said).count(), 1, "{mode}: {stderr}");
        }
        // Said once in all (not also the other way), or not at all.
        let times = usize::from(!said.is_empty());
        assert_eq!(stderr.matches("the authority policy reads another clock").count(), times, "{mode}: {stderr}");
    }
}
