//! Throwaway PostgreSQL clusters for the tests of the PostgreSQL stores.
//!
//! [`postgres_url`] answers the URL of the database to test against: `AGENT_SURFACE_POSTGRES_URL`
//! when set; otherwise a private cluster started once per test binary, when PostgreSQL is
//! installed. Under `CI=true` a missing PostgreSQL panics: a test that needs a service CI
//! provides fails rather than skips (`cargo xtask ci` installs Debian's `postgresql` package when
//! it is missing).
//!
//! A test that stops, kills or restarts the database needs a cluster of its own:
//! [`PgCluster::start`] makes one in a fresh folder under `/tmp` (its data, its socket, its log),
//! listening on a free loopback port, and [`PgCluster::stop`], [`PgCluster::kill`] and
//! [`PgCluster::restart`] act on it. Dropping it kills the server and removes the folder.
//!
//! **How a cluster is made.** `initdb` runs once per test binary into a template folder (trust
//! authentication for the superuser `postgres`, no sync: a template is only copied); each cluster
//! is a copy of it. PostgreSQL refuses to run as root, so when the tests run as root (CI does)
//! every PostgreSQL program runs as `nobody` through `setpriv`, in folders owned by `nobody`. The
//! server is started with `setpriv --pdeathsig KILL` from a thread that lives as long as the test
//! binary (the signal follows the thread that started the child), so a test binary that dies,
//! however it dies, takes its servers with it. The server loads `pg_stat_statements`, so a test
//! or a bench can count the statements a call sends.
//!
//! The binaries are found in `AGENT_SURFACE_PG_BIN` when set, else in the newest
//! `/usr/lib/postgresql/*/bin` (Debian's layout), else on the `PATH`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const START_WITHIN: Duration = Duration::from_secs(60);

/// The most lines of a server's log a failure prints.
const LOG_LINES: usize = 40;

/// The user and group the programs run as when the tests run as root.
const NOBODY: u32 = 65_534;

/// The folder of the PostgreSQL programs, if PostgreSQL is installed.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("AGENT_SURFACE_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("postgres").exists())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|dir| dir.join("postgres").exists() && dir.join("initdb").exists())
}

fn is_root() -> bool {
    // Asked once per process: the tests of one binary start clusters from several threads at
    // once, and a probe file shared between them (one name per process) could be removed by one
    // thread before another read it, taking root for another user (then `postgres` refuses to
    // start as root).
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        // The owner of a file this process just made is its effective user.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let probe = std::env::temp_dir().join(format!("as-uid-{}-{n}", std::process::id()));
        let uid = std::fs::write(&probe, b"").ok().and_then(|()| std::fs::metadata(&probe).ok().map(|m| m.uid()));
        let _ = std::fs::remove_file(&probe);
        uid == Some(0)
    })
}

/// A command that runs `program` of the PostgreSQL folder as the user the clusters belong to.
fn pg_command(bin: &Path, program: &str, die_with_us: bool) -> Command {
    let mut cmd = if is_root() {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups"]);
        if die_with_us {
            cmd.args(["--pdeathsig", "KILL"]);
        }
        cmd.arg(bin.join(program));
        cmd
    } else if die_with_us {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL"]).arg(bin.join(program));
        cmd
    } else {
        Command::new(bin.join(program))
    };
    cmd.stdin(Stdio::null());
    cmd
}

