//! The error matrix: one table, in code, from which behaviour, `spec/error-matrix.json` and the
//! docs tables follow.
//!
//! Each [`CodeSpec`] row states, for one code, the phases that produce it, its failure layer, its
//! retry rule (a default plus the details values that change it), whether it may be stored as a
//! terminal idempotency result, its details schema (derived from the typed details with
//! `schemars`), the agent-visible and log-only fields, the adapter duty, the HTTP status analog
//! and the MCP mapping. The constructors of [`AgentSurfaceError`] derive
//! `retry` from this table ([`derive_retry`]); `cargo xtask gen-matrix` serializes it
//! ([`to_json`]); `cargo xtask verify-matrix` checks the file, the docs and the tests against it.

use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::code::Effect;
use crate::code::{ErrorCode, Layer, LogLevel, Phase, Retry};
use crate::definition::DefinitionErrorCode;
use crate::details::*;
use crate::error::AgentSurfaceError;
use crate::payload::ErrorPayload;
use crate::repair::RepairAction;
use crate::text::SafeText;
use crate::time::Timestamp;

/// The version of the matrix format; bump on any change to the JSON layout.
pub const FORMAT_VERSION: u32 = 3;

/// A value a details member is compared with in a [`Condition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetailValue {
    /// A string member.
    Str(&'static str),
    /// A boolean member.
    Bool(bool),
}

impl DetailValue {
    fn matches(self, value: Option<&Value>) -> bool {
        match (self, value) {
            (DetailValue::Str(s), Some(Value::String(v))) => v == s,
            (DetailValue::Bool(b), Some(Value::Bool(v))) => *v == b,
            _ => false,
        }
    }

