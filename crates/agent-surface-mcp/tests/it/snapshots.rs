//! The MCP wire form of every case of the conformance corpus, pinned: the `CallToolResult` JSON
//! the adapter sends (content text, `isError`, `structuredContent`, `_meta`), including each
//! payload's agent-facing message as MCP words it. A change shows as a diff of
//! `snapshots/mcp_results.txt`; accept an intended one with `UPDATE_EXPECT=1 cargo test -p
//! agent-surface-mcp --test it snapshots` (see `docs/testing.md`).

use agent_surface_mcp::codec;

#[test]
fn every_case_as_mcp_sends_it() {
    let text = agent_surface_testing::wire_snapshot(|result| {
        serde_json::to_string_pretty(&codec::encode(result.clone())).expect("a CallToolResult serializes")
    });
    expect_test::expect_file!["snapshots/mcp_results.txt"].assert_eq(&text);
}
