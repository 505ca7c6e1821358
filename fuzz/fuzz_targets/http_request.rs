//! Fuzz target `http_request`: see `agent_surface_fuzz::http_request` for what it drives and asserts.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_surface_fuzz::http_request(data));
