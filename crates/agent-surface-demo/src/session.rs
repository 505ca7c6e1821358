//! The scripted agent session: the demo starts itself as an MCP server (`serve --stdio`), talks to
//! it with `rmcp`'s client over the child's stdin/stdout, and prints each turn: the request, the
//! code and retry that came back, and what the agent does next — decided from `retry` alone.
//!
//! The last session has two people: the demo starts itself as an HTTP server (`serve --http`),
//! an agent speaks MCP to it over streamable HTTP (JSON-RPC in `POST /mcp`, `web.rs`'s client) and
//! gets the two-phase result, and a second person signs in to the server's approval inbox over
//! HTTP (list, detail, the approve form with its one-time token) and approves; the agent's repeat
//! of the same call runs once.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::{ErrorPayload, InvokeResult, Retry};
use agent_surface_mcp::{codec, meta};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, Implementation, InputRequest,
    InputResponses, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

/// The client side: answers elicitations from a script (the "user"), and notes tool list changes.
struct AgentClient {
    elicitation: bool,
    answers: Mutex<VecDeque<ElicitationAction>>,
}

impl AgentClient {
    /// The scripted user's answer to an elicitation, printed.
    fn answer(&self, request: &ElicitRequestParams) -> ElicitResult {
        let message = match request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        let action = self.answers.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
        let action = action.unwrap_or(ElicitationAction::Decline);
        println!("   ◇ the MCP client asks the user: \"{message}\"");
        let answer = if action == ElicitationAction::Accept { "Approve" } else { "Decline" };
        println!("   ◇ the user clicks {answer}");
        ElicitResult::new(action)
    }
}

impl ClientHandler for AgentClient {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.elicitation {
            capabilities.elicitation = Some(ElicitationCapability::new());
        }
        ClientConfig::new(capabilities, Implementation::new("scripted-agent", env!("CARGO_PKG_VERSION")))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.answer(&request))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        println!("   ◇ server → notifications/tools/list_changed");
    }
}

type Client = RunningService<RoleClient, AgentClient>;

/// One connection to a freshly started `serve --stdio` child.
struct Agent {
    client: Client,
    child: tokio::process::Child,
    turn: usize,
    /// The surface id and version of the last tool listing.
    surface: (String, u64),
}

async fn connect(who: Option<&str>, elicitation: bool, answers: &[ElicitationAction]) -> Result<Agent, String> {
    connect_in(who, elicitation, answers, None).await
}

/// Connects in the given lifecycle (`None`: the legacy `initialize` handshake).
async fn connect_in(
    who: Option<&str>,
    elicitation: bool,
    answers: &[ElicitationAction],
    lifecycle: Option<ClientLifecycleMode>,
) -> Result<Agent, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["serve", "--stdio", "--memory"]);
    if let Some(who) = who {
        cmd.args(["--as", who]);
    }
    let verbose = std::env::var_os("DEMO_SERVER_LOG").is_some();
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(if verbose { Stdio::inherit() } else { Stdio::null() });
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the server: {e}"))?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the server has no pipes".to_string());
    };
    let handler = AgentClient { elicitation, answers: Mutex::new(answers.iter().cloned().collect()) };
    let client = match lifecycle {
        None => handler.serve((stdout, stdin)).await,
        Some(mode) => handler.serve_with_lifecycle((stdout, stdin), mode).await,
    };
    let client = client.map_err(|e| format!("MCP handshake failed: {e}"))?;
    Ok(Agent { client, child, turn: 0, surface: (String::new(), 0) })
}

fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 160 { format!("{}…", s.chars().take(159).collect::<String>()) } else { s }
}

/// What a loop that reads only `code`, `retry` and `details` does next.
fn next_step(p: &ErrorPayload) -> String {
    match p.retry() {
        Retry::No => "stop retrying; report to the user".to_string(),
        Retry::Yes => "send it again under a fresh invocationId".to_string(),
        Retry::AfterRefresh => "refresh the tool list, re-resolve, then decide".to_string(),
        Retry::AfterDelay => {
            format!(
                "wait {} ms, then send the same request",
                p.detail("retryAfterMs").and_then(Value::as_u64).unwrap_or(0)
            )
        }
        Retry::WithConfirmation => "ask the user to approve, then repeat the same call".to_string(),
        Retry::WithChanges => "change the request as details say, then retry".to_string(),
    }
}

