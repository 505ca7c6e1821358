//! "Produced in phase" evidence: every (code, phase) pair the matrix declares must be produced by
//! at least one test through the public API, and the test must actually have run and passed.
//!
//! The registry's tests call `assert_produced(&invocation, ErrorCode::X, Phase::Y)`, a helper
//! that asserts the invocation ended with code X in phase Y (the phase comes from
//! `Registry::invoke_detailed`) and, only once those assertions hold, appends `X Y` to a file in
//! the directory named by the `AGENT_SURFACE_EVIDENCE_DIR` environment variable. This check reads
//! those records, so it cannot pass vacuously: a commented-out, ignored, failing or never-called
//! assertion leaves no record. `cargo xtask ci` collects the records during its test step;
//! `cargo xtask verify-matrix` alone runs the registry's integration tests to collect them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_surface_core::matrix::MATRIX;
use agent_surface_core::{ErrorCode, Phase};
use anyhow::{Context, Result, bail};

/// The environment variable that tells `assert_produced` where to record evidence.
pub(crate) const EVIDENCE_ENV: &str = "AGENT_SURFACE_EVIDENCE_DIR";

/// An empty evidence directory under `target/`.
pub(crate) fn fresh_evidence_dir(root: &Path) -> Result<PathBuf> {
    let dir = root.join("target").join("produced-evidence");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn code_named(name: &str) -> Option<ErrorCode> {
    ErrorCode::ALL.into_iter().find(|c| c.as_str() == name)
}

fn phase_named(name: &str) -> Option<Phase> {
    Phase::ALL.into_iter().find(|p| p.as_str() == name)
}

/// The (code, phase) pairs recorded in `dir`.
pub(crate) fn read_evidence(dir: &Path) -> Result<BTreeSet<(ErrorCode, Phase)>> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        for (n, line) in text.lines().enumerate() {
            let mut parts = line.split_whitespace();
            let (Some(code), Some(phase)) = (parts.next(), parts.next()) else { continue };
            let where_ = format!("{}:{}", path.display(), n + 1);
            let code = code_named(code).with_context(|| format!("{where_}: unknown code {code}"))?;
            let phase = phase_named(phase).with_context(|| format!("{where_}: unknown phase {phase}"))?;
            found.insert((code, phase));
        }
    }
    Ok(found)
}

/// Runs the registry's integration tests with evidence recording into a fresh directory.
fn collect(root: &Path) -> Result<PathBuf> {
    let dir = fresh_evidence_dir(root)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    println!("verify-matrix: running the registry's tests to collect produced-in-phase evidence");
    let status = Command::new(&cargo)
        .args(["test", "-q", "-p", "agent-surface-registry", "--test", "it"])
        .env(EVIDENCE_ENV, &dir)
        .current_dir(root)
        .status()
        .with_context(|| format!("cannot start `{cargo}`"))?;
    if !status.success() {
        bail!("the registry's tests failed ({status}); the produced-in-phase evidence is incomplete");
    }
    Ok(dir)
}

/// Checks the evidence in `evidence` (or collects it first).
pub(crate) fn check(root: &Path, evidence: Option<&Path>) -> Result<()> {
    let dir = match evidence {
        Some(dir) => dir.to_path_buf(),
        None => collect(root)?,
    };
    check_pairs(&read_evidence(&dir)?)
}

/// Every recorded pair is declared by the matrix, and every declared pair is recorded.
pub(crate) fn check_pairs(found: &BTreeSet<(ErrorCode, Phase)>) -> Result<()> {
    for (code, phase) in found {
        if !crate::matrix_spec_phases(*code).contains(phase) {
            bail!("a test produced {code} in phase {phase}, which the matrix does not declare for it");
        }
    }
    for row in &MATRIX {
        for phase in row.phases {
            if !found.contains(&(row.code, *phase)) {
                bail!(
                    "{} is declared in phase {phase}, but no test that ran asserted it there \
                     (add a test calling assert_produced(&invocation, ErrorCode::{:?}, Phase::{:?}))",
                    row.code,
                    row.code,
                    phase
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_declared() -> BTreeSet<(ErrorCode, Phase)> {
        MATRIX.iter().flat_map(|r| r.phases.iter().map(move |p| (r.code, *p))).collect()
    }

    #[test]
    fn complete_evidence_passes() {
        check_pairs(&all_declared()).unwrap();
    }

    #[test]
    fn a_missing_pair_fails_naming_the_code() {
        let mut found = all_declared();
        found.remove(&(ErrorCode::CapabilityNotFound, Phase::Resolve));
        let err = check_pairs(&found).unwrap_err().to_string();
        assert!(err.contains("CAPABILITY_NOT_FOUND") && err.contains("resolve"), "{err}");
    }

    #[test]
    fn an_undeclared_pair_fails() {
        let mut found = all_declared();
        found.insert((ErrorCode::Timeout, Phase::Admission));
        let err = check_pairs(&found).unwrap_err().to_string();
        assert!(err.contains("does not declare"), "{err}");
    }

    #[test]
    fn evidence_files_are_parsed() {
        let dir = std::env::temp_dir().join(format!("xtask-evidence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "TIMEOUT execute\nCANCELLED admission\n").unwrap();
        let found = read_evidence(&dir).unwrap();
        std::fs::write(dir.join("b.txt"), "NOPE execute\n").unwrap();
        let bad = read_evidence(&dir);
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(found.len(), 2);
        assert!(found.contains(&(ErrorCode::Timeout, Phase::Execute)));
        assert!(bad.is_err());
    }
}
