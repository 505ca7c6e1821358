//! The services the test suite needs, started and stopped by `cargo xtask ci`: Redis (the shared
//! stores of `agent-surface-redis`), on a Unix socket in a temporary folder, with append-only
//! persistence there; and `chromedriver` (the demo's real-browser test of the approval inbox drives
//! Debian's headless `chromium` through it), on a loopback port it picks itself and reports. Each is
//! installed with `apt-get` when it is missing. Neither address can be taken by another process
//! between being chosen and being bound. PostgreSQL is only installed when missing
//! ([`ensure_postgres`]): its tests start throwaway clusters of their own.
//!
//! A service dies with the `xtask` that started it, however that ends, and so does everything the
//! service started (the browsers `chromedriver` runs): each runs in a process group of its own
//! under a small watcher ([`dies_with_us`]), which kills the whole group once the `xtask` is gone
//! (even killed by `SIGKILL`) or the service has ended; dropping the service kills the group too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The watcher: runs the service (`"$@"`) in the background, then waits while both the watched
/// process (`{pid}`) and the service live; once either is gone, kills its own process group (the
/// service, whatever the service started, and the watcher).
fn watcher_script(pid: u32) -> String {
    format!(
        "\"$@\" & s=$!; while kill -0 {pid} 2>/dev/null && kill -0 $s 2>/dev/null; do sleep 0.2; done; kill -KILL 0"
    )
}

/// `program` (arguments are added to the returned command), to be run in a process group of its
/// own that the watcher of [`watcher_script`] kills once the process `pid` is gone. The spawned child is the watcher, the group's leader: [`stop_group`] ends it all.
fn watched_by(pid: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new("sh");
    command.arg("-c").arg(watcher_script(pid)).arg("sh").arg(program).process_group(0);
    command
}

/// `program`, started so that it and everything it starts die with this `xtask` (see
/// [`watched_by`]).
pub(crate) fn dies_with_us(program: impl AsRef<std::ffi::OsStr>) -> Command {
    watched_by(std::process::id(), program)
}

/// Kills the process group `child` (a watcher of [`watched_by`]) leads, and waits for the watcher.
pub(crate) fn stop_group(child: &mut Child) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| format!("    | {l}\n")).collect()
}

