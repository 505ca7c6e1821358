//! Fuzz target `payload_parse`: see `agent_surface_fuzz::payload_parse` for what it drives and asserts.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_surface_fuzz::payload_parse(data));