impl Agent {
    fn heading(&mut self, what: &str) {
        self.turn += 1;
        println!();
        println!("── turn {} · {what}", self.turn);
    }

    async fn list(&mut self) -> Result<Vec<String>, String> {
        let result = self.client.list_tools(None).await.map_err(|e| format!("tools/list failed: {e}"))?;
        let m = result.meta.clone().unwrap_or_default();
        let surface_id = m.get(meta::SURFACE_ID).and_then(Value::as_str).unwrap_or_default().to_string();
        let version = m.get(meta::SURFACE_VERSION).and_then(Value::as_u64).unwrap_or_default();
        self.surface = (surface_id, version);
        let names: Vec<String> = result.tools.iter().map(|t| t.name.to_string()).collect();
        println!("→ tools/list");
        println!("← {} tools (surface {} v{}): {}", names.len(), self.surface.0, self.surface.1, names.join(", "));
        for t in &result.tools {
            if let Some(reason) = t.meta.as_ref().and_then(|m| m.get(meta::UNAVAILABLE_REASON)) {
                println!("   {} is listed as unavailable: {reason}", t.name);
            }
        }
        Ok(names)
    }

    fn params(tool: &str, args: Value, meta_members: Value) -> CallToolRequestParams {
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(a) = args {
            params = params.with_arguments(a);
        }
        if let Value::Object(m) = meta_members {
            let mut rm = RequestMetaObject::new();
            rm.extend(RequestMetaObject(rmcp::model::MetaObject(m)));
            params.meta = Some(rm);
        }
        params
    }

    fn show_request(tool: &str, args: &Value, meta_members: &Value) {
        let extra = match meta_members.as_object() {
            Some(m) if !m.is_empty() => format!("  _meta {}", compact(meta_members)),
            _ => String::new(),
        };
        println!("→ tools/call {tool} {}{extra}", compact(args));
    }

    fn show_result(result: &InvokeResult) {
        match result {
            InvokeResult::Ok { output, .. } => println!("← ok {}", compact(output)),
            _ => {
                let Some(p) = result.error_payload() else { return };
                println!("← isError: {}  retry: {}", p.code(), p.retry());
                println!("   message: {}", p.message());
                if let Some(d) = p.details() {
                    println!("   details: {}", compact(&Value::Object(d.clone())));
                }
                println!("⇒ agent: {}", next_step(p));
            }
        }
    }

    /// Calls a tool and prints the exchange.
    async fn call(&mut self, tool: &str, args: Value, meta_members: Value) -> Result<InvokeResult, String> {
        Self::show_request(tool, &args, &meta_members);
        let params = Self::params(tool, args, meta_members);
        let raw = self.client.call_tool(params).await.map_err(|e| format!("tools/call {tool} failed: {e}"))?;
        let result = codec::decode(&raw).map_err(|e| format!("tools/call {tool}: {e}"))?;
        Self::show_result(&result);
        Ok(result)
    }

