//! `call`: the CLI binding. Invokes one capability of the demo shop in process and prints the
//! result; the exit status says which code ended the call.
//!
//! ```text
//! agent-surface-demo call CAPABILITY [--input JSON] [--json] [--as WHO] [--target INSTANCE]
//!                         [--invocation-id ID] [--confirmation-id ID]
//! ```
//!
//! Without `--json`, a success prints the output (pretty JSON) on stdout and an error prints
//! `CODE (retry: RETRY): MESSAGE` and the details on stderr. With `--json`, stdout gets the raw
//! `InvokeResult` (one line, wire order) either way. The exit status is [`exit_status`], or
//! [`EX_IOERR`] when the result cannot be written (a closed pipe).
//!
//! Each run builds a fresh shop in this process: no state, idempotency record or pending
//! confirmation carries over from one run to the next, so a `CONFIRMATION_REQUIRED` cannot be
//! completed from the CLI (serve the shop to do that), and an id from an earlier run is unknown
//! to the next. The operator channel (causes, panic text) is not printed: set
//! `AGENT_SURFACE_DEMO_OPERATOR_LOG=FILE` to append it to a file.

use std::io::Write;

use agent_surface_core::{ErrorCode, InvokeResult};
use agent_surface_policy::{Consumer, Identity};
use agent_surface_registry::{InvokeOptions, InvokeRequest, Target};

/// The usage error exit status (`EX_USAGE`): bad options, `--input` that is not JSON.
pub(crate) const EX_USAGE: u8 = 64;

/// The exit status when the result cannot be written (`EX_IOERR`), e.g. stdout is a closed pipe.
pub(crate) const EX_IOERR: u8 = 74;

/// The exit status of each code (sysexits.h names), in [`ErrorCode::ALL`] order. Success is 0.
///
/// | code | status | name | why |
/// |---|---|---|---|
/// | `CAPABILITY_NOT_FOUND` | 69 | `EX_UNAVAILABLE` | no such capability for this caller |
/// | `CAPABILITY_NOT_AVAILABLE` | 69 | `EX_UNAVAILABLE` | disabled: do the enabling step first |
/// | `AMBIGUOUS_INSTANCE` | 64 | `EX_USAGE` | the command must name `--target` |
/// | `COMPONENT_UNMOUNTED` | 75 | `EX_TEMPFAIL` | the target went away; run again after checking |
/// | `STALE_CAPABILITY` | 75 | `EX_TEMPFAIL` | planned against an old surface; run again |
/// | `INVOCATION_CONFLICT` | 65 | `EX_DATAERR` | the id belongs to another request |
/// | `INVALID_INPUT` | 65 | `EX_DATAERR` | change the input |
/// | `NOT_AUTHENTICATED` | 77 | `EX_NOPERM` | sign in (`--as`) |
/// | `NOT_AUTHORIZED` | 77 | `EX_NOPERM` | not permitted |
/// | `PRECONDITION_FAILED` | 65 | `EX_DATAERR` | the state rejects this input |
/// | `CONFIRMATION_REQUIRED` | 77 | `EX_NOPERM` | nothing done: the action needs an approval, which a one-shot run cannot take (serve the shop) |
/// | `CONFIRMATION_INVALID` | 77 | `EX_NOPERM` | the approval is missing, denied or spent |
/// | `RATE_LIMITED` | 75 | `EX_TEMPFAIL` | wait `retryAfterMs`, run again |
/// | `TIMEOUT` | 75 | `EX_TEMPFAIL` | ran out of time (a read or idempotent call: safe to repeat) |
/// | `CANCELLED` | 130 | (SIGINT) | cancelled |
/// | `EXECUTION_FAILED` | 70 | `EX_SOFTWARE` | the capability failed |
pub(crate) const EXIT_STATUS: [(ErrorCode, u8); 16] = [
    (ErrorCode::CapabilityNotFound, 69),
    (ErrorCode::CapabilityNotAvailable, 69),
    (ErrorCode::AmbiguousInstance, 64),
    (ErrorCode::ComponentUnmounted, 75),
    (ErrorCode::StaleCapability, 75),
    (ErrorCode::InvocationConflict, 65),
    (ErrorCode::InvalidInput, 65),
    (ErrorCode::NotAuthenticated, 77),
    (ErrorCode::NotAuthorized, 77),
    (ErrorCode::PreconditionFailed, 65),
    (ErrorCode::ConfirmationRequired, 77),
    (ErrorCode::ConfirmationInvalid, 77),
    (ErrorCode::RateLimited, 75),
    (ErrorCode::Timeout, 75),
    (ErrorCode::Cancelled, 130),
    (ErrorCode::ExecutionFailed, 70),
];

