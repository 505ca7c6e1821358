//! The compiler's messages for handlers and asynchronous preconditions of a wrong shape
//! (`trybuild`; `.stderr` snapshots).

#[test]
fn handler_shapes() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
