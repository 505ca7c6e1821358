//! Services a test suite needs from outside the process: Redis for the shared stores.
//!
//! [`redis_url`] answers the URL of the Redis to test against: `AGENT_SURFACE_REDIS_URL` when set
//! (`cargo xtask ci` starts one and sets it); otherwise a private `redis-server` started once per
//! test binary (on a free loopback port, without persistence, stopped when the process is gone)
//! when one is installed. Under `CI=true` a missing Redis panics: a test that needs a service CI
//! provides fails rather than skips.

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
