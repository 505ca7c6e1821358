//! What the registry's benches share: the runtime they run on and reading back the estimates
//! criterion recorded in this run (to print ratios against a baseline measured alongside).

use std::path::PathBuf;

use serde_json::Value;

/// A current-thread runtime, as one adapter task would drive the pipeline.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// The median estimate (ns) criterion recorded for benchmark `id` in this run (the median is
/// robust to the outliers a shared machine produces).
pub(crate) fn median_ns(id: &str) -> Option<f64> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("criterion").join(id).join("new/estimates.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}
