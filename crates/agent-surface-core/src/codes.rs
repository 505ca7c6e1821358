//! The sixteen codes, each written once: one block per code holds every fact about it that core
//! keeps, and the modules that need a fact read their column of this table.
//!
//! The table is a declarative macro, `code_table!`: `code_table!(COLUMN => consumer)` calls the
//! consumer macro with one `Code column-value` pair per code, in specification order (the order
//! of `ErrorCode::ALL` and of the enum's discriminants). A block reads
//! `Variant = "WIRE_NAME" { column: value, … }` after the variant's doc comment, and its columns
//! are, in this order:
//!
//! - `variants` (code.rs): the variant, its doc comment and its wire name (written before the
//!   block's braces);
//! - `matrix` (matrix.rs): the `CodeSpec` fields after `code` (in scope there: `fixed`, `typed`,
//!   `Rule`, `Condition`, `DetailValue`, `DetailsSpec`, `TOOL_RESULT`, the phases by name, the
//!   details types);
//! - `messages` (message.rs): the code's message templates, `NAME = (id, text[, arguments:
//!   text]);` with their docs;
//! - `examples` (examples.rs): the example errors, each an `AgentSurfaceError` (made a payload
//!   there), one per value of the retry rule at least;
//! - `decisions` (decision.rs): the client decision rows, conditional rows first and the default
//!   row last (`row`, `when`, `waiting`; `R` is `Retry`);
//! - `wire` (wire.rs): the wire classes, one `(retry, class, delay, failure class, failure code)`
//!   per retry category the matrix can give (`R` is `Retry`, `K` is `RetryClass`).
//!
//! A value is tokens, not items: each column is expanded in the module that reads it and resolves
//! its names there, so this file imports nothing and names no module (the import check stays
//! quiet: a consumer depends on this file, never the reverse), and each column keeps to the
//! vocabulary of its module — the matrix row sees no payloads, the examples see the constructors.
//! A block missing a column, or with one out of order, fails to compile (the `@select` arm
//! below, the grammar's one statement, does not match it).
//!
//! A new code is one block here, plus its `details` struct (`details.rs`) and its constructor
//! (`error.rs`) where it has typed details or a typed constructor.

