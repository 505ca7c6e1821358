//! The downstream tests of `docs/guide.md`: the tickets service held to its rules with the testing
//! kit, through the embedded toolset and over MCP. The guide quotes this file between its
//! `// guide:` markers.

use std::time::Duration;

use agent_surface::core::{ErrorCode, Retry};
use agent_surface::policy::{Consumer, Identity};
use agent_surface::registry::InvokeRequest;
use agent_surface_example_tickets::{Service, service};
use agent_surface_testing::{ScriptedConsumer, TestClock, expect_details, expect_error, expect_ok, expect_retry};
use serde_json::{Value, json};

fn alice() -> ScriptedConsumer {
    ScriptedConsumer::signed_in("alice-session", Identity::new("alice"))
}

fn tickets() -> (TestClock, Service) {
    let clock = TestClock::new();
    let service = service(clock.shared()).expect("the tickets service is well-formed");
    (clock, service)
}

// guide:begin test-validation
#[tokio::test]
async fn a_title_is_checked_before_the_handler_runs() {
    let (_clock, service) = tickets();
    let results = alice()
        .call("tickets.create", json!({"title": ""}))
        .call("tickets.create", json!({"title": "Printer jam"}))
        .run(&service.registry)
        .await;
    let invalid = expect_error(&results[0], ErrorCode::InvalidInput);
    expect_retry(invalid, Retry::WithChanges);
    expect_details(invalid, json!({"issues": [{"path": "/title"}]}));
    assert_eq!(expect_ok(&results[1])["id"], 1, "the invalid call created nothing");
    assert_eq!(expect_ok(&results[1])["opened_by"], "alice");
}
// guide:end test-validation

#[test]
fn without_the_shared_state_the_type_does_not_mount() {
    let registry = agent_surface::registry::Registry::new(agent_surface::registry::RegistryConfig::default());
    agent_surface_example_tickets::define(&registry).expect("the type is well-formed");
    let err = registry.mount("tickets", "main").expect_err("no Desk is provided");
    assert!(err.problem().contains("Registry::provide") && err.problem().contains("Desk"), "{err}");
}

#[tokio::test]
async fn every_caller_signs_in() {
    let (_clock, service) = tickets();
    let results = ScriptedConsumer::new("anonymous").call("tickets.list", json!({})).run(&service.registry).await;
    expect_error(&results[0], ErrorCode::NotAuthenticated);
}

// guide:begin test-quota
#[tokio::test]
async fn five_creates_per_minute_per_user() {
    let (clock, service) = tickets();
    let six = (1..=6).fold(alice(), |c, n| c.call("tickets.create", json!({"title": format!("Issue {n}")})));
    let results = six.run(&service.registry).await;
    for created in &results[..5] {
        expect_ok(created);
    }
    let limited = expect_error(&results[5], ErrorCode::RateLimited);
    expect_retry(limited, Retry::AfterDelay);
    expect_details(limited, json!({"reason": "rate"}));

    // Bob's budget is his own; Alice's comes back after the minute.
    let bob = ScriptedConsumer::signed_in("bob-session", Identity::new("bob"));
    expect_ok(&bob.call("tickets.create", json!({"title": "Mine"})).run(&service.registry).await[0]);
    clock.advance(Duration::from_secs(60));
    expect_ok(&alice().call("tickets.create", json!({"title": "Again"})).run(&service.registry).await[0]);
}
// guide:end test-quota

// guide:begin test-report
/// `tickets.report` is keyed on the report's id: whoever sends a report again gets the ticket it
/// opened; the same id with another title is a conflict, not a second ticket.
#[tokio::test]
async fn a_report_opens_one_ticket_however_often_it_is_sent() {
    let (_clock, service) = tickets();
    let report = |title: &str| json!({"report_id": "R-1", "title": title});
    let first = alice().call("tickets.report", report("Disk full")).run(&service.registry).await;
    let bob = ScriptedConsumer::signed_in("bob-session", Identity::new("bob"));
    let again = bob
        .call("tickets.report", report("Disk full"))
        .call("tickets.report", report("Disk fine"))
        .run(&service.registry)
        .await;
    assert_eq!(expect_ok(&again[0]), expect_ok(&first[0]), "bob gets the ticket alice's call opened");
    let conflict = expect_error(&again[1], ErrorCode::InvocationConflict);
    expect_details(conflict, json!({"reason": "natural-key-used-by-different-request"}));
    let list = alice().call("tickets.list", json!({})).run(&service.registry).await;
    assert_eq!(expect_ok(&list[0])["tickets"].as_array().map(Vec::len), Some(1));
}
// guide:end test-report

