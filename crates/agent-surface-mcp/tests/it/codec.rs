//! The adapter's encode/decode pair under the testing crate's conformance kit: every code with
//! every retry category it can take survives the MCP wire form (serialized JSON) unchanged, its
//! message worded for a model, which sends only a tool's arguments.

use agent_surface_core::InvokeResult;
use agent_surface_core::message::Sends;
use agent_surface_mcp::codec;
use agent_surface_testing::{ConformanceConfig, assert_conformance_with};
use rmcp::model::CallToolResult;

#[test]
fn the_mcp_wire_form_is_lossless_for_every_code_and_retry() {
    let mcp = agent_surface_testing::codec(
        |r: &InvokeResult| serde_json::to_string(&codec::encode(r.clone())).unwrap(),
        |wire: &String| {
            let parsed: CallToolResult = serde_json::from_str(wire).map_err(|e| e.to_string())?;
            codec::decode(&parsed).map_err(|e| e.to_string())
        },
    );
    assert_conformance_with(
        &mcp,
        &ConformanceConfig { compare_invocation_ids: true, sends: Sends::Arguments, ..Default::default() },
    );
}

#[test]
fn error_results_never_carry_structured_content() {
    for case in agent_surface_testing::cases() {
        let wire = serde_json::to_value(codec::encode(case.clone())).unwrap();
        if case.is_ok() {
            assert_eq!(wire["isError"], false);
        } else {
            assert_eq!(wire["isError"], true);
            assert!(wire.get("structuredContent").is_none(), "{wire}");
            assert_eq!(wire["content"].as_array().unwrap().len(), 1);
        }
    }
}