/// The table of codes: see the module's docs.
macro_rules! code_table {
    ($column:ident => $then:ident) => {
        $crate::codes::code_table! { @select $column $then;
            /// The capability does not exist in this consumer's surface (or is hidden from it).
            CapabilityNotFound = "CAPABILITY_NOT_FOUND" {
                matrix: {
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
                messages: {
                    /// `CAPABILITY_NOT_FOUND`.
                    NOT_FOUND = ("capability-not-found",
                        "This capability is not in your current tool list. Refresh the tool list and choose a capability that is listed.");
                },
                examples: [
                    AgentSurfaceError::capability_not_found(),
                ],
                decisions: [
                    row(R::AfterRefresh, Refresh, Fresh, RETURNED,
                        "The tool list is stale or the tool is hidden: a re-listing tells which."),
                ],
                wire: [
                    (R::AfterRefresh, K::AfterRefresh, NoDelay, Capability, "resource_not_found"),
                ],
            }

            /// The capability exists and is visible but is currently disabled.
            CapabilityNotAvailable = "CAPABILITY_NOT_AVAILABLE" {
                matrix: {
                    meaning: "The capability exists and is visible but is disabled right now.",
                    when: "The availability phase finds it disabled at run time, or the authority policy disables it for this consumer, with a reason; or it was disabled while the call waited before its handler (execute, notProcessed: nothing ran).",
                    phases: &[Availability, Authority, Execute],
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
                messages: {
                    /// `CAPABILITY_NOT_AVAILABLE`; slot: `reason`.
                    NOT_AVAILABLE = ("capability-not-available",
                        "This capability is disabled right now: {reason} Complete the enabling step first, refresh the tool list, then retry.");
                },
                examples: [
                    AgentSurfaceError::capability_not_available("Sign in to a store first."),
                ],
                decisions: [
                    row(R::AfterRefresh, Refresh, Fresh, RETURNED,
                        "Disabled: retry only once the re-listed surface shows it enabled."),
                ],
                wire: [
                    (R::AfterRefresh, K::AfterRefresh, NoDelay, Capability, "capability_unsupported"),
                ],
            }

            /// More than one live instance matches and none was named.
            AmbiguousInstance = "AMBIGUOUS_INSTANCE" {
                matrix: {
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
                messages: {
                    /// `AMBIGUOUS_INSTANCE` (names [`crate::details::TARGET_ARGUMENT`], which every transport
                    /// carries in a tool's arguments).
                    AMBIGUOUS = ("ambiguous-instance",
                        "Several instances can handle this call. Choose one from details.instances and retry with its instanceId as the _instance argument.");
                },
                examples: [
                    AgentSurfaceError::ambiguous_instance(vec![
                        InstanceRef {
                            instance_id: "left".into(),
                            registration_id: "r-1".into(),
                            description: Some("Left cart".into()),
                            context: None,
                        },
                        InstanceRef { instance_id: "right".into(), registration_id: "r-2".into(), description: None, context: None },
                    ]),
                ],
                decisions: [
                    row(R::WithChanges, ChangeInput, IdRule::None, RETURNED,
                        "The model picks one of details.instances as the target."),
                ],
                wire: [
                    (R::WithChanges, K::WithChanges, NoDelay, Capability, "invalid_input"),
                ],
            }

            /// The target registration is gone (tombstone hit) or was unmounted mid-flight.
            ComponentUnmounted = "COMPONENT_UNMOUNTED" {
                matrix: {
                    meaning: "The target registration existed recently and is gone, or was unmounted while the call ran.",
                    when: "Resolution hits a tombstone, or the registration is unmounted or replaced while the call waits before its handler (phase resolve, in execute, notProcessed: nothing ran), or during execution of an idempotent or read-only capability (phase mid-flight; for any other capability that is EXECUTION_FAILED {reason: outcome-unknown}).",
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
                messages: {
                    /// `COMPONENT_UNMOUNTED` at resolution.
                    UNMOUNTED_RESOLVE = ("component-unmounted.resolve",
                        "The target of this call was removed. Refresh the tool list and retarget the call.",
                        arguments: "The instance this call was for was removed. Refresh the tool list and repeat the call on a listed instance (in the _instance argument, where the tool has one).");
                    /// `COMPONENT_UNMOUNTED` while running (sent only for a capability whose repeat cannot double
                    /// an effect).
                    UNMOUNTED_MID_FLIGHT = ("component-unmounted.mid-flight",
                        "The target was removed while the call ran; it is safe to repeat. Refresh the tool list and retarget the call if it is still needed.",
                        arguments: "The instance this call ran on was removed while it ran; it is safe to repeat. Refresh the tool list and repeat the call on a listed instance if it is still needed.");
                },
                examples: [
                    AgentSurfaceError::component_unmounted(UnmountPhase::Resolve),
                    AgentSurfaceError::component_unmounted(UnmountPhase::MidFlight),
                ],
                decisions: [
                    row(R::AfterRefresh, Refresh, Fresh, RETURNED,
                        "The target is gone (mid-flight only for a read or an idempotent call): retry only if the re-listing shows it (or its replacement) again."),
                ],
                wire: [
                    (R::AfterRefresh, K::AfterRefresh, NoDelay, Capability, "resource_not_found"),
                ],
            }

            /// The call references a superseded registration, surface or surface version.
            StaleCapability = "STALE_CAPABILITY" {
                matrix: {
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
                messages: {
                    /// `STALE_CAPABILITY`.
                    STALE = ("stale-capability",
                        "This call was planned against an outdated view of the tools. Refresh the tool list, resolve the target again, then retry.",
                        arguments: "This call was planned against an outdated tool list. Refresh the tool list, check that the tool and the instance you chose are still listed, then repeat the call.");
                    /// `STALE_CAPABILITY {reason: tool-version-mismatch}`: not retried as it stands (the decision
                    /// table's `refresh-then-ask`).
                    STALE_TOOL_VERSION = ("stale-capability.tool-version",
                        "This tool changed since the call was planned, so it did not run. Refresh the tool list and read its new description and input schema before calling it again: inputs may mean something else now.");
                },
                examples: [
                    AgentSurfaceError::stale_capability(StaleReason::RegistrationReplaced, Some("r-9".into())),
                    AgentSurfaceError::stale_capability(StaleReason::SurfaceVersionMismatch, None),
                    AgentSurfaceError::stale_tool_version("3f1c0a9b2d4e6f8071a2"),
                ],
                decisions: [
                    when("reason", DetailValue::Str("tool-version-mismatch"), row(R::AfterRefresh, RefreshThenAsk, IdRule::None, RETURNED,
                        "The tool's definition changed: the model reads the new one before it calls again.")),
                    row(R::AfterRefresh, Refresh, Fresh, RETURNED,
                        "Planned against an old surface: update the tokens, retarget to details.liveRegistrationId."),
                ],
                wire: [
                    (R::AfterRefresh, K::AfterRefresh, NoDelay, Capability, "stale_definition"),
                ],
            }

            /// The invocation id was already used by this caller for a different request.
            InvocationConflict = "INVOCATION_CONFLICT" {
                matrix: {
                    meaning: "This caller (the signed-in person, or an anonymous session) already used the invocation id for a different request within the idempotency window, or the capability's natural idempotency key names an operation made with different input.",
                    when: "Admission: the request fingerprint differs from the in-flight or stored record for (principal, invocationId), or for the capability's natural key (reason natural-key-used-by-different-request).",
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
                messages: {
                    /// `INVOCATION_CONFLICT`.
                    CONFLICT = ("invocation-conflict",
                        "This invocationId was already used for a different request. Send the new request with a fresh invocationId.",
                        arguments: "This call reused the id of a different, earlier request, so it did not run. Make the call again; if the same error comes back, stop and report it.");
                    /// `INVOCATION_CONFLICT` on a natural key.
                    CONFLICT_NATURAL_KEY = ("invocation-conflict.natural-key",
                        "The operation this call names (by its key, such as an order) was already made with different input, so this call did not run. Do not repeat it; tell the user what was done already.");
                },
                examples: [
                    AgentSurfaceError::invocation_conflict(),
                    AgentSurfaceError::natural_key_conflict(),
                ],
                decisions: [
                    when("reason", DetailValue::Str("natural-key-used-by-different-request"), row(R::No, Stop, IdRule::None, RETURNED,
                        "The operation the input's key names was made with other input: nothing to retry, tell the user.")),
                    row(R::WithChanges, NewId, Derived, NOT_CONVERGING,
                        "The id belongs to another request; the model does not choose ids, the client does."),
                ],
                wire: [
                    (R::WithChanges, K::WithChanges, NoDelay, Capability, "invalid_input"),
                    (R::No, K::No, NoDelay, Capability, "invalid_input"),
                ],
            }

            /// The input does not satisfy the schema, or a bound field was supplied.
            InvalidInput = "INVALID_INPUT" {
                matrix: {
                    meaning: "The input does not satisfy the capability's schema or its input type, or it supplies a field the runtime binds.",
                    when: "Input validation fails, or a bound (locked) field is present, or an input the schema allows does not decode into the handler's type (reason undecodable); or a handler reports a server-side validation failure.",
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
                messages: {
                    /// `INVALID_INPUT`; slot: `paths`.
                    INVALID_INPUT = ("invalid-input",
                        "The input does not match the schema{paths}. Fix the problems listed in details.issues, then retry.");
                    /// `INVALID_INPUT` for bound fields; slots: `paths`, `fields`.
                    INVALID_INPUT_LOCKED = ("invalid-input.locked",
                        "The input does not match the schema{paths}. Remove the fields filled by the runtime ({fields}), fix the problems listed in details.issues, then retry.");
                    /// `INVALID_INPUT {reason: undecodable}`; slot: `paths`.
                    INVALID_INPUT_UNDECODABLE = ("invalid-input.undecodable",
                        "The input passes the schema, but the capability cannot take the value{paths}. Fix the problems listed in details.issues, then retry.");
                },
                examples: [
                    AgentSurfaceError::invalid_input(
                        vec![InputIssue { path: "/quantity".into(), message: "must be at least 1".into() }],
                        None,
                    ),
                    AgentSurfaceError::invalid_input(
                        vec![InputIssue { path: "/cartId".into(), message: "is filled by the runtime".into() }],
                        Some(vec!["cartId".into()]),
                    ),
                    AgentSurfaceError::undecodable_input(vec![InputIssue {
                        path: "/quantity".into(),
                        message: "must be an integer written without a fraction or an exponent (5, not 5.0 or 5e0)".into(),
                    }]),
                ],
                decisions: [
                    row(R::WithChanges, ChangeInput, IdRule::None, RETURNED,
                        "The model fixes the input from details.issues."),
                ],
                wire: [
                    (R::WithChanges, K::WithChanges, NoDelay, Capability, "invalid_input"),
                ],
            }

            /// No authenticated identity where one is required.
            NotAuthenticated = "NOT_AUTHENTICATED" {
                matrix: {
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
                messages: {
                    /// `NOT_AUTHENTICATED`.
                    NOT_AUTHENTICATED = ("not-authenticated",
                        "No signed-in user is attached to this call. Tell the user to sign in; do not retry and do not ask for credentials.");
                },
                examples: [
                    AgentSurfaceError::not_authenticated(),
                ],
                decisions: [
                    row(R::No, Stop, IdRule::None, RETURNED,
                        "The user signs in; nothing the agent sends can fix it."),
                ],
                wire: [
                    (R::No, K::No, NoDelay, Governance, "auth_required"),
                ],
            }

            /// Authenticated but not permitted.
            NotAuthorized = "NOT_AUTHORIZED" {
                matrix: {
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
                messages: {
                    /// `NOT_AUTHORIZED`.
                    NOT_AUTHORIZED = ("not-authorized",
                        "This action is not permitted for the current user. Do not retry; tell the user it was refused.");
                },
                examples: [
                    AgentSurfaceError::not_authorized(Origin::Client),
                    AgentSurfaceError::not_authorized(Origin::Server),
                ],
                decisions: [
                    row(R::No, Stop, IdRule::None, RETURNED,
                        "A denial is never retried."),
                ],
                wire: [
                    (R::No, K::No, NoDelay, Governance, "permission_denied"),
                ],
            }

            /// Schema-valid input that the current state rejects, or a binding that failed to evaluate.
            PreconditionFailed = "PRECONDITION_FAILED" {
                matrix: {
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
                messages: {
                    /// `PRECONDITION_FAILED` with an author explanation; slot: `explanation`.
                    PRECONDITION = ("precondition-failed",
                        "{explanation} Change the input or the state it depends on, then retry.");
                    /// `PRECONDITION_FAILED` for a binding that failed to evaluate.
                    BINDING_FAILED = ("precondition-failed.binding-failed",
                        "A value this call depends on could not be determined. Refresh the tool list and the state it shows, then retry.");
                    /// `PRECONDITION_FAILED` for questions to the client that this transport cannot carry.
                    CLIENT_INPUT_REQUIRED = ("precondition-failed.client-input-required",
                        "This action needs answers from the user's application that this connection cannot carry. Do not retry it here; tell the user it needs an application that can answer it.");
                },
                examples: [
                    AgentSurfaceError::precondition_failed("Shipped orders cannot be cancelled."),
                    AgentSurfaceError::binding_failed(),
                    AgentSurfaceError::client_input_required(),
                ],
                decisions: [
                    when("reason", DetailValue::Str("binding-failed"), row(R::AfterRefresh, Refresh, Fresh, NOT_CONVERGING,
                        "The bound state moved: re-list, retry once; the same failure again ends the loop.")),
                    when("reason", DetailValue::Str("client-input-required"), row(R::No, Stop, IdRule::None, RETURNED,
                        "The call needs answers only the client can give.")),
                    row(R::WithChanges, ChangeInput, IdRule::None, RETURNED,
                        "The state rejects this input: the model changes it (or the state first)."),
                ],
                wire: [
                    (R::WithChanges, K::WithChanges, NoDelay, Capability, "precondition_failed"),
                    (R::AfterRefresh, K::AfterRefresh, NoDelay, Capability, "precondition_failed"),
                    (R::No, K::No, NoDelay, Governance, "user_action_required"),
                ],
            }

            /// A user approval gate is active; not a failure.
            ConfirmationRequired = "CONFIRMATION_REQUIRED" {
                matrix: {
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
                messages: {
                    /// `CONFIRMATION_REQUIRED`; slot: `summary`.
                    CONFIRMATION_REQUIRED = ("confirmation-required",
                        "This action needs approval before it runs: “{summary}” Tell the user it is waiting for approval, then repeat the same call once it is approved.");
                    /// `CONFIRMATION_REQUIRED` with an approval page (`details.approvalUrl`); slot: `summary`.
                    CONFIRMATION_REQUIRED_URL = ("confirmation-required.approval-url",
                        "This action needs a person's approval: “{summary}” Tell the user a person must approve it at the approval page in details.approvalUrl, then repeat the same call.");
                },
                examples: [
                    AgentSurfaceError::confirmation_required(
                        "c-7f3a",
                        SafeText::from("Cancel order A-1001 and refund 42.00 EUR."),
                        Timestamp::from_unix_millis(1_795_957_500_000),
                        Effect::Destructive,
                        Origin::Client,
                    ),
                ],
                decisions: [
                    row(R::WithConfirmation, Confirm, Same, DENIED,
                        "Nothing ran; a person approves or denies, never the model."),
                ],
                wire: [
                    // A person's approval is an action outside the call; the repeat carries the confirmation.
                    (R::WithConfirmation, K::WithChanges, NoDelay, Governance, "user_action_required"),
                ],
            }

            /// The confirmation evidence was rejected.
            ConfirmationInvalid = "CONFIRMATION_INVALID" {
                matrix: {
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
                messages: {
                    /// `CONFIRMATION_INVALID` / expired.
                    CONFIRMATION_EXPIRED = ("confirmation-invalid.expired",
                        "The confirmation expired. Call again without confirmationId to request a fresh approval.",
                        arguments: "The approval expired before the call ran. Repeat the same call to ask for a fresh approval.");
                    /// `CONFIRMATION_INVALID` / denied.
                    CONFIRMATION_DENIED = ("confirmation-invalid.denied",
                        "This action was denied. Do not retry it; respect the decision.");
                    /// `CONFIRMATION_INVALID` / consumed.
                    CONFIRMATION_CONSUMED = ("confirmation-invalid.consumed",
                        "This confirmation was already used. Do not repeat the action; start a new request only if the user asks for it again.");
                    /// `CONFIRMATION_INVALID` / mismatch.
                    CONFIRMATION_MISMATCH = ("confirmation-invalid.mismatch",
                        "This confirmation was given for a different request. Do not reuse it for this one.");
                },
                examples: [
                    AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Expired),
                    AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Denied),
                    AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Consumed),
                    AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Mismatch),
                ],
                decisions: [
                    when("reason", DetailValue::Str("expired"), row(R::WithConfirmation, Reconfirm, Fresh, NOT_CONVERGING,
                        "The approval came too late: a fresh cycle, without the stale id.")),
                    row(R::No, Stop, IdRule::None, RETURNED,
                        "Denied, spent or mismatched evidence: never retried."),
                ],
                wire: [
                    (R::No, K::No, NoDelay, Governance, "policy_blocked"),
                    (R::WithConfirmation, K::WithChanges, NoDelay, Governance, "user_action_required"),
                ],
            }

            /// An advisory rate limit was hit or the action queue is full.
            RateLimited = "RATE_LIMITED" {
                matrix: {
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
                messages: {
                    /// `RATE_LIMITED` / rate; slot: `ms`.
                    RATE_LIMITED = ("rate-limited.rate",
                        "Too many calls right now. Wait {ms} ms before retrying; do not retry sooner.",
                        arguments: "Too many calls right now, so this call did not run; the limit frees up in {ms} ms. Do not repeat it at once: do other steps first, or tell the user to try again later.");
                    /// `RATE_LIMITED` / queue-full; slot: `ms`.
                    QUEUE_FULL = ("rate-limited.queue-full",
                        "The action queue is full. Wait {ms} ms before retrying; do not retry sooner.",
                        arguments: "The action queue is full, so this call did not run; it frees up in {ms} ms. Do not repeat it at once: do other steps first, or tell the user to try again later.");
                },
                examples: [
                    AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1200)),
                    AgentSurfaceError::rate_limited(RateLimitReason::QueueFull, Duration::from_millis(300)),
                ],
                decisions: [
                    waiting(row(R::AfterDelay, Wait, Same, DELAY_TOO_LONG,
                        "Wait details.retryAfterMs, then retry; a limit met again is waited for again, within the loop's bounds.")),
                ],
                wire: [
                    // A capability's quota: in band, never the protocol's -32023 (see `TRANSPORT_LIMITS`).
                    (R::AfterDelay, K::AfterDelay, FromDetails, Reliability, "retryable_transient_error"),
                ],
            }

            /// The handler exceeded its time budget; side effects may or may not have happened.
            Timeout = "TIMEOUT" {
                matrix: {
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
                messages: {
                    /// `TIMEOUT` (sent only for a capability whose repeat cannot double an effect); slot: `ms`.
                    TIMEOUT = ("timeout",
                        "The call ran out of time after {ms} ms. Retry it if it is still needed, under a new invocationId if it had one.",
                        arguments: "The call ran out of time after {ms} ms. Repeat the same call if it is still needed; it is safe to repeat.");
                },
                examples: [
                    AgentSurfaceError::timeout(Duration::from_secs(5), true),
                    AgentSurfaceError::timeout(Duration::from_secs(5), false),
                ],
                decisions: [
                    row(R::Yes, Retry, Fresh, NOT_CONVERGING,
                        "Only a read or an idempotent call times out: repeating cannot double an effect."),
                ],
                wire: [
                    (R::Yes, K::AfterDelay, Zero, Reliability, "retryable_transient_error"),
                ],
            }

            /// The host cancelled the call or the registry was disposed.
            Cancelled = "CANCELLED" {
                matrix: {
                    meaning: "The host or adapter cancelled the call, or the registry was disposed.",
                    when: "The caller's cancellation fires, or the registry is disposed, before or during the call: at admission, while an asynchronous precondition is awaited (input), while the call waits in the rate queue (rate) or for a confirmation (confirmation), before its handler starts (execute; all of these before the handler, notProcessed), or while the handler runs.",
                    phases: &[Admission, Input, Rate, Confirmation, Execute],
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
                messages: {
                    /// `CANCELLED`.
                    CANCELLED = ("cancelled",
                        "The call was cancelled before it finished. Retry it if it is still needed, under a new invocationId if it had one.",
                        arguments: "The call was cancelled before it finished. Repeat the same call if it is still needed.");
                },
                examples: [
                    AgentSurfaceError::cancelled(),
                ],
                decisions: [
                    row(R::Yes, Retry, Fresh, NOT_CONVERGING,
                        "Nothing ran, or the call was a read or idempotent: repeating cannot double an effect."),
                ],
                wire: [
                    (R::Yes, K::AfterDelay, Zero, Reliability, "retryable_transient_error"),
                ],
            }

            /// The handler failed, its output was rejected, or a downstream failure could not be mapped.
            ExecutionFailed = "EXECUTION_FAILED" {
                matrix: {
                    meaning: "The handler failed, its output was rejected, or a downstream failure could not be mapped to a more precise code.",
                    when: "The handler or the precondition fails or panics; a precondition that awaits does not answer within the call's time budget (transport, transient, before the handler runs); the output fails validation, serialization or the size cap; a post-condition fails (verification-failed); the outcome cannot be proven (outcome-unknown: the post-condition check errs, panics or cannot decide, or a non-idempotent, non-read capability times out, is unmounted mid-flight, or meets a host error in its handler's cause chain that could follow an effect: an upstream refusal, a gateway error or a timeout); the idempotency store fails at admission (store-unavailable, transient: sent again under the same invocation id), the rate limiter's store at rate, or the confirmation store at confirmation (transient); strict audit cannot record that a call starts (audit-unavailable, transient, before the handler runs); or the confirmation gate cannot decide (a panicking summary or gate, a gated capability without a confirmation engine).",
                    phases: &[Admission, Input, Rate, Confirmation, Execute, Output],
                    handler_may_return: true,
                    layer: Rule {
                        default: Layer::Execution,
                        conditions: &[Condition { field: "reason", equals: DetailValue::Str("transport"), then: Layer::Transport }],
                    },
                    retry: Rule {
                        default: Retry::No,
                        conditions: &[
                            Condition { field: "transient", equals: DetailValue::Bool(true), then: Retry::AfterDelay },
                            // Always transient: nothing was admitted.
                            Condition { field: "reason", equals: DetailValue::Str("store-unavailable"), then: Retry::AfterDelay },
                        ],
                    },
                    cacheable: true,
                    details: typed::<ExecutionFailedDetails>(&["reason", "transient", "retryAfterMs"]),
                    log_only: &["causeChain", "panicMessage", "outputSchemaErrors"],
                    log_level: fixed(LogLevel::Warn),
                    adapter_duty: "Carry the sanitized message; never the cause. A store-unavailable answer is never kept: it is retried under the same invocation id (an earlier attempt's result, if any, is then returned), unlike every other answer of this code.",
                    http_status: Rule {
                        default: 500,
                        conditions: &[
                            Condition { field: "reason", equals: DetailValue::Str("transport"), then: 502 },
                            Condition { field: "reason", equals: DetailValue::Str("audit-unavailable"), then: 503 },
                            Condition { field: "reason", equals: DetailValue::Str("store-unavailable"), then: 503 },
                        ],
                    },
                    mcp: TOOL_RESULT,
                },
                messages: {
                    /// `EXECUTION_FAILED` / handler-error.
                    HANDLER_ERROR = ("execution-failed.handler-error",
                        "The action failed. Do not retry it as it is; report the failure or take a different approach.");
                    /// `EXECUTION_FAILED` with an author explanation (an error the application made agent-visible);
                    /// slot: `explanation`.
                    HANDLER_ERROR_EXPLAINED = ("execution-failed.explained",
                        "{explanation} Do not retry it as it is; report the failure or take a different approach.");
                    /// `EXECUTION_FAILED` / output-invalid.
                    OUTPUT_INVALID = ("execution-failed.output-invalid",
                        "The action produced a result that failed validation, so it was withheld. Do not retry it as it is; report the failure.");
                    /// `EXECUTION_FAILED` / output-too-large.
                    OUTPUT_TOO_LARGE = ("execution-failed.output-too-large",
                        "The action's result was too large, so it was withheld. Do not retry it as it is; ask for less data if the capability allows it.");
                    /// `EXECUTION_FAILED` / transport, transient; slot: `ms`.
                    TRANSPORT_TRANSIENT = ("execution-failed.transport-transient",
                        "A service behind this action failed temporarily. Wait {ms} ms, then retry, under a new invocationId if the call had one.",
                        arguments: "A service behind this action failed temporarily; it may work again in {ms} ms. Do not repeat the call at once: do other steps first, or tell the user to try again later.");
                    /// `EXECUTION_FAILED` / audit-unavailable (always transient); slot: `ms`.
                    AUDIT_UNAVAILABLE = ("execution-failed.audit-unavailable",
                        "The action did not run because its audit record could not be written. Wait {ms} ms, then retry, under a new invocationId if the call had one.",
                        arguments: "The action did not run because its audit record could not be written; it may work in {ms} ms. Do not repeat the call at once: do other steps first, or tell the user to try again later.");
                    /// `EXECUTION_FAILED` / store-unavailable (always transient); slot: `ms`.
                    STORE_UNAVAILABLE = ("execution-failed.store-unavailable",
                        "This request was not run: its record could not be checked. Wait {ms} ms, then send it again under the same invocationId if it had one, never a new one.",
                        arguments: "This call was not run because its record could not be checked; it may work in {ms} ms. Do not repeat it at once: do other steps first, or tell the user to try again later.");
                    /// `EXECUTION_FAILED` / transport, not transient.
                    TRANSPORT = ("execution-failed.transport",
                        "A service behind this action failed. Do not retry it as it is; report the failure.");
                    /// `EXECUTION_FAILED` / verification-failed.
                    VERIFICATION_FAILED = ("execution-failed.verification-failed",
                        "The action ran, but its expected result is not there. Observe the current state before doing anything else; do not repeat the action blindly.");
                    /// `EXECUTION_FAILED` / outcome-unknown.
                    OUTCOME_UNKNOWN = ("execution-failed.outcome-unknown",
                        "The action may or may not have taken effect. Do not repeat it; check the current state or ask the user whether it happened.");
                    /// `EXECUTION_FAILED` / outcome-unknown, for a call without an invocation id (nothing was
                    /// recorded: a repeat would run the action again).
                    OUTCOME_UNKNOWN_UNTRACKED = ("execution-failed.outcome-unknown-untracked",
                        "The action may or may not have taken effect. Do not repeat it until the user or the current state shows it did not happen.");
                },
                examples: [
                    AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError),
                    AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputInvalid),
                    AgentSurfaceError::execution_failed(ExecutionFailedReason::OutputTooLarge),
                    AgentSurfaceError::execution_failed(ExecutionFailedReason::Transport),
                    AgentSurfaceError::transient(Duration::from_millis(2000)),
                    AgentSurfaceError::execution_failed(ExecutionFailedReason::VerificationFailed),
                    AgentSurfaceError::outcome_unknown(),
                    AgentSurfaceError::audit_unavailable(Duration::from_millis(1000)),
                    AgentSurfaceError::store_unavailable(Duration::from_millis(1000)),
                ],
                decisions: [
                    waiting(when("reason", DetailValue::Str("store-unavailable"), row(R::AfterDelay, Wait, Same, DELAY_TOO_LONG,
                        "The call was not admitted: the same id after the delay, which returns an earlier attempt's result if there was one."))),
                    // Before the transient row: an unknown outcome also marked transient (which no
                    // conforming server sends) may have taken effect, and is verified, never retried.
                    when("reason", DetailValue::Str("outcome-unknown"), row(R::No, Verify, Fresh, UNVERIFIED,
                        "A call with an effect was interrupted after its handler started: verify, never repeat blindly.")),
                    waiting(when("transient", DetailValue::Bool(true), row(R::AfterDelay, Wait, Fresh, DELAY_TOO_LONG,
                        "Nothing took effect; the dependency may recover after the delay."))),
                    when(NOT_PROCESSED_FIELD, DetailValue::Bool(true), row(R::No, RetryOnce, Fresh, NOT_CONVERGING,
                        "The runtime stated the handler never started: one repeat cannot double an effect; the same failure again goes to the model.")),
                    row(R::No, Stop, IdRule::None, RETURNED,
                        "The capability failed; repeating would fail the same way."),
                ],
                wire: [
                    (R::No, K::No, NoDelay, Capability, "execution_failed"),
                    (R::AfterDelay, K::AfterDelay, FromDetails, Reliability, "retryable_transient_error"),
                ],
            }
        }
    };
    // The grammar of a block, in one place: every column, in order.
    (@select $column:ident $then:ident; $(
        $(#[doc = $doc:literal])*
        $code:ident = $name:literal {
            matrix: $matrix:tt,
            messages: $messages:tt,
            examples: $examples:tt,
            decisions: $decisions:tt,
            wire: $wire:tt $(,)?
        }
    )*) => {
        $crate::codes::code_table! { @pick $column $then;
            $( [$(#[doc = $doc])* $code = $name] $code $matrix $messages $examples $decisions $wire )*
        }
    };
    (@pick variants $then:ident; $( [$($variant:tt)*] $code:ident $m:tt $t:tt $e:tt $d:tt $w:tt )*) => {
        $then! { $( $($variant)*; )* }
    };
    (@pick matrix $then:ident; $( [$($variant:tt)*] $code:ident $m:tt $t:tt $e:tt $d:tt $w:tt )*) => {
        $then! { $( $code $m )* }
    };
    (@pick messages $then:ident; $( [$($variant:tt)*] $code:ident $m:tt $t:tt $e:tt $d:tt $w:tt )*) => {
        $then! { $( $code $t )* }
    };
    (@pick examples $then:ident; $( [$($variant:tt)*] $code:ident $m:tt $t:tt $e:tt $d:tt $w:tt )*) => {
        $then! { $( $code $e )* }
    };
    (@pick decisions $then:ident; $( [$($variant:tt)*] $code:ident $m:tt $t:tt $e:tt $d:tt $w:tt )*) => {
        $then! { $( $code $d )* }
    };
    (@pick wire $then:ident; $( [$($variant:tt)*] $code:ident $m:tt $t:tt $e:tt $d:tt $w:tt )*) => {
        $then! { $( $code $w )* }
    };
}

pub(crate) use code_table;
