//! One step of a multi-step command (`ci`, `publish-check`): a program run in the workspace root,
//! announced, timed, and a failure named.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Runs `program args` in `root` as the step `name`, with `AGENT_SURFACE_CI=1`.
pub(crate) fn step(root: &Path, name: &str, program: &str, args: &[&str]) -> Result<()> {
    step_with_env(root, name, program, args, &[("AGENT_SURFACE_CI", std::ffi::OsStr::new("1"))])
}

/// As [`step`], with `env` set for the program (and not `AGENT_SURFACE_CI`).
pub(crate) fn step_with_env(
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
