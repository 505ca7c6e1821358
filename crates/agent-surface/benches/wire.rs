//! Policy on the wire: a signed-in, recorded call with an authority policy and a per-user quota,
//! over MCP streamable HTTP (both eras) and over the HTTP binding, against bare servers doing the
//! same JSON work, all measured in one run.
//!
//! Run with `cargo bench -p agent-surface --bench wire` (it starts a private `redis-server`
//! unless `AGENT_SURFACE_REDIS_URL` names one; without Redis the Redis rows are left out, and
//! under `CI=true` the run fails instead). `BENCH_ROUNDS` sets the number of interleaved rounds
//! (default 5).
//!
//! The method is `agent-surface-mcp`'s `stdio_round_trip`'s: every server is a child process
//! (this binary, re-executed with `BENCH_SERVER=…`, on a multi-threaded runtime) that listens on
//! loopback and prints its address; this process is the client. Each round measures every
//! target once, in rotating order, so that load from elsewhere on the machine falls on all of
//! them alike: `n_seq` calls one at a time over one connection (sequential latency, the method of
//! published MCP comparisons), then `n_par` calls spread over 50 clients, each with its own
//! keep-alive connection (and, on the legacy era, its own MCP session, opened before the clock
//! starts). Calls/s ratios are the median of the per-round ratios; p50/p99 come from all the
//! latencies of all rounds; the CPU time of each server process per call (50 clients) is printed
//! beside them, the steadiest figure on a shared machine.
//!
//! To profile one server, start it by hand (`BENCH_SERVER=mcp-memory`, printing its address)
//! and drive it with `BENCH_DRIVE=ADDR,WIRE,N[,untracked][,sequential]` (see [`drive`]).
//!
//! `BENCH_SERVER_PRELOAD=PATH` starts every server (the bare ones too) with `LD_PRELOAD=PATH`,
//! e.g. a system's `libjemalloc.so.2`: the memory idempotency store keeps up to 100,000 records
//! alive between each call's short-lived allocations, and glibc's allocator then costs the
//! servers that record calls far more than it costs the others (`spec/invocation.md` §11.2).
//!
//! `BENCH_STORE_CAPACITY=N` bounds a server's memory store at `N` records (default 100,000).
//! `BENCH_FULL_STORE=1` measures instead what holding them costs: servers whose stores hold up to
//! 100,000 and up to 1,000 records, each filled first, in alternating rounds (see [`full_store`]).
//!
//! Servers:
//!
//! - `mcp-bare`: `rmcp`'s `StreamableHttpService` with a hand-written echo tool (the way the
//!   `rmcp` docs show one), on axum, with `rmcp`'s default configuration but for the one choice
//!   the adapter makes differently by default: a modern request's single reply is plain JSON
//!   (`McpHttpConfig::json_responses`); `BENCH_SSE=1` makes both answer it as an event stream;
//! - `mcp-plain`: the adapter (`agent_surface_mcp::http::serve_http`), no policy, and the client
//!   sends no invocation id (the transport's own cost);
//! - `mcp-memory`: the adapter with a bearer-token authenticator (one user per client), a global
//!   `RequireIdentity` authority policy (and `AllowAll` for the `bench` type: the engine denies by default), a per-user quota of a million calls a second (it never
//!   refuses) and the memory idempotency store; every call carries a fresh invocation id, so it
//!   takes the recorded path (admission, the handler, settlement);
//! - `mcp-redis`: the same on the Redis idempotency store and the Redis rate limiter;
//! - `http-bare`: an axum handler that parses the same `/invoke` body, reads the input and
//!   answers `{"status":"ok","output":…}`;
//! - `http-memory`, `http-redis`: the HTTP binding (`agent_surface_http::serve`) over the
//!   registries of `mcp-memory` and `mcp-redis`, the invocation id in `Idempotency-Key`.
//!
//! `BENCH_LADDER=1` measures instead what each guarantee of that call costs, with memory stores,
//! on the modern MCP era and on the HTTP binding: a ladder of servers from the bare one to
//! `mcp-memory` (`http-memory`), each rung adding one guarantee to the one before — the adapter
//! with no sign-in (`mcp-open`, no authenticator, no invocation id), the sign-in (`mcp-plain`), an
//! invocation id (`mcp-plain` called with one), the authority policy (`mcp-authority`) and the
//! quota (`mcp-memory`) — and prints, per rung, the calls/s at 50 clients against the bare
//! server's and the server's CPU time per call with what the rung added (see [`ladder`]).
//!
//! Every MCP server is called on the legacy era (2025-11-25: `initialize`, then calls in the
//! `Mcp-Session-Id` session) and on the modern era (2026-07-28: each call a stateless request with
//! its protocol fields in `_meta` and the `Mcp-Method`/`Mcp-Name` headers). The bare servers get
//! the same request bytes (they ignore the token and the invocation id). The summary prints the
//! ratios issue #29 sets targets for.

