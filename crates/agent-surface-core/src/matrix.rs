//! The error matrix: one table, in code, from which behaviour, `spec/error-matrix.json` and the
//! docs tables follow.
//!
//! Each [`CodeSpec`] row states, for one code, the phases that produce it, its failure layer, its
//! retry rule (a default plus the details values that change it), whether it may be stored as a
//! terminal idempotency result, its details schema (derived from the typed details with
//! `schemars`), the agent-visible and log-only fields, the adapter duty, the HTTP status analog
//! and the MCP mapping. The constructors of [`AgentSurfaceError`](crate::AgentSurfaceError) derive `retry` from this table
//! ([`derive_retry`]); the adapters read their mappings from it ([`CodeSpec::http_status`],
//! [`McpMapping::strict_protocol_error`]).
//!
//! Each row is written in its code's block of the table of codes (`codes.rs`, the `matrix`
//! column), beside the code's messages, examples, decision rows and wire classes, and read here.
//!
//! This module holds the table and its evaluation only; it depends on the vocabularies and the
//! details types, never on the payloads the table governs. What follows from the table lives
//! above it: the example payloads in [`crate::examples`], the JSON document and the docs tables
//! in [`crate::render`] (`cargo xtask gen-matrix` writes them; `cargo xtask verify-matrix`
//! checks the files, the docs and the tests against the table).

use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::code::{ErrorCode, Layer, LogLevel, Phase, Retry};
use crate::definition::DefinitionErrorCode;
use crate::details::*;

/// A value a details member is compared with in a [`Condition`].
#[expect(
    clippy::exhaustive_enums,
    reason = "the value kinds a matrix condition compares, closed with the matrix this crate generates"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetailValue {
    /// A string member.
    Str(&'static str),
    /// A boolean member.
    Bool(bool),
}

impl DetailValue {
    pub(crate) fn matches(self, value: Option<&Value>) -> bool {
        match (self, value) {
            (DetailValue::Str(s), Some(Value::String(v))) => v == s,
            (DetailValue::Bool(b), Some(Value::Bool(v))) => *v == b,
            _ => false,
        }
    }
}

/// "When `details[field] == equals`, the value is `then`."
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Condition<T: 'static> {
    /// The details member (camelCase wire name).
    pub field: &'static str,
    /// The value it must have.
    pub equals: DetailValue,
    /// The resulting value.
    pub then: T,
}

/// A default value plus the details conditions that override it (the first match wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule<T: 'static> {
    /// The value when no condition matches.
    pub default: T,
    /// The overrides, tried in order.
    pub conditions: &'static [Condition<T>],
}

impl<T: Copy> Rule<T> {
    /// The value for these details.
    pub fn eval(&self, details: Option<&Map<String, Value>>) -> T {
        for c in self.conditions {
            if c.equals.matches(details.and_then(|d| d.get(c.field))) {
                return c.then;
            }
        }
        self.default
    }

    /// Every value the rule can produce.
    pub fn values(&self) -> impl Iterator<Item = T> + '_ {
        std::iter::once(self.default).chain(self.conditions.iter().map(|c| c.then))
    }
}

const fn fixed<T>(value: T) -> Rule<T> {
    Rule { default: value, conditions: &[] }
}

/// The shape of a code's `details`.
#[expect(
    clippy::exhaustive_enums,
    reason = "the shapes of a code's details, closed with the matrix this crate generates"
)]
#[derive(Clone, Copy, Debug)]
pub enum DetailsSpec {
    /// The code never carries `details`.
    None,
    /// The code carries `details` of a typed shape.
    Typed {
        /// The JSON Schema of the details object (from `schemars`).
        schema: fn() -> Schema,
        /// Checks that a details object parses into the typed form.
        parse: fn(&Value) -> Result<(), String>,
        /// The agent-visible keys the details may have.
        keys: &'static [&'static str],
        /// Whether authors may add keys of their own (`PRECONDITION_FAILED`).
        open: bool,
    },
}

impl DetailsSpec {
    /// Checks a details object (or its absence) against this spec.
    pub fn check(&self, details: Option<&Map<String, Value>>) -> Result<(), String> {
        match (self, details) {
            (DetailsSpec::None, None) => Ok(()),
            (DetailsSpec::None, Some(_)) => Err("this code carries no details".into()),
            (DetailsSpec::Typed { .. }, None) => Err("details are required".into()),
            (DetailsSpec::Typed { parse, keys, open, .. }, Some(map)) => {
                if let Some(k) = map.keys().find(|k| !open && !keys.contains(&k.as_str())) {
                    return Err(format!("unknown details key `{k}`"));
                }
                parse(&Value::Object(map.clone()))
            }
        }
    }

    /// The schema as JSON (`null` for codes without details).
    pub fn schema_json(&self) -> Value {
        match self {
            DetailsSpec::None => Value::Null,
            DetailsSpec::Typed { schema, .. } => schema().to_value(),
        }
    }
}

