//! The codes each pipeline phase module declares, checked against the matrix's `phases`.
//!
//! Every phase module of `crates/agent-surface-registry/src/pipeline/` opens with a doc whose first
//! line is `Phase N — …` (`Nb` for a step reported under phase N: the ask step is 5b, reported as
//! `input`; verification is 8b, reported as `execute`) and whose `Codes:` (or `Code:`) paragraph
//! names the codes the phase can produce. A module that mentions `handlerMayReturn` there names
//! every code a handler may return. Both directions are checked:
//!
//! - a code a module names must be one the matrix gives that module's phase;
//! - every (code, phase) pair of the matrix must be named by a module of that phase.
//!
//! Phases past the last matrix phase (10, record) must declare no code.

use std::path::Path;

use agent_surface_core::matrix::MATRIX;
use agent_surface_core::{ErrorCode, Phase};
use anyhow::{Context, Result, bail};

/// Where the phase modules live.
pub(crate) const PIPELINE_DIR: &str = "crates/agent-surface-registry/src/pipeline";

/// What one module's doc declares.
#[derive(Debug, PartialEq)]
struct Declared {
    /// The file, for messages.
    file: String,
    /// The phase its codes are reported as (`None` for a phase past the matrix's, e.g. record).
    phase: Option<Phase>,
    /// The codes its `Codes:` paragraph names.
    codes: Vec<ErrorCode>,
}

/// Reads the phase modules under `root` and checks their declarations against the matrix.
pub(crate) fn check(root: &Path) -> Result<()> {
    let dir = root.join(PIPELINE_DIR);
    let mut files = Vec::new();
    collect(&dir, &dir, &mut files)?;
    files.sort();
    check_sources(&files)
}

fn collect(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect(base, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let name = path.strip_prefix(base).unwrap_or(&path).display().to_string();
            out.push((format!("{PIPELINE_DIR}/{name}"), text));
        }
    }
    Ok(())
}

