//! Integration tests of the registry and the invocation pipeline, through the public API.

mod support;

mod adapter_hooks;
mod audit;
mod authority;
mod concurrency;
mod confirmation;
mod decoding;
mod definitions;
mod extract;
mod host_errors;
mod hostile;
mod leases;
mod names;
mod natural;
mod operator_log;
mod phases;
mod preconditions;
mod progress;
mod questions;
mod rate;
mod robustness;
mod surface;
mod target_argument;
mod tasks;
#[cfg(feature = "metrics")]
mod telemetry;
mod tool_versions;
mod verify;
mod wiring;