    /// Starts a call, cancels it after `after`, and prints the exchange.
    async fn call_and_cancel(
        &mut self,
        tool: &str,
        args: Value,
        meta_members: Value,
        after: Duration,
    ) -> Result<(), String> {
        Self::show_request(tool, &args, &meta_members);
        let params = Self::params(tool, args, meta_members);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = self
            .client
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| format!("tools/call {tool} failed: {e}"))?;
        tokio::time::sleep(after).await;
        println!("→ notifications/cancelled (the user pressed stop after {} ms)", after.as_millis());
        handle.cancel(Some("the user pressed stop".to_string())).await.map_err(|e| e.to_string())?;
        println!("← (no response: a cancelled request is never answered)");
        Ok(())
    }

    /// Calls a tool that may answer `input_required`, answers each approval question by asking
    /// the user (the client handler's script), repeats the call, and prints every round.
    async fn call_answering(&mut self, tool: &str, args: Value) -> Result<InvokeResult, String> {
        Self::show_request(tool, &args, &json!({}));
        let mut params = Self::params(tool, args, json!({}));
        for _round in 0..4 {
            let response = self
                .client
                .call_tool_once(params.clone())
                .await
                .map_err(|e| format!("tools/call {tool} failed: {e}"))?;
            let asked = match response {
                CallToolResponse::InputRequired(asked) => asked,
                CallToolResponse::Complete(raw) => {
                    let result = codec::decode(&raw).map_err(|e| format!("tools/call {tool}: {e}"))?;
                    Self::show_result(&result);
                    return Ok(result);
                }
                other => return Err(format!("tools/call {tool}: unexpected answer {other:?}")),
            };
            let state = asked.request_state.clone().unwrap_or_default();
            let mut responses = InputResponses::new();
            for (key, request) in asked.input_requests.clone().unwrap_or_default() {
                let wire = serde_json::to_value(&request).unwrap_or_default();
                println!(
                    "← input_required: {key} = {} \"{}\"",
                    wire["method"].as_str().unwrap_or(""),
                    wire["params"]["message"].as_str().unwrap_or("")
                );
                let InputRequest::Elicitation(elicit) = request else { continue };
                let answer = self.client.service().answer(&elicit.params);
                responses.insert(key, serde_json::to_value(answer).unwrap_or_default());
            }
            println!(
                "   requestState: {} bytes, sealed (HMAC-SHA256) and bound to this tool and these arguments",
                state.len()
            );
            println!(
                "→ tools/call {tool} again, with inputResponses {} and the requestState",
                compact(&serde_json::to_value(&responses).unwrap_or_default())
            );
            params = params.with_input_responses(responses).with_request_state(state);
        }
        Err(format!("tools/call {tool}: too many rounds"))
    }

    async fn close(mut self) {
        let _ = self.client.cancel().await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
    }
}

fn code(r: &InvokeResult) -> String {
    r.code().map(|c| c.as_str().to_string()).unwrap_or_else(|| "ok".to_string())
}

fn expect(r: &InvokeResult, want: &str, failures: &Arc<Mutex<Vec<String>>>) {
    let got = code(r);
    if got != want {
        failures.lock().unwrap_or_else(PoisonError::into_inner).push(format!("expected {want}, got {got}"));
    }
}

