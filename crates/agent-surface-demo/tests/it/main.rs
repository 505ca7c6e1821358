//! The demo binary end to end: the scripted session, raw bytes to `serve --stdio`, and the HTTP
//! transport (DNS-rebinding protection, body limit, bearer-token identities), and one payload over
//! every transport (toolset, MCP, HTTP, CLI), and the server as an operator runs it (log, drain);
//! and the same schemas through every consumer of them, which must agree (`schemas`); and the
//! approval inbox in a real browser (`browser`, headless Chromium over WebDriver).

mod browser;
mod cli;
mod durable;
mod every_code;
mod http;
mod operated;
mod pg_replicas;
mod replicas;
mod schemas;
mod served;
mod session;
mod stdio;
mod transports;
mod webdriver;

/// The demo binary under test.
fn demo() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent-surface-demo"))
}
