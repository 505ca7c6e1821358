//! The services the test suite needs, started and stopped by `cargo xtask ci`: Redis (the shared
//! stores of `agent-surface-redis`), on a free loopback port, with append-only persistence in a
//! temporary folder; and `chromedriver` (the demo's real-browser test of the approval inbox drives
//! Debian's headless `chromium` through it), on a free loopback port. Each is installed with
//! `apt-get` when it is missing.
//!
//! A service dies with the `xtask` that started it, however that ends: dropped when the step is
//! over, and killed by the kernel (`setpriv --pdeathsig KILL`, util-linux) when the `xtask` is
//! killed outright, so that no `redis-server` or `chromedriver` outlives a stopped run.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// `program`, started so that the kernel kills it when the thread that starts it ends (the
/// `xtask` killed, even by `SIGKILL`): through `setpriv --pdeathsig KILL` where util-linux's
/// `setpriv` is installed (Debian's default), else directly.
fn dies_with_us(program: &str) -> Command {
    let setpriv = Path::new("/usr/bin/setpriv");
    if setpriv.exists() {
        let mut command = Command::new(setpriv);
        command.args(["--pdeathsig", "KILL", "--", program]);
        command
    } else {
        Command::new(program)
    }
}

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

/// Installs Debian's `packages` with `apt-get` (the suite runs as root on CI machines; a
/// developer without root installs them themselves).
fn install(packages: &[&str]) -> Result<()> {
    let names = packages.join(" ");
    if !is_root() {
        bail!("{names}: missing; install (Debian: sudo apt-get install {names}) and run again");
    }
    println!("==> install {names} (apt-get)");
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
    apt(&[&["install", "-y", "-qq"][..], packages].concat())
        .with_context(|| format!("{names}: missing and could not be installed (Debian: apt-get install {names})"))
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

/// Waits until the service `name` just started as `child` answers `ready(port)`, failing if it
/// exits first (another process may have taken the port meanwhile: our own child is checked first)
/// or does not answer within `budget`. The caller's guard stops the child on failure.
fn wait_ready(child: &mut Child, name: &str, port: u16, budget: Duration, ready: fn(u16) -> bool) -> Result<()> {
    let deadline = Instant::now() + budget;
    loop {
        if child.try_wait()?.is_some() {
            bail!("{name} exited at start (port {port} taken?)");
        }
        if ready(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} did not start on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Redis {
    /// Starts a private Redis (installing `redis-server` when it is missing).
    pub(crate) fn start() -> Result<Redis> {
        if !installed() {
            install(&["redis-server"])?;
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("agent-surface-ci-redis-{}-{nonce}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let child = dies_with_us("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--appendonly", "yes", "--save", ""])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start redis-server")?;
        let mut redis = Redis { child, dir, url: format!("redis://127.0.0.1:{port}/") };
        wait_ready(&mut redis.child, "redis-server", port, Duration::from_secs(15), answers)?;
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

/// Debian's browser and its WebDriver server.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A running `chromedriver`; dropping it stops the driver (the browser test ends its own browser
/// sessions).
pub(crate) struct Chromedriver {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
}

/// Whether a WebDriver server on `port` says it is ready (`GET /status`).
fn driver_ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&answer).contains("\"ready\":true") {
            return true;
        }
    }
    false
}

impl Chromedriver {
    /// Starts `chromedriver` (installing Debian's `chromium` and `chromium-driver` when either is
    /// missing).
    pub(crate) fn start() -> Result<Chromedriver> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            install(&["chromium", "chromium-driver"])?;
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = dies_with_us(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start chromedriver")?;
        let mut driver = Chromedriver { child, url: format!("http://127.0.0.1:{port}") };
        wait_ready(&mut driver.child, "chromedriver", port, Duration::from_secs(30), driver_ready)?;
        println!("    chromedriver: {} (browser: {CHROMIUM}, headless)", driver.url);
        Ok(driver)
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service outlives neither the thread that started it: once that thread is gone (as when
    /// the `xtask` is killed), the kernel kills the service.
    #[test]
    fn a_service_dies_with_the_thread_that_started_it() {
        if !Path::new("/usr/bin/setpriv").exists() {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI machines have util-linux's setpriv");
            return;
        }
        let mut child = std::thread::spawn(|| {
            let child = dies_with_us("sleep").arg("30").spawn().expect("sleep starts");
            // `setpriv` asks for the signal before it runs the service; a thread gone before then
            // would leave nothing to watch (the xtask's thread lives for the whole step).
            std::thread::sleep(Duration::from_millis(500));
            child
        })
        .join()
        .expect("the starting thread ends");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().expect("waitable") {
                assert!(!status.success(), "killed, not finished: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "the service outlived the thread that started it");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