/// Runs the scripted session and prints the transcript.
pub(crate) async fn run() -> Result<(), String> {
    println!("agent-surface demo: a scripted agent talks to the shop over MCP (stdio, a child process).");
    println!("Every error arrives as a tool result with isError: true and the payload");
    println!("{{code, message, retry, details}}; the agent acts on `retry`, never on the message.");
    let failures = Arc::new(Mutex::new(Vec::new()));
    let f = &failures;

    println!();
    println!("━━ session 1: an anonymous agent; its MCP client cannot elicit (two-phase confirmation)");
    let mut a = connect(None, false, &[]).await?;
    a.heading("discover the tools");
    a.list().await?;
    let first_surface = a.surface.clone();

    a.heading("read an order");
    let r = a.call("orders-get", json!({"orderId": "A-1001"}), json!({})).await?;
    expect(&r, "ok", f);

    a.heading("read an order that does not exist (a tool with an output schema, answering an error)");
    let r = a.call("orders-get", json!({"orderId": "A-9999"}), json!({})).await?;
    expect(&r, "PRECONDITION_FAILED", f);

    a.heading("change an address with a malformed postal code");
    let address = json!({"street": "9 Birch Ln", "city": "Springfield", "zip": "1234"});
    let r = a.call("orders-update_address", json!({"orderId": "A-1001", "address": address}), json!({})).await?;
    expect(&r, "INVALID_INPUT", f);
    let address = json!({"street": "9 Birch Ln", "city": "Springfield", "zip": "12340"});
    let inv = json!({"agent-surface/invocationId": "inv-addr-1"});
    let r = a.call("orders-update_address", json!({"orderId": "A-1001", "address": address}), inv.clone()).await?;
    expect(&r, "ok", f);

    a.heading("send the same invocationId again: the stored result is replayed, nothing runs twice");
    let r = a.call("orders-update_address", json!({"orderId": "A-1001", "address": address}), inv.clone()).await?;
    expect(&r, "ok", f);

    a.heading("reuse that invocationId for a different request");
    let r = a.call("orders-update_address", json!({"orderId": "A-1003", "address": address}), inv).await?;
    expect(&r, "INVOCATION_CONFLICT", f);
    let r = a
        .call(
            "orders-update_address",
            json!({"orderId": "A-1003", "address": address}),
            json!({"agent-surface/invocationId": "inv-addr-2"}),
        )
        .await?;
    expect(&r, "ok", f);

    a.heading("change the address of an order that has shipped");
    let r = a.call("orders-update_address", json!({"orderId": "A-1002", "address": address}), json!({})).await?;
    expect(&r, "PRECONDITION_FAILED", f);

    a.heading("refund without being signed in");
    let r = a.call("refunds-issue", json!({"orderId": "A-1001", "amountCents": 500}), json!({})).await?;
    expect(&r, "NOT_AUTHENTICATED", f);

    a.heading("cancel an order (needs the user's approval; this client cannot elicit)");
    let r = a.call("orders-cancel", json!({"orderId": "A-1003"}), json!({})).await?;
    expect(&r, "CONFIRMATION_REQUIRED", f);
    println!("   (the agent relays the summary to the user and waits; session 2 shows approval in wait mode)");

    a.heading("redeem loyalty points (disabled right now)");
    let r = a.call("loyalty-redeem", json!({}), json!({})).await?;
    expect(&r, "CAPABILITY_NOT_AVAILABLE", f);

    a.heading("call an admin tool this agent cannot see");
    let r = a.call("admin-purge_cache", json!({}), json!({})).await?;
    expect(&r, "CAPABILITY_NOT_FOUND", f);
    a.list().await?;
    println!("⇒ agent: the tool is not in the list; give up on it");

    a.heading("ask for shipping quotes faster than allowed");
    for _ in 0..2 {
        let r = a.call("shipping-quote", json!({"zip": "12345"}), json!({})).await?;
        expect(&r, "ok", f);
    }
    let r = a.call("shipping-quote", json!({"zip": "12345"}), json!({})).await?;
    expect(&r, "RATE_LIMITED", f);
    let wait = r.error_payload().and_then(ErrorPayload::retry_after).unwrap_or(Duration::from_millis(1000));
    tokio::time::sleep(wait).await;
    let r = a.call("shipping-quote", json!({"zip": "12345"}), json!({})).await?;
    expect(&r, "ok", f);

    a.heading("track a shipment (the first lookup is slow)");
    let r = a
        .call("shipping-track", json!({"orderId": "A-1002"}), json!({"agent-surface/invocationId": "inv-track-1"}))
        .await?;
    expect(&r, "TIMEOUT", f);
    let r = a
        .call("shipping-track", json!({"orderId": "A-1002"}), json!({"agent-surface/invocationId": "inv-track-2"}))
        .await?;
    expect(&r, "ok", f);

    a.heading("start a slow lookup, then cancel it");
    let inv = json!({"agent-surface/invocationId": "inv-track-3"});
    a.call_and_cancel("shipping-track", json!({"orderId": "A-1003"}), inv.clone(), Duration::from_millis(100)).await?;
    println!("   (later, the agent asks what became of inv-track-3)");
    let r = a.call("shipping-track", json!({"orderId": "A-1003"}), inv).await?;
    expect(&r, "CANCELLED", f);
    let r = a
        .call("shipping-track", json!({"orderId": "A-1003"}), json!({"agent-surface/invocationId": "inv-track-4"}))
        .await?;
    expect(&r, "ok", f);

    a.heading("look into a cart without saying which (two carts are open)");
    let r = a.call("cart-view", json!({}), json!({})).await?;
    expect(&r, "AMBIGUOUS_INSTANCE", f);
    let target = json!({"agent-surface/target": {"instanceId": "cart-alice"}});
    let r = a.call("cart-add_item", json!({"sku": "TEA-01", "qty": 2}), target.clone()).await?;
    expect(&r, "ok", f);

    a.heading("check out alice's cart; the cart closes");
    let r = a.call("cart-checkout", json!({}), target.clone()).await?;
    expect(&r, "ok", f);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = a.call("cart-add_item", json!({"sku": "TEA-02", "qty": 1}), target).await?;
    expect(&r, "COMPONENT_UNMOUNTED", f);
    a.list().await?;

    a.heading("export a report (the handler panics)");
    let r = a.call("reports-export", json!({}), json!({})).await?;
    expect(&r, "EXECUTION_FAILED", f);
    println!("   (the panic text, with its internal URL, went to the operator log only)");

    a.heading("empty bob's cart, planned against the tool list from the start (the carts changed since)");
    let planned = json!({
        "agent-surface/surfaceId": first_surface.0,
        "agent-surface/surfaceVersion": first_surface.1,
        "agent-surface/target": {"instanceId": "cart-bob"}
    });
    let r = a.call("cart-clear", json!({}), planned).await?;
    expect(&r, "STALE_CAPABILITY", f);
    a.list().await?;
    let planned = json!({
        "agent-surface/surfaceId": a.surface.0,
        "agent-surface/surfaceVersion": a.surface.1,
        "agent-surface/target": {"instanceId": "cart-bob"}
    });
    let r = a.call("cart-clear", json!({}), planned).await?;
    expect(&r, "ok", f);
    a.close().await;

    println!();
    println!("━━ session 2: alice (no support role), whose MCP client can ask her to approve (wait mode)");
    let answers = [ElicitationAction::Accept, ElicitationAction::Decline];
    let mut b = connect(Some("alice"), true, &answers).await?;
    b.heading("discover the tools");
    b.list().await?;

    b.heading("use a plan made in session 1 (another server process)");
    let planned = json!({"agent-surface/surfaceId": first_surface.0, "agent-surface/surfaceVersion": first_surface.1});
    let r = b.call("orders-cancel", json!({"orderId": "A-1001"}), planned).await?;
    expect(&r, "STALE_CAPABILITY", f);

    b.heading("refund as a signed-in user without the support role");
    let r = b.call("refunds-issue", json!({"orderId": "A-1001", "amountCents": 500}), json!({})).await?;
    expect(&r, "NOT_AUTHORIZED", f);

    b.heading("cancel an order; the client asks alice, who approves");
    let planned = json!({"agent-surface/surfaceId": b.surface.0, "agent-surface/surfaceVersion": b.surface.1});
    let r = b.call("orders-cancel", json!({"orderId": "A-1001"}), planned).await?;
    expect(&r, "ok", f);

    b.heading("cancel another order; alice declines");
    let r = b.call("orders-cancel", json!({"orderId": "A-1003"}), json!({})).await?;
    expect(&r, "CONFIRMATION_INVALID", f);
    b.close().await;

    println!();
    println!("━━ session 3: alice again, with a client of MCP 2026-07-28 (stateless: no initialize, and the");
    println!("   server may not call the client back; an approval is an input-required round trip)");
    let modern = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let answers = [ElicitationAction::Accept, ElicitationAction::Decline];
    let mut c = connect_in(Some("alice"), true, &answers, Some(modern)).await?;
    c.heading("discover the tools (server/discover, then tools/list with the version in _meta)");
    c.list().await?;

    c.heading("cancel an order; the server asks for alice's approval, the client repeats the call");
    let r = c.call_answering("orders-cancel", json!({"orderId": "A-1001"})).await?;
    expect(&r, "ok", f);

    c.heading("cancel another order; alice declines");
    let r = c.call_answering("orders-cancel", json!({"orderId": "A-1003"})).await?;
    expect(&r, "CONFIRMATION_INVALID", f);
    c.close().await;

    inbox_session(f).await?;

    let failures = failures.lock().unwrap_or_else(PoisonError::into_inner).clone();
    println!();
    if failures.is_empty() {
        println!("All 16 codes and all 6 retry categories appeared above; the script went as planned.");
        Ok(())
    } else {
        Err(format!("the session did not go as scripted: {}", failures.join("; ")))
    }
}

