//! `agent-surface-demo`: an orders and refunds shop served over MCP, and a scripted agent session
//! against it.
//!
//! ```text
//! agent-surface-demo                                   run the scripted agent session
//! agent-surface-demo serve --stdio [--as WHO] [--conformance]   serve the shop on stdin/stdout
//! agent-surface-demo serve --http ADDR [--as WHO] [--token TOKEN=WHO]... [--conformance]
//!                          [--redis URL [--redis-prefix PREFIX] [--lease-ms MS]] [--state-key HEX] [--ticket-delay-ms MS]
//!                          [--max-connections-per-ip N]
//!                          [--oauth-jwks FILE --oauth-issuer URL... [--oauth-resource URL] [--oauth-scope SCOPE]...]
//! agent-surface-demo call CAPABILITY [--input JSON] [--json] [--as WHO] [--target INSTANCE]
//! ```
//!
//! `WHO` is `SUBJECT` or `SUBJECT:ROLE,ROLE` (e.g. `alice:support`). `--conformance` also serves
//! the fixture tools the MCP conformance suite expects. See `docs/mcp.md`. `call` invokes one capability
//! in process; its exit status maps from the code (see `cli.rs` and `docs/http.md`).

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line program reports on the terminal")]

mod cli;
mod conformance;
mod data;
mod policy;
mod session;
mod shop;

use std::process::ExitCode;
use std::sync::Arc;

use agent_surface_mcp::McpConfig;
use agent_surface_mcp::confirm::EngineResolver;
use agent_surface_mcp::http::{BearerTokens, HttpConfig};
use agent_surface_policy::Identity;

const USAGE: &str = "\
usage:
  agent-surface-demo                          run a scripted agent session against the shop over MCP (stdio)
  agent-surface-demo serve --stdio [--as WHO] [--conformance]
  agent-surface-demo serve --http ADDR [--as WHO] [--token TOKEN=WHO]... [--conformance]
                          [--redis URL [--redis-prefix PREFIX] [--lease-ms MS]] [--state-key HEX]
                          [--ticket-delay-ms MS] [--max-connections-per-ip N]
                          [--oauth-jwks FILE --oauth-issuer URL... [--oauth-resource URL]
                           [--oauth-scope SCOPE]...]
  agent-surface-demo call CAPABILITY [--input JSON] [--json] [--as WHO] [--target INSTANCE]
                          [--invocation-id ID] [--confirmation-id ID]

WHO is SUBJECT or SUBJECT:ROLE,ROLE (e.g. alice:support). Over HTTP, --token makes
`Authorization: Bearer TOKEN` sign in as WHO; --conformance adds the MCP conformance suite's
fixture tools (over stdio too). --redis keeps the shop (its orders), idempotency records,
confirmations, rate budgets and MCP tasks in that Redis under PREFIX (default agent-surface-demo:),
so that several servers (replicas) serve one shop; --lease-ms sets how long a replica that died
mid-call holds that call (default 10000). --state-key HEX (64 hex digits) seals input-required
states with that key, so that any replica takes a retry. --ticket-delay-ms makes tickets-open
take that long (to catch a call in flight). --max-connections-per-ip raises the cap of connections
one peer address may hold (default 128; a load test from one address needs more). ADDR may use port 0; the bound URL is printed on stdout. Over HTTP, the plain
HTTP binding is also served under /api (GET /api/capabilities, POST /api/invoke). --oauth-jwks FILE
makes both an OAuth 2.1 resource server: only JWT access tokens signed by a key of that JWKS, issued by an
--oauth-issuer, for --oauth-resource (default http://ADDR, the bound address) and with every --oauth-scope
are admitted; others get 401/403 with WWW-Authenticate, and the metadata is served at
/.well-known/oauth-protected-resource. `call` runs one capability
of a fresh shop in process: the output (or with --json the raw InvokeResult) on stdout, the exit
status from the error code (0 success, 64 usage/AMBIGUOUS_INSTANCE, 65 input, 69 unavailable,
70 failed, 75 try again later, 77 not permitted, 130 cancelled).";

/// Parsed `serve` options.
#[derive(Debug, Default)]
struct Serve {
    stdio: bool,
    http: Option<String>,
    identity: Option<Identity>,
    tokens: Vec<(String, Identity)>,
    conformance: bool,
    redis: Option<String>,
    redis_prefix: Option<String>,
    lease: Option<std::time::Duration>,
    state_key: Option<Vec<u8>>,
    ticket_delay: Option<std::time::Duration>,
    max_connections_per_ip: Option<usize>,
    oauth: OAuth,
}

/// The `--oauth-*` options: the OAuth 2.1 resource server, on when `jwks` is given.
#[derive(Debug, Default)]
struct OAuth {
    jwks: Option<String>,
    issuers: Vec<String>,
    resource: Option<String>,
    scopes: Vec<String>,
}

/// Milliseconds, for `name`.
fn parse_ms(name: &str, value: &str) -> Result<std::time::Duration, String> {
    value
        .parse()
        .map(std::time::Duration::from_millis)
        .map_err(|_| format!("{name} takes a whole number of milliseconds"))
}

/// A sealing key from 64 hex digits.
fn parse_key(hex: &str) -> Result<Vec<u8>, String> {
    let bad = || "--state-key takes 64 hex digits (32 bytes)".to_string();
    if hex.len() != 64 {
        return Err(bad());
    }
    (0..32).map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())).collect()
}