#[tokio::test]
async fn support_agents_close_tickets_and_an_unknown_ticket_is_a_precondition() {
    let (_clock, service) = tickets();
    expect_ok(&alice().call("tickets.create", json!({"title": "Printer jam"})).run(&service.registry).await[0]);
    let refused = alice().call("tickets.close", json!({"id": 1})).run(&service.registry).await;
    expect_error(&refused[0], ErrorCode::NotAuthorized);

    let bob = ScriptedConsumer::signed_in("bob-session", Identity::new("bob").with_role("agent"));
    let results = bob
        .call("tickets.close", json!({"id": 1}))
        .call("tickets.close", json!({"id": 9}))
        .run(&service.registry)
        .await;
    assert_eq!(expect_ok(&results[0])["open"], false);
    let unknown = expect_error(&results[1], ErrorCode::PreconditionFailed);
    expect_details(unknown, json!({"reason": "unknown-ticket"}));
}

// guide:begin test-confirmation
#[tokio::test]
async fn a_deletion_runs_once_a_person_approved_it() {
    let (_clock, service) = tickets();
    expect_ok(&alice().call("tickets.create", json!({"title": "Printer jam"})).run(&service.registry).await[0]);
    let root = ScriptedConsumer::signed_in("root-session", Identity::new("root").with_role("admin"));
    let asked = root.clone().call("tickets.delete", json!({"id": 1})).run(&service.registry).await;
    let required = expect_error(&asked[0], ErrorCode::ConfirmationRequired);
    expect_retry(required, Retry::WithConfirmation);
    let id = required.detail("confirmationId").and_then(Value::as_str).expect("an id").to_string();

    // Someone other than the requester approves (the engine refuses self-approval).
    service.confirmations.approve(&id, &Identity::new("manager")).await.expect("approved");
    let retry = InvokeRequest::new("tickets.delete", json!({"id": 1})).with_confirmation(&id);
    let deleted = root.request(retry).call("tickets.list", json!({})).run(&service.registry).await;
    assert_eq!(expect_ok(&deleted[0])["title"], "Printer jam");
    assert_eq!(expect_ok(&deleted[1])["tickets"], json!([]));
}
// guide:end test-confirmation

/// A deletion of a ticket that is not there is refused before anyone is asked to approve it (the
/// capability's precondition runs before its confirmation), and nothing ran.
#[tokio::test]
async fn nobody_is_asked_to_approve_deleting_a_ticket_that_is_not_there() {
    let (_clock, service) = tickets();
    let root = ScriptedConsumer::signed_in("root-session", Identity::new("root").with_role("admin"));
    let asked = root.call("tickets.delete", json!({"id": 77})).run(&service.registry).await;
    let unknown = expect_error(&asked[0], ErrorCode::PreconditionFailed);
    expect_details(unknown, json!({"reason": "unknown-ticket"}));
    assert!(unknown.not_processed(), "{unknown:?}");
}

// guide:begin test-toolset
#[tokio::test]
async fn an_openai_turn_through_the_embedded_toolset() {
    use agent_surface_toolset::{Provider, Toolset, ToolsetConfig};

    let (_clock, service) = tickets();
    let alice = Consumer::authenticated("conversation-1", Identity::new("alice"));
    let toolset = Toolset::new(service.registry.clone(), alice, ToolsetConfig::default());
    let tools = toolset.tools(Provider::OpenAiChat).await; // the request's `tools`
    assert!(tools.as_array().expect("a list").iter().any(|t| t["function"]["name"] == "tickets-create"));

    // The model asks for a ticket with an empty title, then fixes it on the next turn.
    let call = |id: &str, title: &str| {
        let arguments = json!({"title": title}).to_string();
        json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "tickets-create", "arguments": arguments}}]})
    };
    let turn = toolset.handle(Provider::OpenAiChat, &call("call_1", "")).await.expect("a tool call");
    expect_error(&turn.outcomes[0].result, ErrorCode::InvalidInput); // relayed to the model as JSON
    let turn = toolset.handle(Provider::OpenAiChat, &call("call_2", "Printer jam")).await.expect("a tool call");
    assert_eq!(expect_ok(&turn.outcomes[0].result)["id"], 1);
    assert_eq!(turn.messages[0]["role"], "tool");
}
// guide:end test-toolset

