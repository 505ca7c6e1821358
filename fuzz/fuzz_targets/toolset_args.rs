//! Fuzz target `toolset_args`: see `agent_surface_fuzz::toolset_args` for what it drives and asserts.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_surface_fuzz::toolset_args(data));