#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark binary reports on the terminal"
)]

use std::io::{BufRead, Write};
use std::num::NonZeroU32;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::{
    AllowAll, Authenticator, AuthorityPolicy, BearerTokens, IdempotencyStore, Identity, MemoryIdempotencyStore,
    MemoryRateLimiter, MemoryStoreConfig, Policies, Quota, RateBudgets, RateLimitConfig, RateLimiter, RequireIdentity,
};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Concurrent clients of the loaded figures.
const CLIENTS: usize = 50;

#[derive(Deserialize, JsonSchema)]
struct Echo {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Echoed {
    text: String,
}

// ---------------------------------------------------------------------------------------------
// The servers (child processes).

/// The bare `rmcp` echo tool, as in `stdio_round_trip`.
#[derive(Clone)]
struct Bare {
    tool: Tool,
}

impl ServerHandler for Bare {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "bench-echo" {
            return Err(ErrorData::invalid_params("unknown tool", None));
        }
        let text = request.arguments.as_ref().and_then(|a| a.get("text")).and_then(|t| t.as_str());
        let Some(text) = text else { return Ok(CallToolResult::error(vec![]).into()) };
        Ok(CallToolResult::structured(json!({"text": text})).into())
    }
}

/// The tokens of the clients: `t-{i}` is user `user-{i}`.
fn tokens() -> BearerTokens {
    BearerTokens::new((0..=CLIENTS).map(|i| (format!("t-{i}"), Identity::new(format!("user-{i}")))))
}

/// The adapters' registry: `bench.echo`, a write (so that an invocation id records it); with
/// `authority`, signed-in callers only; with `limiter`, a per-user quota that never refuses.
fn registry(authority: bool, store: Arc<dyn IdempotencyStore>, limiter: Option<Arc<dyn RateLimiter>>) -> Registry {
    let authority: Option<Arc<dyn AuthorityPolicy>> = authority.then(|| {
        Arc::new(Policies::new().global(RequireIdentity).for_type("bench", AllowAll)) as Arc<dyn AuthorityPolicy>
    });
    let r = Registry::new(RegistryConfig {
        idempotency: store,
        authority,
        rate_limiter: limiter,
        ..RegistryConfig::default()
    });
    r.define("bench", |t| {
        t.capability("echo", "Echo the text back.")
            .effect(Effect::Write)
            .handler(|_ctx: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) });
    })
    .expect("the bench capability is valid");
    std::mem::forget(r.mount("bench", "default").expect("mountable"));
    r
}

/// A quota no client of this bench reaches: a million calls a second per user.
fn budgets() -> RateBudgets {
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).expect("non-zero"));
    RateBudgets { per_consumer: Some(quota), ..RateBudgets::default() }
}

/// The registry of a server kind: `…-open` and `…-plain` have no policy, `…-authority` the
/// authority policy alone, `…-memory` and `…-redis` the authority policy and the quota.
async fn registry_of(kind: &str) -> Registry {
    if kind.ends_with("-redis") {
        use agent_surface_redis::{RedisConfig, RedisStores};
        let url = std::env::var("BENCH_REDIS_URL").expect("the parent passes the Redis URL");
        let prefix = format!("wire:{}:{kind}:", std::process::id());
        let stores = RedisStores::connect(&url, RedisConfig::with_prefix(prefix)).await.expect("Redis answers");
        let limiter: Arc<dyn RateLimiter> = Arc::new(stores.rate_limiter(budgets()));
        return registry(true, Arc::new(stores.idempotency()), Some(limiter));
    }
    let limiter =
        MemoryRateLimiter::new(RateLimitConfig::with_budgets(budgets(), Arc::new(agent_surface_policy::SystemClock)));
    let (authority, quota) = match kind.rsplit('-').next() {
        Some("open" | "plain") => (false, false),
        Some("authority") => (true, false),
        _ => (true, true),
    };
    let limiter: Option<Arc<dyn RateLimiter>> = quota.then(|| Arc::new(limiter) as Arc<dyn RateLimiter>);
    // `BENCH_STORE_CAPACITY=N` bounds the memory store at N records (default 100,000): two
    // servers started by hand with different capacities, each filled first, show what holding
    // the records costs (`spec/invocation.md` §11.2).
    let store = match std::env::var("BENCH_STORE_CAPACITY").ok().and_then(|n| n.parse().ok()) {
        Some(capacity) => MemoryIdempotencyStore::new(MemoryStoreConfig::with_capacity(capacity)),
        None => MemoryIdempotencyStore::default(),
    };
    registry(authority, Arc::new(store), limiter)
}

