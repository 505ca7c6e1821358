//! Fuzz target `invoke_input`: see `agent_surface_fuzz::invoke_input` for what it drives and asserts.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_surface_fuzz::invoke_input(data));