#[tokio::test]
async fn over_mcp_a_tool_per_capability_and_errors_in_band() {
    use agent_surface::mcp::{McpConfig, McpServer, codec};
    use rmcp::{ServiceExt, model::CallToolRequestParams};

    let (_clock, service) = tickets();
    let config = McpConfig { identity: Some(Identity::new("alice")), ..Default::default() };
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(agent_surface::mcp::serve_io(McpServer::new(service.registry.clone(), config), read, write, 1 << 20));

    let client = ().serve(client_io).await.expect("the MCP handshake");
    let mut names: Vec<String> =
        client.list_all_tools().await.expect("tools/list").into_iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, ["tickets-close", "tickets-create", "tickets-delete", "tickets-list", "tickets-report"]);
    let call = |title: &str| {
        let args = json!({"title": title}).as_object().cloned().expect("an object");
        CallToolRequestParams::new("tickets-create").with_arguments(args)
    };
    let created = codec::decode(&client.call_tool(call("Printer jam")).await.expect("tools/call")).expect("decodes");
    assert_eq!(expect_ok(&created)["opened_by"], "alice");
    let refused = client.call_tool(call("")).await.expect("tools/call");
    assert_eq!(refused.is_error, Some(true));
    expect_error(&codec::decode(&refused).expect("decodes"), ErrorCode::InvalidInput);
    client.cancel().await.expect("closes");
}

/// "5 creates per minute per user" holds for the user, whatever session header or transport the
/// calls come through: Alice's calls over MCP (streamable HTTP, stateless era) and over the plain
/// HTTP binding under three consumer-header values share one budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_user_gets_five_creates_a_minute_across_sessions_and_transports() {
    use std::sync::Arc;

    use agent_surface::policy::BearerTokens;
    use agent_surface_testing::http;

    let (_clock, service) = tickets();
    // Served as `main` serves it: one authenticator for MCP and the HTTP binding.
    let tokens = BearerTokens::new(vec![("alice-token", Identity::new("alice"))]);
    let running = service.serve().authenticator(Arc::new(tokens)).bind("127.0.0.1:0").await.expect("serves");
    let addr = running.local_addr();

    let over_api = |session: Option<&'static str>, n: u32| async move {
        let mut headers = vec![("Authorization", "Bearer alice-token")];
        headers.extend(session.map(|s| (agent_surface::http::CONSUMER_HEADER, s)));
        let body = json!({"capability": "tickets.create", "input": {"title": format!("Over the API {n}")}});
        let r = http::post_json(addr, "/api/invoke", &headers, &body.to_string()).await;
        agent_surface::http::wire::decode(r.status, &r.body).expect("an invoke result")
    };
    let over_mcp = |n: u32| async move {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "quota", "version": "0"}});
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "tickets-create", "arguments": {"title": format!("Over MCP {n}")}, "_meta": meta}});
        let headers = [
            ("Authorization", "Bearer alice-token"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "tickets-create"),
        ];
        let r = http::post_json(addr, "/mcp", &headers, &body.to_string()).await;
        let message = r.messages().into_iter().find(|m| m.get("result").is_some()).expect("a tools/call result");
        let result = serde_json::from_value(message["result"].clone()).expect("a CallToolResult");
        agent_surface::mcp::codec::decode(&result).expect("an invoke result")
    };

    // Five creates, spread over two transports and three consumer-header values…
    expect_ok(&over_mcp(1).await);
    expect_ok(&over_api(None, 2).await);
    expect_ok(&over_api(Some("s2"), 3).await);
    expect_ok(&over_api(Some("s3"), 4).await);
    expect_ok(&over_mcp(5).await);
    // … and the sixth is refused on every one of them, a new header value included.
    for refused in [over_api(None, 6).await, over_api(Some("s4"), 7).await, over_mcp(8).await] {
        let limited = expect_error(&refused, ErrorCode::RateLimited);
        expect_details(limited, json!({"reason": "rate"}));
    }
    running.stop();
    running.stopped().await.expect("drains");
}

/// The guide's wiring is consistent: one clock everywhere, nothing shared between replicas that
/// something else keeps per process (`Registry::wiring_warnings` is empty).
#[test]
fn the_guides_wiring_has_nothing_to_report() {
    let (_clock, service) = tickets();
    assert_eq!(service.registry.wiring_warnings(), []);
}

/// The service lint (docs/testing.md, "Service lint"): every tickets capability has an authority
/// rule, converts whole to every provider, declares its output and describes its input. An admin
/// is linted too, though under these policies nothing is hidden from anyone.
#[tokio::test]
async fn the_service_passes_the_lint() {
    use agent_surface_testing::{ServiceLint, assert_service};
    use agent_surface_toolset::{Provider, lossy_conversions};

    let (_clock, service) = tickets();
    let admin = Consumer::authenticated("lint", Identity::new("root").with_role("admin"));
    let lint = ServiceLint::new().providers(Provider::ALL, lossy_conversions).seen_by(admin);
    assert_service(&service.registry, &lint).await;
}
