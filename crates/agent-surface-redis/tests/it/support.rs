//! Where the tests find Redis.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_surface_redis::{RedisConfig, RedisStores};

/// The URL of the Redis to test against (see `agent_surface_testing::services`).
pub(crate) fn redis_url() -> Option<String> {
    agent_surface_testing::services::redis_url()
}

/// Stores on the test Redis under a prefix of their own (tests share one Redis).
pub(crate) async fn stores(test: &str) -> Option<RedisStores> {
    stores_with(test, RedisConfig::default()).await
}

/// As [`stores`], with `config` (its prefix replaced).
pub(crate) async fn stores_with(test: &str, config: RedisConfig) -> Option<RedisStores> {
    let url = redis_url()?;
    // The process id and a clock reading: a rerun against a persistent Redis starts afresh.
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("it:{}:{nonce}:{test}:{}:", std::process::id(), unique());
    Some(RedisStores::connect(&url, RedisConfig { prefix, ..config }).await.expect("Redis answers"))
}

fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A `redis-server` of this test's own, with every write appended and synced to disk (the folder
/// outlives it: a restart reads it back).
pub(crate) struct Own {
    child: Option<Child>,
}

impl Own {
    /// As [`Own::start`], with `extra` arguments to `redis-server`.
    pub(crate) fn start_with(port: u16, dir: &std::path::Path, extra: &[&str]) -> Option<Own> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let own = Own { child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(own)
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers.
    pub(crate) fn freeze(&self, frozen: bool) {
        if let Some(child) = &self.child {
            let _ =
                Command::new("kill").arg(if frozen { "-STOP" } else { "-CONT" }).arg(child.id().to_string()).status();
        }
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: Redis flushes the append-only file and exits.
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A free loopback port and a data folder (removed on drop) for a `redis-server` of a test's own.
pub(crate) struct Site {
    pub(crate) port: u16,
    pub(crate) dir: std::path::PathBuf,
}

impl Site {
    /// A site for `test`; `None` when `redis-server` is not installed (which fails under
    /// `CI=true`).
    pub(crate) fn new(test: &str) -> Option<Site> {
        let installed = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
        if !installed {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must install redis-server");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let dir = std::env::temp_dir().join(format!("agent-surface-{test}-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Site { port, dir })
    }

    /// Starts (or restarts) the server; panics if it does not come up.
    pub(crate) fn start(&self) -> Own {
        self.start_with(&[])
    }

    /// As [`Site::start`], with `extra` arguments to `redis-server`.
    pub(crate) fn start_with(&self, extra: &[&str]) -> Own {
        Own::start_with(self.port, &self.dir, extra).expect("redis-server starts")
    }

    /// `redis://127.0.0.1:{port}/`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
