//! What the registry's benches (and `examples/profile_invoke.rs`) share: the capability they
//! call, the runtime they run on, and reading back the estimates criterion recorded in this run
//! (to print ratios against a baseline measured alongside).

#![allow(dead_code, reason = "each bench or example uses a part")]

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The input of the measured capability, `calc.add`.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Add {
    pub(crate) a: i64,
    pub(crate) b: i64,
    pub(crate) note: Option<String>,
}

/// Its output.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Sum {
    pub(crate) sum: i64,
}

/// The handler's work.
pub(crate) fn sum(i: Add) -> Sum {
    Sum { sum: i.a + i.b + i.note.map_or(0, |n| n.len() as i64) }
}

/// The input every call sends.
pub(crate) fn input() -> Value {
    json!({"a": 2, "b": 3, "note": "hi"})
}

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
