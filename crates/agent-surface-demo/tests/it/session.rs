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
    // Two people: alice's agent gets the two-phase result over MCP (streamable HTTP), maria signs
    // in to the approval inbox of the same server and approves, the agent's repeat runs once.
    let inbox = stdout.split("━━ session 4").nth(1).expect("a session with the approval inbox");
    let steps = [
        "← isError: CONFIRMATION_REQUIRED  retry: with-confirmation",
        // The approval URL, opened before signing in, leads back to the confirmation after it.
        "→ GET /inbox/c/c-",
        "← 303 → /inbox/sign-in?c=c-",
        "→ POST /inbox/sign-in (form: token=…, csrf=…, c=c-",
        "← 303 → /inbox/c/c-",
        "  Set-Cookie: inbox_session=…; Path=/inbox/; HttpOnly; SameSite=Strict",
        "   input: {\"orderId\":\"A-1001\"}",
        "   waiting: Cancel order A-1001 and refund the customer in full. · orders.cancel · alice · destructive",
        "(form: verdict=approve, note=Customer asked by phone., csrf=…)\n← 303 → /inbox/c/c-",
        "   state: approved by maria",
        "← 403  page: \"Form refused\"",
        "← ok {\"orderId\":\"A-1001\",\"refundedCents\":4200}",
        "← isError: PRECONDITION_FAILED",
        "   decided: maria · approved · orders.cancel · alice · Customer asked by phone.",
    ];
    let mut rest = inbox;
    for step in steps {
        let at = rest.find(step).unwrap_or_else(|| panic!("{step:?} missing (in order) from session 4:\n{inbox}"));
        rest = &rest[at + step.len()..];
    }
    assert_eq!(inbox.matches("← ok ").count(), 1, "the cancellation ran once: {inbox}");
}