/// A running `redis-server`; dropping it stops the server and removes its folder.
pub(crate) struct Redis {
    child: Child,
    dir: PathBuf,
    /// `redis+unix://` and the path of its socket.
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

/// Whether a Redis answers `PING` with `PONG` on the Unix socket at `path` (not while it is still
/// reading its data back).
fn answers(path: &Path) -> bool {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Waits until the service `name` just started as `child` answers (`ready`), failing if it exits
/// first or does not answer within `budget` (generous: a loaded machine can take many seconds to
/// start a process). The caller's guard stops the child on failure.
fn wait_ready(child: &mut Child, name: &str, budget: Duration, ready: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + budget;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("{name} exited at start ({status})");
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} did not answer within {} s", budget.as_secs());
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
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        // Short: a Unix socket's path must stay under about a hundred bytes.
        let dir = PathBuf::from("/tmp").join(format!("as-ci-redis-{}-{nonce}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let (socket, log) = (dir.join("redis.sock"), dir.join("redis.log"));
        // Its log, and what it says of a configuration it refuses.
        let out = std::fs::File::options().create(true).append(true).open(&log)?;
        let child = dies_with_us("redis-server")
            .args(["--port", "0", "--appendonly", "yes", "--save", ""])
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--unixsocketperm", "700"])
            .arg("--dir")
            .arg(&dir)
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("cannot start redis-server")?;
        let mut redis = Redis { child, dir, url: format!("redis+unix://{}", socket.display()) };
        if let Err(e) = wait_ready(&mut redis.child, "redis-server", Duration::from_secs(60), || answers(&socket)) {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("{e}; its log:\n{}", last_lines(&said, 40));
        }
        println!("    redis: {} (append-only files in {})", redis.url, redis.dir.display());
        Ok(redis)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        stop_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes sure PostgreSQL's programs are installed (Debian's `postgresql` package, installed when
/// missing): the tests of `agent-surface-postgres` and the demo's PostgreSQL replicas start
/// throwaway clusters of their own with them (`agent_surface_testing::postgres`), as `nobody`
/// when run as root. Nothing is started here.
pub(crate) fn ensure_postgres() -> Result<()> {
    let found = |root: &Path| {
        std::fs::read_dir(root).into_iter().flatten().flatten().any(|e| e.path().join("bin").join("postgres").exists())
    };
    if std::env::var_os("AGENT_SURFACE_PG_BIN").is_some() || found(Path::new("/usr/lib/postgresql")) {
        return Ok(());
    }
    install(&["postgresql"])?;
    if !found(Path::new("/usr/lib/postgresql")) {
        bail!("postgresql was installed but no /usr/lib/postgresql/*/bin/postgres is there");
    }
    Ok(())
}

/// Debian's browser and its WebDriver server.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A running `chromedriver`; dropping it stops the driver and any browser it still runs.
pub(crate) struct Chromedriver {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
}

/// Whether a WebDriver server at `addr` says it is ready (`GET /status`).
fn driver_ready(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else { return false };
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

/// The port in `chromedriver`'s start-up line (`ChromeDriver was started successfully on port N.`).
fn reported_port(line: &str) -> Option<u16> {
    line.split("started successfully on port ").nth(1)?.trim().trim_end_matches('.').parse().ok()
}

impl Chromedriver {
    /// Starts `chromedriver` (installing Debian's `chromium` and `chromium-driver` when either is
    /// missing) on a port it picks (`--port=0`) and reports on its standard output.
    pub(crate) fn start() -> Result<Chromedriver> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            install(&["chromium", "chromium-driver"])?;
        }
        let mut child = dies_with_us(CHROMEDRIVER)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start chromedriver")?;
        // What it says, kept for a failure to show; its port from its start-up line.
        let said = Arc::new(Mutex::new(String::new()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let keep = |pipe: Box<dyn Read + Send>, port: Option<std::sync::mpsc::Sender<u16>>| {
            let said = said.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let (Some(tx), Some(p)) = (&port, reported_port(&line)) {
                        let _ = tx.send(p);
                    }
                    let mut said = said.lock().unwrap_or_else(PoisonError::into_inner);
                    said.push_str(&line);
                    said.push('\n');
                }
            });
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            stop_group(&mut child);
            bail!("no output pipes from chromedriver");
        };
        keep(Box::new(stdout), Some(port_tx));
        keep(Box::new(stderr), None);
        let mut driver = Chromedriver { child, url: String::new() };
        let fail = |e: anyhow::Error| {
            let said = said.lock().unwrap_or_else(PoisonError::into_inner).clone();
            anyhow::anyhow!("{e}; it said:\n{}", last_lines(&said, 40))
        };
        let port = port_rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| fail(anyhow::anyhow!("chromedriver reported no port")))?;
        let addr = format!("127.0.0.1:{port}");
        wait_ready(&mut driver.child, "chromedriver", Duration::from_secs(60), || driver_ready(&addr)).map_err(fail)?;
        driver.url = format!("http://{addr}");
        println!("    chromedriver: {} (browser: {CHROMIUM}, headless)", driver.url);
        Ok(driver)
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        stop_group(&mut self.child);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the process `pid` is gone (or a zombie nobody has reaped yet).
    fn gone(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    }

    /// A service and what it started outlive neither the `xtask` (here a stand-in killed with
    /// SIGKILL, as a stopped run's `xtask` may be): the watcher kills the service's whole group.
    #[test]
    fn a_service_and_what_it_started_die_with_the_xtask() {
        let mut xtask = Command::new("sleep").arg("600").spawn().expect("a stand-in starts");
        let dir = std::env::temp_dir().join(format!("xtask-services-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let pid_file = dir.join("grandchild");
        // A service that starts a process of its own (as chromedriver starts browsers).
        let mut service = watched_by(xtask.id(), "sh")
            .arg("-c")
            .arg(format!("sleep 600 & echo $! > '{}'; wait", pid_file.display()))
            .spawn()
            .expect("the service starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        let grandchild = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file).ok().filter(|p| p.ends_with('\n')) {
                break pid.trim().to_string();
            }
            assert!(Instant::now() < deadline, "the service never started its own process");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!gone(&grandchild) && service.try_wait().expect("waitable").is_none(), "all running");

        xtask.kill().expect("SIGKILL");
        xtask.wait().expect("reaped");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let watcher_ended = service.try_wait().expect("waitable").is_some();
            if watcher_ended && gone(&grandchild) {
                break;
            }
            assert!(Instant::now() < deadline, "the service or its process outlived the xtask");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn chromedrivers_start_up_line_names_its_port() {
        assert_eq!(reported_port("ChromeDriver was started successfully on port 36037."), Some(36037));
        assert_eq!(reported_port("Only local connections are allowed."), None);
    }
}