fn parse_who(who: &str) -> Identity {
    let (subject, roles) = who.split_once(':').unwrap_or((who, ""));
    roles.split(',').filter(|r| !r.is_empty()).fold(Identity::new(subject), Identity::with_role)
}

fn parse_serve(args: &[String]) -> Result<Serve, String> {
    let mut serve = Serve::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--stdio" => serve.stdio = true,
            "--http" => serve.http = Some(value("--http")?),
            "--as" => serve.identity = Some(parse_who(&value("--as")?)),
            "--token" => {
                let v = value("--token")?;
                let (token, who) = v.split_once('=').ok_or("--token takes TOKEN=WHO")?;
                serve.tokens.push((token.to_string(), parse_who(who)));
            }
            "--conformance" => serve.conformance = true,
            "--redis" => serve.redis = Some(value("--redis")?),
            "--redis-prefix" => serve.redis_prefix = Some(value("--redis-prefix")?),
            "--lease-ms" => serve.lease = Some(parse_ms("--lease-ms", &value("--lease-ms")?)?),
            "--ticket-delay-ms" => {
                serve.ticket_delay = Some(parse_ms("--ticket-delay-ms", &value("--ticket-delay-ms")?)?)
            }
            "--max-connections-per-ip" => {
                let n = value("--max-connections-per-ip")?;
                serve.max_connections_per_ip =
                    Some(n.parse().map_err(|_| "--max-connections-per-ip takes a whole number".to_string())?);
            }
            "--state-key" => serve.state_key = Some(parse_key(&value("--state-key")?)?),
            "--oauth-jwks" => serve.oauth.jwks = Some(value("--oauth-jwks")?),
            "--oauth-issuer" => serve.oauth.issuers.push(value("--oauth-issuer")?),
            "--oauth-resource" => serve.oauth.resource = Some(value("--oauth-resource")?),
            "--oauth-scope" => serve.oauth.scopes.push(value("--oauth-scope")?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if serve.stdio == serve.http.is_some() {
        return Err("choose one of --stdio and --http ADDR".to_string());
    }
    if serve.redis.is_none() && (serve.redis_prefix.is_some() || serve.lease.is_some()) {
        return Err("--redis-prefix and --lease-ms need --redis URL".to_string());
    }
    let oauth = &serve.oauth;
    let other_oauth = !oauth.issuers.is_empty() || oauth.resource.is_some() || !oauth.scopes.is_empty();
    match (&oauth.jwks, other_oauth) {
        (None, true) => return Err("--oauth-issuer, --oauth-resource and --oauth-scope need --oauth-jwks FILE".into()),
        (Some(_), _) if oauth.issuers.is_empty() => return Err("--oauth-jwks needs --oauth-issuer URL".into()),
        (Some(_), _) if serve.stdio || !serve.tokens.is_empty() => {
            return Err("--oauth-jwks is for --http, without --token".into());
        }
        _ => {}
    }
    Ok(serve)
}

fn init_operator_log() {
    // The operator channel: warnings and errors (causes, panics) on stderr, never on stdout,
    // which belongs to the MCP transport.
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(tracing::Level::WARN).try_init();
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(target: "agent_surface::demo", "panic: {info}");
    }));
}

/// The CLI's operator channel: stderr carries the agent-facing error, so causes and panic text
/// (which may hold internals) go to the file named by `AGENT_SURFACE_DEMO_OPERATOR_LOG`, or
/// nowhere.
fn init_cli_operator_log() {
    if let Some(path) = std::env::var_os("AGENT_SURFACE_DEMO_OPERATOR_LOG")
        && let Ok(file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .try_init();
    }
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(target: "agent_surface::demo", "panic: {info}");
    }));
}

