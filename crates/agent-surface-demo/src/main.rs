//! `agent-surface-demo`: an orders and refunds shop served over MCP, and a scripted agent session
//! against it.
//!
//! ```text
//! agent-surface-demo                                   run the scripted agent session
//! agent-surface-demo serve --stdio [--as WHO] [--conformance] [--drain-ms MS] [--data DIR | --memory]
//!                                                          serve the shop on stdin/stdout
//! agent-surface-demo serve --http ADDR [--as WHO] [--token TOKEN=WHO]... [--conformance] [--drain-ms MS]
//!                          [--data DIR | --memory | --redis URL [--redis-prefix PREFIX] [--lease-ms MS] [--redis-timeout-ms MS]
//!                           | --postgres URL [--postgres-schema SCHEMA] [--lease-ms MS] [--postgres-timeout-ms MS]]
//!                          [--state-key HEX] [--ticket-delay-ms MS] [--task-lease-ms MS]
//!                          [--max-connections-per-ip N] [--allowed-host HOST]... [--quorum CAPABILITY=N]...
//!                          [--public-url URL]
//!                          [--oauth-jwks FILE --oauth-issuer URL... [--oauth-resource URL] [--oauth-scope SCOPE]...]
//! agent-surface-demo call CAPABILITY [--input JSON] [--json] [--as WHO] [--target INSTANCE]
//! ```
//!
//! `WHO` is `SUBJECT` or `SUBJECT:ROLE,ROLE` (e.g. `alice:support`). `--conformance` also serves
//! the fixture tools the MCP conformance suite expects. See `docs/mcp.md`. `call` invokes one capability
//! in process; its exit status maps from the code (see `cli.rs` and `docs/http.md`).
//!
//! The operator log (`agent_surface_registry::operator_log`) honours `RUST_LOG` and
//! `AGENT_SURFACE_LOG_FORMAT=json`; SIGTERM and Ctrl-C drain a server before it exits
//! (`shutdown.rs`). See `docs/operations.md`.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line program reports on the terminal")]

mod cli;
mod conformance;
mod data;
mod library;
mod orders;
mod policy;
mod session;
mod shop;
mod shutdown;
mod web;

use std::process::ExitCode;
use std::sync::Arc;

use agent_surface_mcp::McpConfig;
use agent_surface_mcp::confirm::EngineResolver;
use agent_surface_mcp::http::{BearerTokens, McpHttpConfig};
use agent_surface_policy::Identity;
use agent_surface_registry::operator_log;

const USAGE: &str = "\
usage:
  agent-surface-demo                          run a scripted agent session against the shop over MCP (stdio)
  agent-surface-demo serve --stdio [--as WHO] [--conformance] [--drain-ms MS] [--data DIR | --memory]
  agent-surface-demo serve --http ADDR [--as WHO] [--token TOKEN=WHO]... [--conformance] [--drain-ms MS]
                          [--data DIR | --memory | --redis URL [--redis-prefix PREFIX] [--lease-ms MS] [--redis-timeout-ms MS]
                           | --postgres URL [--postgres-schema SCHEMA] [--lease-ms MS] [--postgres-timeout-ms MS]]
                          [--state-key HEX] [--ticket-delay-ms MS] [--task-lease-ms MS]
                          [--max-connections-per-ip N] [--allowed-host HOST]...
                          [--quorum CAPABILITY=N]... [--public-url URL]
                          [--oauth-jwks FILE --oauth-issuer URL... [--oauth-resource URL]
                           [--oauth-scope SCOPE]...]
  agent-surface-demo call CAPABILITY [--input JSON] [--json] [--as WHO] [--target INSTANCE]
                          [--invocation-id ID] [--confirmation-id ID]

