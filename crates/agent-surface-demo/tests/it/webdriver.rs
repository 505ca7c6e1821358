//! A small W3C WebDriver client for the real-browser test: Debian's `chromium`, driven headless
//! by `chromedriver` over its HTTP API (JSON in, JSON out), through the blocking HTTP client of
//! `served.rs`.
//!
//! [`Chrome::start`] finds the driver: `AGENT_SURFACE_WEBDRIVER_URL` when set (`cargo xtask ci`
//! starts `chromedriver` and sets it), otherwise a `chromedriver` this test starts itself on a
//! loopback port the driver picks and reports (`--port=0`: no port another process could take
//! first) and stops when done; what that driver says is printed when the test fails. When there
//! is neither, the test is skipped — except under `CI=true`, where it fails: CI must install
//! `chromium` and `chromium-driver`.
//!
//! Starting a browser is the slow step on a loaded machine: the driver is given
//! [`BROWSER_START`] for it (its default is a minute), the test waits for the answer as long, and a
//! browser that still did not start is tried again, [`BROWSER_TRIES`] times in all.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The longest a click waits for the page it starts to replace the current one.
const NAVIGATION_WAIT: Duration = Duration::from_secs(60);

/// How long the driver may take to start a browser (`goog:chromeOptions.browserStartupTimeout`).
const BROWSER_START: Duration = Duration::from_secs(180);

/// How many times a browser session is asked for before the test fails.
const BROWSER_TRIES: usize = 3;

/// The most lines a driver this test started keeps of what it says.
const KEPT_LINES: usize = 200;

/// The element reference key of the W3C protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The browser binary: `AGENT_SURFACE_CHROMIUM`, or Debian's.
fn chromium() -> PathBuf {
    std::env::var_os("AGENT_SURFACE_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// A `chromedriver` this process started, the last lines it wrote (its standard output and
/// error) and its log file (`--log-path`: every command, and why a browser did not start);
/// stopped when dropped, and what it said printed if the test is failing.
struct OwnDriver {
    child: Child,
    said: Arc<Mutex<VecDeque<String>>>,
    log: PathBuf,
}

impl OwnDriver {
    /// What it said, and the last lines of its log, as one text.
    fn said(&self) -> String {
        let said: String =
            self.said.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|l| format!("{l}\n")).collect();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail: String = lines[lines.len().saturating_sub(KEPT_LINES)..].iter().map(|l| format!("{l}\n")).collect();
        format!("{said}--- its log ({}), last lines ---\n{tail}", self.log.display())
    }
}

impl Drop for OwnDriver {
    #[expect(clippy::print_stderr, reason = "a failing test shows what the driver said with its own output")]
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- chromedriver's output, last lines ---\n{}---", self.said());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Keeps the last [`KEPT_LINES`] lines of `pipe` in `said`, on a thread of its own; each line is
/// also offered to `seen`.
fn keep_lines(
    pipe: impl Read + Send + 'static,
    said: &Arc<Mutex<VecDeque<String>>>,
    seen: impl Fn(&str) + Send + 'static,
) {
    let said = said.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            seen(&line);
            let mut said = said.lock().unwrap_or_else(PoisonError::into_inner);
            if said.len() == KEPT_LINES {
                said.pop_front();
            }
            said.push_back(line);
        }
    });
}

/// The port in `chromedriver`'s start-up line (`ChromeDriver was started successfully on port N.`).
fn reported_port(line: &str) -> Option<u16> {
    line.split("started successfully on port ").nth(1)?.trim().trim_end_matches('.').parse().ok()
}

/// A browser session; dropping it ends the session (the browser quits) and removes its profile.
pub(crate) struct Chrome {
    /// `127.0.0.1:PORT` of the driver.
    driver: String,
    session: String,
    profile: PathBuf,
    _own: Option<OwnDriver>,
}

/// Whether a driver answers `GET /status` with `ready` at `addr`.
fn ready(addr: &str) -> bool {
    std::net::TcpStream::connect(addr).is_ok()
        && serde_json::from_str::<Value>(&crate::served::get(addr, "/status", &[]).body)
            .is_ok_and(|v| v["value"]["ready"] == json!(true))
}

