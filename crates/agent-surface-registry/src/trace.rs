//! W3C Trace Context: the caller's trace, continued by the invocation span.
//!
//! A caller that is inside a trace sends its position in it as a
//! [W3C `traceparent`](https://www.w3.org/TR/trace-context/) (and, optionally, a `tracestate`):
//!
//! | adapter | where it is read |
//! |---|---|
//! | HTTP binding | the `traceparent` and `tracestate` request headers |
//! | MCP (stdio and streamable HTTP) | the `tools/call` request's `_meta` keys `traceparent` and `tracestate` (SEP-414; the OpenTelemetry MCP conventions), not the HTTP headers of `/mcp` |
//! | embedded toolset, direct calls | none: the caller's current `tracing` span is the parent, or [`InvokeOptions::with_trace_parent`](crate::InvokeOptions::with_trace_parent) |
//!
//! The adapters parse it with [`TraceParent::extract`] and hand it to the registry with
//! [`InvokeOptions::with_trace_parent`](crate::InvokeOptions::with_trace_parent). The invocation
//! span (`tracing`, target `agent_surface::invoke`) then records the fields `trace_id` and
//! `parent_id`, so that the plain operator log ties the call to the caller's trace. With the
//! crate's `otel` feature, the span's OpenTelemetry parent is the caller's span
//! (`tracing_opentelemetry::OpenTelemetrySpanExt::set_parent`), so an OpenTelemetry pipeline
//! continues the caller's trace, and the span carries the attributes of the semantic conventions'
//! `execute_tool` span (see `docs/operations.md`, "Traces").
//!
//! **An invalid trace context is ignored.** It is never an error to the agent and never echoed:
//! the call runs as if none had been sent, and the operator log gets a `DEBUG` event (target
//! `agent_surface::trace`) naming the reason, without the value. A valid `traceparent` with an
//! invalid `tracestate` keeps the `traceparent` and drops the `tracestate`.
//!
//! ```
//! use agent_surface_registry::TraceParent;
//!
//! let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
//! assert_eq!(parent.trace_id_hex().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_eq!(parent.parent_id_hex().to_string(), "00f067aa0ba902b7");
//! assert!(parent.sampled());
//!
//! // Uppercase hex, all-zero ids and version `ff` are invalid.
//! assert!(TraceParent::parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01").is_err());
//! assert!(TraceParent::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_err());
//! assert!(TraceParent::parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_err());
//! // A later version is read as far as version 00 goes.
//! assert!(TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_ok());
//!
//! let with_state = TraceParent::extract(
//!     Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
//!     Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
//! )
//! .unwrap();
//! assert_eq!(with_state.tracestate(), Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
//! assert_eq!(TraceParent::extract(Some("not a traceparent"), None), None);
//! ```

use agent_surface_core::hex::{Hex, decode_lower_into};
use std::fmt;

#[cfg(feature = "otel")]
mod otel;

/// The operator-log target of the events about ignored trace contexts.
pub const LOG_TARGET: &str = "agent_surface::trace";

/// The longest `tracestate` carried along, in bytes (the W3C limit a vendor must propagate);
/// a longer one is dropped.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The most list members of a `tracestate` (W3C: 32).
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The length of a version-`00` `traceparent`.
const LEN_V00: usize = 55;

/// A caller's position in a trace: a parsed W3C `traceparent`, and the `tracestate` that came
/// with it; see the [module](self).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    sampled: bool,
    tracestate: Option<Box<str>>,
}

/// Why a `traceparent` (or a `tracestate`) was not accepted. Its message names the rule, never
/// the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParentError {
    reason: &'static str,
}

impl TraceParentError {
    /// The rule the value broke, e.g. `"trace-id is all zeros"`.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for TraceParentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid trace context: {}", self.reason)
    }
}

impl std::error::Error for TraceParentError {}

const fn invalid(reason: &'static str) -> TraceParentError {
    TraceParentError { reason }
}

