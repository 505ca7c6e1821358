//! The slow-clients probe (issue #28): how much slower normal requests get while many reconnecting
//! slow clients (slowloris) from many addresses hold the server's connections.
//!
//! ```text
//! cargo run --release -p agent-surface-server --example slow_clients -- [options]
//! ```
//!
//! It starts a server (this program again, with `--serve`) in a child process serving a small
//! router with [`agent_surface_server::serve`], its descriptor soft limit set to `--nofile` first
//! (1,024 by default, the usual default of a login shell or a systemd service). Then it measures
//! normal requests alone — `--workers` clients in a loop, each request on a new connection from
//! 127.0.0.1 — and again while `--slow` clients from `--addresses` loopback addresses
//! (127.0.0.2 upwards: Linux routes all of 127/8 to the loopback interface) each open a connection,
//! send part of a request head, trickle one more byte every `--trickle-ms`, and reconnect as soon
//! as the server closes it. It prints both, and the ratios.
//!
//! Options (defaults in brackets): `--slow N` [1000], `--addresses N` [50], `--secs N` per phase
//! [10], `--workers N` [4], `--trickle-ms N` [500], `--nofile SOFT[:HARD]` [1024, the hard limit
//! kept], `--held N` [0] descriptors the server holds besides its connections (as a service's
//! store connections and files do), `--max-connections N`, `--max-connections-per-ip N` (the
//! server's [`Limits`], default otherwise).

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a probe reports on the terminal")]

use std::io::{BufRead as _, BufReader, Read as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_surface_server::{Limits, serve};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;

/// How long one normal request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The command line.
#[derive(Clone, Debug)]
struct Options {
    serve: bool,
    slow: usize,
    addresses: usize,
    secs: u64,
    workers: usize,
    trickle: Duration,
    nofile: (u64, Option<u64>),
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    held: usize,
}

impl Options {
    fn parse() -> Options {
        let mut o = Options {
            serve: false,
            slow: 1000,
            addresses: 50,
            secs: 10,
            workers: 4,
            trickle: Duration::from_millis(500),
            nofile: (1024, None),
            max_connections: None,
            max_connections_per_ip: None,
            held: 0,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
            let number = |v: String| v.parse::<u64>().unwrap_or_else(|_| usage(&format!("{v}: not a number")));
            match arg.as_str() {
                "--serve" => o.serve = true,
                "--slow" => o.slow = number(value()) as usize,
                "--addresses" => o.addresses = (number(value()) as usize).clamp(1, 250 * 250),
                "--secs" => o.secs = number(value()),
                "--workers" => o.workers = (number(value()) as usize).max(1),
                "--trickle-ms" => o.trickle = Duration::from_millis(number(value())),
                "--nofile" => {
                    let v = value();
                    o.nofile = match v.split_once(':') {
                        Some((soft, hard)) => (number(soft.into()), Some(number(hard.into()))),
                        None => (number(v), None),
                    };
                }
                "--max-connections" => o.max_connections = Some(number(value()) as usize),
                "--max-connections-per-ip" => o.max_connections_per_ip = Some(number(value()) as usize),
                "--held" => o.held = number(value()) as usize,
                other => usage(&format!("unknown option {other}")),
            }
        }
        o
    }

    /// The options the server child needs.
    fn server_args(&self) -> Vec<String> {
        let (soft, hard) = self.nofile;
        let mut args = vec!["--serve".into(), "--nofile".into()];
        args.push(hard.map_or(soft.to_string(), |hard| format!("{soft}:{hard}")));
        args.extend(["--held".into(), self.held.to_string()]);
        if let Some(n) = self.max_connections {
            args.extend(["--max-connections".into(), n.to_string()]);
        }
        if let Some(n) = self.max_connections_per_ip {
            args.extend(["--max-connections-per-ip".into(), n.to_string()]);
        }
        args
    }
}

fn usage(problem: &str) -> ! {
    eprintln!("slow_clients: {problem}\nsee the top of examples/slow_clients.rs for the options");
    std::process::exit(2)
}

#[cfg(not(unix))]
fn main() {
    usage("the probe needs a Unix system (descriptor limits, 127/8 on the loopback interface)");
}

#[cfg(unix)]
fn main() {
    let options = Options::parse();
    if options.serve {
        run_server(&options);
    } else {
        run_probe(&options);
    }
}

/// The server child: lowers its descriptor limit, serves, and exits when its standard input closes
/// (the probe ended, however it ended).
fn run_server(options: &Options) {
    let (soft, hard) = options.nofile;
    let (_, current_hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("the descriptor limit");
    let hard = hard.unwrap_or(current_hard);
    rlimit::setrlimit(rlimit::Resource::NOFILE, soft.min(hard), hard).expect("the descriptor limit is lowered");
    // Descriptors a real service holds besides its connections (a store's connection pool, log
    // and audit files), kept open until the process exits.
    let held: Vec<std::fs::File> =
        (0..options.held).map(|_| std::fs::File::open("/dev/null").expect("a descriptor")).collect();
    std::mem::forget(held);
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(tracing::Level::INFO).init();
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let mut limits = Limits::default();
    if let Some(n) = options.max_connections {
        limits.max_connections = n;
    }
    if let Some(n) = options.max_connections_per_ip {
        limits.max_connections_per_ip = n;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        println!("listening on {}", listener.local_addr().expect("an address"));
        serve(listener, router, limits, CancellationToken::new()).await.expect("served");
    });
}

/// What one phase of normal requests saw.
struct Phase {
    latencies: Vec<Duration>,
    failed: usize,
    took: Duration,
}

impl Phase {
    fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i]
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.took.as_secs_f64()
    }

    fn row(&self, name: &str) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "{name:<13} {:>7} {:>7} {:>9.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            self.latencies.len(),
            self.failed,
            self.per_second(),
            ms(self.quantile(0.5)),
            ms(self.quantile(0.9)),
            ms(self.quantile(0.99)),
            ms(self.latencies.last().copied().unwrap_or_default()),
        )
    }
}