fn schema_of<T: JsonSchema>() -> Schema {
    let settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.into_generator().into_root_schema_for::<T>()
}

fn parse_as<T: DeserializeOwned>(value: &Value) -> Result<(), String> {
    T::deserialize(value).map(|_| ()).map_err(|e| e.to_string())
}

const fn typed<T: JsonSchema + DeserializeOwned>(keys: &'static [&'static str]) -> DetailsSpec {
    DetailsSpec::Typed { schema: schema_of::<T>, parse: parse_as::<T>, keys, open: false }
}

/// How the MCP adapter carries a code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpMapping {
    /// The default channel: always a tool result with `isError: true` carrying the payload.
    pub channel: &'static str,
    /// The JSON-RPC error code used instead in the adapter's spec-strict mode, if any.
    pub strict_protocol_error: Option<i32>,
}

const TOOL_RESULT: McpMapping = McpMapping { channel: "tool-result-is-error", strict_protocol_error: None };

/// One row of the matrix.
#[derive(Clone, Copy, Debug)]
pub struct CodeSpec {
    /// The code.
    pub code: ErrorCode,
    /// What the code means, in one sentence.
    pub meaning: &'static str,
    /// When the runtime produces it.
    pub when: &'static str,
    /// The pipeline phases that may produce it.
    pub phases: &'static [Phase],
    /// Whether a handler (or executor) may return it as a typed error; otherwise the pipeline
    /// replaces such a return with `EXECUTION_FAILED {reason: handler-error}`.
    pub handler_may_return: bool,
    /// The failure layer.
    pub layer: Rule<Layer>,
    /// The retry rule.
    pub retry: Rule<Retry>,
    /// Whether a terminal result with this code is stored for the idempotency window. A retry of
    /// a stored result needs a fresh invocation id.
    pub cacheable: bool,
    /// The details shape.
    pub details: DetailsSpec,
    /// Fields that go to the operator channel only.
    pub log_only: &'static [&'static str],
    /// The level of the operator event for a call that ends with this code. The runtime raises
    /// it to [`LogLevel::Error`] when the service itself is at fault (a panic, a store failure).
    pub log_level: Rule<LogLevel>,
    /// What an adapter must do with it.
    pub adapter_duty: &'static str,
    /// The HTTP status analog.
    pub http_status: Rule<u16>,
    /// The MCP mapping.
    pub mcp: McpMapping,
}

use Phase::*;

/// The rows, from the table's `matrix` column (`codes.rs`): each code's row is written in its block
/// there, and read here, where the row's vocabulary (`fixed`, `Rule`, the phases…) is in scope.
macro_rules! matrix_rows {
    ($( $code:ident { $($row:tt)* } )*) => {
        /// The matrix, in [`ErrorCode::ALL`] order.
        pub static MATRIX: [CodeSpec; ErrorCode::ALL.len()] = [
            $( CodeSpec { code: ErrorCode::$code, $($row)* }, )*
        ];
    };
}

crate::codes::code_table!(matrix => matrix_rows);

/// The matrix row of a code.
pub fn spec(code: ErrorCode) -> &'static CodeSpec {
    // `ErrorCode` has implicit discriminants in `ALL` order; `matrix_rows_follow_the_enum` checks
    // that `MATRIX` follows the same order.
    &MATRIX[code as usize]
}

impl ErrorCode {
    /// Whether a terminal result with this code may be stored for the idempotency window (the
    /// matrix's [`CodeSpec::cacheable`]).
    ///
    /// ```
    /// use agent_surface_core::ErrorCode;
    /// assert!(!ErrorCode::RateLimited.is_cacheable());
    /// assert!(ErrorCode::Timeout.is_cacheable());
    /// ```
    pub fn is_cacheable(self) -> bool {
        spec(self).cacheable
    }
}

/// The retry category the matrix assigns to `code` with these details.
///
/// ```
/// use agent_surface_core::{matrix::derive_retry, ErrorCode, Retry};
/// let d = serde_json::json!({"reason": "expired"});
/// assert_eq!(derive_retry(ErrorCode::ConfirmationInvalid, d.as_object()), Retry::WithConfirmation);
/// let d = serde_json::json!({"reason": "denied"});
/// assert_eq!(derive_retry(ErrorCode::ConfirmationInvalid, d.as_object()), Retry::No);
/// ```
pub fn derive_retry(code: ErrorCode, details: Option<&Map<String, Value>>) -> Retry {
    spec(code).retry.eval(details)
}

/// The payload member in which the runtime states that a call stopped before its handler
/// started (`spec/error-model.md`, *Not processed*).
pub const NOT_PROCESSED_FIELD: &str = "notProcessed";