impl TraceParent {
    /// Parses a `traceparent` value (W3C Trace Context, level 2): `version-traceid-parentid-flags`
    /// in lowercase hex; spaces and tabs around it are ignored. Version `00` is exactly 55
    /// characters; a later version (not `ff`) is read as far as version `00` goes, and what
    /// follows must start with `-`. All-zero ids are invalid.
    pub fn parse(traceparent: &str) -> Result<TraceParent, TraceParentError> {
        let s = traceparent.trim_matches([' ', '\t']).as_bytes();
        if s.len() < LEN_V00 {
            return Err(invalid("shorter than 55 characters"));
        }
        let mut version = [0u8; 1];
        decode_lower_into(&s[0..2], &mut version).ok_or(invalid("version is not two lowercase hex digits"))?;
        match version[0] {
            0xff => return Err(invalid("version ff")),
            0 if s.len() != LEN_V00 => return Err(invalid("version 00 is not 55 characters")),
            _ if s.len() > LEN_V00 && s[LEN_V00] != b'-' => {
                return Err(invalid("a later version's fields do not end with '-'"));
            }
            _ => {}
        }
        if s[2] != b'-' || s[35] != b'-' || s[52] != b'-' {
            return Err(invalid("fields not separated by '-'"));
        }
        let mut trace_id = [0u8; 16];
        decode_lower_into(&s[3..35], &mut trace_id).ok_or(invalid("trace-id is not 32 lowercase hex digits"))?;
        let mut parent_id = [0u8; 8];
        decode_lower_into(&s[36..52], &mut parent_id).ok_or(invalid("parent-id is not 16 lowercase hex digits"))?;
        let mut flags = [0u8; 1];
        decode_lower_into(&s[53..55], &mut flags).ok_or(invalid("trace-flags is not two lowercase hex digits"))?;
        if trace_id == [0; 16] {
            return Err(invalid("trace-id is all zeros"));
        }
        if parent_id == [0; 8] {
            return Err(invalid("parent-id is all zeros"));
        }
        Ok(TraceParent { trace_id, parent_id, sampled: flags[0] & 1 == 1, tracestate: None })
    }

    /// The same trace parent carrying `tracestate` (W3C: at most 32 `key=value` list members,
    /// keys and values of the W3C grammar, at most [`MAX_TRACESTATE_BYTES`]); one without members
    /// carries none.
    pub fn with_tracestate(mut self, tracestate: &str) -> Result<TraceParent, TraceParentError> {
        let tracestate = tracestate.trim_matches([' ', '\t']);
        let members = check_tracestate(tracestate)?;
        self.tracestate = (members > 0).then(|| tracestate.into());
        Ok(self)
    }

    /// What an adapter calls with the values its carrier holds (`None`: absent): the trace
    /// parent, or `None` when there is none or the `traceparent` is invalid. Whatever is ignored
    /// is reported at `DEBUG` ([`ignored`]); a `tracestate` is read only with a valid
    /// `traceparent`.
    pub fn extract(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceParent> {
        let parent = match TraceParent::parse(traceparent?) {
            Ok(parent) => parent,
            Err(e) => {
                ignored("traceparent", e.reason());
                return None;
            }
        };
        match tracestate.map(|state| parent.clone().with_tracestate(state)) {
            None => Some(parent),
            Some(Ok(with_state)) => Some(with_state),
            Some(Err(e)) => {
                ignored("tracestate", e.reason());
                Some(parent)
            }
        }
    }

    /// The trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The caller's span id (W3C `parent-id`).
    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    /// The trace id as 32 lowercase hex digits (formatted when displayed).
    pub fn trace_id_hex(&self) -> impl fmt::Display + '_ {
        Hex(&self.trace_id)
    }

    /// The caller's span id as 16 lowercase hex digits (formatted when displayed).
    pub fn parent_id_hex(&self) -> impl fmt::Display + '_ {
        Hex(&self.parent_id)
    }

    /// Whether the caller sampled the trace (trace-flags bit 0; the other flags are not kept).
    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// The `tracestate` that came with it, when there was a valid one.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// The version-`00` `traceparent` of this parent.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "00-{}-{}-{:02x}", Hex(&self.trace_id), Hex(&self.parent_id), u8::from(self.sampled))
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceParent")
            .field("traceparent", &format_args!("{self}"))
            .field("tracestate", &self.tracestate)
            .finish()
    }
}