/// The bare HTTP handler: the same `/invoke` body parsed, the input read, the answer built.
async fn bare_invoke(body: axum::body::Bytes) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return (StatusCode::BAD_REQUEST, "bad json").into_response_bytes(),
    };
    let text = request["input"]["text"].as_str();
    let (Some("bench.echo"), Some(text)) = (request["capability"].as_str(), text) else {
        return (StatusCode::BAD_REQUEST, "bad request").into_response_bytes();
    };
    let mut answer = json!({"status": "ok", "output": {"text": text}});
    if let Some(id) = request.get("invocationId") {
        answer["invocationId"] = id.clone();
    }
    let bytes = serde_json::to_vec(&answer).unwrap_or_default();
    axum::response::Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(bytes))
        .unwrap_or_default()
}

trait IntoResponseBytes {
    fn into_response_bytes(self) -> axum::response::Response;
}

impl IntoResponseBytes for (axum::http::StatusCode, &'static str) {
    fn into_response_bytes(self) -> axum::response::Response {
        let mut r = axum::response::Response::new(axum::body::Body::from(self.1));
        *r.status_mut() = self.0;
        r
    }
}

/// The listener of a bare server, its connections without Nagle's delay as the adapters' are
/// (`agent_surface_server` sets `TCP_NODELAY`): else an answer written in two parts waits for
/// the client's delayed acknowledgement, ~40 ms.
fn nodelay(listener: tokio::net::TcpListener) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut TcpStream)> {
    use axum::serve::ListenerExt;
    fn set(tcp: &mut TcpStream) {
        let _ = tcp.set_nodelay(true);
    }
    listener.tap_io(set as fn(&mut TcpStream))
}

/// Whether the MCP servers answer a modern request's single reply as plain JSON (the adapter's
/// default, `McpHttpConfig::json_responses`, given to the bare `rmcp` server too); `BENCH_SSE=1`
/// makes both answer it as an event stream of one event instead (`rmcp`'s default), to measure
/// the difference. The servers inherit the variable from the bench.
fn json_responses() -> bool {
    std::env::var_os("BENCH_SSE").is_none()
}

