//! `cargo xtask ci`: the whole test suite, as the README's test command and `.ci/run` run it.

use anyhow::Result;
use std::path::Path;

use crate::step::{step, step_with_env};

/// The structure checks: the crate graph follows the layers (`cargo metadata`), and no files of a
/// crate import each other in a circle. Fast (no build), so `ci` runs them first.
pub(crate) fn structure(root: &Path) -> Result<()> {
    crate::layers::check(root)?;
    crate::imports::check(root)?;
    Ok(())
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    println!("==> structure");
    structure(root)?;
    println!("<== structure: ok");
    // The crate budget of a minimal downstream service (#29): `cargo tree` only, no build.
    println!("==> build weight: cargo xtask build-weight --count");
    crate::weight::run(root, &["--count".to_string()])?;
    println!("<== build weight: ok");
    step(root, "fmt", &cargo, &["fmt", "--all", "--check"])?;
    step(root, "clippy", &cargo, &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    // The registry's `otel` and `http` features are off in the workspace build: their lints and
    // tests (an in-memory span exporter; `UpstreamStatus::from_response`) get their own steps,
    // which compile the OpenTelemetry crates.
    let otel = ["-p", "agent-surface-registry", "--features", "otel-tests,http"];
    step(root, "clippy otel", &cargo, &[&["clippy"][..], &otel, &["--all-targets", "--", "-D", "warnings"]].concat())?;
    let evidence = crate::produced::fresh_evidence_dir(root)?;
    // The services the tests need, for as long as the tests run.
    let redis = crate::services::Redis::start()?;
    crate::services::ensure_postgres()?;
    let chromedriver = crate::services::Chromedriver::start()?;
    // The browser test's screenshots of the approval inbox.
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let artifacts = target.join("browser-artifacts");
    println!("    browser test screenshots: {}", artifacts.display());
    let env = [
        (crate::produced::EVIDENCE_ENV, evidence.as_os_str()),
        ("AGENT_SURFACE_REDIS_URL", std::ffi::OsStr::new(&redis.url)),
        ("AGENT_SURFACE_WEBDRIVER_URL", std::ffi::OsStr::new(&chromedriver.url)),
        ("AGENT_SURFACE_ARTIFACTS_DIR", artifacts.as_os_str()),
    ];
    step_with_env(root, "test", &cargo, &["test", "--workspace"], &env)?;
    step(root, "test otel", &cargo, &[&["test"][..], &otel, &["--test", "otel"]].concat())?;
    step(root, "test http feature", &cargo, &[&["test"][..], &otel, &["--lib", "host_errors"]].concat())?;
    drop(chromedriver);
    drop(redis);
    println!("==> verify-matrix");
    crate::matrix::verify(root, Some(&evidence))?;
    println!("<== verify-matrix: ok");
    println!("==> publish-check");
    crate::publish::run(root)?;
    println!("==> clients");
    crate::clients::run_all(root)?;
    println!("ci: all steps passed");
    Ok(())
}
