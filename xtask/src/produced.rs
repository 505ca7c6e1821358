//! "Produced in phase" evidence: every (code, phase) pair the matrix declares must be produced by
//! at least one test through the public API.
//!
//! Tests record evidence by calling `assert_produced(&invocation, ErrorCode::X, Phase::Y)`, a
//! helper that *asserts* the invocation ended with code X in phase Y (the phase comes from
//! `Registry::invoke_detailed`). This check scans the integration tests (`crates/*/tests/**.rs`)
//! for those calls; `cargo test` proves the assertions hold. So the check cannot pass vacuously:
//! a pair with no asserting call fails here, and a call whose assertion is false fails the tests.
//! A call naming a pair the matrix does not declare fails here too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agent_surface_core::matrix::MATRIX;
use agent_surface_core::{ErrorCode, Phase};
use anyhow::{Context, Result, bail};

const CALL: &str = "assert_produced(";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn ident_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let start = text.find(prefix)? + prefix.len();
    let rest = &text[start..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
    Some(&rest[..end])
}

fn code_named(name: &str) -> Option<ErrorCode> {
    ErrorCode::ALL.into_iter().find(|c| format!("{c:?}") == name)
}

fn phase_named(name: &str) -> Option<Phase> {
    Phase::ALL.into_iter().find(|p| format!("{p:?}") == name)
}

/// The (code, phase) pairs asserted by tests, with where each was found.
pub(crate) fn evidence(root: &Path) -> Result<Vec<(ErrorCode, Phase, String)>> {
    let mut files = Vec::new();
    let crates = root.join("crates");
    for entry in std::fs::read_dir(&crates).with_context(|| format!("reading {}", crates.display()))? {
        rust_files(&entry?.path().join("tests"), &mut files)?;
    }
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let rel = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        let mut rest = text.as_str();
        while let Some(i) = rest.find(CALL) {
            let line = text[..text.len() - rest.len() + i].lines().count().max(1);
            let after = &rest[i + CALL.len()..];
            let call = &after[..after.find(';').unwrap_or(after.len())];
            rest = after;
            // The helper's own definition names the types, not variants.
            let (Some(code), Some(phase)) = (ident_after(call, "ErrorCode::"), ident_after(call, "Phase::")) else {
                continue;
            };
            let where_ = format!("{rel}:{line}");
            let code = code_named(code).with_context(|| format!("{where_}: unknown code ErrorCode::{code}"))?;
            let phase = phase_named(phase).with_context(|| format!("{where_}: unknown phase Phase::{phase}"))?;
            found.push((code, phase, where_));
        }
    }
    Ok(found)
}

pub(crate) fn check(root: &Path) -> Result<()> {
    let found = evidence(root)?;
    for (code, phase, where_) in &found {
        if !crate::matrix_spec_phases(*code).contains(phase) {
            bail!("{where_}: a test asserts {code} in phase {phase}, which the matrix does not declare for it");
        }
    }
    let have: BTreeSet<(ErrorCode, Phase)> = found.iter().map(|(c, p, _)| (*c, *p)).collect();
    for row in &MATRIX {
        for phase in row.phases {
            if !have.contains(&(row.code, *phase)) {
                bail!(
                    "{} is declared in phase {phase}, but no test asserts it there \
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

    fn tree(test_source: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-produced-{}-{}", std::process::id(), test_source.len()));
        std::fs::create_dir_all(dir.join("crates/x/tests/it")).unwrap();
        std::fs::write(dir.join("crates/x/tests/it/a.rs"), test_source).unwrap();
        dir
    }

    #[test]
    fn finds_asserted_pairs_with_their_location() {
        let dir = tree("fn t() {\n    assert_produced(&inv, ErrorCode::Timeout, Phase::Execute);\n}\n");
        let found = evidence(&dir).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].0, found[0].1), (ErrorCode::Timeout, Phase::Execute));
        assert!(found[0].2.ends_with("a.rs:2"), "{}", found[0].2);
    }

    #[test]
    fn a_missing_pair_fails_naming_the_code() {
        let dir = tree("assert_produced(&inv, ErrorCode::Timeout, Phase::Execute);");
        let err = check(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains("CAPABILITY_NOT_FOUND"), "{err}");
    }

    #[test]
    fn an_undeclared_pair_fails() {
        let dir = tree("assert_produced(&inv, ErrorCode::Timeout, Phase::Admission);");
        let err = check(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains("does not declare"), "{err}");
    }

    #[test]
    fn the_helper_definition_is_not_evidence() {
        let dir = tree("pub(crate) fn assert_produced(invocation: &Invocation, code: ErrorCode, phase: Phase) {}");
        assert!(evidence(&dir).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }
}