/// The payload member carrying the call's correlation id.
pub const CORRELATION_ID_FIELD: &str = "correlationId";

/// The codes phase 8 (`execute`) can give before it starts the handler, at its gate: the caller
/// gone (`CANCELLED`), strict audit unable to record the start or a started mark that cannot be
/// written (`EXECUTION_FAILED`), the registration unmounted or replaced while the call waited
/// (`COMPONENT_UNMOUNTED`), the capability disabled meanwhile (`CAPABILITY_NOT_AVAILABLE`).
pub const REFUSED_AT_THE_EXECUTE_GATE: [ErrorCode; 4] = [
    ErrorCode::Cancelled,
    ErrorCode::ExecutionFailed,
    ErrorCode::ComponentUnmounted,
    ErrorCode::CapabilityNotAvailable,
];

/// The phases of `code` in which a call can stop without anything it asked for being done: those
/// before the handler, and `execute` for a code its gate gives before the handler starts
/// ([`REFUSED_AT_THE_EXECUTE_GATE`]).
///
/// ```
/// use agent_surface_core::{matrix::not_processed_phases, ErrorCode, Phase};
/// assert!(not_processed_phases(ErrorCode::Cancelled).any(|p| p == Phase::Execute));
/// assert!(not_processed_phases(ErrorCode::Timeout).next().is_none());
/// ```
pub fn not_processed_phases(code: ErrorCode) -> impl Iterator<Item = Phase> {
    let gate = REFUSED_AT_THE_EXECUTE_GATE.contains(&code);
    spec(code).phases.iter().copied().filter(move |p| p.is_before_handler() || (gate && *p == Phase::Execute))
}

/// Whether a payload of `code` with these details may say `notProcessed`: some phase before the
/// handler produces the code, and it is not an unknown outcome (whose whole meaning is that a
/// handler may have run, even when it is met at admission, from an earlier leader's record).
///
/// ```
/// use agent_surface_core::{matrix::may_be_not_processed, ErrorCode};
/// assert!(may_be_not_processed(ErrorCode::ExecutionFailed, None));
/// assert!(!may_be_not_processed(ErrorCode::Timeout, None));
/// let unknown = serde_json::json!({"reason": "outcome-unknown"});
/// assert!(!may_be_not_processed(ErrorCode::ExecutionFailed, unknown.as_object()));
/// ```
pub fn may_be_not_processed(code: ErrorCode, details: Option<&Map<String, Value>>) -> bool {
    let unknown = code == ErrorCode::ExecutionFailed
        && details.and_then(|d| d.get("reason")).and_then(Value::as_str) == Some("outcome-unknown");
    !unknown && not_processed_phases(code).next().is_some()
}

/// One row of the registration-time (definition) error table.
#[derive(Clone, Copy, Debug)]
pub struct DefinitionSpec {
    /// The code.
    pub code: DefinitionErrorCode,
    /// What triggers it.
    pub trigger: &'static str,
}

/// The registration-time error table.
pub static DEFINITION_MATRIX: [DefinitionSpec; 6] = [
    DefinitionSpec {
        code: DefinitionErrorCode::InvalidId,
        trigger: "A type, capability or instance id breaks the id grammar.",
    },
    DefinitionSpec {
        code: DefinitionErrorCode::InvalidDefinition,
        trigger: "A missing or empty description, an unknown field, meta that is not plain JSON, or a name a policy, quota, confirmation rule or binding targets that is not defined.",
    },
    DefinitionSpec {
        code: DefinitionErrorCode::UnsupportedSchema,
        trigger: "A JSON Schema outside the portable subset, too deep, or too large.",
    },
    DefinitionSpec {
        code: DefinitionErrorCode::PlaneViolation,
        trigger: "A view action declaring a server effect, or a procedure binding without an executor.",
    },
    DefinitionSpec {
        code: DefinitionErrorCode::DuplicateCapability,
        trigger: "Two capabilities with the same name in one definition.",
    },
    DefinitionSpec {
        code: DefinitionErrorCode::LimitExceeded,
        trigger: "A description, meta object or definition over its size cap.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_rows_follow_the_enum() {
        for (row, code) in MATRIX.iter().zip(ErrorCode::ALL) {
            assert_eq!(row.code, code);
            assert!(std::ptr::eq(spec(code), row));
        }
    }

    #[test]
    fn definition_rows_follow_the_enum() {
        for (row, code) in DEFINITION_MATRIX.iter().zip(DefinitionErrorCode::ALL) {
            assert_eq!(row.code, code);
        }
    }

    #[test]
    fn non_cacheable_codes_are_the_specified_three() {
        let non: Vec<_> = MATRIX.iter().filter(|s| !s.cacheable).map(|s| s.code).collect();
        assert_eq!(non, [ErrorCode::InvocationConflict, ErrorCode::ConfirmationRequired, ErrorCode::RateLimited]);
    }
}
