//! Retry rules: derived from the matrix, never chosen freely.

use std::time::Duration;

use agent_surface_core::details::*;
use agent_surface_core::{AgentSurfaceError, ErrorCode, Retry, matrix};

#[track_caller]
fn check(err: AgentSurfaceError, expected: Retry) {
    assert_eq!(err.payload().retry(), expected, "{:?}", err.payload());
}

#[test]
fn conditional_rules() {
    check(AgentSurfaceError::timeout(Duration::from_secs(1), true), Retry::Yes);
    // Only a read or an idempotent capability gets TIMEOUT: `idempotent` does not change the
    // category (a read that is not declared idempotent has no effect to double).
    check(AgentSurfaceError::timeout(Duration::from_secs(1), false), Retry::Yes);

    check(AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Expired), Retry::WithConfirmation);
    check(AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Denied), Retry::No);
    check(AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Consumed), Retry::No);
    check(AgentSurfaceError::confirmation_invalid(ConfirmationInvalidReason::Mismatch), Retry::No);

    check(AgentSurfaceError::execution_failed(ExecutionFailedReason::HandlerError), Retry::No);
    check(AgentSurfaceError::execution_failed(ExecutionFailedReason::Transport), Retry::No);
    check(AgentSurfaceError::execution_failed(ExecutionFailedReason::OutcomeUnknown), Retry::No);
    check(AgentSurfaceError::transient(Duration::from_millis(10)), Retry::AfterDelay);

    check(AgentSurfaceError::precondition_failed("Out of stock."), Retry::WithChanges);
    check(AgentSurfaceError::binding_failed(), Retry::AfterRefresh);
    // An author cannot pick a reason that flips the retry without meaning it: only the reserved
    // `binding-failed` does.
    check(
        AgentSurfaceError::precondition_failed_with(
            "Out of stock.",
            PreconditionDetails { reason: Some("out-of-stock".into()), ..Default::default() },
        ),
        Retry::WithChanges,
    );
}

#[test]
fn fixed_rules() {
    check(AgentSurfaceError::capability_not_found(), Retry::AfterRefresh);
    check(AgentSurfaceError::capability_not_available("Closed."), Retry::AfterRefresh);
    check(AgentSurfaceError::ambiguous_instance(vec![]), Retry::WithChanges);
    check(AgentSurfaceError::component_unmounted(UnmountPhase::Resolve), Retry::AfterRefresh);
    check(AgentSurfaceError::stale_capability(StaleReason::SurfaceVersionMismatch, None), Retry::AfterRefresh);
    check(AgentSurfaceError::invocation_conflict(), Retry::WithChanges);
    check(AgentSurfaceError::invalid_input(vec![], None), Retry::WithChanges);
    check(AgentSurfaceError::not_authenticated(), Retry::No);
    check(AgentSurfaceError::not_authorized(Origin::Server), Retry::No);
    check(AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::ZERO), Retry::AfterDelay);
    check(AgentSurfaceError::cancelled(), Retry::Yes);
}

#[test]
fn every_constructor_agrees_with_the_matrix() {
    for row in &matrix::MATRIX {
        for p in agent_surface_core::examples::of(row.code) {
            assert_eq!(p.retry(), matrix::derive_retry(row.code, p.details()), "{}", row.code);
        }
    }
    assert!(!ErrorCode::InvocationConflict.is_cacheable());
    assert!(!ErrorCode::ConfirmationRequired.is_cacheable());
    assert!(!ErrorCode::RateLimited.is_cacheable());
}

#[test]
fn retry_after_is_read_from_details() {
    let p = AgentSurfaceError::rate_limited(RateLimitReason::Rate, Duration::from_millis(1500)).into_payload();
    assert_eq!(p.retry_after(), Some(Duration::from_millis(1500)));
    let p = AgentSurfaceError::transient(Duration::from_millis(40)).into_payload();
    assert_eq!(p.retry_after(), Some(Duration::from_millis(40)));
    assert_eq!(AgentSurfaceError::cancelled().payload().retry_after(), None);
}
