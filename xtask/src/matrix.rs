//! `gen-matrix` and `verify-matrix`: the matrix in code is the single source of truth; the JSON
//! file, the docs tables and the tests are checked against it.

use std::fmt::Write as _;
use std::path::Path;

use agent_surface_core::matrix::{self, DetailsSpec, MATRIX};
use agent_surface_core::{ErrorCode, ErrorPayload, examples, render};
use anyhow::{Context, Result, bail};
use serde_json::Value;

const MATRIX_FILE: &str = "spec/error-matrix.json";
const RECOVERY_DOC: &str = "docs/recovery.md";

/// The client decision table as JSON: in `spec/`, and as the Python helper's package data.
const RECOVERY_FILES: [&str; 2] = ["spec/recovery.json", "clients/python/agent_surface/recovery.json"];
/// The wire mappings onto the proposed protocol shapes (`agent_surface_core::wire`).
const WIRE_FILE: &str = "spec/wire-mappings.json";
const MODEL_DOC: &str = "spec/error-model.md";
const ARCHITECTURE_DOC: &str = "ARCHITECTURE.md";
const REGEN: &str = "run `cargo xtask gen-matrix`";

/// A generated section of a markdown file, between two marker lines.
struct Section {
    name: &'static str,
    render: fn() -> String,
}

/// A markdown file with generated sections.
struct Doc {
    path: &'static str,
    sections: &'static [Section],
}

const DOCS: &[Doc] = &[
    Doc {
        path: MODEL_DOC,
        sections: &[
            Section { name: "codes", render: render::markdown_table },
            Section { name: "definition-errors", render: render::definition_markdown_table },
        ],
    },
    Doc { path: ARCHITECTURE_DOC, sections: &[Section { name: "phases", render: render::phase_markdown_table }] },
    Doc { path: RECOVERY_DOC, sections: &[Section { name: "decisions", render: render::recovery_markdown_table }] },
];

fn begin_marker(name: &str) -> String {
    format!("<!-- BEGIN GENERATED: {name} (cargo xtask gen-matrix; do not edit) -->")
}

fn end_marker(name: &str) -> String {
    format!("<!-- END GENERATED: {name} -->")
}

/// Replaces the body of each generated section of `doc` in `text`.
fn splice(text: &str, doc: &Doc) -> Result<String> {
    let path = doc.path;
    let mut out = text.to_string();
    for s in doc.sections {
        let (begin, end) = (begin_marker(s.name), end_marker(s.name));
        let start = out.find(&begin).with_context(|| format!("{path}: marker `{begin}` is missing"))?;
        let body_start = start + begin.len();
        let stop = out[body_start..]
            .find(&end)
            .map(|i| body_start + i)
            .with_context(|| format!("{path}: marker `{end}` is missing"))?;
        out.replace_range(body_start..stop, &format!("\n{}", (s.render)()));
    }
    Ok(out)
}

pub(crate) fn generate(root: &Path) -> Result<()> {
    let json_path = root.join(MATRIX_FILE);
    std::fs::write(&json_path, render::to_json_string()).with_context(|| format!("writing {}", json_path.display()))?;
    println!("wrote {MATRIX_FILE}");
    for file in RECOVERY_FILES {
        let path = root.join(file);
        std::fs::write(&path, render::recovery_json_string()).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {file}");
    }
    let wire_path = root.join(WIRE_FILE);
    std::fs::write(&wire_path, agent_surface_core::wire::to_json_string())
        .with_context(|| format!("writing {}", wire_path.display()))?;
    println!("wrote {WIRE_FILE}");
    for doc in DOCS {
        let doc_path = root.join(doc.path);
        let text = std::fs::read_to_string(&doc_path).with_context(|| format!("reading {}", doc_path.display()))?;
        let new = splice(&text, doc)?;
        if new != text {
            std::fs::write(&doc_path, new)?;
            println!("updated the generated tables of {}", doc.path);
        }
    }
    Ok(())
}

/// Every check: the static ones, then the produced-in-phase evidence (collected by running the
/// registry's tests unless `evidence` names a directory a test run already filled).
pub(crate) fn verify(root: &Path, evidence: Option<&Path>) -> Result<()> {
    verify_static(root)?;
    crate::produced::check(root, evidence)?;
    Ok(())
}

