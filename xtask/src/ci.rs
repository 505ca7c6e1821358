//! `cargo xtask ci`: the whole test suite, as the README's test command and `.ci/run` run it.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

fn step(root: &Path, name: &str, program: &str, args: &[&str]) -> Result<()> {
    println!("==> {name}: {program} {}", args.join(" "));
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("cannot start `{program}`"))?;
    println!("<== {name}: {status} in {:.1}s", start.elapsed().as_secs_f64());
    if !status.success() {
        bail!("step `{name}` failed ({status})");
    }
    Ok(())
}

pub(crate) fn run(root: &Path) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    step(root, "fmt", &cargo, &["fmt", "--all", "--check"])?;
    step(root, "clippy", &cargo, &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    step(root, "test", &cargo, &["test", "--workspace"])?;
    println!("==> verify-matrix");
    crate::matrix::verify(root)?;
    println!("<== verify-matrix: ok");
    println!("==> clients");
    crate::clients::run_all(root)?;
    println!("ci: all steps passed");
    Ok(())
}
