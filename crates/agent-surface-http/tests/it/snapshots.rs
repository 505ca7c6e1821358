//! The plain HTTP binding's wire form, pinned: for every case of the conformance corpus the status,
//! `Content-Type`, `Retry-After` and the exact body bytes (`wire::encode`), and the body of every
//! protocol fault. A change shows as a diff of the files under `snapshots/`; accept an intended
//! one with `UPDATE_EXPECT=1 cargo test -p agent-surface-http --test it snapshots` (see
//! `docs/testing.md`).

use agent_surface_http::wire::{self, ProtocolFault};

#[test]
fn every_case_as_the_binding_sends_it() {
    let text = agent_surface_testing::wire_snapshot(|result| {
        let encoded = wire::encode(result);
        let retry_after = encoded.retry_after.map_or_else(|| "-".to_string(), |s| s.to_string());
        format!(
            "status: {}\ncontent-type: {}\nretry-after: {retry_after}\n{}",
            encoded.status.as_u16(),
            encoded.content_type,
            encoded.body
        )
    });
    expect_test::expect_file!["snapshots/http_results.txt"].assert_eq(&text);
}

#[test]
fn every_protocol_fault_as_the_binding_sends_it() {
    let text: String = ProtocolFault::ALL
        .iter()
        .map(|fault| format!("## {}\nstatus: {}\n{}\n", fault.kind(), fault.status().as_u16(), fault.body()))
        .collect::<Vec<_>>()
        .join("\n");
    expect_test::expect_file!["snapshots/http_faults.txt"].assert_eq(&text);
}