/// The checks that need no test run: the file, the enum, the examples, the docs tables, the
/// codes the pipeline's phase modules declare.
pub(crate) fn verify_static(root: &Path) -> Result<()> {
    check_enum_and_matrix()?;
    check_examples()?;
    check_file(root)?;
    check_recovery_files(root)?;
    check_wire(root)?;
    check_docs(root)?;
    crate::phase_docs::check(root)?;
    Ok(())
}

/// Every enum variant has exactly one matrix row, in order, and wire names round-trip.
fn check_enum_and_matrix() -> Result<()> {
    if MATRIX.len() != ErrorCode::ALL.len() {
        bail!("the matrix has {} rows but ErrorCode has {} variants", MATRIX.len(), ErrorCode::ALL.len());
    }
    for (row, code) in MATRIX.iter().zip(ErrorCode::ALL) {
        if row.code != code {
            bail!("matrix row for {} is where {} belongs (rows must follow ErrorCode::ALL)", row.code, code);
        }
        if ErrorCode::from_wire(code.as_str()) != Some(code) {
            bail!("{code}: wire name does not round-trip");
        }
        let json = serde_json::to_value(code)?;
        if json != code.as_str() {
            bail!("{code}: serializes as {json}, not as its wire name");
        }
        if row.phases.is_empty() {
            bail!("{code}: the matrix declares no producing phase");
        }
    }
    Ok(())
}

/// Each example payload validates against its code's details schema, uses only declared keys,
/// and round-trips through JSON unchanged.
fn check_examples() -> Result<()> {
    for row in &MATRIX {
        let code = row.code;
        let examples = examples::of(code);
        if examples.is_empty() {
            bail!("{code}: the matrix has no example payload");
        }
        let validator = match row.details {
            DetailsSpec::None => None,
            DetailsSpec::Typed { schema, .. } => Some(
                jsonschema::draft202012::new(&schema().to_value())
                    .map_err(|e| anyhow::anyhow!("{code}: details schema does not compile: {e}"))?,
            ),
        };
        for payload in &examples {
            if payload.code() != code {
                bail!("{code}: an example has code {}", payload.code());
            }
            let json = payload.to_json();
            match (&validator, json.get("details")) {
                (None, None) => {}
                (None, Some(_)) => bail!("{code}: example carries details, but the code has none"),
                (Some(_), None) => bail!("{code}: example has no details, but the code requires them"),
                (Some(v), Some(details)) => {
                    if let Some(err) = v.iter_errors(details).next() {
                        bail!("{code}: example details {details} do not validate against the schema: {err}");
                    }
                    if let (DetailsSpec::Typed { keys, open: false, .. }, Some(obj)) =
                        (row.details, details.as_object())
                        && let Some(k) = obj.keys().find(|k| !keys.contains(&k.as_str()))
                    {
                        bail!("{code}: example details key `{k}` is not an agent-visible key of the matrix");
                    }
                }
            }
            let text = serde_json::to_string(&json)?;
            let back: ErrorPayload =
                serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{code}: example does not parse back: {e}"))?;
            if &back != payload {
                bail!("{code}: example does not round-trip");
            }
        }
        for retry in row.retry.values() {
            if !examples.iter().any(|p| p.retry() == retry) {
                bail!("{code}: no example shows retry `{retry}` of its retry rule");
            }
        }
    }
    Ok(())
}