    fn to_json(self) -> Value {
        match self {
            DetailValue::Str(s) => Value::from(s),
            DetailValue::Bool(b) => Value::from(b),
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

    fn json_with(&self, f: impl Fn(T) -> Value) -> Value {
        json!({
            "default": f(self.default),
            "when": self.conditions.iter().map(|c| json!({
                "field": c.field,
                "equals": c.equals.to_json(),
                "then": f(c.then),
            })).collect::<Vec<_>>(),
        })
    }
}

const fn fixed<T>(value: T) -> Rule<T> {
    Rule { default: value, conditions: &[] }
}

/// The shape of a code's `details`.
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
    /// Example payloads, one per retry outcome at least.
    pub examples: fn() -> Vec<ErrorPayload>,
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
        examples: || vec![AgentSurfaceError::capability_not_found().into_payload()],
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
        examples: || vec![AgentSurfaceError::capability_not_available("Sign in to a store first.").into_payload()],
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
        examples: || {
            vec![
                AgentSurfaceError::ambiguous_instance(vec![
                    InstanceRef {
                        instance_id: "left".into(),
                        registration_id: "r-1".into(),
                        description: Some("Left cart".into()),
                        context: None,
                    },
                    InstanceRef {
                        instance_id: "right".into(),
                        registration_id: "r-2".into(),
                        description: None,
                        context: None,
                    },
                ])
                .into_payload(),
            ]
        },
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
        adapter_duty: "Refresh; after a mid-flight unmount of a non-idempotent capability, tell the model to verify the state before repeating.",
        http_status: fixed(410),
        mcp: TOOL_RESULT,
        examples: || {
            vec![
                AgentSurfaceError::component_unmounted(UnmountPhase::Resolve).into_payload(),
                AgentSurfaceError::component_unmounted(UnmountPhase::MidFlight).into_payload(),
            ]
        },
    },
    CodeSpec {
        code: ErrorCode::StaleCapability,
        meaning: "The call references a superseded snapshot: a replaced registration, another surface, or an older version.",
        when: "Resolution: the registrationId was replaced, the surfaceId belongs to another load, or a destructive/external call carries an outdated surface version.",
        phases: &[Resolve],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: fixed(Retry::AfterRefresh),
        cacheable: true,
        details: typed::<StaleDetails>(&["reason", "liveRegistrationId"]),
        log_only: &["presentedSurfaceId", "presentedVersion", "currentVersion"],
        log_level: fixed(LogLevel::Debug),
        adapter_duty: "Refresh and re-resolve; never strip the staleness tokens to force the call through.",
        http_status: fixed(412),
        mcp: TOOL_RESULT,
        examples: || {
            vec![
                AgentSurfaceError::stale_capability(StaleReason::RegistrationReplaced, Some("r-9".into()))
                    .into_payload(),
                AgentSurfaceError::stale_capability(StaleReason::SurfaceVersionMismatch, None).into_payload(),
            ]
        },
    },
    CodeSpec {
        code: ErrorCode::InvocationConflict,
        meaning: "This consumer already used the invocation id for a different request within the idempotency window.",
        when: "Admission: the request fingerprint differs from the in-flight or stored record for (consumerKey, invocationId).",
        phases: &[Admission],
        handler_may_return: false,
        layer: fixed(Layer::Protocol),
        retry: fixed(Retry::WithChanges),
        cacheable: false,
        details: typed::<ConflictDetails>(&["reason"]),
        log_only: &["storedFingerprint", "presentedFingerprint"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Treat as an id-collision bug; mint a namespaced id and send the new request with it.",
        http_status: fixed(422),
        mcp: TOOL_RESULT,
        examples: || vec![AgentSurfaceError::invocation_conflict().into_payload()],
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
        details: typed::<InvalidInputDetails>(&["issues", "lockedFields"]),
        log_only: &["rawInput"],
        log_level: fixed(LogLevel::Info),
        adapter_duty: "Give the issues to the model verbatim.",
        http_status: fixed(422),
        mcp: TOOL_RESULT,
        examples: || {
            vec![
                AgentSurfaceError::invalid_input(
                    vec![InputIssue { path: "/quantity".into(), message: "must be at least 1".into() }],
                    None,
                )
                .into_payload(),
                AgentSurfaceError::invalid_input(
                    vec![InputIssue { path: "/cartId".into(), message: "is filled by the runtime".into() }],
                    Some(vec!["cartId".into()]),
                )
                .into_payload(),
            ]
        },
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
        examples: || vec![AgentSurfaceError::not_authenticated().into_payload()],
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
        examples: || {
            vec![
                AgentSurfaceError::not_authorized(Origin::Client).into_payload(),
                AgentSurfaceError::not_authorized(Origin::Server).into_payload(),
            ]
        },
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
        examples: || {
            vec![
                AgentSurfaceError::precondition_failed("Shipped orders cannot be cancelled.").into_payload(),
                AgentSurfaceError::binding_failed().into_payload(),
                AgentSurfaceError::client_input_required().into_payload(),
            ]
        },
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
        details: typed::<ConfirmationRequiredDetails>(&["confirmationId", "summary", "expiresAt", "effect", "origin"]),
        log_only: &["inputHash"],
        log_level: fixed(LogLevel::Debug),
        adapter_duty: "In wait mode handle it internally; in two-phase mode relay it to the model with the instruction to retry with the confirmationId once approved.",
        http_status: fixed(428),
        mcp: TOOL_RESULT,
        examples: || {
            vec![
                AgentSurfaceError::confirmation_required(
                    "c-7f3a",
                    SafeText::from("Cancel order A-1001 and refund 42.00 EUR."),
                    Timestamp::from_unix_millis(1_795_957_500_000),
                    Effect::Destructive,
                    Origin::Client,
                )
                .into_payload(),
            ]
        },
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
        examples: || {
            [
                ConfirmationInvalidReason::Expired,
                ConfirmationInvalidReason::Denied,
                ConfirmationInvalidReason::Consumed,
                ConfirmationInvalidReason::Mismatch,
            ]
            .into_iter()
            .map(|r| AgentSurfaceError::confirmation_invalid(r).into_payload())
            .collect()
        },
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
        examples: || {
            vec![
                AgentSurfaceError::rate_limited(RateLimitReason::Rate, std::time::Duration::from_millis(1200))
                    .into_payload(),
                AgentSurfaceError::rate_limited(RateLimitReason::QueueFull, std::time::Duration::from_millis(300))
                    .into_payload(),
            ]
        },
    },
    CodeSpec {
        code: ErrorCode::Timeout,
        meaning: "The handler exceeded its time budget and was aborted; side effects may or may not have happened.",
        when: "Execution of an idempotent or read-only capability runs past its (or the call's) time budget; for any other capability that is EXECUTION_FAILED {reason: outcome-unknown}.",
        phases: &[Execute],
        handler_may_return: false,
        layer: fixed(Layer::Execution),
        retry: Rule {
            default: Retry::No,
            conditions: &[Condition { field: "idempotent", equals: DetailValue::Bool(true), then: Retry::Yes }],
        },
        cacheable: true,
        details: typed::<TimeoutDetails>(&["timeoutMs", "idempotent"]),
        log_only: &["lateSettlement"],
        log_level: fixed(LogLevel::Warn),
        adapter_duty: "For a non-idempotent capability, prompt a verification observation before any repeat.",
        http_status: fixed(504),
        mcp: TOOL_RESULT,
        examples: || {
            vec![
                AgentSurfaceError::timeout(std::time::Duration::from_secs(5), true).into_payload(),
                AgentSurfaceError::timeout(std::time::Duration::from_secs(5), false).into_payload(),
            ]
        },
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
        examples: || vec![AgentSurfaceError::cancelled().into_payload()],
    },
    CodeSpec {
        code: ErrorCode::ExecutionFailed,
        meaning: "The handler failed, its output was rejected, or a downstream failure could not be mapped to a more precise code.",
        when: "The handler or the precondition fails or panics; the output fails validation, serialization or the size cap; a post-condition fails (verification-failed); the outcome cannot be proven (outcome-unknown: the post-condition check errs, panics or cannot decide, or a non-idempotent, non-read capability times out or is unmounted mid-flight); the idempotency store fails at admission or the confirmation store fails at confirmation (transient); or the confirmation gate cannot decide (a panicking summary or gate, a gated capability without a confirmation engine).",
        phases: &[Admission, Input, Confirmation, Execute, Output],
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
            conditions: &[Condition { field: "reason", equals: DetailValue::Str("transport"), then: 502 }],
        },
        mcp: TOOL_RESULT,
        examples: || {
            use ExecutionFailedReason as R;
            vec![
                AgentSurfaceError::execution_failed(R::HandlerError).into_payload(),
                AgentSurfaceError::execution_failed(R::OutputInvalid).into_payload(),
                AgentSurfaceError::execution_failed(R::OutputTooLarge).into_payload(),
                AgentSurfaceError::execution_failed(R::Transport).into_payload(),
                AgentSurfaceError::transient(std::time::Duration::from_millis(2000)).into_payload(),
                AgentSurfaceError::execution_failed(R::VerificationFailed).into_payload(),
                AgentSurfaceError::outcome_unknown().into_payload(),
            ]
        },
    },
];