/// The operator event for a trace context that is ignored: `what` (`traceparent` or
/// `tracestate`) and the rule it broke, at `DEBUG` under [`LOG_TARGET`]; never the value. The
/// adapters call it too, for a carrier that holds no readable value (e.g. a `_meta` member that is
/// not a string, or a repeated header).
pub fn ignored(what: &'static str, reason: &'static str) {
    tracing::debug!(target: LOG_TARGET, what, reason, "trace context ignored");
}

/// The number of list members of a valid `tracestate`.
fn check_tracestate(s: &str) -> Result<usize, TraceParentError> {
    if s.len() > MAX_TRACESTATE_BYTES {
        return Err(invalid("tracestate longer than 512 bytes"));
    }
    let mut members = 0;
    for member in s.split(',').map(|m| m.trim_matches([' ', '\t'])).filter(|m| !m.is_empty()) {
        members += 1;
        if members > MAX_TRACESTATE_MEMBERS {
            return Err(invalid("tracestate has more than 32 members"));
        }
        let (key, value) = member.split_once('=').ok_or(invalid("tracestate member without '='"))?;
        if !valid_key(key.as_bytes()) {
            return Err(invalid("tracestate key outside the W3C grammar"));
        }
        if !valid_value(value.as_bytes()) {
            return Err(invalid("tracestate value outside the W3C grammar"));
        }
    }
    Ok(members)
}

