//! Services a test suite needs from outside the process: Redis for the shared stores.
//!
//! [`redis_url`] answers the URL of the Redis to test against: `AGENT_SURFACE_REDIS_URL` when set
//! (`cargo xtask ci` starts one and sets it); otherwise a private `redis-server` started once per
//! test binary (on a Unix socket in a folder of its own, without persistence, stopped when the
//! process is gone) when one is installed. Under `CI=true` a missing Redis panics: a test that needs
//! a service CI provides fails rather than skips.
//!
//! A test that stops, freezes or restarts Redis needs one of its own: [`RedisSite`] gives it a data
//! folder and a Unix socket there, and [`RedisSite::start`] a `redis-server` on that socket (and on
//! a loopback TCP port, [`RedisSite::port`]) with every write appended to a file, so a restart
//! after [`OwnRedis::stop`] (SIGTERM: Redis syncs the file before it exits) reads back what the last
//! one stored.
//!
//! **Nothing here can race another process for an address.** A Unix socket in a folder of the
//! test's own cannot be taken by anyone else, so [`redis_url`] and [`RedisSite::url`] name one, and
//! a restarted site gets the same address back. A TCP port (`redis-server` cannot bind port 0 and
//! say which port it got) is picked free and, should another process take it before Redis binds
//! it, picked again: Redis exits saying so in its log. A server is ready once it answers `PING`
//! over its socket (after it has read its append-only file back), not merely once something
//! accepts connections. Each server writes its log to its folder; a test that fails while it holds
//! an [`OwnRedis`] prints the log's last lines, and a server that does not start says why.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a `redis-server` may take to answer its first `PING`: generous, as a loaded machine
/// can take seconds to start a process and read an append-only file back.
const START_WITHIN: Duration = Duration::from_secs(60);

/// How many fresh ports a site tries when another process takes the one it picked first.
const PORT_ATTEMPTS: usize = 5;

/// The most lines of a server's log a failure prints.
const LOG_LINES: usize = 40;

/// Whether `redis-server` is installed.
fn installed() -> bool {
    Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// A fresh folder for a server's socket, data and log, named after `what`; short, since a Unix
/// socket's path must stay under about a hundred bytes (the system's temporary folder unless its
/// path is too long for that, then `/tmp`).
fn fresh_dir(what: &str) -> Option<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!("as-{what}-{}-{n}", std::process::id());
    let temp = std::env::temp_dir();
    let base =
        if temp.as_os_str().len() + name.len() + "/redis.sock".len() < 100 { temp } else { PathBuf::from("/tmp") };
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// The `redis+unix://` URL of the socket at `path`.
fn unix_url(path: &Path) -> String {
    format!("redis+unix://{}", path.display())
}

/// Whether a Redis answers `PING` on the Unix socket at `path`: with `PONG`, or asking for a
/// password first (`--requirepass`). A Redis still loading its data answers an error instead.
#[cfg(unix)]
fn answers_ping(path: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && (&buf == b"+PONG\r\n" || &buf == b"-NOAUTH")
}

#[cfg(not(unix))]
fn answers_ping(_: &Path) -> bool {
    false
}

/// The last [`LOG_LINES`] lines of the log at `path`.
fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no log at {}: {e})\n", path.display()));
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(LOG_LINES)..].iter().map(|l| format!("{l}\n")).collect()
}

