//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/` at the repository root) through
//! its driver, as ordinary tests on stable: every input the fuzzer kept, and every reproducer of
//! a fixed finding, is checked again by `cargo test`.

use std::path::{Path, PathBuf};

use agent_surface_fuzz::TARGETS;

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

/// Runs `target`'s driver on every file of its corpus; fails naming every file that panicked,
/// and when the corpus is missing or empty.
fn replay(target: &str) {
    let (_, run) = TARGETS.iter().find(|(name, _)| *name == target).unwrap_or_else(|| panic!("no target {target}"));
    let dir = corpus_root().join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!("the corpus of {target} is missing ({}: {e}); run the fuzzer to seed it", dir.display())
    });
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())).path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus of {target} ({}) is empty", dir.display());
    let mut failed = Vec::new();
    for file in &files {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            failed.push(file.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} corpus files failed:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[test]
fn invoke_input() {
    replay("invoke_input");
}

#[test]
fn mcp_frame() {
    replay("mcp_frame");
}

#[test]
fn toolset_args() {
    replay("toolset_args");
}

#[test]
fn http_request() {
    replay("http_request");
}

#[test]
fn payload_parse() {
    replay("payload_parse");
}

/// Every corpus directory belongs to a target, and every target has a test above.
#[test]
fn every_corpus_has_a_target() {
    let root = corpus_root();
    let entries =
        std::fs::read_dir(&root).unwrap_or_else(|e| panic!("the corpora are missing ({}: {e})", root.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display())).path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        assert!(TARGETS.iter().any(|(t, _)| *t == name), "{} is not the corpus of a known target", path.display());
    }
    assert_eq!(TARGETS.len(), 5, "a target was added: give it a replay test here");
}