/// `lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")`, or `tenant@system` (tenant: 1–241
/// characters starting with a letter or digit, system: 1–14 starting with a letter).
fn valid_key(key: &[u8]) -> bool {
    let rest = |s: &[u8]| s.iter().all(|&b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'));
    match key.iter().position(|&b| b == b'@') {
        None => (1..=256).contains(&key.len()) && key[0].is_ascii_lowercase() && rest(&key[1..]),
        Some(at) => {
            let (tenant, system) = (&key[..at], &key[at + 1..]);
            (1..=241).contains(&tenant.len())
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && rest(&tenant[1..])
                && (1..=14).contains(&system.len())
                && system[0].is_ascii_lowercase()
                && rest(&system[1..])
        }
    }
}

/// `0*255(chr) nblk-chr`: printable ASCII but `,` and `=`, not ending in a space.
fn valid_value(value: &[u8]) -> bool {
    (1..=256).contains(&value.len())
        && value.iter().all(|&b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        && value.last() != Some(&b' ')
}

/// The start of an invocation span: the trace parent's fields (and, with `otel`, the span's
/// OpenTelemetry parent, its name and the attributes known before the call runs). `tool` is the
/// capability's name when the registry defines it (`None` otherwise, and without `otel`).
pub(crate) fn start(
    span: &tracing::Span,
    parent: Option<&TraceParent>,
    correlation_id: &crate::CorrelationId,
    tool: Option<&str>,
) {
    if let Some(parent) = parent {
        span.record("trace_id", tracing::field::display(parent.trace_id_hex()));
        span.record("parent_id", tracing::field::display(parent.parent_id_hex()));
    }
    #[cfg(feature = "otel")]
    otel::start(span, parent, correlation_id, tool);
    #[cfg(not(feature = "otel"))]
    let _ = (correlation_id, tool);
}

/// The end of the current invocation span (with `otel`: `error.type` and the status of an error
/// result; without, nothing).
pub(crate) fn finish(result: &agent_surface_core::InvokeResult) {
    #[cfg(feature = "otel")]
    otel::finish(&tracing::Span::current(), result);
    #[cfg(not(feature = "otel"))]
    let _ = result;
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[track_caller]
    fn check(input: &str, expected: Result<&str, &str>) {
        let got = TraceParent::parse(input).map(|p| p.to_string()).map_err(|e| e.reason());
        assert_eq!(got, expected.map(str::to_string), "input {input:?}");
    }

    #[test]
    fn traceparent_table() {
        check(VALID, Ok(VALID));
        check(&format!(" \t{VALID} "), Ok(VALID));
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            Ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        );
        // Unknown flags are not kept; the sampled bit is.
        check("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", Ok(VALID));
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
            Ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        );
        // Later versions: read as version 00, the rest after a dash ignored.
        check("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Ok(VALID));
        check("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", Ok(VALID));
        check(
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.",
            Err("a later version's fields do not end with '-'"),
        );
        check("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Err("version ff"));
        check(&format!("{VALID}-"), Err("version 00 is not 55 characters"));
        check(&format!("{VALID}{}", "0".repeat(100_000)), Err("version 00 is not 55 characters"));
        check("", Err("shorter than 55 characters"));
        check(&VALID[..54], Err("shorter than 55 characters"));
        check(
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Err("version is not two lowercase hex digits"),
        );
        check(
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            Err("trace-id is not 32 lowercase hex digits"),
        );
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
            Err("parent-id is not 16 lowercase hex digits"),
        );
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
            Err("trace-flags is not two lowercase hex digits"),
        );
        check("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Err("fields not separated by '-'"));
        check("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", Err("fields not separated by '-'"));
        check("00-00000000000000000000000000000000-00f067aa0ba902b7-01", Err("trace-id is all zeros"));
        check("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", Err("parent-id is all zeros"));
        check("00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-0", Err("fields not separated by '-'"));
        check(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é",
            Err("trace-flags is not two lowercase hex digits"),
        );
        check(
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Err("trace-id is not 32 lowercase hex digits"),
        );
    }

    #[track_caller]
    fn check_state(state: &str, expected: Result<Option<&str>, &str>) {
        let parent = TraceParent::parse(VALID).unwrap();
        let got = parent.with_tracestate(state).map(|p| p.tracestate().map(str::to_string)).map_err(|e| e.reason());
        assert_eq!(got, expected.map(|s| s.map(str::to_string)), "tracestate {state:?}");
    }

    #[test]
    fn tracestate_table() {
        check_state("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", Ok(Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")));
        check_state(" a=1 , ,b@sys=x y ", Ok(Some("a=1 , ,b@sys=x y")));
        check_state("1tenant@vendor=v", Ok(Some("1tenant@vendor=v")));
        check_state("", Ok(None));
        check_state(" ,, ", Ok(None));
        check_state("novalue", Err("tracestate member without '='"));
        check_state("Upper=1", Err("tracestate key outside the W3C grammar"));
        check_state("1digit=1", Err("tracestate key outside the W3C grammar"));
        check_state("a@=1", Err("tracestate key outside the W3C grammar"));
        check_state("a@1sys=1", Err("tracestate key outside the W3C grammar"));
        check_state("a=", Err("tracestate value outside the W3C grammar"));
        check_state("a=b=c", Err("tracestate value outside the W3C grammar"));
        check_state("a=tab\there", Err("tracestate value outside the W3C grammar"));
        check_state("a=café", Err("tracestate value outside the W3C grammar"));
        check_state(&"a=1,".repeat(33), Err("tracestate has more than 32 members"));
        check_state(&format!("a={}", "x".repeat(600)), Err("tracestate longer than 512 bytes"));
        check_state(&format!("a={}", "x".repeat(257)), Err("tracestate value outside the W3C grammar"));
    }

    #[test]
    fn extract_ignores_what_is_invalid() {
        assert_eq!(TraceParent::extract(None, Some("a=1")), None);
        assert_eq!(TraceParent::extract(Some("00-nope"), Some("a=1")), None);
        let kept = TraceParent::extract(Some(VALID), Some("Bad=1")).unwrap();
        assert_eq!((kept.to_string().as_str(), kept.tracestate()), (VALID, None));
        let both = TraceParent::extract(Some(VALID), Some("a=1")).unwrap();
        assert_eq!(both.tracestate(), Some("a=1"));
    }

    proptest::proptest! {
        /// Nothing panics, and whatever parses prints back as a valid version-00 traceparent.
        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,80}", state in "\\PC{0,80}") {
            if let Ok(parent) = TraceParent::parse(&s) {
                let printed = parent.to_string();
                proptest::prop_assert_eq!(TraceParent::parse(&printed).unwrap().to_string(), printed);
            }
            let _ = TraceParent::extract(Some(&s), Some(&state));
        }

        /// Near-valid inputs (one byte changed) are either refused or still well-formed.
        #[test]
        fn one_byte_changed(at in 0usize..55, byte in proptest::num::u8::ANY) {
            let mut bytes = VALID.as_bytes().to_vec();
            bytes[at] = byte;
            if let Ok(s) = std::str::from_utf8(&bytes) && let Ok(parent) = TraceParent::parse(s) {
                proptest::prop_assert!(parent.trace_id() != [0; 16] && parent.parent_id() != [0; 8]);
            }
        }
    }
}