/// The exit status of a result: 0 for a success, else the code's row of [`EXIT_STATUS`].
pub(crate) fn exit_status(result: &InvokeResult) -> u8 {
    match result.code() {
        None => 0,
        Some(code) => EXIT_STATUS.iter().find(|(c, _)| *c == code).map_or(70, |(_, s)| *s),
    }
}

/// Parsed `call` options.
#[derive(Debug)]
pub(crate) struct Call {
    request: InvokeRequest,
    json: bool,
    identity: Option<Identity>,
}

/// Parses `CAPABILITY [options]`.
pub(crate) fn parse(args: &[String], parse_who: fn(&str) -> Identity) -> Result<Call, String> {
    let mut it = args.iter();
    let capability = it.next().filter(|c| !c.starts_with("--")).ok_or("call needs a CAPABILITY (e.g. orders.list)")?;
    let mut call =
        Call { request: InvokeRequest::new(capability.clone(), serde_json::json!({})), json: false, identity: None };
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--input" => {
                call.request.input = serde_json::from_str(&value("--input")?)
                    .map_err(|e| format!("--input is not JSON (line {}, column {})", e.line(), e.column()))?;
            }
            "--json" => call.json = true,
            "--as" => call.identity = Some(parse_who(&value("--as")?)),
            "--target" => call.request.target = Some(Target::instance(value("--target")?)),
            "--invocation-id" => call.request.invocation_id = Some(value("--invocation-id")?),
            "--confirmation-id" => call.request.confirmation_id = Some(value("--confirmation-id")?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(call)
}

/// Runs the call against a fresh demo shop and prints the result; returns the exit status.
pub(crate) async fn run(call: Call) -> u8 {
    let demo = crate::shop::build(crate::shop::ShopOptions::default());
    let consumer = match call.identity {
        Some(identity) => Consumer::authenticated("cli", identity),
        None => Consumer::anonymous("cli"),
    };
    let result = demo.registry.invoke(call.request, InvokeOptions::new(consumer).with_transport("cli")).await;
    match print(&result, call.json, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()) {
        Ok(()) => exit_status(&result),
        Err(_) => EX_IOERR,
    }
}

/// Writes the result: with `json`, the `InvokeResult` on `out`; otherwise a success's output on
/// `out` and an error on `err`.
fn print(result: &InvokeResult, json: bool, out: &mut impl Write, err: &mut impl Write) -> std::io::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(result).unwrap_or_else(|_| result.to_json().to_string()))?;
        return out.flush();
    }
    match result {
        InvokeResult::Ok { output, .. } => {
            writeln!(out, "{}", serde_json::to_string_pretty(output).unwrap_or_default())?;
            out.flush()
        }
        _ => {
            if let Some(p) = result.error_payload() {
                writeln!(err, "{p}")?;
                if let Some(details) = p.details() {
                    writeln!(err, "details: {}", serde_json::Value::Object(details.clone()))?;
                }
            }
            err.flush()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_exit_status() {
        let codes: Vec<ErrorCode> = EXIT_STATUS.iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, ErrorCode::ALL, "one row per code, in ErrorCode::ALL order");
        for (code, status) in EXIT_STATUS {
            assert_ne!(status, 0, "{code} must not look like success");
            let payload = agent_surface_core::examples::of(code).remove(0);
            assert_eq!(exit_status(&InvokeResult::error(payload, None)), status);
        }
        assert_eq!(exit_status(&InvokeResult::ok(serde_json::json!(1), None)), 0);
    }

    /// The exit table in `docs/http.md` is [`EXIT_STATUS`], row for row.
    #[test]
    fn the_documented_exit_table_is_the_one_applied() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/http.md")).unwrap();
        let table = doc.split("The exit status maps from the code").nth(1).expect("the exit table in docs/http.md");
        let mut documented = std::collections::BTreeMap::new();
        for line in table.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let Some(status) = cells.get(1).and_then(|c| c.split(' ').next()).and_then(|s| s.parse::<u8>().ok()) else {
                continue;
            };
            let codes = cells[2].split('`').filter(|w| ErrorCode::ALL.iter().any(|c| c.as_str() == *w));
            for code in codes {
                assert!(documented.insert(code.to_string(), status).is_none(), "{code} is listed twice");
            }
        }
        for (code, status) in EXIT_STATUS {
            assert_eq!(documented.get(code.as_str()), Some(&status), "{code}: docs/http.md disagrees with EXIT_STATUS");
        }
        assert_eq!(documented.len(), EXIT_STATUS.len());
    }
}
