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

/// The matrix, in [`ErrorCode::ALL`] order.
pub static MATRIX: [CodeSpec; 16] = [
    CodeSpec {
        code: ErrorCode::CapabilityNotFound,
        meaning: "The capability does not exist in this consumer's surface: never registered, long gone, or hidden by authority; the cases are indistinguishable on purpose.",
        when: "Resolution finds no capability of that name and no tombstone matches, or the authority policy hides it from this consumer.",
        phases: &[Resolve, Authority],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: fixed(Retry::AfterRefresh),
        cacheable: true,
        details: DetailsSpec::None,
        log_only: &["hiddenMatch"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Refresh the tool list before the model's next step.",
        http_status: fixed(404),
        mcp: McpMapping { channel: "tool-result-is-error", strict_protocol_error: Some(-32602) },
    },
    CodeSpec {
        code: ErrorCode::CapabilityNotAvailable,
        meaning: "The capability exists and is visible but is disabled right now.",
        when: "The availability phase finds it disabled at run time, or the authority policy disables it for this consumer, with a reason.",
        phases: &[Availability, Authority],
        handler_may_return: false,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::AfterRefresh),
        cacheable: true,
        details: typed::<NotAvailableDetails>(&["reason"]),
        log_only: &["disabledBy"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Pass the reason through unchanged; it tells the model the enabling step.",
        http_status: fixed(409),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::AmbiguousInstance,
        meaning: "More than one live instance matches and the call named none.",
        when: "Resolution finds several live registrations for the capability and no target.",
        phases: &[Resolve],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: fixed(Retry::WithChanges),
        cacheable: true,
        details: typed::<AmbiguousDetails>(&["instances"]),
        log_only: &[],
        log_level: fixed(LogLevel::Debug),
        adapter_duty: "Re-issue the call with an explicit target chosen from the instances.",
        http_status: fixed(409),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::ComponentUnmounted,
        meaning: "The target registration existed recently and is gone, or was unmounted while the call ran.",
        when: "Resolution hits a tombstone, or the registration is unmounted during execution of an idempotent or read-only capability (for any other capability that is EXECUTION_FAILED {reason: outcome-unknown}).",
        phases: &[Resolve, Execute],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: fixed(Retry::AfterRefresh),
        cacheable: true,
        details: typed::<UnmountedDetails>(&["phase"]),
        log_only: &["tombstoneCreatedAt", "tombstoneExpiresAt", "lateSettlement"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Refresh, then retry on a live target; a mid-flight unmount is sent only for a read-only or idempotent capability, so a repeat cannot double an effect.",
        http_status: fixed(410),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::StaleCapability,
        meaning: "The call references a superseded snapshot: a replaced registration, another surface, an older version, or a changed tool definition.",
        when: "Resolution: the registrationId was replaced, the surfaceId belongs to another load, a destructive/external call carries an outdated surface version, or a call of any effect names a tool version that is not the live one (reason tool-version-mismatch, with liveToolVersion).",
        phases: &[Resolve],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: fixed(Retry::AfterRefresh),
        cacheable: true,
        details: typed::<StaleDetails>(&["reason", "liveRegistrationId", "liveToolVersion"]),
        log_only: &["presentedSurfaceId", "presentedVersion", "currentVersion"],
        log_level: fixed(LogLevel::Debug),
        adapter_duty: "Refresh and re-resolve; never strip the staleness tokens to force the call through.",
        http_status: fixed(412),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::InvocationConflict,
        meaning: "This consumer already used the invocation id for a different request within the idempotency window, or the capability's natural idempotency key names an operation made with different input.",
        when: "Admission: the request fingerprint differs from the in-flight or stored record for (consumerKey, invocationId), or for the capability's natural key (reason natural-key-used-by-different-request).",
        phases: &[Admission],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: Rule {
            default: Retry::WithChanges,
            conditions: &[Condition {
                field: "reason",
                equals: DetailValue::Str("natural-key-used-by-different-request"),
                then: Retry::No,
            }],
        },
        cacheable: false,
        details: typed::<ConflictDetails>(&["reason"]),
        log_only: &["storedFingerprint", "presentedFingerprint"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "For a reused id, treat as an id-collision bug: mint a namespaced id and send the new request with it. For a natural key, relay to the model: the operation its input names was made with other input.",
        http_status: fixed(422),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::InvalidInput,
        meaning: "The input does not satisfy the capability's schema, or it supplies a field the runtime binds.",
        when: "Input validation fails, or a bound (locked) field is present; or a handler reports a server-side validation failure.",
        phases: &[Input, Execute],
        handler_may_return: true,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::WithChanges),
        cacheable: true,
        details: typed::<InvalidInputDetails>(&["issues", "lockedFields", "reason"]),
        log_only: &["rawInput"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Give the issues to the model verbatim.",
        http_status: fixed(422),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::NotAuthenticated,
        meaning: "No authenticated identity is attached where one is required.",
        when: "An authority policy requires a signed-in identity and there is none; or a server reports it.",
        phases: &[Authority, Execute],
        handler_may_return: true,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::No),
        cacheable: true,
        details: DetailsSpec::None,
        log_only: &["policy"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Tell the model to inform the user; signing in is never the agent's job.",
        http_status: fixed(401),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::NotAuthorized,
        meaning: "The identity is authenticated but not permitted.",
        when: "An authority policy denies, fails, panics or times out (fail closed); or a server's authorization error is mapped.",
        phases: &[Authority, Execute],
        handler_may_return: true,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::No),
        cacheable: true,
        details: typed::<NotAuthorizedDetails>(&["origin"]),
        log_only: &["policy", "requiredPermission", "policyFailure"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Do not loop; report the refusal.",
        http_status: fixed(403),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::PreconditionFailed,
        meaning: "The input is schema-valid but the current state rejects it, or a binding failed to evaluate.",
        when: "A binding fails to evaluate (input phase), or the author's precondition rejects the call.",
        phases: &[Input, Execute],
        handler_may_return: true,
        layer: fixed(Layer::Execution),
        retry: Rule {
            default: Retry::WithChanges,
            conditions: &[
                Condition { field: "reason", equals: DetailValue::Str(BINDING_FAILED), then: Retry::AfterRefresh },
                Condition { field: "reason", equals: DetailValue::Str(CLIENT_INPUT_REQUIRED), then: Retry::No },
            ],
        },
        cacheable: true,
        details: DetailsSpec::Typed {
            schema: schema_of::<PreconditionDetails>,
            parse: parse_as::<PreconditionDetails>,
            keys: &["reason"],
            open: true,
        },
        log_only: &["bindingError", "cause"],
        log_level: Rule {
            default: LogLevel::Info,
            conditions: &[Condition {
                field: "reason",
                equals: DetailValue::Str("client-input-required"),
                then: LogLevel::Debug,
            }],
        },
        adapter_duty: "Pass through.",
        http_status: fixed(409),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::ConfirmationRequired,
        meaning: "A user approval gate is active. Not a failure: a normal protocol turn.",
        when: "A gated capability is called without valid confirmation evidence (two-phase mode).",
        phases: &[Confirmation],
        handler_may_return: false,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::WithConfirmation),
        cacheable: false,
        details: typed::<ConfirmationRequiredDetails>(&[
            "confirmationId",
            "summary",
            "expiresAt",
            "effect",
            "origin",
            "approvalUrl",
        ]),
        log_only: &["inputHash"],
        log_level: fixed(LogLevel::Debug),
        adapter_duty: "In wait mode handle it internally; in two-phase mode relay it to the model, which repeats the same call once the user approves (the registry presents the confirmation).",
        http_status: fixed(428),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::ConfirmationInvalid,
        meaning: "The confirmation evidence was rejected.",
        when: "The confirmationId is expired, denied, already consumed, or bound to another consumer, capability, target or input.",
        phases: &[Confirmation],
        handler_may_return: false,
        layer: fixed(Layer::Execution),
        retry: Rule {
            default: Retry::No,
            conditions: &[Condition {
                field: "reason",
                equals: DetailValue::Str("expired"),
                then: Retry::WithConfirmation,
            }],
        },
        cacheable: true,
        details: typed::<ConfirmationInvalidDetails>(&["reason"]),
        log_only: &["mismatchDiff"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Never auto-retry a denial: it is the user's decision.",
        http_status: fixed(403),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::RateLimited,
        meaning: "An advisory rate limit was hit or the action queue is full.",
        when: "The rate phase finds the consumer's or capability's budget exhausted or the queue full; or a server's throttling is mapped.",
        phases: &[Rate, Execute],
        handler_may_return: true,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::AfterDelay),
        cacheable: false,
        details: typed::<RateLimitedDetails>(&["reason", "retryAfterMs"]),
        log_only: &["bucket"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Honor retryAfterMs; do not tight-loop.",
        http_status: fixed(429),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::Timeout,
        meaning: "The handler exceeded its time budget and was aborted; side effects may or may not have happened.",
        when: "Execution of an idempotent or read-only capability runs past its (or the call's) time budget; for any other capability that is EXECUTION_FAILED {reason: outcome-unknown} (error-model.md, Interrupted calls).",
        phases: &[Execute],
        handler_may_return: false,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::Yes),
        cacheable: true,
        details: typed::<TimeoutDetails>(&["timeoutMs", "idempotent"]),
        log_only: &["lateSettlement"],
        log_level: fixed(LogLevel::Warn),
        adapter_duty: "Retry under a fresh invocation id if the call still matters: only a read-only or idempotent capability gets TIMEOUT, so a repeat cannot double an effect.",
        http_status: fixed(504),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::Cancelled,
        meaning: "The host or adapter cancelled the call, or the registry was disposed.",
        when: "The caller's cancellation fires, or the registry is disposed before or during the call.",
        phases: &[Admission, Execute],
        handler_may_return: false,
        layer: fixed(Layer::Execution),
        retry: fixed(Retry::Yes),
        cacheable: true,
        details: DetailsSpec::None,
        log_only: &["cancelSource"],
        log_level: fixed(LogLevel::Debug),
        adapter_duty: "Retry with a fresh invocation id only if the call is still relevant.",
        http_status: fixed(499),
        mcp: TOOL_RESULT,
    },
    CodeSpec {
        code: ErrorCode::ExecutionFailed,
        meaning: "The handler failed, its output was rejected, or a downstream failure could not be mapped to a more precise code.",
        when: "The handler or the precondition fails or panics; the output fails validation, serialization or the size cap; a post-condition fails (verification-failed); the outcome cannot be proven (outcome-unknown: the post-condition check errs, panics or cannot decide, or a non-idempotent, non-read capability times out or is unmounted mid-flight); the idempotency store fails at admission, the rate limiter's store at rate, or the confirmation store at confirmation (transient); strict audit cannot record that a call starts (audit-unavailable, transient, before the handler runs); or the confirmation gate cannot decide (a panicking summary or gate, a gated capability without a confirmation engine).",
        phases: &[Admission, Input, Rate, Confirmation, Execute, Output],
        handler_may_return: true,
        layer: Rule {
            default: Layer::Execution,
            conditions: &[Condition { field: "reason", equals: DetailValue::Str("transport"), then: Layer::Transport }],
        },
        retry: Rule {
            default: Retry::No,
            conditions: &[Condition { field: "transient", equals: DetailValue::Bool(true), then: Retry::AfterDelay }],
        },
        cacheable: true,
        details: typed::<ExecutionFailedDetails>(&["reason", "transient", "retryAfterMs"]),
        log_only: &["causeChain", "panicMessage", "outputSchemaErrors"],
        log_level: fixed(LogLevel::Warn),
        adapter_duty: "Carry the sanitized message; never the cause.",
        http_status: Rule {
            default: 500,
            conditions: &[
                Condition { field: "reason", equals: DetailValue::Str("transport"), then: 502 },
                Condition { field: "reason", equals: DetailValue::Str("audit-unavailable"), then: 503 },
            ],
        },
        mcp: TOOL_RESULT,
    },
];

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

/// The phases of `code` that run before the handler starts: those in which a call can stop
/// without anything it asked for being done.
pub fn not_processed_phases(code: ErrorCode) -> impl Iterator<Item = Phase> {
    spec(code).phases.iter().copied().filter(|p| p.is_before_handler())
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
