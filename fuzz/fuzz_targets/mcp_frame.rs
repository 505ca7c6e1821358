//! Fuzz target `mcp_frame`: see `agent_surface_fuzz::mcp_frame` for what it drives and asserts.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_surface_fuzz::mcp_frame(data));
