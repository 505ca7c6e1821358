//! The services the test suite needs, started and stopped by `cargo xtask ci`: Redis (the shared
//! stores of `agent-surface-redis`), on a free loopback port, with append-only persistence in a
//! temporary folder.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A running `redis-server`; dropping it stops the server and removes its folder.
pub(crate) struct Redis {
    child: Child,
    dir: PathBuf,
    /// `redis://127.0.0.1:PORT/`.
    pub(crate) url: String,
}

fn installed() -> bool {
    Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Installs Debian's `redis-server` with `apt-get` (the suite runs as root on CI machines; a
/// developer without root installs it themselves).
fn install() -> Result<()> {
    if !is_root() {
        bail!("redis-server is missing; install it (Debian: sudo apt-get install redis-server) and run again");
    }
    println!("==> install redis-server (apt-get)");
    let apt = |args: &[&str]| -> Result<()> {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .context("cannot run apt-get")?;
        if !status.success() {
            bail!("apt-get {} failed ({status})", args.join(" "));
        }
        Ok(())
    };
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", "redis-server"]).context(
        "redis-server is missing and could not be installed; install it (Debian: apt-get install redis-server)",
    )
}

/// Whether a Redis answers `PING` on `port`.
fn answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl Redis {
    /// Starts a private Redis (installing `redis-server` when it is missing).
    pub(crate) fn start() -> Result<Redis> {
        if !installed() {
            install()?;
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("agent-surface-ci-redis-{}-{nonce}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--appendonly", "yes", "--save", ""])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start redis-server")?;
        let mut redis = Redis { child, dir, url: format!("redis://127.0.0.1:{port}/") };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            // Our own server first: another process could have taken the port meanwhile.
            if redis.child.try_wait()?.is_some() {
                bail!("redis-server exited at start (port {port} taken?)");
            }
            if answers(port) {
                break;
            }
            if Instant::now() > deadline {
                bail!("redis-server did not start on port {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("    redis: {} (append-only files in {})", redis.url, redis.dir.display());
        Ok(redis)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
