//! Services a test suite needs from outside the process: Redis for the shared stores.
//!
//! [`redis_url`] answers the URL of the Redis to test against: `AGENT_SURFACE_REDIS_URL` when set
//! (`cargo xtask ci` starts one and sets it); otherwise a private `redis-server` started once per
//! test binary (on a free loopback port, without persistence, stopped when the process is gone)
//! when one is installed. Under `CI=true` a missing Redis panics: a test that needs a service CI
//! provides fails rather than skips.
//!
//! A test that stops, freezes or restarts Redis needs one of its own: [`RedisSite`] gives it a free
//! port and a data folder, and [`RedisSite::start`] a `redis-server` there with every write
//! appended to a file, so a restart after [`OwnRedis::stop`] (SIGTERM: Redis syncs the file before it
//! exits) reads back what the last one stored.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A `redis-server` this test binary started. A static is never dropped, so a small shell
/// watcher stops the server once this process is gone.
struct Private {
    url: String,
    _child: Child,
}

fn private_server() -> Option<Private> {
    Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().ok()?;
    let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let dir = std::env::temp_dir().join(format!("agent-surface-test-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let script = format!(
        "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no --dir '{}' & r=$!; \
         while kill -0 {} 2>/dev/null; do sleep 0.5; done; kill $r; rm -rf '{}'",
        dir.display(),
        std::process::id(),
        dir.display()
    );
    let child = Command::new("sh").arg("-c").arg(script).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(Private { url: format!("redis://127.0.0.1:{port}/"), _child: child });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The URL of the Redis to test against, or `None` — only outside CI, when there is neither a
/// configured Redis nor a `redis-server` to start (the caller then skips, saying so).
///
/// # Panics
///
/// Under `CI=true` when no Redis can be had.
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
/// way an operator stops it with [`OwnRedis::stop`].
#[derive(Debug)]
pub struct OwnRedis {
    child: Option<Child>,
}

impl OwnRedis {
    fn start(port: u16, dir: &std::path::Path, extra: &[&str]) -> Option<OwnRedis> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes"])
            // Synced once a second, not per write: a sync per write makes every write wait for the
            // disk, which on a busy machine can take longer than a test's time budget. A stop
            // (SIGTERM) syncs before Redis exits, so nothing a restart reads back is lost.
            .args(["--appendfsync", "everysec"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let own = OwnRedis { child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(own)
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
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A free loopback port and a data folder (removed on drop) for a `redis-server` of a test's own:
/// start it, stop it and start it again on the same port and data.
#[derive(Debug)]
pub struct RedisSite {
    port: u16,
    dir: std::path::PathBuf,
}

impl RedisSite {
    /// A site for the test named `test`, or `None` when `redis-server` is not installed.
    ///
    /// # Panics
    ///
    /// Under `CI=true` when `redis-server` is not installed.
    #[must_use]
    pub fn new(test: &str) -> Option<RedisSite> {
        let installed = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
        if !installed {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must install redis-server");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let dir = std::env::temp_dir().join(format!("agent-surface-{test}-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(RedisSite { port, dir })
    }

    /// Starts (or restarts) the server, with every write appended to a file in the site's folder
    /// (synced once a second, and when [`OwnRedis::stop`] stops it).
    ///
    /// # Panics
    ///
    /// When the server does not accept connections within 10 s.
    #[must_use]
    pub fn start(&self) -> OwnRedis {
        self.start_with(&[])
    }

    /// As [`RedisSite::start`], with `extra` arguments to `redis-server` (e.g. `--requirepass`).
    ///
    /// # Panics
    ///
    /// When the server does not accept connections within 10 s.
    #[must_use]
    pub fn start_with(&self, extra: &[&str]) -> OwnRedis {
        OwnRedis::start(self.port, &self.dir, extra).expect("redis-server starts")
    }

    /// The site's port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:{port}/`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for RedisSite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