/// The demo's HTTP server (`serve --http`), started as a child with two people's tokens: alice,
/// whose agent calls the shop, and maria, an approver.
struct HttpServer {
    addr: String,
    _child: tokio::process::Child,
    /// Kept open: the server may write to it again.
    _stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
}

async fn start_http_server() -> Result<HttpServer, String> {
    use tokio::io::AsyncBufReadExt;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--memory",
        "--token",
        "t-alice=alice",
        "--token",
        "t-maria=maria:approver",
    ]);
    let verbose = std::env::var_os("DEMO_SERVER_LOG").is_some();
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(if verbose { Stdio::inherit() } else { Stdio::null() });
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the HTTP server: {e}"))?;
    let stdout = child.stdout.take().ok_or("the HTTP server has no stdout")?;
    let mut line = String::new();
    let mut stdout = tokio::io::BufReader::new(stdout);
    tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut line))
        .await
        .map_err(|_| "the HTTP server did not start".to_string())?
        .map_err(|e| e.to_string())?;
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|l| l.strip_suffix("/mcp"))
        .ok_or_else(|| format!("the HTTP server said {line:?}"))?
        .to_string();
    Ok(HttpServer { addr, _child: child, _stdout: stdout })
}

/// An agent's MCP client over streamable HTTP (JSON-RPC in `POST /mcp`), signed in with a bearer
/// token; it cannot elicit, so a gated call gets the two-phase result.
struct HttpAgent {
    addr: String,
    token: String,
    session: Option<String>,
    next_id: u64,
}