WHO is SUBJECT or SUBJECT:ROLE,ROLE (e.g. alice:support). Over HTTP, --token makes
`Authorization: Bearer TOKEN` sign in as WHO; --conformance adds the MCP conformance suite's
fixture tools (over stdio too). --data DIR keeps the shop (its orders, tickets and refunds), idempotency records,
confirmations, rate budgets, MCP tasks and the audit trail in DIR/agent-surface.db, synced to disk
before each answer, so that a restart (or a kill -9) loses nothing answered; one server per DIR.
Without --data, --memory or --redis, DIR is ./agent-surface-data (created when missing; the path is
printed on stderr at start). --memory keeps them in the process, lost when it ends. --redis keeps the shop (its orders, tickets and refunds), idempotency records,
confirmations, rate budgets and MCP tasks in that Redis under PREFIX (default agent-surface-demo:),
so that several servers (replicas) serve one shop; --lease-ms sets how long a replica that died
mid-call holds that call (default 10000); --redis-timeout-ms is the time budget of one Redis
operation, past which the call fails closed (default 2000). --postgres keeps the same in that PostgreSQL
database, the stores in the schema SCHEMA (default agent_surface_demo) and the shop in SCHEMA_shop, so that
replicas serve one shop; --lease-ms as for Redis; --postgres-timeout-ms is the time budget of one store
operation (default 2000). --state-key HEX (64 hex digits) seals input-required
states with that key, so that any replica takes a retry. --ticket-delay-ms makes tickets-open
take that long (to catch a call in flight). --task-lease-ms sets how long an MCP task whose
server died is held before any server sharing its store ends it with an unknown outcome
(default 30000). --max-connections-per-ip raises the cap of connections
one peer address may hold (default 128; a load test from one address needs more). ADDR may use port 0; the bound URL is printed on stdout. Over HTTP, the plain
HTTP binding is also served under /api (GET /api/capabilities, POST /api/invoke, GET /api/metrics:
Prometheus text), and, when tokens sign people in (--token or --oauth-jwks), the approval inbox
under /inbox/: a person whose identity has the approver role (e.g. --token t-maria=maria:approver)
signs in there with their token, and approves or denies the confirmations others' calls wait for;
--quorum CAPABILITY=N (repeatable) makes a call of CAPABILITY wait for N distinct approvers
(e.g. --quorum orders.cancel=2). A call that waits for an approval answers CONFIRMATION_REQUIRED
with details.approvalUrl, its page in the inbox: under --public-url URL (the address people reach
the server at, e.g. behind a proxy; its host is admitted), or by default under the bound address
when that is a loopback one (a server bound elsewhere without --public-url sends no URL, as it
cannot know its public name). Requests must name a loopback host (DNS-rebinding protection) or one given with
--allowed-host (repeatable; the host of --oauth-resource is admitted too). --oauth-jwks FILE
makes both an OAuth 2.1 resource server: only JWT access tokens signed by a key of that JWKS, issued by an
--oauth-issuer, for --oauth-resource (default http://ADDR, the bound address) and with every --oauth-scope
are admitted; others get 401/403 with WWW-Authenticate, and the metadata is served at
/.well-known/oauth-protected-resource. `call` runs one capability
of a fresh shop in process: the output (or with --json the raw InvokeResult) on stdout, the exit
status from the error code (0 success, 64 usage/AMBIGUOUS_INSTANCE, 65 input, 69 unavailable,
70 failed, 75 try again later, 77 not permitted, 130 cancelled).

Shutdown: on SIGTERM or Ctrl-C, serve stops taking requests, lets the calls in flight finish for
up to --drain-ms (default 10000), cancels the rest (a write whose handler started ends
EXECUTION_FAILED outcome-unknown) and exits 0; a second signal cuts the drain short.

Operator log: on stderr (stdout is the MCP transport's), or for call in the file named by
AGENT_SURFACE_DEMO_OPERATOR_LOG. RUST_LOG filters it (default warn; e.g.
RUST_LOG=agent_surface=debug shows every call, RUST_LOG=info,agent_surface::auth=debug);
AGENT_SURFACE_LOG_FORMAT=json writes one JSON object per line (default text).";

/// Parsed `serve` options.
#[derive(Debug, Default)]
struct Serve {
    stdio: bool,
    http: Option<String>,
    identity: Option<Identity>,
    tokens: Vec<(String, Identity)>,
    conformance: bool,
    /// Where the state is kept on disk (`--data DIR`; [`DEFAULT_DATA_DIR`] when no store is
    /// chosen).
    data: Option<std::path::PathBuf>,
    /// The state in this process (`--memory`).
    memory: bool,
    redis: Option<String>,
    redis_prefix: Option<String>,
    lease: Option<std::time::Duration>,
    /// The time budget of one Redis operation (`--redis-timeout-ms`).
    redis_timeout: Option<std::time::Duration>,
    /// The PostgreSQL database of the state (`--postgres URL`).
    postgres: Option<String>,
    /// The schema of the stores (`--postgres-schema`).
    postgres_schema: Option<String>,
    /// The time budget of one PostgreSQL store operation (`--postgres-timeout-ms`).
    postgres_timeout: Option<std::time::Duration>,
    state_key: Option<Vec<u8>>,
    ticket_delay: Option<std::time::Duration>,
    /// How long a running MCP task is held without a renewal (`--task-lease-ms`).
    task_lease: Option<std::time::Duration>,
    max_connections_per_ip: Option<usize>,
    /// Host names admitted besides loopback (`--allowed-host`).
    allowed_hosts: Vec<String>,
    oauth: OAuth,
    /// How long in-flight calls may take to finish on shutdown (`--drain-ms`).
    drain: Option<std::time::Duration>,
    /// Capabilities that need several approvers (`--quorum CAPABILITY=N`).
    quorums: Vec<(String, u32)>,
    /// Where people reach the server (`--public-url`), without a trailing `/`.
    public_url: Option<String>,
}

/// Where `serve` keeps its state when no store is chosen (`--data`, `--memory`, `--redis`): a
/// folder of the working directory. Durable by default, since a restart of the one process that
/// serves a small deployment must not lose a pending approval, a stored result or a task; a folder
/// next to where the server was started rather than a per-user state directory, so that it is
/// seen, found and removed without knowing the platform's conventions (the path is printed at
/// start), and two checkouts never share one shop by accident.
const DEFAULT_DATA_DIR: &str = "agent-surface-data";

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

/// The key that seals MCP approval rounds for a server whose confirmations outlive it on disk:
/// `DIR/state.key` (64 hex digits), drawn at random and written (mode 0600) the first time.
/// Confirmations kept across a restart would otherwise meet approval rounds sealed with a key the
/// restart lost: an approval begun before it could not be answered after.
fn state_key_in(dir: &std::path::Path) -> Result<Vec<u8>, String> {
    let path = dir.join("state.key");
    match std::fs::read_to_string(&path) {
        Ok(text) => agent_surface_core::hex::decode::<32>(text.trim()).map(|key| key.to_vec()).ok_or_else(|| {
            format!(
                "{} does not hold 64 hex digits; remove it to draw a new key (approval rounds in progress then start again)",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (a, b) = (agent_surface_core::id::random_bytes(), agent_surface_core::id::random_bytes());
            let key: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            let mut file = std::fs::OpenOptions::new();
            file.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
            let mut file = file.open(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            std::io::Write::write_all(&mut file, format!("{}\n", agent_surface_core::hex::Hex(&key)).as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// A sealing key from 64 hex digits.
fn parse_key(hex: &str) -> Result<Vec<u8>, String> {
    agent_surface_core::hex::decode::<32>(hex)
        .map(|key| key.to_vec())
        .ok_or_else(|| "--state-key takes 64 hex digits (32 bytes)".to_string())
}

/// A `--public-url`: `http` or `https`, a host, no query or fragment; kept without trailing `/`s.
fn parse_public_url(url: &str) -> Result<String, String> {
    let problem = || format!("--public-url takes an http(s) URL with a host and no query (got {url:?})");
    let uri: axum::http::Uri = url.parse().map_err(|_| problem())?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let host_ok = uri.host().is_some_and(|h| !h.is_empty());
    if !scheme_ok || !host_ok || uri.query().is_some() || url.contains('#') {
        return Err(problem());
    }
    Ok(url.trim_end_matches('/').to_string())
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
            "--data" => serve.data = Some(value("--data")?.into()),
            "--memory" => serve.memory = true,
            "--redis" => serve.redis = Some(value("--redis")?),
            "--redis-prefix" => serve.redis_prefix = Some(value("--redis-prefix")?),
            "--lease-ms" => serve.lease = Some(parse_ms("--lease-ms", &value("--lease-ms")?)?),
            "--redis-timeout-ms" => {
                let timeout = parse_ms("--redis-timeout-ms", &value("--redis-timeout-ms")?)?;
                if timeout.is_zero() {
                    return Err("--redis-timeout-ms must be positive".to_string());
                }
                serve.redis_timeout = Some(timeout);
            }
            "--postgres" => serve.postgres = Some(value("--postgres")?),
            "--postgres-schema" => serve.postgres_schema = Some(value("--postgres-schema")?),
            "--postgres-timeout-ms" => {
                let timeout = parse_ms("--postgres-timeout-ms", &value("--postgres-timeout-ms")?)?;
                if timeout.is_zero() {
                    return Err("--postgres-timeout-ms must be positive".to_string());
                }
                serve.postgres_timeout = Some(timeout);
            }
            "--ticket-delay-ms" => {
                serve.ticket_delay = Some(parse_ms("--ticket-delay-ms", &value("--ticket-delay-ms")?)?)
            }
            "--task-lease-ms" => {
                let lease = parse_ms("--task-lease-ms", &value("--task-lease-ms")?)?;
                if lease.is_zero() {
                    return Err("--task-lease-ms must be positive".to_string());
                }
                serve.task_lease = Some(lease);
            }
            "--allowed-host" => serve.allowed_hosts.push(value("--allowed-host")?),
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
            "--drain-ms" => serve.drain = Some(parse_ms("--drain-ms", &value("--drain-ms")?)?),
            "--quorum" => {
                let v = value("--quorum")?;
                let quorum = v.split_once('=').and_then(|(c, n)| Some((c.to_string(), n.parse::<u32>().ok()?)));
                match quorum {
                    Some((capability, n)) if (1..=agent_surface_policy::confirmation::MAX_QUORUM).contains(&n) => {
                        serve.quorums.push((capability, n))
                    }
                    _ => {
                        return Err(format!(
                            "--quorum takes CAPABILITY=N, N from 1 to {}",
                            agent_surface_policy::confirmation::MAX_QUORUM
                        ));
                    }
                }
            }
            "--public-url" => serve.public_url = Some(parse_public_url(&value("--public-url")?)?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if serve.stdio == serve.http.is_some() {
        return Err("choose one of --stdio and --http ADDR".to_string());
    }
    let chosen = [serve.data.is_some(), serve.memory, serve.redis.is_some(), serve.postgres.is_some()];
    match chosen.iter().filter(|chosen| **chosen).count() {
        0 => serve.data = Some(DEFAULT_DATA_DIR.into()),
        1 => {}
        _ => return Err("choose one of --data DIR, --memory, --redis URL and --postgres URL".to_string()),
    }
    if serve.redis.is_none() && (serve.redis_prefix.is_some() || serve.redis_timeout.is_some()) {
        return Err("--redis-prefix and --redis-timeout-ms need --redis URL".to_string());
    }
    if serve.postgres.is_none() && (serve.postgres_schema.is_some() || serve.postgres_timeout.is_some()) {
        return Err("--postgres-schema and --postgres-timeout-ms need --postgres URL".to_string());
    }
    if serve.lease.is_some() && serve.redis.is_none() && serve.postgres.is_none() {
        return Err("--lease-ms needs --redis URL or --postgres URL".to_string());
    }
    if serve.public_url.is_some() && serve.http.is_none() {
        return Err("--public-url is for --http".to_string());
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

/// The CLI's operator channel: stderr carries the agent-facing error, so causes and panic text
/// (which may hold internals) go to the file named by `AGENT_SURFACE_DEMO_OPERATOR_LOG`, or
/// nowhere.
fn init_cli_operator_log() {
    match std::env::var_os("AGENT_SURFACE_DEMO_OPERATOR_LOG")
        .and_then(|path| std::fs::OpenOptions::new().create(true).append(true).open(path).ok())
    {
        // The demo installs no other subscriber: this one is the first.
        Some(file) => drop(operator_log::init_with_writer(std::sync::Mutex::new(file))),
        // No log: a panic must not print its text on stderr either.
        None => std::panic::set_hook(Box::new(|_| {})),
    }
}

async fn serve(mut options: Serve) -> Result<(), String> {
    // stderr: stdout is the MCP stdio transport's. The demo installs no other subscriber.
    drop(operator_log::init());
    // Replicas on a shared store take each other's retries, an MCP approval round's too: they
    // must seal those rounds with one key, which no replica can draw alone. (The demo wires the
    // MCP adapter itself; `Serve` in the `agent-surface` crate, given no key, keeps one in the
    // shared store instead.)
    if (options.redis.is_some() || options.postgres.is_some()) && options.state_key.is_none() {
        return Err("--redis and --postgres need --state-key HEX (64 hex digits, the same on every replica, e.g. from                     `openssl rand -hex 32`): replicas seal MCP approval rounds with one key"
            .to_string());
    }
    let drain = options.drain.unwrap_or(shutdown::DEFAULT_DRAIN);
    let mut shop_options = shop::ShopOptions::default();
    // Over HTTP the registry records metrics into a Prometheus recorder, served at `/metrics`.
    let prometheus = match options.http {
        Some(_) => Some(
            metrics_exporter_prometheus::PrometheusBuilder::new()
                // Histograms (buckets aggregate across replicas; the exporter's default is a summary).
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full("agent_surface_call_duration_seconds".into()),
                    &[
                        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0, 10.0,
                    ],
                )
                .map_err(|e| format!("cannot configure the metrics recorder: {e}"))?
                .install_recorder()
                .map_err(|e| format!("cannot install the metrics recorder: {e}"))?,
        ),
        None => None,
    };
    shop_options.metrics = prometheus.is_some();
    if let Some(delay) = options.ticket_delay {
        shop_options.ticket_delay = delay;
    }
    shop_options.quorums = options.quorums.clone();
    shop_options.conformance = options.conformance;
    // Before anything says it serves: a signal from then on drains (`shutdown::Signals`).
    let signals = shutdown::Signals::install();
    // Over HTTP the listener is bound first: the approval URLs may name its address.
    let listener = match &options.http {
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            Some((listener, local))
        }
        None => None,
    };
    let inbox_served = !options.tokens.is_empty() || options.oauth.jwks.is_some();
    if let (Some((_, local)), true) = (&listener, inbox_served) {
        let public = options.public_url.clone().or_else(|| local.ip().is_loopback().then(|| format!("http://{local}")));
        shop_options.approval_base_url = public.map(|url| format!("{url}/inbox/c/"));
    }
    let mut task_config = agent_surface_mcp::tasks::TaskConfig::default();
    if let Some(lease) = options.task_lease {
        task_config.lease = lease;
    }
    // Where the approval inbox keeps its sessions: the backend the other stores use (so that
    // replicas on Redis or PostgreSQL serve each other's sessions, and a restart on the data
    // folder keeps them); in memory with --memory.
    let mut inbox_store: Arc<dyn agent_surface_policy::inbox::InboxStore> =
        Arc::new(agent_surface_policy::inbox::MemoryInboxStore::default());
    let demo = match &options.redis {
        None if options.postgres.is_some() => {
            // Replicas share everything, durably: the shop's orders, idempotency records,
            // confirmations, rate budgets, tasks and the audit trail.
            let url = options.postgres.as_deref().unwrap_or_default();
            let schema = options.postgres_schema.clone().unwrap_or_else(|| "agent_surface_demo".to_string());
            let mut config = agent_surface_postgres::PostgresConfig::with_schema(schema.clone());
            if let Some(lease) = options.lease {
                config.lease = lease;
                config.in_flight_retention = config.in_flight_retention.max(lease * 2);
            }
            if let Some(timeout) = options.postgres_timeout {
                config.op_timeout = timeout;
            }
            let pg = agent_surface_postgres::PostgresStores::connect(url, config).await.map_err(|e| e.to_string())?;
            shop_options.confirmations = Some(Arc::new(pg.confirmations()));
            shop_options.idempotency = Some(Arc::new(pg.idempotency()));
            shop_options.rate_limiter =
                Some(Arc::new(pg.rate_limiter(policy::quote_budget(shop_options.quote_refill))));
            task_config.store = Arc::new(pg.tasks());
            shop_options.audit = Some(Arc::new(pg.audit()));
            inbox_store = Arc::new(pg.inbox());
            let data =
                data::Data::postgres(pg.pool().clone(), &format!("{schema}_shop"), orders::seed_orders()).await?;
            shop::build_with(shop_options, data)
        }
        None if options.data.is_some() => {
            let dir = options.data.as_deref().unwrap_or(std::path::Path::new(DEFAULT_DATA_DIR));
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the data folder {}: {e}", dir.display()))?;
            if options.state_key.is_none() {
                options.state_key = Some(state_key_in(dir)?);
            }
            let file = dir.join("agent-surface.db");
            let config = agent_surface_sqlite::SqliteConfig::default();
            let stores = agent_surface_sqlite::SqliteStores::open(&file, config).await.map_err(|e| e.to_string())?;
            let shown = std::fs::canonicalize(dir).map_or_else(|_| file.clone(), |d| d.join("agent-surface.db"));
            eprintln!("state in {} (synced before each answer; --memory keeps it in the process)", shown.display());
            shop_options.confirmations = Some(Arc::new(stores.confirmations()));
            shop_options.idempotency = Some(Arc::new(stores.idempotency()));
            let budgets = policy::quote_budget(shop_options.quote_refill);
            shop_options.rate_limiter =
                Some(Arc::new(stores.rate_limiter(budgets, Arc::new(agent_surface_policy::SystemClock))));
            task_config.store = Arc::new(stores.tasks());
            shop_options.audit = Some(Arc::new(stores.audit()));
            inbox_store = Arc::new(stores.inbox());
            let data = data::Data::durable(stores, orders::seed_orders()).await?;
            shop::build_with(shop_options, data)
        }
        None => {
            // Over HTTP the approval inbox shows the recent decisions from the audit trail.
            if options.http.is_some() {
                let sink = agent_surface_policy::MemoryAuditSink::new(Default::default());
                shop_options.audit = Some(Arc::new(sink));
            }
            shop::build(shop_options)
        }
        Some(url) => {
            // Replicas share everything: the shop's orders, idempotency records, confirmations,
            // rate budgets and tasks.
            let mut config = agent_surface_redis::RedisConfig::with_prefix(
                options.redis_prefix.clone().unwrap_or_else(|| "agent-surface-demo:".to_string()),
            );
            if let Some(lease) = options.lease {
                config.lease = lease;
            }
            if let Some(timeout) = options.redis_timeout {
                config.op_timeout = timeout;
            }
            let redis = agent_surface_redis::RedisStores::connect(url, config).await.map_err(|e| e.to_string())?;
            shop_options.confirmations = Some(Arc::new(redis.confirmations()));
            shop_options.idempotency = Some(Arc::new(redis.idempotency()));
            shop_options.rate_limiter = Some(Arc::new(shop::shared_quote_limiter(&redis, shop_options.quote_refill)));
            task_config.store = Arc::new(redis.tasks());
            // One trail for the replicas: either one's inbox shows the decisions given through the other.
            shop_options.audit = Some(Arc::new(redis.audit()));
            inbox_store = Arc::new(redis.inbox());
            let data = data::Data::shared(redis.connection(), &redis.config().prefix, orders::seed_orders()).await?;
            shop::build_with(shop_options, data)
        }
    };
    let _fixtures = match options.conformance {
        true => Some(conformance::define(&demo.registry).map_err(|e| e.to_string())?),
        false => None,
    };
    // Start-up is over: every type a hook names, the late ones too, is defined.
    demo.registry.check_wiring().map_err(|e| e.to_string())?;
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
        // Standard input reads as closed once a signal arrives: no new requests.
        let (read, write) = rmcp::transport::stdio_pipes();
        let stop = tokio_util::sync::CancellationToken::new();
        let read = shutdown::UntilStopped::new(read, stop.clone());
        let max = config.max_message_bytes;
        let registry = demo.registry.clone();
        // The expiry sweep on its timer while serving (`ConfirmationConfig::sweep_interval`).
        let periodic = agent_surface_registry::Periodic::start(&registry, &stop);
        let served = if options.conformance {
            let server = conformance::ConformanceServer::new(registry.clone(), Arc::new(config));
            let serving = agent_surface_mcp::serve_io(server, read, write, max);
            shutdown::serve_stdio(serving, signals, &registry, stop, drain).await
        } else {
            // The shop's own resource and prompt beside its tools (`library.rs`).
            let serving = agent_surface_mcp::serve_io(
                agent_surface_mcp::McpServer::new(registry.clone(), config).with_fallback(library::Library::shop()),
                read,
                write,
                max,
            );
            shutdown::serve_stdio(serving, signals, &registry, stop, drain).await
        };
        periodic.stop().await;
        registry.dispose();
        return served.map_err(|e| e.to_string());
    }
    // The plain HTTP binding (`agent-surface-http`) under `/api`, next to MCP, with the same tokens,
    // and the metrics at `/api/metrics` (and `/metrics`, below).
    let render: Option<agent_surface_http::MetricsRenderer> = prometheus.map(|handle| {
        let registry = demo.registry.clone();
        Arc::new(move || {
            registry.record_store_usage();
            handle.render()
        }) as agent_surface_http::MetricsRenderer
    });
    let mut api = agent_surface_http::HttpConfig { metrics: render, ..Default::default() };
    if !options.tokens.is_empty() {
        api.authenticator = Some(Arc::new(agent_surface_http::BearerTokens::new(options.tokens.clone())));
        config.authenticator = Some(Arc::new(BearerTokens::new(options.tokens)));
    }
    let (listener, local) = listener.ok_or("neither --stdio nor --http")?;
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
    let mut http = McpHttpConfig::default();
    // Loopback, the hosts named with --allowed-host, the OAuth resource's own host and that of
    // --public-url: a server reached by a public name must admit that name, on both transports.
    let mut hosts = options.allowed_hosts.clone();
    hosts.extend(options.public_url.as_deref().and_then(url_host));
    if let Some(oauth) = &oauth
        && let Some(host) = url_host(oauth.resource())
    {
        hosts.push(host);
    }
    http.allowed_hosts.extend(hosts.iter().cloned());
    api.allowed_hosts.extend(hosts);
    if let Some(n) = options.max_connections_per_ip {
        http.limits.max_connections_per_ip = n;
        http.limits.max_connections = http.limits.max_connections.max(n);
    }
    println!("listening on http://{local}{}", http.path);
    // Shutdown (`shutdown.rs`): the signal starts the server's drain, which disposes the registry
    // if the deadline passes; the MCP transport's streams end only when the drain is over (ending
    // them cancels the calls they carry).
    let registry = demo.registry.clone();
    let mut drain_steps = agent_surface_server::Drain::cancelling(move || registry.dispose());
    // One task runtime for MCP and the HTTP binding: a task started over either is read over both.
    api.tasks = config.tasks.clone();
    // The calls answered as tasks run on after their requests: the drain waits for them too.
    if let Some(tasks) = api.tasks.clone() {
        drain_steps = drain_steps.waiting_for(move || tasks.idle());
    }
    let app = if options.conformance {
        conformance::router(demo.registry.clone(), config, &http, drain_steps.streams.clone())
    } else {
        agent_surface_mcp::http::router_with_fallback(
            demo.registry.clone(),
            config,
            library::Library::shop,
            &http,
            drain_steps.streams.clone(),
        )
    };
    // The approval inbox, for the identities with the `approver` role (see `inbox_config`).
    let inbox = api
        .authenticator
        .clone()
        .map(|authenticator| inbox_config(&demo, authenticator, local, &api.allowed_hosts, inbox_store.clone()));
    // The metrics are the binding's `/api/metrics`, behind its host check.
    let app = app.nest("/api", agent_surface_http::router(demo.registry.clone(), api));
    let app = match inbox {
        Some(inbox) => app.merge(agent_surface_http::inbox::router(inbox)),
        None => app,
    };
    let app = match oauth {
        Some(oauth) => app.merge(oauth.metadata_router()),
        None => app,
    };
    let mut limits = http.limits.clone();
    limits.drain_timeout = drain;
    let stop = tokio_util::sync::CancellationToken::new();
    let signals = tokio::spawn(shutdown::on_signals(signals, stop.clone(), demo.registry.clone(), drain));
    // The expiry sweep on its timer while serving (`ConfirmationConfig::sweep_interval`), so that
    // expiry warnings are written without anyone looking; it stops with the server.
    let periodic = agent_surface_registry::Periodic::start(&demo.registry, &stop);
    let served = agent_surface_server::serve_with(listener, app, limits, stop, drain_steps).await;
    periodic.stop().await;
    // Whatever is left (calls answered as tasks, a call whose connection was dropped) is cancelled.
    signals.abort();
    demo.registry.dispose();
    tracing::info!(target: "agent_surface::demo", "stopped");
    served.map_err(|e| e.to_string())
}

/// The approval inbox at `/inbox`: people signed in with a token (`--token`, or an OAuth access
/// token) whose identity has the `approver` role decide the shop's pending confirmations there.
/// The session cookie is `Secure` unless the server listens on a loopback address (the demo
/// serves plain HTTP: a browser keeps a `Secure` cookie only over HTTPS, i.e. behind a proxy that
/// terminates TLS). It admits the hosts the binding's routes admit (`allowed_hosts`), and keeps
/// its sessions in `store` (the backend's, so that replicas need no sticky routing).
fn inbox_config(
    demo: &shop::Demo,
    authenticator: Arc<dyn agent_surface_policy::Authenticator>,
    local: std::net::SocketAddr,
    allowed_hosts: &[String],
    store: Arc<dyn agent_surface_policy::inbox::InboxStore>,
) -> agent_surface_http::inbox::InboxConfig {
    agent_surface_http::inbox::InboxConfig {
        audit: demo.audit.clone(),
        secure_cookie: !local.ip().is_loopback(),
        allowed_hosts: allowed_hosts.to_vec(),
        store,
        ..agent_surface_http::inbox::InboxConfig::new(demo.confirmations.clone(), authenticator, "approver")
    }
}

/// The host of an `http(s)://HOST[:PORT]/…` URL, as an allowed-host entry (IPv6 in brackets).
fn url_host(url: &str) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    uri.host().filter(|h| !h.is_empty()).map(str::to_ascii_lowercase)
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
    // Not a plain drop, which would wait for a blocking read of standard input that a shutdown
    // left pending (`serve --stdio` after a signal).
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_serve, url_host};

    #[test]
    fn a_quorum_is_a_capability_and_a_count() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let serve = parse_serve(&args(&["--http", "127.0.0.1:0", "--quorum", "orders.cancel=2"])).unwrap();
        assert_eq!(serve.quorums, vec![("orders.cancel".to_string(), 2)]);
        for bad in ["orders.cancel", "orders.cancel=0", "orders.cancel=x", "orders.cancel=1000"] {
            let e = parse_serve(&args(&["--http", "127.0.0.1:0", "--quorum", bad])).unwrap_err();
            assert!(e.starts_with("--quorum takes CAPABILITY=N"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_public_url_is_an_http_url_with_a_host_and_needs_http() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let serve = parse_serve(&args(&["--http", "0.0.0.0:80", "--public-url", "https://shop.example/"])).unwrap();
        assert_eq!(serve.public_url.as_deref(), Some("https://shop.example"));
        let serve = parse_serve(&args(&["--http", "0.0.0.0:80", "--public-url", "http://10.0.0.5:8080/a"])).unwrap();
        assert_eq!(serve.public_url.as_deref(), Some("http://10.0.0.5:8080/a"));
        for bad in ["shop.example", "ftp://shop.example", "https://shop.example/?x=1", "https://shop.example/#x", "/x"]
        {
            let e = parse_serve(&args(&["--http", "0.0.0.0:80", "--public-url", bad])).unwrap_err();
            assert!(e.starts_with("--public-url takes an http(s) URL"), "{bad}: {e}");
        }
        let e = parse_serve(&args(&["--stdio", "--public-url", "https://shop.example"])).unwrap_err();
        assert_eq!(e, "--public-url is for --http");
    }

    #[test]
    fn the_host_of_a_resource_url() {
        assert_eq!(url_host("https://Shop.Example/mcp").as_deref(), Some("shop.example"));
        assert_eq!(url_host("https://shop.example:8443").as_deref(), Some("shop.example"));
        assert_eq!(url_host("http://user@10.0.0.5:80/x?y").as_deref(), Some("10.0.0.5"));
        assert_eq!(url_host("https://[2001:db8::1]:443/").as_deref(), Some("[2001:db8::1]"));
        assert_eq!(url_host("not a url"), None);
        assert_eq!(url_host("https:///path"), None);
    }
}
