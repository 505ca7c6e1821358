//! The testing crate's conformance kit over the binding's encode/decode pair.

use agent_surface_core::InvokeResult;
use agent_surface_http::wire;
use agent_surface_testing::{assert_conformance, codec};

#[test]
fn the_http_encoding_is_conformant() {
    let http = codec(
        |r: &InvokeResult| wire::encode(r),
        |e: &wire::Encoded| wire::decode(e.status.as_u16(), &e.body).map_err(|e| e.to_string()),
    );
    assert_conformance(&http);
}

#[test]
fn the_payload_part_is_the_core_serialization() {
    for result in agent_surface_testing::cases() {
        let encoded = wire::encode(&result);
        match result.error_payload() {
            Some(p) => assert!(encoded.body.ends_with(&serde_json::to_string(p).unwrap()[1..])),
            None => assert_eq!(encoded.body, serde_json::to_string(&result).unwrap()),
        }
    }
}