async fn serve(options: Serve) -> Result<(), String> {
    init_operator_log();
    let mut shop_options = shop::ShopOptions::default();
    if let Some(delay) = options.ticket_delay {
        shop_options.ticket_delay = delay;
    }
    let mut task_config = agent_surface_mcp::tasks::TaskConfig::default();
    let demo = match &options.redis {
        None => shop::build(shop_options),
        Some(url) => {
            // Replicas share everything: the shop's orders, idempotency records, confirmations,
            // rate budgets and tasks.
            let mut config = agent_surface_redis::RedisConfig::with_prefix(
                options.redis_prefix.clone().unwrap_or_else(|| "agent-surface-demo:".to_string()),
            );
            if let Some(lease) = options.lease {
                config.lease = lease;
            }
            let redis = agent_surface_redis::RedisStores::connect(url, config).await.map_err(|e| e.to_string())?;
            shop_options.confirmations = Some(Arc::new(redis.confirmations()));
            shop_options.idempotency = Some(Arc::new(redis.idempotency()));
            shop_options.rate_limiter = Some(Arc::new(shop::shared_quote_limiter(&redis, shop_options.quote_refill)));
            task_config.store = Arc::new(redis.tasks());
            let data = data::Data::shared(redis.connection(), &redis.config().prefix, shop::seed_orders()).await?;
            shop::build_with(shop_options, data)
        }
    };
    let _fixtures = match options.conformance {
        true => Some(conformance::define(&demo.registry).map_err(|e| e.to_string())?),
        false => None,
    };
    let mut config = McpConfig {
        name: "agent-surface-demo".to_string(),
        instructions: Some(
            "A small shop. Every tool error is JSON {code, message, retry, details}: act on `retry`.".to_string(),
        ),
        confirmations: Some(Arc::new(EngineResolver::new(demo.confirmations.clone()))),
        tasks: Some(agent_surface_mcp::tasks::Tasks::new(task_config)),
        identity: options.identity,
        ..Default::default()
    };
    if let Some(key) = options.state_key {
        // Replicas that may take each other's retries seal with one key.
        let codec =
            rmcp::model::RequestStateCodec::new_with_keyring("demo", [("demo", key)]).map_err(|e| e.to_string())?;
        config.approval_states = agent_surface_mcp::mrtr::ApprovalStates::new(codec);
    }
    if options.stdio {
        if options.conformance {
            let (read, write) = rmcp::transport::stdio_pipes();
            let max = config.max_message_bytes;
            let server = conformance::ConformanceServer::new(demo.registry.clone(), Arc::new(config));
            return agent_surface_mcp::serve_io(server, read, write, max).await.map_err(|e| e.to_string());
        }
        return agent_surface_mcp::serve_stdio(demo.registry.clone(), config).await.map_err(|e| e.to_string());
    }
    // The plain HTTP binding (`agent-surface-http`) under `/api`, next to MCP, with the same tokens.
    let mut api = agent_surface_http::HttpConfig::default();
    if !options.tokens.is_empty() {
        api.authenticator = Some(Arc::new(agent_surface_http::BearerTokens::new(options.tokens.clone())));
        config.authenticator = Some(Arc::new(BearerTokens::new(options.tokens)));
    }
    let addr = options.http.unwrap_or_default();
    let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // The OAuth resource server guards both transports; its metadata is served at the root.
    let oauth = match options.oauth.jwks {
        None => None,
        Some(path) => {
            let jwks = agent_surface_oauth::Jwks::from_file(&path).map_err(|e| format!("--oauth-jwks {path}: {e}"))?;
            let server = agent_surface_oauth::ResourceServer::new(agent_surface_oauth::ResourceServerConfig {
                resource: options.oauth.resource.unwrap_or_else(|| format!("http://{local}")),
                authorization_servers: options.oauth.issuers,
                required_scopes: options.oauth.scopes,
                jwks,
                ..Default::default()
            })
            .map_err(|e| format!("--oauth-*: {e}"))?;
            let server = Arc::new(server);
            api.authenticator = Some(server.clone());
            config.authenticator = Some(server.clone());
            Some(server)
        }
    };
    let mut http = HttpConfig::default();
    if let Some(n) = options.max_connections_per_ip {
        http.limits.max_connections_per_ip = n;
        http.limits.max_connections = http.limits.max_connections.max(n);
    }
    println!("listening on http://{local}{}", http.path);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    let app = if options.conformance {
        conformance::router(demo.registry.clone(), config, &http, shutdown.clone())
    } else {
        agent_surface_mcp::http::router(demo.registry.clone(), config, &http, shutdown.clone())
    };
    let app = app.nest("/api", agent_surface_http::router(demo.registry.clone(), api));
    let app = match oauth {
        Some(oauth) => app.merge(oauth.metadata_router()),
        None => app,
    };
    agent_surface_server::serve(listener, app, http.limits.clone(), shutdown).await.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.first().map(String::as_str) == Some("call") {
        init_cli_operator_log();
        return match cli::parse(&args[1..], parse_who) {
            Ok(call) => ExitCode::from(runtime.block_on(cli::run(call))),
            Err(e) => {
                eprintln!("error: {e}\n\n{USAGE}");
                ExitCode::from(cli::EX_USAGE)
            }
        };
    }
    let result = match args.first().map(String::as_str) {
        None => runtime.block_on(session::run()),
        Some("serve") => match parse_serve(&args[1..]) {
            Ok(options) => runtime.block_on(serve(options)),
            Err(e) => Err(format!("{e}\n\n{USAGE}")),
        },
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other}\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
