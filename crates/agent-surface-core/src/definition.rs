//! Registration-time defects: [`DefinitionError`]. Always returned to the programmer, never
//! agent-facing.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The six registration-time codes.
#[expect(clippy::exhaustive_enums, reason = "the six registration-time codes are closed, like the invocation codes")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DefinitionErrorCode {
    /// A type, capability or instance id breaks the id grammar.
    InvalidId,
    /// A missing or empty description, an unknown field, meta that is not plain JSON, or a name a
    /// policy, quota, confirmation rule or binding targets that is not defined.
    InvalidDefinition,
    /// A JSON Schema outside the portable subset, too deep, or too large.
    UnsupportedSchema,
    /// A view action declaring a server effect, or a procedure binding without an executor.
    PlaneViolation,
    /// Two capabilities with the same name in one definition.
    DuplicateCapability,
    /// A description, meta object or definition over its size cap.
    LimitExceeded,
}

impl DefinitionErrorCode {
    /// Every code, in specification order.
    pub const ALL: [DefinitionErrorCode; 6] = [
        DefinitionErrorCode::InvalidId,
        DefinitionErrorCode::InvalidDefinition,
        DefinitionErrorCode::UnsupportedSchema,
        DefinitionErrorCode::PlaneViolation,
        DefinitionErrorCode::DuplicateCapability,
        DefinitionErrorCode::LimitExceeded,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            DefinitionErrorCode::InvalidId => "INVALID_ID",
            DefinitionErrorCode::InvalidDefinition => "INVALID_DEFINITION",
            DefinitionErrorCode::UnsupportedSchema => "UNSUPPORTED_SCHEMA",
            DefinitionErrorCode::PlaneViolation => "PLANE_VIOLATION",
            DefinitionErrorCode::DuplicateCapability => "DUPLICATE_CAPABILITY",
            DefinitionErrorCode::LimitExceeded => "LIMIT_EXCEEDED",
        }
    }
}

impl fmt::Display for DefinitionErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A structural defect found when a capability type is defined. A code bug, never an agent's
/// doing: returned to the programmer as `Err`, with a message that names the offending item.
///
/// ```
/// use agent_surface_core::{DefinitionError, DefinitionErrorCode};
///
/// let e = DefinitionError::new(DefinitionErrorCode::InvalidId, "orders.Cancel", "ids are lowercase");
/// assert_eq!(e.code(), DefinitionErrorCode::InvalidId);
/// assert_eq!(e.to_string(), "INVALID_ID at `orders.Cancel`: ids are lowercase");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} at `{location}`: {problem}")]
pub struct DefinitionError {
    code: DefinitionErrorCode,
    location: String,
    problem: String,
}

impl DefinitionError {
    /// A defect of kind `code` at `location` (a type, capability or field path).
    pub fn new(code: DefinitionErrorCode, location: impl Into<String>, problem: impl Into<String>) -> Self {
        DefinitionError { code, location: location.into(), problem: problem.into() }
    }

    /// The code.
    pub fn code(&self) -> DefinitionErrorCode {
        self.code
    }

    /// Where the defect is.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// What is wrong, for the programmer.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}