/// The log at `path`, opened to append to.
fn log_file(path: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// How a server just started fared.
enum Started {
    /// It answers `PING`.
    Ready,
    /// It exited, or did not answer within [`START_WITHIN`].
    Failed(String),
}

/// Waits until the server `child` answers `PING` on `socket`, or exits, or [`START_WITHIN`] passes.
fn wait_ready(child: &mut Child, socket: &Path) -> Started {
    let deadline = Instant::now() + START_WITHIN;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Started::Failed(format!("redis-server exited at start ({status})")),
            Ok(None) => {}
            Err(e) => return Started::Failed(format!("redis-server cannot be waited for: {e}")),
        }
        if answers_ping(socket) {
            return Started::Ready;
        }
        if Instant::now() > deadline {
            return Started::Failed(format!("redis-server did not answer PING within {START_WITHIN:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `redis-server` this test binary started. A static is never dropped, so a small shell
/// watcher stops the server once this process is gone and removes its folder (and ends when the
/// server does, leaving the folder: a server that exits at start is seen to, and its log read).
struct Private {
    url: String,
    _watcher: Child,
}

/// # Panics
///
/// When `redis-server` is installed but does not start (with its log).
fn private_server() -> Option<Private> {
    if !installed() {
        return None;
    }
    let dir = fresh_dir("redis")?;
    let (socket, log) = (dir.join("redis.sock"), dir.join("redis.log"));
    let script = format!(
        "redis-server --port 0 --unixsocket '{}' --unixsocketperm 700 --save '' --appendonly no --dir '{dir}' \
         >'{log}' 2>&1 & r=$!; while kill -0 {pid} 2>/dev/null && kill -0 $r 2>/dev/null; do sleep 0.5; done; \
         kill -0 {pid} 2>/dev/null && exit 1; kill $r; wait $r; rm -rf '{dir}'",
        socket.display(),
        dir = dir.display(),
        log = log.display(),
        pid = std::process::id(),
    );
    let mut watcher =
        Command::new("sh").arg("-c").arg(script).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
    match wait_ready(&mut watcher, &socket) {
        Started::Ready => Some(Private { url: unix_url(&socket), _watcher: watcher }),
        Started::Failed(why) => {
            let log = log_tail(&log);
            // A server that is still there is the watcher's to stop, with its folder.
            if matches!(watcher.try_wait(), Ok(Some(_))) {
                let _ = std::fs::remove_dir_all(&dir);
            }
            panic!("the test Redis did not start: {why}; its log:\n{log}")
        }
    }
}

/// The URL of the Redis to test against, or `None` — only outside CI, when there is neither a
/// configured Redis nor a `redis-server` to start (the caller then skips, saying so).
///
/// # Panics
///
/// Under `CI=true` when no Redis can be had, and when `redis-server` is installed but does not
/// start (the panic shows its log).
pub fn redis_url() -> Option<String> {
    if let Ok(url) = std::env::var("AGENT_SURFACE_REDIS_URL") {
        return Some(url);
    }
    static PRIVATE: OnceLock<Option<Private>> = OnceLock::new();
    if let Some(p) = PRIVATE.get_or_init(private_server) {
        return Some(p.url.clone());
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must provide Redis: set AGENT_SURFACE_REDIS_URL or install redis-server"
    );
    tracing::warn!(target: "agent_surface::testing", "no AGENT_SURFACE_REDIS_URL and no redis-server: skipping");
    None
}

/// A `redis-server` a test started with [`RedisSite::start`]: killed when dropped, or stopped the
/// way an operator stops it with [`OwnRedis::stop`]. Dropped while its test fails, it prints the
/// last lines of its log.
#[derive(Debug)]
pub struct OwnRedis {
    child: Option<Child>,
    log: PathBuf,
}

impl OwnRedis {
    /// Starts a server of `site` listening on its socket and on a free loopback port (another one
    /// when a process took the first before Redis bound it), and waits until it answers `PING`.
    fn start(site: &RedisSite, extra: &[&str]) -> Result<OwnRedis, String> {
        let socket = site.socket();
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free loopback port: {e}"))?
                .port();
            let log_before = std::fs::metadata(&site.log).map_or(0, |m| usize::try_from(m.len()).unwrap_or(usize::MAX));
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
                .arg("--unixsocket")
                .arg(&socket)
                .args(["--unixsocketperm", "700"])
                .args(["--appendonly", "yes"])
                // Synced once a second, not per write: a sync per write makes every write wait for
                // the disk, which on a busy machine can take longer than a test's time budget. A
                // stop (SIGTERM) syncs before Redis exits, so nothing a restart reads back is lost.
                .args(["--appendfsync", "everysec"])
                .arg("--dir")
                .arg(&site.dir)
                .args(extra)
                // Its log, and what it says of a configuration it refuses, to the site's log.
                .stdout(log_file(&site.log)?)
                .stderr(log_file(&site.log)?)
                .spawn()
                .map_err(|e| format!("cannot start redis-server: {e}"))?;
            match wait_ready(&mut child, &socket) {
                Started::Ready => {
                    site.port.store(port, Ordering::Relaxed);
                    return Ok(OwnRedis { child: Some(child), log: site.log.clone() });
                }
                Started::Failed(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = std::fs::read(&site.log).unwrap_or_default();
                    let this_start = String::from_utf8_lossy(log.get(log_before..).unwrap_or_default());
                    last = format!("{why}; its log:\n{}", log_tail(&site.log));
                    // Another process took the port first: try another one.
                    if !this_start.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    /// Freezes the server (SIGSTOP) or thaws it (SIGCONT): while frozen, connections stay open
    /// and nothing answers.
    pub fn freeze(&self, frozen: bool) {
        if let Some(child) = &self.child {
            let signal = if frozen { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").arg(signal).arg(child.id().to_string()).status();
        }
    }

    /// Stops the server with SIGTERM (Redis flushes its append-only file and exits) and waits
    /// for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen server is killed all the same (SIGKILL needs no thaw).
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    #[expect(clippy::print_stderr, reason = "a failing test shows the server's log with its own output")]
    fn drop(&mut self) {
        let running = self.child.is_some();
        self.kill();
        if running && std::thread::panicking() {
            eprintln!("--- the test's redis-server log, last lines ---\n{}---", log_tail(&self.log));
        }
    }
}

/// A data folder (removed on drop) with a Unix socket in it, for a `redis-server` of a test's
/// own: start it, stop it and start it again on the same socket and data.
#[derive(Debug)]
pub struct RedisSite {
    dir: PathBuf,
    log: PathBuf,
    /// The loopback TCP port of the latest start (0 before the first).
    port: AtomicU16,
}

impl RedisSite {
    /// A site for the test named `test`, or `None` when `redis-server` is not installed.
    ///
    /// # Panics
    ///
    /// Under `CI=true` when `redis-server` is not installed.
    #[must_use]
    pub fn new(test: &str) -> Option<RedisSite> {
        if !installed() {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must install redis-server");
            return None;
        }
        let dir = fresh_dir(test)?;
        let log = dir.join("redis.log");
        Some(RedisSite { dir, log, port: AtomicU16::new(0) })
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// Starts (or restarts) the server, with every write appended to a file in the site's folder
    /// (synced once a second, and when [`OwnRedis::stop`] stops it), and waits until it answers
    /// (its data read back).
    ///
    /// # Panics
    ///
    /// When the server does not start (the panic shows its log).
    #[must_use]
    pub fn start(&self) -> OwnRedis {
        self.start_with(&[])
    }

    /// As [`RedisSite::start`], with `extra` arguments to `redis-server` (e.g. `--requirepass`).
    ///
    /// # Panics
    ///
    /// When the server does not start (the panic shows its log).
    #[must_use]
    pub fn start_with(&self, extra: &[&str]) -> OwnRedis {
        OwnRedis::start(self, extra).unwrap_or_else(|why| panic!("the test's redis-server did not start: {why}"))
    }

    /// The loopback TCP port the server of the latest [`RedisSite::start`] listens on besides its
    /// socket, for a test of `redis://` URLs (0 before the first start). A restart may get another
    /// one: [`RedisSite::url`] is the address that stays.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// `redis+unix://` and the path of the site's socket: the same for every start.
    #[must_use]
    pub fn url(&self) -> String {
        unix_url(&self.socket())
    }
}

impl Drop for RedisSite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
