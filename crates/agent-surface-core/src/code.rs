//! The closed vocabularies: error codes, retry categories, pipeline phases and failure layers.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The enum, [`ErrorCode::ALL`] and [`ErrorCode::as_str`], from the table's `variants` column
/// (`codes.rs`): each variant's doc comment and wire name are written there once.
macro_rules! error_codes {
    ($( $(#[doc = $doc:literal])* $code:ident = $wire:literal; )*) => {
        /// The sixteen agent-facing error codes.
        ///
        /// This enum is **closed on purpose** and is therefore not `#[non_exhaustive]`: agent loops and
        /// adapters match on it exhaustively, and adding a code is a change to the specification
        /// (`spec/error-model.md`) and to the matrix, never a local decision. New situations are expressed
        /// as a `details.reason` of an existing code.
        ///
        /// Serialized as the SCREAMING_SNAKE_CASE names of the specification:
        ///
        /// ```
        /// use agent_surface_core::ErrorCode;
        ///
        /// let json = serde_json::to_string(&ErrorCode::StaleCapability).unwrap();
        /// assert_eq!(json, r#""STALE_CAPABILITY""#);
        /// assert_eq!(ErrorCode::StaleCapability.as_str(), "STALE_CAPABILITY");
        /// ```
        #[expect(
            clippy::exhaustive_enums,
            reason = "the sixteen codes are closed: a new one changes the error model, and exhaustive matches are how the compiler finds every place that must handle it"
        )]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        pub enum ErrorCode {
            $( $(#[doc = $doc])* #[serde(rename = $wire)] $code, )*
        }

        impl ErrorCode {
            /// Every code, in specification order.
            pub const ALL: [ErrorCode; [$($wire),*].len()] = [$(ErrorCode::$code),*];

            /// The wire name of the code.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( ErrorCode::$code => $wire, )*
                }
            }
        }
    };
}

crate::codes::code_table!(variants => error_codes);

impl ErrorCode {
    /// Parses a wire name; `None` for anything outside the closed set.
    ///
    /// ```
    /// use agent_surface_core::ErrorCode;
    /// assert_eq!(ErrorCode::from_wire("TIMEOUT"), Some(ErrorCode::Timeout));
    /// assert_eq!(ErrorCode::from_wire("timeout"), None);
    /// ```
    pub fn from_wire(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an agent loop may do next, mechanically. Six categories, closed.
///
/// ```
/// use agent_surface_core::Retry;
/// assert_eq!(serde_json::to_string(&Retry::AfterRefresh).unwrap(), r#""after-refresh""#);
/// assert!(Retry::AfterDelay.permits_retry());
/// assert!(!Retry::No.permits_retry());
/// ```
#[expect(clippy::exhaustive_enums, reason = "the six retry categories are closed: an agent loop must handle every one")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Retry {
    /// Do not retry this request as it is.
    No,
    /// Safe to retry unchanged (the idempotency window applies; a fresh invocation id where the
    /// matrix says so).
    Yes,
    /// Re-snapshot the surface, re-resolve the target, then retry.
    AfterRefresh,
    /// Retry after `details.retryAfterMs`.
    AfterDelay,
    /// Retry with the `confirmationId` once the confirmation is approved.
    WithConfirmation,
    /// Fix the input according to `details`, then retry.
    WithChanges,
}

impl Retry {
    /// Every category, in specification order.
    pub const ALL: [Retry; 6] =
        [Retry::No, Retry::Yes, Retry::AfterRefresh, Retry::AfterDelay, Retry::WithConfirmation, Retry::WithChanges];

    /// The wire name of the category.
    pub const fn as_str(self) -> &'static str {
        match self {
            Retry::No => "no",
            Retry::Yes => "yes",
            Retry::AfterRefresh => "after-refresh",
            Retry::AfterDelay => "after-delay",
            Retry::WithConfirmation => "with-confirmation",
            Retry::WithChanges => "with-changes",
        }
    }

    /// Whether some retry is allowed at all (possibly after a refresh, a delay, a confirmation or
    /// a change of input). Only [`Retry::No`] forbids it.
    pub const fn permits_retry(self) -> bool {
        !matches!(self, Retry::No)
    }

    /// Whether the caller may retry the *same* request without changing anything first
    /// ([`Retry::Yes`] or [`Retry::AfterDelay`]).
    pub const fn permits_unchanged_retry(self) -> bool {
        matches!(self, Retry::Yes | Retry::AfterDelay)
    }
}

