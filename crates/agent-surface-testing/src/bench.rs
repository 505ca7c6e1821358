//! Reading back what criterion measured in this run, so that a benchmark can print ratios
//! against a baseline measured alongside it (the project reports ratios, never absolute times).

use std::path::PathBuf;

/// The median estimate, in nanoseconds, that criterion recorded for benchmark `id` (its group and
/// name, e.g. `"stores/memory"`) in the current run, from `target/criterion/{id}/new/`; `None`
/// when there is none. The median is robust to the outliers a shared machine produces.
///
/// The target folder is `CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn median_ns(id: &str) -> Option<f64> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("criterion").join(id).join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}
