//! The demo binary end to end: the scripted session, raw bytes to `serve --stdio`, and the HTTP
//! transport (DNS-rebinding protection, body limit, bearer-token identities).

mod http;
mod session;
mod stdio;

/// The demo binary under test.
fn demo() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent-surface-demo"))
}