fn run_probe(options: &Options) {
    // The probe's own sockets: a thousand slow clients need more than a default soft limit.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let exe = std::env::current_exe().expect("this program");
    let mut child = Command::new(exe)
        .args(options.server_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the server starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("its stdout")).read_line(&mut line).expect("the server's address");
    let addr: SocketAddr = line.trim().trim_start_matches("listening on ").parse().expect("an address");
    let (soft, hard) = options.nofile;
    println!(
        "server {addr}: descriptor soft limit at start {soft}{}; {} slow clients from {} addresses, one byte every {} ms; {} workers, {} s a phase",
        hard.map_or(String::new(), |h| format!(", hard {h}")),
        options.slow,
        options.addresses,
        options.trickle.as_millis(),
        options.workers,
        options.secs,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(probe(addr, options));
    drop(child.stdin.take());
    let _ = child.wait();
}

async fn probe(addr: SocketAddr, options: &Options) {
    let secs = Duration::from_secs(options.secs);
    let alone = measure(addr, options.workers, secs).await;
    let stop = CancellationToken::new();
    let counters = Arc::new(Counters::default());
    for i in 0..options.slow {
        let from = attacker_address(i % options.addresses);
        tokio::spawn(slow_client(from, addr, options.trickle, counters.clone(), stop.clone()));
    }
    // Let them connect (or find the server full) before measuring.
    let ramp = Instant::now();
    while counters.open.load(Ordering::Relaxed) < options.slow as u64 * 95 / 100
        && ramp.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let opened_before = counters.opened.load(Ordering::Relaxed);
    let open_at_start = counters.open.load(Ordering::Relaxed);
    let attacked = measure(addr, options.workers, secs).await;
    let opened = counters.opened.load(Ordering::Relaxed) - opened_before;
    let open_at_end = counters.open.load(Ordering::Relaxed);
    stop.cancel();
    println!(
        "{:<13} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "phase", "ok", "failed", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    println!("{}", alone.row("alone"));
    println!("{}", attacked.row("slow clients"));
    println!(
        "slow clients: {open_at_start} connected when the measurement started, {open_at_end} at its end, {opened} connections opened during it"
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::INFINITY };
    println!(
        "slowdown: throughput {:.2}x, p50 latency {:.2}x, p99 latency {:.2}x",
        ratio(alone.per_second(), attacked.per_second()),
        ratio(attacked.quantile(0.5).as_secs_f64(), alone.quantile(0.5).as_secs_f64()),
        ratio(attacked.quantile(0.99).as_secs_f64(), alone.quantile(0.99).as_secs_f64()),
    );
}

/// The `i`th attacker address: 127.0.0.2 upwards, 250 to a /24.
fn attacker_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, (i / 250) as u8, 0, (i % 250 + 2) as u8)
}

/// `workers` clients sending normal requests for `secs`, each on a new connection.
async fn measure(addr: SocketAddr, workers: usize, secs: Duration) -> Phase {
    let started = Instant::now();
    let deadline = started + secs;
    let mut tasks = Vec::new();
    for _ in 0..workers {
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut failed) = (Vec::new(), 0);
            while Instant::now() < deadline {
                let t = Instant::now();
                match tokio::time::timeout(REQUEST_TIMEOUT, request(addr)).await {
                    Ok(Ok(true)) => latencies.push(t.elapsed()),
                    _ => failed += 1,
                }
            }
            (latencies, failed)
        }));
    }
    let mut phase = Phase { latencies: Vec::new(), failed: 0, took: Duration::ZERO };
    for task in tasks {
        let (latencies, failed) = task.await.expect("a worker");
        phase.latencies.extend(latencies);
        phase.failed += failed;
    }
    phase.took = started.elapsed();
    phase.latencies.sort();
    phase
}

/// One normal request on a new connection: whether it was answered `200`.
async fn request(addr: SocketAddr) -> std::io::Result<bool> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    Ok(answer.starts_with(b"HTTP/1.1 200"))
}

/// The slow clients' connections.
#[derive(Default)]
struct Counters {
    /// Connections opened so far.
    opened: AtomicU64,
    /// Connections open now.
    open: AtomicU64,
}

/// A slowloris client: a connection from `from` that sends part of a request head and one more
/// byte every `trickle`, opened again as soon as the server closes it.
async fn slow_client(
    from: Ipv4Addr,
    addr: SocketAddr,
    trickle: Duration,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let connected = async {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::from((from, 0)))?;
            socket.connect(addr).await
        };
        let stream = tokio::select! {
            connected = tokio::time::timeout(Duration::from_secs(10), connected) => match connected {
                Ok(Ok(stream)) => stream,
                _ => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        counters.opened.fetch_add(1, Ordering::Relaxed);
        counters.open.fetch_add(1, Ordering::Relaxed);
        let (mut reader, mut writer) = stream.into_split();
        if writer.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.is_ok() {
            let mut buf = [0u8; 512];
            loop {
                tokio::select! {
                    read = reader.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => continue,
                    },
                    () = tokio::time::sleep(trickle) => {
                        if writer.write_all(b"a").await.is_err() {
                            break;
                        }
                    }
                    () = stop.cancelled() => break,
                }
            }
        }
        counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}
