//! `cargo run -p agent-surface-demo`: the scripted session.

use agent_surface_core::{ErrorCode, Retry};

#[test]
fn the_scripted_session_shows_every_code_and_retry_category() {
    let out = crate::demo().output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for code in ErrorCode::ALL {
        assert!(stdout.contains(&format!("isError: {code} ")), "{code} missing from the transcript");
    }
    for retry in Retry::ALL {
        assert!(stdout.contains(&format!("retry: {retry}\n")), "retry {retry} missing from the transcript");
    }
    // The operator channel stays out of the agent channel.
    assert!(!stdout.contains("postgres://"), "the panic text leaked");
    assert!(stdout.contains("the user clicks Approve"));
    // The modern era: the approval as an input-required round trip, then the call runs.
    let modern = stdout.split("━━ session 3").nth(1).expect("a modern session");
    assert!(modern.contains("← input_required: agent-surface/confirm = elicitation/create"), "{modern}");
    assert!(modern.contains("← ok {\"orderId\":\"A-1001\""), "{modern}");
}