async fn serve(kind: &str) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{addr}");
        let _ = out.flush();
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Every adapter signs its callers in but `…-open`'s, which has no authenticator.
    let authenticator: Option<Arc<dyn Authenticator>> =
        (!kind.ends_with("-open")).then(|| Arc::new(tokens()) as Arc<dyn Authenticator>);
    match kind {
        "mcp-bare" => {
            use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
            use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
            let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
            let tool = Tool::new(
                "bench-echo",
                "Echo the text back.",
                Arc::new(schema.as_object().cloned().unwrap_or_default()),
            );
            let service = StreamableHttpService::new(
                move || Ok(Bare { tool: tool.clone() }),
                Arc::new(LocalSessionManager::default()),
                // The adapter's transport choice (`McpHttpConfig::json_responses`), unless
                // `BENCH_SSE` is set (see `json_responses`).
                StreamableHttpServerConfig::default().with_json_response(json_responses()),
            );
            let app = axum::Router::new().route_service("/mcp", service);
            let _ = axum::serve(nodelay(listener), app).await;
        }
        "http-bare" => {
            let app = axum::Router::new().route("/invoke", axum::routing::post(bare_invoke));
            let _ = axum::serve(nodelay(listener), app).await;
        }
        mcp if mcp.starts_with("mcp-") => {
            use agent_surface_mcp::McpConfig;
            use agent_surface_mcp::http::{McpHttpConfig, serve_http};
            let registry = registry_of(mcp).await;
            let config = McpConfig { authenticator, ..McpConfig::default() };
            let http = McpHttpConfig { json_responses: json_responses(), ..McpHttpConfig::default() };
            let _ = serve_http(registry, config, http, listener, shutdown).await;
        }
        binding => {
            use agent_surface_http::HttpConfig;
            let registry = registry_of(binding).await;
            let config = HttpConfig { authenticator, ..HttpConfig::default() };
            let _ = agent_surface_http::serve(registry, config, listener, shutdown).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client.

/// How a target is called.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// MCP 2025-11-25: a session per client.
    Legacy,
    /// MCP 2026-07-28: stateless requests.
    Modern,
    /// The HTTP binding's `POST /invoke`.
    Binding,
}

/// A fresh invocation id for every call of the run.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// One client: a keep-alive HTTP/1.1 connection (and a legacy session), signed in as one user.
struct Client {
    io: BufReader<TcpStream>,
    host: String,
    wire: Wire,
    tracked: bool,
    token: String,
    session: Option<String>,
    next: u64,
}

struct Answer {
    status: u16,
    session: Option<String>,
    body: String,
}

impl Client {
    async fn open(addr: std::net::SocketAddr, wire: Wire, tracked: bool, user: usize) -> Client {
        let stream = TcpStream::connect(addr).await.expect("the server accepts");
        stream.set_nodelay(true).expect("nodelay");
        let mut client = Client {
            io: BufReader::new(stream),
            host: addr.to_string(),
            wire,
            tracked,
            token: format!("t-{user}"),
            session: None,
            next: 1,
        };
        if wire == Wire::Legacy {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "wire", "version": "0"}}});
            let a = client.post("/mcp", &[], init.to_string().as_bytes()).await;
            assert_eq!(a.status, 200, "initialize: {}", a.body);
            client.session = Some(a.session.expect("a legacy session"));
            let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let a = client.post("/mcp", &[], note.to_string().as_bytes()).await;
            assert_eq!(a.status, 202, "initialized: {}", a.body);
        }
        client
    }

    async fn post(&mut self, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n",
            self.host,
            self.token,
            body.len()
        );
        if let Some(session) = &self.session {
            head.push_str(&format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n"));
        }
        for (name, value) in extra {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        self.io.get_mut().write_all(&bytes).await.expect("the request is sent");
        self.read_answer().await
    }

    async fn read_answer(&mut self) -> Answer {
        let mut line = String::new();
        self.io.read_line(&mut line).await.expect("a status line");
        let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let (mut length, mut chunked, mut session) = (None, false, None);
        loop {
            line.clear();
            self.io.read_line(&mut line).await.expect("a header line");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (name, value) = l.split_once(':').expect("a header field");
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("mcp-session-id") {
                session = Some(value.to_string());
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.io.read_line(&mut line).await.expect("a chunk size");
                let size = usize::from_str_radix(line.trim_end().split(';').next().unwrap_or("0"), 16).expect("hex");
                let start = body.len();
                body.resize(start + size + 2, 0);
                self.io.read_exact(&mut body[start..]).await.expect("a chunk");
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.io.read_exact(&mut body).await.expect("the body");
        }
        Answer { status, session, body: String::from_utf8(body).expect("UTF-8") }
    }

    /// One `echo` call; panics unless it succeeded.
    async fn call(&mut self) {
        let n = self.next;
        self.next += 1;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let answer = match self.wire {
            Wire::Binding => {
                let key = format!("inv-{id}");
                let body = r#"{"capability":"bench.echo","input":{"text":"hello"}}"#;
                let headers: &[(&str, &str)] = if self.tracked { &[("Idempotency-Key", &key)] } else { &[] };
                self.post("/invoke", headers, body.as_bytes()).await
            }
            Wire::Legacy | Wire::Modern => {
                let mut meta = String::new();
                if self.wire == Wire::Modern {
                    meta.push_str(
                        r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"wire","version":"0"}"#,
                    );
                }
                if self.tracked {
                    if !meta.is_empty() {
                        meta.push(',');
                    }
                    meta.push_str(&format!(r#""agent-surface/invocationId":"inv-{id}""#));
                }
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"bench-echo","arguments":{{"text":"hello"}},"_meta":{{{meta}}}}}}}"#
                );
                let headers: &[(&str, &str)] = if self.wire == Wire::Modern {
                    &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "bench-echo")]
                } else {
                    &[]
                };
                self.post("/mcp", headers, body.as_bytes()).await
            }
        };
        let ok = answer.status == 200
            && answer.body.contains("hello")
            && !answer.body.contains(r#""isError":true"#)
            && (self.wire != Wire::Binding || answer.body.contains(r#""status":"ok""#));
        assert!(ok, "the call failed: {} {}", answer.status, answer.body);
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring.

struct Figures {
    calls_per_s: f64,
    latencies: Vec<Duration>,
}

fn pooled(runs: &[Figures]) -> (Duration, Duration, Duration) {
    let mut all: Vec<Duration> = runs.iter().flat_map(|f| f.latencies.iter().copied()).collect();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 - 1.0) * q).round() as usize];
    let mean = all.iter().sum::<Duration>() / all.len() as u32;
    (mean, at(0.5), at(0.99))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn sequential(addr: std::net::SocketAddr, wire: Wire, tracked: bool, n: usize) -> Figures {
    let mut client = Client::open(addr, wire, tracked, CLIENTS).await;
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        client.call().await;
        latencies.push(t.elapsed());
    }
    Figures { calls_per_s: n as f64 / start.elapsed().as_secs_f64(), latencies }
}