/// The check over `(file name, source text)` pairs.
fn check_sources(files: &[(String, String)]) -> Result<()> {
    let mut declared = Vec::new();
    for (file, text) in files {
        if let Some(d) = parse(file, text)? {
            declared.push(d);
        }
    }
    let mut problems = Vec::new();
    for d in &declared {
        let Some(phase) = d.phase else {
            if !d.codes.is_empty() {
                problems.push(format!("{}: a phase the matrix does not know declares codes", d.file));
            }
            continue;
        };
        for code in &d.codes {
            if !agent_surface_core::matrix::spec(*code).phases.contains(&phase) {
                problems.push(format!(
                    "{}: its `Codes:` line names `{code}`, but the matrix does not give `{code}` the phase `{phase}`",
                    d.file
                ));
            }
        }
    }
    for row in &MATRIX {
        for phase in row.phases {
            let named = declared.iter().any(|d| d.phase == Some(*phase) && d.codes.contains(&row.code));
            if !named {
                problems.push(format!(
                    "the matrix declares `{}` in phase `{phase}`, but no `Phase` module of `{phase}` in {PIPELINE_DIR} names it in its `Codes:` line",
                    row.code
                ));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "the pipeline's phase docs disagree with the matrix (change the docs or the matrix's `phases`):\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// The declaration of one module, or `None` when its doc does not open with `Phase N`.
fn parse(file: &str, text: &str) -> Result<Option<Declared>> {
    let doc: Vec<&str> =
        text.lines().take_while(|l| l.starts_with("//!")).map(|l| l.trim_start_matches("//!").trim()).collect();
    let Some(number) = doc.first().and_then(|l| l.strip_prefix("Phase ")) else {
        return Ok(None);
    };
    let digits: String = number.chars().take_while(char::is_ascii_digit).collect();
    let n: usize = digits.parse().with_context(|| format!("{file}: `Phase` is not followed by a number"))?;
    if n == 0 {
        bail!("{file}: phases are numbered from 1");
    }
    let phase = Phase::ALL.get(n - 1).copied();
    // The paragraph that starts at `Codes:` (or `Code:`) and ends at the doc's next blank line.
    let joined = doc.join("\n");
    let start = joined.find("Codes:").or_else(|| joined.find("Code:"));
    let codes = match start {
        None if phase.is_some() => bail!("{file}: the doc of phase {n} has no `Codes:` line"),
        None => Vec::new(),
        Some(start) => {
            let paragraph = &joined[start..];
            let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
            codes_in(paragraph)
        }
    };
    Ok(Some(Declared { file: file.to_string(), phase, codes }))
}

/// The codes a paragraph names: the SCREAMING_SNAKE_CASE wire names it contains, and every code a
/// handler may return when it mentions `handlerMayReturn`.
fn codes_in(paragraph: &str) -> Vec<ErrorCode> {
    let mut codes: Vec<ErrorCode> =
        paragraph.split(|c: char| !(c.is_ascii_uppercase() || c == '_')).filter_map(ErrorCode::from_wire).collect();
    if paragraph.contains("handlerMayReturn") {
        codes.extend(MATRIX.iter().filter(|s| s.handler_may_return).map(|s| s.code));
    }
    codes.sort();
    codes.dedup();
    codes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_docs_agree_with_the_matrix() {
        if let Err(e) = check(&crate::workspace_root()) {
            panic!("{e:#}");
        }
    }

    fn sources() -> Vec<(String, String)> {
        let dir = crate::workspace_root().join(PIPELINE_DIR);
        let mut files = Vec::new();
        collect(&dir, &dir, &mut files).unwrap();
        files
    }

    #[track_caller]
    fn check_edit(file: &str, from: &str, to: &str, expected: &str) {
        let mut files = sources();
        let (_, text) = files.iter_mut().find(|(f, _)| f.ends_with(file)).unwrap();
        let edited = text.replacen(from, to, 1);
        assert_ne!(*text, edited, "the edit does not apply to {file}");
        *text = edited;
        let err = check_sources(&files).unwrap_err().to_string();
        assert!(err.contains(expected), "expected `{expected}` in:\n{err}");
    }

    #[test]
    fn a_code_the_matrix_does_not_give_the_phase_is_reported() {
        check_edit(
            "rate.rs",
            "Codes: `RATE_LIMITED",
            "Codes: `TIMEOUT`, `RATE_LIMITED",
            "rate.rs: its `Codes:` line names `TIMEOUT`, but the matrix does not give `TIMEOUT` the phase `rate`",
        );
    }

    #[test]
    fn a_pair_no_module_names_is_reported() {
        check_edit(
            "availability.rs",
            "Code:\n//! `CAPABILITY_NOT_AVAILABLE",
            "Code:\n//! `NOTHING",
            "the matrix declares `CAPABILITY_NOT_AVAILABLE` in phase `availability`, but no `Phase` module",
        );
    }

    #[test]
    fn a_paragraph_names_its_codes_and_the_handler_returned_ones() {
        let codes = codes_in("Codes: `TIMEOUT {timeoutMs}`, `CANCELLED`; not CANCELLED_X nor timeout.");
        assert_eq!(codes, [ErrorCode::Timeout, ErrorCode::Cancelled]);
        let codes = codes_in("Codes: the codes a handler may return (`handlerMayReturn`).");
        assert!(codes.contains(&ErrorCode::InvalidInput) && !codes.contains(&ErrorCode::Timeout), "{codes:?}");
        let d = parse("x.rs", "//! Phase 8b — verify.\n//!\n//! Codes: `EXECUTION_FAILED`.\n\nuse x;").unwrap();
        assert_eq!(d.map(|d| (d.phase, d.codes)), Some((Some(Phase::Execute), vec![ErrorCode::ExecutionFailed])));
        assert_eq!(parse("mod.rs", "//! The invocation pipeline.\n").unwrap(), None);
    }
}
