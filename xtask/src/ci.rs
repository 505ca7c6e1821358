//! `cargo xtask ci`: the whole test suite, as the README's test command and `.ci/run` run it.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

fn step(root: &Path, name: &str, program: &str, args: &[&str]) -> Result<()> {
    step_with_env(root, name, program, args, &[("AGENT_SURFACE_CI", std::ffi::OsStr::new("1"))])
}

fn step_with_env(
    root: &Path,
    name: &str,
    program: &str,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<()> {
    println!("==> {name}: {program} {}", args.join(" "));
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("cannot start `{program}`"))?;
    println!("<== {name}: {status} in {:.1}s", start.elapsed().as_secs_f64());
    if !status.success() {
        bail!("step `{name}` failed ({status})");
    }
    Ok(())
}

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
    step(root, "fmt", &cargo, &["fmt", "--all", "--check"])?;
    step(root, "clippy", &cargo, &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    // The registry's `otel` feature is off in the workspace build: its lints and its test (an
    // in-memory span exporter) get their own steps, which compile the OpenTelemetry crates.
    let otel = ["-p", "agent-surface-registry", "--features", "otel-tests"];
    step(root, "clippy otel", &cargo, &[&["clippy"][..], &otel, &["--all-targets", "--", "-D", "warnings"]].concat())?;
    let evidence = crate::produced::fresh_evidence_dir(root)?;
    // The services the tests need, for as long as the tests run.
    let redis = crate::services::Redis::start()?;
    let env = [
        (crate::produced::EVIDENCE_ENV, evidence.as_os_str()),
        ("AGENT_SURFACE_REDIS_URL", std::ffi::OsStr::new(&redis.url)),
    ];
    step_with_env(root, "test", &cargo, &["test", "--workspace"], &env)?;
    step(root, "test otel", &cargo, &[&["test"][..], &otel, &["--test", "otel"]].concat())?;
    drop(redis);
    println!("==> verify-matrix");
    crate::matrix::verify(root, Some(&evidence))?;
    println!("<== verify-matrix: ok");
    println!("==> clients");
    crate::clients::run_all(root)?;
    println!("ci: all steps passed");
    Ok(())
}