impl HttpAgent {
    async fn connect(addr: &str, token: &str) -> Result<HttpAgent, String> {
        let mut agent = HttpAgent { addr: addr.to_string(), token: token.to_string(), session: None, next_id: 1 };
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                          "clientInfo": {"name": "scripted-agent", "version": env!("CARGO_PKG_VERSION")}});
        agent.rpc("initialize", init).await?;
        agent.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await?;
        Ok(agent)
    }

    async fn post(&mut self, message: &Value) -> Result<crate::web::Response, String> {
        let bearer = format!("Bearer {}", self.token);
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", bearer.as_str()),
        ];
        let session = self.session.clone();
        if let Some(id) = &session {
            headers.push(("Mcp-Session-Id", id.as_str()));
            headers.push(("MCP-Protocol-Version", "2025-11-25"));
        }
        let body = message.to_string();
        let response = crate::web::request(&self.addr, "POST", "/mcp", &headers, body.as_bytes()).await?;
        if let Some(id) = response.header("mcp-session-id") {
            self.session = Some(id.to_string());
        }
        Ok(response)
    }

    /// A request and its JSON-RPC result (from a JSON or an event-stream body).
    async fn rpc(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let response = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        let messages: Vec<Value> = match serde_json::from_str(&response.body) {
            Ok(v) => vec![v],
            Err(_) => response
                .body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect(),
        };
        let answer = messages.into_iter().find(|m| m["id"] == json!(id));
        match answer {
            Some(m) if m.get("result").is_some() => Ok(m["result"].clone()),
            Some(m) => Err(format!("{method}: {}", m["error"])),
            None => Err(format!("{method}: no answer (HTTP {})", response.status)),
        }
    }

    /// `tools/call`, printed as the other sessions print it.
    async fn call(&mut self, tool: &str, args: Value) -> Result<InvokeResult, String> {
        Agent::show_request(tool, &args, &json!({}));
        let raw = self.rpc("tools/call", json!({"name": tool, "arguments": args})).await?;
        let raw: rmcp::model::CallToolResult =
            serde_json::from_value(raw).map_err(|e| format!("tools/call {tool}: {e}"))?;
        let result = codec::decode(&raw).map_err(|e| format!("tools/call {tool}: {e}"))?;
        Agent::show_result(&result);
        Ok(result)
    }
}

/// A person in a browser: one cookie jar (the sign-in form's cookie, then the session's), each
/// request and answer printed (form tokens and cookie values elided: they differ on every run).
struct Person {
    addr: String,
    cookies: Vec<(String, String)>,
}

impl Person {
    async fn get(&mut self, path: &str) -> Result<crate::web::Response, String> {
        println!("→ GET {path}");
        self.send("GET", path, &[]).await
    }

    async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Result<crate::web::Response, String> {
        let shown: Vec<String> = fields
            .iter()
            .map(|(k, v)| if matches!(*k, "csrf" | "token") { format!("{k}=…") } else { format!("{k}={v}") })
            .collect();
        println!("→ POST {path} (form: {})", shown.join(", "));
        let body = crate::web::form(fields);
        self.send("POST", path, body.as_bytes()).await
    }