/// The matrix row of a code.
pub fn spec(code: ErrorCode) -> &'static CodeSpec {
    // `ErrorCode` has implicit discriminants in `ALL` order; `matrix_rows_follow_the_enum` checks
    // that `MATRIX` follows the same order.
    &MATRIX[code as usize]
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
        trigger: "A missing or empty description, an unknown field, or meta that is not plain JSON.",
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

fn retry_json(r: Retry) -> Value {
    Value::from(r.as_str())
}

/// The JSON form of one row.
pub fn code_to_json(s: &CodeSpec) -> Value {
    let examples: Vec<Value> = (s.examples)().iter().map(ErrorPayload::to_json).collect();
    json!({
        "code": s.code.as_str(),
        "meaning": s.meaning,
        "when": s.when,
        "phases": s.phases.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "handlerMayReturn": s.handler_may_return,
        "layer": s.layer.json_with(|l| Value::from(l.as_str())),
        "retry": s.retry.json_with(retry_json),
        "cacheableAsTerminal": s.cacheable,
        "retryReusesInvocationId": !s.cacheable,
        "details": match s.details {
            DetailsSpec::None => Value::Null,
            DetailsSpec::Typed { keys, open, .. } => json!({
                "keys": keys,
                "authorKeysAllowed": open,
                "schema": s.details.schema_json(),
            }),
        },
        "logOnly": s.log_only,
        "logLevel": s.log_level.json_with(|l| Value::from(l.as_str())),
        "adapterDuty": s.adapter_duty,
        "httpStatus": s.http_status.json_with(Value::from),
        "mcp": {
            "channel": s.mcp.channel,
            "strictProtocolError": s.mcp.strict_protocol_error,
        },
        "examples": examples,
    })
}

