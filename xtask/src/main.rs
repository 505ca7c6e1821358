//! `cargo xtask`: project automation (matrix generation and verification, the CI entry point).

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool reports on the terminal")]

mod ci;
mod clients;
mod imports;
mod layers;
mod matrix;
mod phase_docs;
mod produced;
mod publish;
mod services;
mod step;
mod weight;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  gen-matrix      write spec/error-matrix.json, spec/recovery.json (and its copy in clients/python) and the
                  generated tables of spec/error-model.md, ARCHITECTURE.md and docs/recovery.md
  verify-matrix   check the matrix file, the enum, the examples, the docs tables, the phase docs and the tests agree
  matrix          print the error matrix as a readable table
  structure       check the crate layers (cargo metadata) and that no files of a crate import each other in a circle
  publish-check   the published crates' metadata, `cargo package` of them all, each adapter's feature builds, `cargo doc` without warnings
  ci              run the whole test suite (structure, build-weight --count, fmt, clippy, tests, verify-matrix,
                  publish-check, clients)
  clients         install the pinned real MCP clients into .tools/ and run them against the demo
  build-weight    crates and cold debug build of a downstream MCP-stdio service: default features against
                  the minimal set (`--count`: the crate counts alone, no build; `--dir DIR`: where to build;
                  `--timings`: Cargo's per-crate report of both builds)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("gen-matrix") => matrix::generate(&root),
        Some("verify-matrix") => matrix::verify(&root, None).map(|()| println!("verify-matrix: ok")),
        Some("matrix") => {
            print!("{}", matrix::readable_table());
            Ok(())
        }
        Some("structure") => ci::structure(&root).map(|()| println!("structure: ok")),
        Some("publish-check") => publish::run(&root),
        Some("ci") => ci::run(&root),
        Some("clients") => clients::run_all(&root),
        Some("build-weight") => weight::run(&root, &args[1..]),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
///
/// `cargo run` (and so `cargo xtask`) sets `CARGO_MANIFEST_DIR` for the process; that runtime value
/// wins over the one compiled in, so a binary built from another checkout still works on this one.
pub(crate) fn workspace_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The phases the matrix declares for `code`.
pub(crate) fn matrix_spec_phases(code: agent_surface_core::ErrorCode) -> &'static [agent_surface_core::Phase] {
    agent_surface_core::matrix::spec(code).phases
}
