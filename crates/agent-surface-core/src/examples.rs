//! The example payloads of each code: what `spec/error-matrix.json` shows and what the adapters'
//! and the conformance kit's tests run through every encoder.
//!
//! The examples are built with the constructors of [`AgentSurfaceError`], which derive `retry`
//! from the matrix; so they sit above the table ([`crate::matrix`]), which knows nothing of them.
//! Every code has examples (the `match` below is exhaustive), one per value of its retry rule at
//! least (checked by a test here and by `cargo xtask verify-matrix`).

use crate::code::{Effect, ErrorCode};
use crate::details::*;
use crate::error::AgentSurfaceError;
use crate::payload::ErrorPayload;
use crate::text::SafeText;
use crate::time::Timestamp;

/// The example payloads of `code`, one per retry outcome of its retry rule at least.
///
/// ```
/// use agent_surface_core::{examples, ErrorCode, Retry};
/// let timeouts = examples::of(ErrorCode::Timeout);
/// assert!(timeouts.iter().all(|p| p.retry() == Retry::Yes));
/// let cancellations = examples::of(ErrorCode::Cancelled);
/// assert!(cancellations.iter().all(|p| p.retry() == Retry::Yes));
/// ```
pub fn of(code: ErrorCode) -> Vec<ErrorPayload> {
    match code {
        ErrorCode::CapabilityNotFound => vec![AgentSurfaceError::capability_not_found().into_payload()],
        ErrorCode::CapabilityNotAvailable => {
            vec![AgentSurfaceError::capability_not_available("Sign in to a store first.").into_payload()]
        }
        ErrorCode::AmbiguousInstance => {
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
        }
        ErrorCode::ComponentUnmounted => {
            vec![
                AgentSurfaceError::component_unmounted(UnmountPhase::Resolve).into_payload(),
                AgentSurfaceError::component_unmounted(UnmountPhase::MidFlight).into_payload(),
            ]
        }
        ErrorCode::StaleCapability => {
            vec![
                AgentSurfaceError::stale_capability(StaleReason::RegistrationReplaced, Some("r-9".into()))
                    .into_payload(),
                AgentSurfaceError::stale_capability(StaleReason::SurfaceVersionMismatch, None).into_payload(),
                AgentSurfaceError::stale_tool_version("3f1c0a9b2d4e6f8071a2").into_payload(),
            ]
        }
        ErrorCode::InvocationConflict => vec![
            AgentSurfaceError::invocation_conflict().into_payload(),
            AgentSurfaceError::natural_key_conflict().into_payload(),
        ],
        ErrorCode::InvalidInput => {
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
        }
        ErrorCode::NotAuthenticated => vec![AgentSurfaceError::not_authenticated().into_payload()],
        ErrorCode::NotAuthorized => {
            vec![
                AgentSurfaceError::not_authorized(Origin::Client).into_payload(),
                AgentSurfaceError::not_authorized(Origin::Server).into_payload(),
            ]
        }
        ErrorCode::PreconditionFailed => {
            vec![
                AgentSurfaceError::precondition_failed("Shipped orders cannot be cancelled.").into_payload(),
                AgentSurfaceError::binding_failed().into_payload(),
                AgentSurfaceError::client_input_required().into_payload(),
            ]
        }
        ErrorCode::ConfirmationRequired => {
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
        }
        ErrorCode::ConfirmationInvalid => [
            ConfirmationInvalidReason::Expired,
            ConfirmationInvalidReason::Denied,
            ConfirmationInvalidReason::Consumed,
            ConfirmationInvalidReason::Mismatch,
        ]
        .into_iter()
        .map(|r| AgentSurfaceError::confirmation_invalid(r).into_payload())
        .collect(),
        ErrorCode::RateLimited => {
            vec![
                AgentSurfaceError::rate_limited(RateLimitReason::Rate, std::time::Duration::from_millis(1200))
                    .into_payload(),
                AgentSurfaceError::rate_limited(RateLimitReason::QueueFull, std::time::Duration::from_millis(300))
                    .into_payload(),
            ]
        }
        ErrorCode::Timeout => {
            vec![
                AgentSurfaceError::timeout(std::time::Duration::from_secs(5), true).into_payload(),
                AgentSurfaceError::timeout(std::time::Duration::from_secs(5), false).into_payload(),
            ]
        }
        ErrorCode::Cancelled => vec![AgentSurfaceError::cancelled().into_payload()],
        ErrorCode::ExecutionFailed => {
            use ExecutionFailedReason as R;
            vec![
                AgentSurfaceError::execution_failed(R::HandlerError).into_payload(),
                AgentSurfaceError::execution_failed(R::OutputInvalid).into_payload(),
                AgentSurfaceError::execution_failed(R::OutputTooLarge).into_payload(),
                AgentSurfaceError::execution_failed(R::Transport).into_payload(),
                AgentSurfaceError::transient(std::time::Duration::from_millis(2000)).into_payload(),
                AgentSurfaceError::execution_failed(R::VerificationFailed).into_payload(),
                AgentSurfaceError::outcome_unknown().into_payload(),
                AgentSurfaceError::audit_unavailable(std::time::Duration::from_millis(1000)).into_payload(),
            ]
        }
    }
}

/// The example payloads of every code, in [`ErrorCode::ALL`] order.
pub fn all() -> impl Iterator<Item = ErrorPayload> {
    ErrorCode::ALL.into_iter().flat_map(of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::MATRIX;

    #[test]
    fn every_retry_outcome_has_an_example() {
        for s in &MATRIX {
            let examples = of(s.code);
            for r in s.retry.values() {
                assert!(examples.iter().any(|p| p.retry() == r), "{}: no example with retry {r}", s.code);
            }
            for p in &examples {
                assert_eq!(p.code(), s.code);
            }
        }
    }
}
