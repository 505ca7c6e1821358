//! `tickets --stdio USER[:ROLE,…]` serves the tickets over MCP on standard input and output, as
//! that user; `tickets --http ADDR` serves MCP at `/mcp` and the plain HTTP binding at `/api`,
//! with the demo bearer tokens of [`tokens`]; `tickets --http ADDR --redis URL …` runs a replica
//! (`production.rs`). See `docs/guide.md`.

use std::sync::Arc;

use agent_surface::policy::{BearerTokens, Identity, SystemClock};
use agent_surface_example_tickets::{production, service};

// guide:begin tokens
/// Bearer tokens and who they stand for (a real service verifies OAuth tokens instead; see
/// `agent_surface::oauth`).
fn tokens() -> Vec<(&'static str, Identity)> {
    vec![
        ("alice-token", Identity::new("alice")),
        ("bob-token", Identity::new("bob").with_role("agent")),
        ("root-token", Identity::new("root").with_role("admin")),
        ("maria-token", Identity::new("maria").with_role("approver")),
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let ["--http", addr, ref options @ ..] = args[..]
        && !options.is_empty()
    {
        // Part 2: one replica of several, on Redis (`production.rs`).
        return production::replica(addr, &production::Options::parse(options)?).await;
    }
    let service = service(Arc::new(SystemClock)).map_err(|e| e.to_string())?;
    let served = match args[..] {
        // One person started this process: every call is theirs.
        ["--stdio", user] => service.serve().stdio(Some(identity(user))).await,
        // Each request says who it is; Ctrl-C or SIGTERM drains the calls in flight.
        ["--http", addr] => service.serve().authenticator(Arc::new(BearerTokens::new(tokens()))).http(addr).await,
        _ => return Err(format!("usage: tickets --stdio USER[:ROLE,…] | tickets --http ADDR | {}", production::USAGE)),
    };
    served.map_err(|e| e.to_string())
}
// guide:end main