    async fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<crate::web::Response, String> {
        let cookie = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
        if !cookie.is_empty() {
            headers.push(("Cookie", cookie.as_str()));
        }
        let response = crate::web::request(&self.addr, method, path, &headers, body).await?;
        let mut shown = format!("← {}", response.status);
        if let Some(location) = response.header("location") {
            shown.push_str(&format!(" → {location}"));
        }
        for (_, set) in response.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie")) {
            let mut parts = set.split(';').map(str::trim);
            let Some((name, value)) = parts.next().and_then(|kv| kv.split_once('=')) else { continue };
            let attributes: Vec<&str> = parts.collect();
            self.cookies.retain(|(k, _)| k != name);
            if !value.is_empty() {
                self.cookies.push((name.to_string(), value.to_string()));
            }
            shown.push_str(&format!("  Set-Cookie: {name}=…; {}", attributes.join("; ")));
        }
        if let Some(title) = html_between(&response.body, "<h1>", "</h1>") {
            shown.push_str(&format!("  page: \"{title}\""));
        }
        println!("{shown}");
        Ok(response)
    }
}

/// The text between the first `start` and the next `end`, if any.
fn html_between<'a>(page: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = page.find(start)? + start.len();
    page[from..].find(end).map(|to| &page[from..from + to])
}

/// The rows of the table with `id` on an inbox page, as `a · b · c` (tags dropped).
fn table_rows(page: &str, id: &str) -> Vec<String> {
    let Some(table) = html_between(page, &format!("<table id=\"{id}\">"), "</table>") else { return Vec::new() };
    let body = html_between(table, "<tbody>", "</tbody>").unwrap_or_default();
    body.split("<tr>")
        .filter(|r| !r.trim().is_empty())
        .map(|row| {
            // Cells start `<td>` or `<td class=…>`; the text from the tag's end.
            let cells: Vec<String> = row
                .split("<td")
                .skip(1)
                .map(|cell| cell.split_once('>').map_or("", |(_, text)| text))
                .map(|cell| {
                    let mut text = String::new();
                    let mut in_tag = false;
                    for c in cell.chars() {
                        match c {
                            '<' => in_tag = true,
                            '>' => in_tag = false,
                            c if !in_tag => text.push(c),
                            _ => {}
                        }
                    }
                    let text = text.trim();
                    text.replace("&quot;", "\"")
                        .replace("&#39;", "'")
                        .replace("&lt;", "<")
                        .replace("&gt;", ">")
                        .replace("&amp;", "&")
                })
                .collect();
            cells.join(" · ")
        })
        .collect()
}