impl fmt::Display for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phases of the invocation pipeline, in the order they run.
///
/// Every code's producing phase(s) are recorded in the matrix.
#[expect(
    clippy::exhaustive_enums,
    reason = "the pipeline's phases are fixed by the spec; the matrix records each code's phases, and matches over them must see a new one"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// 1. Admission and idempotency (fingerprint, join or replay, conflict).
    Admission,
    /// 2. Resolution of the capability and its target registration.
    Resolve,
    /// 3. Availability (enabled / disabled with a reason).
    Availability,
    /// 4. Authority (authentication and authorization policies).
    Authority,
    /// 5. Input validation, bound fields and preconditions.
    Input,
    /// 6. Rate limits and the action queue.
    Rate,
    /// 7. Confirmation gates.
    Confirmation,
    /// 8. Execution of the handler under its time budget and cancellation.
    Execute,
    /// 9. Output validation and size caps.
    Output,
}

impl Phase {
    /// Every phase, in pipeline order.
    pub const ALL: [Phase; 9] = [
        Phase::Admission,
        Phase::Resolve,
        Phase::Availability,
        Phase::Authority,
        Phase::Input,
        Phase::Rate,
        Phase::Confirmation,
        Phase::Execute,
        Phase::Output,
    ];

    /// Whether the phase runs before the handler starts: a call stopped in it did nothing it
    /// asked for (its payload says `notProcessed`, `spec/error-model.md`, *Not processed*),
    /// except where the runtime knows otherwise (an unknown outcome met at admission: an
    /// earlier leader of the same record may have run).
    ///
    /// ```
    /// use agent_surface_core::Phase;
    /// assert!(Phase::Confirmation.is_before_handler());
    /// assert!(!Phase::Execute.is_before_handler());
    /// ```
    pub const fn is_before_handler(self) -> bool {
        !matches!(self, Phase::Execute | Phase::Output)
    }

    /// The wire name of the phase.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Admission => "admission",
            Phase::Resolve => "resolve",
            Phase::Availability => "availability",
            Phase::Authority => "authority",
            Phase::Input => "input",
            Phase::Rate => "rate",
            Phase::Confirmation => "confirmation",
            Phase::Execute => "execute",
            Phase::Output => "output",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failure layer: who has to act to get past the failure.
#[expect(clippy::exhaustive_enums, reason = "closed with the matrix: every code's layer is one of these")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// The deployment or the code is wrong (definition errors); no request can succeed.
    Configuration,
    /// Caller and surface disagree about the exchange itself (stale tokens, reused ids).
    Protocol,
    /// The request reached the capability and was rejected or failed there.
    Execution,
    /// The channel to a downstream system failed.
    Transport,
}

impl Layer {
    /// The wire name of the layer.
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::Configuration => "configuration",
            Layer::Protocol => "protocol",
            Layer::Execution => "execution",
            Layer::Transport => "transport",
        }
    }
}

/// The level of the operator event that reports a call ending with a code (the operator
/// channel, `tracing`): expected refusals low, failures of the service itself high.
///
/// The matrix gives each code its level ([`crate::matrix::CodeSpec::log_level`]); the runtime
/// raises it to [`LogLevel::Error`] when the service itself is at fault — user code panicked, a
/// store failed — whatever the code.
#[expect(clippy::exhaustive_enums, reason = "closed with the matrix's logLevel column")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    /// Routine: the agent is expected to meet it and recover on its own.
    Debug,
    /// An expected refusal an operator may want to count: bad input, a denial, a rate limit.
    Info,
    /// A failure worth a look: the handler failed, a post-condition did not hold, a call ran out
    /// of time.
    Warn,
    /// The service itself failed: a panic, a store or audit failure.
    Error,
}

impl LogLevel {
    /// The level's name, as `tracing` spells it in lower case.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// The declared side effect of a capability.
#[expect(
    clippy::exhaustive_enums,
    reason = "the declared effects are closed: retries, confirmation and staleness rules are decided per effect"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Reads state; no side effects.
    Read,
    /// Changes state in a way that can be undone or repeated safely by the application.
    Write,
    /// Changes state irreversibly (delete, cancel, refund).
    Destructive,
    /// Causes an effect outside the system (sends mail, charges a card, calls a third party).
    External,
}

impl Effect {
    /// The wire name of the effect.
    pub const fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::Destructive => "destructive",
            Effect::External => "external",
        }
    }

    /// Whether calls with this effect must carry the surface version they were planned against
    /// when they carry one at all (destructive and external effects).
    pub const fn requires_fresh_surface(self) -> bool {
        matches!(self, Effect::Destructive | Effect::External)
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
