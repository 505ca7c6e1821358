//! Typed `details` for each code, serialized in the specification's camelCase.
//!
//! These structs are the wire contract: the matrix derives each code's details JSON Schema from
//! them (through `schemars`), and [`crate::ErrorPayload::details_as`] parses them back.
//! Codes without details (`CAPABILITY_NOT_FOUND`, `NOT_AUTHENTICATED`, `CANCELLED`) have no struct:
//! their payload carries no `details` member at all.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::code::Effect;

/// Where a rejected request was judged: by the client-side runtime or by a server it called.
#[expect(
    clippy::exhaustive_enums,
    reason = "a wire value of the matrix's details schemas: a new one changes the contract"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Decided by this runtime's own policies.
    Client,
    /// Decided by a server behind an executor and mapped to the code.
    Server,
}

/// `CAPABILITY_NOT_AVAILABLE` details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotAvailableDetails {
    /// Why the capability is disabled; the same string as the descriptor's `unavailableReason`.
    pub reason: String,
}

/// One candidate listed by `AMBIGUOUS_INSTANCE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceRef {
    /// The instance id to name in the next call's target.
    pub instance_id: String,
    /// The live registration id of that instance.
    pub registration_id: String,
    /// A short author-provided description of the instance (view instances).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A short author-provided context line (procedure references).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// The reserved argument through which a model names a call's target instance: the one way to
/// answer `AMBIGUOUS_INSTANCE` on a transport where a model changes only a tool's arguments.
///
/// Discovery adds it to the input schema of a capability that several instances visible to the
/// consumer can handle (an optional string, one of their instance ids); the registry's `invoke` lifts it out of
/// the input into the call's target before anything else reads the request (on every transport,
/// so the two ways of naming a target fingerprint alike), and an input schema may not declare a
/// property of this name (`INVALID_DEFINITION`). `null` is the same as leaving it out. A value
/// that is not a string, or names another instance than the call's `target`, stays in the input
/// and is `INVALID_INPUT` in phase 5 (the second with `reason: target-mismatch`).
pub const TARGET_ARGUMENT: &str = "_instance";

/// `AMBIGUOUS_INSTANCE` details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmbiguousDetails {
    /// The live instances that match.
    pub instances: Vec<InstanceRef>,
}

/// When a `COMPONENT_UNMOUNTED` was detected.
#[expect(
    clippy::exhaustive_enums,
    reason = "a wire value of COMPONENT_UNMOUNTED's details: a new one changes the contract"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UnmountPhase {
    /// Before the handler started (nothing ran): at resolution, the target matched a tombstone; or
    /// the registration was unmounted or replaced while the call waited before its handler.
    Resolve,
    /// While the handler ran: side effects may have happened.
    MidFlight,
}

/// `COMPONENT_UNMOUNTED` details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnmountedDetails {
    /// When the unmount was detected.
    pub phase: UnmountPhase,
}

/// Why a call is `STALE_CAPABILITY`.
#[expect(
    clippy::exhaustive_enums,
    reason = "a details reason of the matrix: a new one changes the wire contract (matrix, spec, clients)"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StaleReason {
    /// The named registration was replaced by a live one.
    RegistrationReplaced,
    /// The `surfaceId` belongs to another process or page load.
    SurfaceReloaded,
    /// The surface version changed since the call was planned (destructive / external effects).
    SurfaceVersionMismatch,
    /// The call named a tool version that is not the tool's live one (every effect).
    ToolVersionMismatch,
}

/// `STALE_CAPABILITY` details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaleDetails {
    /// Which staleness token did not match.
    pub reason: StaleReason,
    /// The registration that replaced the named one, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_registration_id: Option<String>,
    /// The tool's live version, with `reason: tool-version-mismatch`: the version a refreshed
    /// listing shows (see [`crate::tool_version`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_tool_version: Option<String>,
}

/// Why `INVOCATION_CONFLICT`: whose key the earlier request holds.
///
/// Closed with the matrix: each reason has its retry rule and its message.
#[expect(
    clippy::exhaustive_enums,
    reason = "a details reason of the matrix, each with its retry rule: a new one changes the wire contract"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictReason {
    /// The invocation id was used for a different request within the idempotency window: the
    /// client's id collides, and a fresh id fixes it.
    IdReusedWithDifferentRequest,
    /// The capability's natural idempotency key (e.g. the order of a refund) names an operation
    /// that was made, or is being made, with different input: nothing the client sends can make
    /// this request run, so it is not retried.
    NaturalKeyUsedByDifferentRequest,
}

/// `INVOCATION_CONFLICT` details. Never anything about the earlier request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConflictDetails {
    /// Whose key the earlier request holds: the invocation id's or the natural key's.
    pub reason: ConflictReason,
}

/// One input problem reported by `INVALID_INPUT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputIssue {
    /// A JSON Pointer (RFC 6901) to the offending location; `""` is the whole input.
    pub path: String,
    /// What is wrong there, from the schema layer; never echoes values of sensitive fields.
    pub message: String,
}

/// `INVALID_INPUT` details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvalidInputDetails {
    /// The problems found, in a stable order.
    pub issues: Vec<InputIssue>,
    /// Bound fields that the caller supplied although the runtime fills them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_fields: Option<Vec<String>>,
    /// Set when the problem is not the schema's: the call named its target two ways that
    /// disagree, or a value the schema allows is not one the capability can take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<InvalidInputReason>,
}

