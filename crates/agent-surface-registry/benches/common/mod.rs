//! What the registry's benches (and `examples/profile_invoke.rs`) share: the capability they
//! call and the runtime they run on (the estimates criterion recorded are read back with
//! `agent_surface_testing::bench::median_ns`).

#![allow(dead_code, reason = "each bench or example uses a part")]

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