/// A fresh folder under `/tmp`, owned by the user the clusters run as.
fn fresh_dir(what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = PathBuf::from("/tmp").join(format!("as-pg-{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    give_away(&dir);
    dir
}

fn give_away(path: &Path) {
    if is_root() {
        let _ = Command::new("chown").args(["-R", &format!("{NOBODY}:{NOBODY}")]).arg(path).status();
    }
}

/// The template cluster (`initdb` once per test binary).
fn template(bin: &Path) -> PathBuf {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let dir = fresh_dir("template");
            let data = dir.join("data");
            let out = pg_command(bin, "initdb", false)
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
                .output()
                .unwrap_or_else(|e| panic!("cannot run initdb: {e}"));
            assert!(
                out.status.success(),
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            remove_on_exit(&dir);
            data
        })
        .clone()
}

/// Removes `dir` once this test binary has ended, however it ended (a small shell watcher; a
/// static cluster is never dropped).
fn remove_on_exit(dir: &Path) {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; sleep 1; rm -rf '{dir}'",
        pid = std::process::id(),
        dir = dir.display()
    );
    let _ = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// What the spawner thread is asked: a command to start, and where to send the child.
type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` from a thread that lives as long as the test binary, so that `--pdeathsig`
/// fires when the binary ends, not when the test's thread does.
fn spawn_lasting(cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (ask, asked) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("postgres-spawner".to_string())
            .spawn(move || {
                for (mut cmd, answer) in asked {
                    let _ = answer.send(cmd.spawn());
                }
                // Never reached while the binary runs (the sender is a static).
                loop {
                    std::thread::park();
                }
            })
            .expect("the spawner thread starts");
        Mutex::new(ask)
    });
    let (answer, answered) = mpsc::channel();
    spawner
        .lock()
        .map_err(|_| std::io::Error::other("spawner poisoned"))?
        .send((cmd, answer))
        .map_err(std::io::Error::other)?;
    answered.recv().map_err(std::io::Error::other)?
}

/// The last [`LOG_LINES`] lines of the log at `path`.
fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no log at {}: {e})\n", path.display()));
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(LOG_LINES)..].iter().map(|l| format!("{l}\n")).collect()
}

/// A PostgreSQL cluster of the test's own (see the module docs).
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    server: Option<Child>,
}

impl PgCluster {
    /// A fresh cluster named after `what`, started; `None` outside CI when PostgreSQL is not
    /// installed.
    ///
    /// # Panics
    ///
    /// Under `CI=true` when PostgreSQL is not installed, and when the server does not start
    /// (with its log).
    pub fn start(what: &str) -> Option<PgCluster> {
        let Some(bin) = bin_dir() else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI must install PostgreSQL (Debian's postgresql package)"
            );
            return None;
        };
        let template = template(&bin);
        let dir = fresh_dir(what);
        let copied = Command::new("cp").arg("-a").arg(&template).arg(dir.join("data")).status();
        assert!(copied.is_ok_and(|s| s.success()), "cannot copy the template cluster");
        give_away(&dir);
        let mut cluster = PgCluster { bin, dir, port: 0, server: None };
        cluster.launch();
        Some(cluster)
    }

    /// Starts the server on a fresh free port (on the same port once it had one), waiting until
    /// it accepts connections.
    fn launch(&mut self) {
        let log = self.dir.join("postgres.log");
        for _ in 0..5 {
            if self.port == 0 || self.server.is_none() && !port_free(self.port) {
                self.port = free_port();
            }
            let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("the log opens");
            give_away(&log);
            let mut cmd = pg_command(&self.bin, "postgres", true);
            cmd.arg("-D")
                .arg(self.dir.join("data"))
                .arg("-p")
                .arg(self.port.to_string())
                .arg("-k")
                .arg(&self.dir)
                .args(["-c", "listen_addresses=127.0.0.1", "-c", "shared_preload_libraries=pg_stat_statements"])
                .args(["-c", "max_connections=300", "-c", "log_min_messages=warning"])
                .stdout(file.try_clone().expect("the log opens"))
                .stderr(file);
            let mut child = spawn_lasting(cmd).unwrap_or_else(|e| panic!("cannot start postgres: {e}"));
            let deadline = Instant::now() + START_WITHIN;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let tail = log_tail(&log);
                    if tail.contains("Address already in use") {
                        self.port = free_port();
                        break;
                    }
                    panic!("postgres exited at start ({status}); its log:\n{tail}");
                }
                if self.ready() {
                    self.server = Some(child);
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "postgres did not accept connections within {START_WITHIN:?}; its log:\n{}",
                    log_tail(&log)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("postgres found no free port; its log:\n{}", log_tail(&log));
    }

    fn ready(&self) -> bool {
        Command::new(self.bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The URL of the cluster's `postgres` database, as its superuser `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server cleanly (a fast shutdown: SIGINT, every commit is on disk) and waits for
    /// it to end.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }

    /// Kills the server (SIGKILL: its backends notice and end; a restart recovers from the
    /// write-ahead log).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped (or killed) server again on the same port, waiting until it accepts
    /// connections.
    pub fn restart(&mut self) {
        self.kill_leftovers();
        self.launch();
    }

    /// Waits for the backends of a killed server to end (the data folder is locked until they
    /// do).
    fn kill_leftovers(&self) {
        let pid = self.dir.join("data").join("postmaster.pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while pid.exists() && Instant::now() < deadline {
            let held = std::fs::read_to_string(&pid).ok().and_then(|t| t.lines().next().map(str::to_string));
            let alive = held.is_some_and(|p| {
                Command::new("kill").args(["-0", &p]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
            });
            if !alive {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the server's log.
    pub fn log(&self) -> String {
        log_tail(&self.dir.join("postgres.log"))
    }
}

impl Drop for PgCluster {
    #[expect(clippy::print_stderr, reason = "a failing test shows the server's log with its own output")]
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("postgres log ({}):\n{}", self.dir.display(), self.log());
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// The URL of the PostgreSQL database to test against, or `None` — only outside CI, when there
/// is neither `AGENT_SURFACE_POSTGRES_URL` nor an installed PostgreSQL.
///
/// # Panics
///
/// Under `CI=true` when no PostgreSQL can be had, and when PostgreSQL is installed but does not
/// start (with its log).
pub fn postgres_url() -> Option<String> {
    if let Ok(url) = std::env::var("AGENT_SURFACE_POSTGRES_URL") {
        return Some(url);
    }
    static PRIVATE: OnceLock<Option<PgCluster>> = OnceLock::new();
    PRIVATE
        .get_or_init(|| {
            let cluster = PgCluster::start("private")?;
            remove_on_exit(&cluster.dir);
            Some(cluster)
        })
        .as_ref()
        .map(PgCluster::url)
}
