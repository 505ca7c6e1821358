//! `tickets --stdio USER[:ROLE,…]` serves the tickets over MCP on standard input and output, as
//! that user; `tickets --http ADDR` serves MCP at `/mcp` and the plain HTTP binding at `/api`,
//! with the demo bearer tokens of [`tokens`]. See `docs/guide.md`.

use std::sync::Arc;

use agent_surface_example_tickets::service;
use agent_surface_http::HttpConfig;
use agent_surface_mcp::{McpConfig, confirm::EngineResolver, http::McpHttpConfig};
use agent_surface_policy::{BearerTokens, Identity, SystemClock};

// guide:begin tokens
/// Bearer tokens and who they stand for (a real service verifies OAuth tokens instead; see
/// `agent-surface-oauth`).
fn tokens() -> Vec<(&'static str, Identity)> {
    vec![
        ("alice-token", Identity::new("alice")),
        ("bob-token", Identity::new("bob").with_role("agent")),
        ("root-token", Identity::new("root").with_role("admin")),
    ]
}
// guide:end tokens

/// `USER[:ROLE,ROLE]` as an identity.
fn identity(arg: &str) -> Identity {
    let (user, roles) = arg.split_once(':').unwrap_or((arg, ""));
    roles.split(',').filter(|r| !r.is_empty()).fold(Identity::new(user), Identity::with_role)
}

// guide:begin main
#[tokio::main]
async fn main() -> Result<(), String> {
    // The operator log, on stderr: `RUST_LOG` (default `warn`), `AGENT_SURFACE_LOG_FORMAT=json`,
    // panics included; credentials in causes are masked before they are written.
    agent_surface_registry::operator_log::init().map_err(|e| e.to_string())?;
    // guide:end main
    let args: Vec<String> = std::env::args().skip(1).collect();
    let service = service(Arc::new(SystemClock)).map_err(|e| e.to_string())?;
    // Approvals asked through MCP elicitation are recorded in the service's engine.
    let resolver = Arc::new(EngineResolver::new(service.confirmations.clone()));
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        // guide:begin stdio
        ["--stdio", user] => {
            // One person started this process: every call is theirs.
            let config =
                McpConfig { identity: Some(identity(user)), confirmations: Some(resolver), ..Default::default() };
            agent_surface_mcp::serve_stdio(service.registry.clone(), config).await.map_err(|e| e.to_string())
        }
        // guide:end stdio
        // guide:begin http
        ["--http", addr] => {
            let config = McpConfig {
                authenticator: Some(Arc::new(BearerTokens::new(tokens()))),
                confirmations: Some(resolver),
                ..Default::default()
            };
            let api = HttpConfig { authenticator: Some(Arc::new(BearerTokens::new(tokens()))), ..Default::default() };
            let http = McpHttpConfig::default();
            let drain = agent_surface_server::Drain::cancelling({
                let registry = service.registry.clone();
                move || registry.dispose()
            });
            let app = agent_surface_mcp::http::router(service.registry.clone(), config, &http, drain.streams.clone())
                .nest("/api", agent_surface_http::router(service.registry.clone(), api));
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| e.to_string())?;
            let stop = tokio_util::sync::CancellationToken::new();
            tokio::spawn({
                let stop = stop.clone();
                async move {
                    let _ = tokio::signal::ctrl_c().await;
                    stop.cancel();
                }
            });
            agent_surface_server::serve_with(listener, app, http.limits, stop, drain).await.map_err(|e| e.to_string())
        }
        // guide:end http
        _ => Err("usage: tickets --stdio USER[:ROLE,…] | tickets --http ADDR".to_string()),
    }
}