/// Session 4: two people. Alice's agent asks over MCP (streamable HTTP) to cancel an order and
/// gets the two-phase result; maria, an approver, signs in to the approval inbox of the same
/// server over HTTP, opens the confirmation and approves it; the agent's repeat of the same call
/// runs, once.
async fn inbox_session(f: &Arc<Mutex<Vec<String>>>) -> Result<(), String> {
    println!();
    println!("━━ session 4: two people. The shop served over HTTP (serve --http, tokens for alice and for maria,");
    println!("   who has the approver role); alice's agent speaks MCP over streamable HTTP and cannot elicit;");
    println!("   maria approves in the approval inbox the same server serves at /inbox/");
    let server = start_http_server().await?;
    let mut agent = HttpAgent::connect(&server.addr, "t-alice").await?;
    let mut turn = 0;
    let mut heading = |what: &str| {
        turn += 1;
        println!();
        println!("── turn {turn} · {what}");
    };

    heading("alice's agent cancels an order (needs a person's approval; two-phase)");
    let cancel = json!({"orderId": "A-1001"});
    let r = agent.call("orders-cancel", cancel.clone()).await?;
    expect(&r, "CONFIRMATION_REQUIRED", f);
    let id = r
        .error_payload()
        .and_then(|p| p.detail("confirmationId"))
        .and_then(Value::as_str)
        .ok_or("no confirmationId in the two-phase result")?
        .to_string();
    // The confirmation's page in the inbox: under the server's own (loopback) address here, under
    // --public-url behind a proxy.
    let page = format!("/inbox/c/{id}");
    let url = r.error_payload().and_then(|p| p.detail("approvalUrl")).and_then(Value::as_str).unwrap_or_default();
    if url != format!("http://{}{page}", server.addr) {
        fail(f, format!("details.approvalUrl is {url:?}"));
    }
    println!("   (alice's agent tells her a person must approve at details.approvalUrl; she sends maria the link)");

    heading("maria opens the link in her browser, signs in with her token, and is back on the confirmation");
    let mut maria = Person { addr: server.addr.clone(), cookies: Vec::new() };
    let opened = maria.get(&page).await?;
    expect_status(opened.status, 303, "the approval page before signing in", f);
    let sign_in = opened.header("location").unwrap_or("/inbox/sign-in").to_string();
    let form = maria.get(&sign_in).await?;
    let csrf = crate::web::input_value(&form.body, "csrf").ok_or("no form token on the sign-in page")?;
    let back = crate::web::input_value(&form.body, "c").unwrap_or_default();
    let signed = maria.post("/inbox/sign-in", &[("token", "t-maria"), ("csrf", &csrf), ("c", &back)]).await?;
    expect_status(signed.status, 303, "sign in", f);
    if signed.header("location") != Some(page.as_str()) {
        fail(f, format!("signing in leads to {:?}, not the confirmation", signed.header("location")));
    }
    let detail = maria.get(&page).await?;
    if let Some(input) = html_between(&detail.body, "<pre id=\"input\">", "</pre>") {
        println!("   input: {}", input.replace("&quot;", "\""));
    }

    heading("her inbox lists it too, with what she needs to decide");
    let list = maria.get("/inbox/").await?;
    let rows = table_rows(&list.body, "pending");
    for row in &rows {
        // Summary, capability, requested by, effect (the times differ on every run).
        println!("   waiting: {}", row.split(" · ").take(4).collect::<Vec<_>>().join(" · "));
    }
    if rows.len() != 1 || !rows[0].contains("Cancel order A-1001") || !rows[0].contains("alice") {
        fail(f, format!("the inbox lists {rows:?}"));
    }
    // The decision form's token (the header's sign-out form has one of its own).
    let decide = detail.body.split("<form id=\"decide\"").nth(1).unwrap_or_default();
    let csrf = crate::web::input_value(decide, "csrf").ok_or("no decision form on the detail page")?;

    heading("maria approves it, with a note");
    let fields = [("verdict", "approve"), ("note", "Customer asked by phone."), ("csrf", csrf.as_str())];
    let approved = maria.post(&page, &fields).await?;
    expect_status(approved.status, 303, "approve", f);
    let after = maria.get(&page).await?;
    if let Some(state) = html_between(&after.body, "<dd id=\"state\">", "</dd>") {
        println!("   state: {state}");
    }
    println!("   (the same form posted again is refused: its token was good for one use)");
    let replayed = maria.post(&page, &fields).await?;
    expect_status(replayed.status, 403, "a replayed form", f);

    heading("alice's agent repeats the same call (it cannot send the confirmationId; the server presents it)");
    let r = agent.call("orders-cancel", cancel.clone()).await?;
    expect(&r, "ok", f);

    heading("the agent repeats it once more: the order was cancelled once, and nothing runs twice");
    let r = agent.call("orders-cancel", cancel).await?;
    expect(&r, "PRECONDITION_FAILED", f);

    heading("maria's inbox: nothing waits any more, and the decision is on record");
    let list = maria.get("/inbox/").await?;
    if list.body.contains("id=\"empty\"") {
        println!("   nothing waits for her decision");
    } else {
        fail(f, "the inbox still lists a confirmation".to_string());
    }
    for row in table_rows(&list.body, "recent") {
        println!("   decided: {}", row.split(" · ").skip(1).collect::<Vec<_>>().join(" · "));
    }
    Ok(())
}

fn fail(failures: &Arc<Mutex<Vec<String>>>, what: String) {
    failures.lock().unwrap_or_else(PoisonError::into_inner).push(what);
}

fn expect_status(got: u16, want: u16, what: &str, failures: &Arc<Mutex<Vec<String>>>) {
    if got != want {
        fail(failures, format!("{what}: expected HTTP {want}, got {got}"));
    }
}
