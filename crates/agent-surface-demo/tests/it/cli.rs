//! The CLI binding as a shell sees it: exit statuses, what goes to which stream, a closed pipe.

use std::process::Stdio;

/// A handler panic (whose text holds an internal URL) reaches the caller as a sanitized
/// `EXECUTION_FAILED` on stderr; the panic text goes to the operator log file, not to stderr.
#[test]
fn panic_text_stays_off_stderr() {
    let dir = std::env::temp_dir().join(format!("agent-surface-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("operator.log");
    let out =
        crate::demo().args(["call", "reports.export"]).env("AGENT_SURFACE_DEMO_OPERATOR_LOG", &log).output().unwrap();
    assert_eq!(out.status.code(), Some(70));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("EXECUTION_FAILED (retry: no)"), "{stderr}");
    assert!(!stderr.contains("postgres://") && !stderr.contains("panicked"), "{stderr}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("panic"), "the operator log has the panic: {logged}");
    // Without the variable, the operator channel goes nowhere.
    let out = crate::demo().args(["call", "reports.export"]).env_remove("AGENT_SURFACE_DEMO_OPERATOR_LOG").output();
    let stderr = String::from_utf8(out.unwrap().stderr).unwrap();
    assert!(!stderr.contains("postgres://") && !stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that closed the pipe gets exit status 74 (`EX_IOERR`), not a panic.
#[test]
fn a_closed_stdout_is_an_io_error() {
    // The read end is closed before the child starts, so its first write fails whatever the
    // scheduling (closing it after the spawn raced with a child that wrote first).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = crate::demo()
        .args(["call", "orders.list", "--json"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(74), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// An id from another run means nothing to this one: `CONFIRMATION_INVALID {reason: expired}`
/// (as the engine answers an unknown id), never a claim that it belongs to another request.
#[test]
fn a_confirmation_id_from_another_run_is_unknown() {
    let out = crate::demo()
        .args([
            "call",
            "orders.cancel",
            "--input",
            r#"{"orderId":"A-1001"}"#,
            "--confirmation-id",
            "c-0123456789abcdef0123456789abcdef",
        ])
        .args(["--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["error"]["code"], "CONFIRMATION_INVALID");
    assert_eq!(result["error"]["details"]["reason"], "expired");
}