/// Why an `INVALID_INPUT` is not a plain schema violation.
#[expect(
    clippy::exhaustive_enums,
    reason = "a details reason of the matrix: a new one changes the wire contract (matrix, spec, clients)"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InvalidInputReason {
    /// The reserved target argument names another instance than the call's `target`.
    TargetMismatch,
    /// The input passes the schema, but a value in it is not one the capability's input type can
    /// hold (an integer written with a fraction, say, or a value the type's own decoding refuses);
    /// each issue names the value.
    Undecodable,
}

/// `NOT_AUTHORIZED` details: the origin only, never permission names or policy internals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotAuthorizedDetails {
    /// Who denied the call.
    pub origin: Origin,
}

/// `PRECONDITION_FAILED` details: author-provided, agent-safe values.
///
/// `reason: "binding-failed"` is reserved for bindings that failed to evaluate and switches the
/// retry category to `after-refresh`; `reason: "client-input-required"` is reserved for questions
/// the transport cannot carry and switches it to `no`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreconditionDetails {
    /// A machine-readable reason chosen by the author (kebab-case). The runtime's own,
    /// `binding-failed` and `client-input-required`, are dropped from an author's details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Further author-provided, agent-safe values.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The reserved `PRECONDITION_FAILED` reason for bindings that failed to evaluate.
pub const BINDING_FAILED: &str = "binding-failed";

/// The reserved `PRECONDITION_FAILED` reason for a capability that asks the client questions
/// (a form for the person, a completion from the client's model, the client's roots) through a
/// transport that cannot carry them; retry `no`.
pub const CLIENT_INPUT_REQUIRED: &str = "client-input-required";

/// `CONFIRMATION_REQUIRED` details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmationRequiredDetails {
    /// The id to send back as `confirmationId` once approved.
    pub confirmation_id: String,
    /// What will happen, in one author-provided sentence, for the person who approves.
    pub summary: String,
    /// When the pending confirmation expires (RFC 3339, UTC).
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
    /// The declared effect of the gated capability.
    pub effect: Effect,
    /// Who requires the confirmation.
    pub origin: Origin,
    /// Where a person approves it (the approval page of this confirmation), when the service
    /// configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uri"))]
    pub approval_url: Option<String>,
}

/// Why confirmation evidence was rejected.
#[expect(
    clippy::exhaustive_enums,
    reason = "a details reason of the matrix: a new one changes the wire contract (matrix, spec, clients)"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ConfirmationInvalidReason {
    /// The confirmation expired; a fresh confirmation cycle may succeed.
    Expired,
    /// A person denied it. A decision to respect, never to retry around.
    Denied,
    /// The evidence was already used once.
    Consumed,
    /// The evidence belongs to another consumer, capability, target or input.
    Mismatch,
}

/// `CONFIRMATION_INVALID` details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmationInvalidDetails {
    /// Why the evidence was rejected.
    pub reason: ConfirmationInvalidReason,
}

/// Why a call was `RATE_LIMITED`.
#[expect(
    clippy::exhaustive_enums,
    reason = "a details reason of the matrix: a new one changes the wire contract (matrix, spec, clients)"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RateLimitReason {
    /// A rate limit is exhausted.
    Rate,
    /// The action queue is full.
    QueueFull,
}

/// `RATE_LIMITED` details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitedDetails {
    /// Which limit was hit.
    pub reason: RateLimitReason,
    /// How long to wait before retrying, in milliseconds.
    pub retry_after_ms: u64,
}

/// `TIMEOUT` details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimeoutDetails {
    /// The budget that was exceeded, in milliseconds.
    pub timeout_ms: u64,
    /// Whether the capability is declared idempotent. Informational: it does not decide the retry
    /// category, which is `yes` for every `TIMEOUT` (only a capability declared idempotent or
    /// whose effect is `read` gets one).
    pub idempotent: bool,
}

/// What kind of `EXECUTION_FAILED` this is.
#[expect(
    clippy::exhaustive_enums,
    reason = "a details reason of the matrix, some with their own retry rule: a new one changes the wire contract"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionFailedReason {
    /// The handler returned an error or panicked.
    HandlerError,
    /// The handler's output violated the output schema or could not be serialized; withheld.
    OutputInvalid,
    /// The handler's output exceeded the size cap; withheld.
    OutputTooLarge,
    /// A downstream transport or server failed in a way no more precise code describes.
    Transport,
    /// The post-condition check reported that the intended result is not there.
    VerificationFailed,
    /// The operation may have committed, but neither success nor non-execution can be proven.
    OutcomeUnknown,
    /// Strict audit: the audit trail could not record that the call starts, so it did not run.
    /// Always transient (`after-delay`).
    AuditUnavailable,
    /// The idempotency store could not admit the call (it failed, or did not answer within the
    /// store budget): nothing ran, and nothing is recorded under the invocation id for this
    /// attempt. Always transient (`after-delay`), and sent again under the *same* id: that id may
    /// hold the result of an earlier attempt whose answer was lost, which a new id would run
    /// again.
    StoreUnavailable,
}

/// `EXECUTION_FAILED` details.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionFailedDetails {
    /// What failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ExecutionFailedReason>,
    /// `true` marks a network-ish failure worth retrying after a delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transient: Option<bool>,
    /// How long to wait before retrying a transient failure, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}
