//! The sixteen codes, each written once: one block per code holds every fact about it that core
//! keeps, and the modules that need a fact read their column of this table.
//!
//! The table is a declarative macro, `code_table!`: `code_table!(COLUMN => consumer)` calls the
//! consumer macro with one `Code column-value` pair per code, in specification order (the order
//! of `ErrorCode::ALL` and of the enum's discriminants). A block reads
//! `Variant = "WIRE_NAME" { column: value, … }` after the variant's doc comment, and its columns
//! are, in this order:
//!
//! - `variants` (code.rs): the variant, its doc comment and its wire name (every block gives them);
//!
//! A value is tokens, not items: each column is expanded in the module that reads it and resolves
//! its names there, so this file imports nothing and names no module (the import check stays
//! quiet: a consumer depends on this file, never the reverse), and each column keeps to the
//! vocabulary of its module — the matrix row sees no payloads, the examples see the constructors.
//! A block missing a column, or with one out of order, fails to compile (no arm of the macro
//! matches), and so does a variant without its column's value wherever a consumer matches
//! exhaustively.
//!
//! A new code is one block here, plus its `details` struct (`details.rs`) and its constructor
//! (`error.rs`) where it has typed details or a typed constructor.

/// The table of codes: see the module's docs.
macro_rules! code_table {
    ($column:ident => $then:ident) => {
        $crate::codes::code_table! { @select $column $then;
            /// The capability does not exist in this consumer's surface (or is hidden from it).
            CapabilityNotFound = "CAPABILITY_NOT_FOUND" {}
            /// The capability exists and is visible but is currently disabled.
            CapabilityNotAvailable = "CAPABILITY_NOT_AVAILABLE" {}
            /// More than one live instance matches and none was named.
            AmbiguousInstance = "AMBIGUOUS_INSTANCE" {}
            /// The target registration is gone (tombstone hit) or was unmounted mid-flight.
            ComponentUnmounted = "COMPONENT_UNMOUNTED" {}
            /// The call references a superseded registration, surface or surface version.
            StaleCapability = "STALE_CAPABILITY" {}
            /// The invocation id was already used by this consumer for a different request.
            InvocationConflict = "INVOCATION_CONFLICT" {}
            /// The input does not satisfy the schema, or a bound field was supplied.
            InvalidInput = "INVALID_INPUT" {}
            /// No authenticated identity where one is required.
            NotAuthenticated = "NOT_AUTHENTICATED" {}
            /// Authenticated but not permitted.
            NotAuthorized = "NOT_AUTHORIZED" {}
            /// Schema-valid input that the current state rejects, or a binding that failed to evaluate.
            PreconditionFailed = "PRECONDITION_FAILED" {}
            /// A user approval gate is active; not a failure.
            ConfirmationRequired = "CONFIRMATION_REQUIRED" {}
            /// The confirmation evidence was rejected.
            ConfirmationInvalid = "CONFIRMATION_INVALID" {}
            /// An advisory rate limit was hit or the action queue is full.
            RateLimited = "RATE_LIMITED" {}
            /// The handler exceeded its time budget; side effects may or may not have happened.
            Timeout = "TIMEOUT" {}
            /// The host cancelled the call or the registry was disposed.
            Cancelled = "CANCELLED" {}
            /// The handler failed, its output was rejected, or a downstream failure could not be mapped.
            ExecutionFailed = "EXECUTION_FAILED" {}
        }
    };
    (@select variants $then:ident; $( $(#[doc = $doc:literal])* $code:ident = $wire:literal {} )*) => {
        $then! { $( $(#[doc = $doc])* $code = $wire; )* }
    };
}

pub(crate) use code_table;