/// The whole matrix as the JSON document written to `spec/error-matrix.json`.
pub fn to_json() -> Value {
    json!({
        "$comment": "GENERATED by `cargo xtask gen-matrix` from crates/agent-surface-core/src/matrix.rs. Do not edit by hand.",
        "formatVersion": FORMAT_VERSION,
        "retryCategories": Retry::ALL.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        "phases": Phase::ALL.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "codes": MATRIX.iter().map(code_to_json).collect::<Vec<_>>(),
        "repairActions": repair_actions_json(),
        "definitionErrors": DEFINITION_MATRIX.iter().map(|d| json!({
            "code": d.code.as_str(),
            "layer": Layer::Configuration.as_str(),
            "trigger": d.trigger,
        })).collect::<Vec<_>>(),
    })
}

/// The `repairActions` table: for each repair action, its meaning and the retry categories it is
/// compatible with. A repair plan fits a payload only when every step's action is compatible with
/// the payload's retry.
pub fn repair_actions_json() -> Value {
    Value::Array(
        RepairAction::ALL
            .iter()
            .map(|a| {
                json!({
                    "action": a.as_str(),
                    "meaning": a.meaning(),
                    "compatibleRetry": a.compatible().iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The repair-action table of `spec/error-model.md` (hand-maintained there; kept in sync by a
/// test).
pub fn repair_markdown_table() -> String {
    let mut out = String::from("| Action | Meaning | Compatible retry |\n|---|---|---|\n");
    for a in RepairAction::ALL {
        let retries = a.compatible().iter().map(|r| format!("`{}`", r.as_str())).collect::<Vec<_>>().join(", ");
        out.push_str(&format!("| `{}` | {} | {} |\n", a.as_str(), a.meaning(), retries));
    }
    out
}

/// The matrix as the JSON text of `spec/error-matrix.json` (pretty, newline at the end).
pub fn to_json_string() -> String {
    let mut s = serde_json::to_string_pretty(&to_json()).unwrap_or_default();
    s.push('\n');
    s
}

fn rule_text<T: Copy + PartialEq>(rule: &Rule<T>, show: impl Fn(T) -> String) -> String {
    let mut out = show(rule.default);
    for c in rule.conditions {
        let v = match c.equals {
            DetailValue::Str(s) => s.to_string(),
            DetailValue::Bool(b) => b.to_string(),
        };
        out.push_str(&format!("; `{}` when `{}: {}`", show(c.then).trim_matches('`'), c.field, v));
    }
    out
}

/// The code table of `spec/error-model.md` (the generated section between its markers).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| Code | Phases | Layer | Retry | Cacheable | Details keys | Log-only | Log level | HTTP |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in &MATRIX {
        let keys = match s.details {
            DetailsSpec::None => "—".to_string(),
            DetailsSpec::Typed { keys, open, .. } => {
                let mut k = keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                if open {
                    k.push_str(", author keys");
                }
                k
            }
        };
        let log_only = if s.log_only.is_empty() {
            "—".to_string()
        } else {
            s.log_only.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            s.code.as_str(),
            s.phases.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
            rule_text(&s.layer, |l| l.as_str().to_string()),
            rule_text(&s.retry, |r| format!("`{}`", r.as_str())),
            if s.cacheable { "yes" } else { "no" },
            keys,
            log_only,
            rule_text(&s.log_level, |l| l.as_str().to_uppercase()),
            rule_text(&s.http_status, |h| h.to_string()),
        ));
    }
    out
}

/// The definition-error table of `spec/error-model.md`.
pub fn definition_markdown_table() -> String {
    let mut out = String::from("| Code | Trigger |\n|---|---|\n");
    for d in &DEFINITION_MATRIX {
        out.push_str(&format!("| `{}` | {} |\n", d.code.as_str(), d.trigger));
    }
    out
}

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
    fn every_retry_outcome_has_an_example() {
        for s in &MATRIX {
            let examples = (s.examples)();
            for r in s.retry.values() {
                assert!(examples.iter().any(|p| p.retry() == r), "{}: no example with retry {r}", s.code);
            }
            for p in &examples {
                assert_eq!(p.code(), s.code);
            }
        }
    }

    #[test]
    fn non_cacheable_codes_are_the_specified_three() {
        let non: Vec<_> = MATRIX.iter().filter(|s| !s.cacheable).map(|s| s.code).collect();
        assert_eq!(non, [ErrorCode::InvocationConflict, ErrorCode::ConfirmationRequired, ErrorCode::RateLimited]);
    }
}