/// The driver to use: its address, and the process when this test started it.
fn driver() -> Option<(String, Option<OwnDriver>)> {
    if let Ok(url) = std::env::var("AGENT_SURFACE_WEBDRIVER_URL") {
        let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
        return Some((addr, None));
    }
    let chromedriver = std::env::var_os("AGENT_SURFACE_CHROMEDRIVER")
        .map_or_else(|| PathBuf::from("/usr/bin/chromedriver"), PathBuf::from);
    if !chromedriver.exists() || !chromium().exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must provide chromium and chromedriver (Debian: apt-get install chromium chromium-driver; \
             cargo xtask ci installs them), or AGENT_SURFACE_WEBDRIVER_URL"
        );
        #[allow(clippy::print_stderr, reason = "a skipped test says why")]
        {
            eprintln!("no chromium/chromedriver and no AGENT_SURFACE_WEBDRIVER_URL: skipping the browser test");
        }
        return None;
    }
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let log = std::env::temp_dir().join(format!("agent-surface-chromedriver-{}-{nonce}.log", std::process::id()));
    let mut child = Command::new(&chromedriver)
        .arg("--port=0")
        .arg(format!("--log-path={}", log.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
    let said = Arc::new(Mutex::new(VecDeque::new()));
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    keep_lines(child.stdout.take().unwrap(), &said, move |line| {
        if let Some(port) = reported_port(line) {
            let _ = port_tx.send(port);
        }
    });
    keep_lines(child.stderr.take().unwrap(), &said, |_| {});
    let mut own = OwnDriver { child, said, log };
    // Generous: a loaded machine can take many seconds to start a process.
    let port =
        port_rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("chromedriver reported no port"));
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(&addr) {
        assert!(own.child.try_wait().unwrap().is_none(), "chromedriver exited at start");
        assert!(Instant::now() < deadline, "chromedriver did not answer on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((addr, Some(own)))
}

impl Chrome {
    /// A fresh headless browser (its own profile), or `None` when the test is skipped.
    pub(crate) fn start() -> Option<Chrome> {
        let (driver, own) = driver()?;
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let profile = std::env::temp_dir().join(format!("agent-surface-chromium-{}-{nonce}", std::process::id()));
        std::fs::create_dir_all(&profile).unwrap();
        // As root on a closed network: no sandbox, and none of the background connections (which
        // the network refuses, slowly).
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=960,1100",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let startup = u64::try_from(BROWSER_START.as_millis()).unwrap_or(u64::MAX);
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium(), "args": args, "browserStartupTimeout": startup}
        }}});
        let mut tries = Vec::new();
        let session = loop {
            let answer = new_session(&driver, &capabilities);
            if let Some(session) = answer["value"]["sessionId"].as_str() {
                break session.to_string();
            }
            tries.push(answer);
            // A browser that did not start (`session not created`) is tried again; anything else
            // (a capability refused, say) would only fail again.
            let retry = tries.last().is_some_and(|a| a["value"]["error"] == "session not created");
            assert!(retry && tries.len() < BROWSER_TRIES, "no browser session after {} tries: {tries:#?}", tries.len());
        };
        Some(Chrome { driver, session, profile, _own: own })
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        call(&self.driver, method, &format!("/session/{}{path}", self.session), body.as_ref())
    }

    /// Opens `url` and waits for it to load.
    pub(crate) fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({"url": url})));
    }

    /// The page's URL.
    pub(crate) fn url(&self) -> String {
        self.command("GET", "/url", None).as_str().unwrap_or_default().to_string()
    }

    /// The page's title.
    pub(crate) fn title(&self) -> String {
        self.command("GET", "/title", None).as_str().unwrap_or_default().to_string()
    }

    /// The page's HTML.
    pub(crate) fn source(&self) -> String {
        self.command("GET", "/source", None).as_str().unwrap_or_default().to_string()
    }

    /// The first element matching the CSS `selector`; panics when there is none.
    pub(crate) fn find(&self, selector: &str) -> Element<'_> {
        let found = self.try_find(selector);
        found.unwrap_or_else(|| panic!("no element {selector} on {}:\n{}", self.url(), self.source()))
    }

    /// The first element matching the CSS `selector`, if any.
    pub(crate) fn try_find(&self, selector: &str) -> Option<Element<'_>> {
        let body = json!({"using": "css selector", "value": selector});
        let answer = call_raw(&self.driver, "POST", &format!("/session/{}/element", self.session), Some(&body));
        let id = answer["value"][ELEMENT].as_str()?.to_string();
        Some(Element { chrome: self, id })
    }

    /// The value of the cookie `name`, if the browser holds one for the page's site.
    pub(crate) fn cookie(&self, name: &str) -> Option<String> {
        let answer = call_raw(&self.driver, "GET", &format!("/session/{}/cookie/{name}", self.session), None);
        answer["value"]["value"].as_str().map(str::to_string)
    }

    /// A PNG of the window, written to `path`.
    pub(crate) fn screenshot(&self, path: &Path) {
        let encoded = self.command("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD.decode(encoded.as_str().unwrap_or_default()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Chrome {
    fn drop(&mut self) {
        // Ends the session: the browser quits.
        let _ = call_raw(&self.driver, "DELETE", &format!("/session/{}", self.session), None);
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// An element of the page.
pub(crate) struct Element<'a> {
    chrome: &'a Chrome,
    id: String,
}

impl Element<'_> {
    /// Clicks it (and waits for a navigation it starts).
    pub(crate) fn click(&self) {
        self.chrome.command("POST", &format!("/element/{}/click", self.id), Some(json!({})));
    }

    /// Clicks it and waits until the page it was on has been replaced (a form's submit button, a
    /// link): the old page's root element is stale then. Panics when no new page came within
    /// [`NAVIGATION_WAIT`].
    pub(crate) fn click_to_navigate(&self) {
        let old = self.chrome.find("html").id;
        self.click();
        let deadline = Instant::now() + NAVIGATION_WAIT;
        loop {
            let path = format!("/session/{}/element/{old}/name", self.chrome.session);
            let answer = call_raw(&self.chrome.driver, "GET", &path, None);
            if answer["value"]["error"] == "stale element reference" {
                return;
            }
            assert!(Instant::now() < deadline, "no new page after the click: {}", self.chrome.url());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `text` into it.
    pub(crate) fn type_text(&self, text: &str) {
        self.chrome.command("POST", &format!("/element/{}/value", self.id), Some(json!({"text": text})));
    }

    /// Its rendered text.
    pub(crate) fn text(&self) -> String {
        let answer = self.chrome.command("GET", &format!("/element/{}/text", self.id), None);
        answer.as_str().unwrap_or_default().to_string()
    }

    /// The computed value of its CSS property `name` (a color as `rgba(17, 99, 41, 1)`).
    pub(crate) fn css(&self, name: &str) -> String {
        let answer = self.chrome.command("GET", &format!("/element/{}/css/{name}", self.id), None);
        answer.as_str().unwrap_or_default().to_string()
    }

    /// Its `name` attribute's or property's current value.
    pub(crate) fn property(&self, name: &str) -> Option<String> {
        let answer = self.chrome.command("GET", &format!("/element/{}/property/{name}", self.id), None);
        answer.as_str().map(str::to_string)
    }
}

/// `POST /session` with `capabilities`: the full answer, errors included, waited for as long as
/// the driver may take to start a browser and a minute more (the testing kit's client otherwise
/// gives up after a minute). No answer at all reads as `{"value": {"error": "no answer", …}}`.
fn new_session(driver: &str, capabilities: &Value) -> Value {
    let body = capabilities.to_string();
    let headers = [("Host", driver), ("Content-Type", "application/json; charset=utf-8")];
    let within = BROWSER_START + Duration::from_secs(60);
    let response = agent_surface_testing::http::request_blocking_within(
        driver,
        "POST",
        "/session",
        &headers,
        body.as_bytes(),
        within,
    );
    serde_json::from_str(&response.body).unwrap_or_else(|_| {
        json!({"value": {"error": "no answer", "message": format!("HTTP {} {:?}", response.status, response.body)}})
    })
}

/// A command's full answer (`{"value": …}`, with `sessionId` for a new session), errors included.
fn call_raw(driver: &str, method: &str, path: &str, body: Option<&Value>) -> Value {
    let body = body.map(Value::to_string).unwrap_or_default();
    let headers = [("Content-Type", "application/json; charset=utf-8")];
    let response = crate::served::request(driver, method, path, &headers, body.as_bytes());
    serde_json::from_str(&response.body)
        .unwrap_or_else(|_| panic!("{method} {path}: HTTP {} {}", response.status, response.body))
}

/// A command's `value`; panics on a WebDriver error.
fn call(driver: &str, method: &str, path: &str, body: Option<&Value>) -> Value {
    let answer = call_raw(driver, method, path, body);
    let value = answer.get("value").cloned().unwrap_or(Value::Null);
    assert!(value.get("error").is_none(), "{method} {path}: {value}");
    value
}