/// `spec/error-matrix.json` is exactly what the code generates.
fn check_file(root: &Path) -> Result<()> {
    let path = root.join(MATRIX_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{MATRIX_FILE} is missing; {REGEN}"))?;
    let expected = render::to_json_string();
    if text == expected {
        return Ok(());
    }
    let file: Value =
        serde_json::from_str(&text).with_context(|| format!("{MATRIX_FILE} is not valid JSON; {REGEN}"))?;
    let generated = render::to_json();
    let file_codes = file.get("codes").and_then(Value::as_array).cloned().unwrap_or_default();
    let gen_codes = generated["codes"].as_array().cloned().unwrap_or_default();
    for entry in &gen_codes {
        let name = entry["code"].as_str().unwrap_or_default();
        match file_codes.iter().find(|e| e.get("code").and_then(Value::as_str) == Some(name)) {
            None => bail!("{MATRIX_FILE} has no entry for {name}, which the enum has; {REGEN}"),
            Some(found) if found != entry => {
                let field = first_differing_field(entry, found);
                bail!("{MATRIX_FILE} disagrees with the code for {name} (field `{field}`); {REGEN}");
            }
            Some(_) => {}
        }
    }
    for entry in &file_codes {
        let name = entry.get("code").and_then(Value::as_str).unwrap_or("(no code)");
        if ErrorCode::from_wire(name).is_none() {
            bail!("{MATRIX_FILE} lists {name}, which is not a variant of ErrorCode; {REGEN}");
        }
    }
    if let (Some(f), Some(g)) = (file.as_object(), generated.as_object())
        && let Some(k) = g.keys().chain(f.keys()).find(|k| f.get(k.as_str()) != g.get(k.as_str()))
    {
        bail!("{MATRIX_FILE} disagrees with the code in `{k}`; {REGEN}");
    }
    bail!("{MATRIX_FILE} is not formatted as generated; {REGEN}")
}

/// The decision table's JSON files are exactly what the code generates.
fn check_recovery_files(root: &Path) -> Result<()> {
    let expected = render::recovery_json_string();
    for file in RECOVERY_FILES {
        let text = std::fs::read_to_string(root.join(file)).with_context(|| format!("{file} is missing; {REGEN}"))?;
        if text != expected {
            bail!("{file} disagrees with the decision table (crates/agent-surface-core/src/decision.rs); {REGEN}");
        }
    }
    Ok(())
}

/// The wire mappings agree with the matrix (`agent_surface_core::wire::check`: one row per code
/// and retry category it can produce, classes that follow the categories), and the generated
/// file is the table's.
fn check_wire(root: &Path) -> Result<()> {
    let problems = agent_surface_core::wire::check();
    if !problems.is_empty() {
        bail!(
            "the wire mappings (crates/agent-surface-core/src/wire.rs) disagree with the matrix:\n{}",
            problems.join("\n")
        );
    }
    let text =
        std::fs::read_to_string(root.join(WIRE_FILE)).with_context(|| format!("{WIRE_FILE} is missing; {REGEN}"))?;
    if text != agent_surface_core::wire::to_json_string() {
        bail!("{WIRE_FILE} disagrees with the wire mappings (crates/agent-surface-core/src/wire.rs); {REGEN}");
    }
    Ok(())
}

/// The most telling member in which two code entries differ (the retry rule before the examples
/// that follow from it).
fn first_differing_field(generated: &Value, found: &Value) -> String {
    const ORDER: &[&str] = &[
        "retry",
        "phases",
        "layer",
        "cacheableAsTerminal",
        "retryReusesInvocationId",
        "details",
        "handlerMayReturn",
        "httpStatus",
        "mcp",
        "logOnly",
        "adapterDuty",
        "meaning",
        "when",
        "examples",
    ];
    let differs = |k: &str| generated.get(k) != found.get(k);
    if let Some(k) = ORDER.iter().find(|k| differs(k)) {
        return (*k).to_string();
    }
    let keys = generated
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .chain(found.as_object().into_iter().flat_map(|o| o.keys()));
    keys.map(String::as_str).find(|k| differs(k)).unwrap_or("(unknown)").to_string()
}

/// The generated tables of `spec/error-model.md` and `ARCHITECTURE.md` match the matrix.
fn check_docs(root: &Path) -> Result<()> {
    for doc in DOCS {
        let path = root.join(doc.path);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{} is missing", doc.path))?;
        let expected = splice(&text, doc)?;
        if expected != text {
            let first = text
                .lines()
                .zip(expected.lines())
                .position(|(a, b)| a != b)
                .map(|i| format!(" (first difference at line {})", i + 1))
                .unwrap_or_default();
            bail!("the generated tables of {} disagree with the matrix{first}; {REGEN}", doc.path);
        }
    }
    let doc = std::fs::read_to_string(root.join(MODEL_DOC)).with_context(|| format!("{MODEL_DOC} is missing"))?;
    for code in ErrorCode::ALL {
        let heading = format!("### `{}`", code.as_str());
        if !doc.contains(&heading) {
            bail!("{MODEL_DOC} has no section `{heading}`");
        }
    }
    Ok(())
}

/// The matrix as a table for a terminal.
pub(crate) fn readable_table() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<26} {:<22} {:<56} {:<9} {:<5} details", "code", "phases", "retry", "cacheable", "http");
    for row in &MATRIX {
        let phases = row.phases.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(",");
        let mut retry = row.retry.default.as_str().to_string();
        for c in row.retry.conditions {
            let v = match c.equals {
                matrix::DetailValue::Str(s) => s.to_string(),
                matrix::DetailValue::Bool(b) => b.to_string(),
            };
            let _ = write!(retry, " | {} if {}={v}", c.then.as_str(), c.field);
        }
        let details = match row.details {
            DetailsSpec::None => "-".to_string(),
            DetailsSpec::Typed { keys, open, .. } => format!("{}{}", keys.join(","), if open { ",…" } else { "" }),
        };
        let _ = writeln!(
            out,
            "{:<26} {:<22} {:<56} {:<9} {:<5} {}",
            row.code.as_str(),
            phases,
            retry,
            if row.cacheable { "yes" } else { "no" },
            row.http_status.default,
            details
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo test` alone catches drift between the code and the generated files.
    #[test]
    fn matrix_is_up_to_date() {
        // The produced-in-phase evidence needs a test run of its own; `verify-matrix` does it.
        if let Err(e) = verify_static(&crate::workspace_root()) {
            panic!("{e:#}");
        }
    }

    #[test]
    fn a_changed_retry_rule_is_reported_with_its_code() {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join(MATRIX_FILE)).unwrap();
        let mut json: Value = serde_json::from_str(&text).unwrap();
        let timeout = json["codes"].as_array_mut().unwrap().iter_mut().find(|c| c["code"] == "TIMEOUT").unwrap();
        timeout["retry"]["default"] = "no".into();
        let dir = std::env::temp_dir().join(format!("xtask-verify-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("spec")).unwrap();
        std::fs::write(dir.join(MATRIX_FILE), serde_json::to_string_pretty(&json).unwrap() + "\n").unwrap();
        let err = check_file(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains("TIMEOUT") && err.contains("retry"), "{err}");
    }

    #[test]
    fn a_stale_recovery_file_is_reported() {
        let root = crate::workspace_root();
        let dir = std::env::temp_dir().join(format!("xtask-recovery-{}", std::process::id()));
        for file in RECOVERY_FILES {
            let path = dir.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::copy(root.join(file), &path).unwrap();
        }
        assert!(check_recovery_files(&dir).is_ok());
        let copy = dir.join(RECOVERY_FILES[1]);
        let text = std::fs::read_to_string(&copy).unwrap();
        std::fs::write(&copy, text.replacen("\"wait\"", "\"retry\"", 1)).unwrap();
        let err = check_recovery_files(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains(RECOVERY_FILES[1]) && err.contains("gen-matrix"), "{err}");
    }

    #[test]
    fn a_stale_wire_file_is_reported() {
        let root = crate::workspace_root();
        let dir = std::env::temp_dir().join(format!("xtask-wire-{}", std::process::id()));
        let path = dir.join(WIRE_FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(root.join(WIRE_FILE), &path).unwrap();
        assert!(check_wire(&dir).is_ok());
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"after-refresh\"", "\"no\"", 1)).unwrap();
        let err = check_wire(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains(WIRE_FILE) && err.contains("gen-matrix"), "{err}");
    }

    #[test]
    fn a_stale_docs_table_is_reported() {
        let root = crate::workspace_root();
        let doc = std::fs::read_to_string(root.join(MODEL_DOC)).unwrap();
        let edited = doc.replacen("| `TIMEOUT` |", "| `TIMEOUT ` |", 1);
        assert_ne!(doc, edited);
        let dir = std::env::temp_dir().join(format!("xtask-docs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("spec")).unwrap();
        std::fs::write(dir.join(MODEL_DOC), edited).unwrap();
        let err = check_docs(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains("disagree"), "{err}");
    }

    /// The phase table of `ARCHITECTURE.md` is generated: a hand edit (here, the drift this
    /// section once had: confirmation without `EXECUTION_FAILED`) fails the check.
    #[test]
    fn a_stale_phase_table_is_reported() {
        let root = crate::workspace_root();
        let arch = std::fs::read_to_string(root.join(ARCHITECTURE_DOC)).unwrap();
        let edited = arch.replacen(
            "`CONFIRMATION_INVALID`, `CANCELLED`, `EXECUTION_FAILED` |",
            "`CONFIRMATION_INVALID`, `CANCELLED` |",
            1,
        );
        assert_ne!(arch, edited);
        let dir = std::env::temp_dir().join(format!("xtask-arch-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("spec")).unwrap();
        std::fs::copy(root.join(MODEL_DOC), dir.join(MODEL_DOC)).unwrap();
        std::fs::write(dir.join(ARCHITECTURE_DOC), edited).unwrap();
        let err = check_docs(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(err.contains(ARCHITECTURE_DOC) && err.contains("disagree"), "{err}");
    }
}