async fn loaded(addr: std::net::SocketAddr, wire: Wire, tracked: bool, n: usize) -> Figures {
    let mut clients = Vec::with_capacity(CLIENTS);
    for user in 0..CLIENTS {
        clients.push(Client::open(addr, wire, tracked, user).await);
    }
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(w, mut client)| {
            let count = n / CLIENTS + usize::from(w < n % CLIENTS);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(count);
                for _ in 0..count {
                    let t = Instant::now();
                    client.call().await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(n);
    for t in tasks {
        latencies.extend(t.await.expect("a client task"));
    }
    Figures { calls_per_s: n as f64 / start.elapsed().as_secs_f64(), latencies }
}

/// The CPU time (user and system) a process has used so far, in seconds (Linux only).
fn cpu_time(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

struct Server {
    kind: &'static str,
    addr: std::net::SocketAddr,
    child: std::process::Child,
}

fn start(kind: &'static str, redis: Option<&str>) -> Server {
    start_with(kind, redis, &[])
}

/// [`start`], with more variables in the server's environment.
fn start_with(kind: &'static str, redis: Option<&str>, env: &[(&str, &str)]) -> Server {
    let exe = std::env::current_exe().expect("this binary");
    let mut cmd = std::process::Command::new(exe);
    cmd.env("BENCH_SERVER", kind).stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
    cmd.envs(env.iter().copied());
    if let Some(url) = redis {
        cmd.env("BENCH_REDIS_URL", url);
    }
    if let Some(library) = std::env::var_os("BENCH_SERVER_PRELOAD") {
        cmd.env("LD_PRELOAD", library);
    }
    let mut child = cmd.spawn().expect("the server starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("its address");
    let addr = line.trim().parse().unwrap_or_else(|_| panic!("{kind} printed {line:?}"));
    Server { kind, addr, child }
}

/// What is measured: a server, called on one wire.
struct Target {
    name: String,
    server: usize,
    wire: Wire,
    tracked: bool,
    seq: Vec<Figures>,
    par: Vec<Figures>,
    cpu: f64,
}

/// `BENCH_DRIVE=ADDR,WIRE,N[,OPTION…]`: the client alone, for profiling a server started by hand
/// (`BENCH_SERVER=mcp-memory`, e.g. under `perf` or `valgrind`): `N` calls over 50 clients on
/// `WIRE` (`legacy`, `modern` or `binding`), after 200 sequential calls of warm-up, then the
/// calls/s. Options: `untracked` sends no invocation id (as the run calls `mcp-plain`; by default
/// every call has a fresh one); `sequential` makes the `N` calls one at a time over one connection
/// instead (the warm-up on a connection of its own), then prints their mean latency — the mode for
/// counting a server's syscalls, wake-ups and context switches per sequential call (`perf stat -p`).
fn drive(spec: &str) {
    let mut parts = spec.split(',');
    let addr: std::net::SocketAddr = parts.next().and_then(|a| a.parse().ok()).expect("BENCH_DRIVE=ADDR,WIRE,N");
    let wire = match parts.next() {
        Some("legacy") => Wire::Legacy,
        Some("modern") => Wire::Modern,
        Some("binding") => Wire::Binding,
        other => panic!("BENCH_DRIVE: unknown wire {other:?}"),
    };
    let n: usize = parts.next().and_then(|n| n.parse().ok()).expect("BENCH_DRIVE=ADDR,WIRE,N");
    let (mut tracked, mut one_at_a_time) = (true, false);
    for option in parts {
        match option {
            "untracked" => tracked = false,
            "sequential" => one_at_a_time = true,
            other => panic!("BENCH_DRIVE: unknown option {other:?}"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    rt.block_on(sequential(addr, wire, tracked, 200));
    if one_at_a_time {
        let figures = rt.block_on(sequential(addr, wire, tracked, n));
        let mean = figures.latencies.iter().sum::<Duration>() / n.max(1) as u32;
        println!("{n} sequential calls: {:.0} calls/s, mean {:.1} µs", figures.calls_per_s, mean.as_secs_f64() * 1e6);
        return;
    }
    let figures = rt.block_on(loaded(addr, wire, tracked, n));
    println!("{n} calls over {CLIENTS} clients: {:.0} calls/s", figures.calls_per_s);
}

/// The rungs of `BENCH_LADDER`: each adds one guarantee to the one before (server kind, whether
/// the client sends an invocation id, what the rung adds).
const LADDER: [(&str, bool, &str); 6] = [
    ("bare", true, "the bare server (the same bytes)"),
    ("open", false, "the adapter: no sign-in, no policy, no invocation id"),
    ("plain", false, "+ the sign-in (a bearer token per client)"),
    ("plain", true, "+ an invocation id (fingerprint, admission, settlement)"),
    ("authority", true, "+ an authority policy (signed-in callers only)"),
    ("memory", true, "+ a per-user quota (never refusing)"),
];

/// `BENCH_LADDER=1`: what each guarantee of the policy path costs, on the modern MCP era and on
/// the HTTP binding, with memory stores. Each rung of [`LADDER`] adds one guarantee to the rung
/// before; the servers are measured in interleaved rounds (`BENCH_ROUNDS`, default 5) of 10,000
/// calls over 50 clients, and the table gives, per rung, the calls/s against the bare server's and
/// the server's CPU time per call with what the rung added to it.
fn ladder(rounds: usize) {
    const N: usize = 10_000;
    let mut servers = Vec::new();
    let mut targets: Vec<(usize, Wire, bool, &str)> = Vec::new();
    for (prefix, wire) in [("mcp", Wire::Modern), ("http", Wire::Binding)] {
        for (rung, tracked, what) in LADDER {
            let kind: &'static str = format!("{prefix}-{rung}").leak();
            let server = match servers.iter().position(|s: &Server| s.kind == kind) {
                Some(i) => i,
                None => {
                    servers.push(start(kind, None));
                    servers.len() - 1
                }
            };
            targets.push((server, wire, tracked, what));
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    for &(server, wire, tracked, _) in &targets {
        rt.block_on(sequential(servers[server].addr, wire, tracked, 200));
    }
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load before: {}", load().trim());
    let mut cpu = vec![0.0; targets.len()];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (k + round) % targets.len();
            let (server, wire, tracked, _) = targets[i];
            let pid = servers[server].child.id();
            let before = cpu_time(pid);
            rates[i].push(rt.block_on(loaded(servers[server].addr, wire, tracked, N)).calls_per_s);
            if let (Some(a), Some(b)) = (before, cpu_time(pid)) {
                cpu[i] += b - a;
            }
        }
    }
    println!("load after: {}", load().trim());
    for s in &mut servers {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    println!();
    println!("{rounds} interleaved rounds of {N} calls over {CLIENTS} clients, memory stores:");
    for (p, title) in [(0, "MCP streamable HTTP, modern era"), (1, "HTTP binding")] {
        println!();
        println!("{title}:");
        println!();
        println!("| rung | calls/s | against bare | server CPU per call | the rung adds |");
        println!("|---|---:|---:|---:|---:|");
        let base = p * LADDER.len();
        let per_call = |i: usize| cpu[i] * 1e6 / (N * rounds) as f64;
        for r in 0..LADDER.len() {
            let i = base + r;
            let against = median(rates[i].iter().zip(&rates[base]).map(|(a, b)| a / b).collect());
            let step = if r == 0 { String::new() } else { format!("{:+.1} µs", per_call(i) - per_call(i - 1)) };
            println!(
                "| {} | {:.0} | {against:.2}x | {:.1} µs | {step} |",
                targets[i].3,
                median(rates[i].clone()),
                per_call(i)
            );
        }
    }
}

/// `BENCH_FULL_STORE=1`: what holding a full memory store costs a server. For the MCP modern
/// era (`mcp-memory`) and the HTTP binding (`http-memory`), two servers, one whose store holds up to
/// 100,000 records and one up to 1,000 (`BENCH_STORE_CAPACITY`), each filled with 110,000 recorded
/// calls first, then driven in alternating rounds of 20,000 calls over 50 clients; prints the
/// median calls/s and server CPU time per call of each.
fn full_store(rounds: usize) {
    const FILL: usize = 110_000;
    const N: usize = 20_000;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load before: {}", load().trim());
    for (kind, wire, title) in
        [("mcp-memory", Wire::Modern, "MCP modern era"), ("http-memory", Wire::Binding, "HTTP binding")]
    {
        let mut servers: Vec<Server> = ["100000", "1000"]
            .into_iter()
            .map(|capacity| start_with(kind, None, &[("BENCH_STORE_CAPACITY", capacity)]))
            .collect();
        for server in &servers {
            rt.block_on(loaded(server.addr, wire, true, FILL));
        }
        let mut rates = [Vec::new(), Vec::new()];
        let mut cpu = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for k in 0..2 {
                let i = (k + round) % 2;
                let pid = servers[i].child.id();
                let before = cpu_time(pid);
                rates[i].push(rt.block_on(loaded(servers[i].addr, wire, true, N)).calls_per_s);
                if let (Some(a), Some(b)) = (before, cpu_time(pid)) {
                    cpu[i].push((b - a) * 1e6 / N as f64);
                }
            }
        }
        for s in &mut servers {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        println!();
        println!("{title}, {rounds} alternating rounds of {N} calls over {CLIENTS} clients after {FILL} calls:");
        println!();
        println!("| store capacity | calls/s | server CPU per call |");
        println!("|---|---:|---:|");
        for (i, capacity) in ["100,000", "1,000"].iter().enumerate() {
            println!("| {capacity} | {:.0} | {:.1} µs |", median(rates[i].clone()), median(cpu[i].clone()));
        }
    }
    println!();
    println!("load after: {}", load().trim());
}

fn main() {
    if let Ok(kind) = std::env::var("BENCH_SERVER") {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
        return rt.block_on(serve(&kind));
    }
    if let Ok(spec) = std::env::var("BENCH_DRIVE") {
        return drive(&spec);
    }
    let quick = std::env::args().any(|a| a == "--test");
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    if std::env::var_os("BENCH_LADDER").is_some() {
        return ladder(rounds);
    }
    if std::env::var_os("BENCH_FULL_STORE").is_some() {
        return full_store(rounds);
    }
    let (rounds, n_seq, n_par) = if quick { (1, 100, 500) } else { (rounds, 1_000, 5_000) };
    // The CPU figure counts the server's clock ticks (10 ms each): over 25,000 calls, 0.4 µs.
    let redis = agent_surface_testing::services::redis_url();
    if redis.is_none() {
        eprintln!("(no Redis: the Redis rows are left out)");
    }
    let mut kinds = vec!["mcp-bare", "mcp-plain", "mcp-memory", "http-bare", "http-memory"];
    if redis.is_some() {
        kinds.extend(["mcp-redis", "http-redis"]);
    }
    let mut servers: Vec<Server> = kinds.iter().map(|k| start(k, redis.as_deref())).collect();
    if std::env::var_os("BENCH_TRACE").is_some() {
        eprintln!("{} servers started", servers.len());
    }
    let mut targets = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let tracked = !s.kind.ends_with("-bare") && !s.kind.ends_with("-plain");
        let wires: &[(Wire, &str)] = if s.kind.starts_with("mcp-") {
            &[(Wire::Legacy, "legacy"), (Wire::Modern, "modern")]
        } else {
            &[(Wire::Binding, "binding")]
        };
        for (wire, era) in wires {
            // The bare servers get the same bytes as the adapters with policy.
            let tracked = tracked || s.kind.ends_with("-bare");
            targets.push(Target {
                name: format!("{} {era}", s.kind),
                server: i,
                wire: *wire,
                tracked,
                seq: Vec::new(),
                par: Vec::new(),
                cpu: 0.0,
            });
        }
    }

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    for t in &targets {
        if std::env::var_os("BENCH_TRACE").is_some() {
            eprintln!("warming up {}", t.name);
        }
        rt.block_on(sequential(servers[t.server].addr, t.wire, t.tracked, 200)); // warm-up
    }
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    if let Some(library) = std::env::var_os("BENCH_SERVER_PRELOAD") {
        println!("servers started with LD_PRELOAD={}", library.to_string_lossy());
    }
    println!("load before: {}", load().trim());
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (k + round) % targets.len();
            let t = &mut targets[i];
            let addr = servers[t.server].addr;
            t.seq.push(rt.block_on(sequential(addr, t.wire, t.tracked, n_seq)));
            let pid = servers[t.server].child.id();
            let before = cpu_time(pid);
            t.par.push(rt.block_on(loaded(addr, t.wire, t.tracked, n_par)));
            if let (Some(a), Some(b)) = (before, cpu_time(pid)) {
                t.cpu += b - a;
            }
        }
    }
    println!("load after: {}", load().trim());
    for s in &mut servers {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!();
    println!("{rounds} interleaved rounds of {n_seq} sequential calls and {n_par} calls over {CLIENTS} clients:");
    println!();
    println!(
        "| target | sequential calls/s | mean | p50 | p99 | {CLIENTS} clients calls/s | p50 | p99 | server CPU per call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for t in &targets {
        let sr = median(t.seq.iter().map(|f| f.calls_per_s).collect());
        let (smean, s50, s99) = pooled(&t.seq);
        let pr = median(t.par.iter().map(|f| f.calls_per_s).collect());
        let (_, p50, p99) = pooled(&t.par);
        println!(
            "| {} | {sr:.0} | {:.0} µs | {:.0} µs | {:.0} µs | {pr:.0} | {:.0} µs | {:.0} µs | {:.1} µs |",
            t.name,
            us(smean),
            us(s50),
            us(s99),
            us(p50),
            us(p99),
            t.cpu * 1e6 / (n_par * rounds) as f64
        );
    }
    let find = |name: &str| targets.iter().position(|t| t.name == name);
    let ratio =
        |a: &[Figures], b: &[Figures]| median(a.iter().zip(b).map(|(x, y)| x.calls_per_s / y.calls_per_s).collect());
    println!();
    let compare = |label: &str, a: &str, b: &str, throughput: f64, p99_allowance: f64| {
        let (Some(a), Some(b)) = (find(a), find(b)) else { return };
        let (ta, tb) = (&targets[a], &targets[b]);
        let (_, _, pa) = pooled(&ta.par);
        let (_, _, pb) = pooled(&tb.par);
        let (ma, _, _) = pooled(&ta.seq);
        let (mb, _, _) = pooled(&tb.seq);
        println!(
            "{label}: {CLIENTS} clients {:.2}x calls/s (target ≥ {throughput:.2}x), p99 {:+.0} µs (target ≤ +{:.0} µs); sequential mean latency {:.2}x (target ≤ 1.10x)",
            ratio(&ta.par, &tb.par),
            us(pa) - us(pb),
            p99_allowance * 1e3,
            us(ma) / us(mb),
        );
    };
    compare("MCP legacy, memory / bare rmcp", "mcp-memory legacy", "mcp-bare legacy", 0.90, 0.5);
    compare("MCP modern, memory / bare rmcp", "mcp-memory modern", "mcp-bare modern", 0.90, 0.5);
    compare("MCP legacy, Redis / bare rmcp", "mcp-redis legacy", "mcp-bare legacy", 0.80, 1.2);
    compare("MCP modern, Redis / bare rmcp", "mcp-redis modern", "mcp-bare modern", 0.80, 1.2);
    compare("HTTP binding, memory / bare axum", "http-memory binding", "http-bare binding", 0.90, 0.5);
    compare("HTTP binding, Redis / bare axum", "http-redis binding", "http-bare binding", 0.80, 1.2);
    compare("MCP legacy, adapter without policy / bare rmcp", "mcp-plain legacy", "mcp-bare legacy", 0.0, 0.0);
    compare("MCP modern, adapter without policy / bare rmcp", "mcp-plain modern", "mcp-bare modern", 0.0, 0.0);
    for kind in ["mcp-memory", "mcp-plain", "mcp-bare", "mcp-redis"] {
        if let (Some(m), Some(l)) = (find(&format!("{kind} modern")), find(&format!("{kind} legacy"))) {
            println!(
                "{kind}: modern (stateless) / legacy (session) at {CLIENTS} clients {:.2}x calls/s (target ≥ 1.00x)",
                ratio(&targets[m].par, &targets[l].par)
            );
        }
    }
}
